"""Events to rows: the raw log and the projections, merged per entity within a batch.

This is the write path's hot loop, so rows are tuples built from the events'
attributes and written with the driver's ``executemany``. Projection upserts
merge with ``COALESCE`` (a value, once known, stays), which makes writing
the same events twice, or in any order, give the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, assert_never

from pydantic_core import to_json

from onlooker import (
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
from onlooker.plugins.audit._redact import cap_record  # the trail's record cap, its markers

__all__ = ["MAX_RECORD_CHARS", "Flavor", "Rows", "Statements", "build_rows", "capped"]

MAX_RECORD_CHARS: Final = 262_144
"""The most characters one stored event may take; past it its largest values are cut."""

EXECUTION_COLUMNS: Final = (
    "execution_id",
    "program",
    "trigger",
    "trigger_metadata",
    "owner",
    "input",
    "status",
    "result",
    "error",
    "started_at",
    "finished_at",
    "duration_ms",
    "parent_execution_id",
    "parent_tool_call_id",
    "depth",
    "task_id",
    "phase",
    "intent_id",
    "sort_at",
)
TOOL_CALL_COLUMNS: Final = (
    "tool_call_id",
    "execution_id",
    "tool",
    "status",
    "args",
    "result",
    "error",
    "metadata",
    "duration_ms",
    "started_at",
    "finished_at",
    "seq",
    "phase",
    "task_id",
    "intent_id",
)
INTERACTION_COLUMNS: Final = (
    "interaction_id",
    "execution_id",
    "message",
    "requested_schema",
    "mode",
    "status",
    "response",
    "error",
    "started_at",
    "resolved_at",
    "seq",
)
EVENT_COLUMNS: Final = ("event_id", "execution_id", "seq", "kind", "at", "body")

# Columns merged by keeping the smaller value rather than the first non-NULL one.
_MIN_COLUMNS: Final = {"sort_at", "seq"}


@dataclass(frozen=True, slots=True)
class Statements:
    """The write path's SQL for one backend."""

    events: str
    executions: str
    tool_calls: str
    interactions: str


def _upsert(table: str, columns: Sequence[str], placeholder: str) -> str:
    key = columns[0]
    updates = []
    for column in columns[1:]:
        if column in _MIN_COLUMNS:
            updates.append(
                f"{column} = CASE WHEN excluded.{column} < {table}.{column} "
                f"THEN excluded.{column} ELSE {table}.{column} END"
            )
        else:
            updates.append(f"{column} = COALESCE(excluded.{column}, {table}.{column})")
    values = ", ".join([placeholder] * len(columns))
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values}) "
        f"ON CONFLICT ({key}) DO UPDATE SET {', '.join(updates)}"
    )


def _no_nul(value: str) -> str:
    # PostgreSQL text cannot hold NUL; the raw event keeps it, JSON-escaped.
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def _sqlite_time(at: datetime) -> str:
    if at.tzinfo is not UTC:
        at = at.astimezone(UTC)
    return at.isoformat(" ", "microseconds")[:26]  # the format SQLAlchemy's DateTime reads


@dataclass(frozen=True, slots=True)
class Flavor:
    """How one backend wants its parameters."""

    placeholder: str

    @staticmethod
    def for_backend(backend: str) -> Flavor:
        """The flavor of ``sqlite`` or ``postgresql``."""
        if backend == "sqlite":
            return Flavor("?")
        return Flavor("%s")

    def statements(self) -> Statements:
        """The SQL of the write path."""
        p = self.placeholder
        return Statements(
            events=(
                f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) "
                f"VALUES ({', '.join([p] * len(EVENT_COLUMNS))}) "
                "ON CONFLICT (event_id) DO NOTHING"
            ),
            executions=_upsert("executions", EXECUTION_COLUMNS, p),
            tool_calls=_upsert("tool_calls", TOOL_CALL_COLUMNS, p),
            interactions=_upsert("interactions", INTERACTION_COLUMNS, p),
        )


@dataclass(slots=True)
class Rows:
    """The rows of one batch, per table."""

    events: list[tuple[Any, ...]]
    executions: list[tuple[Any, ...]]
    tool_calls: list[tuple[Any, ...]]
    interactions: list[tuple[Any, ...]]


def _json(value: Any) -> str | None:
    return None if value is None else to_json(value).decode()


def _error(error: ErrorInfo | None) -> str | None:
    return None if error is None else error.model_dump_json()


def _merge(old: tuple[Any, ...], new: tuple[Any, ...], mins: tuple[int, ...]) -> tuple[Any, ...]:
    merged = [a if a is not None else b for a, b in zip(old, new, strict=True)]
    for index in mins:
        if new[index] < old[index]:
            merged[index] = new[index]
    return tuple(merged)


