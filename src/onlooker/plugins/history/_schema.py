"""The tables, the schema version, and migrations.

Schema history: version 1 is the raw event log alone (``events``); version 2
adds the projections (``executions``, ``tool_calls``, ``interactions``),
which a migration rebuilds from the log; version 3 keys a tool call and a
question by their execution too (a tracked run takes its framework's ids,
unique only within the run). Because every projection is derived from
``events``, each projection change migrates the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine, UserDefinedType

from onlooker import HistoryError, SchemaVersionError
from onlooker._shared import json_loads, noting_long_ints

__all__ = [
    "HISTORY_SCHEMA_VERSION",
    "KEEP_SMALLEST",
    "PROJECTIONS",
    "SET_BY_END",
    "check_schema",
    "events",
    "executions",
    "interactions",
    "metadata",
    "schema_version",
    "setup_schema",
    "tool_calls",
]

HISTORY_SCHEMA_VERSION: Final = 3
"""The version of the history tables this onlooker reads and writes."""


class _PgJson(UserDefinedType[Any]):
    """PostgreSQL ``json``: exact text kept (``\\u0000`` allowed), parsed by psycopg on read."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "JSON"


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class Json(TypeDecorator[Any]):
    """A JSON value: ``TEXT`` on SQLite, ``json`` on PostgreSQL; SQL ``NULL`` for ``None``."""

    impl = sa.Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(_PgJson())
        return dialect.type_descriptor(sa.Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        try:
            return _compact_json(value)
        except ValueError as exc:
            return noting_long_ints(exc, value, _compact_json)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if isinstance(value, str) and dialect.name != "postgresql":
            return json_loads(value)
        return value


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime: ``timestamptz`` on PostgreSQL, sortable text on SQLite."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"a naive datetime is ambiguous here, give it a timezone: {value}")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


KEEP_SMALLEST: Final = {"merge": "min"}
"""A projection column's ``info``: when events disagree, the smallest value wins."""

SET_BY_END: Final = {"merge": "end"}
"""A projection column's ``info``: the entity's end (``status`` and what its closing
event says) is set once. A second end under another event id (a merged or forged
trail) changes nothing the first one recorded.

Every other projection column takes a value when an event knows it (``COALESCE``:
a value once known never becomes ``NULL``), the end's over the start's (an
attribution that changed during the run reads as it was at the end), so writing
the same events twice, or in any order, gives the same rows.
"""

metadata: Final = sa.MetaData()

schema_version: Final = sa.Table(
    "schema_version",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.Integer, nullable=False),
)

events: Final = sa.Table(
    "events",
    metadata,
    sa.Column("event_id", sa.Text, primary_key=True),
    sa.Column("execution_id", sa.Text, nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("body", Json, nullable=False),
    sa.Index("ix_events_execution_seq", "execution_id", "seq"),
)

executions: Final = sa.Table(
    "executions",
    metadata,
    sa.Column("execution_id", sa.Text, primary_key=True),
    sa.Column("program", sa.Text),
    sa.Column("trigger", sa.Text),
    sa.Column("trigger_metadata", Json),
    sa.Column("owner", sa.Text),
    sa.Column("input", Json),
    sa.Column("status", sa.Text, info=SET_BY_END),  # NULL while running
    sa.Column("result", Json, info=SET_BY_END),
    sa.Column("error", Json, info=SET_BY_END),
    sa.Column("started_at", UtcDateTime),
    sa.Column("finished_at", UtcDateTime, info=SET_BY_END),
    sa.Column("duration_ms", sa.Float, info=SET_BY_END),
    sa.Column("parent_execution_id", sa.Text),
    sa.Column("parent_tool_call_id", sa.Text),
    sa.Column("depth", sa.Integer, nullable=False),
    sa.Column("task_id", sa.Text),
    sa.Column("phase", sa.Text),
    sa.Column("intent_id", sa.Text),
    # started_at when known, else finished_at: the key of newest-first pagination
    sa.Column("sort_at", UtcDateTime, nullable=False, info=KEEP_SMALLEST),
    sa.Index("ix_executions_sort", "sort_at", "execution_id"),
    sa.Index("ix_executions_parent", "parent_execution_id"),
    sa.Index("ix_executions_status_sort", "status", "sort_at"),
    sa.Index("ix_executions_trigger_sort", "trigger", "sort_at"),
)

tool_calls: Final = sa.Table(
    "tool_calls",
    metadata,
    sa.Column("tool_call_id", sa.Text, primary_key=True),
    sa.Column("execution_id", sa.Text, primary_key=True),  # ids are unique per execution
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("status", sa.Text, info=SET_BY_END),  # NULL while running
    sa.Column("args", Json),
    sa.Column("result", Json, info=SET_BY_END),
    sa.Column("error", Json, info=SET_BY_END),
    sa.Column("metadata", Json, info=SET_BY_END),
    sa.Column("duration_ms", sa.Float, info=SET_BY_END),
    sa.Column("started_at", UtcDateTime),
    sa.Column("finished_at", UtcDateTime, info=SET_BY_END),
    sa.Column("seq", sa.Integer, nullable=False, info=KEEP_SMALLEST),
    sa.Column("phase", sa.Text),
    sa.Column("task_id", sa.Text),
    sa.Column("intent_id", sa.Text),
    sa.Index("ix_tool_calls_execution_seq", "execution_id", "seq"),
    sa.Index("ix_tool_calls_tool_execution", "tool", "execution_id"),
    sa.Index("ix_tool_calls_finished", "finished_at"),
)

interactions: Final = sa.Table(
    "interactions",
    metadata,
    sa.Column("interaction_id", sa.Text, primary_key=True),
    sa.Column("execution_id", sa.Text, primary_key=True),  # ids are unique per execution
    sa.Column("message", sa.Text),
    sa.Column("requested_schema", Json),
    sa.Column("mode", sa.Text),
    sa.Column("status", sa.Text, info=SET_BY_END),  # NULL while open
    sa.Column("response", Json, info=SET_BY_END),
    sa.Column("error", Json, info=SET_BY_END),
    sa.Column("started_at", UtcDateTime),
    sa.Column("resolved_at", UtcDateTime, info=SET_BY_END),
    sa.Column("seq", sa.Integer, nullable=False, info=KEEP_SMALLEST),
    sa.Index("ix_interactions_execution_seq", "execution_id", "seq"),
    sa.Index("ix_interactions_status", "status"),
)

PROJECTIONS: Final = (executions, tool_calls, interactions)
"""The tables derived from ``events``; each is keyed by its primary key."""
_ADVISORY_LOCK: Final = 0x6F6E6C6F  # "onlo": serializes schema setup across processes


def setup_schema(
    conn: Connection, rebuild: Callable[[Connection], None], name: str = "the history database"
) -> int:
    """Create missing tables, check the version, migrate an older schema.

    Runs in the caller's transaction. ``rebuild`` re-derives the projections
    from ``events`` (a migration step). Returns the version found before
    setup (0 for a new database). ``name`` (the URL, password hidden) goes in
    the error messages.
    """
    # A schema already whole needs no lock: another connection's long write (a lock held
    # for long) must not stop a start that has nothing to create.
    inspector = sa.inspect(conn)
    if inspector.has_table("schema_version") and _version(conn, inspector, name) == (
        HISTORY_SCHEMA_VERSION
    ):
        return HISTORY_SCHEMA_VERSION
    # One process sets the schema up at a time; the others wait, then find it whole.
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK})
    elif conn.dialect.name == "sqlite" and not getattr(
        conn.connection.dbapi_connection, "in_transaction", True
    ):
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the driver would commit each CREATE alone
    inspector = sa.inspect(conn)  # anew: what it cached may have changed meanwhile
    if not inspector.has_table("schema_version"):
        taken = [t.name for t in metadata.sorted_tables if inspector.has_table(t.name)]
        if taken:  # another program's tables under our names: leave its database as it is
            raise HistoryError(
                "the database is not an onlooker history database: it has no schema_version "
                f"table but has tables named {', '.join(taken)}; give history a database "
                "of its own"
            )
        metadata.create_all(conn, checkfirst=True)
        conn.execute(sa.insert(schema_version).values(id=1, version=HISTORY_SCHEMA_VERSION))
        return 0
    found = _version(conn, inspector, name)
    if found is None:
        raise SchemaVersionError(
            f"{name} has an empty schema_version table; it was not made by onlooker",
            found=0,
            supported=HISTORY_SCHEMA_VERSION,
        )
    if found < HISTORY_SCHEMA_VERSION:
        _migrate(conn, found, rebuild)
    return int(found)


