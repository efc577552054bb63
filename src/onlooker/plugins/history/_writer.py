"""The batching writer behind the history plugin's observer.

The observer is synchronous: it runs in the emitting task and only appends
the event to a buffer (and wakes the writer when it sleeps), which costs
the execution less than an asynchronous observer's queue and worker task.
Only when the writer is far behind (``2 * batch_size`` events, at least
2,000) does the emitter wait for it to catch up halfway.

A writer thread takes batches of ``batch_size`` events, or what arrived
within ``flush_interval`` of the first waiting event, redacts and
serializes them (the audit trail's policy, see ``_redaction.py``), turns
them into rows and writes each batch in one transaction, so neither the
emitter nor the event loop ever waits for the database.

What can go wrong, and what happens then:

- the database refuses (down, locked, full, read-only): the batch is retried
  with backoff; if it still fails it is spilled (``_spill.py``: a spill file,
  a second one, then memory), and for a cool-down after that (0.5 s,
  doubling up to 30 s, on the writer's ``clock``) batches go straight to the
  spill until a probe write succeeds, which also drains the spill (a read
  waiting for the writer gets its probe at once);
- the batch holds a poison event (one the database will never take, such as
  a string that cannot be encoded): see ``_isolate.py``; an event that
  cannot be redacted or serialized goes to the dead-letter file at once;
- the SQLite file was removed or replaced: the database reopens it (see
  ``_db.py``) and the batch lands in the new file;
- the database never answers (a stopped or hung server) when the engine
  closes: after the engine's ``shutdown_timeout`` the close leaves the
  thread behind and spills what it has not written (the batch it is
  writing too: writes are idempotent by event id, so a batch both written
  late and spilled is stored once).

A thread (rather than a task) keeps the writer independent of the engine's
task group and cancel scopes: the engine closes plugins inside a shielded
scope, which a task group opened by a plugin could not span.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import anyio
import anyio.to_thread

from onlooker import ExecutionEvent

from ..._interrupts import Interruption, join_thread
from .._stall import Stall
from ._db import Database, describe
from ._isolate import isolate
from ._redaction import Scrubber
from ._rows import Stored
from ._spill import Spill

__all__ = [
    "DEFAULT_RETRY_DELAYS",
    "FIRST_COOLDOWN",
    "MAX_COOLDOWN",
    "STALL_SECONDS",
    "BatchWriter",
    "HistoryWriterStatistics",
]

DEFAULT_RETRY_DELAYS: Final = (0.05, 0.2, 0.5, 1.0)
FIRST_COOLDOWN: Final = 0.5
"""Seconds batches go straight to the spill after the database refused one; doubles each time."""
MAX_COOLDOWN: Final = 30.0
STALL_SECONDS: Final = 1.0
"""How long an emitter waits for a writer that takes nothing before letting events pile up."""
_SHED_LOCK_WAIT: Final = 0.05
"""Seconds the emitting task waits for a spill file's lock when it sheds (a drain holds it:
the next spill file then), so that the event loop is not held for long."""
_SPILL_LOCK_WAIT: Final = 1.0
"""Seconds a close that leaves a stuck writer behind waits for a spill file's lock."""
_SAVE_SECONDS: Final = 5.0
"""The least time that close gives itself to spill what the writer had not written."""


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


