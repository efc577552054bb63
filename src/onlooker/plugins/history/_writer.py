"""The batching writer behind the history plugin's observer.

The observer (async, on the bus's worker task) only appends to a buffer.
A dedicated writer thread takes batches of ``batch_size`` events, or what
arrived within ``flush_interval`` of the first waiting event, and writes each
in one transaction, so neither the emitter nor the event loop ever waits for
the database. A failing batch is retried with backoff; one that still fails
goes to the spill file, and for a while after that batches go straight to
the spill file (the database is probably down) until a probe write
succeeds, which also drains the spill file.

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

from ._db import Database, describe
from ._spill import SpillFile

__all__ = ["DEFAULT_RETRY_DELAYS", "BatchWriter", "WriterStatistics"]

DEFAULT_RETRY_DELAYS: Final = (0.05, 0.2, 0.5, 1.0)
_MAX_COOLDOWN: Final = 30.0


@dataclass(frozen=True, slots=True)
class WriterStatistics:
    """The history writer's counters (``store.statistics()``)."""

    accepted: int
    """Events handed to the writer."""
    written: int
    """Events that reached the database (new or already there)."""
    spilled: int
    """Events written to the spill file instead."""
    pending: int
    """Events waiting in the buffer or being written."""
    retries: int
    """Failed write attempts that were retried."""
    batches: int
    """Batches committed."""


class BatchWriter:
    """Buffers events and writes them in batches from its own thread; see the module docstring."""

    def __init__(
        self,
        db: Database,
        spill: SpillFile,
        logger: logging.Logger,
        *,
        batch_size: int,
        flush_interval: float,
        retry_delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
    ) -> None:
        self._db = db
        self._spill = spill
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

    def statistics(self) -> WriterStatistics:
        """The writer's counters, as a frozen snapshot."""
        return WriterStatistics(
            accepted=self._accepted,
            written=self._written,
            spilled=self._spilled,
            pending=self._accepted - self._handled,
            retries=self._retries,
            batches=self._batches,
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
                    return
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

    def _write(self, batch: list[ExecutionEvent]) -> None:
        try:
            if self._degraded_until is not None:
                if time.monotonic() < self._degraded_until:
                    self._to_spill(batch)
                    return
                attempts: tuple[float, ...] = ()  # one probe while the database seems down
            else:
                attempts = self._retry_delays
            for delay in (*attempts, None):
                try:
                    self._db.write(batch)
                except Exception as exc:
                    if delay is None:
                        self._logger.error(
                            "history: a batch of %d events could not be written to %s: %s",
                            len(batch),
                            self._db.masked_url,
                            describe(exc),
                        )
                        break
                    self._retries += 1
                    self._logger.warning(
                        "history: write to %s failed, retrying in %.2fs: %s",
                        self._db.masked_url,
                        delay,
                        describe(exc),
                    )
                    time.sleep(delay)
                else:
                    self._written += len(batch)
                    self._batches += 1
                    if self._degraded_until is not None or self._spill_dirty:
                        self._recovered()
                    return
            self._to_spill(batch)
            self._cooldown = min(max(self._cooldown * 2, 0.5), _MAX_COOLDOWN)
            self._degraded_until = time.monotonic() + self._cooldown
        except Exception as exc:  # a bug here must never lose the batch
            self._logger.exception("history: writer failed on a batch: %s", exc)
            self._to_spill(batch)

    def _to_spill(self, batch: list[ExecutionEvent]) -> None:
        try:
            self._spill.append(batch)
        except Exception as exc:
            self._logger.critical(
                "history: %d events lost: neither %s nor the spill file %s is writable: %s",
                len(batch),
                self._db.masked_url,
                self._spill.path,
                exc,
            )
            return
        self._spilled += len(batch)
        self._spill_dirty = True

    def _recovered(self) -> None:
        if self._degraded_until is not None:
            self._logger.info("history: %s takes writes again", self._db.masked_url)
        self._degraded_until = None
        self._cooldown = 0.0
        try:
            self._spill.drain(self._db.write)
        except Exception as exc:
            self._logger.warning(
                "history: spill file %s not drained: %s", self._spill.path, describe(exc)
            )
        self._spill_dirty = self._spill.exists()
