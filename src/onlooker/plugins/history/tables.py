"""The history tables as SQLAlchemy Core ``Table`` objects, for your own queries.

>>> from onlooker.plugins.history import tables
>>> import sqlalchemy as sa
>>> slow = await store.query(lambda conn: conn.execute(
...     sa.select(tables.tool_calls.c.tool, tables.tool_calls.c.duration_ms)
...     .where(tables.tool_calls.c.duration_ms > 1000)).all())

Columns are described in ``docs/history.md``; ``NULL`` status means running
(executions, tool calls) or open (interactions).
"""

from __future__ import annotations

from ._schema import (
    HISTORY_SCHEMA_VERSION,
    events,
    executions,
    interactions,
    metadata,
    schema_version,
    tool_calls,
)

__all__ = [
    "HISTORY_SCHEMA_VERSION",
    "events",
    "executions",
    "interactions",
    "metadata",
    "schema_version",
    "tool_calls",
]
