"""The store's side of the shared redaction policy: events redacted and capped before any write.

History, its spill files and its dead-letter file hold what the audit trail
holds: the same :class:`onlooker.plugins.audit.Redactor` (its default
policy, or the one given to the plugin) runs over every event before it is
written anywhere, and strings longer than ``max_value_chars`` are cut with
the audit trail's marker (``…[truncated N chars]``).

A batch goes through the redactor in one call: the values of every event
(its fields but the envelope, as the trail redacts them) in one list. The
redactor hands back the very list when nothing changed, the common case,
and walks the whole list again when it learned a secret on the way, so a
secret learned from one event (a value under a secret key) is scrubbed from
every event of the batch, before it or after it. Only the events whose
values changed are rebuilt. Each event is then serialized once
(:class:`~._rows.Stored`), for the database and the spill files alike.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final, get_args

from pydantic import BaseModel

from onlooker import ExecutionEvent, parse_event
from onlooker.plugins.audit import Redactor
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

    def prepare(self, batch: Sequence[ExecutionEvent], dead: DeadLetters) -> list[Stored]:
        """The batch redacted, capped and serialized, in order.

        An event that cannot be redacted goes to ``dead`` as its envelope
        alone; one that cannot be serialized or capped, redacted and whole.
        """
        clean: list[ExecutionEvent | None] = list(batch)
        values, owners = _values(batch)
        try:
            with self._lock:
                redacted = self.redactor.redact(values, max_chars=self.max_value_chars)
        except Exception:  # find the event at fault: one at a time
            redacted = values
            for index, original in enumerate(batch):
                try:
                    clean[index] = self.scrub(original)
                except Exception as exc:
                    dead.event(original, f"cannot be redacted: {exc!r}", redacted=False)
                    clean[index] = None
        if redacted is not values:
            self._apply(clean, _changes(values, redacted, owners), dead)
        ready: list[Stored] = []
        for event in clean:
            if event is None:
                continue
            try:
                ready.append(stored(event))
            except Exception as exc:  # it does not serialize, or does not fit once cut
                dead.event(event, describe(exc))
        return ready

    @staticmethod
    def _apply(
        clean: list[ExecutionEvent | None],
        changes: dict[int, dict[str, Any]],
        dead: DeadLetters,
    ) -> None:
        """Rebuild the events whose values the redactor changed."""
        for index, fields in changes.items():
            event = clean[index]
            assert event is not None  # a failed event has no changes
            try:
                clean[index] = _rebuilt(event, fields)
            except Exception as exc:
                dead.event(event, f"cannot be redacted: {exc!r}", redacted=False)
                clean[index] = None

    def scrub(self, event: ExecutionEvent) -> ExecutionEvent:
        """``event`` with secrets redacted and long strings cut; ``event`` itself if unchanged."""
        with self._lock:
            return self._redact(event)

    def _redact(self, event: ExecutionEvent) -> ExecutionEvent:
        values, owners = _values([event])
        redacted = self.redactor.redact(values, max_chars=self.max_value_chars)
        if redacted is values:
            return event
        return _rebuilt(event, _changes(values, redacted, owners)[0])


def _payload_fields(cls: type[ExecutionEvent]) -> tuple[str, ...]:
    return tuple(name for name in cls.model_fields if name not in ENVELOPE_FIELDS)


# Per event kind, the fields redaction reads: all but the envelope.
_PAYLOAD: Final = {
    cls.__name__: _payload_fields(cls) for cls in get_args(get_args(ExecutionEvent)[0])
}


def _values(batch: Sequence[ExecutionEvent]) -> tuple[list[Any], list[tuple[int, str]]]:
    """The batch's payload values in one list (models as their fields), and whose each is."""
    values: list[Any] = []
    owners: list[tuple[int, str]] = []
    for index, event in enumerate(batch):
        fields = event.__dict__
        for name in _PAYLOAD[event.kind]:
            value = fields[name]
            if value is None or type(value) in _PLAIN:
                continue
            values.append(value.__dict__ if isinstance(value, BaseModel) else value)
            owners.append((index, name))
    return values, owners


_PLAIN: Final = frozenset({int, float, bool})  # nothing to redact in them


def _changes(
    values: list[Any], redacted: list[Any], owners: list[tuple[int, str]]
) -> dict[int, dict[str, Any]]:
    """The fields that redaction changed, by event index."""
    changes: dict[int, dict[str, Any]] = {}
    for before, after, (index, name) in zip(values, redacted, owners, strict=True):
        if after is not before:
            changes.setdefault(index, {})[name] = after
    return changes


def _rebuilt(event: ExecutionEvent, changes: dict[str, Any]) -> ExecutionEvent:
    data = event.model_dump(mode="json")
    data.update(changes)
    return parse_event(data)
