"""The plugin's metric names computed from a history database (``onlooker metrics serve``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ._exposed import Exposed
from ._names import (
    EXECUTION_BUCKETS,
    EXECUTION_DURATION,
    EXECUTIONS,
    INTERACTIONS_OPEN,
    OTHER,
    TOOL_CALL_BUCKETS,
    TOOL_CALL_DURATION,
    TOOL_CALLS,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from onlooker.plugins.history import HistoryStore


class _Snapshot:
    def __init__(self) -> None:
        self.executions: list[tuple[str, str, int]] = []
        self.tool_calls: list[tuple[str, str, int]] = []
        self.tool_histograms: list[tuple[str, list[int], float, int]] = []
        self.execution_histogram: tuple[list[int], float, int] = (
            [0] * len(EXECUTION_BUCKETS),
            0,
            0,
        )
        self.interactions_open = 0


def _histogram(
    family: HistogramMetricFamily,
    labels: list[str],
    bounds: Sequence[float],
    cumulative: list[int],
    total: float,
    count: int,
) -> None:
    buckets = [(repr(float(b)), c) for b, c in zip(bounds, cumulative, strict=True)]
    buckets.append(("+Inf", count))
    family.add_metric(labels, buckets, total)


@final
class HistoryMetrics(Exposed):
    """The plugin's metric names, computed from a history database.

    Counters are totals over the whole database; ``await refresh()``
    re-reads it (``onlooker metrics serve`` does so before serving and on a
    timer). Observer-health counters exist only in a live engine and are
    absent here. The ``tool`` label keeps the ``max_tools`` most called
    tools; the rest count as ``"other"``.
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
        self._snapshot = _Snapshot()
        self.registry.register(self)

    async def refresh(self) -> None:
        """Re-read the aggregates from the database."""
        self._snapshot = await self._store.query(self._read)

    def _read(self, conn: Connection) -> _Snapshot:
        import sqlalchemy as sa

        from onlooker.plugins.history.tables import executions, interactions, tool_calls

        snapshot = _Snapshot()
        status = executions.c.status
        trigger = sa.func.coalesce(executions.c.trigger, OTHER)
        rows = conn.execute(
            sa.select(status, trigger, sa.func.count())
            .where(status.is_not(None))
            .group_by(status, trigger)
        ).all()
        snapshot.executions = [(str(s), str(t), int(n)) for s, t, n in rows]

        tops = conn.execute(
            sa.select(tool_calls.c.tool)
            .where(tool_calls.c.status.is_not(None))
            .group_by(tool_calls.c.tool)
            .order_by(sa.func.count().desc(), tool_calls.c.tool)
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
                tool_calls.c.tool,
                tool_calls.c.status,
                sa.func.count(),
                sa.func.coalesce(sa.func.sum(duration), 0.0),
                *buckets,
            )
            .where(tool_calls.c.status.is_not(None))
            .group_by(tool_calls.c.tool, tool_calls.c.status)
        ).all()
        calls: dict[tuple[str, str], int] = {}
        histograms: dict[str, tuple[list[int], float, int]] = {}
        for tool, call_status, count, total_ms, *cumulative in rows:
            label = tool if tool in kept else OTHER
            calls[label, call_status] = calls.get((label, call_status), 0) + int(count)
            old = histograms.get(label, ([0] * len(TOOL_CALL_BUCKETS), 0.0, 0))
            histograms[label] = (
                [a + int(b or 0) for a, b in zip(old[0], cumulative, strict=True)],
                old[1] + float(total_ms) / 1000,
                old[2] + int(count),
            )
        snapshot.tool_calls = [(tool, s, n) for (tool, s), n in sorted(calls.items())]
        snapshot.tool_histograms = [(tool, *h) for tool, h in sorted(histograms.items())]

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
        snapshot.interactions_open = int(
            conn.execute(
                sa.select(sa.func.count()).where(interactions.c.status.is_(None))
            ).scalar_one()
        )
        return snapshot

    def collect(self) -> Iterator[Metric]:
        """The prometheus-client collector protocol: the last snapshot as metric families."""
        snapshot = self._snapshot
        executions = CounterMetricFamily(
            EXECUTIONS.name, EXECUTIONS.help, labels=list(EXECUTIONS.labels)
        )
        for status, trigger, count in snapshot.executions:
            executions.add_metric([status, trigger], count)
        yield executions
        calls = CounterMetricFamily(
            TOOL_CALLS.name, TOOL_CALLS.help, labels=list(TOOL_CALLS.labels)
        )
        for tool, status, count in snapshot.tool_calls:
            calls.add_metric([tool, status], count)
        yield calls
        durations = HistogramMetricFamily(
            TOOL_CALL_DURATION.name, TOOL_CALL_DURATION.help, labels=list(TOOL_CALL_DURATION.labels)
        )
        for tool, cumulative, total, count in snapshot.tool_histograms:
            _histogram(durations, [tool], TOOL_CALL_BUCKETS, cumulative, total, count)
        yield durations
        execution_durations = HistogramMetricFamily(
            EXECUTION_DURATION.name, EXECUTION_DURATION.help, labels=list(EXECUTION_DURATION.labels)
        )
        _histogram(execution_durations, [], EXECUTION_BUCKETS, *snapshot.execution_histogram)
        yield execution_durations
        yield GaugeMetricFamily(
            INTERACTIONS_OPEN.name, INTERACTIONS_OPEN.help, snapshot.interactions_open
        )


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
