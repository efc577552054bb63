"""The engine's tracked executions: creating roots, which ids are open, which recently closed."""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, final

from pydantic import JsonValue

from ._deadlines import PauseDeadlines
from ._events import Attribution, ErrorInfo, Trigger
from ._lifecycle import Runtime
from ._scope import _Scoped
from ._tracked import EngineCallback, TrackedExecution
from ._tracked_checks import given_id, program_name
from ._triggers import as_owner, as_trigger

__all__ = ["ExecutionIds", "TrackedRuns", "track"]

ENGINE_CLOSED: Final = ErrorInfo(
    type="EngineClosed", message="the engine closed while the execution was open", cause="interrupt"
)


@final
class ExecutionIds:
    """The ids of some executions: those running, and the last ``keep_closed`` finished.

    The engine refuses a tracked run an id among them: one id names one execution.
    """

    __slots__ = ("_closed", "_keep", "_open")

    def __init__(self, *, keep_closed: int) -> None:
        self._open: set[str] = set()
        self._closed: OrderedDict[str, None] = OrderedDict()  # recent ones, not to reuse
        self._keep = keep_closed

    def is_open(self, execution_id: str) -> bool:
        """Whether an execution with this id is running."""
        return execution_id in self._open

    def has_finished(self, execution_id: str) -> bool:
        """Whether a recent execution with this id has finished."""
        return execution_id in self._closed

    def opened(self, execution_id: str) -> None:
        """Execution ``execution_id`` is starting."""
        self._open.add(execution_id)

    def closed(self, execution_id: str) -> None:
        """Execution ``execution_id`` has finished: its id stays taken a while."""
        self._open.discard(execution_id)
        self._closed[execution_id] = None
        while len(self._closed) > self._keep:
            self._closed.popitem(last=False)


@final
class _Unanswered:
    """A tracked run paused for a person's answers, as the engine's pause timer sees it."""

    __slots__ = ("run", "timeout")

    def __init__(self, run: TrackedExecution, timeout: float) -> None:
        self.run = run
        self.timeout = timeout

    def expire(self) -> None:
        self.run._expire(self.timeout)


@final
class TrackedRuns:
    """Open tracked executions (children too), the open roots, and recently closed ids.

    The engine finishes the open roots when it closes (which closes their
    children), and refuses to reuse an open or recently closed id. A run an
    adapter paused (its framework waits for a person) expires, as a paused
    native execution does, when nobody resumes it within the pause timeout.
    """

    __slots__ = ("_deadlines", "_ids", "_paused", "_roots")

    def __init__(self, *, keep_closed: int, deadlines: PauseDeadlines) -> None:
        self._ids = ExecutionIds(keep_closed=keep_closed)
        self._roots: dict[str, TrackedExecution] = {}
        self._deadlines = deadlines
        self._paused: dict[str, _Unanswered] = {}  # by execution id

    def is_open(self, execution_id: str) -> bool:
        """Whether a tracked execution with this id is running."""
        return self._ids.is_open(execution_id)

    def has_finished(self, execution_id: str) -> bool:
        """Whether a recent tracked execution with this id has finished."""
        return self._ids.has_finished(execution_id)

    def opened(self, run: TrackedExecution) -> None:
        """``run`` is starting (its id was checked free)."""
        self._ids.opened(run.execution_id)
        if run.parent is None:
            self._roots[run.execution_id] = run

    def closed(self, run: TrackedExecution) -> None:
        """``run`` has finished: its id stays taken while among the last ``keep_closed``."""
        self._ids.closed(run.execution_id)
        self._roots.pop(run.execution_id, None)
        if self._paused:
            self.resumed(run)

    def paused(self, run: TrackedExecution, timeout: float | None) -> None:
        """``run`` waits for answers: it expires in ``timeout`` seconds (``None``: never)
        unless it resumes or finishes first. Pausing a paused run restarts its clock."""
        self.resumed(run)
        if timeout is None or not (run.started and not run.finished):
            return
        waiter = self._paused[run.execution_id] = _Unanswered(run, timeout)
        self._deadlines.add(waiter, timeout)

    def resumed(self, run: TrackedExecution) -> None:
        """``run`` goes on (or has finished): it no longer expires."""
        waiter = self._paused.get(run.execution_id)
        if waiter is not None and waiter.run is run:
            del self._paused[run.execution_id]
            self._deadlines.discard(waiter, waiter.timeout)

    def close_all(self) -> None:
        """The engine is closing: finish every open root (so its children) ``cancelled``.

        An observer's ``BaseException`` on one of the closing events does not
        leave the other roots open: it is raised once every root is finished.
        """
        first: BaseException | None = None
        for run in list(self._roots.values()):
            try:
                run.finish_nowait("cancelled", error=ENGINE_CLOSED)
            except BaseException as exc:  # re-raised below, after the others are closed
                first = first or exc
        for waiter in list(self._paused.values()):  # none should be left: the timer must end
            self.resumed(waiter.run)
        if first is not None:
            raise first


def track(
    runtime: Runtime,
    program: str,
    *,
    trigger: Trigger | str,
    input: JsonValue,
    owner: str | None,
    execution_id: str | None,
    attribution: Attribution,
    scope: _Scoped,
    on_start: EngineCallback,
    on_close: EngineCallback,
) -> TrackedExecution:
    """A root tracked execution (``engine.track`` checks the engine and hands in its parts)."""
    return TrackedExecution(
        runtime,
        program_name(program),
        trigger=as_trigger(trigger),
        input=input,
        owner=as_owner(owner),
        execution_id=given_id("execution_id", execution_id),
        attribution=attribution,
        scope=scope,
        on_start=on_start,
        on_close=on_close,
    )
