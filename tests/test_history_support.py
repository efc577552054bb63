"""Builders shared by the history and metrics tests (no tests here)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import onlooker
import postgres
from onlooker import (
    Attribution,
    ErrorInfo,
    ExecutionContext,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    ToolCallFinished,
    ToolCallStarted,
    Trigger,
)

T0 = datetime(2025, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)

__all__ = ["T0", "add", "backend_url", "execution_events", "fail", "one_call"]


def backend_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL for ``backend`` (``sqlite`` or ``postgres``)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'history.db'}"
        return
    cluster = postgres.cluster_or_skip()
    url = cluster.create_database()
    try:
        yield url
    finally:
        cluster.drop_database(url)


def execution_events(
    execution_id: str,
    *,
    at: datetime = T0,
    trigger: str = "cli",
    status: str = "completed",
    tools: list[tuple[str, str, float]] | None = None,
    parent: str | None = None,
    depth: int = 0,
) -> list[ExecutionEvent]:
    """A closed execution: started, the given ``(tool, status, duration_ms)`` calls, finished."""
    attribution = Attribution(parent_execution_id=parent, depth=depth)
    seq = 0
    moment = at

    def envelope() -> dict[str, Any]:
        nonlocal seq, moment
        fields = {
            "event_id": f"{execution_id}/{seq}",
            "execution_id": execution_id,
            "seq": seq,
            "at": moment,
            "attribution": attribution,
        }
        seq += 1
        moment += timedelta(milliseconds=1)
        return fields

    events: list[ExecutionEvent] = [
        ExecutionStarted(**envelope(), program="prog", trigger=Trigger(kind=trigger))
    ]
    for index, (tool, call_status, duration) in enumerate(tools or []):
        call_id = f"{execution_id}/call{index}"
        events.append(
            ToolCallStarted(**envelope(), tool_call_id=call_id, tool=tool, args={"i": index})
        )
        events.append(
            ToolCallFinished(
                **envelope(),
                tool_call_id=call_id,
                tool=tool,
                status=call_status,  # type: ignore[arg-type]
                result=index if call_status == "completed" else None,
                error=None
                if call_status == "completed"
                else ErrorInfo(type="ToolError", message="no", cause="failure"),
                duration_ms=duration,
            )
        )
    events.append(
        ExecutionFinished(**envelope(), status=status, duration_ms=5.0)  # type: ignore[arg-type]
    )
    return events


@onlooker.tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@onlooker.tool
def fail() -> None:
    """Always fails."""
    raise onlooker.ToolError("failed on purpose")


async def one_call(ctx: ExecutionContext) -> int:
    """A program with one tool call."""
    result: int = await ctx.call("add", a=1, b=2)
    return result
