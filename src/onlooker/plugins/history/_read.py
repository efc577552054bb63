"""The store's queries: blocking functions of a connection, run in a worker thread."""

from __future__ import annotations

import base64
import binascii
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel, ValidationError
from sqlalchemy.engine import Connection, RowMapping

from onlooker import EventValidationError, ExecutionEvent, HistoryError, parse_event
from onlooker._shared import json_loads

from ._db import describe
from ._records import (
    ExecutionList,
    ExecutionRecord,
    ExecutionTree,
    HistoryStats,
    InteractionRecord,
    ToolCallRecord,
    ToolStats,
)
from ._rows import as_stored
from ._schema import Json, events, executions, interactions, tool_calls

__all__ = [
    "EXECUTION_STATUSES",
    "corrupt",
    "decode_cursor",
    "event_list",
    "execution_tree",
    "fetch",
    "list_executions",
    "not_a_duration",
    "stats",
    "storable_time",
    "validated",
]

_M = TypeVar("_M", bound=BaseModel)

EXECUTION_STATUSES: Final = frozenset({"running", "completed", "failed", "cancelled", "expired"})
_CHUNK: Final = 500  # ids per IN (...) clause


def encode_cursor(sort_at: datetime, execution_id: str) -> str:
    """An opaque keyset cursor: the last row's sort time and id."""
    raw = json.dumps([sort_at.isoformat(), execution_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names; :class:`HistoryError` if it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, execution_id = json_loads(raw)
        moment = datetime.fromisoformat(at)
        if moment.tzinfo is None or not isinstance(execution_id, str):
            raise ValueError(cursor)
        storable_time(moment, "cursor")  # one we made holds a time that is stored (in UTC)
    except (ValueError, TypeError, OverflowError, RecursionError, binascii.Error):
        raise HistoryError(f"invalid cursor {cursor!r}: pass back a next_cursor") from None
    return moment, execution_id


def storable_time(moment: datetime | None, name: str) -> None:
    """:class:`ValueError` naming ``name`` if ``moment`` has no UTC time (times are kept in UTC)."""
    if moment is not None:
        try:
            moment.astimezone(UTC)
        except OverflowError:
            raise ValueError(
                f"{name} is out of range: {moment.isoformat()} falls outside years 1 to 9999 in UTC"
            ) from None


def _select(table: sa.Table) -> sa.Select[Any]:
    """``SELECT`` of every column, JSON ones as raw text (decoded by :func:`_fields`)."""
    return sa.select(
        *(
            sa.cast(column, sa.Text).label(column.name) if isinstance(column.type, Json) else column
            for column in table.c
        )
    )


_UNREADABLE: Final = (ValueError, sa.exc.DataError)
"""What fetching raises for a stored value that does not read back: SQLite text that is
not a time (or not JSON), a time psycopg cannot make a ``datetime`` of (``infinity``)."""

_NOUNS: Final = {
    "executions": "execution",
    "tool_calls": "tool call",
    "interactions": "interaction",
}

_JSON_COLUMNS: Final = {
    table.name: frozenset(c.name for c in table.c if isinstance(c.type, Json))
    for table in (executions, tool_calls, interactions)
}


def corrupt(
    what: str, execution_id: object, problem: str, *, event_id: str | None = None
) -> HistoryError:
    """The error for a stored row that does not read back: ``what`` names the row."""
    return HistoryError(
        f"corrupt history row: {what} of execution {execution_id!r}: {problem}",
        execution_id=execution_id if isinstance(execution_id, str) else None,
        event_id=event_id,
    )


def fetch(conn: Connection, query: sa.Select[Any], table: sa.Table) -> Sequence[RowMapping]:
    """The rows of ``query`` over ``table``; :func:`corrupt` naming one that does not read back."""
    result = conn.execute(query)
    try:
        return result.mappings().all()
    except _UNREADABLE:
        error = _unreadable_row(conn, query, table)
        if error is None:
            raise
        raise error from None


def _unreadable_row(
    conn: Connection, query: sa.Select[Any], table: sa.Table
) -> HistoryError | None:
    """The first row of ``query`` with a value that does not read back, and its column."""
    key = list(table.primary_key)  # the row's own id first, its execution's last
    for values in conn.execute(query.with_only_columns(*key)).all():
        row = sa.select(*query.selected_columns).where(
            *(column == value for column, value in zip(key, values, strict=True))
        )
        if _failure(conn, row) is None:
            continue
        for name, column in query.selected_columns.items():
            problem = _failure(conn, row.with_only_columns(column))
            if problem is not None:
                what = f"{_NOUNS[table.name]} {values[0]!r}"
                return corrupt(what, values[-1], f"{name} does not read back: {describe(problem)}")
    return None


def _failure(conn: Connection, query: sa.Select[Any]) -> Exception | None:
    try:
        conn.execute(query).all()
    except _UNREADABLE as exc:
        return exc
    return None


def _fields(row: RowMapping, table: str, what: str) -> dict[str, Any]:
    fields = dict(row)
    for name in _JSON_COLUMNS[table]:
        text = fields[name]
        if isinstance(text, str):
            try:
                fields[name] = json_loads(text)
            except ValueError as exc:
                raise corrupt(what, fields["execution_id"], f"{name} is not JSON: {exc}") from None
    return fields


def validated(cls: type[_M], fields: dict[str, Any], what: str) -> _M:
    """``cls(**fields)``; :func:`corrupt` naming ``what`` if the row's fields do not fit."""
    try:
        return cls(**fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        problem = f"{where}: {first['msg']}"
        raise corrupt(what, fields.get("execution_id"), problem) from None


def _execution_fields(row: RowMapping) -> dict[str, Any]:
    fields = _fields(row, "executions", f"execution {row['execution_id']!r}")
    fields["status"] = fields["status"] or "running"
    fields["trigger_metadata"] = fields["trigger_metadata"] or {}
    del fields["sort_at"]
    return fields


def _execution_record(row: RowMapping) -> ExecutionRecord:
    what = f"execution {row['execution_id']!r}"
    return validated(ExecutionRecord, _execution_fields(row), what)


def list_executions(
    conn: Connection,
    *,
    status: str | None,
    tool: str | None,
    trigger: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    cursor: str | None,
) -> ExecutionList:
    """A page of executions, newest first, with the cursor of the next page."""
    storable_time(since, "since")
    storable_time(until, "until")
    query = _select(executions)
    if status == "running":
        query = query.where(executions.c.status.is_(None))
    elif status is not None:
        query = query.where(executions.c.status == status)
    if trigger is not None:
        query = query.where(executions.c.trigger == as_stored(trigger, conn.dialect.name))
    if since is not None:
        query = query.where(executions.c.sort_at >= since)
    if until is not None:
        query = query.where(executions.c.sort_at < until)
    if tool is not None:
        query = query.where(
            sa.exists().where(
                tool_calls.c.execution_id == executions.c.execution_id,
                tool_calls.c.tool == as_stored(tool, conn.dialect.name),
            )
        )
    if cursor is not None:
        at, execution_id = decode_cursor(cursor)
        execution_id = as_stored(execution_id, conn.dialect.name)  # a cursor made by hand
        query = query.where(
            sa.or_(
                executions.c.sort_at < at,
                sa.and_(executions.c.sort_at == at, executions.c.execution_id < execution_id),
            )
        )
    query = query.order_by(executions.c.sort_at.desc(), executions.c.execution_id.desc())
    rows = fetch(conn, query.limit(limit + 1), executions)
    page = rows[:limit]
    next_cursor = None
    if len(rows) > limit:
        last = page[-1]
        next_cursor = encode_cursor(last["sort_at"], last["execution_id"])
    return ExecutionList([_execution_record(row) for row in page], next_cursor=next_cursor)


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def execution_tree(conn: Connection, execution_id: str) -> ExecutionTree | None:
    """The execution, its tool calls, interactions and descendants; ``None`` if unknown."""
    execution_id = as_stored(execution_id, conn.dialect.name)
    found = fetch(
        conn, _select(executions).where(executions.c.execution_id == execution_id), executions
    )
    if not found:
        return None
    nodes, children = _descendants(conn, found[0])
    calls, asks = _calls_and_interactions(conn, list(nodes))

    def build(node: str) -> ExecutionTree:
        return validated(
            ExecutionTree,
            {
                **_execution_fields(nodes[node]),
                "tool_calls": list(calls[node]),
                "interactions": list(asks[node]),
                "children": [build(child) for child in children[node]],
            },
            f"execution {node!r}",
        )

    return build(execution_id)


def _descendants(
    conn: Connection, root: RowMapping
) -> tuple[dict[str, RowMapping], defaultdict[str, list[str]]]:
    """Every execution under ``root`` (and itself), and each one's children, oldest first."""
    nodes: dict[str, RowMapping] = {root["execution_id"]: root}
    children: defaultdict[str, list[str]] = defaultdict(list)
    level = [root["execution_id"]]
    while level:
        found: list[str] = []
        for ids in _chunks(level):
            query = (
                _select(executions)
                .where(executions.c.parent_execution_id.in_(ids))
                .order_by(executions.c.sort_at, executions.c.execution_id)
            )
            for row in fetch(conn, query, executions):
                child = row["execution_id"]
                if child in nodes:  # a cycle in hand-edited data; draw each node once
                    continue
                nodes[child] = row
                children[row["parent_execution_id"]].append(child)
                found.append(child)
        level = found
    return nodes, children


def _calls_and_interactions(
    conn: Connection, execution_ids: Sequence[str]
) -> tuple[defaultdict[str, list[ToolCallRecord]], defaultdict[str, list[InteractionRecord]]]:
    """The tool calls and interactions of the executions, by execution, in ``seq`` order."""
    calls: defaultdict[str, list[ToolCallRecord]] = defaultdict(list)
    asks: defaultdict[str, list[InteractionRecord]] = defaultdict(list)
    for ids in _chunks(execution_ids):
        query = (
            _select(tool_calls)
            .where(tool_calls.c.execution_id.in_(ids))
            .order_by(tool_calls.c.execution_id, tool_calls.c.seq)
        )
        for row in fetch(conn, query, tool_calls):
            what = f"tool call {row['tool_call_id']!r}"
            fields = _fields(row, "tool_calls", what)
            fields["status"] = fields["status"] or "running"
            fields["metadata"] = fields["metadata"] or {}
            calls[row["execution_id"]].append(validated(ToolCallRecord, fields, what))
        query = (
            _select(interactions)
            .where(interactions.c.execution_id.in_(ids))
            .order_by(interactions.c.execution_id, interactions.c.seq)
        )
        for row in fetch(conn, query, interactions):
            what = f"interaction {row['interaction_id']!r}"
            fields = _fields(row, "interactions", what)
            fields["status"] = fields["status"] or "open"
            asks[row["execution_id"]].append(validated(InteractionRecord, fields, what))
    return calls, asks


def event_list(conn: Connection, execution_id: str) -> list[ExecutionEvent]:
    """The stored events of one execution, parsed, in ``seq`` order."""
    execution_id = as_stored(execution_id, conn.dialect.name)
    query = (
        sa.select(events.c.event_id, sa.cast(events.c.body, sa.Text))
        .where(events.c.execution_id == execution_id)
        .order_by(events.c.seq, events.c.event_id)
    )
    parsed: list[ExecutionEvent] = []
    for event_id, body in conn.execute(query):
        try:
            parsed.append(parse_event(body))
        except EventValidationError as exc:
            raise corrupt(
                f"event {event_id!r}", execution_id, str(exc), event_id=event_id
            ) from None
    return parsed


def stats(conn: Connection, since: datetime | None, until: datetime | None = None) -> HistoryStats:
    """Counts, failure rates and nearest-rank p50/p95 durations per tool.

    Executions started, and tool calls finished, in ``[since, until)``.
    """
    storable_time(since, "since")
    storable_time(until, "until")
    status = sa.func.coalesce(executions.c.status, "running")
    query = sa.select(status, sa.func.count()).group_by(status)
    if since is not None:
        query = query.where(executions.c.sort_at >= since)
    if until is not None:
        query = query.where(executions.c.sort_at < until)
    by_execution_status = {str(s): int(n) for s, n in conn.execute(query)}
    finished: list[sa.ColumnElement[bool]] = [
        tool_calls.c.status.is_not(None),
        tool_calls.c.duration_ms.is_not(None),
    ]
    if since is not None:
        finished.append(tool_calls.c.finished_at >= since)
    if until is not None:
        finished.append(tool_calls.c.finished_at < until)
    tools = _tool_stats(conn, finished)
    return HistoryStats(
        since=since,
        executions=sum(by_execution_status.values()),
        executions_by_status=by_execution_status,
        tool_calls=sum(t.calls for t in tools),
        tools=tools,
    )


def _tool_stats(conn: Connection, finished: list[sa.ColumnElement[bool]]) -> list[ToolStats]:
    """Per tool, over the tool calls ``finished`` selects: most called first."""
    counts: defaultdict[str, dict[str, int]] = defaultdict(dict)
    query = (
        sa.select(tool_calls.c.tool, tool_calls.c.status, sa.func.count())
        .where(*finished)
        .group_by(tool_calls.c.tool, tool_calls.c.status)
    )
    for tool, tool_status, count in conn.execute(query):
        counts[tool][tool_status] = int(count)
    _durations_are_numbers(conn, finished)
    percentiles = _percentiles(conn, finished)
    tools = []
    for tool, by_status in counts.items():
        calls = sum(by_status.values())
        failed = by_status.get("failed", 0)
        p50, p95 = percentiles.get(tool, (None, None))
        tools.append(
            ToolStats(
                tool=tool,
                calls=calls,
                by_status=by_status,
                failed=failed,
                failure_rate=failed / calls if calls else 0.0,
                p50_ms=p50,
                p95_ms=p95,
            )
        )
    tools.sort(key=lambda t: (-t.calls, t.tool))
    return tools


def _percentiles(
    conn: Connection, finished: list[sa.ColumnElement[bool]]
) -> dict[str, tuple[float | None, float | None]]:
    """Nearest-rank p50 and p95 of the durations, per tool."""
    ranked = (
        sa.select(
            tool_calls.c.tool,
            tool_calls.c.duration_ms,
            sa.func.row_number()
            .over(partition_by=tool_calls.c.tool, order_by=tool_calls.c.duration_ms)
            .label("rank"),
            sa.func.count().over(partition_by=tool_calls.c.tool).label("n"),
        )
        .where(*finished)
        .subquery()
    )

    def percentile(p: float) -> sa.ColumnElement[Any]:
        return sa.func.min(sa.case((ranked.c.rank >= p * ranked.c.n, ranked.c.duration_ms)))

    query = sa.select(ranked.c.tool, percentile(0.5), percentile(0.95)).group_by(ranked.c.tool)
    return {tool: (p50, p95) for tool, p50, p95 in conn.execute(query)}


def _durations_are_numbers(conn: Connection, finished: list[sa.ColumnElement[bool]]) -> None:
    """:func:`corrupt` naming a call whose ``duration_ms`` a hand edit made text: SQLite
    keeps it, and would sort it among the durations (PostgreSQL refuses it)."""
    if conn.dialect.name != "sqlite":
        return
    duration = tool_calls.c.duration_ms
    query = sa.select(tool_calls.c.tool_call_id, tool_calls.c.execution_id, duration).where(
        *finished, sa.func.typeof(duration).not_in(("integer", "real"))
    )
    found = conn.execute(query.limit(1)).first()
    if found is not None:
        call_id, execution_id, value = found
        raise not_a_duration(call_id, execution_id, value)


def not_a_duration(tool_call_id: str, execution_id: str, value: object) -> HistoryError:
    """:func:`corrupt` for a tool call whose ``duration_ms`` a hand edit made text (SQLite)."""
    what = f"tool call {tool_call_id!r}"
    return corrupt(what, execution_id, f"duration_ms is not a number: {value!r}")
