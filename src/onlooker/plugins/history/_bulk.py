"""Rows into the database in bulk, one batch per transaction.

SQLite takes each table's rows through the driver's ``executemany``.
PostgreSQL takes them through ``COPY`` into session-private staging tables
and one ``INSERT ... SELECT`` per table: psycopg's ``executemany`` spends
about 25 µs of Python per row on the writer thread, ``COPY`` about a third
of that (``bench/history.py``).

Every statement is derived from the tables in ``_schema.py``: the column
lists, the conflict key (a table's primary key) and how a projection
column merges with what is stored (``COALESCE``: a value, once known,
never becomes ``NULL``; the end's values win over the start's, whichever
is written first; :data:`~._schema.KEEP_SMALLEST` columns keep the
smaller; :data:`~._schema.SET_BY_END` columns are set by the entity's
first end only).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._rows import Row, Rows
from ._schema import KEEP_SMALLEST, PROJECTIONS, SET_BY_END, events

__all__ = ["Bulk", "PostgresBulk", "SqliteBulk", "bulk_for"]


def _columns(table: sa.Table) -> tuple[str, ...]:
    return tuple(column.name for column in table.c)


def _merge_clause(table: sa.Table) -> str:
    """``ON CONFLICT`` for a projection: merge the new row into the stored one."""
    name = table.name
    keys = ", ".join(column.name for column in table.primary_key.columns)
    updates = []
    for column in table.c:
        if column.primary_key:
            continue
        c = column.name
        if column.info == KEEP_SMALLEST:
            updates.append(
                f"{c} = CASE WHEN excluded.{c} < {name}.{c} THEN excluded.{c} ELSE {name}.{c} END"
            )
        elif column.info == SET_BY_END:  # an entity that has ended keeps its end
            updates.append(
                f"{c} = CASE WHEN {name}.status IS NULL "
                f"THEN COALESCE(excluded.{c}, {name}.{c}) ELSE {name}.{c} END"
            )
        else:  # the last value known, but an ended entity keeps its end's
            updates.append(
                f"{c} = CASE WHEN {name}.status IS NULL THEN COALESCE(excluded.{c}, {name}.{c}) "
                f"ELSE COALESCE({name}.{c}, excluded.{c}) END"
            )
    return f"ON CONFLICT ({keys}) DO UPDATE SET {', '.join(updates)}"


_EVENTS_CONFLICT: Final = "ON CONFLICT (event_id) DO NOTHING"  # idempotent by event id


def _tuples(rows: Iterable[Row], columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """The rows in column order; a column a row does not name is ``NULL``."""
    whole = itemgetter(*columns)
    out = []
    for row in rows:
        try:
            out.append(whole(row))  # an entity seen whole in this batch: the common case
        except KeyError:
            out.append(tuple(map(row.get, columns)))
    return out


class Bulk:
    """Writes a batch's rows; one subclass per backend."""

    def write(self, conn: Connection, rows: Rows) -> int:
        """Insert the events and merge the projections; returns how many events were new."""
        raise NotImplementedError

    def project(self, conn: Connection, rows: Rows) -> None:
        """Merge the projection rows alone (rebuilding the projections from the log)."""
        raise NotImplementedError


class SqliteBulk(Bulk):
    """``executemany`` per table."""

    def __init__(self) -> None:
        self._events = self._insert(events, _EVENTS_CONFLICT)
        self._projections = [
            (table.name, _columns(table), self._insert(table, _merge_clause(table)))
            for table in PROJECTIONS
        ]

    @staticmethod
    def _insert(table: sa.Table, conflict: str) -> str:
        columns = _columns(table)
        values = ", ".join("?" * len(columns))
        return f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({values}) {conflict}"

    def write(self, conn: Connection, rows: Rows) -> int:
        new = conn.exec_driver_sql(self._events, rows.events).rowcount
        self.project(conn, rows)
        return max(new, 0)

    def project(self, conn: Connection, rows: Rows) -> None:
        for name, columns, statement in self._projections:
            entities = getattr(rows, name)
            if entities:
                conn.exec_driver_sql(statement, _tuples(entities.values(), columns))


_STAGED: Final = "onlooker_staged_"  # + table name: a temporary table of the session


