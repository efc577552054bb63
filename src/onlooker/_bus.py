"""EventBus: one reactivex Subject, every observer isolated, async observers on queues.

Delivery model:

* synchronous observers run inline in the emitter's task, in subscription
  order, each behind its own guard; the bus calls them directly, before the
  Subject (a Subject subscription per observer would cost ~0.3 µs per event
  each, the largest part of an observed event's price);
* ``bus.events`` subscribers (Rx pipelines) are subscribed to the Subject;
* asynchronous observers get a bounded ordered queue (a deque) and a worker
  task in the engine's task group; the bus appends to the queue directly, and
  a full ``block`` queue holds the emitter until it has drained to half;
* a guard swallows and logs any ``Exception`` (a bare Subject would let one
  observer's exception stop delivery to the next) and lets everything else —
  cancellation, ``KeyboardInterrupt`` — propagate to the emitter.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

import anyio
import reactivex
from reactivex import abc as rx_abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from ._events import ExecutionEvent
from ._observer import ObserverLike, log_observer_failure, observer_name, resolve_handler

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = ["BusStatistics", "EventBus", "Overflow"]

logger: Final = logging.getLogger("onlooker")

Overflow: TypeAlias = Literal["block", "drop"]
"""What happens when an async observer's queue is full: the emitter waits, or the event is dropped."""

DEFAULT_QUEUE_SIZE: Final = 1024


@dataclass(frozen=True, slots=True)
class BusStatistics:
    """A snapshot of the bus's counters (``bus.statistics()``)."""

    emitted: int
    """Events accepted by the bus."""
    delivered: int
    """Successful deliveries (one event to one observer)."""
    dropped: int
    """Events dropped because an ``overflow="drop"`` observer's queue was full."""
    observer_errors: int
    """Exceptions raised by observers, logged and swallowed."""
    queued: int
    """Events waiting in async observers' queues right now."""
    subscribers: int
    """Observers currently subscribed (sync, async and ``bus.events``)."""
    errors_by_observer: dict[str, int] = field(default_factory=dict)
    """``observer_errors`` by observer (plugin id or given name)."""
    dropped_by_observer: dict[str, int] = field(default_factory=dict)
    """``dropped`` by observer."""


class _SyncFanOut:
    """Every synchronous observer, called by the bus in subscription order, each isolated."""

    __slots__ = ("bus", "observers")

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self.observers: tuple[tuple[str, Callable[[ExecutionEvent], object]], ...] = ()

    def on_next(self, event: ExecutionEvent) -> None:
        observers = self.observers
        failures = 0
        for name, handle in observers:
            try:
                handle(event)
            except Exception as exc:
                failures += 1
                self.bus._observer_failed(name, event, exc)
        self.bus._delivered += len(observers) - failures


class _RxGuard:
    """Isolates a subscriber that came through ``bus.events``."""

    __slots__ = ("bus", "name", "observer")

    def __init__(
        self, bus: EventBus, name: str, observer: rx_abc.ObserverBase[ExecutionEvent]
    ) -> None:
        self.bus = bus
        self.name = name
        self.observer = observer

    def on_next(self, event: ExecutionEvent) -> None:
        try:
            self.observer.on_next(event)
        except Exception as exc:
            self.bus._observer_failed(self.name, event, exc)
        else:
            self.bus._delivered += 1

    def on_error(self, error: Exception) -> None:
        try:
            self.observer.on_error(error)
        except Exception as exc:
            logger.error("observer %r failed in on_error", self.name, exc_info=exc)

    def on_completed(self) -> None:
        try:
            self.observer.on_completed()
        except Exception as exc:
            logger.error("observer %r failed in on_completed", self.name, exc_info=exc)


