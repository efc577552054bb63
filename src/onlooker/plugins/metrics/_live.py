"""The live plugin: a synchronous observer feeding prometheus-client counters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, assert_never, final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, Metric

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

from ._exposed import Exposed
from ._names import (
    EVENTS_DROPPED,
    EXECUTION_BUCKETS,
    EXECUTION_DURATION,
    EXECUTIONS,
    INTERACTIONS_OPEN,
    MAX_TRIGGERS,
    OBSERVER_ERRORS,
    OTHER,
    TOOL_CALL_BUCKETS,
    TOOL_CALL_DURATION,
    TOOL_CALLS,
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
            errors.add_metric([name], count)
        dropped = _family(EVENTS_DROPPED)
        for name, count in sorted(statistics.dropped_by_observer.items()):
            dropped.add_metric([name], count)
        return [errors, dropped]

    def describe(self) -> Iterable[Metric]:
        return [_family(OBSERVER_ERRORS), _family(EVENTS_DROPPED)]


def _family(spec: MetricSpec) -> CounterMetricFamily:
    return CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))


@final
class Metrics(Exposed):
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
        self._executions = Counter(*_spec(EXECUTIONS), registry=registry)
        self._tool_calls = Counter(*_spec(TOOL_CALLS), registry=registry)
        self._tool_duration = Histogram(
            *_spec(TOOL_CALL_DURATION), buckets=TOOL_CALL_BUCKETS, registry=registry
        )
        self._execution_duration = Histogram(
            *_spec(EXECUTION_DURATION), buckets=EXECUTION_BUCKETS, registry=registry
        )
        self._interactions_open = Gauge(*_spec(INTERACTIONS_OPEN), registry=registry)
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
        match event:
            case ToolCallFinished():
                key = (event.tool, event.status)
                children = self._call_children.get(key)
                if children is None:
                    label = self._tool_label(event.tool)
                    children = self._call_children[key] = (
                        self._tool_calls.labels(label, event.status),
                        self._tool_duration.labels(label),
                    )
                children[0].inc()
                children[1].observe(event.duration_ms / 1000)
            case ToolCallStarted():
                pass  # counted when it finishes
            case ExecutionStarted():
                trigger = event.trigger.kind
                if trigger not in self._triggers:
                    if len(self._triggers) >= MAX_TRIGGERS:
                        trigger = OTHER
                    else:
                        self._triggers.add(trigger)
                self._running[event.execution_id] = trigger
            case ExecutionFinished():
                trigger = self._running.pop(event.execution_id, OTHER)
                self._executions.labels(event.status, trigger).inc()
                self._execution_duration.observe(event.duration_ms / 1000)
            case InteractionStarted():
                self._open.add(event.interaction_id)
                self._interactions_open.set(len(self._open))
            case InteractionResolved():
                self._open.discard(event.interaction_id)
                self._interactions_open.set(len(self._open))
            case _:
                assert_never(event)


def _spec(spec: MetricSpec) -> tuple[str, str, tuple[str, ...]]:
    """A live metric's ``(name, documentation, labelnames)``."""
    return spec.name, spec.help, spec.labels


def plugin(*, registry: CollectorRegistry | None = None) -> Plugin[Metrics]:
    """Prometheus metrics of the engine's executions, in ``registry`` (default: a new one).

    The extension is a :class:`Metrics`: ``exposition()`` for the text
    format, ``serve(port)`` for an HTTP endpoint (closed with the engine).
    """

    def extension(ctx: PluginContext) -> Metrics:
        return Metrics(tools=ctx.tools, bus=ctx.bus, registry=registry)

    return define_plugin(id="metrics", extension=extension, observer=lambda metrics: metrics)
