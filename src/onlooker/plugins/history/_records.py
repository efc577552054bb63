"""What the history store's reads return: frozen pydantic models."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, TypeAlias, final

from pydantic import Field, JsonValue

from onlooker import ErrorInfo, ExecutionStatus, InteractionMode, InteractionStatus, ToolCallStatus
from onlooker._events import JsonModel  # model_dump_json writes a lone surrogate too

__all__ = [
    "ExecutionList",
    "ExecutionRecord",
    "ExecutionTree",
    "HistoryStats",
    "InteractionRecord",
    "RecordedExecutionStatus",
    "RecordedInteractionStatus",
    "RecordedToolCallStatus",
    "ToolCallRecord",
    "ToolStats",
]


RecordedExecutionStatus: TypeAlias = ExecutionStatus | Literal["running"]
"""An execution's status in history: ``running`` until its ``ExecutionFinished`` is stored."""
RecordedToolCallStatus: TypeAlias = ToolCallStatus | Literal["running"]
"""A tool call's status in history: ``running`` until its ``ToolCallFinished`` is stored."""
RecordedInteractionStatus: TypeAlias = InteractionStatus | Literal["open"]
"""An interaction's status in history: ``open`` until its ``InteractionResolved`` is stored."""


class _ExecutionFields(JsonModel, frozen=True, extra="forbid"):
    execution_id: str
    program: str | None
    """The program's name; ``None`` when only the ``ExecutionFinished`` event is stored."""
    trigger: str | None
    """The trigger's ``kind`` ("cli", "api", ...)."""
    trigger_metadata: dict[str, JsonValue] = Field(default_factory=dict)
    owner: str | None = None
    input: JsonValue = None
    status: RecordedExecutionStatus
    result: JsonValue = None
    error: ErrorInfo | None = None
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: float | None
    parent_execution_id: str | None = None
    parent_tool_call_id: str | None = None
    depth: int = 0
    task_id: str | None = None
    phase: str | None = None
    intent_id: str | None = None


@final
class ExecutionRecord(_ExecutionFields, frozen=True):
    """One execution, as ``list_executions`` returns it (no tool calls, no children)."""


@final
class ToolCallRecord(JsonModel, frozen=True, extra="forbid"):
    """One tool call: what ``ToolCallStarted`` and ``ToolCallFinished`` said about it."""

    tool_call_id: str
    execution_id: str
    tool: str
    status: RecordedToolCallStatus
    args: dict[str, JsonValue] | None
    """``None`` when only the ``ToolCallFinished`` event is stored."""
    result: JsonValue = None
    error: ErrorInfo | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    duration_ms: float | None
    started_at: datetime | None
    finished_at: datetime | None
    seq: int
    """The ``seq`` of the call's first stored event: the call's place in its execution."""
    phase: str | None = None
    task_id: str | None = None
    intent_id: str | None = None


@final
class InteractionRecord(JsonModel, frozen=True, extra="forbid"):
    """One question asked of a person, and its answer."""

    interaction_id: str
    execution_id: str
    message: str | None
    requested_schema: dict[str, JsonValue] | None = None
    mode: InteractionMode | None
    status: RecordedInteractionStatus
    response: JsonValue = None
    error: ErrorInfo | None = None
    started_at: datetime | None
    resolved_at: datetime | None
    seq: int


@final
class ExecutionTree(_ExecutionFields, frozen=True):
    """An execution with its tool calls and interactions (``seq`` order) and its children.

    ``children`` are the executions it spawned (oldest first), each a tree itself.
    """

    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    interactions: list[InteractionRecord] = Field(default_factory=list)
    children: list[ExecutionTree] = Field(default_factory=list)


class ExecutionList(list[ExecutionRecord]):
    """A page of :class:`ExecutionRecord`, newest first.

    ``next_cursor`` is ``None`` on the last page; pass it back as
    ``list_executions(cursor=...)`` (with the same filters) for the next one.
    """

    def __init__(self, records: list[ExecutionRecord], next_cursor: str | None = None) -> None:
        super().__init__(records)
        self.next_cursor = next_cursor

    def __repr__(self) -> str:
        return f"ExecutionList({list.__repr__(self)}, next_cursor={self.next_cursor!r})"


@final
class ToolStats(JsonModel, frozen=True, extra="forbid"):
    """One tool's calls in a :class:`HistoryStats`.

    ``failure_rate`` is ``failed / finished`` (``blocked``, ``skipped`` and
    ``cancelled`` calls count as finished, not failed); percentiles are
    nearest-rank over finished calls, in milliseconds.
    """

    tool: str
    calls: int
    """Finished calls."""
    by_status: dict[str, int]
    failed: int
    failure_rate: float
    p50_ms: float | None
    p95_ms: float | None


@final
class HistoryStats(JsonModel, frozen=True, extra="forbid"):
    """Aggregates over the stored history (``store.stats(since=...)``)."""

    since: datetime | None
    executions: int
    executions_by_status: dict[str, int]
    tool_calls: int
    """Finished tool calls, every tool."""
    tools: list[ToolStats]
    """Per tool, most called first."""
