"""Run state shared by a root execution and its children: mode, pause, abort."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, final

import anyio
from anyio import TaskHandle
from pydantic import JsonValue

from ._deadlines import PauseDeadlines
from ._errors import ExecutionExpiredError, HookAbortError
from ._events import InteractionMode
from ._results import (
    ElicitationHandler,
    ExecutionResult,
    InteractionResponse,
    PausedExecution,
    asyncio_task,
)

if TYPE_CHECKING:
    from trio.lowlevel import Abort, Task

__all__ = ["DetachedRun", "PendingAnswer", "RunPhase", "RunState"]


class RunPhase(enum.Enum):
    """Where a run stands: ``RUNNING`` → ``PAUSED`` → ``ANSWERING`` → ... → ``FINISHED``."""

    RUNNING = "running"
    PAUSED = "paused"
    """Waiting for ``engine.resume`` (only a detached run pauses)."""
    ANSWERING = "answering"
    """A ``resume`` delivered the answer; the program has not reached its next pause yet."""
    FINISHED = "finished"


class RunState:
    """What a root execution and its children share: mode, the handler, an ABORT, expiry.

    An inline run (``engine.execute``) is only this; a detached one is a
    :class:`DetachedRun`.
    """

    __slots__ = ("aborted", "expired", "mode", "on_elicitation", "phase", "result", "root_id")

    def __init__(
        self,
        root_id: str,
        *,
        mode: InteractionMode = "inline",
        on_elicitation: ElicitationHandler | None = None,
    ) -> None:
        self.root_id = root_id
        self.mode: InteractionMode = mode
        self.on_elicitation = on_elicitation
        self.aborted: HookAbortError | None = None
        self.expired = False
        self.phase = RunPhase.RUNNING
        self.result: ExecutionResult[Any] | None = None

    async def pause(
        self, interaction_id: str, message: str, schema: dict[str, JsonValue] | None, asking: str
    ) -> InteractionResponse:
        """Only a detached run pauses; an inline one's questions go to its handler."""
        raise RuntimeError("an inline execution does not pause")


@final
class DetachedRun(RunState):
    """A run started by ``execute_with_pause``: a task of the engine's, paused and resumed.

    Its task is started by its constructor (``launch``), so a run is whole
    from construction, and cancelled through the task's own handle. Everything a run only needs
    while someone waits on it — the event that hands an outcome (a pause or
    the end) to ``execute_with_pause`` / ``resume``, the turn of a second
    concurrent question — is made by the waiter, when one waits: a paused
    execution holds its question's wait, not five events (10,000 paused executions are tens of MB). Its
    pause timeout is an entry in the engine's shared :class:`PauseDeadlines`,
    not a cancel scope and a timer of its own.
    """

    __slots__ = (
        "_outcome_ready",
        "_task",
        "_turn",
        "asking",
        "deadlines",
        "outcome",
        "pause_timeout",
        "pending",
    )

    def __init__(
        self,
        root_id: str,
        *,
        pause_timeout: float | None,
        deadlines: PauseDeadlines,
        launch: Callable[[DetachedRun], TaskHandle[None]],
    ) -> None:
        super().__init__(root_id, mode="paused")
        self.pause_timeout = pause_timeout
        """Seconds a question waits for ``resume`` (None: for ever)."""
        self.deadlines = deadlines
        """The engine's timer, where an unanswered question expires."""
        self.pending: PendingAnswer | None = None
        self.outcome: PausedExecution | ExecutionResult[Any] | None = None
        self._outcome_ready: anyio.Event | None = None
        self.asking = False
        """Whether a question of this run is being asked (questions go one at a time)."""
        self._turn: anyio.Event | None = None
        self._task = launch(self)  # last: the run is whole before its task can start

    def cancel(self) -> None:
        """Cancel the run's task (at once if it is paused); its closing events follow."""
        self._task.cancel()

    def deliver(self, outcome: PausedExecution | ExecutionResult[Any]) -> None:
        """Hand ``outcome`` to whoever waits in :meth:`next_outcome`."""
        self.outcome = outcome
        ready, self._outcome_ready = self._outcome_ready, None
        if ready is not None:
            ready.set()

    async def next_outcome(self) -> PausedExecution | ExecutionResult[Any]:
        """Wait for the next pause or the end."""
        while self.outcome is None:
            if self._outcome_ready is None:
                self._outcome_ready = anyio.Event()
            await self._outcome_ready.wait()
        return self.outcome

    async def wait_ended(self) -> None:
        """Wait until the run's task has finished (its result is final)."""
        await self._task.wait()

    def answering(self, response: InteractionResponse) -> None:
        """Deliver ``response`` to the paused question (the caller checked it is paused)."""
        pending = self.pending
        assert pending is not None and self.phase is RunPhase.PAUSED
        self.phase = RunPhase.ANSWERING
        self.outcome = None
        pending.answer(response)

    async def pause(
        self, interaction_id: str, message: str, schema: dict[str, JsonValue] | None, asking: str
    ) -> InteractionResponse:
        """Pause until ``engine.resume`` answers or ``pause_timeout`` passes.

        Awaited here, not in a helper coroutine: a paused execution keeps every
        frame of its await chain (10,000 paused executions).
        """
        while self.asking:  # concurrent questions are asked one at a time, in turn
            if self._turn is None:
                self._turn = anyio.Event()
            await self._turn.wait()
        self.asking = True
        try:
            pending = self._ask(interaction_id, message, schema, asking)
            try:
                await pending.wait()
            finally:
                self._stop_waiting(pending)
            return self._answer_of(pending)
        finally:
            self.asking = False
            turn, self._turn = self._turn, None
            if turn is not None:
                turn.set()

    def _ask(
        self, interaction_id: str, message: str, schema: dict[str, JsonValue] | None, asking: str
    ) -> PendingAnswer:
        if self.expired:  # a question that waited its turn behind one that expired
            raise ExecutionExpiredError(
                "this execution has expired; it cannot ask again", execution_id=self.root_id
            )
        pending = PendingAnswer()
        self.pending = pending
        self.phase = RunPhase.PAUSED
        self.deliver(PausedExecution(self.root_id, interaction_id, message, schema, asking))
        if self.pause_timeout is not None:
            self.deadlines.add(pending, self.pause_timeout)
        return pending

    def _stop_waiting(self, pending: PendingAnswer) -> None:
        if self.pause_timeout is not None:
            self.deadlines.discard(pending, self.pause_timeout)
        if self.pending is pending:
            self.pending = None
        if self.phase is RunPhase.PAUSED:
            self.phase = RunPhase.RUNNING

    def _answer_of(self, pending: PendingAnswer) -> InteractionResponse:
        if pending.response is None:
            self.expired = True  # only the timer wakes a question without an answer
            raise ExecutionExpiredError(
                f"nobody answered within the pause timeout of {self.pause_timeout}s",
                execution_id=self.root_id,
            )
        return pending.response


