"""The database behind a history store: URL handling, the SQLAlchemy engine, batch writes.

Every method here blocks; :class:`~onlooker.plugins.history.HistoryStore`
runs them in a worker thread.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    NoSuchModuleError,
    OperationalError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.pool import QueuePool, StaticPool

from onlooker import HistoryError

from ._bulk import bulk_for
from ._checkpoint import BACKSTOP_PAGES, Checkpointer
from ._rows import Rows, Stored, build_rows
from ._schema import check_schema, events, setup_schema

__all__ = [
    "Database",
    "RowError",
    "default_url",
    "describe",
    "is_transient",
    "mask_url",
    "resolve_url",
]

_logger: Final = logging.getLogger("onlooker.plugins.history")

DEFAULT_PATH: Final = Path(".onlooker") / "history.db"
_LOCK_TIMEOUT: Final = 5.0
"""Seconds a write waits for a lock another connection holds (SQLite and PostgreSQL)."""
_CONNECT_TIMEOUT = 10
"""Seconds connecting to PostgreSQL may take (libpq's ``connect_timeout``, unless the URL or
``PGCONNECT_TIMEOUT`` gives one): a server that accepts and never answers (stopped, hung)
is then an error, not a wait for ever."""
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")  # a password may hold "/" (base64)
_QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)  # libpq's too


def describe(exc: BaseException) -> str:
    """A short account of a database error: the driver's message, not the SQL."""
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    if isinstance(cause, RowError) and cause.__cause__ is not None:
        cause = cause.__cause__  # what could not be turned into a row, and why
    first = str(cause).strip().splitlines()[:1]
    return f"{type(cause).__name__}: {first[0] if first else ''}"


class RowError(ValueError):
    """Events that cannot be turned into rows (an unencodable string, say): a poison batch."""


def is_transient(exc: BaseException) -> bool:
    """Whether a failed write may succeed later unchanged (the database, not the data).

    Connection trouble, a locked, full or read-only database, a missing
    directory: retry, spill. Anything else (a value the driver cannot encode,
    a constraint the data breaks) would fail again the same way: isolate it.
    """
    if isinstance(exc, RowError):
        return False
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(
        exc,
        OperationalError
        | InterfaceError
        | DisconnectionError
        | PoolTimeoutError
        | HistoryError
        | OSError,
    )


def default_url() -> str:
    """The default store: ``.onlooker/history.db`` under the current directory."""
    return f"sqlite:///{working_directory('the default history database') / DEFAULT_PATH}"


def working_directory(needed_for: str) -> Path:
    """The current directory, or a :class:`HistoryError` saying it was removed (not a bare errno)."""
    try:
        return Path.cwd()
    except OSError as exc:
        raise HistoryError(
            f"{needed_for} is under the working directory, which is gone ({exc.strerror}): "
            "give an absolute path"
        ) from exc


def mask_url(url: str | URL) -> str:
    """``url`` with its password hidden (``user:***@``, ``?password=***``), for messages and logs."""
    if isinstance(url, URL):
        text = url.render_as_string(hide_password=True)
    else:
        text = _PASSWORD.sub(r"\1***@", url)
    return _QUERY_PASSWORD.sub(r"\1***", text)


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


def _read_only_sqlite(path: Path) -> Callable[[], sqlite3.Connection]:
    # mode=ro: SQLite itself refuses to create the file or write to it
    uri = "file:" + urllib.parse.quote(str(path.absolute())) + "?mode=ro"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, timeout=_LOCK_TIMEOUT, check_same_thread=False)

    return connect


def _uri_file(url: URL) -> Path | None:
    """The file a SQLite URI filename names (``sqlite:///file:/x/h.db?uri=true``); ``None``
    for an in-memory one or a plain path."""
    database = url.database or ""
    if not database.startswith("file:"):
        return None
    split = urllib.parse.urlsplit(database)
    path = urllib.parse.unquote(split.path)
    memory = path in ("", ":memory:") or "mode=memory" in split.query or "mode=memory" in str(url)
    return None if memory else Path(path)


