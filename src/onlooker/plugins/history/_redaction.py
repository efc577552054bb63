"""The store's side of the shared redaction policy: events redacted and capped before any write.

History, its spill files and its dead-letter file hold what the audit trail
holds: the same :class:`onlooker.plugins.audit.Redactor` (its default
policy, or the one given to the plugin) runs over every event before it is
written anywhere, and strings longer than ``max_value_chars`` are cut with
the audit trail's marker (``…[truncated N chars]``).
"""

from __future__ import annotations

import threading
from typing import Any, Final

from pydantic import BaseModel

from onlooker import ExecutionEvent, parse_event
from onlooker.plugins.audit import Redactor
from onlooker.plugins.audit._redact import ENVELOPE_FIELDS  # the trail's very list

__all__ = ["DEFAULT_MAX_VALUE_CHARS", "Scrubber"]

DEFAULT_MAX_VALUE_CHARS: Final = 20_000
"""History's cap on one stored string (the audit trail keeps 2,000 by default)."""


class Scrubber:
    """Redacts and caps events: the same event back when nothing changes (the common case)."""

    def __init__(self, redactor: Redactor | None, max_value_chars: int) -> None:
        if isinstance(max_value_chars, bool) or not isinstance(max_value_chars, int):
            raise ValueError(f"max_value_chars must be a positive int, not {max_value_chars!r}")
        if max_value_chars < 1:
            raise ValueError(f"max_value_chars must be a positive int, not {max_value_chars!r}")
        if redactor is not None and not isinstance(redactor, Redactor):
            raise TypeError(
                f"redactor must be an onlooker.plugins.audit.Redactor, not {redactor!r}"
            )
        self.redactor: Final = redactor if redactor is not None else Redactor()
        self.max_value_chars: Final = max_value_chars
        # The writer thread and write_events() may share one redactor, which learns secrets.
        self._lock = threading.Lock()

    def scrub(self, event: ExecutionEvent) -> ExecutionEvent:
        """``event`` with secrets redacted and long strings cut; ``event`` itself if unchanged."""
        with self._lock:
            learned = self.redactor.learned
            changes = self._changes(event)
            if self.redactor.learned != learned:  # a secret learned late in the event
                changes = self._changes(event)
        if not changes:
            return event
        data = event.model_dump(mode="json")
        data.update(changes)
        return parse_event(data)

    def _changes(self, event: ExecutionEvent) -> dict[str, Any]:
        redact = self.redactor.redact
        changes: dict[str, Any] = {}
        for name, value in event.__dict__.items():
            if value is None or name in ENVELOPE_FIELDS:
                continue
            plain = value.__dict__ if isinstance(value, BaseModel) else value
            new = redact(plain, max_chars=self.max_value_chars)
            if new is not plain:
                changes[name] = new
        return changes
