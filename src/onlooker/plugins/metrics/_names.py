"""The metrics' names, help texts, labels and buckets: written once, for both sources.

The live plugin (``_live``) and the history-computed metrics (``_history``)
expose the same families; both build them from the specs here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

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


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: its name (without ``_total``), help text and label names."""

    name: str
    help: str
    labels: tuple[str, ...] = ()


EXECUTIONS: Final = MetricSpec(
    "onlooker_executions",
    "Finished executions, by final status and trigger kind.",
    ("status", "trigger"),
)
TOOL_CALLS: Final = MetricSpec(
    "onlooker_tool_calls",
    "Finished tool calls, by tool (registered names, else 'other') and status.",
    ("tool", "status"),
)
TOOL_CALL_DURATION: Final = MetricSpec(
    "onlooker_tool_call_duration_seconds", "Tool call duration in seconds, by tool.", ("tool",)
)
EXECUTION_DURATION: Final = MetricSpec(
    "onlooker_execution_duration_seconds", "Execution duration in seconds."
)
INTERACTIONS_OPEN: Final = MetricSpec(
    "onlooker_interactions_open", "Questions asked of a person and not yet resolved."
)
OBSERVER_ERRORS: Final = MetricSpec(
    "onlooker_observer_errors",
    "Exceptions raised by observers (logged and swallowed), by plugin.",
    ("plugin",),
)
EVENTS_DROPPED: Final = MetricSpec(
    "onlooker_events_dropped",
    "Events an async observer did not get (full drop queue, stall, dead observer, shutdown), by plugin.",
    ("plugin",),
)
