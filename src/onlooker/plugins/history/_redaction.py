"""The store's side of the shared redaction policy: events redacted and capped before any write.

History, its spill files and its dead-letter file hold what the audit trail
holds: the same :class:`onlooker.plugins.audit.Redactor` (its default
policy, or the one given to the plugin) runs over every event before it is
written anywhere, and strings longer than ``max_value_chars`` are cut with
the audit trail's marker (``…[truncated N chars]``).

A batch goes through the audit trail's screen (``plugins/audit/_encode.py``):
each event's JSON without the fields redaction never reads (the envelope,
and the root attribution) tells whether the redactor could change it. Most
events hold no hint of a secret: they are serialized as they are, once. The
few the screen suspects are redacted field by field and rebuilt; an event
holding a string over the cap is not serialized at all first (a quick look
at its fields sends it straight to redaction), and the redactor cuts such a
string before scanning it, so its cost follows what is kept, not the
string's length. When redacting an event teaches the redactor a secret (a
value under a secret key), the whole batch is screened again, so a secret
learned from one event is scrubbed from every event of the batch, before
it or after it. Each event is then serialized once (:class:`~._rows.Stored`),
for the database and the spill files alike.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final, get_args

from pydantic import BaseModel

from onlooker import ExecutionEvent
from onlooker.plugins.audit import Redactor
from onlooker.plugins.audit._encode import (  # the trail's screen: one way to do it
    redact_where_needed,
    root_is_plain,
    screen_event,
)
from onlooker.plugins.audit._redact import ENVELOPE_FIELDS  # the trail's very list

from ._db import describe
from ._deadletters import DeadLetters
from ._rows import Stored, stored

__all__ = ["DEFAULT_MAX_VALUE_CHARS", "Scrubber"]

DEFAULT_MAX_VALUE_CHARS: Final = 20_000
"""History's cap on one stored string (the audit trail keeps 2,000 by default)."""


class Scrubber:
    """Redacts and caps events: the same event back when nothing changes (the common case)."""

    def __init__(self, redactor: Redactor | None, max_value_chars: int) -> None:
        if (
            isinstance(max_value_chars, bool)
            or not isinstance(max_value_chars, int)
            or max_value_chars < 1
        ):
            raise ValueError(f"max_value_chars must be a positive int, not {max_value_chars!r}")
        if redactor is not None and not isinstance(redactor, Redactor):
            raise TypeError(
                f"redactor must be an onlooker.plugins.audit.Redactor, not {redactor!r}"
            )
        self.redactor: Final = redactor if redactor is not None else Redactor()
        self.max_value_chars: Final = max_value_chars
        # The writer thread and write_events() may share one redactor, which learns secrets.
        self._lock = threading.Lock()

    def prepare(self, batch: Sequence[ExecutionEvent], dead: DeadLetters) -> list[Stored]:
        """The batch redacted, capped and serialized, in order.

        An event that cannot be redacted goes to ``dead`` as its envelope
        alone; one that cannot be serialized or capped, redacted and whole.
        """
        suspects = _Suspects(self, batch, dead)
        with self._lock:
            skip_root = root_is_plain(self.redactor)
            screened = [screen_event(e, self.max_value_chars, skip_root) for e in batch]
            redacted = redact_where_needed(
                self.redactor, screened, self.max_value_chars, suspects.store
            )
        ready: list[Stored] = []
        for index, event in enumerate(batch):
            if index in redacted:  # stored already, or set aside
                if redacted[index] is not None:
                    ready.append(suspects.ready[index])
                continue
            try:
                ready.append(stored(event))
            except Exception as exc:  # it does not serialize, or does not fit once cut
                dead.event(event, describe(exc))
        return ready

    def redact(self, event: ExecutionEvent) -> ExecutionEvent:
        """``event`` redacted field by field and capped; ``event`` itself if unchanged.

        The reference, for the events the screen suspects. The caller holds
        the lock (:meth:`prepare` does).
        """
        fields = event.__dict__
        names = [
            name
            for name in _PAYLOAD[event.kind]
            if fields[name] is not None and type(fields[name]) not in _PLAIN
        ]
        values = [_plain(fields[name]) for name in names]
        redacted = self.redactor.redact(values, max_chars=self.max_value_chars)
        if redacted is values:
            return event
        changes = {
            name: after
            for name, before, after in zip(names, values, redacted, strict=True)
            if after is not before
        }
        return _rebuilt(event, changes)


class _Suspects:
    """The events of one batch that the screen sent to the redactor, redacted and stored."""

    def __init__(
        self, scrubber: Scrubber, batch: Sequence[ExecutionEvent], dead: DeadLetters
    ) -> None:
        self.scrubber = scrubber
        self.batch = batch
        self.dead = dead
        self.ready: dict[int, Stored] = {}
        self._reported: set[int] = set()  # an event redacted again (a secret learned) fails once

    def store(self, index: int) -> bytes | None:
        """Event ``index`` redacted (from the event as it came) and stored; ``None``: set aside."""
        event = self.batch[index]
        self.ready.pop(index, None)
        try:
            clean = self.scrubber.redact(event)
        except Exception as exc:
            self._set_aside(index, event, f"cannot be redacted: {exc!r}", redacted=False)
            return None
        try:
            self.ready[index] = stored(clean)
        except Exception as exc:  # it does not serialize, or does not fit once cut
            self._set_aside(index, clean, describe(exc), redacted=True)
            return None
        return _STORED

    def _set_aside(self, index: int, event: ExecutionEvent, reason: str, *, redacted: bool) -> None:
        if index not in self._reported:
            self._reported.add(index)
            self.dead.event(event, reason, redacted=redacted)


_STORED: Final = b""  # what _Suspects.store returns for an event it stored (not None)


def _payload_fields(cls: type[ExecutionEvent]) -> tuple[str, ...]:
    return tuple(name for name in cls.model_fields if name not in ENVELOPE_FIELDS)


# Per event kind, the fields redaction reads: all but the envelope.
_PAYLOAD: Final = {
    cls.__name__: _payload_fields(cls) for cls in get_args(get_args(ExecutionEvent)[0])
}

_PLAIN: Final = frozenset({int, float, bool})  # nothing to redact in them


def _plain(value: Any) -> Any:
    """A field's value as the redactor reads it: a model as its fields."""
    return value.__dict__ if isinstance(value, BaseModel) else value


def _rebuilt(event: ExecutionEvent, changes: dict[str, Any]) -> ExecutionEvent:
    """``event`` with ``changes``, validated again (the unchanged fields as they are)."""
    return type(event).model_validate({**event.__dict__, **changes})
