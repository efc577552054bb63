"""The engine's detached executions: started, paused, resumed, cancelled, and their results.

``execute_with_pause`` starts a :class:`~onlooker._run.DetachedRun` as a
task of the engine's; ``resume`` and ``cancel`` find it here by id. Once it
ends, its result is kept (the most recent ``keep_results``) so that
resuming or cancelling a finished execution returns it again.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, final

from anyio import TaskHandle
from anyio.abc import TaskGroup
from pydantic import JsonValue

from ._context import Program, Spawn
from ._deadlines import PauseDeadlines
from ._errors import ExecutionNotPausedError, UnknownExecutionError
from ._events import Attribution, Trigger, new_id
from ._execution import run_execution
from ._lifecycle import Runtime
from ._results import ExecutionResult, InteractionResponse, PausedExecution
from ._run import DetachedRun, RunPhase
from ._scope import _observers, _Scoped

__all__ = ["DetachedRuns"]

Outcome = ExecutionResult[Any] | PausedExecution


@final
class DetachedRuns:
    """Detached executions by root id, and the results of those that finished."""

    __slots__ = ("_deadlines", "_finished", "_keep_results", "_runs", "_runtime", "_spawn")

    def __init__(
        self, runtime: Runtime, spawn: Spawn, *, keep_results: int, deadlines: PauseDeadlines
    ) -> None:
        self._runtime = runtime
        self._spawn = spawn
        self._keep_results = keep_results
        self._runs: dict[str, DetachedRun] = {}
        self._finished: OrderedDict[str, ExecutionResult[Any]] = OrderedDict()
        self._deadlines = deadlines

    def open(self, task_group: TaskGroup) -> None:
        """Start the pauses' timer in ``task_group`` (the engine's, as it opens)."""
        self._deadlines.start(task_group)

    def is_open(self, execution_id: str) -> bool:
        """Whether a detached execution with this id is running or paused."""
        return execution_id in self._runs

    def has_finished(self, execution_id: str) -> bool:
        """Whether a recent detached execution with this id has finished."""
        return execution_id in self._finished

    async def start(
        self,
        task_group: TaskGroup,
        program: Program[Any],
        *,
        pause_timeout: float | None,
        attribution: Attribution,
        trigger: Trigger,
        owner: str | None,
        input: JsonValue,
    ) -> Outcome:
        """Start ``program`` in ``task_group``; return at its first question or its end."""
        scoped = _observers.get()

        def launch(run: DetachedRun) -> TaskHandle[None]:
            self._runs[run.root_id] = run  # before its task exists: it may end at once
            return task_group.start_soon(
                self._run,
                program,
                run,
                scoped,
                attribution,
                trigger,
                owner,
                input,
                name="onlooker execution",  # one shared string: no per-run copy
            )

        run = DetachedRun(
            new_id(), pause_timeout=pause_timeout, deadlines=self._deadlines, launch=launch
        )
        try:
            return await run.next_outcome()
        except BaseException:
            # The caller went away (cancelled, timed out) before it learned the run's id:
            # nobody could answer or cancel it, and it would wait out its pause_timeout.
            run.cancel()  # (a run already ended stays as it ended)
            raise

    async def resume(self, execution_id: str, response: InteractionResponse) -> Outcome:
        """Answer a paused execution; return at its next question or its end."""
        run = self._runs.get(execution_id)
        if run is None:
            return self._finished_result(execution_id)
        if run.phase is not RunPhase.PAUSED or run.pending is None:
            raise ExecutionNotPausedError(
                f"execution {execution_id!r} is not paused (it is {run.phase.value})",
                execution_id=execution_id,
            )
        run.answering(response)
        return await run.next_outcome()

    async def cancel(self, execution_id: str) -> ExecutionResult[Any]:
        """Cancel a paused or running execution; return its final result."""
        run = self._runs.get(execution_id)
        if run is None:
            return self._finished_result(execution_id)
        run.cancel()
        await run.wait_ended()
        assert run.result is not None  # _run sets it before the end
        return run.result

    async def cancel_all(self) -> None:
        """Cancel every open execution and wait until each has ended."""
        self._deadlines.stop()  # it ends once no question waits
        for run in list(self._runs.values()):
            run.cancel()
        for run in list(self._runs.values()):
            await run.wait_ended()

    def _finished_result(self, execution_id: str) -> ExecutionResult[Any]:
        result = self._finished.get(execution_id)
        if result is None:
            raise UnknownExecutionError(
                f"no execution with id {execution_id!r}", execution_id=execution_id
            )
        return result

    async def _run(
        self,
        program: Program[Any],
        run: DetachedRun,
        scoped: _Scoped,
        attribution: Attribution,
        trigger: Trigger,
        owner: str | None,
        input: JsonValue,
    ) -> None:
        # The scope captured at execute_with_pause, whichever task resumes us.
        if _observers.get() is not scoped:
            _observers.set(scoped)
        try:  # a cancellation ends here, in the task handle's own scope
            await run_execution(
                self._runtime,
                self._spawn,
                program,
                run,
                run.root_id,
                attribution,
                trigger,
                owner=owner,
                input=input,
                own_task=True,
            )
        finally:
            run.phase = RunPhase.FINISHED
            self._runs.pop(run.root_id, None)
            result = run.result or ExecutionResult(run.root_id, "cancelled")
            run.result = result
            self._finished[run.root_id] = result
            while len(self._finished) > self._keep_results:
                self._finished.popitem(last=False)
            run.deliver(result)
