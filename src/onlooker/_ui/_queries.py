"""The UI's own reads: what the store's methods do not offer, in SQLAlchemy Core.

Each function takes a connection (``store.query`` runs it in a worker
thread, in a transaction rolled back afterwards) and only selects, over the
public tables of :mod:`onlooker.plugins.history.tables`:

- :func:`list_page`: a page of executions filtered by program too, and only
  root executions if asked, with each one's tool-call count;
- :func:`execution_node`: an execution and its descendants with only what
  the timeline draws (``store.get_execution`` also parses every result and
  hook metadata: three times slower on a 1,000-call execution);
- :func:`call_record` / :func:`interaction_record`: one row of it, whole;
- :func:`stats`: the store's per-tool statistics for a time range (the store
  takes only a start);
- :func:`item_events`: the stored events of one tool call or interaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from onlooker import ErrorInfo, ExecutionEvent, HistoryError, parse_event
from onlooker.plugins.history import (
    ExecutionRecord,
    InteractionRecord,
    ToolCallRecord,
    _read,
)
from onlooker.plugins.history._read import encode_cursor
from onlooker.plugins.history._rows import as_stored
from onlooker.plugins.history.tables import events, executions, interactions, tool_calls

__all__ = [
    "Ask",
    "BadCursorError",
    "Call",
    "ListFilters",
    "Node",
    "Page",
    "Row",
    "call_record",
    "decode_cursor",
    "execution_node",
    "execution_record",
    "interaction_record",
    "item_events",
    "list_page",
]

EXECUTION_STATUSES: Final = ("running", "completed", "failed", "cancelled", "expired")


class BadCursorError(ValueError):
    """A ``cursor`` that is not one the UI made."""


@dataclass(frozen=True, slots=True)
class ListFilters:
    """What the executions list shows: filters, a page position and a page size."""

    status: str | None = None
    program: str | None = None
    trigger: str | None = None
    tool: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    roots: bool = False
    cursor: str | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the executions list."""

    record: ExecutionRecord
    tool_calls: int


@dataclass(frozen=True, slots=True)
class Page:
    """A page of the list, newest first; ``next_cursor`` is ``None`` on the last one."""

    rows: list[Row]
    next_cursor: str | None


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names (history's own cursors); :class:`BadCursorError` if not one."""
    try:
        return _read.decode_cursor(cursor)
    except HistoryError:
        raise BadCursorError(f"invalid cursor {cursor!r}: follow the list's own links") from None


def _record(row: RowMapping) -> ExecutionRecord:
    fields: dict[str, Any] = dict(row)
    del fields["sort_at"]
    fields["status"] = fields["status"] or "running"  # NULL: no ExecutionFinished stored yet
    fields["trigger_metadata"] = fields["trigger_metadata"] or {}
    return _read.validated(ExecutionRecord, fields, f"execution {fields['execution_id']!r}")


def _stored(conn: Connection, value: str) -> str:
    """``value`` as this database holds it (see ``as_stored``): what a lookup compares."""
    return as_stored(value, conn.dialect.name)


def execution_record(conn: Connection, execution_id: str) -> ExecutionRecord | None:
    """One execution without its calls; ``None`` if unknown."""
    query = sa.select(executions).where(executions.c.execution_id == _stored(conn, execution_id))
    found = _read.fetch(conn, query, executions)
    return _record(found[0]) if found else None


@dataclass(frozen=True, slots=True)
class Call:
    """What the timeline and the summary need of a tool call (no result, no hook metadata)."""

    tool_call_id: str
    execution_id: str
    tool: str
    status: str
    args: dict[str, Any] | None
    error: ErrorInfo | None
    duration_ms: float | None
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class Ask:
    """What the timeline needs of a question."""

    interaction_id: str
    execution_id: str
    message: str | None
    status: str
    started_at: datetime | None
    resolved_at: datetime | None


@dataclass(slots=True)
class Node:
    """An execution, its calls and questions (``seq`` order) and its children (oldest first)."""

    record: ExecutionRecord
    calls: list[Call] = field(default_factory=list)
    asks: list[Ask] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)


_CHUNK: Final = 500  # ids per IN (...) clause
_CALL_COLUMNS: Final = (
    tool_calls.c.tool_call_id,
    tool_calls.c.execution_id,
    tool_calls.c.tool,
    tool_calls.c.status,
    tool_calls.c.args,
    tool_calls.c.error,
    tool_calls.c.duration_ms,
    tool_calls.c.started_at,
    tool_calls.c.finished_at,
)
_ASK_COLUMNS: Final = (
    interactions.c.interaction_id,
    interactions.c.execution_id,
    interactions.c.message,
    interactions.c.status,
    interactions.c.started_at,
    interactions.c.resolved_at,
)


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def _error(value: Any) -> ErrorInfo | None:
    return None if value is None else ErrorInfo.model_validate(value)


