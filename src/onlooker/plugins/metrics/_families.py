"""Counts → prometheus metric families: one exposition for both sources.

The live plugin (``_live``) counts events in plain dicts and the history
metrics (``_history``) read aggregates from a database; both fill a
:class:`MetricsSnapshot` and expose it through :func:`families`, so the two
cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ._names import (
    EXECUTION_BUCKETS,
    EXECUTION_DURATION,
    EXECUTIONS,
    INTERACTIONS_OPEN,
    TOOL_CALL_BUCKETS,
    TOOL_CALL_DURATION,
    TOOL_CALLS,
)


@dataclass(slots=True)
class MetricsSnapshot:
    """What the metrics say at one moment; histogram buckets are cumulative counts."""

    executions: list[tuple[str, str, int]] = field(default_factory=list)
    """``(status, trigger, count)``."""
    tool_calls: list[tuple[str, str, int]] = field(default_factory=list)
    """``(tool, status, count)``."""
    tool_histograms: list[tuple[str, list[int], float, int]] = field(default_factory=list)
    """``(tool, cumulative bucket counts, sum of seconds, count)``."""
    execution_histogram: tuple[list[int], float, int] = (
        [0] * len(EXECUTION_BUCKETS),
        0.0,
        0,
    )
    interactions_open: int = 0


def families(snapshot: MetricsSnapshot) -> Iterator[Metric]:
    """The snapshot as prometheus metric families (a collector's ``collect``)."""
    executions = CounterMetricFamily(
        EXECUTIONS.name, EXECUTIONS.help, labels=list(EXECUTIONS.labels)
    )
    for status, trigger, count in snapshot.executions:
        executions.add_metric([status, trigger], count)
    yield executions
    calls = CounterMetricFamily(TOOL_CALLS.name, TOOL_CALLS.help, labels=list(TOOL_CALLS.labels))
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
