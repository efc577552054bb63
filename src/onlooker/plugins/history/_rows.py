"""Events to rows: the raw log, and one projection row per entity a batch touches.

A projection row is a dict keyed by column name. Each event fills in the
columns it knows of its entity's row (a tool call's ``ToolCallStarted`` its
``args`` and ``started_at``, its ``ToolCallFinished`` the outcome); a column
no event of the batch named is ``NULL``. The statements and the tuples the
driver gets are derived from the tables in ``_schema.py`` (``_bulk.py``),
so adding a column is one edit there and one line here, in the event that
fills it.

An entity's two events share some columns (its execution, the attribution):
there a known value wins over ``None``, and ``seq`` / ``sort_at`` keep the
smaller, as the database merges rows across batches (``_bulk.py``). The
other columns belong to one event each. Writing the same events twice, or
in any order, gives the same rows.

This is the write path's hot loop, on a thread that shares the GIL with the
execution: each event's JSON is made once (``stored``), its JSON values
once more for their own columns (but a tool call's arguments, often the
largest, which are cut from its event's JSON), and one dict per entity,
nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any, Final, NamedTuple, TypeAlias, assert_never

from pydantic import BaseModel
from pydantic_core import to_json

from onlooker import (
    Attribution,
    ErrorInfo,
    EventValidationError,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionStarted,
    ToolCallFinished,
    ToolCallStarted,
    parse_event,
)
from onlooker._shared import without_surrogates
from onlooker.plugins.audit._encode import json_bytes  # the trail's JSON: surrogates escaped
from onlooker.plugins.audit._events import json_form  # keys with lone surrogates kept
from onlooker.plugins.audit._redact import cap_record  # the trail's record cap, its markers

from ._schema import events

__all__ = [
    "MAX_RECORD_CHARS",
    "LoggedRow",
    "Row",
    "Rows",
    "Stored",
    "as_stored",
    "build_rows",
    "capped",
    "no_surrogate",
    "serialize",
    "stored",
]

MAX_RECORD_CHARS: Final = 262_144
"""The most characters one stored event may take; past it its largest values are cut."""

Row: TypeAlias = dict[str, Any]
"""A projection row: column name -> value (JSON as text, times as the backend stores them)."""

LoggedRow: TypeAlias = tuple[Any, ...]
"""An ``events`` row, in the table's column order: the event's own fields, then ``at``, ``body``."""

_LOGGED: Final = tuple(column.name for column in events.c)
if _LOGGED[-2:] != ("at", "body"):
    raise RuntimeError(f"the events table must end with at, body: {_LOGGED}")
_ENVELOPE: Final = itemgetter(*_LOGGED[:-2])  # the columns named after the event's own fields


class Stored(NamedTuple):
    """An event as the database takes it: redacted and capped already, with its JSON.

    The JSON is made once per event and used for the raw log, the spill file
    and the redaction screen alike.
    """

    event: ExecutionEvent
    body: str


@dataclass(slots=True)
class Rows:
    """The rows of one batch, per table; projection rows keyed by their entity's id."""

    events: list[LoggedRow] = field(default_factory=list)
    executions: dict[str, Row] = field(default_factory=dict)
    tool_calls: dict[tuple[str, str], Row] = field(default_factory=dict)
    """Keyed by (execution, call): a tracked run's ids are unique only within it."""
    interactions: dict[tuple[str, str], Row] = field(default_factory=dict)


def _json(value: Any) -> str | None:
    return None if value is None else _json_text(value)


def _error(error: ErrorInfo | None) -> str | None:
    return None if error is None else _json_text(error)


def _json_text(value: Any, serialize: Callable[[Any], bytes] = to_json) -> str:
    """``value``'s JSON by ``serialize`` (pydantic-core); when it refuses a lone surrogate
    (in a string or a key), json's text, which escapes it (``\\udc80``), as the audit
    trail writes it. ``value`` is a model or a snapshot (JSON already)."""
    try:
        return serialize(value).decode()
    except ValueError:
        plain = json_form(value) if isinstance(value, BaseModel) else value
        return json_bytes(plain).decode()


def no_surrogate(value: Any) -> Any:
    """``value`` as a text column stores it: a lone surrogate (an undecodable name) as U+FFFD;
    the raw event keeps it, escaped."""
    return without_surrogates(value) if type(value) is str else value


