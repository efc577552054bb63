"""The database behind a history store: URL handling, the SQLAlchemy engine, batch writes.

Every method here blocks; :class:`~onlooker.plugins.history.HistoryStore`
runs them in a worker thread.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError
from sqlalchemy.pool import StaticPool

from onlooker import ExecutionEvent, HistoryError

from ._rows import Flavor, build_rows
from ._schema import events, setup_schema

__all__ = ["Database", "default_url", "describe", "mask_url", "resolve_url"]

DEFAULT_PATH: Final = Path(".onlooker") / "history.db"
_SQLITE_TIMEOUT: Final = 5.0
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


def describe(exc: BaseException) -> str:
    """A short account of a database error: the driver's message, not the SQL."""
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    first = str(cause).strip().splitlines()[:1]
    return f"{type(cause).__name__}: {first[0] if first else ''}"


def default_url() -> str:
    """The default store: ``.onlooker/history.db`` under the current directory."""
    return f"sqlite:///{Path.cwd() / DEFAULT_PATH}"


def mask_url(url: str | URL) -> str:
    """``url`` with its password hidden, for messages and logs."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    return _PASSWORD.sub(r"\1***@", url)


def resolve_url(url: str | None) -> URL:
    """Parse ``url`` (``None``: the default SQLite file), pick psycopg 3 for PostgreSQL."""
    text = default_url() if url is None else url
    try:
        parsed = sa.make_url(text)
    except ArgumentError:
        raise HistoryError(f"not a database URL: {mask_url(text)!r}") from None
    backend = parsed.get_backend_name()
    if backend == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend not in ("sqlite", "postgresql"):
        raise HistoryError(
            f"unsupported history database {mask_url(parsed)!r}: use sqlite:/// or "
            "postgresql+psycopg://"
        )
    return parsed


def _sqlite_file(url: URL) -> Path | None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _create_engine(url: URL) -> Engine:
    if url.get_backend_name() == "sqlite":
        path = _sqlite_file(url)
        if path is None:
            # one shared connection: the store's calls run in worker threads
            return sa.create_engine(
                url,
                poolclass=StaticPool,
                connect_args={"check_same_thread": False},
                hide_parameters=True,
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        connect_args: dict[str, Any] = {}
        if "timeout" not in url.query:
            connect_args["timeout"] = _SQLITE_TIMEOUT
        engine = sa.create_engine(url, connect_args=connect_args, hide_parameters=True)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return sa.create_engine(
        url, pool_pre_ping=True, pool_size=4, max_overflow=4, hide_parameters=True
    )


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


class Database:
    """One history database: schema setup, idempotent batch writes, connections for reads."""

    def __init__(self, url: str | None) -> None:
        self.url = resolve_url(url)
        self.masked_url = mask_url(self.url)
        self.backend = self.url.get_backend_name()
        self.flavor = Flavor.for_backend(self.backend)
        try:
            self.engine = _create_engine(self.url)
        except (ArgumentError, NoSuchModuleError, ImportError, OSError) as exc:
            raise HistoryError(f"cannot use history database {self.masked_url}: {exc}") from None
        self._sql = self.flavor.statements()
        # an in-memory SQLite database is one shared connection: one caller at a time
        self._serial: AbstractContextManager[object] = (
            threading.Lock()
            if self.backend == "sqlite" and self.sqlite_path is None
            else nullcontext()
        )

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file, if this is a file database."""
        return _sqlite_file(self.url) if self.backend == "sqlite" else None

    def setup(self, attempts: int = 3) -> None:
        """Connect, create or migrate the schema; raises :class:`HistoryError`."""
        for attempt in range(attempts):
            try:
                with self._serial, self.engine.begin() as conn:
                    setup_schema(conn, self._rebuild)
                return
            except HistoryError:
                raise
            except OperationalError as exc:
                if attempt + 1 < attempts and _is_race(exc):
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise HistoryError(
                    f"cannot open history database {self.masked_url}: "
                    f"{self._scrub(exc.orig or exc)}"
                ) from None
            except DBAPIError as exc:
                if attempt + 1 < attempts:  # another process created the tables first
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise HistoryError(
                    f"cannot set up history database {self.masked_url}: "
                    f"{self._scrub(exc.orig or exc)}"
                ) from None

    def _scrub(self, exc: BaseException) -> str:
        message = str(exc).strip()
        password = self.url.password
        if password:
            message = message.replace(str(password), "***")
        return message

    def write(self, batch: Sequence[ExecutionEvent]) -> int:
        """Write events in one transaction; returns how many were new (by ``event_id``)."""
        if not batch:
            return 0
        rows = build_rows(batch, self.flavor)
        sql = self._sql
        with self._serial, self.engine.begin() as conn:
            new = conn.exec_driver_sql(sql.events, rows.events).rowcount
            if rows.executions:
                conn.exec_driver_sql(sql.executions, rows.executions)
            if rows.tool_calls:
                conn.exec_driver_sql(sql.tool_calls, rows.tool_calls)
            if rows.interactions:
                conn.exec_driver_sql(sql.interactions, rows.interactions)
        return max(new, 0)

    def _rebuild(self, conn: Connection, chunk: int = 2000) -> None:
        """Re-derive every projection from the event log (a migration step)."""
        from onlooker import parse_event

        sql = self._sql
        last: str | None = None
        while True:
            query = sa.select(events.c.event_id, sa.cast(events.c.body, sa.Text))
            if last is not None:
                query = query.where(events.c.event_id > last)
            page = conn.execute(query.order_by(events.c.event_id).limit(chunk)).all()
            if not page:
                return
            rows = build_rows([parse_event(body) for _, body in page], self.flavor)
            for statement, values in (
                (sql.executions, rows.executions),
                (sql.tool_calls, rows.tool_calls),
                (sql.interactions, rows.interactions),
            ):
                if values:
                    conn.exec_driver_sql(statement, values)
            last = page[-1][0]

    def run(self, fn: Callable[[Connection], Any]) -> Any:
        """Call ``fn`` with a connection in a read transaction."""
        with self._serial, self.engine.connect() as conn:
            return fn(conn)

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()


def _is_race(exc: OperationalError) -> bool:
    text = str(exc.orig).lower()
    return "locked" in text or "already exists" in text
