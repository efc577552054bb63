"""What an observer is, how to tell a synchronous one from an asynchronous one, and the guard.

:func:`deliver` is the one guarded call: every synchronous delivery (the
bus's observers, ``bus.events`` subscribers, ``observing()`` scopes, with or
without an engine) goes through it, and every failure — the async workers'
too — is logged and counted by :meth:`Tally.failed`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeAlias, final, runtime_checkable

from ._events import ExecutionEvent

logger = logging.getLogger("onlooker")

__all__ = [
    "AsyncHandler",
    "Observer",
    "ObserverLike",
    "Subscriber",
    "SyncHandler",
    "Tally",
    "TurnedAsync",
    "deliver",
    "discard",
    "log_observer_failure",
    "observer_name",
    "resolve_handler",
]


@runtime_checkable
class Observer(Protocol):
    """Receives every event: ``def handle(self, event) -> None`` or ``async def handle(...)``."""

    def handle(self, event: ExecutionEvent, /) -> Awaitable[None] | None:
        """Handle one event. Exceptions are logged and swallowed; cancellation passes."""
        ...


ObserverLike: TypeAlias = Observer | Callable[[ExecutionEvent], Awaitable[None] | None]
"""An :class:`Observer`, or a plain callable ``(event) -> None | Awaitable[None]``."""

SyncHandler: TypeAlias = Callable[[ExecutionEvent], object]
AsyncHandler: TypeAlias = Callable[[ExecutionEvent], Awaitable[object]]


def resolve_handler(observer: ObserverLike) -> tuple[Callable[[ExecutionEvent], object], bool]:
    """The function to call for each event, and whether it is asynchronous."""
    handle = getattr(observer, "handle", None)
    if handle is None or not callable(handle):
        if not callable(observer):
            raise TypeError(
                f"an observer needs a handle(event) method or must be callable, got {observer!r}"
            )
        handle = observer
    return handle, _is_async(handle)


def _is_async(fn: object) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004  # an object with async __call__
    return (
        call is not None
        and not inspect.isfunction(fn)
        and not inspect.ismethod(fn)
        and inspect.iscoroutinefunction(call)
    )


class _Counted(Protocol):
    """Anything that is delivered to under a name and counts its own failures."""

    name: str
    errors: int


TurnedAsync: TypeAlias = Callable[[Awaitable[object]], None]


@final
class Subscriber:
    """One synchronous observer as the bus or an ``observing()`` scope calls it.

    ``turned_async``: where a plain callable that returned an awaitable is
    handed over (the bus makes it an asynchronous observer, with the
    awaitable as its first event's); ``None`` where only synchronous
    observers run (an ``observing()`` scope, ``bus.events``), which makes
    such a return an error.
    """

    __slots__ = ("errors", "handle", "name", "turned_async")

    def __init__(
        self, name: str, handle: SyncHandler, turned_async: TurnedAsync | None = None
    ) -> None:
        self.name = name
        self.handle = handle
        self.turned_async = turned_async
        self.errors = 0
        """Exceptions this observer raised (logged and swallowed), whoever emitted."""


@final
class Tally:
    """Where deliveries and observer failures are counted: a bus's counters.

    ``errors`` is by observer name. ``emit_event`` outside an engine counts
    on a tally of its own (and on each scope's :attr:`Subscriber.errors`).
    """

    __slots__ = ("delivered", "errors")

    def __init__(self) -> None:
        self.delivered = 0
        self.errors: dict[str, int] = {}

    def failed(
        self, observer: _Counted, event: ExecutionEvent | None, exc: Exception, during: str = ""
    ) -> None:
        """Count and log an observer's swallowed ``Exception``: the one place that does.

        ``event`` is the event it failed on; ``None`` for an Rx subscriber's
        ``on_completed`` / ``on_error`` (``during`` names which).
        """
        observer.errors += 1
        self.errors[observer.name] = self.errors.get(observer.name, 0) + 1
        if event is not None:
            log_observer_failure(observer.name, event, exc)
        else:
            logger.error("observer %r failed in %s: %s", observer.name, during, exc, exc_info=exc)


def deliver(
    subscribers: tuple[Subscriber, ...], event: ExecutionEvent, tally: Tally
) -> BaseException | None:
    """Call every subscriber with ``event``, each isolated; return the first ``BaseException``.

    An ``Exception`` is logged, counted and swallowed. Anything else
    (cancellation, ``KeyboardInterrupt``) is not swallowed but returned, for
    the caller to raise once *every* observer has the event: raising at once
    would leave the later ones without a ``ToolCallStarted`` whose
    ``ToolCallFinished`` (closed as ``cancelled``) they then receive.
    """
    failure: BaseException | None = None
    undelivered = 0
    for subscriber in subscribers:
        try:
            returned = subscriber.handle(event)
            if returned is not None and _handed_over(subscriber, returned):
                undelivered += 1  # its worker delivers it
        except Exception as exc:
            undelivered += 1
            tally.failed(subscriber, event, exc)
        except BaseException as exc:
            undelivered += 1
            if failure is None:
                failure = exc
    tally.delivered += len(subscribers) - undelivered
    return failure


def _handed_over(subscriber: Subscriber, returned: object) -> bool:
    """A synchronous call returned ``returned``: an awaitable goes to an async worker.

    A plain callable may be asynchronous without saying so (``lambda e:
    record(e)``); the bus then turns it into an asynchronous observer.
    Where only synchronous observers run, the awaitable is closed and the
    call fails with an error that says what to do.
    """
    if not inspect.isawaitable(returned):
        return False  # a value: ignored, as an observer's result always is
    if subscriber.turned_async is not None:
        subscriber.turned_async(returned)
        return True
    discard(returned)
    raise TypeError(
        f"observer {subscriber.name!r} returned an awaitable, but only synchronous observers "
        "run here (observing() scopes, bus.events): subscribe it with engine.bus.subscribe"
    )


def discard(awaitable: Awaitable[object]) -> None:
    """Close a coroutine that will never be awaited: it never started, so nothing ran (and
    no "never awaited" warning)."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()


def log_observer_failure(name: str, event: ExecutionEvent, exc: Exception) -> None:
    """Log an observer's swallowed exception with its name, the event kind and execution id."""
    logger.error(
        "observer %r failed on %s (execution %s): %s",
        name,
        event.kind,
        event.execution_id,
        exc,
        exc_info=exc,
        extra={"observer": name, "event_kind": event.kind, "execution_id": event.execution_id},
    )


def observer_name(observer: object) -> str:
    """A readable default name for logs and statistics."""
    name = getattr(observer, "__qualname__", None) or type(observer).__qualname__
    return str(name)