def _no_nul(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL; the raw event keeps it, JSON-escaped.
    return value.replace("\x00", "\ufffd") if type(value) is str and "\x00" in value else value


def as_stored(value: str, backend: str) -> str:
    """``value`` as a text column of ``backend`` holds it (a lone surrogate as U+FFFD, on
    PostgreSQL a NUL too): what a lookup by the value given must compare with."""
    text: str = no_surrogate(value)
    return _no_nul(text) if backend == "postgresql" else text


_AT: Final = '"at":"'
_ESCAPED_SURROGATE: Final = "\\ud"
_NUL: Final = "\\u0000"  # how JSON spells NUL


_ARGS: Final = ',"args":'
if tuple(ToolCallStarted.model_fields)[-1] != "args":
    raise RuntimeError("ToolCallStarted's last field must be args (see _args_json)")


def _args_json(body: str, event: ToolCallStarted) -> str:
    """The call's arguments as JSON, cut from the end of its body (its last field).

    Every field written before ``args`` is a string, a number or the
    attribution's, so the first ``,"args":`` of the body is its key: a large
    argument is not serialized a second time for its column.
    """
    start = body.find(_ARGS)
    if start < 0 or body[-1] != "}":  # not the shape expected: serialize them
        return to_json(event.args).decode()
    return body[start + len(_ARGS) : -1]


def _sqlite_time(body: str, at: datetime) -> str:
    """``at`` as SQLAlchemy's SQLite ``DateTime`` stores it (UTC, microseconds)."""
    start = body.find(_AT) + 6
    spelled = body[start : start + 28]
    if spelled[26:] == 'Z"':  # the body spells it already, UTC with microseconds
        return spelled[:26].replace("T", " ")
    return at.astimezone(UTC).isoformat(" ", "microseconds")[:26]


def _known(row: Row, column: str, value: Any) -> None:
    """Set ``column`` if ``value`` is known (not ``None``): a known value never becomes NULL."""
    if value is not None:
        row[column] = value


def _missing(row: Row, column: str, value: Any) -> None:
    """Set ``column`` only if the row does not know it yet (the entity has ended: its end's
    values stay, whichever of its events came first)."""
    if value is not None and row.get(column) is None:
        row[column] = value


def _merge(row: Row) -> Callable[[Row, str, Any], None]:
    """How an event's value merges into the batch's row: the end's values win."""
    return _missing if "status" in row else _known


def _tool_call(rows: Rows, event: ToolCallStarted | ToolCallFinished) -> Row:
    """The batch's row of the event's tool call, with the columns both its events carry."""
    a = event.attribution
    key = (event.execution_id, event.tool_call_id)
    row = rows.tool_calls.get(key)
    if row is None:
        row = rows.tool_calls[key] = {
            "tool_call_id": event.tool_call_id,
            "execution_id": event.execution_id,
            "tool": event.tool,
            "seq": event.seq,
            "phase": a.phase,
            "task_id": a.task_id,
            "intent_id": a.intent_id,
        }
    else:  # the call's other event: the same attribution, unless one of them lacks it
        row["seq"] = min(row["seq"], event.seq)
        merge = _merge(row)
        merge(row, "phase", a.phase)
        merge(row, "task_id", a.task_id)
        merge(row, "intent_id", a.intent_id)
    return row


def _execution(rows: Rows, event: ExecutionStarted | ExecutionFinished, at: Any) -> Row:
    """The batch's row of the execution, with the columns both its events carry."""
    a: Attribution = event.attribution
    row = rows.executions.get(event.execution_id)
    if row is None:
        row = rows.executions[event.execution_id] = {
            "execution_id": event.execution_id,
            "parent_execution_id": a.parent_execution_id,
            "parent_tool_call_id": a.parent_tool_call_id,
            "depth": a.depth,
            "task_id": a.task_id,
            "phase": a.phase,
            "intent_id": a.intent_id,
            "sort_at": at,  # started_at when known, else finished_at: the smaller
        }
    else:
        row["sort_at"] = min(row["sort_at"], at)
        merge = _merge(row)
        merge(row, "parent_execution_id", a.parent_execution_id)
        merge(row, "parent_tool_call_id", a.parent_tool_call_id)
        merge(row, "depth", a.depth)
        merge(row, "task_id", a.task_id)
        merge(row, "phase", a.phase)
        merge(row, "intent_id", a.intent_id)
    return row


def _interaction(rows: Rows, event: InteractionStarted | InteractionResolved) -> Row:
    """The batch's row of the interaction, with the columns both its events carry."""
    key = (event.execution_id, event.interaction_id)
    row = rows.interactions.get(key)
    if row is None:
        row = rows.interactions[key] = {
            "interaction_id": event.interaction_id,
            "execution_id": event.execution_id,
            "seq": event.seq,
        }
    else:
        row["seq"] = min(row["seq"], event.seq)
    return row


def _project(rows: Rows, event: ExecutionEvent, body: str, at: Any) -> Row:
    """Fill in what ``event`` (its JSON: ``body``) says about its entity; returns the entity's row."""
    match event:
        case ToolCallStarted():
            row = _tool_call(rows, event)
            row["args"] = _args_json(body, event)
            row["started_at"] = at
        case ToolCallFinished():
            row = _tool_call(rows, event)
            if "status" in row:  # its second end (a merged or forged trail): the first stays
                return row
            row["status"] = event.status
            row["result"] = _json(event.result)
            row["error"] = _error(event.error)
            row["metadata"] = _json(event.metadata)
            row["duration_ms"] = event.duration_ms
            row["finished_at"] = at
        case ExecutionStarted():
            row = _execution(rows, event, at)
            row["program"] = event.program
            row["trigger"] = event.trigger.kind
            row["trigger_metadata"] = _json(event.trigger.metadata)
            row["owner"] = event.owner
            row["input"] = _json(event.input)
            row["started_at"] = at
        case ExecutionFinished():
            row = _execution(rows, event, at)
            if "status" in row:
                return row
            row["status"] = event.status
            row["result"] = _json(event.result)
            row["error"] = _error(event.error)
            row["finished_at"] = at
            row["duration_ms"] = event.duration_ms
        case InteractionStarted():
            row = _interaction(rows, event)
            row["message"] = event.message
            row["requested_schema"] = _json(event.requested_schema)
            row["mode"] = event.mode
            row["started_at"] = at
        case InteractionResolved():
            row = _interaction(rows, event)
            if "status" in row:
                return row
            row["status"] = event.status
            row["response"] = _json(event.response)
            row["error"] = _error(event.error)
            row["resolved_at"] = at
        case _:
            assert_never(event)
    return row


def build_rows(batch: Sequence[Stored], backend: str) -> Rows:
    """The rows that ``batch`` writes on ``backend``: one per event, one per touched entity.

    Times are text on ``sqlite`` (its storage format), datetimes elsewhere;
    on ``postgresql`` a NUL in a text column becomes U+FFFD.
    """
    sqlite = backend == "sqlite"
    rows = Rows()
    logged = rows.events
    for event, body in batch:
        at: Any = _sqlite_time(body, event.at) if sqlite else event.at
        row = _project(rows, event, body, at)
        # Both escapes start with a backslash: one character is found at memchr's speed,
        # where a longer needle scans a long body several times slower.
        escaped = "\\" in body
        if sqlite or not escaped or _NUL not in body:
            logged.append((*_ENVELOPE(event.__dict__), at, body))
        else:
            logged.append(tuple(map(_no_nul, (*_ENVELOPE(event.__dict__), at, body))))
            for column, value in row.items():
                row[column] = _no_nul(value)
        if escaped and _ESCAPED_SURROGATE in body:  # it held one (or a backslash before "ud")
            for column, value in row.items():
                row[column] = no_surrogate(value)
            *envelope, body = logged[-1]  # its ids too (an undecodable name given as one)
            logged[-1] = (*map(no_surrogate, envelope), body)
    return rows


def serialize(event: ExecutionEvent) -> bytes:
    """The event's JSON, as stored (before any cut)."""
    return _SERIALIZERS[event.kind](event)


def stored(event: ExecutionEvent, body: bytes | None = None) -> Stored:
    """``event`` with its JSON (``body``: already serialized), cut to the record cap if over it.

    Raises what serializing raises for an event no JSON can hold (a lone surrogate is
    escaped, not refused: see :func:`_json_text`).
    """
    text = body.decode() if body is not None else _json_text(event, _SERIALIZERS[event.kind])
    if len(text) > MAX_RECORD_CHARS:  # many small values: each under the cap, too many
        event = capped(event)
        text = _json_text(event, _SERIALIZERS[event.kind])
    return Stored(event, text)


def capped(event: ExecutionEvent) -> ExecutionEvent:
    """``event`` with its largest values cut (the audit trail's way) to fit one record."""
    data = cap_record(json_form(event), MAX_RECORD_CHARS)
    try:
        return parse_event(data)
    except EventValidationError as exc:  # a cut that breaks the event's schema: a poison event
        raise ValueError(f"event {event.event_id} is too large to store: {exc}") from None


_SERIALIZERS: Final[dict[str, Callable[[Any], bytes]]] = {
    cls.__name__: cls.__pydantic_serializer__.to_json
    for cls in (
        ExecutionStarted,
        ToolCallStarted,
        ToolCallFinished,
        InteractionStarted,
        InteractionResolved,
        ExecutionFinished,
    )
}