class PostgresBulk(Bulk):
    """``COPY`` into temporary staging tables, then ``INSERT ... SELECT`` per table.

    The staging tables are created once per session (``IF NOT EXISTS``, in
    the batch's transaction) and emptied by every commit.
    """

    def __init__(self, dialect: sa.Dialect) -> None:
        self._create = ";".join(
            f"CREATE TEMP TABLE IF NOT EXISTS {_STAGED}{table.name} ("
            + ", ".join(f"{c.name} {c.type.compile(dialect=dialect)}" for c in table.c)
            + ") ON COMMIT DELETE ROWS"
            for table in (events, *PROJECTIONS)
        )
        self._tables = {
            table.name: (
                _columns(table),
                f"COPY {_STAGED}{table.name} FROM STDIN",
                self._insert(table, _EVENTS_CONFLICT if table is events else _merge_clause(table)),
            )
            for table in (events, *PROJECTIONS)
        }
        self._direct = f"COPY events ({', '.join(_columns(events))}) FROM STDIN"
        self._duplicate: type[Exception] = dialect.loaded_dbapi.errors.UniqueViolation

    @staticmethod
    def _insert(table: sa.Table, conflict: str) -> str:
        columns = ", ".join(_columns(table))
        return (
            f"INSERT INTO {table.name} ({columns}) "
            f"SELECT {columns} FROM {_STAGED}{table.name} {conflict}"
        )

    # Each statement is a round trip to the server, and while the program runs each can
    # also wait for the GIL for a switch interval: a batch sends as few as it can,
    # statements without results joined into one.

    def write(self, conn: Connection, rows: Rows) -> int:
        with _Cursor(conn) as cursor:
            cursor.execute(f"{self._create};SAVEPOINT onlooker_events")
            new, done = self._log(cursor, rows)
            self._project(cursor, rows, done)
        return max(new, 0)

    def _log(self, cursor: _Cursor, rows: Rows) -> tuple[int, str]:
        """Insert the events: straight into the table, unless some are stored already.

        Events are new but for a replay, so they are copied into ``events``
        first; a duplicate undoes that copy (a savepoint) and the batch goes
        through the staging table, which skips what is stored. Returns how
        many were new, and the statement that ends the savepoint (to send
        with the next ones).
        """
        try:
            cursor.copy(self._direct, rows.events)
        except self._duplicate:
            cursor.execute("ROLLBACK TO SAVEPOINT onlooker_events")
            _, copy, insert = self._tables["events"]
            cursor.copy(copy, rows.events)
            return cursor.execute(insert), ""
        return len(rows.events), "RELEASE SAVEPOINT onlooker_events"

    def project(self, conn: Connection, rows: Rows) -> None:
        with _Cursor(conn) as cursor:
            cursor.execute(self._create)
            self._project(cursor, rows, "")

    def _project(self, cursor: _Cursor, rows: Rows, first: str) -> None:
        """Copy the projection rows into staging, then merge them all (after ``first``)."""
        statements = [first] if first else []
        for table in PROJECTIONS:
            entities = getattr(rows, table.name)
            if entities:
                columns, copy, insert = self._tables[table.name]
                cursor.copy(copy, _tuples(entities.values(), columns))
                statements.append(insert)
        if statements:
            cursor.execute(";".join(statements))


class _Cursor:
    """psycopg's own cursor on the connection's transaction, its errors as SQLAlchemy's.

    ``COPY`` is not in SQLAlchemy; its errors are raised as the
    :class:`sqlalchemy.exc.DBAPIError` subclass SQLAlchemy itself would
    raise, so the writer tells a refusing database from a poison event the
    same way on every path.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._dbapi: Any = conn.connection.dbapi_connection
        self._cursor: Any = None
        self._statement: str | None = None

    def __enter__(self) -> _Cursor:
        self._cursor = self._dbapi.cursor()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._cursor.close()
        dbapi_error = self._conn.dialect.loaded_dbapi.Error
        if isinstance(exc, dbapi_error):
            lost = self._conn.dialect.is_disconnect(exc, self._dbapi, self._cursor)
            if lost:
                self._conn.invalidate(exc)
            raise sa.exc.DBAPIError.instance(
                self._statement,
                None,
                exc,
                dbapi_error,
                hide_parameters=True,
                connection_invalidated=lost,
                dialect=self._conn.dialect,
            ) from exc

    def execute(self, statement: str) -> int:
        """Run ``statement`` (no parameters); its row count."""
        self._statement = statement
        self._cursor.execute(statement)
        rowcount: int = self._cursor.rowcount
        return rowcount

    def copy(self, statement: str, rows: Iterable[tuple[Any, ...]]) -> None:
        """``COPY ... FROM STDIN`` the rows."""
        self._statement = statement
        with self._cursor.copy(statement) as copy:
            write_row = copy.write_row
            for row in rows:
                write_row(row)


def bulk_for(backend: str, dialect: sa.Dialect) -> Bulk:
    """The bulk writer of ``backend`` (``sqlite`` or ``postgresql``)."""
    return SqliteBulk() if backend == "sqlite" else PostgresBulk(dialect)
