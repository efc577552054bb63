"""The batching writer behind the history plugin's observer.

The observer (async, on the bus's worker task) only appends to a buffer.
A dedicated writer thread takes batches of ``batch_size`` events, or what
arrived within ``flush_interval`` of the first waiting event, redacts them
(the audit trail's policy, see ``_redaction.py``) and writes each in one
transaction, so neither the emitter nor the event loop ever waits for the
database.

What can go wrong, and what happens then:

- the database refuses (down, locked, full, read-only): the batch is retried
  with backoff; if it still fails it is spilled (``_spill.py``: a spill file,
  a second one, then memory), and for a while after that batches go straight
  to the spill until a probe write succeeds, which also drains the spill;
- the batch holds a poison event (one the database will never take, such as
  a string that cannot be encoded): the batch is split in halves until the
  bad event is alone; it goes to the dead-letter file with the reason, and
  every other event is written;
- the SQLite file was removed or replaced: the database reopens it (see
  ``_db.py``) and the batch lands in the new file.

The thread (rather than a task) keeps the writer independent of the engine's
task group and cancel scopes: the engine closes plugins inside a shielded
scope, which a task group opened by a plugin could not span.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import anyio

from onlooker import ExecutionEvent

from ._db import Database, RowError, describe, is_transient
from ._redaction import Scrubber
from ._spill import DeadLetters, Spill

__all__ = [
    "DEFAULT_RETRY_DELAYS",
    "BatchWriter",
    "HistoryWriterStatistics",
    "isolate",
    "scrub_batch",
]

DEFAULT_RETRY_DELAYS: Final = (0.05, 0.2, 0.5, 1.0)
_MAX_COOLDOWN: Final = 30.0


@dataclass(frozen=True, slots=True)
class HistoryWriterStatistics:
    """The history writer's counters (``store.statistics()``)."""

    accepted: int
    """Events handed to the writer."""
    written: int
    """Events that reached the database (new or already there)."""
    spilled: int
    """Events written to a spill file or held in memory instead."""
    pending: int
    """Events waiting in the buffer or being written."""
    retries: int
    """Failed write attempts that were retried."""
    batches: int
    """Batches committed."""
    dead_letters: int = 0
    """Poison events set aside in the dead-letter file (every other event of their batch written)."""
    in_memory: int = 0
    """Events held in memory because neither the database nor any spill file takes them."""
    dropped: int = 0
    """Events lost: the memory buffer overflowed, or still held when the engine closed."""
    reopened: int = 0
    """Times the SQLite file was found removed or replaced, and reopened."""


@dataclass(slots=True)
class _Outcome:
    """What became of a batch written with :func:`isolate`."""

    new: int = 0
    written: int = 0
    dead: int = 0
    refused: list[ExecutionEvent] | None = None  # a transient failure: spill these
    error: BaseException | None = None


def isolate(db: Database, batch: Sequence[ExecutionEvent], dead: DeadLetters) -> _Outcome:
    """Write ``batch``; if the data is at fault, split it until the poison events are alone.

    A poison event goes to ``dead``; every other event is written. Parts
    that fail because of the database (a transient failure) are returned in
    ``refused`` with the error, for the caller to retry or spill.
    """
    outcome = _Outcome()
    refused: list[ExecutionEvent] = []
    stack: list[Sequence[ExecutionEvent]] = [batch]
    while stack:
        part = stack.pop()
        try:
            outcome.new += db.write(part)
        except Exception as exc:
            if is_transient(exc):
                refused.extend(part)
                outcome.error = exc
            elif len(part) > 1:
                middle = len(part) // 2
                stack.append(part[middle:])
                stack.append(part[:middle])
            elif not _data_at_fault(db, exc):
                refused.extend(part)  # the database, not the event: e.g. its tables are gone
                outcome.error = exc
            else:
                dead.event(part[0], describe(exc))
                outcome.dead += 1
        else:
            outcome.written += len(part)
    if refused:
        outcome.refused = refused
    return outcome


