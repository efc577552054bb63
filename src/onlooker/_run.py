"""Run state shared by a root execution and its children: mode, pause, abort."""

from __future__ import annotations

import enum
from typing import Any, final

import anyio
from pydantic import JsonValue

from ._errors import ExecutionExpiredError, HookAbortError
from ._events import InteractionMode
from ._results import ElicitationHandler, ExecutionResult, InteractionResponse, PausedExecution

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

    Everything a detached run needs exists from its construction: its cancel
    scope, its "done" event, the event that hands each outcome (a pause or
    the end) to whoever waits in ``execute_with_pause`` / ``resume``.
    """

    __slots__ = (
        "done",
        "outcome",
        "outcome_ready",
        "pause_lock",
        "pause_timeout",
        "pending",
        "scope",
    )

    def __init__(self, root_id: str, *, pause_timeout: float | None) -> None:
        super().__init__(root_id, mode="paused")
        self.pause_timeout = pause_timeout
        self.pending: PendingAnswer | None = None
        self.outcome: PausedExecution | ExecutionResult[Any] | None = None
        self.outcome_ready = anyio.Event()
        self.pause_lock: anyio.Lock | None = None  # made at the first question
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()

    def deliver(self, outcome: PausedExecution | ExecutionResult[Any]) -> None:
        """Hand ``outcome`` to whoever waits in :meth:`next_outcome`."""
        self.outcome = outcome
        self.outcome_ready.set()

    async def next_outcome(self) -> PausedExecution | ExecutionResult[Any]:
        """Wait for the next pause or the end."""
        await self.outcome_ready.wait()
        assert self.outcome is not None  # set before the event
        return self.outcome

    def answering(self, response: InteractionResponse) -> None:
        """Deliver ``response`` to the paused question (the caller checked it is paused)."""
        pending = self.pending
        assert pending is not None and self.phase is RunPhase.PAUSED
        self.phase = RunPhase.ANSWERING
        self.outcome = None
        self.outcome_ready = anyio.Event()
        pending.response = response
        pending.answered.set()

    async def pause(
        self, interaction_id: str, message: str, schema: dict[str, JsonValue] | None, asking: str
    ) -> InteractionResponse:
        """Pause until ``engine.resume`` answers or ``pause_timeout`` passes."""
        if self.pause_lock is None:
            self.pause_lock = anyio.Lock()
        async with self.pause_lock:  # concurrent questions are asked one at a time
            if self.expired:  # a question that waited its turn behind one that expired
                raise ExecutionExpiredError(
                    "this execution has expired; it cannot ask again", execution_id=self.root_id
                )
            pending = PendingAnswer(interaction_id)
            self.pending = pending
            self.phase = RunPhase.PAUSED
            self.deliver(PausedExecution(self.root_id, interaction_id, message, schema, asking))
            try:
                with anyio.move_on_after(self.pause_timeout):
                    await pending.answered.wait()
            finally:
                if self.pending is pending:
                    self.pending = None
                if self.phase is RunPhase.PAUSED:
                    self.phase = RunPhase.RUNNING
            if pending.response is None:
                self.expired = True
                raise ExecutionExpiredError(
                    f"nobody answered within the pause timeout of {self.pause_timeout}s",
                    execution_id=self.root_id,
                )
            return pending.response


class PendingAnswer:
    """A paused question and, once ``resume`` delivers it, its answer."""

    __slots__ = ("answered", "interaction_id", "response")

    def __init__(self, interaction_id: str) -> None:
        self.interaction_id = interaction_id
        self.answered = anyio.Event()
        self.response: InteractionResponse | None = None