class BatchWriter:
    """Buffers events and writes them in batches from its own thread; see the module docstring.

    ``clock`` is what the cool-down after a refused batch is measured on
    (``time.monotonic``; tests give a clock they move forward).
    """

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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._spill = spill
        self._dead = spill.dead
        self._scrubber = scrubber
        self._logger = logger
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._retry_delays = tuple(retry_delays)
        self.clock = clock
        self._max_pending = max(2 * batch_size, 2000)
        self._buffer: deque[ExecutionEvent] = deque()
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)  # the writer waits on it
        self._progress = threading.Condition(self._lock)  # flush() and backpressure wait on it
        self._idle = False  # the writer waits for a first event: the next one wakes it
        self._urgent = False
        self._reader_probe = False  # a reader waits: probe the database once, cooling down or not
        self._stall = Stall()  # the writer took nothing for a while: emitters do not wait
        self._closing = False
        self._accepted = 0
        self._handled = 0
        self._shed_count = 0  # of those handled, the events the emitter spilled (_shed)
        self._shed_at = 2 * self._max_pending  # while stalled: waiting events that make it shed
        self._written = 0
        self._spilled = 0
        self._retries = 0
        self._batches = 0
        self._dropped_at_close = 0
        self._cooldown = 0.0
        self._degraded_until: float | None = None
        self._spill_dirty = False
        self._current: list[ExecutionEvent] | None = None  # the batch taken, until handled
        self._finished = False  # the thread is done (set under the lock)
        self._abandoned = False  # the close went on without the thread (set under the lock)
        self._unsaved = 0  # events an abandon took and has not yet put in a spill file
        self._held_at_close: list[Stored] | None = None  # what the last chance is writing
        self._thread = threading.Thread(
            target=self._run, name=f"onlooker history writer ({db.masked_url})", daemon=True
        )

    # -- the observer's side (the emitting task) ---------------------------------------

    def handle(self, event: ExecutionEvent) -> None:
        """Take one event (the history plugin's observer): append it, wake the writer if idle."""
        if self._closing:
            raise RuntimeError("the history writer is closed")
        buffer = self._buffer
        buffer.append(event)
        self._accepted += 1
        size = len(buffer)
        if self._idle or size == self._batch_size:
            with self._lock:
                self._idle = False
                self._wakeup.notify()
        elif self._stall.stalled:
            if self._stall.resumes(self._taken(), size < self._max_pending // 2):
                self._shed_at = 2 * self._max_pending
                self._logger.info("history: the writer goes on with %s", self._db.masked_url)
            elif size >= self._shed_at:
                self._shed()
        elif size >= self._max_pending:
            self._wait_for_room()

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

    async def aclose(self, grace: float | None = None) -> None:
        """Write (or spill) everything accepted, then stop the thread.

        A thread still writing after ``grace`` seconds (a database that
        never answers) is left behind: what it has not written is spilled.
        """
        with self._lock:
            self._closing = True
            self._wakeup.notify()
        if not self._thread.is_alive():
            return
        interruption = Interruption(
            "the history writer is still waited for"
        )  # a Ctrl-C meanwhile: raised once the writer is done
        began = anyio.current_time()
        try:
            await join_thread(self._thread, grace, interruption)
        except BaseException:  # interrupted twice: the close ends now, what is unwritten kept
            if self._thread.is_alive():
                self._saver(anyio.current_time() - began).join(_SAVE_SECONDS)
            raise
        if self._thread.is_alive() and grace is not None:
            # In a thread of its own, waited for as the writer is: through one interruption
            # (trio raises a Ctrl-C at the close's next checkpoint, which may be this one).
            saver = self._saver(anyio.current_time() - began)
            bound = max(grace, _SAVE_SECONDS)
            await join_thread(saver, bound, interruption)
            if saver.is_alive():  # a spill file on a disk that hangs
                self._logger.critical(
                    "history: %d events the stuck writer to %s had not written could not be "
                    "saved within %g s: lost unless they are written before the process exits",
                    self._unsaved,
                    self._db.masked_url,
                    bound,
                )
        interruption.raise_caught()

    def _saver(self, waited: float) -> threading.Thread:
        """A thread, started, spilling what the stuck writer has not written."""
        saver = threading.Thread(
            target=self._abandon, args=(waited,), name="onlooker history spill", daemon=True
        )
        saver.start()
        return saver

    @property
    def left_behind(self) -> bool:
        """Whether the close went on without the thread (which then closes the database)."""
        return self._abandoned

    def _running(self) -> bool:
        return self._thread.is_alive()

    def _abandon(self, waited: float) -> None:
        """The close waited ``waited`` s for a writer stuck in the database: spill the events
        it has not written, the batch it is writing too (should that still land, the spilled
        copy is stored once: writes are idempotent by event id)."""
        with self._lock:
            if self._finished:  # it finished meanwhile: nothing is left to spill
                return
            self._abandoned = True
            taken = [*(self._current or ()), *self._buffer]
            self._buffer.clear()
            self._current = None  # accounted here: the thread does not count it again
            self._handled += len(taken)
            # what it held in memory and is writing at close: counted as spilled already
            held, self._held_at_close = self._held_at_close or [], None
            self._unsaved = len(taken) + len(held)
        ready = self._scrubber.prepare(taken, self._dead) if taken else []
        # A drain stuck in the database holds the spill file's lock: the next place then.
        saved = self._keep_or_lose(ready, wait=_SPILL_LOCK_WAIT)
        with self._lock:
            self._spilled += saved
        if held:
            saved += self._keep_or_lose(held, wait=_SPILL_LOCK_WAIT)
        self._unsaved = 0
        self._logger.error(
            "history: the writer to %s has not finished %.1f s into the close (the database "
            "does not answer); it is left behind, and %d of the %d events it had not "
            "written went to %s",
            self._db.masked_url,
            waited,
            saved,
            len(ready) + len(held),
            self._spill.place,
        )

    def _keep_or_lose(self, held: list[Stored], *, wait: float | None = None) -> int:
        """At close: ``held`` to a spill file, else counted and reported lost; returns how
        many a spill file took."""
        try:
            kept = self._spill.append(held, wait)
        except TimeoutError as exc:  # the stuck writer holds the spill: nothing saved
            self._logger.critical("history: %d events lost at close: %s", len(held), exc)
            self._dropped_at_close += len(held)
            return 0
        try:
            lost = self._spill.take_memory(wait)
        except TimeoutError:  # what it holds in memory stays with the stuck writer
            lost = []
        if lost:
            self._dropped_at_close += len(lost)
            self._logger.critical(
                "history: %d events lost at close: neither %s nor any spill file (%s) takes writes",
                len(lost),
                self._db.masked_url,
                ", ".join(str(file.path) for file in self._spill.files),
            )
        return max(0, kept - len(lost))

    def _wait_for_room(self) -> None:
        """Backpressure: the writer is far behind; wait until it has caught up halfway.

        This blocks the emitting task, and with it the event loop, so only while
        the writer makes progress: a writer that takes nothing for
        :data:`STALL_SECONDS` (a locked or hung database) is stalled, and the
        events wait in memory, the program going on, until it takes a batch
        again (or has caught up halfway).
        """
        with self._lock:
            stalled = self._stall.wait(
                lambda: len(self._buffer) >= self._max_pending // 2 and self._running(),
                self._nudge,
                self._taken,
                STALL_SECONDS,
            )
        if stalled:
            self._logger.warning(
                "history: the writer has taken nothing from %s for %g s with %d events waiting; "
                "the program goes on, and what waits beyond %d events goes to %s",
                self._db.masked_url,
                STALL_SECONDS,
                len(self._buffer),
                self._max_pending,
                self._spill.place,
            )

    def _taken(self) -> int:
        """How many events the writer thread has taken: its progress (not the emitter's)."""
        return self._handled - self._shed_count

    def _shed(self) -> None:
        """A stalled writer (a database locked or hung for long) takes nothing: the events
        it would take next, all but ``max_pending``, go from here to the spill, as a batch
        the database refused does, rather than to memory without bound. The program pays
        for it (redacting and appending them), which is the backpressure a spill allows."""
        with self._lock:
            shed = [self._buffer.popleft() for _ in range(len(self._buffer) - self._max_pending)]
        try:
            ready = self._scrubber.prepare(shed, self._dead)
            spilled = self._spill.append(ready, _SHED_LOCK_WAIT)
        except Exception as exc:  # the spill is busy (a drain, a disk that hangs): they wait
            with self._lock:
                self._buffer.extendleft(reversed(shed))
            # Tried again once as many more wait: the loop is not held at every event.
            self._shed_at = len(self._buffer) + self._max_pending
            self._logger.error(
                "history: %d events could not go to %s (%s); they wait in memory",
                len(shed),
                self._spill.place,
                describe(exc),
            )
            return
        self._shed_at = 2 * self._max_pending
        with self._lock:
            self._spilled += spilled
            self._spill_dirty = True
            self._handled += len(shed)
            self._shed_count += len(shed)
            self._progress.notify_all()

    def _nudge(self) -> None:
        """Wake the writer, then wait a little for its progress (the caller holds the lock)."""
        self._wakeup.notify()
        self._progress.wait(0.1)

    def _wait_handled(self, target: int) -> None:
        with self._lock:
            self._urgent = True
            self._reader_probe = True
            self._wakeup.notify()
            while self._handled < target and self._running():
                self._progress.wait(0.5)

    # -- the writer thread ------------------------------------------------------------

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._write(batch)
            with self._lock:
                if self._current is batch:  # else a close that went on without us counted it
                    self._current = None
                    self._handled += len(batch)
                self._progress.notify_all()
        self._last_chance()
        with self._lock:
            self._finished = True
            left_behind = self._abandoned
        if left_behind:  # the store's close went on without us: closing the database is ours
            try:
                self._db.dispose()
            except Exception as exc:
                self._logger.warning("history: closing %s: %s", self._db.masked_url, describe(exc))

    def _next_batch(self) -> list[ExecutionEvent] | None:
        """The next batch: full, or what came within the flush interval; ``None`` at close."""
        buffer = self._buffer
        with self._lock:
            # Idle before looking: an event appended after the look then sees it and wakes us.
            self._idle = True
            while not buffer and not self._closing:
                self._urgent = False
                self._wakeup.wait()
            self._idle = False
            if not buffer:
                return None
            deadline = time.monotonic() + self._flush_interval
            while len(buffer) < self._batch_size and not (self._closing or self._urgent):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wakeup.wait(left)
            batch = self._current = [
                buffer.popleft() for _ in range(min(len(buffer), self._batch_size))
            ]
        return batch

    def _write(self, batch: list[ExecutionEvent]) -> None:
        try:
            ready = self._scrubber.prepare(batch, self._dead)
        except Exception as exc:  # a bug: the payloads were not redacted, so keep no payload
            self._logger.exception("history: writer failed to redact a batch: %s", exc)
            for event in batch:
                self._dead.event(event, f"cannot be redacted: {exc!r}", redacted=False)
            return
        try:
            if self._degraded_until is not None:
                # A reader waiting (read-your-writes) gets one probe at once: a database
                # back before the cool-down ends would have it read a partial history.
                if self.clock() < self._degraded_until and not self._reader_probe:
                    self._to_spill(ready)
                    return
                attempts: tuple[float, ...] = ()  # one probe while the database seems down
            else:
                attempts = self._retry_delays
            self._reader_probe = False  # a waiting reader's batch is this one
            self._attempt(ready, attempts)
        except Exception as exc:  # a bug here must never lose the batch
            self._logger.exception("history: writer failed on a batch: %s", exc)
            self._to_spill(ready)

    def _attempt(self, ready: list[Stored], attempts: tuple[float, ...]) -> None:
        """Write ``ready``, retrying after each of ``attempts``; spill what is still refused."""
        pending: Sequence[Stored] = ready
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
                self._to_spill(list(pending))
                self._logger.error(
                    "history: %d events could not be written to %s: %s; they wait in %s, "
                    "for the next write that reaches the database",
                    len(pending),
                    self._db.masked_url,
                    error,
                    self._spill.place,
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
        self._cooldown = min(max(self._cooldown * 2, FIRST_COOLDOWN), MAX_COOLDOWN)
        self._degraded_until = self.clock() + self._cooldown

    def _to_spill(self, batch: list[Stored]) -> None:
        spilled = self._spill.append(batch)
        with self._lock:  # the writer and a shedding emitter both count here
            self._spilled += spilled
            self._spill_dirty = True

    def _write_isolating(self, batch: Sequence[Stored]) -> int:
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
        with self._lock:  # a shed meanwhile sets it under the lock too
            self._spill_dirty = self._spill.pending()

    def _last_chance(self) -> None:
        """At close: events held in memory go to the database or a spill file, else are lost."""
        if not self._spill.in_memory:
            return
        held = self._spill.take_memory()
        with self._lock:  # the close's saver takes them if the database holds us too long
            late = self._abandoned  # it went on before it could see them: they are ours
            if not late:
                self._held_at_close = held
        if late:
            self._keep_or_lose(held)
            return
        try:
            self._write_isolating(held)
            written = True
        except Exception as exc:
            self._logger.warning("history: at close, %s", describe(exc))
            written = False
        with self._lock:
            taken_over = self._held_at_close is not held
            self._held_at_close = None
        if taken_over:
            return
        if written:
            self._logger.info("history: %d events held in memory written at close", len(held))
        else:
            self._keep_or_lose(held)
