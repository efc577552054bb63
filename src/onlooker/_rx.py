"""``bus.events``: the bus's reactivex ``Observable``, whose pipelines keep their end isolated.

The bus guards each subscription to its Subject, which is where a pipeline's
first operator subscribes. A subscriber at the end of a pipeline is called
from inside its operators, though: when it raises, the exception unwinds
through them, and a stateful one (``buffer_with_count`` pops its buffer after
the call) is left half-way, failing on every later event. So a pipeline
piped onto ``bus.events`` catches its subscriber's ``Exception`` where the
subscriber is called, logs and counts it under the pipeline's name, and
the operators never see it. Cancellation and other ``BaseException``\\ s
pass, as everywhere.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, cast, final

from reactivex import Observable, abc

from ._events import ExecutionEvent, _Envelope
from ._observer import Subscriber

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._bus import EventBus

__all__ = ["EventStream", "pipeline_name"]

pipeline_name: ContextVar[str | None] = ContextVar("onlooker_pipeline_name", default=None)
"""The name of the pipeline whose subscription is being made, for the bus's own guard."""


@final
class EventStream(Observable[ExecutionEvent]):
    """``bus.events``. ``pipe(...)`` gives a pipeline whose subscriber is isolated."""

    def __init__(self, bus: EventBus, subscribe: Callable[..., abc.DisposableBase]) -> None:
        super().__init__(subscribe)
        self._bus = bus

    if not TYPE_CHECKING:  # users' mypy keeps reactivex's typed overloads of pipe

        def pipe(self, *operators):
            return _isolated_end(super().pipe(*operators), self._bus)


@final
class _IsolatedEnd(Observable[Any]):
    """A pipeline on ``bus.events``; piping more onto it keeps one guard, at the new end."""

    def __init__(self, pipeline: Observable[Any], bus: EventBus) -> None:
        super().__init__()
        self._pipeline = pipeline
        self._bus = bus

    def _subscribe_core(
        self, observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        self._bus._rx_count += 1
        name = f"bus.events#{self._bus._rx_count}"
        naming = pipeline_name.set(name)  # the Subject subscription this one makes: one name
        try:
            return self._pipeline.subscribe(
                _EndGuard(self._bus, name, observer), scheduler=scheduler
            )
        finally:
            pipeline_name.reset(naming)

    if not TYPE_CHECKING:

        def pipe(self, *operators):
            return _isolated_end(self._pipeline.pipe(*operators), self._bus)


def _isolated_end(piped: object, bus: EventBus) -> object:
    """A pipeline's end guarded. Anything but a plain ``Observable`` is returned as is, its
    end unguarded: a ``ConnectableObservable`` (``ops.publish()``) keeps ``connect()``,
    what is no ``Observable`` at all (``ops.to_future()``) stays what it is."""
    return _IsolatedEnd(piped, bus) if type(piped) is Observable else piped


@final
class _EndGuard(abc.ObserverBase[Any]):
    """The subscriber at a pipeline's end, its ``Exception``\\ s logged, counted, swallowed."""

    def __init__(self, bus: EventBus, name: str, observer: abc.ObserverBase[Any]) -> None:
        self._bus = bus
        self._observer = observer
        self._counted = Subscriber(name, observer.on_next)

    def on_next(self, value: Any) -> None:
        try:
            self._observer.on_next(value)
        except Exception as exc:
            if isinstance(value, _Envelope):
                self._bus._tally.failed(self._counted, cast("ExecutionEvent", value), exc)
            else:  # a batch, or a value an operator made
                self._bus._tally.failed(self._counted, None, exc, "on_next")

    def on_error(self, error: Exception) -> None:
        try:
            self._observer.on_error(error)
        except Exception as exc:  # a subscriber without on_error raises the error
            self._bus._tally.failed(self._counted, None, exc, "on_error")

    def on_completed(self) -> None:
        try:
            self._observer.on_completed()
        except Exception as exc:
            self._bus._tally.failed(self._counted, None, exc, "on_completed")