def _create_engine(url: URL, read_only: bool, *, pre_ping: bool = True) -> Engine:
    if url.get_backend_name() == "sqlite":
        path = _sqlite_file(url)
        if read_only and path is None:  # a URI filename is opened read-only all the same
            path = _uri_file(url)
        if read_only and path is not None:
            if not path.is_file():
                raise HistoryError(f"no history database at {str(path)!r}")
            return sa.create_engine(
                "sqlite://",
                creator=_read_only_sqlite(path),
                poolclass=QueuePool,  # as for any file: not one connection per thread
                hide_parameters=True,
            )
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
            connect_args["timeout"] = _LOCK_TIMEOUT
        engine = sa.create_engine(url, connect_args=connect_args, hide_parameters=True)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # A lock another session holds fails a statement after this long, as SQLite's busy
    # timeout does: the writer then retries and spills instead of waiting for ever.
    given = url.query.get("options")  # the URL's own options come last, so they win
    options = " ".join(
        [
            f"-c lock_timeout={int(_LOCK_TIMEOUT * 1000)}",
            *(["-c default_transaction_read_only=on"] if read_only else []),
            *([given] if isinstance(given, str) else list(given or ())),
        ]
    )
    connect_args = {"options": options}
    if "connect_timeout" not in url.query and "PGCONNECT_TIMEOUT" not in os.environ:
        connect_args["connect_timeout"] = _CONNECT_TIMEOUT
    return sa.create_engine(
        url,
        pool_pre_ping=pre_ping,
        pool_size=4,
        max_overflow=4,
        hide_parameters=True,
        connect_args=connect_args,
    )


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")  # see _checkpoint.py
    finally:
        cursor.close()


