"""The plugin's metric names computed from a history database (``onlooker metrics serve``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from ._exposed import Exposed
from ._families import MetricsSnapshot, families
from ._names import EXECUTION_BUCKETS, MAX_TRIGGERS, OTHER, TOOL_CALL_BUCKETS

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from onlooker.plugins.history import HistoryStore


@final
class HistoryMetrics(Exposed):
    """The plugin's metric names, computed from a history database.

    Counters are totals over the whole database; ``await refresh()``
    re-reads it (``onlooker metrics serve`` does so before serving and on a
    timer). Observer-health counters exist only in a live engine and are
    absent here. The ``tool`` label keeps the ``max_tools`` most called
    tools, and the ``trigger`` label the 32 most common kinds; the rest, and
    calls to unknown tools, count as ``"other"``.
    """

    def __init__(
        self,
        store: HistoryStore,
        *,
        registry: CollectorRegistry | None = None,
        max_tools: int = 100,
    ) -> None:
        super().__init__(registry)
        self._store = store
        self._max_tools = max_tools
        self._snapshot = MetricsSnapshot()
        self._register(self)

    async def refresh(self) -> None:
        """Re-read the aggregates from the database."""
        self._snapshot = await self._store.query(self._read)

    def _read(self, conn: Connection) -> MetricsSnapshot:
        import sqlalchemy as sa

        from onlooker.plugins.history.tables import executions, interactions

        snapshot = MetricsSnapshot()
        status = executions.c.status
        trigger = sa.func.coalesce(executions.c.trigger, OTHER)
        rows = conn.execute(
            sa.select(status, trigger, sa.func.count())
            .where(status.is_not(None))
            .group_by(status, trigger)
        ).all()
        per_trigger: dict[str, int] = {}
        for _, t, n in rows:
            per_trigger[str(t)] = per_trigger.get(str(t), 0) + int(n)
        kept = _most_common(per_trigger, MAX_TRIGGERS)
        counts: dict[tuple[str, str], int] = {}
        for s, t, n in rows:
            key = (str(s), str(t) if str(t) in kept else OTHER)
            counts[key] = counts.get(key, 0) + int(n)
        snapshot.executions = [(s, t, n) for (s, t), n in sorted(counts.items())]
        self._read_tool_calls(conn, snapshot)
        self._read_execution_durations(conn, snapshot)
        snapshot.interactions_open = int(
            conn.execute(
                sa.select(sa.func.count()).where(interactions.c.status.is_(None))
            ).scalar_one()
        )
        return snapshot

    def _read_tool_calls(self, conn: Connection, snapshot: MetricsSnapshot) -> None:
        """Calls by tool and status, and each tool's duration histogram; rare tools as OTHER."""
        import sqlalchemy as sa

        from onlooker.plugins.history.tables import tool_calls

        # A call to an unknown tool names whatever the program invented: "other", as live.
        unknown = sa.cast(tool_calls.c.error, sa.Text).like('{"type":"UnknownToolError",%')
        tool = sa.case((unknown, OTHER), else_=tool_calls.c.tool)
        tops = conn.execute(
            sa.select(tool)
            .where(tool_calls.c.status.is_not(None))
            .group_by(tool)
            .order_by(sa.func.count().desc(), tool)
            .limit(self._max_tools)
        ).scalars()
        kept = set(tops)
        duration = tool_calls.c.duration_ms
        buckets = [
            sa.func.sum(sa.case((duration <= bound * 1000, 1), else_=0))
            for bound in TOOL_CALL_BUCKETS
        ]
        rows = conn.execute(
            sa.select(
                tool,
                tool_calls.c.status,
                sa.func.count(),
                sa.func.coalesce(sa.func.sum(duration), 0.0),
                *buckets,
            )
            .where(tool_calls.c.status.is_not(None))
            .group_by(tool, tool_calls.c.status)
        ).all()
        calls: dict[tuple[str, str], int] = {}
        histograms: dict[str, tuple[list[int], float, int]] = {}
        for name, call_status, count, total_ms, *cumulative in rows:
            label = name if name in kept else OTHER
            calls[label, call_status] = calls.get((label, call_status), 0) + int(count)
            old = histograms.get(label, ([0] * len(TOOL_CALL_BUCKETS), 0.0, 0))
            histograms[label] = (
                [a + int(b or 0) for a, b in zip(old[0], cumulative, strict=True)],
                old[1] + float(total_ms) / 1000,
                old[2] + int(count),
            )
        snapshot.tool_calls = [(tool, s, n) for (tool, s), n in sorted(calls.items())]
        snapshot.tool_histograms = [(tool, *h) for tool, h in sorted(histograms.items())]

    def _read_execution_durations(self, conn: Connection, snapshot: MetricsSnapshot) -> None:
        import sqlalchemy as sa

        from onlooker.plugins.history.tables import executions

        duration = executions.c.duration_ms
        row = conn.execute(
            sa.select(
                sa.func.count(),
                sa.func.coalesce(sa.func.sum(duration), 0.0),
                *[
                    sa.func.sum(sa.case((duration <= bound * 1000, 1), else_=0))
                    for bound in EXECUTION_BUCKETS
                ],
            ).where(duration.is_not(None))
        ).one()
        count, total_ms, *cumulative = row
        snapshot.execution_histogram = (
            [int(c or 0) for c in cumulative],
            float(total_ms) / 1000,
            int(count),
        )

    def describe(self) -> Iterator[Metric]:
        """The families' names: a registry that holds them already refuses these."""
        return families(MetricsSnapshot())

    def collect(self) -> Iterator[Metric]:
        """The prometheus-client collector protocol: the last snapshot as metric families."""
        return families(self._snapshot)


def _most_common(counts: dict[str, int], limit: int) -> set[str]:
    """The ``limit`` keys with the largest counts (ties by name)."""
    return set(sorted(counts, key=lambda key: (-counts[key], key))[:limit])


async def metrics_from_history(
    store: HistoryStore, *, registry: CollectorRegistry | None = None, max_tools: int = 100
) -> HistoryMetrics:
    """Metrics computed from a history database, refreshed once; ``await m.refresh()`` later.

    >>> async with onlooker.plugins.history.open(url) as store:
    ...     metrics = await metrics_from_history(store)
    ...     with metrics.serve(9464):
    ...         while True:
    ...             await anyio.sleep(15)
    ...             await metrics.refresh()
    """
    metrics = HistoryMetrics(store, registry=registry, max_tools=max_tools)
    await metrics.refresh()
    return metrics