def execution_node(conn: Connection, execution_id: str) -> Node | None:
    """The execution and every descendant, with what the timeline draws; ``None`` if unknown."""
    execution_id = _stored(conn, execution_id)
    root = execution_record(conn, execution_id)
    if root is None:
        return None
    nodes = {execution_id: Node(root)}
    level = [execution_id]
    while level:  # one query per generation, not per child
        found: list[str] = []
        for ids in _chunks(level):
            query = (
                sa.select(executions)
                .where(executions.c.parent_execution_id.in_(ids))
                .order_by(executions.c.sort_at, executions.c.execution_id)
            )
            for row in _read.fetch(conn, query, executions):
                child = row["execution_id"]
                if child in nodes:  # a cycle in hand-edited data: draw each node once
                    continue
                nodes[child] = Node(_record(row))
                nodes[row["parent_execution_id"]].children.append(nodes[child])
                found.append(child)
        level = found
    for ids in _chunks(list(nodes)):
        query = (
            sa.select(*_CALL_COLUMNS)
            .where(tool_calls.c.execution_id.in_(ids))
            .order_by(tool_calls.c.execution_id, tool_calls.c.seq)
        )
        for row in _read.fetch(conn, query, tool_calls):
            duration = row["duration_ms"]
            if duration is not None and not isinstance(duration, int | float):  # SQLite text
                raise _read.not_a_duration(row["tool_call_id"], row["execution_id"], duration)
            status, error = row["status"] or "running", _error(row["error"])
            call = Call(**{**row, "status": status, "error": error})
            nodes[call.execution_id].calls.append(call)
        query = (
            sa.select(*_ASK_COLUMNS)
            .where(interactions.c.execution_id.in_(ids))
            .order_by(interactions.c.execution_id, interactions.c.seq)
        )
        for row in _read.fetch(conn, query, interactions):
            ask = Ask(**{**row, "status": row["status"] or "open"})
            nodes[ask.execution_id].asks.append(ask)
    return nodes[execution_id]


def call_record(conn: Connection, execution_id: str, tool_call_id: str) -> ToolCallRecord | None:
    """One tool call of the execution, whole; ``None`` if it has no such call."""
    query = sa.select(tool_calls).where(
        tool_calls.c.execution_id == _stored(conn, execution_id),
        tool_calls.c.tool_call_id == _stored(conn, tool_call_id),
    )
    found = _read.fetch(conn, query, tool_calls)
    if not found:
        return None
    fields = dict(found[0])
    fields["status"] = fields["status"] or "running"
    fields["metadata"] = fields["metadata"] or {}
    return _read.validated(ToolCallRecord, fields, f"tool call {tool_call_id!r}")


def interaction_record(
    conn: Connection, execution_id: str, interaction_id: str
) -> InteractionRecord | None:
    """One question of the execution, whole; ``None`` if it has no such question."""
    query = sa.select(interactions).where(
        interactions.c.execution_id == _stored(conn, execution_id),
        interactions.c.interaction_id == _stored(conn, interaction_id),
    )
    found = _read.fetch(conn, query, interactions)
    if not found:
        return None
    fields = dict(found[0])
    fields["status"] = fields["status"] or "open"
    return _read.validated(InteractionRecord, fields, f"interaction {interaction_id!r}")


def list_page(conn: Connection, filters: ListFilters) -> Page:
    """A page of executions, newest first (keyset pagination on the sort index)."""
    query = sa.select(executions)
    if filters.status == "running":
        query = query.where(executions.c.status.is_(None))
    elif filters.status is not None:
        query = query.where(executions.c.status == filters.status)
    if filters.program is not None:
        query = query.where(executions.c.program == _stored(conn, filters.program))
    if filters.trigger is not None:
        query = query.where(executions.c.trigger == _stored(conn, filters.trigger))
    if filters.since is not None:
        query = query.where(executions.c.sort_at >= filters.since)
    if filters.until is not None:
        query = query.where(executions.c.sort_at < filters.until)
    if filters.roots:
        query = query.where(executions.c.parent_execution_id.is_(None))
    if filters.tool is not None:
        query = query.where(
            sa.exists().where(
                tool_calls.c.execution_id == executions.c.execution_id,
                tool_calls.c.tool == _stored(conn, filters.tool),
            )
        )
    if filters.cursor is not None:
        at, last_id = decode_cursor(filters.cursor)
        last_id = _stored(conn, last_id)  # a cursor made by hand
        query = query.where(
            sa.or_(
                executions.c.sort_at < at,
                sa.and_(executions.c.sort_at == at, executions.c.execution_id < last_id),
            )
        )
    query = query.order_by(executions.c.sort_at.desc(), executions.c.execution_id.desc())
    found = _read.fetch(conn, query.limit(filters.limit + 1), executions)
    page = found[: filters.limit]
    counts: dict[str, int] = {}
    ids = [row["execution_id"] for row in page]
    if ids:
        count_query = (
            sa.select(tool_calls.c.execution_id, sa.func.count())
            .where(tool_calls.c.execution_id.in_(ids))
            .group_by(tool_calls.c.execution_id)
        )
        counts = {execution_id: int(n) for execution_id, n in conn.execute(count_query)}
    next_cursor = None
    if len(found) > filters.limit:
        next_cursor = encode_cursor(page[-1]["sort_at"], page[-1]["execution_id"])
    return Page(
        [Row(_record(row), counts.get(row["execution_id"], 0)) for row in page], next_cursor
    )


_KINDS: Final = {
    "tool_call_id": ("ToolCallStarted", "ToolCallFinished"),
    "interaction_id": ("InteractionStarted", "InteractionResolved"),
}


def item_events(
    conn: Connection, execution_id: str, key: str, item_id: str
) -> list[ExecutionEvent]:
    """The events of one tool call (``key="tool_call_id"``) or interaction, in ``seq`` order."""
    item_id = _stored(conn, item_id)
    query = sa.select(sa.cast(events.c.body, sa.Text)).where(
        events.c.execution_id == _stored(conn, execution_id), events.c.kind.in_(_KINDS[key])
    )
    quoted = json.dumps(item_id)
    if quoted == f'"{item_id}"':  # spelt as is in the JSON text: narrow by it in SQL first
        query = query.where(sa.cast(events.c.body, sa.Text).contains(quoted, autoescape=True))
    found = [parse_event(body) for body in conn.execute(query.order_by(events.c.seq)).scalars()]
    # The projection stores an id's lone surrogate (an undecodable name) as U+FFFD, and
    # on PostgreSQL a NUL too; the event's JSON keeps them.
    return [event for event in found if _stored(conn, getattr(event, key)) == item_id]