class Database:
    """One history database: schema setup, idempotent batch writes, connections for reads.

    ``read_only``: never create the file, its directory or the schema, and
    refuse writes (what read commands use). A file database that is removed
    or replaced while open is noticed before and after each write, reopened
    (recreated, with its directory, when it is gone) and reported on the
    ``onlooker.plugins.history`` logger; a batch that went into the removed
    file is written again into the new one (writes are idempotent).
    """

    def __init__(self, url: str | None, *, read_only: bool = False) -> None:
        self.url = resolve_url(url)
        self.masked_url = mask_url(self.url)
        self.backend = self.url.get_backend_name()
        self.read_only: Final = read_only
        try:
            self.engine = _create_engine(self.url, read_only)
        except (ArgumentError, NoSuchModuleError, ImportError, OSError) as exc:
            extra = (
                ' (pip install "onlooker[postgres]")'
                if isinstance(exc, ImportError) and self.backend == "postgresql"
                else ""
            )
            raise HistoryError(
                f"cannot use history database {self.masked_url}: {exc}{extra}"
            ) from None
        # PostgreSQL writes take connections that are not pinged first: a ping is one more
        # round trip per batch, and each round trip can wait for the GIL for a switch
        # interval (5 ms) while the program runs. A connection the server dropped while
        # idle fails its batch, which is then written again at once (:meth:`_insert`).
        self._writes = (
            _create_engine(self.url, read_only, pre_ping=False)
            if self.backend == "postgresql"
            else self.engine
        )
        self._file = _sqlite_file(self.url) if self.backend == "sqlite" else None
        self._checkpointer = (
            Checkpointer(self._file, _logger) if self._file is not None and not read_only else None
        )
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the open file
        self._reopen_lock = threading.Lock()
        self.reopened = 0
        self._bulk = bulk_for(self.backend, self.engine.dialect)
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
        """Connect, create or migrate the schema; raises :class:`HistoryError`.

        Read-only: connect and check the schema, creating nothing.
        """
        for attempt in range(attempts):
            try:
                with self._serial, self.engine.begin() as conn:
                    if self.read_only:
                        check_schema(conn, self.masked_url)
                    else:
                        setup_schema(conn, self._rebuild, self.masked_url)
                self._identity = self._file_identity()
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
                doing = "read" if self.read_only else "set up"
                raise HistoryError(
                    f"cannot {doing} history database {self.masked_url}: "
                    f"{self._scrub(exc.orig or exc)}"
                ) from None

    def _scrub(self, exc: BaseException) -> str:
        message = str(exc).strip()
        password = self.url.password
        if password:
            message = re.sub(_alone(str(password)), "***", message)
        return message

    def write(self, batch: Sequence[Stored]) -> int:
        """Write events in one transaction; returns how many were new (by ``event_id``).

        Raises :class:`RowError` when the events cannot be turned into rows.
        """
        if not batch:
            return 0
        if self.read_only:
            raise HistoryError(f"history database {self.masked_url} was opened read-only")
        rows = self.rows_of(batch)
        self._check_file()
        new = self._insert(rows)
        if self._file is not None and self._file_identity() != self._identity:
            # removed while we wrote: the batch went into the unlinked file
            self._check_file()
            new = self._insert(rows)
        if self._checkpointer is not None:
            self._checkpointer.committed(sum(len(item.body) for item in batch))
        return new

    def rows_of(self, batch: Sequence[Stored]) -> Rows:
        """The rows ``batch`` writes here; :class:`RowError` if it cannot be turned into rows."""
        try:
            return build_rows(batch, self.backend)
        except Exception as exc:
            raise RowError(str(exc)) from exc

    def _insert(self, rows: Rows) -> int:
        try:
            with self._serial, self._writes.begin() as conn:
                return self._bulk.write(conn, rows)
        except DBAPIError as exc:
            if self._writes is self.engine or not exc.connection_invalidated:
                raise
        # A connection dropped while idle: its pool-mates likely were too (a server restart).
        self._writes.dispose()
        with self._writes.begin() as conn:
            return self._bulk.write(conn, rows)

    def _rebuild(self, conn: Connection, chunk: int = 2000) -> None:
        """Re-derive every projection from the event log (a migration step).

        An event an older onlooker stored that this one does not read (its
        rules were looser) stays in the log as it is, named in a warning: its
        execution's projection lacks it, and no other is touched.
        """
        from onlooker import EventValidationError, parse_event

        last: str | None = None
        while True:
            query = sa.select(events.c.event_id, sa.cast(events.c.body, sa.Text))
            if last is not None:
                query = query.where(events.c.event_id > last)
            page = conn.execute(query.order_by(events.c.event_id).limit(chunk)).all()
            if not page:
                return
            stored = []
            for event_id, body in page:
                try:
                    stored.append(Stored(parse_event(body), body))
                except EventValidationError as exc:
                    _logger.warning(
                        "history: %s: stored event %r does not read as an event any more (%s); "
                        "kept in the events table, left out of the rebuilt tables",
                        self.masked_url,
                        event_id,
                        exc,
                    )
            self._bulk.project(conn, build_rows(stored, self.backend))
            last = page[-1][0]

    def run(self, fn: Callable[[Connection], Any]) -> Any:
        """Call ``fn`` with a connection in a read transaction."""
        if self.read_only:
            self._check_file()  # the file at the path now, or HistoryError
        else:
            try:
                self._check_file()
            except Exception as exc:  # reads go on from what the pool has open
                _logger.warning("history: %s: %s", self.masked_url, describe(exc))
        with self._serial, self.engine.connect() as conn:
            return fn(conn)

    def probe(self) -> None:
        """Raise if the events table cannot be read (the database, not one event, is at fault)."""
        self.run(lambda conn: conn.execute(sa.select(events.c.event_id).limit(0)).all())

    # -- the file under an SQLite database -----------------------------------------------

    def _file_identity(self) -> tuple[int, int] | None:
        if self._file is None:
            return None
        try:
            stat = os.stat(self._file)
        except OSError:
            return None
        return (stat.st_dev, stat.st_ino)

    def _check_file(self) -> None:
        """Reopen the file database if its file was removed or replaced since it was opened.

        A writer recreates a removed file. A reader (``read_only``) reads the file
        the path holds now, and raises ``HistoryError`` when there is none.
        """
        if self._file is None or self._identity is None:
            return
        if self._file_identity() == self._identity:
            return
        with self._reopen_lock:
            found = self._file_identity()
            if found == self._identity:
                return  # another thread reopened it
            self.engine.dispose()  # pooled connections hold the old file
            if self.read_only:
                if found is None:
                    raise HistoryError(
                        f"no history database at {str(self._file)!r} (it was removed)"
                    )
                self.setup()  # the schema checked, as at open
                return
            what = "removed" if found is None else "replaced by another file"
            _logger.warning(
                "history: the database file %s was %s while open; reopening it%s "
                "(what was written to the old file is not in it)",
                self._file,
                what,
                ", recreating it and its directory" if found is None else "",
            )
            if self._checkpointer is not None:
                self._checkpointer.reconnect()
            self._file.parent.mkdir(parents=True, exist_ok=True)
            self.setup()
            self.reopened += 1

    def dispose(self) -> None:
        """Close every connection (the checkpointer's first: the last one checkpoints the log)."""
        if self._checkpointer is not None:
            self._checkpointer.close()
        self.engine.dispose()
        if self._writes is not self.engine:
            self._writes.dispose()


def _alone(text: str) -> str:
    """A pattern finding ``text`` where it is not part of a longer word: a password "s"
    must not make "Connection refu***ed" (where it starts or ends with a letter or digit,
    a letter or digit next to it is another word)."""
    before = "(?<![A-Za-z0-9])" if text[:1].isalnum() else ""
    after = "(?![A-Za-z0-9])" if text[-1:].isalnum() else ""
    return f"{before}{re.escape(text)}{after}"


def _is_race(exc: OperationalError) -> bool:
    text = str(exc.orig).lower()
    return "locked" in text or "already exists" in text
