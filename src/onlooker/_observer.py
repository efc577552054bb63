"""What an observer is, and how to tell a synchronous one from an asynchronous one."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeAlias, runtime_checkable

from ._events import ExecutionEvent

logger = logging.getLogger("onlooker")

__all__ = [
    "AsyncHandler",
    "Observer",
    "ObserverLike",
    "SyncHandler",
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
