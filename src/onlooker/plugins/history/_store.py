"""HistoryStore: the async face of a history database, and ``open()``."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from os import PathLike
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread
from sqlalchemy.engine import Connection

from onlooker import ExecutionEvent, HistoryError
from onlooker.plugins.audit import Redactor

from . import _read
from ._db import Database, describe, working_directory
from ._isolate import isolate
from ._records import ExecutionList, ExecutionTree, HistoryStats
from ._redaction import DEFAULT_MAX_VALUE_CHARS, Scrubber
from ._rows import Stored
from ._spill import DeadLetters, Spill, SpillFile, dead_letter_path
from ._writer import BatchWriter, HistoryWriterStatistics

__all__ = [
    "HistoryStore",
    "default_spill_fallback",
    "default_spill_path",
    "new_store",
    "open",
]

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
    return working_directory("the default spill file") / ".onlooker" / f"spill-{digest}.jsonl"


def default_spill_fallback(primary: Path) -> Path:
    """The second spill location: ``<temp dir>/onlooker-<uid>/spill-<hash of the first>.jsonl``.

    The temp directory is often another file system than the project's, so
    it still takes writes when the database's disk is full or read-only.
    """
    digest = hashlib.sha256(str(primary.absolute()).encode()).hexdigest()[:16]
    user = getattr(os, "getuid", lambda: "user")()
    return Path(tempfile.gettempdir()) / f"onlooker-{user}" / f"spill-{digest}.jsonl"


class HistoryStore:
    """Executions, tool calls and interactions in SQL: write events, read trees and stats.

    Get one from :func:`open` or as the history plugin's extension
    (``engine.extension(history_plugin)``). Every method is async and runs
    its database work in a worker thread, so the event loop stays free.
    Reads through a plugin's store first wait for the events its observer
    has already accepted: every event emitted so far (the observer is synchronous).
    """

    def __init__(self, db: Database, spill: Spill, scrubber: Scrubber) -> None:
        self._db = db
        self._spill = spill
        self._scrubber = scrubber
        # SQLite has one writer at a time anyway; PostgreSQL gets a few connections.
        self._limiter = anyio.CapacityLimiter(1 if db.backend == "sqlite" else 4)
        self._writer: BatchWriter | None = None

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return self._db.masked_url

    @property
    def spill_path(self) -> Path:
        """Where events that cannot be written wait for the database (the first location)."""
        return self._spill.path

    @property
    def spill_paths(self) -> tuple[Path, ...]:
        """Every spill location, in the order they are tried (memory comes after them)."""
        return tuple(file.path for file in self._spill.files)

    @property
    def dead_letter_path(self) -> Path:
        """Where poison events go, with the reason they could not be written."""
        return self._spill.dead.path

    @property
    def read_only(self) -> bool:
        """Whether the store was opened with ``read_only=True``."""
        return self._db.read_only

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    async def _catch_up(self) -> None:
        """Let every event already emitted reach the database (read-your-writes).

        The plugin's observer is synchronous: an event emitted is in the writer's
        buffer already, so only the writer is waited for, never the bus (whose
        flush would wait for every asynchronous observer, a hung one for ever).
        """
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
        Events are redacted and capped first, as the plugin's are. An event
        the database can never take (a poison event) goes to the dead-letter
        file and every other event is written; when the database itself
        refuses, :class:`onlooker.HistoryError` says why and nothing is
        half-written. A store opened ``read_only`` raises ``HistoryError``.
        """
        if self._db.read_only:
            raise HistoryError(f"history database {self.url} was opened read-only")
        new: int = await self._call(self._write_now, list(events))
        return new

    def _write_now(self, batch: list[ExecutionEvent]) -> int:
        return self._write_ready(self._scrubber.prepare(batch, self._spill.dead))

    def _write_ready(self, batch: Sequence[Stored]) -> int:
        """Write events already redacted (spilled ones: redacting twice would cut twice)."""
        dead = self._spill.dead
        outcome = isolate(self._db, batch, dead)
        if outcome.refused is not None:
            error = outcome.error
            raise HistoryError(
                f"cannot write {len(outcome.refused)} of {len(batch)} events to history "
                f"database {self.url}: {describe(error) if error is not None else '?'}"
            ) from None
        return outcome.new

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

    async def stats(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> HistoryStats:
        """Per-tool counts, failure rate and p50/p95 durations.

        Counts executions started, and tool calls finished, from ``since``
        (inclusive) to ``until`` (exclusive); either end may be left open.
        """
        _aware(since, "since")
        _aware(until, "until")
        return await self._read(lambda conn: _read.stats(conn, since, until))

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

    def statistics(self) -> HistoryWriterStatistics | None:
        """The plugin writer's counters; ``None`` for a store from :func:`open`."""
        return None if self._writer is None else self._writer.statistics()

    # -- lifecycle ---------------------------------------------------------------------

    async def _start(self) -> None:
        try:
            await self._call(self._db.setup)
        except BaseException:
            await self._call(self._db.dispose)
            raise
        if not self._db.read_only and self._spill.pending():
            try:
                new = await self._call(self._spill.drain, self._write_ready)
            except Exception as exc:  # the files stay; the next start tries again
                logger.warning("history: spill files not loaded: %s", describe(exc))
            else:
                logger.info(
                    "history: loaded %d events from %s",
                    new,
                    ", ".join(map(str, self.spill_paths)),
                )

    async def _aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._call(self._db.dispose)


def new_store(
    url: str | None,
    spill_path: str | PathLike[str] | None,
    *,
    spill_fallback: str | PathLike[str] | None = None,
    read_only: bool = False,
    redactor: Redactor | None = None,
    max_value_chars: int = DEFAULT_MAX_VALUE_CHARS,
) -> HistoryStore:
    scrubber = Scrubber(redactor, max_value_chars)
    db = Database(url, read_only=read_only)
    first = Path(spill_path) if spill_path is not None else default_spill_path(db)
    second = Path(spill_fallback) if spill_fallback is not None else default_spill_fallback(first)
    private = () if spill_fallback is not None else (dead_letter_path(second),)
    dead = DeadLetters(
        [dead_letter_path(first), dead_letter_path(second)],
        logger,
        private=private,
        redact=scrubber.redactor.redact_text,
    )
    files = [SpillFile(first, logger), SpillFile(second, logger, private=spill_fallback is None)]
    return HistoryStore(db, Spill(files, dead, logger), scrubber)


@asynccontextmanager
async def open(  # the documented name: history.open(url)
    url: str | None = None,
    *,
    read_only: bool = False,
    spill_path: str | PathLike[str] | None = None,
    spill_fallback: str | PathLike[str] | None = None,
    redactor: Redactor | None = None,
    max_value_chars: int = DEFAULT_MAX_VALUE_CHARS,
) -> AsyncIterator[HistoryStore]:
    """Open a history database without an engine.

    ``url``: ``sqlite:///path.db`` (default: ``.onlooker/history.db`` under
    the current directory) or ``postgresql+psycopg://user:password@host/db``.

    With ``read_only=True`` (what read commands use) nothing is created: a
    missing SQLite file, a database without onlooker's tables or one that
    needs a migration is a :class:`onlooker.HistoryError` naming it; SQLite
    is opened in its read-only mode, PostgreSQL sessions are read-only, and
    ``write_events`` raises. Otherwise the file and its directory are
    created on first use, the schema is created or migrated, and events left
    in the spill files by an earlier run are loaded. ``redactor`` and
    ``max_value_chars`` apply to ``write_events`` as in :func:`plugin`.

    Raises :class:`onlooker.HistoryError` (naming the URL, password hidden)
    when the database cannot be reached and
    :class:`onlooker.SchemaVersionError` when a newer onlooker wrote it (and,
    opened read-only, when an older one did and it needs a migration).
    """
    store = new_store(
        url,
        spill_path,
        spill_fallback=spill_fallback,
        read_only=read_only,
        redactor=redactor,
        max_value_chars=max_value_chars,
    )
    await store._start()
    try:
        yield store
    finally:
        await store._aclose()
