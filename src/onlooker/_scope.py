"""Context-scoped observers and attribution, both riding ``ContextVar``s.

``observing(observer)`` adds a synchronous observer for the current context;
``emit_event(event)`` sends to every observer in scope. ``attribution(...)``
scopes the task and phase that every event emitted inside it records.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from types import TracebackType
from typing import Final

from ._events import Attribution, ExecutionEvent, _Envelope
from ._observer import ObserverLike, Subscriber, Tally, deliver, observer_name, resolve_handler

__all__ = ["attribution", "current_attribution", "emit_event", "observing"]


_Scoped = tuple[Subscriber, ...]
_UNBOUND: Final = Tally()  # emit_event's counters: no engine, no bus to count on
_observers: ContextVar[_Scoped] = ContextVar("onlooker_observers", default=())
_ROOT_ATTRIBUTION: Final = Attribution()
_attribution: ContextVar[Attribution] = ContextVar(
    "onlooker_attribution", default=_ROOT_ATTRIBUTION
)


class observing:  # used like a function: `with onlooker.observing(obs):`
    """Install a synchronous observer for the current context (sync and async ``with``).

    Scopes nest: an inner scope adds its observer to the outer ones. Events
    emitted by executions started inside the scope — also after a pause and
    a ``resume`` from elsewhere — reach it.
    """

    __slots__ = ("_entry", "_token")

    def __init__(self, observer: ObserverLike, *, name: str | None = None) -> None:
        handle, is_async = resolve_handler(observer)
        if is_async:
            raise TypeError(
                "observing() takes a synchronous observer; subscribe asynchronous ones "
                "through a plugin or engine.bus.subscribe(), which own their worker tasks"
            )
        self._entry = Subscriber(name or observer_name(observer), handle)
        self._token: Token[_Scoped] | None = None

    @property
    def errors(self) -> int:
        """Exceptions the observer raised in this scope (logged and swallowed), whoever emitted.

        Failures on an engine's events are also in ``engine.bus.statistics()``.
        """
        return self._entry.errors

    def __enter__(self) -> observing:
        if self._token is not None:
            raise RuntimeError("this observing() scope is already entered")
        self._token = _observers.set((*_observers.get(), self._entry))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._token is not None
        _observers.reset(self._token)
        self._token = None

    async def __aenter__(self) -> observing:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def emit_event(event: ExecutionEvent) -> None:
    """Send ``event`` to the observers in scope; a cheap no-op when there are none.

    An observer's ``Exception`` is logged, counted (:attr:`observing.errors`)
    and swallowed; anything else (cancellation, ``KeyboardInterrupt``)
    propagates once every observer in scope has the event.
    """
    if not isinstance(event, _Envelope):
        raise TypeError(
            f"emit_event takes an event (ExecutionStarted, ToolCallStarted, ...), "
            f"not {type(event).__name__}"
        )
    scoped = _observers.get()
    if scoped:
        failure = deliver(scoped, event, _UNBOUND)
        if failure is not None:
            raise failure


class attribution:  # used like a function: `with onlooker.attribution(...)`
    """Scope the ``task_id`` and ``phase`` recorded on every event emitted inside.

    Works as a sync and an async context manager. Nesting inherits: a field
    left unset keeps the outer scope's value.
    """

    __slots__ = ("_phase", "_task_id", "_token")

    def __init__(self, *, task_id: str | None = None, phase: str | None = None) -> None:
        for name, value in (("task_id", task_id), ("phase", phase)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string or None, not {value!r}")
        self._task_id = task_id
        self._phase = phase
        self._token: Token[Attribution] | None = None

    def __enter__(self) -> Attribution:
        current = _attribution.get()
        updated = current.model_copy(
            update={
                "task_id": self._task_id if self._task_id is not None else current.task_id,
                "phase": self._phase if self._phase is not None else current.phase,
            }
        )
        self._token = _attribution.set(updated)
        return updated

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._token is not None
        intent = _attribution.get().intent_id
        _attribution.reset(self._token)
        self._token = None
        outer = _attribution.get()
        if intent is not None and intent != outer.intent_id:
            # ctx.select_intent() inside the scope holds for the rest of the execution
            _attribution.set(outer.model_copy(update={"intent_id": intent}))

    async def __aenter__(self) -> Attribution:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def current_attribution() -> Attribution:
    """The attribution that an event emitted here would carry."""
    return _attribution.get()