class _AsyncQueue:
    """One async observer's bounded queue and its worker."""

    __slots__ = (
        "_space",
        "_wakeup",
        "bus",
        "busy",
        "closed",
        "handle",
        "maxsize",
        "name",
        "overflow",
        "queue",
        "started",
    )

    def __init__(
        self,
        bus: EventBus,
        name: str,
        handle: Callable[[ExecutionEvent], Awaitable[object]],
        maxsize: int,
        overflow: Overflow,
    ) -> None:
        self.bus = bus
        self.name = name
        self.handle = handle
        self.maxsize = maxsize
        self.overflow = overflow
        self.queue: deque[ExecutionEvent] = deque()
        self.busy = False
        self.closed = False
        self.started = False
        self._wakeup: anyio.Event | None = None
        self._space: anyio.Event | None = None

    def on_next(self, event: ExecutionEvent) -> None:
        queue = self.queue
        if len(queue) >= self.maxsize:
            if self.overflow == "drop":
                self.bus._dropped_event(self.name)
                return
            self.bus._full.add(self)
            self.bus.congested = True
        queue.append(event)
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    async def wait_for_space(self) -> None:
        while len(self.queue) >= self.maxsize and not self.closed:
            if self._space is None:
                self._space = anyio.Event()
            await self._space.wait()

    async def run(self) -> None:
        try:
            await self._work()
        except BaseException:
            # The worker dies (the engine's task group sees why): release flush()
            # and any emitter waiting for space, or closing the engine would hang.
            self.queue.clear()
            self.busy = False
            self.close()
            self.bus._full.discard(self)
            self.bus.congested = bool(self.bus._full)
            self.bus._maybe_drained()
            raise

    async def _work(self) -> None:
        queue = self.queue
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
            if self._space is not None and len(queue) <= self.maxsize // 2:
                self._space.set()
                self._space = None
                self.bus._full.discard(self)
                self.bus.congested = bool(self.bus._full)
            try:
                await self.handle(event)
            except Exception as exc:
                self.bus._observer_failed(self.name, event, exc)
            else:
                self.bus._delivered += 1

    def close(self) -> None:
        self.closed = True
        for waiter in (self._wakeup, self._space):
            if waiter is not None:
                waiter.set()
        self._wakeup = self._space = None


