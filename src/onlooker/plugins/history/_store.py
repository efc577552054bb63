"""HistoryStore: the async face of a history database, and ``open()``."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from os import PathLike
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
from sqlalchemy.engine import Connection

from onlooker import EventBus, ExecutionEvent

from . import _read
from ._db import Database
from ._records import ExecutionList, ExecutionTree, HistoryStats
from ._spill import SpillFile
from ._writer import BatchWriter, WriterStatistics

__all__ = ["HistoryStore", "default_spill_path", "new_store", "open"]

logger: Final = logging.getLogger("onlooker.plugins.history")

T = TypeVar("T")

MAX_LIMIT: Final = 10_000


def _aware(value: datetime | None, name: str) -> datetime | None:
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise ValueError(f"{name} must be a timezone-aware datetime, not {value!r}")
    return value


def default_spill_path(db: Database) -> Path:
    """Beside an SQLite file; else ``.onlooker/spill-<hash of the URL>.jsonl`` in the cwd."""
    sqlite_path = db.sqlite_path
    if sqlite_path is not None:
        return sqlite_path.with_name(sqlite_path.name + ".spill.jsonl")
    digest = hashlib.sha256(db.masked_url.encode()).hexdigest()[:16]
    return Path.cwd() / ".onlooker" / f"spill-{digest}.jsonl"


class HistoryStore:
    """Executions, tool calls and interactions in SQL: write events, read trees and stats.

    Get one from :func:`open` or as the history plugin's extension
    (``engine.extension(history_plugin)``). Every method is async and runs
    its database work in a worker thread, so the event loop stays free.
    Reads through a plugin's store first wait for the events its observer
    has already accepted (``await engine.bus.flush()`` hands them over).
    """

    def __init__(self, db: Database, spill: SpillFile) -> None:
        self._db = db
        self._spill = spill
        # SQLite has one writer at a time anyway; PostgreSQL gets a few connections.
        self._limiter = anyio.CapacityLimiter(1 if db.backend == "sqlite" else 4)
        self._writer: BatchWriter | None = None
        self._bus: EventBus | None = None  # the engine's, when the store is a plugin's

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return self._db.masked_url

    @property
    def spill_path(self) -> Path:
        """Where events that cannot be written wait for the database."""
        return self._spill.path

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    async def _catch_up(self) -> None:
        """Let every event already emitted reach the database (read-your-writes)."""
        if self._bus is not None:
            with contextlib.suppress(RuntimeError):  # the engine has closed: nothing in flight
                await self._bus.flush()
        if self._writer is not None:
            await self._writer.flush()

    async def _read(self, fn: Callable[[Connection], T]) -> T:
        await self._catch_up()
        result: T = await self._call(self._db.run, fn)
        return result

    async def write_events(self, events: Sequence[ExecutionEvent]) -> int:
        """Store events (any kinds, any order) in one transaction; returns how many were new.

        Idempotent by ``event_id``: writing events that are already stored
        changes nothing and counts 0. Used by audit replay and the CLI.
        """
        batch = list(events)
        new: int = await self._call(self._db.write, batch)
        return new

    async def list_executions(
        self,
        status: str | None = None,
        tool: str | None = None,
        trigger: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ExecutionList:
        """Executions newest first (root and child executions alike), one page.

        ``status`` is an execution status or ``"running"``; ``tool`` keeps
        executions that called that tool; ``trigger`` matches the trigger's
        kind; ``since`` (inclusive) and ``until`` (exclusive) bound the start
        time. Pass the page's ``next_cursor`` back as ``cursor`` for the next
        page (keyset pagination: stable while new executions arrive).
        """
        if status is not None and status not in _read.EXECUTION_STATUSES:
            raise ValueError(
                f"unknown execution status {status!r}: use one of "
                f"{', '.join(sorted(_read.EXECUTION_STATUSES))}"
            )
        if not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be an int from 1 to {MAX_LIMIT}, not {limit!r}")
        if cursor is not None:
            _read.decode_cursor(cursor)
        _aware(since, "since")
        _aware(until, "until")
        return await self._read(
            lambda conn: _read.list_executions(
                conn,
                status=status,
                tool=tool,
                trigger=trigger,
                since=since,
                until=until,
                limit=limit,
                cursor=cursor,
            )
        )

    async def get_execution(self, execution_id: str) -> ExecutionTree | None:
        """The execution with its tool calls, interactions and children; ``None`` if unknown."""
        return await self._read(lambda conn: _read.execution_tree(conn, execution_id))

    async def events(self, execution_id: str) -> list[ExecutionEvent]:
        """The execution's events as emitted, in ``seq`` order; ``[]`` if unknown."""
        return await self._read(lambda conn: _read.event_list(conn, execution_id))

    async def stats(self, since: datetime | None = None) -> HistoryStats:
        """Per-tool counts, failure rate and p50/p95 durations (calls finished since ``since``)."""
        _aware(since, "since")
        return await self._read(lambda conn: _read.stats(conn, since))

    async def query(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` in a worker thread and return its result.

        For SQL the store has no method for: build it with SQLAlchemy Core
        over :mod:`onlooker.plugins.history.tables`. The connection is in a
        transaction that is rolled back afterwards, so use it for reading.
        """
        return await self._read(fn)

    async def flush(self) -> None:
        """Wait until every event emitted so far is written (no-op for a store from ``open``).

        The read methods do this themselves, so a read right after
        ``engine.execute`` sees that execution whole.
        """
        await self._catch_up()

    def statistics(self) -> WriterStatistics | None:
        """The plugin writer's counters; ``None`` for a store from :func:`open`."""
        return None if self._writer is None else self._writer.statistics()

    # -- lifecycle ---------------------------------------------------------------------

    async def _start(self) -> None:
        try:
            await self._call(self._db.setup)
        except BaseException:
            await self._call(self._db.dispose)
            raise
        if self._spill.exists():
            try:
                new = await self._call(self._spill.drain, self._db.write)
            except Exception as exc:  # the file stays; the next start tries again
                logger.warning("history: spill file %s not loaded: %s", self._spill.path, exc)
            else:
                logger.info("history: loaded %d events from %s", new, self._spill.path)

    async def _aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._call(self._db.dispose)


def new_store(url: str | None, spill_path: str | PathLike[str] | None) -> HistoryStore:
    db = Database(url)
    spill = SpillFile(
        Path(spill_path) if spill_path is not None else default_spill_path(db), logger
    )
    return HistoryStore(db, spill)


@asynccontextmanager
async def open(  # the documented name: history.open(url)
    url: str | None = None, *, spill_path: str | PathLike[str] | None = None
) -> AsyncIterator[HistoryStore]:
    """Open a history database for reading and writing without an engine.

    ``url``: ``sqlite:///path.db`` (default: ``.onlooker/history.db`` under
    the current directory, created on first use) or
    ``postgresql+psycopg://user:password@host/db``. Creates or migrates the
    schema and loads a spill file left by an earlier run. Raises
    :class:`onlooker.HistoryError` (naming the URL, password hidden) when the
    database cannot be reached and :class:`onlooker.SchemaVersionError` when
    a newer onlooker wrote it.
    """
    store = new_store(url, spill_path)
    await store._start()
    try:
        yield store
    finally:
        await store._aclose()