def _data_at_fault(db: Database, exc: BaseException) -> bool:
    """Before a lone event is called poison: does the database take anything at all?"""
    if isinstance(exc, RowError):
        return True  # the event itself cannot be turned into rows
    try:
        db.probe()
    except Exception:
        return False
    return True


def scrub_batch(
    scrubber: Scrubber, batch: Sequence[ExecutionEvent], dead: DeadLetters
) -> list[ExecutionEvent]:
    """The batch redacted; an event that redaction fails on goes to ``dead`` (envelope only)."""
    clean: list[ExecutionEvent] = []
    for event in batch:
        try:
            clean.append(scrubber.scrub(event))
        except Exception as exc:
            dead.event(event, f"cannot be redacted: {exc!r}", redacted=False)
    return clean


class BatchWriter:
    """Buffers events and writes them in batches from its own thread; see the module docstring."""

    def __init__(
        self,
        db: Database,
        spill: Spill,
        scrubber: Scrubber,
        logger: logging.Logger,
        *,
        batch_size: int,
        flush_interval: float,
        retry_delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
    ) -> None:
        self._db = db
        self._spill = spill
        self._dead = spill.dead
        self._scrubber = scrubber
        self._logger = logger
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._retry_delays = tuple(retry_delays)
        self._max_pending = max(4 * batch_size, 1024)
        self._buffer: deque[ExecutionEvent] = deque()
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)  # the writer waits on it
        self._progress = threading.Condition(self._lock)  # flush() and backpressure wait on it
        self._urgent = False
        self._closing = False
        self._accepted = 0
        self._handled = 0
        self._written = 0
        self._spilled = 0
        self._retries = 0
        self._batches = 0
        self._dropped_at_close = 0
        self._cooldown = 0.0
        self._degraded_until: float | None = None
        self._spill_dirty = False
        self._thread = threading.Thread(
            target=self._run, name=f"onlooker history writer ({db.masked_url})", daemon=True
        )

    # -- the observer's side (event loop) --------------------------------------------

    async def handle(self, event: ExecutionEvent) -> None:
        """Take one event (the history plugin's async observer)."""
        if self._closing:
            raise RuntimeError("the history writer is closed")
        buffer = self._buffer
        buffer.append(event)
        self._accepted += 1
        size = len(buffer)
        if size == 1 or size == self._batch_size:
            with self._lock:
                self._wakeup.notify()
        elif size >= self._max_pending:
            await anyio.to_thread.run_sync(self._wait_for_room, abandon_on_cancel=True)

    async def flush(self) -> None:
        """Wait until every event accepted so far is written (or spilled)."""
        target = self._accepted
        if self._handled < target:
            await anyio.to_thread.run_sync(self._wait_handled, target, abandon_on_cancel=True)

    def statistics(self) -> HistoryWriterStatistics:
        """The writer's counters, as a frozen snapshot."""
        return HistoryWriterStatistics(
            accepted=self._accepted,
            written=self._written,
            spilled=self._spilled,
            pending=self._accepted - self._handled,
            retries=self._retries,
            batches=self._batches,
            dead_letters=self._dead.count,
            in_memory=self._spill.in_memory,
            dropped=self._spill.dropped + self._dropped_at_close,
            reopened=self._db.reopened,
        )

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    async def aclose(self) -> None:
        """Write (or spill) everything accepted, then stop the thread."""
        with self._lock:
            self._closing = True
            self._wakeup.notify()
        if self._thread.is_alive():
            await anyio.to_thread.run_sync(self._thread.join)

    def _wait_for_room(self) -> None:
        with self._lock:
            while len(self._buffer) >= self._max_pending and self._thread.is_alive():
                self._progress.wait(0.5)

    def _wait_handled(self, target: int) -> None:
        with self._lock:
            self._urgent = True
            self._wakeup.notify()
            while self._handled < target and self._thread.is_alive():
                self._progress.wait(0.5)

    # -- the writer thread ------------------------------------------------------------

    def _run(self) -> None:
        buffer = self._buffer
        while True:
            with self._lock:
                while not buffer and not self._closing:
                    self._urgent = False
                    self._wakeup.wait()
                if not buffer:
                    break
                deadline = time.monotonic() + self._flush_interval
                while len(buffer) < self._batch_size and not (self._closing or self._urgent):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wakeup.wait(left)
            count = min(len(buffer), self._batch_size)
            batch = [buffer.popleft() for _ in range(count)]
            self._write(batch)
            with self._lock:
                self._handled += count
                self._progress.notify_all()
        self._last_chance()

    def _write(self, batch: list[ExecutionEvent]) -> None:
        try:
            batch = scrub_batch(self._scrubber, batch, self._dead)
            if self._degraded_until is not None:
                if time.monotonic() < self._degraded_until:
                    self._to_spill(batch)
                    return
                attempts: tuple[float, ...] = ()  # one probe while the database seems down
            else:
                attempts = self._retry_delays
            pending: Sequence[ExecutionEvent] = batch
            for delay in (*attempts, None):
                outcome = isolate(self._db, pending, self._dead)
                self._written += outcome.written
                if outcome.written:
                    self._batches += 1
                if outcome.refused is None:
                    if self._degraded_until is not None or self._spill_dirty:
                        self._recovered()
                    return
                pending = outcome.refused
                error = describe(outcome.error) if outcome.error is not None else "?"
                if delay is None:
                    self._logger.error(
                        "history: %d events could not be written to %s: %s",
                        len(pending),
                        self._db.masked_url,
                        error,
                    )
                    break
                self._retries += 1
                self._logger.warning(
                    "history: write to %s failed, retrying in %.2fs: %s",
                    self._db.masked_url,
                    delay,
                    error,
                )
                time.sleep(delay)
            self._to_spill(list(pending))
            self._cooldown = min(max(self._cooldown * 2, 0.5), _MAX_COOLDOWN)
            self._degraded_until = time.monotonic() + self._cooldown
        except Exception as exc:  # a bug here must never lose the batch
            self._logger.exception("history: writer failed on a batch: %s", exc)
            self._to_spill(batch)

    def _to_spill(self, batch: list[ExecutionEvent]) -> None:
        self._spilled += self._spill.append(batch)
        self._spill_dirty = True

    def _write_isolating(self, batch: Sequence[ExecutionEvent]) -> int:
        outcome = isolate(self._db, batch, self._dead)
        if outcome.refused is not None:
            raise outcome.error or RuntimeError("history: events refused")
        return outcome.new

    def _recovered(self) -> None:
        if self._degraded_until is not None:
            self._logger.info("history: %s takes writes again", self._db.masked_url)
        self._degraded_until = None
        self._cooldown = 0.0
        try:
            self._spill.drain(self._write_isolating)
        except Exception as exc:
            self._logger.warning(
                "history: spill file %s not drained: %s", self._spill.path, describe(exc)
            )
        self._spill_dirty = self._spill.pending()

    def _last_chance(self) -> None:
        """At close: events held in memory go to the database or a spill file, else are lost."""
        if not self._spill.in_memory:
            return
        held = self._spill.take_memory()
        try:
            self._write_isolating(held)
            self._logger.info("history: %d events held in memory written at close", len(held))
            return
        except Exception as exc:
            self._logger.warning("history: at close, %s", describe(exc))
        self._spill.append(held)
        lost = self._spill.take_memory()
        if lost:
            self._dropped_at_close += len(lost)
            self._logger.critical(
                "history: %d events lost at close: neither %s nor any spill file (%s) takes writes",
                len(lost),
                self._db.masked_url,
                ", ".join(str(file.path) for file in self._spill.files),
            )
