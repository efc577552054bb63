"""Builders shared by the history and metrics tests (no tests here)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

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
from onlooker.plugins import history
from onlooker.plugins.history import tables

T0 = datetime(2025, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)

__all__ = [
    "T0",
    "ManualClock",
    "Outage",
    "add",
    "backend_url",
    "count_rows",
    "execution_events",
    "fail",
    "one_call",
]


class ManualClock:
    """A clock for the history writer's cool-down that moves only when told.

    ``ManualClock.install(store)`` puts it under the plugin's writer; after a
    failed batch, ``clock.advance(MAX_COOLDOWN)`` ends the cool-down at once
    (instead of sleeping it out), so the next batch probes the database.
    """

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += seconds

    @classmethod
    def install(cls, store: history.HistoryStore) -> ManualClock:
        """A new clock, put under the writer of the plugin's ``store``."""
        clock = cls()
        writer = store._writer
        assert writer is not None, "a store from history.plugin(), not history.open()"
        writer.clock = clock
        return clock


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


async def track_with_nuls(url: str) -> None:
    """Record, through the history plugin, a tracked run whose id, trigger, tool and call
    id hold a NUL (``run\\x00x``, ``t\\x00rig``, ``to\\x00ol``, ``c\\x001``)."""
    plugin = history.plugin(url)
    async with (
        onlooker.ExecutionEngine(plugins=[plugin]) as engine,
        engine.track("p", execution_id="run\x00x", trigger="t\x00rig") as run,
    ):
        call = await run.tool_started("to\x00ol", {}, tool_call_id="c\x001")
        await call.finished("ok")


class Outage:
    """Makes one test database refuse writes, then take them again."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        self.url = url
        self._lock: sqlite3.Connection | None = None

    def begin(self) -> None:
        if self.backend == "sqlite":
            # another process holding the write lock: "database is locked"
            self._lock = sqlite3.connect(self.url.split("///", 1)[1].split("?")[0])
            self._lock.isolation_level = None
            self._lock.execute("BEGIN EXCLUSIVE")
            return
        cluster = postgres.cluster_or_skip()
        name = self.url.rsplit("/", 1)[1]
        cluster.sql(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        cluster.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
        )

    def end(self) -> None:
        if self._lock is not None:
            self._lock.execute("COMMIT")
            self._lock.close()
            self._lock = None
            return
        if self.backend == "postgres":
            name = self.url.rsplit("/", 1)[1]
            postgres.cluster_or_skip().sql(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")


async def count_rows(url: str, spill: Path | None = None) -> tuple[int, int, int]:
    async with history.open(url, spill_path=spill) as store:
        counts: list[int] = await store.query(
            lambda conn: [
                int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
                for table in (tables.executions, tables.tool_calls, tables.events)
            ]
        )
    return counts[0], counts[1], counts[2]
