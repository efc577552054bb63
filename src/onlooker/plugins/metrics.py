"""Prometheus metrics: executions, tool calls, durations, open questions, observer health.

>>> metrics = onlooker.plugins.metrics.plugin()
>>> async with onlooker.ExecutionEngine(tools=[...], plugins=[metrics]) as engine:
...     server = engine.extension(metrics).serve(9464)     # http://127.0.0.1:9464/metrics
...     await engine.execute(program)
...     print(engine.extension(metrics).exposition())

Every metric lives in the plugin's own ``CollectorRegistry`` (never the
global one). The ``tool`` label only takes registered tool names; any other
name a program calls is counted as ``"other"``, so a hostile program cannot
explode the label set. :func:`metrics_from_history` serves the same metric
names from a history database instead (``onlooker metrics serve``).
See ``docs/metrics.md``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self, final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from onlooker import EventBus, ExecutionEvent, Plugin, PluginContext, ToolRegistry, define_plugin

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from onlooker.plugins.history import HistoryStore

__all__ = [
    "EXECUTION_BUCKETS",
    "OTHER",
    "TOOL_CALL_BUCKETS",
    "HistoryMetrics",
    "Metrics",
    "MetricsServer",
    "metrics_from_history",
    "plugin",
]

OTHER: Final = "other"
"""The ``tool`` (and ``trigger``) label of everything outside the bounded label set."""
TOOL_CALL_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
)  # fmt: skip
"""Bucket bounds (seconds) of ``onlooker_tool_call_duration_seconds``."""
EXECUTION_BUCKETS: Final = (
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip
"""Bucket bounds (seconds) of ``onlooker_execution_duration_seconds``."""
MAX_TRIGGERS: Final = 32
"""Distinct ``trigger`` labels kept; later ones count as ``"other"``."""

_HELP: Final = {
    "executions": "Finished executions, by final status and trigger kind.",
    "tool_calls": "Finished tool calls, by tool (registered names, else 'other') and status.",
    "tool_duration": "Tool call duration in seconds, by tool.",
    "execution_duration": "Execution duration in seconds.",
    "interactions_open": "Questions asked of a person and not yet resolved.",
    "observer_errors": "Exceptions raised by observers (logged and swallowed), by plugin.",
    "dropped": "Events dropped by full overflow='drop' observer queues, by plugin.",
}


@final
class MetricsServer:
    """An HTTP endpoint serving ``/metrics``; close it with :meth:`close` or ``with``."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, host: str) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        """The interface it listens on."""
        self.port: int = server.server_port
        """The TCP port (the real one when ``serve(0)`` picked a free port)."""
        self._closed = False

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Exposed:
    """A registry with text exposition and HTTP serving; servers close with it."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.registry: CollectorRegistry = (
            registry if registry is not None else CollectorRegistry(auto_describe=True)
        )
        """The plugin's own registry (never prometheus-client's global one)."""
        self._servers: list[MetricsServer] = []

    def exposition(self) -> str:
        """The metrics in the Prometheus text format."""
        return generate_latest(self.registry).decode("utf-8")

    def serve(self, port: int, host: str = "127.0.0.1") -> MetricsServer:
        """Serve the metrics over HTTP on ``host:port`` (``port=0``: a free port), in a thread.

        Loopback by default; pass ``host="0.0.0.0"`` to listen on every
        interface. The server is closed when the engine (or this object) is.
        """
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        endpoint = MetricsServer(server, thread, host)
        self._servers.append(endpoint)
        return endpoint

    def close(self) -> None:
        """Close every server :meth:`serve` started."""
        while self._servers:
            self._servers.pop().close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _BusCollector:
    """Observer errors and drops, read from the bus at scrape time."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus

    def collect(self) -> Iterable[Metric]:
        statistics = self._bus.statistics()
        errors = CounterMetricFamily(
            "onlooker_observer_errors", _HELP["observer_errors"], labels=["plugin"]
        )
        for name, count in sorted(statistics.errors_by_observer.items()):
            errors.add_metric([name], count)
        dropped = CounterMetricFamily(
            "onlooker_events_dropped", _HELP["dropped"], labels=["plugin"]
        )
        for name, count in sorted(statistics.dropped_by_observer.items()):
            dropped.add_metric([name], count)
        return [errors, dropped]

    def describe(self) -> Iterable[Metric]:
        return [
            CounterMetricFamily("onlooker_observer_errors", _HELP["observer_errors"]),
            CounterMetricFamily("onlooker_events_dropped", _HELP["dropped"]),
        ]


@final
class Metrics(_Exposed):
    """The metrics plugin's extension: a synchronous observer feeding prometheus-client.

    ``tools`` bounds the ``tool`` label: tool names, or the engine's
    ``ToolRegistry``, whose foreign tools declared later (``engine.declare_tool``)
    are labelled by name too; ``bus`` feeds the observer-health counters
    (both come from the engine when the plugin builds it).
    """

    def __init__(
        self,
        *,
        tools: Iterable[str] | ToolRegistry = (),
        bus: EventBus | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        super().__init__(registry)
        registry = self.registry
        self._registry = tools if isinstance(tools, ToolRegistry) else None
        self._tools = frozenset(tools)
        self._executions = Counter(
            "onlooker_executions", _HELP["executions"], ["status", "trigger"], registry=registry
        )
        self._tool_calls = Counter(
            "onlooker_tool_calls", _HELP["tool_calls"], ["tool", "status"], registry=registry
        )
        self._tool_duration = Histogram(
            "onlooker_tool_call_duration_seconds",
            _HELP["tool_duration"],
            ["tool"],
            buckets=TOOL_CALL_BUCKETS,
            registry=registry,
        )
        self._execution_duration = Histogram(
            "onlooker_execution_duration_seconds",
            _HELP["execution_duration"],
            buckets=EXECUTION_BUCKETS,
            registry=registry,
        )
        self._interactions_open = Gauge(
            "onlooker_interactions_open", _HELP["interactions_open"], registry=registry
        )
        if bus is not None:
            registry.register(_BusCollector(bus))
        self._call_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._triggers: set[str] = set()
        self._running: dict[str, str] = {}
        self._open: set[str] = set()

    def _tool_label(self, tool: str) -> str:
        if tool in self._tools:
            return tool
        if self._registry is not None and self._registry.declaration(tool) is not None:
            return tool  # a foreign tool the engine was told about: a bounded set too
        return OTHER

    def handle(self, event: ExecutionEvent) -> None:
        """Count one event (the plugin's synchronous observer)."""
        kind = event.kind
        if kind == "ToolCallFinished":
            key = (event.tool, event.status)  # type: ignore[union-attr]
            children = self._call_children.get(key)
            if children is None:
                label = self._tool_label(event.tool)  # type: ignore[union-attr]
                children = self._call_children[key] = (
                    self._tool_calls.labels(label, key[1]),
                    self._tool_duration.labels(label),
                )
            children[0].inc()
            children[1].observe(event.duration_ms / 1000)  # type: ignore[union-attr]
        elif kind == "ExecutionStarted":
            trigger = event.trigger.kind  # type: ignore[union-attr]
            if trigger not in self._triggers:
                if len(self._triggers) >= MAX_TRIGGERS:
                    trigger = OTHER
                else:
                    self._triggers.add(trigger)
            self._running[event.execution_id] = trigger
        elif kind == "ExecutionFinished":
            trigger = self._running.pop(event.execution_id, OTHER)
            self._executions.labels(event.status, trigger).inc()  # type: ignore[union-attr]
            self._execution_duration.observe(event.duration_ms / 1000)  # type: ignore[union-attr]
        elif kind == "InteractionStarted":
            self._open.add(event.interaction_id)  # type: ignore[union-attr]
            self._interactions_open.set(len(self._open))
        elif kind == "InteractionResolved":
            self._open.discard(event.interaction_id)  # type: ignore[union-attr]
            self._interactions_open.set(len(self._open))


def plugin(*, registry: CollectorRegistry | None = None) -> Plugin[Metrics]:
    """Prometheus metrics of the engine's executions, in ``registry`` (default: a new one).

    The extension is a :class:`Metrics`: ``exposition()`` for the text
    format, ``serve(port)`` for an HTTP endpoint (closed with the engine).
    """

    def extension(ctx: PluginContext) -> Metrics:
        return Metrics(tools=ctx.tools, bus=ctx.bus, registry=registry)

    return define_plugin(id="metrics", extension=extension, observer=lambda metrics: metrics)


# -- metrics from a history database ---------------------------------------------------


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
class HistoryMetrics(_Exposed):
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
            "onlooker_executions", _HELP["executions"], labels=["status", "trigger"]
        )
        for status, trigger, count in snapshot.executions:
            executions.add_metric([status, trigger], count)
        yield executions
        calls = CounterMetricFamily(
            "onlooker_tool_calls", _HELP["tool_calls"], labels=["tool", "status"]
        )
        for tool, status, count in snapshot.tool_calls:
            calls.add_metric([tool, status], count)
        yield calls
        durations = HistogramMetricFamily(
            "onlooker_tool_call_duration_seconds", _HELP["tool_duration"], labels=["tool"]
        )
        for tool, cumulative, total, count in snapshot.tool_histograms:
            _histogram(durations, [tool], TOOL_CALL_BUCKETS, cumulative, total, count)
        yield durations
        execution_durations = HistogramMetricFamily(
            "onlooker_execution_duration_seconds", _HELP["execution_duration"], labels=[]
        )
        _histogram(execution_durations, [], EXECUTION_BUCKETS, *snapshot.execution_histogram)
        yield execution_durations
        yield GaugeMetricFamily(
            "onlooker_interactions_open", _HELP["interactions_open"], snapshot.interactions_open
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
