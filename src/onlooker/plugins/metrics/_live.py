"""The live plugin: a synchronous observer counting events, exposed through prometheus-client."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from itertools import accumulate
from typing import assert_never, final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from onlooker import (
    EventBus,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionStarted,
    Plugin,
    PluginContext,
    ToolCallFinished,
    ToolCallStarted,
    ToolRegistry,
    define_plugin,
)
from onlooker._shared import without_surrogates

from ._exposed import Exposed
from ._families import MetricsSnapshot, families
from ._names import (
    EVENTS_DROPPED,
    EXECUTION_BUCKETS,
    MAX_TRIGGERS,
    OBSERVER_ERRORS,
    OTHER,
    TOOL_CALL_BUCKETS,
    MetricSpec,
)


class _BusCollector:
    """Observer errors and drops, read from the bus at scrape time."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus

    def collect(self) -> Iterable[Metric]:
        statistics = self._bus.statistics()
        errors = _family(OBSERVER_ERRORS)
        for name, count in sorted(statistics.errors_by_observer.items()):
            errors.add_metric([without_surrogates(name)], count)
        dropped = _family(EVENTS_DROPPED)
        for name, count in sorted(statistics.dropped_by_observer.items()):
            dropped.add_metric([without_surrogates(name)], count)
        return [errors, dropped]

    def describe(self) -> Iterable[Metric]:
        return [_family(OBSERVER_ERRORS), _family(EVENTS_DROPPED)]


def _family(spec: MetricSpec) -> CounterMetricFamily:
    return CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))


@final
class _Histogram:
    """One histogram's counts: per bucket (not cumulative), the sum and the count."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.buckets = [0] * (len(bounds) + 1)  # the last one is +Inf only
        self.total = 0.0
        self.count = 0

    def cumulative(self) -> list[int]:
        """Cumulative counts of the bounded buckets (prometheus's ``le`` buckets)."""
        return list(accumulate(self.buckets[:-1]))


@final
class Metrics(Exposed):
    """The metrics plugin's extension: a synchronous observer counting events.

    It counts in plain dicts, on the execution's own thread, and builds the
    prometheus metric families only when scraped: a prometheus-client
    ``Counter.labels(...).inc()`` takes a lock per update, which a tool call
    would pay twice. ``tools`` bounds the ``tool`` label: tool names, or the
    engine's ``ToolRegistry``, whose foreign tools declared later
    (``engine.declare_tool``) are labelled by name too; ``bus`` feeds the
    observer-health counters (both come from the engine when the plugin
    builds it).
    """

    def __init__(
        self,
        *,
        tools: Iterable[str] | ToolRegistry = (),
        bus: EventBus | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        super().__init__(registry)
        self._registry = tools if isinstance(tools, ToolRegistry) else None
        self._tools = frozenset(tools)
        self._executions: dict[tuple[str, str], int] = {}
        self._tool_calls: dict[tuple[str, str], int] = {}
        self._labels: dict[str, str] = {}
        """Tool name → its ``tool`` label."""
        self._tool_durations: dict[str, _Histogram] = {}
        self._execution_duration = _Histogram(EXECUTION_BUCKETS)
        self._triggers: set[str] = set()
        self._running: dict[str, str] = {}
        self._open: set[tuple[str, str]] = set()  # (execution, interaction): ids are per run
        collectors: list[Collector] = [self]
        if bus is not None:
            collectors.append(_BusCollector(bus))
        try:
            for collector in collectors:
                self._register(collector)
        except BaseException:
            # A registry already holding these names (a second engine on a shared one):
            # leave it as it was, not with half of ours registered twice.
            self._unregister_all()
            raise

    def _tool_label(self, tool: str) -> str:
        label = self._labels.get(tool)
        if label is not None:
            return label
        if tool in self._tools or (
            # a foreign tool the engine was told about: a bounded set too
            self._registry is not None and self._registry.declaration(tool) is not None
        ):
            label = without_surrogates(tool)  # the exposition is UTF-8
        else:
            return OTHER  # not cached: a tool declared later gets its own label
        self._labels[tool] = label
        return label

    def handle(self, event: ExecutionEvent) -> None:
        """Count one event (the plugin's synchronous observer)."""
        match event:
            case ToolCallFinished():
                label = self._tool_label(event.tool)
                key = (label, event.status)
                self._tool_calls[key] = self._tool_calls.get(key, 0) + 1
                histogram = self._tool_durations.get(label)
                if histogram is None:
                    histogram = self._tool_durations[label] = _Histogram(TOOL_CALL_BUCKETS)
                _observe(histogram, TOOL_CALL_BUCKETS, event.duration_ms / 1000)
            case ToolCallStarted():
                pass  # counted when it finishes
            case ExecutionStarted():
                trigger = without_surrogates(event.trigger.kind)  # the exposition is UTF-8
                if trigger not in self._triggers:
                    if len(self._triggers) >= MAX_TRIGGERS:
                        trigger = OTHER
                    else:
                        self._triggers.add(trigger)
                self._running[event.execution_id] = trigger
            case ExecutionFinished():
                ended = (event.status, self._running.pop(event.execution_id, OTHER))
                self._executions[ended] = self._executions.get(ended, 0) + 1
                _observe(self._execution_duration, EXECUTION_BUCKETS, event.duration_ms / 1000)
            case InteractionStarted():
                self._open.add((event.execution_id, event.interaction_id))
            case InteractionResolved():
                self._open.discard((event.execution_id, event.interaction_id))
            case _:
                assert_never(event)

    def describe(self) -> Iterator[Metric]:
        """The families' names, so any registry (``auto_describe`` or not) refuses a
        second collector of the same names instead of exposing every family twice."""
        return families(MetricsSnapshot())

    def collect(self) -> Iterator[Metric]:
        """The prometheus-client collector protocol: the counts as metric families."""
        # Copies first: a scrape runs in the HTTP server's thread while events arrive.
        executions = self._executions.copy()
        tool_calls = self._tool_calls.copy()
        durations = self._tool_durations.copy()
        execution = self._execution_duration
        snapshot = MetricsSnapshot(
            executions=[(s, t, n) for (s, t), n in sorted(executions.items())],
            tool_calls=[(tool, s, n) for (tool, s), n in sorted(tool_calls.items())],
            tool_histograms=[
                (tool, h.cumulative(), h.total, h.count) for tool, h in sorted(durations.items())
            ],
            execution_histogram=(execution.cumulative(), execution.total, execution.count),
            interactions_open=len(self._open),
        )
        return families(snapshot)


def _observe(histogram: _Histogram, bounds: tuple[float, ...], seconds: float) -> None:
    histogram.buckets[bisect_left(bounds, seconds)] += 1  # the first bound >= seconds: ``le``
    histogram.total += seconds
    histogram.count += 1


def plugin(*, registry: CollectorRegistry | None = None) -> Plugin[Metrics]:
    """Prometheus metrics of the engine's executions, in ``registry`` (default: a new one).

    The extension is a :class:`Metrics`: ``exposition()`` for the text
    format, ``serve(port)`` for an HTTP endpoint (closed with the engine).
    Anything but a ``CollectorRegistry`` or ``None`` is a ``TypeError`` here.
    """
    if registry is not None and not isinstance(registry, CollectorRegistry):
        raise TypeError(f"registry must be a prometheus_client CollectorRegistry, not {registry!r}")

    def extension(ctx: PluginContext) -> Metrics:
        return Metrics(tools=ctx.tools, bus=ctx.bus, registry=registry)

    return define_plugin(id="metrics", extension=extension, observer=lambda metrics: metrics)
