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
from typing import Any, Final

from pydantic_core import to_json

from onlooker import (
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionStarted,
    ToolCallFinished,
    ToolCallStarted,
)

__all__ = ["Flavor", "Rows", "Statements", "build_rows"]

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


def _same(value: str) -> str:
    return value


def _no_nul(value: str) -> str:
    # PostgreSQL text cannot hold NUL; the raw event keeps it, JSON-escaped.
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def _sqlite_time(at: datetime) -> str:
    if at.tzinfo is not UTC:
        at = at.astimezone(UTC)
    return at.isoformat(" ", "microseconds")[:26]  # the format SQLAlchemy's DateTime reads


def _pg_time(at: datetime) -> datetime:
    return at


@dataclass(frozen=True, slots=True)
class Flavor:
    """How one backend wants its parameters."""

    placeholder: str
    text: Callable[[str], str]
    time: Callable[[datetime], Any]

    @staticmethod
    def for_backend(backend: str) -> Flavor:
        """The flavor of ``sqlite`` or ``postgresql``."""
        if backend == "sqlite":
            return Flavor("?", _same, _sqlite_time)
        return Flavor("%s", _no_nul, _pg_time)

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


def _opt(text: Callable[[str], str], value: str | None) -> str | None:
    return None if value is None else text(value)


def _merge(old: tuple[Any, ...], new: tuple[Any, ...], mins: tuple[int, ...]) -> tuple[Any, ...]:
    merged = [a if a is not None else b for a, b in zip(old, new, strict=True)]
    for index in mins:
        if new[index] < old[index]:
            merged[index] = new[index]
    return tuple(merged)


_EXECUTION_MINS: Final = (EXECUTION_COLUMNS.index("sort_at"),)
_TOOL_CALL_MINS: Final = (TOOL_CALL_COLUMNS.index("seq"),)
_INTERACTION_MINS: Final = (INTERACTION_COLUMNS.index("seq"),)


def build_rows(batch: Sequence[ExecutionEvent], flavor: Flavor) -> Rows:
    """The rows that ``batch`` writes: one per event, one per touched entity."""
    text, time = flavor.text, flavor.time
    event_rows: list[tuple[Any, ...]] = []
    executions: dict[str, tuple[Any, ...]] = {}
    tool_calls: dict[str, tuple[Any, ...]] = {}
    interactions: dict[str, tuple[Any, ...]] = {}
    for event in batch:
        at = time(event.at)
        execution_id = text(event.execution_id)
        event_rows.append(
            (text(event.event_id), execution_id, event.seq, event.kind, at, event.model_dump_json())
        )
        attribution = event.attribution
        if isinstance(event, ToolCallStarted | ToolCallFinished):
            if isinstance(event, ToolCallStarted):
                row: tuple[Any, ...] = (
                    text(event.tool_call_id), execution_id, text(event.tool), None,
                    _json(event.args), None, None, None, None, at, None, event.seq,
                    _opt(text, attribution.phase), _opt(text, attribution.task_id),
                    _opt(text, attribution.intent_id),
                )  # fmt: skip
            else:
                row = (
                    text(event.tool_call_id), execution_id, text(event.tool), event.status,
                    None, _json(event.result),
                    None if event.error is None else event.error.model_dump_json(),
                    _json(event.metadata), event.duration_ms, None, at, event.seq,
                    _opt(text, attribution.phase), _opt(text, attribution.task_id),
                    _opt(text, attribution.intent_id),
                )  # fmt: skip
            key = row[0]
            old = tool_calls.get(key)
            tool_calls[key] = row if old is None else _merge(old, row, _TOOL_CALL_MINS)
        elif isinstance(event, ExecutionStarted | ExecutionFinished):
            if isinstance(event, ExecutionStarted):
                trigger = event.trigger
                row = (
                    execution_id, text(event.program), text(trigger.kind),
                    _json(trigger.metadata), _opt(text, event.owner), _json(event.input),
                    None, None, None, at, None, None,
                    _opt(text, attribution.parent_execution_id),
                    _opt(text, attribution.parent_tool_call_id), attribution.depth,
                    _opt(text, attribution.task_id), _opt(text, attribution.phase),
                    _opt(text, attribution.intent_id), at,
                )  # fmt: skip
            else:
                row = (
                    execution_id, None, None, None, None, None, event.status,
                    _json(event.result),
                    None if event.error is None else event.error.model_dump_json(),
                    None, at, event.duration_ms,
                    _opt(text, attribution.parent_execution_id),
                    _opt(text, attribution.parent_tool_call_id), attribution.depth,
                    _opt(text, attribution.task_id), _opt(text, attribution.phase),
                    _opt(text, attribution.intent_id), at,
                )  # fmt: skip
            old = executions.get(execution_id)
            executions[execution_id] = row if old is None else _merge(old, row, _EXECUTION_MINS)
        else:
            if isinstance(event, InteractionStarted):
                row = (
                    text(event.interaction_id), execution_id, text(event.message),
                    _json(event.requested_schema), event.mode, None, None, None, at, None,
                    event.seq,
                )  # fmt: skip
            else:
                row = (
                    text(event.interaction_id), execution_id, None, None, None, event.status,
                    _json(event.response),
                    None if event.error is None else event.error.model_dump_json(),
                    None, at, event.seq,
                )  # fmt: skip
            key = row[0]
            old = interactions.get(key)
            interactions[key] = row if old is None else _merge(old, row, _INTERACTION_MINS)
    return Rows(
        event_rows,
        list(executions.values()),
        list(tool_calls.values()),
        list(interactions.values()),
    )