@final
class PendingAnswer:
    """A paused question and, once ``resume`` delivers it, its answer.

    It waits on the lightest thing each backend offers, since every paused
    execution keeps one: in an asyncio task a bare future (anyio's ``Event``
    wraps an ``asyncio.Event`` whose waiter deque alone is about 0.7 KB);
    on trio the waiting task itself, parked with trio's low-level
    ``wait_task_rescheduled`` (a ``trio.Event`` brings a parking lot and
    anyio's wrapper, about 0.5 KB).
    """

    __slots__ = ("_signal", "_woken", "response")

    def __init__(self) -> None:
        self.response: InteractionResponse | None = None
        self._woken = False
        self._signal: asyncio.Future[None] | Task | None = None  # trio: the parked task
        task = asyncio_task()
        if task is not None:
            self._signal = task.get_loop().create_future()

    async def wait(self) -> None:
        """Wait for :meth:`answer` or :meth:`expire`."""
        signal = self._signal
        if isinstance(signal, asyncio.Future):
            await signal
        elif not self._woken:  # trio (guest mode on an asyncio loop too: no asyncio task runs it)
            from trio import lowlevel

            self._signal = lowlevel.current_task()
            try:
                await lowlevel.wait_task_rescheduled(self._unpark)
            finally:
                self._signal = None

    def answer(self, response: InteractionResponse) -> None:
        """Deliver ``resume``'s answer and wake the paused program."""
        self.response = response
        self._wake()

    def expire(self) -> None:
        """Wake the paused program with no answer: ``pause_timeout`` has passed."""
        self._wake()

    def _wake(self) -> None:
        if self._woken:
            return
        self._woken = True
        signal = self._signal
        if isinstance(signal, asyncio.Future):
            if not signal.done():  # done: cancelled with its waiter
                signal.set_result(None)
        elif signal is not None:
            from trio import lowlevel

            self._signal = None
            lowlevel.reschedule(signal)

    def _unpark(self, _: object) -> Abort:
        """Let trio cancel the parked waiter: from now on there is nobody to wake."""
        from trio import lowlevel

        self._signal = None
        return lowlevel.Abort.SUCCEEDED
