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

from ._exposed import MetricsServer
from ._history import HistoryMetrics, metrics_from_history
from ._live import Metrics, plugin
from ._names import EXECUTION_BUCKETS, OTHER, TOOL_CALL_BUCKETS

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
