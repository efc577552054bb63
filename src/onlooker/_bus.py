"""EventBus: one reactivex Subject, every observer isolated, async observers on queues.

Delivery model:

* synchronous observers run inline in the emitter's task, in subscription
  order, through :func:`~onlooker._observer.deliver`; the bus calls them
  directly, before the Subject (a Subject subscription per observer would
  cost ~0.3 µs per event each, the largest part of an observed event's price);
* ``bus.events`` subscribers (Rx pipelines) are subscribed to the Subject,
  each behind the same guard;
* asynchronous observers get a bounded ordered queue (a deque) and a worker
  task in the engine's task group; the bus appends to the queue directly, and
  a full ``block`` queue holds the emitter until it has drained to half — for
  at most the subscription's stall timeout, after which that queue drops
  (counted, logged) until it has caught up;
* the guard swallows, logs and counts any ``Exception`` (a bare Subject would
  let one observer's exception stop delivery to the next) and raises
  everything else — cancellation, ``KeyboardInterrupt`` — to the emitter
  once every observer has the event.

Every event an async observer does not get is counted in ``dropped`` and
logged with the observer's name and the reason (:data:`DropReason`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import anyio
import reactivex
from reactivex import abc as rx_abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from ._events import ExecutionEvent
from ._interrupts import Interruption
from ._observer import (
    ObserverLike,
    Subscriber,
    Tally,
    deliver,
    discard,
    observer_name,
    resolve_handler,
)
from ._queue import AsyncQueue, DropReason, Overflow, logger
from ._rx import EventStream, pipeline_name

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = ["BusStatistics", "EventBus", "Overflow"]

DEFAULT_QUEUE_SIZE: Final = 1024
DEFAULT_STALL_TIMEOUT: Final = 30.0
"""Seconds an emitter waits for a full ``block`` queue (OpenTelemetry's export timeout)."""
DEFAULT_SHUTDOWN_TIMEOUT: Final = 30.0
"""Seconds closing the engine waits for the observers (OpenTelemetry's shutdown timeout)."""


def check_timeout(name: str, value: float, *, unbounded: bool = False) -> float:
    """``value`` as a float if it is a positive, finite number of seconds (or infinite,
    when ``unbounded``).

    Anything else is a ``TypeError`` (not a number) or ``ValueError`` naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not (0 < value < math.inf or (unbounded and value == math.inf)):
        kind = "positive" if unbounded else "positive, finite"
        raise ValueError(f"{name} must be a {kind} number of seconds, not {value}")
    return float(value)


def check_queue_size(value: int) -> int:
    """``value`` if it is an int of at least 1; else a ``TypeError`` or ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"queue_size must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"queue_size must be at least 1, not {value}")
    return value


@dataclass(frozen=True, slots=True)
class BusStatistics:
    """A snapshot of the bus's counters (``bus.statistics()``)."""

    emitted: int
    """Events accepted by the bus."""
    delivered: int
    """Successful deliveries (one event to one observer, ``observing()`` scopes included)."""
    dropped: int
    """Events an async observer did not get: a full ``overflow="drop"`` queue, a stalled
    or dead observer, or what was left when the shutdown timeout ran out."""
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
    dropped_by_reason: dict[str, int] = field(default_factory=dict)
    """``dropped`` by reason: ``overflow``, ``stalled``, ``died``, ``shutdown``."""


class _RxGuard:
    """Isolates a subscriber that came through ``bus.events``."""

    __slots__ = ("bus", "observer", "subscribers")

    def __init__(
        self, bus: EventBus, name: str, observer: rx_abc.ObserverBase[ExecutionEvent]
    ) -> None:
        self.bus = bus
        self.observer = observer
        self.subscribers = (Subscriber(name, observer.on_next),)

    def on_next(self, event: ExecutionEvent) -> None:
        failure = deliver(self.subscribers, event, self.bus._tally)
        if failure is not None and self.bus._rx_failure is None:
            # The Subject would stop at a raise: the bus raises it after the last subscriber.
            self.bus._rx_failure = failure

    def on_error(self, error: Exception) -> None:
        self._signal("on_error", lambda: self.observer.on_error(error))

    def on_completed(self) -> None:
        self._signal("on_completed", self.observer.on_completed)

    def _signal(self, what: str, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as exc:
            self.bus._tally.failed(self.subscribers[0], None, exc, what)


class _TurnsAsync:
    """A plain callable observer: synchronous until it returns an awaitable, then asynchronous.

    Its worker awaits that first awaitable (of the event being delivered)
    before the next events, so none is missed and their order holds; after
    the turn, a call that returns ``None`` is simply done. An awaitable that
    comes once the subscription is disposed, or the bus closed, is closed
    unawaited (and, on a closed bus, counted as dropped).
    """

    def __init__(
        self,
        bus: EventBus,
        name: str,
        handle: Callable[[ExecutionEvent], object],
        settings: tuple[int, Overflow, float],
    ) -> None:
        self._bus = bus
        self._name = name
        self._handle = handle
        self._settings = settings
        self._pending: list[Awaitable[object]] = []
        self._worker: AsyncQueue | None = None
        self._queue: rx_abc.DisposableBase | None = None
        self._disposed = False
        self._subscriber = Subscriber(name, handle, self._turn)
        self._as_sync = bus._subscribe_sync(self._subscriber)

    def _turn(self, first: Awaitable[object]) -> None:
        bus = self._bus
        self._as_sync.dispose()  # no longer called inline
        if self._disposed or bus._closed:
            discard(first)
            if bus._closed:
                bus._count_dropped(self._name, "shutdown")
            return
        self._pending.append(first)
        self._worker = AsyncQueue(bus, self._name, self._awaiting, *self._settings)
        self._queue = bus._subscribe_async(self._worker)  # emit() hands it the event next

    async def _awaiting(self, event: ExecutionEvent) -> None:
        returned = self._pending.pop() if self._pending else self._handle(event)
        if inspect.isawaitable(returned):
            await returned

    def dispose(self) -> None:
        self._disposed = True
        self._as_sync.dispose()
        if self._queue is not None:
            self._queue.dispose()  # a started worker still handles what it holds
        if self._worker is not None and not self._worker.started:
            for awaitable in self._pending:  # nothing will ever await it
                discard(awaitable)
            self._pending.clear()


class EventBus:
    """The event stream every observer and plugin listens to.

    ``bus.events`` is the reactivex ``Observable`` for Rx users;
    ``bus.subscribe(observer)`` subscribes a sync or async observer;
    ``bus.emit(event)`` sends one event to all of them.
    """

    def __init__(self) -> None:
        self._subject: Subject[ExecutionEvent] = Subject()
        self._sync: tuple[Subscriber, ...] = ()
        self._queues: list[AsyncQueue] = []
        self._active: tuple[AsyncQueue, ...] = ()  # subscribed async queues, fed by emit()
        self._full: set[AsyncQueue] = set()
        self.congested = False
        """True while some ``block`` observer's queue is full (emitters then wait)."""
        self.observed = False
        """True while anything is subscribed: emitters build no event nobody would get."""
        self._task_group: TaskGroup | None = None
        self._drained: anyio.Event | None = None
        self._emitted = 0
        self._tally = Tally()
        self._dropped: dict[str, int] = {}
        self._dropped_by_reason: dict[str, int] = {}
        self._rx_failure: BaseException | None = None
        self._rx_count = 0
        self._closed = False
        self._crashed: BaseException | None = None
        """What an asynchronous observer died of, for the close to raise (asyncio: see _crash)."""
        self.events: reactivex.Observable[ExecutionEvent] = EventStream(self, self._subscribe_rx)
        """The event stream as a reactivex ``Observable``; its subscribers are isolated too."""

    # -- subscribing -------------------------------------------------------------

    def subscribe(
        self,
        observer: ObserverLike,
        *,
        name: str | None = None,
        overflow: Overflow = "block",
        queue_size: int = DEFAULT_QUEUE_SIZE,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    ) -> rx_abc.DisposableBase:
        """Subscribe an observer; returns a disposable that unsubscribes it.

        A synchronous observer runs inline in the emitter's task. An
        asynchronous one gets a queue of ``queue_size`` events and a worker
        task; ``overflow`` says what happens when that queue is full: the
        emitter waits (``"block"``) — for at most ``stall_timeout`` seconds,
        after which the queue drops events until the observer has caught up —
        or the event is dropped (``"drop"``). Drops are counted and logged.
        """
        if overflow not in ("block", "drop"):
            raise ValueError(f"overflow must be 'block' or 'drop', not {overflow!r}")
        check_queue_size(queue_size)
        stall_timeout = check_timeout("stall_timeout", stall_timeout)
        if self._closed:
            raise RuntimeError("this bus is closed")
        handle, is_async = resolve_handler(observer)
        label = name or observer_name(observer)
        if is_async:
            queue = AsyncQueue(self, label, handle, queue_size, overflow, stall_timeout)  # type: ignore[arg-type]  # resolve_handler said it is async
            return self._subscribe_async(queue)
        # A plain callable may still return an awaitable: then it becomes asynchronous.
        late = _TurnsAsync(self, label, handle, (queue_size, overflow, stall_timeout))
        return Disposable(late.dispose)

    def _subscribe_async(self, queue: AsyncQueue) -> rx_abc.DisposableBase:
        self._queues.append(queue)
        if self._task_group is not None:
            self._start_worker(queue)
        self._active = (*self._active, queue)
        self.observed = True

        def dispose() -> None:
            self._active = tuple(q for q in self._active if q is not queue)
            queue.close()
            if queue in self._queues and not queue.started:
                self._queues.remove(queue)
            self._refresh_observed()

        return Disposable(dispose)

    def _subscribe_sync(self, subscriber: Subscriber) -> rx_abc.DisposableBase:
        self._sync = (*self._sync, subscriber)
        self.observed = True

        def dispose() -> None:
            self._sync = tuple(s for s in self._sync if s is not subscriber)
            self._refresh_observed()

        return Disposable(dispose)

    def _refresh_observed(self) -> None:
        self.observed = bool(self._sync or self._active or self._subject.observers)

    def _subscribe_rx(
        self,
        observer: rx_abc.ObserverBase[ExecutionEvent],
        scheduler: rx_abc.SchedulerBase | None = None,
    ) -> rx_abc.DisposableBase:
        name = pipeline_name.get()  # a pipeline's end guard named it
        if name is None:
            self._rx_count += 1
            name = f"bus.events#{self._rx_count}"
        guard = _RxGuard(self, name, observer)
        subscription = self._subject.subscribe(guard.on_next, guard.on_error, guard.on_completed)
        self.observed = True

        def dispose() -> None:
            subscription.dispose()
            self._refresh_observed()

        return Disposable(dispose)

    # -- emitting ----------------------------------------------------------------

    def emit(self, event: ExecutionEvent, scoped: tuple[Subscriber, ...] = ()) -> None:
        """Send ``event`` to every observer, then to ``scoped`` (an ``observing()`` scope's).

        Never blocks: a full ``block`` queue takes the event anyway and the
        emitter is expected to ``await bus.wait_for_space()`` (the engine
        does). An observer's ``Exception`` is logged and counted; anything
        else propagates, once every observer, scoped ones included, has the
        event.
        """
        self._emitted += 1
        sync = self._sync
        failure = deliver(sync, event, self._tally) if sync else None
        for queue in self._active:
            queue.on_next(event)
        if self._subject.observers:
            self._subject.on_next(event)
            if self._rx_failure is not None:
                failure = failure or self._rx_failure
                self._rx_failure = None
        if scoped:
            scoped_failure = deliver(scoped, event, self._tally)
            failure = failure or scoped_failure
        if failure is not None:
            raise failure

    async def send(self, event: ExecutionEvent) -> None:
        """Emit ``event``, then wait while a ``block`` observer's queue is full (backpressure)."""
        self.emit(event)
        if self._full:
            await self.wait_for_space()

    async def wait_for_space(self) -> None:
        """Wait until no ``block`` observer's queue is full (each for at most its stall timeout).

        Every full queue's timeout runs from the start of this wait: several hung
        observers hold the emitter for the longest of their timeouts, not their sum.
        """
        began = anyio.current_time()
        while self._full:
            queue = next(iter(self._full))
            await queue.wait_for_space(began)
            if len(queue.queue) < queue.maxsize or queue.closed or queue.stalled:
                self._full.discard(queue)
                self.congested = bool(self._full)

    async def flush(self) -> None:
        """Wait until every async observer has handled every event accepted so far.

        A hung observer makes this wait too: bound it with ``anyio.move_on_after``
        (closing the engine bounds it with its shutdown timeout). A queue whose
        worker was cancelled with the engine's task group (the task inside
        ``async with engine:`` was) is handed to its observer here, in this
        task, each such queue concurrently; an observer that dies of a
        ``BaseException`` meanwhile takes no more events, and the exception is
        raised once the others are handed theirs.
        """
        while not self._is_drained():
            if self._task_group is None:
                raise RuntimeError(
                    "async observers are not running: flush() needs a started engine"
                )
            orphans = [q for q in self._queues if q.orphaned and q.queue and not q.draining]
            if orphans:
                async with anyio.create_task_group() as group:
                    for queue in orphans:
                        queue.draining = True  # claimed here: no other flush hands it over
                        group.start_soon(queue.drain_here)
                continue
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()
        self._raise_death()

    def _raise_death(self) -> None:
        """Raise what an observer died of while a flush handed it its events (once)."""
        for queue in self._queues:
            died, queue.died_of = queue.died_of, None
            if died is not None:
                raise died

    def _wake_flush(self) -> None:
        """Wake whoever waits in :meth:`flush` to look again (drained, or a queue orphaned)."""
        if self._drained is not None:
            self._drained.set()
            self._drained = None

    def statistics(self) -> BusStatistics:
        """The bus's counters, as a frozen snapshot."""
        tally = self._tally
        return BusStatistics(
            emitted=self._emitted,
            delivered=tally.delivered,
            dropped=sum(self._dropped.values()),
            observer_errors=sum(tally.errors.values()),
            queued=sum(len(q.queue) for q in self._queues),
            subscribers=len(self._subject.observers)
            + len(self._sync)
            + sum(not q.retired for q in self._active),
            errors_by_observer=dict(tally.errors),
            dropped_by_observer=dict(self._dropped),
            dropped_by_reason=dict(self._dropped_by_reason),
        )

    # -- lifecycle (driven by the engine) ------------------------------------------

    def _crash(self, exc: BaseException) -> bool:
        """An observer's worker died of ``exc``, which its task must not raise (asyncio's
        ``KeyboardInterrupt``, ``SystemExit``): cancel the engine's task group, as a task
        that crashes it would, and let the close raise ``exc`` once it has flushed.

        Returns False when the close is over (a worker it gave up on dies after it): no
        close is left to raise ``exc``, so the worker must raise it itself."""
        if self._closed:
            return False
        if self._crashed is None:
            self._crashed = exc
        if self._task_group is not None:
            self._task_group.cancel_scope.cancel()
        return True

    def _start(self, task_group: TaskGroup) -> None:
        self._task_group = task_group
        for queue in self._queues:
            if not queue.started:
                self._start_worker(queue)

    def _start_worker(self, queue: AsyncQueue) -> None:
        assert self._task_group is not None
        queue.started = True
        self._task_group.start_soon(queue.run, name=f"onlooker observer {queue.name}")

    async def _aclose(self, grace: float) -> None:
        """Flush for at most ``grace`` seconds, then retire every worker.

        Events still queued (or in a hung observer's hands) when the time is
        up are counted as dropped and logged per observer, as is any event
        emitted afterwards; then the Rx stream completes.
        """
        if self._closed:
            return
        task_group = self._task_group
        interruption = Interruption(
            f"the observers' queues are still flushed, for at most {grace:.1f} s"
        )
        try:
            if task_group is not None:
                with anyio.move_on_after(grace) as waited:
                    await interruption.through(self.flush, waited)
        finally:  # also when an observer died of a BaseException while its queue was drained
            self._closed = True
            running = [queue for queue in self._queues if queue.running]
            for queue in self._queues:
                if queue.drain_scope is not None:  # another task's flush is handing it over
                    queue.drain_scope.cancel()
                if not queue.retired:
                    queue.retire(why=_closing_why(interruption))
                if queue.worker is not None:
                    queue.worker.cancel()  # a hung handler: the task group could not end otherwise
            if running and task_group is not None:
                task_group.start_soon(_name_the_stuck, running, name="onlooker: stuck observers")
            self._subject.on_completed()
            self._task_group = None
        self._raise_death()  # one that died while the time ran out
        if self._crashed is not None:  # _aclose runs once: raised once
            raise self._crashed
        interruption.raise_caught()

    # -- bookkeeping ---------------------------------------------------------------

    def _is_drained(self) -> bool:
        return all(not q.queue and not q.busy for q in self._queues)

    def _maybe_drained(self) -> None:
        if self._drained is not None and self._is_drained():
            self._wake_flush()

    def _forget(self, queue: AsyncQueue) -> None:
        """Drop a queue whose worker has ended with nothing left (disposed and drained)."""
        with suppress(ValueError):
            self._queues.remove(queue)

    def _count_dropped(self, name: str, reason: DropReason, count: int = 1) -> None:
        self._dropped[name] = self._dropped.get(name, 0) + count
        self._dropped_by_reason[reason] = self._dropped_by_reason.get(reason, 0) + count


_STUCK_AFTER: Final = 1.0
"""Seconds a cancelled worker may take to end before the close names its observer."""


async def _name_the_stuck(queues: list[AsyncQueue]) -> None:
    """Log each worker still running :data:`_STUCK_AFTER` seconds after it was cancelled.

    Its observer catches the cancellation and goes on (``except BaseException``
    in a retry loop, say): no task can be ended from outside, so the close
    waits for it, and the log says which one it waits for.
    """
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(_STUCK_AFTER):
            for queue in queues:
                assert queue.ended is not None, "a running worker has its event"
                await queue.ended.wait()
            return
    for queue in queues:
        if queue.running:
            logger.error(
                "closing the engine waits for observer %r, still running %g s after it was "
                "cancelled: an observer that catches the cancellation (CancelledError, "
                "trio.Cancelled) and goes on, or shields a long wait, holds the close",
                queue.name,
                _STUCK_AFTER,
                extra={"observer": queue.name},
            )


def _closing_why(interruption: Interruption) -> str:
    """Why the close retires the observers' workers now."""
    if interruption.refused is not None:
        return f"the close was interrupted again ({type(interruption.refused).__name__})"
    return "the shutdown timeout ran out"