def check_schema(conn: Connection, name: str) -> None:
    """For a read-only store: the schema must be there, at this version; nothing is created.

    ``name`` (the URL, password hidden) goes in the error messages.
    """
    inspector = sa.inspect(conn)
    if not inspector.has_table("schema_version"):
        raise HistoryError(
            f"{name} is not an onlooker history database (it has no schema_version table)"
        )
    found = _version(conn, inspector, name)
    if found is None:
        raise HistoryError(f"{name} has an empty schema_version table")
    if found != HISTORY_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the history database {name} has schema version {found} and needs a migration, "
            "which a read-only open cannot do: open it once for writing (history.open(url), "
            "or any `onlooker history` command)",
            found=found,
            supported=HISTORY_SCHEMA_VERSION,
        )


def _version(conn: Connection, inspector: sa.Inspector, name: str) -> int | None:
    """The version in a ``schema_version`` table found in the database, once the database
    is known to be onlooker's: every version has had its ``events`` table, as onlooker
    makes it. Another program's ``schema_version`` (a common name) is an error, and its
    database is left as it is; so is a version that is not an integer or is newer."""
    ours = inspector.has_table("events") and {
        column["name"] for column in inspector.get_columns("events")
    }.issuperset(_EVENT_COLUMNS)
    if not ours:
        raise HistoryError(
            f"{name} is not an onlooker history database: it has a schema_version table "
            "but not onlooker's events table; give history a database of its own"
        )
    found = conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar()
    if isinstance(found, Decimal) and found == found.to_integral_value():
        found = int(found)  # a numeric column (a migration tool's): the same version
    if found is not None and (isinstance(found, bool) or not isinstance(found, int)):
        raise HistoryError(
            f"{name} is not an onlooker history database: its schema_version holds "
            f"{found!r}, not a version number"
        )
    if found is not None and found > HISTORY_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{name} has schema version {found}, newer than the version "
            f"{HISTORY_SCHEMA_VERSION} this onlooker supports: upgrade onlooker",
            found=found,
            supported=HISTORY_SCHEMA_VERSION,
        )
    return found


_EVENT_COLUMNS: Final = frozenset(column.name for column in events.columns)


def _migrate(conn: Connection, found: int, rebuild: Callable[[Connection], None]) -> None:
    if found < 1:
        raise SchemaVersionError(
            f"the history database has an unknown schema version {found}",
            found=found,
            supported=HISTORY_SCHEMA_VERSION,
        )
    # 1 -> 2: the projections appear; 2 -> 3: they are keyed anew. Rebuilt from the log.
    for table in PROJECTIONS:
        table.drop(conn, checkfirst=True)
    metadata.create_all(conn, checkfirst=True)
    rebuild(conn)
    conn.execute(sa.update(schema_version).values(version=HISTORY_SCHEMA_VERSION))
