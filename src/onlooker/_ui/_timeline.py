"""One execution drawn as a waterfall: rows on a shared time axis, and its summary.

Every tool call, question and child execution is a row whose bar starts and
ends at its own times on the root execution's axis, so calls that ran at the
same time sit side by side and are marked ``parallel``. A child execution's
rows nest under its own row. Anything still running ends at "now".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, Literal
from urllib.parse import quote

from pydantic import JsonValue

from onlooker import ToolDeclaration
from onlooker.plugins.history import ExecutionRecord
from onlooker.plugins.summary import ExecutionSummary, ToolCallError

from ._queries import Ask, Call, Node


def qid(value: str) -> str:
    """An id made safe for a URL path or query (every reserved character quoted)."""
    return quote(value, safe="", errors="surrogateescape")  # an undecodable name's bytes


__all__ = ["Item", "Lane", "Timeline", "build_timeline", "preview", "summarize"]

_MIN_WIDTH: Final = 0.4  # percent: a 0 ms call still shows as a sliver
_PREVIEW: Final = 90

ItemKind = Literal["call", "interaction", "child"]


@dataclass(slots=True)
class Item:
    """One row: a tool call, a question or a child execution."""

    kind: ItemKind
    key: str
    """Unique on the page: ``call-<id>``, ``ask-<id>``, ``child-<id>``."""
    id: str
    execution_id: str
    """The execution the row belongs to (a child's own id for ``child`` rows)."""
    name: str
    preview: str
    status: str
    start: datetime
    end: datetime
    duration_ms: float | None
    left: float = 0.0
    """Percent of the axis before the bar."""
    width: float = 0.0
    """Percent of the axis the bar spans."""
    parallel: bool = False
    lane: Lane | None = None
    """A child execution's own rows."""

    @property
    def href(self) -> str:
        """The page of the row: its details, or a child execution's own page."""
        if self.kind == "child":
            return f"/executions/{qid(self.id)}"
        key = "call" if self.kind == "call" else "interaction"
        return f"/executions/{qid(self.execution_id)}?{key}={qid(self.id)}"

    @property
    def bar_style(self) -> str:
        """The bar's place on the axis, as a ``style`` attribute's value."""
        return f"left:{self.left:.3f}%;width:{self.width:.3f}%"


@dataclass(slots=True)
class Lane:
    """The rows of one execution, in start order."""

    record: ExecutionRecord
    items: list[Item] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Timeline:
    """The waterfall of a root execution: its lane and the axis."""

    lane: Lane
    origin: datetime
    span_ms: float
    ticks: list[tuple[float, str]]
    """(percent, label) marks along the axis."""
    running: bool


def preview(values: Mapping[str, JsonValue] | None, limit: int = _PREVIEW) -> str:
    """``key=value, ...`` on one line, cut to ``limit`` characters."""
    if not values:
        return ""
    parts = []
    for key, value in values.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={text}")
    line = " ".join(", ".join(parts).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _interval(
    started: datetime | None,
    finished: datetime | None,
    duration_ms: float | None,
    fallback: datetime,
    now: datetime,
) -> tuple[datetime, datetime]:
    if started is None and finished is not None and duration_ms is not None:
        started = finished - timedelta(milliseconds=duration_ms)
    start = started or finished or fallback
    if finished is not None:
        end = finished
    elif duration_ms is not None:
        end = start + timedelta(milliseconds=duration_ms)
    else:
        end = max(now, start)  # still running
    return start, max(start, end)


def _call_item(call: Call, fallback: datetime, now: datetime) -> Item:
    start, end = _interval(call.started_at, call.finished_at, call.duration_ms, fallback, now)
    return Item(
        kind="call",
        key=f"call-{call.tool_call_id}",
        id=call.tool_call_id,
        execution_id=call.execution_id,
        name=call.tool,
        preview=preview(call.args),
        status=call.status,
        start=start,
        end=end,
        duration_ms=call.duration_ms,
    )


def _ask_item(ask: Ask, fallback: datetime, now: datetime) -> Item:
    start, end = _interval(ask.started_at, ask.resolved_at, None, fallback, now)
    if ask.started_at is not None and ask.resolved_at is not None:
        duration: float | None = (ask.resolved_at - ask.started_at).total_seconds() * 1000
    else:
        duration = None
    message = " ".join((ask.message or "").split())
    return Item(
        kind="interaction",
        key=f"ask-{ask.interaction_id}",
        id=ask.interaction_id,
        execution_id=ask.execution_id,
        name="question",
        preview=message if len(message) <= _PREVIEW else message[: _PREVIEW - 1] + "…",
        status=ask.status,
        start=start,
        end=end,
        duration_ms=duration,
    )


def _lane(node: Node, now: datetime) -> tuple[Lane, datetime, datetime]:
    """The lane of ``node`` and the earliest start and latest end anywhere in it."""
    record = node.record
    start, end = _interval(record.started_at, record.finished_at, record.duration_ms, now, now)
    lane = Lane(record)
    for call in node.calls:
        lane.items.append(_call_item(call, start, now))
    for ask in node.asks:
        lane.items.append(_ask_item(ask, start, now))
    for child in node.children:
        sub, sub_start, sub_end = _lane(child, now)
        info = child.record
        lane.items.append(
            Item(
                kind="child",
                key=f"child-{info.execution_id}",
                id=info.execution_id,
                execution_id=info.execution_id,
                name=info.program or "?",
                preview=f"task {info.task_id}" if info.task_id else "",
                status=info.status,
                start=sub_start,
                end=sub_end,
                duration_ms=info.duration_ms,
                lane=sub,
            )
        )
    lane.items.sort(key=lambda item: (item.start, item.end))
    _mark_parallel(lane.items)
    for item in lane.items:
        start = min(start, item.start)
        end = max(end, item.end)
    return lane, start, end


def _mark_parallel(items: list[Item]) -> None:
    """``parallel`` for every row whose interval overlaps another row's (items sorted by start)."""
    latest_end: datetime | None = None
    for index, item in enumerate(items):
        if latest_end is not None and item.start < latest_end:
            item.parallel = True
        following = items[index + 1] if index + 1 < len(items) else None
        if following is not None and item.end > following.start:
            item.parallel = True
        latest_end = item.end if latest_end is None else max(latest_end, item.end)


def _place(lane: Lane, origin: datetime, span_ms: float) -> None:
    for item in lane.items:
        offset = (item.start - origin).total_seconds() * 1000
        length = (item.end - item.start).total_seconds() * 1000
        item.left = min(max(offset / span_ms * 100, 0.0), 100.0 - _MIN_WIDTH)
        item.width = max(min(length / span_ms * 100, 100.0 - item.left), _MIN_WIDTH)
        if item.lane is not None:
            _place(item.lane, origin, span_ms)


def _running(node: Node) -> bool:
    return (
        node.record.status == "running"
        or any(call.status == "running" for call in node.calls)
        or any(ask.status == "open" for ask in node.asks)
        or any(_running(child) for child in node.children)
    )


def _duration_label(ms: float) -> str:
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 10:
        return f"{ms:.1f} ms"
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def build_timeline(node: Node, now: datetime | None = None) -> Timeline:
    """The waterfall of ``node`` and its descendants (``now`` ends whatever is still running)."""
    moment = now if now is not None else datetime.now(UTC)
    lane, origin, end = _lane(node, moment)
    span_ms = max((end - origin).total_seconds() * 1000, 0.001)
    _place(lane, origin, span_ms)
    ticks = [
        (fraction * 100, _duration_label(fraction * span_ms))
        for fraction in (0, 0.25, 0.5, 0.75, 1)
    ]
    return Timeline(lane=lane, origin=origin, span_ms=span_ms, ticks=ticks, running=_running(node))


_ROLES: Final = ("reads", "writes", "edits")


def _paths(value: JsonValue) -> Iterable[str]:
    if value is None:
        return ()
    if isinstance(value, list):
        return (str(item) for item in value if item is not None)
    return (str(value),)


def _call_error(call: Call) -> ToolCallError:
    """A finished call that neither completed nor was skipped, as the summary lists it."""
    error = call.error
    return ToolCallError.model_validate(
        {
            "tool": call.tool,
            "status": call.status,  # failed, blocked or cancelled
            "type": error.type if error is not None else "unknown",
            "message": error.message if error is not None else "",
        }
    )


def _duration_ms(record: ExecutionRecord, now: datetime | None) -> float:
    """The execution's duration; a running one's so far (to ``now``)."""
    if record.duration_ms is not None:
        duration = record.duration_ms
    elif record.started_at is not None:
        duration = ((now or datetime.now(UTC)) - record.started_at).total_seconds() * 1000
    else:
        duration = 0.0
    return max(duration, 0.0)


def summarize(
    node: Node,
    declarations: Mapping[str, ToolDeclaration],
    now: datetime | None = None,
) -> ExecutionSummary:
    """The summary plugin's :class:`ExecutionSummary`, rebuilt from history.

    The rules are the plugin's: finished calls count, files come from the
    declared ``reads`` / ``writes`` / ``edits`` argument of calls that
    completed, ``success_rate`` is the share of calls that completed or were
    skipped. History keeps no tool declarations, so files are found only
    for the tools in ``declarations``.
    """
    files: dict[str, set[str]] = {role: set() for role in _ROLES}
    usage: dict[str, int] = {}
    errors: list[ToolCallError] = []
    calls = 0
    for call in node.calls:
        if call.status == "running":
            continue
        calls += 1
        usage[call.tool] = usage.get(call.tool, 0) + 1
        if call.status == "completed":
            declared = declarations.get(call.tool)
            if declared is not None and call.args is not None:
                for role in _ROLES:
                    arg = getattr(declared, role)
                    if arg is not None:
                        files[role].update(_paths(call.args.get(arg)))
        elif call.status != "skipped":
            errors.append(_call_error(call))
    record = node.record
    written, edited = files["writes"], files["edits"]
    return ExecutionSummary(
        execution_id=record.execution_id,
        program=record.program or "?",
        status=record.status,
        duration_ms=_duration_ms(record, now),
        error=record.error,
        files_read=sorted(files["reads"]),
        files_written=sorted(written),
        files_edited=sorted(edited),
        files_modified=sorted(written | edited),
        tool_usage=dict(sorted(usage.items())),
        tool_calls=calls,
        success_rate=1.0 if calls == 0 else (calls - len(errors)) / calls,
        errors=errors,
        children=[summarize(child, declarations, now) for child in node.children],
    )
