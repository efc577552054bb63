"""One asynchronous observer's bounded queue and worker task, as the bus drives them.

Every event the observer does not get is counted on the bus (``dropped``,
by observer and by :data:`DropReason`) and logged with its name: a full
``overflow="drop"`` queue, a stall (an emitter waited ``stall_timeout`` for
room in vain), a worker that died of a ``BaseException`` (it then takes no
more events) and what is left when the engine's shutdown timeout runs out.
"""

from __future__ import annotations

import logging
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, final

import anyio

from ._events import ExecutionEvent
from ._results import asyncio_task, stray_cancel

if TYPE_CHECKING:
    from ._bus import EventBus

__all__ = ["AsyncQueue", "DropReason", "Overflow", "logger"]

logger: Final = logging.getLogger("onlooker")

Overflow: TypeAlias = Literal["block", "drop"]
"""What happens when an async observer's queue is full: the emitter waits, or the event is dropped."""

DropReason: TypeAlias = Literal["overflow", "stalled", "died", "shutdown"]
"""Why an async observer did not get an event (``BusStatistics.dropped_by_reason``)."""


@final
class AsyncQueue:
    """One async observer's bounded queue and its worker.

    States: accepting (the default); ``stalled`` (an emitter waited
    ``stall_timeout`` for room in vain: a full queue drops instead of
    waiting, as an ``overflow="drop"`` one always does, until the worker has
    drained it to half); ``closed`` (the subscription was disposed: the worker
    ends once its queue is empty); ``retired`` (the worker died, was
    cancelled, or the bus closed: every later event is dropped and counted,
    none is queued).
    """

    __slots__ = (
        "_space",
        "_wakeup",
        "bus",
        "busy",
        "closed",
        "died_of",
        "drain_scope",
        "draining",
        "ended",
        "episode",
        "errors",
        "handle",
        "holding",
        "maxsize",
        "name",
        "orphaned",
        "overflow",
        "queue",
        "reason",
        "retired",
        "stall_timeout",
        "stalled",
        "started",
        "worker",
    )

    def __init__(
        self,
        bus: EventBus,
        name: str,
        handle: Callable[[ExecutionEvent], Awaitable[object]],
        maxsize: int,
        overflow: Overflow,
        stall_timeout: float,
    ) -> None:
        self.bus = bus
        self.name = name
        self.handle = handle
        self.maxsize = maxsize
        self.overflow = overflow
        self.stall_timeout = stall_timeout
        self.reason: DropReason = "overflow" if overflow == "drop" else "stalled"
        """Why a full queue drops: the reason counted for its drops."""
        self.queue: deque[ExecutionEvent] = deque()
        self.busy = False
        self.holding: ExecutionEvent | None = None  # the event the worker is handling
        self.closed = False
        self.retired = False
        self.orphaned = False  # its worker was cancelled with the engine's task group
        self.draining = False  # a flush is handing an orphaned queue's events to its observer
        self.drain_scope: anyio.CancelScope | None = None  # that hand-over, for the close
        self.died_of: BaseException | None = None  # what its observer died of while drained
        self.started = False
        self.ended: anyio.Event | None = None  # set when its worker task ends
        self.stalled = False
        self.episode = 0  # events dropped since the queue was last full (for the log lines)
        self.errors = 0
        self._wakeup: anyio.Event | None = None
        self._space: anyio.Event | None = None
        self.worker: anyio.CancelScope | None = None

    def on_next(self, event: ExecutionEvent) -> None:
        queue = self.queue
        if len(queue) >= self.maxsize:  # always true once retired (maxsize 0)
            if self.stalled or self.overflow == "drop":
                self._drop()
                return
            self.bus._full.add(self)
            self.bus.congested = True
        queue.append(event)
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    def _drop(self) -> None:
        if not self.episode and self.reason == "overflow":  # a stall was logged already
            logger.warning(
                "observer %r: its queue is full (%d events); dropping events until it catches up",
                self.name,
                len(self.queue),
                extra={"observer": self.name},
            )
        self.episode += 1
        self.bus._count_dropped(self.name, self.reason)

    async def wait_for_space(self, since: float) -> None:
        """Wait for room until ``stall_timeout`` after ``since`` (when the emitter began to
        wait); then drop until the worker catches up."""
        with anyio.move_on_after(since + self.stall_timeout - anyio.current_time()) as waited:
            while len(self.queue) >= self.maxsize and not (self.closed or self.stalled):
                if self._space is None:
                    self._space = anyio.Event()
                await self._space.wait()
        if waited.cancelled_caught and not (self.closed or self.stalled):
            self.stalled = True
            logger.error(
                "observer %r stalled: its queue stayed full for %.2g s (stall_timeout %g s); "
                "dropping its events until it catches up",
                self.name,
                anyio.current_time() - since,
                self.stall_timeout,
                extra={"observer": self.name},
            )
            self._release_emitters()

    def _release_emitters(self) -> None:
        if self._space is not None:
            self._space.set()
            self._space = None
        self.bus._full.discard(self)
        self.bus.congested = bool(self.bus._full)

    @property
    def running(self) -> bool:
        """Whether its worker task started and has not ended."""
        return self.ended is not None and not self.ended.is_set()

    async def run(self) -> None:
        self.ended = ended = anyio.Event()
        with anyio.CancelScope() as self.worker:
            try:
                await self._work()
                # Disposed and drained (or retired): the bus has nothing left to flush, retire
                # or hand over here. Let it forget this queue, with the observer and the last
                # event it handled: a long-lived engine whose observers come and go must not
                # keep one queue per subscription for ever.
                self.holding = None
                self.bus._forget(self)
            except BaseException as exc:
                if (
                    isinstance(exc, anyio.get_cancelled_exc_class())
                    and not stray_cancel(exc)  # the observer's own: it died of it
                    and not (self.retired or self.bus._closed)
                ):
                    self._orphan()  # the task that entered the engine was cancelled
                # Dead: nothing more is queued for it, what it held is counted, and
                # flush() and waiting emitters are released — or closing the engine
                # would wait for it forever. An abandoned worker (the shutdown timeout
                # ran out) was counted by the bus already.
                elif not self.retired:
                    self.retire(exc)
                if (
                    isinstance(exc, (KeyboardInterrupt, SystemExit))
                    and asyncio_task() is not None
                    and self.bus._crash(exc)
                ):
                    # asyncio lets these two out of its event loop from whichever task
                    # raises them: the loop stops at once, and workers that have not run
                    # yet are cancelled before their first step, their events never
                    # handed over. Crash the engine's task group as trio would instead:
                    # cancel it, and let the close raise the exception once the other
                    # observers have their events (unless the close is over: raised).
                    return
                raise
            finally:
                ended.set()

    def _orphan(self) -> None:
        """The worker was cancelled with the engine's task group (the task that entered the
        engine was cancelled): keep every event, emitters never wait, and the engine's close
        hands them to the observer itself (:meth:`drain_here`), within its shutdown timeout."""
        self.orphaned = True
        self._hand_back()
        self.maxsize = sys.maxsize
        self._release_emitters()
        self.bus._wake_flush()

    def _hand_back(self) -> None:
        """An event cut off in the observer's hands goes back to the front of the queue."""
        if self.busy and self.holding is not None:
            self.queue.appendleft(self.holding)
        self.busy, self.holding = False, None

    async def drain_here(self) -> None:
        """Handle what an orphaned queue holds, in the flushing task that claimed it
        (``draining``); cancel it to stop: the event in hand is then handed again first.

        An observer that dies of a ``BaseException`` here is retired as a dead
        worker is, and the exception kept in ``died_of`` for the flush to raise.
        """
        queue = self.queue
        with anyio.CancelScope() as self.drain_scope:  # the close cancels one it did not start
            try:
                while queue:
                    self.busy = True
                    self.holding = queue.popleft()
                    await self._deliver(self.holding)
                    self.busy = False
            except BaseException as exc:
                if not isinstance(exc, anyio.get_cancelled_exc_class()) or stray_cancel(exc):
                    self.retire(exc)
                    self.died_of = exc
                    return
                if not self.retired:
                    self._hand_back()  # for the next flush
                self.busy = False
                raise
            finally:
                self.draining = False
                self.drain_scope = None
                self.bus._maybe_drained()
                if queue:  # given up with events left: another flush may take them now
                    self.bus._wake_flush()

    async def _work(self) -> None:
        queue = self.queue
        low_water = self.maxsize // 2
        while True:
            if not queue:
                self.busy = False
                self.bus._maybe_drained()
                if self.closed:
                    return
                self._wakeup = anyio.Event()
                await self._wakeup.wait()
                continue
            self.busy = True
            event = queue.popleft()
            # Wake a waiting emitter only at the low-water mark: waking it at
            # every free slot would switch tasks once per event.
            if len(queue) <= low_water and (
                self._space is not None or self.stalled or self.episode
            ):
                self._caught_up()
            self.holding = event
            try:  # _deliver inlined: one coroutine less per event on the worker's hot path
                await self.handle(event)
            except Exception as exc:
                self.bus._tally.failed(self, event, exc)
            else:
                self.bus._tally.delivered += 1

    async def _deliver(self, event: ExecutionEvent) -> None:
        try:
            await self.handle(event)
        except Exception as exc:
            self.bus._tally.failed(self, event, exc)
        else:
            self.bus._tally.delivered += 1

    def _caught_up(self) -> None:
        """Drained to half: emitters may go on, a stalled queue waits again."""
        if self.episode:
            logger.warning(
                "observer %r caught up; %d events were dropped while its queue was full",
                self.name,
                self.episode,
                extra={"observer": self.name, "dropped": self.episode},
            )
            self.episode = 0
        self.stalled = False
        self._release_emitters()

    def retire(
        self, cause: BaseException | None = None, why: str = "the shutdown timeout ran out"
    ) -> None:
        """Stop for good: drop (count, log) what is queued and in hand, and every later event.

        ``cause`` is what ended the worker; ``None`` when the bus closes it, ``why`` saying
        why it closes it now.
        """
        left = len(self.queue) + self.busy
        self.retired = self.stalled = True
        self.maxsize = 0
        self.reason = "shutdown"
        self.queue.clear()
        self.busy = False
        self.close()
        if isinstance(cause, anyio.get_cancelled_exc_class()) and not stray_cancel(cause):
            why = "the engine's task group was cancelled"
        elif cause is not None:
            self.reason, why = "died", f"it died of {type(cause).__name__}"
        if left or self.reason == "died":
            logger.error(
                "observer %r stopped (%s) and takes no more events; "
                "dropped %d event(s) it had not handled",
                self.name,
                why,
                left,
                extra={"observer": self.name, "dropped": left},
            )
        if left:
            self.bus._count_dropped(self.name, self.reason, left)

    def close(self) -> None:
        """Take no more events; the worker ends once its queue is empty (at once if retired)."""
        self.closed = True
        for waiter in (self._wakeup, self._space):
            if waiter is not None:
                waiter.set()
        self._wakeup = self._space = None
        self.bus._full.discard(self)
        self.bus.congested = bool(self.bus._full)
        self.bus._maybe_drained()