class EventBus:
    """The event stream every observer and plugin listens to.

    ``bus.events`` is the reactivex ``Observable`` for Rx users;
    ``bus.subscribe(observer)`` subscribes a sync or async observer;
    ``bus.emit(event)`` sends one event to all of them.
    """

    def __init__(self) -> None:
        self._subject: Subject[ExecutionEvent] = Subject()
        self._sync = _SyncFanOut(self)
        self._queues: list[_AsyncQueue] = []
        self._active: tuple[_AsyncQueue, ...] = ()  # subscribed async queues, fed by emit()
        self._full: set[_AsyncQueue] = set()
        self.congested = False
        """True while some ``block`` observer's queue is full (emitters then wait)."""
        self._task_group: TaskGroup | None = None
        self._drained: anyio.Event | None = None
        self._emitted = 0
        self._delivered = 0
        self._dropped: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self._rx_count = 0
        self._closed = False
        self.events: reactivex.Observable[ExecutionEvent] = reactivex.create(self._subscribe_rx)
        """The event stream as a reactivex ``Observable``; its subscribers are isolated too."""

    # -- subscribing -------------------------------------------------------------

    def subscribe(
        self,
        observer: ObserverLike,
        *,
        name: str | None = None,
        overflow: Overflow = "block",
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> rx_abc.DisposableBase:
        """Subscribe an observer; returns a disposable that unsubscribes it.

        A synchronous observer runs inline in the emitter's task. An
        asynchronous one gets a queue of ``queue_size`` events and a worker
        task; ``overflow`` says what happens when that queue is full.
        """
        if overflow not in ("block", "drop"):
            raise ValueError(f"overflow must be 'block' or 'drop', not {overflow!r}")
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, not {queue_size}")
        if self._closed:
            raise RuntimeError("this bus is closed")
        handle, is_async = resolve_handler(observer)
        label = name or observer_name(observer)
        if not is_async:
            return self._subscribe_sync(label, handle)
        queue = _AsyncQueue(self, label, handle, queue_size, overflow)  # type: ignore[arg-type]
        self._queues.append(queue)
        if self._task_group is not None:
            self._start_worker(queue)
        self._active = (*self._active, queue)

        def dispose() -> None:
            self._active = tuple(q for q in self._active if q is not queue)
            queue.close()
            if queue in self._queues and not queue.started:
                self._queues.remove(queue)

        return Disposable(dispose)

    def _subscribe_sync(
        self, name: str, handle: Callable[[ExecutionEvent], object]
    ) -> rx_abc.DisposableBase:
        fan_out = self._sync
        entry = (name, handle)
        fan_out.observers = (*fan_out.observers, entry)

        def dispose() -> None:
            fan_out.observers = tuple(o for o in fan_out.observers if o is not entry)

        return Disposable(dispose)

    def _subscribe_rx(
        self,
        observer: rx_abc.ObserverBase[ExecutionEvent],
        scheduler: rx_abc.SchedulerBase | None = None,
    ) -> rx_abc.DisposableBase:
        self._rx_count += 1
        guard = _RxGuard(self, f"bus.events#{self._rx_count}", observer)
        return self._subject.subscribe(guard.on_next, guard.on_error, guard.on_completed)

    # -- emitting ----------------------------------------------------------------

    def emit(self, event: ExecutionEvent) -> None:
        """Send ``event`` to every observer.

        Never blocks: a full ``block`` queue takes the event anyway and the
        emitter is expected to ``await bus.wait_for_space()`` (the engine
        does). An observer's ``Exception`` is logged; anything else propagates.
        """
        self._emitted += 1
        sync = self._sync
        if sync.observers:
            sync.on_next(event)
        for queue in self._active:
            queue.on_next(event)
        if self._subject.observers:
            self._subject.on_next(event)

    async def send(self, event: ExecutionEvent) -> None:
        """Emit ``event``, then wait while a ``block`` observer's queue is full (backpressure)."""
        self.emit(event)
        if self._full:
            await self.wait_for_space()

    async def wait_for_space(self) -> None:
        """Wait until no ``block`` observer's queue is full."""
        while self._full:
            queue = next(iter(self._full))
            await queue.wait_for_space()
            if len(queue.queue) < queue.maxsize or queue.closed:
                self._full.discard(queue)
                self.congested = bool(self._full)

    async def flush(self) -> None:
        """Wait until every async observer has handled every event accepted so far."""
        while not self._is_drained():
            if self._task_group is None:
                raise RuntimeError(
                    "async observers are not running: flush() needs a started engine"
                )
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()

    def statistics(self) -> BusStatistics:
        """The bus's counters, as a frozen snapshot."""
        return BusStatistics(
            emitted=self._emitted,
            delivered=self._delivered,
            dropped=sum(self._dropped.values()),
            observer_errors=sum(self._errors.values()),
            queued=sum(len(q.queue) for q in self._queues),
            subscribers=len(self._subject.observers)
            + len(self._sync.observers)
            + len(self._active),
            errors_by_observer=dict(self._errors),
            dropped_by_observer=dict(self._dropped),
        )

    # -- lifecycle (driven by the engine) ------------------------------------------

    def _start(self, task_group: TaskGroup) -> None:
        self._task_group = task_group
        for queue in self._queues:
            if not queue.started:
                self._start_worker(queue)

    def _start_worker(self, queue: _AsyncQueue) -> None:
        assert self._task_group is not None
        queue.started = True
        self._task_group.start_soon(queue.run, name=f"onlooker observer {queue.name}")

    async def _aclose(self) -> None:
        """Flush, stop the workers and complete the Rx stream."""
        if self._closed:
            return
        if self._task_group is not None:
            await self.flush()
        self._closed = True
        for queue in self._queues:
            queue.close()
        self._subject.on_completed()
        self._task_group = None

    # -- bookkeeping ---------------------------------------------------------------

    def _is_drained(self) -> bool:
        return all(not q.queue and not q.busy for q in self._queues)

    def _maybe_drained(self) -> None:
        if self._drained is not None and self._is_drained():
            self._drained.set()
            self._drained = None

    def _dropped_event(self, name: str) -> None:
        self._dropped[name] = self._dropped.get(name, 0) + 1

    def record_observer_errors(self, name: str, count: int) -> None:
        """Count ``count`` failures of observers outside the bus (``observing()`` scopes).

        They are already logged by whoever called them; this puts them in
        :meth:`statistics`, beside the bus's own observers.
        """
        self._errors[name] = self._errors.get(name, 0) + count

    def _observer_failed(self, name: str, event: ExecutionEvent, exc: Exception) -> None:
        self._errors[name] = self._errors.get(name, 0) + 1
        log_observer_failure(name, event, exc)