_EXECUTION_MINS: Final = (EXECUTION_COLUMNS.index("sort_at"),)
_TOOL_CALL_MINS: Final = (TOOL_CALL_COLUMNS.index("seq"),)
_INTERACTION_MINS: Final = (INTERACTION_COLUMNS.index("seq"),)
_AT: Final = '"at":"'
_NUL: Final = "\\u0000"  # how JSON spells NUL


def _sqlite_time_from(body: str, at: datetime) -> str:
    # The body already spells the time; reuse it when it is UTC with microseconds.
    start = body.find(_AT) + 6
    if body[start + 26 : start + 28] == 'Z"':
        return body[start : start + 10] + " " + body[start + 11 : start + 26]
    return _sqlite_time(at)


def _sanitize(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_no_nul(value) if type(value) is str else value for value in row)


def build_rows(batch: Sequence[ExecutionEvent], flavor: Flavor) -> Rows:
    """The rows that ``batch`` writes: one per event, one per touched entity."""
    sqlite = flavor.placeholder == "?"
    event_rows: list[tuple[Any, ...]] = []
    executions: dict[str, tuple[Any, ...]] = {}
    tool_calls: dict[str, tuple[Any, ...]] = {}
    interactions: dict[str, tuple[Any, ...]] = {}
    for event in batch:
        body = _SERIALIZERS[event.kind](event).decode()
        if len(body) > MAX_RECORD_CHARS:  # many small values: each under the cap, too many
            event = capped(event)
            body = _SERIALIZERS[event.kind](event).decode()
        at: Any = _sqlite_time_from(body, event.at) if sqlite else event.at
        execution_id = event.execution_id
        kind = event.kind
        a = event.attribution
        row: tuple[Any, ...]
        match event:
            case ToolCallStarted():
                row = (
                    event.tool_call_id, execution_id, event.tool, None, _json(event.args), None,
                    None, None, None, at, None, event.seq, a.phase, a.task_id, a.intent_id,
                )  # fmt: skip
                table = tool_calls
            case ToolCallFinished():
                key = event.tool_call_id
                started = tool_calls.get(key)
                if started is not None and started[10] is None:  # the usual pair, merged directly
                    row = (
                        key, execution_id, event.tool, event.status, started[4],
                        _json(event.result), _error(event.error), _json(event.metadata),
                        event.duration_ms, started[9], at, started[11], a.phase, a.task_id,
                        a.intent_id,
                    )  # fmt: skip
                    if not sqlite and _NUL in body:
                        row = _sanitize(row)
                    tool_calls[key] = row
                    event_rows.append((event.event_id, execution_id, event.seq, kind, at, body))
                    continue
                row = (
                    key, execution_id, event.tool, event.status, None, _json(event.result),
                    _error(event.error), _json(event.metadata), event.duration_ms, None, at,
                    event.seq, a.phase, a.task_id, a.intent_id,
                )  # fmt: skip
                table = tool_calls
            case ExecutionStarted():
                trigger = event.trigger
                row = (
                    execution_id, event.program, trigger.kind, _json(trigger.metadata), event.owner,
                    _json(event.input), None, None, None, at, None, None, a.parent_execution_id,
                    a.parent_tool_call_id, a.depth, a.task_id, a.phase, a.intent_id, at,
                )  # fmt: skip
                table = executions
            case ExecutionFinished():
                row = (
                    execution_id, None, None, None, None, None, event.status, _json(event.result),
                    _error(event.error), None, at, event.duration_ms, a.parent_execution_id,
                    a.parent_tool_call_id, a.depth, a.task_id, a.phase, a.intent_id, at,
                )  # fmt: skip
                table = executions
            case InteractionStarted():
                row = (
                    event.interaction_id, execution_id, event.message, _json(event.requested_schema),
                    event.mode, None, None, None, at, None, event.seq,
                )  # fmt: skip
                table = interactions
            case InteractionResolved():
                row = (
                    event.interaction_id, execution_id, None, None, None, event.status,
                    _json(event.response), _error(event.error), None, at, event.seq,
                )  # fmt: skip
                table = interactions
            case _:
                assert_never(event)
        if not sqlite and _NUL in body:
            row = _sanitize(row)
            event_rows.append(_sanitize((event.event_id, execution_id, event.seq, kind, at, body)))
        else:
            event_rows.append((event.event_id, execution_id, event.seq, kind, at, body))
        key = row[0]
        old = table.get(key)
        if old is None:
            table[key] = row
        else:
            mins = (
                _TOOL_CALL_MINS
                if table is tool_calls
                else _EXECUTION_MINS
                if table is executions
                else _INTERACTION_MINS
            )
            table[key] = _merge(old, row, mins)
    return Rows(
        event_rows,
        list(executions.values()),
        list(tool_calls.values()),
        list(interactions.values()),
    )


def capped(event: ExecutionEvent) -> ExecutionEvent:
    """``event`` with its largest values cut (the audit trail's way) to fit one record."""
    data = cap_record(event.model_dump(mode="json"), MAX_RECORD_CHARS)
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
