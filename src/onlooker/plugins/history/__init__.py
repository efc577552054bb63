"""The history store: executions, tool calls and interactions in SQL.

>>> history = onlooker.plugins.history.plugin()          # .onlooker/history.db
>>> async with onlooker.ExecutionEngine(tools=[...], plugins=[history]) as engine:
...     await engine.execute(program)
>>> async with onlooker.plugins.history.open(read_only=True) as store:  # any process, later
...     page = await store.list_executions(status="failed", limit=20)
...     tree = await store.get_execution(page[0].execution_id)

SQLite by default (WAL mode); PostgreSQL through ``postgresql+psycopg://``
for many processes or machines. See ``docs/history.md``.
"""

from __future__ import annotations

from ._plugin import plugin
from ._records import (
    ExecutionList,
    ExecutionRecord,
    ExecutionTree,
    HistoryStats,
    InteractionRecord,
    RecordedExecutionStatus,
    RecordedInteractionStatus,
    RecordedToolCallStatus,
    ToolCallRecord,
    ToolStats,
)
from ._schema import HISTORY_SCHEMA_VERSION
from ._store import HistoryStore, open
from ._writer import HistoryWriterStatistics

__all__ = [
    "HISTORY_SCHEMA_VERSION",
    "ExecutionList",
    "ExecutionRecord",
    "ExecutionTree",
    "HistoryStats",
    "HistoryStore",
    "HistoryWriterStatistics",
    "InteractionRecord",
    "RecordedExecutionStatus",
    "RecordedInteractionStatus",
    "RecordedToolCallStatus",
    "ToolCallRecord",
    "ToolStats",
    "open",
    "plugin",
]
