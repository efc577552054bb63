"""Events (pydantic models) to the trail's bytes: redacted, truncated, capped.

The audit plugin's thread runs this on every batch. Each event is
serialized by pydantic's own (Rust) serializer, as ``model_dump_json``
would, and once more without the fields redaction never touches (ids,
times, statuses; and the root attribution) for the redactor's screen,
which picks the few events whose fields hold a hint of a secret or a
string over the cap. Only those, and those over the record cap, are
redacted field by field and serialized again (:meth:`EventEncoder.event_json`,
what every event went through before). An event holding a huge string is
not serialized at all first: a quick look at its fields sends it straight
to redaction, which scans only what is kept of the string.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, final

from pydantic import BaseModel

from onlooker import ExecutionEvent

from ._cap import cap_record
from ._encode import (
    fast_json_bytes,
    json_bytes,
    redact_where_needed,
    root_is_plain,
    screen_event,
)
from ._redact import Redactor
from ._secrets import ENVELOPE_FIELDS

__all__ = ["MAX_RECORD_CHARS", "EventEncoder", "json_form"]

MAX_RECORD_CHARS: Final = 65536
"""One event's JSON at most, as the coding-agent hook writes."""


def json_form(model: BaseModel) -> dict[str, Any]:
    """``model.model_dump(mode="json")``, its JSON values (objects, arrays) taken as they are.

    pydantic-core's JSON mode writes a key holding a lone surrogate (an
    undecodable file name) as U+FFFD, so two such keys become one and a
    value is lost. An event's objects and arrays are JSON already (snapshots,
    or validated JSON values): they need no conversion, and the stdlib
    encoder that writes the form escapes the surrogate. Not copied: do not
    mutate the result's members.
    """
    taken: dict[str, Any] = {}
    for name, value in model.__dict__.items():
        if type(value) is dict or type(value) is list:
            taken[name] = value
        elif isinstance(value, BaseModel):
            taken[name] = json_form(value)
    if not taken:
        return model.model_dump(mode="json")
    # Left out of the JSON mode, which refuses (or mangles) a key holding a lone surrogate.
    data = model.model_dump(mode="json", exclude=set(taken))
    return {name: taken[name] if name in taken else data[name] for name in model.__dict__}


@final
class EventEncoder:
    """Turns batches of events into the ``event`` members of their records (UTF-8 JSON)."""

    def __init__(
        self, redactor: Redactor, max_chars: int, max_record_chars: int = MAX_RECORD_CHARS
    ) -> None:
        self.redactor: Final = redactor
        self.max_chars: Final = max_chars
        self.max_record_chars: Final = max_record_chars

    def encode(
        self,
        events: Sequence[ExecutionEvent],
        failed: Callable[[ExecutionEvent, Exception], None],
    ) -> list[bytes]:
        """The events' members, in order; an event that cannot be serialized goes to ``failed``."""
        skip_root = root_is_plain(self.redactor)
        screened = [screen_event(event, self.max_chars, skip_root) for event in events]
        reported: set[int] = set()  # an event redacted again fails once

        def redact(index: int) -> bytes | None:
            try:
                return self.event_json(events[index])
            except Exception as exc:
                if index not in reported:
                    reported.add(index)
                    failed(events[index], exc)
                return None

        redacted = redact_where_needed(self.redactor, screened, self.max_chars, redact)
        out: list[bytes] = []
        for index, event in enumerate(events):
            text = redacted[index] if index in redacted else self._as_is(event, index, redact)
            if text is not None:
                out.append(text)
        return out

    def _as_is(
        self, event: ExecutionEvent, index: int, redact: Callable[[int], bytes | None]
    ) -> bytes | None:
        """An event the screen passed, serialized; redacted after all if it does not fit as is."""
        try:
            text = event.__pydantic_serializer__.to_json(event)
        except ValueError:  # lone surrogates (in a field never redacted): the stdlib escapes them
            return redact(index)
        return text if len(text) <= self.max_record_chars else redact(index)

    def event_json(self, event: ExecutionEvent) -> bytes:
        """One event's JSON (UTF-8), redacted and truncated field by field, capped."""
        redactor = self.redactor
        learned = redactor.learned
        changes = self._changes(event)
        if redactor.learned != learned:  # a secret learned late in the event: once more
            changes = self._changes(event)
        if not changes:
            try:
                text = event.__pydantic_serializer__.to_json(event)
            except ValueError:  # lone surrogates: the stdlib encoder escapes them
                pass
            else:
                if self._fits(text):
                    return text
        data = json_form(event)
        data.update(changes)
        (text,) = fast_json_bytes([data])  # what json writes, by pydantic-core
        if not self._fits(text):  # each value under the cap, but too many of them
            text = json_bytes(cap_record(data, self.max_record_chars))
        return text

    def _fits(self, text: bytes) -> bool:
        """Whether ``text`` holds at most :attr:`max_record_chars` characters."""
        limit = self.max_record_chars
        return len(text) <= limit or len(text.decode("utf-8", "replace")) <= limit

    def _changes(self, event: ExecutionEvent) -> dict[str, Any]:
        redact = self.redactor.redact
        changes: dict[str, Any] = {}
        for name, value in event.__dict__.items():
            if value is None or name in ENVELOPE_FIELDS:
                continue
            plain = value.__dict__ if isinstance(value, BaseModel) else value
            new = redact(plain, max_chars=self.max_chars)
            if new is not plain:
                changes[name] = new
        return changes
