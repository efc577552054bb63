"""Run state shared by a root execution and its children: mode, pause, abort."""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import JsonValue

from ._errors import ExecutionExpiredError, HookAbortError
from ._events import InteractionMode
from ._results import ElicitationHandler, ExecutionResult, InteractionResponse, PausedExecution

__all__ = ["PendingAnswer", "RunState"]


class RunState:
    """State shared by a root execution and its children: mode, pause, abort."""

    __slots__ = (
        "aborted",
        "done",
        "expired",
        "mode",
        "on_elicitation",
        "outcome",
        "outcome_ready",
        "pause_lock",
        "pause_timeout",
        "pending",
        "result",
        "root_id",
        "scope",
        "state",
    )

    def __init__(
        self,
        root_id: str,
        *,
        mode: InteractionMode,
        on_elicitation: ElicitationHandler | None = None,
        pause_timeout: float | None = None,
    ) -> None:
        self.root_id = root_id
        self.mode = mode
        self.on_elicitation = on_elicitation
        self.pause_timeout = pause_timeout
        self.aborted: HookAbortError | None = None
        self.expired = False
        # pause/resume (mode == "paused")
        self.state = "running"  # running -> paused -> answering -> ... -> finished
        self.pending: PendingAnswer | None = None
        self.outcome: PausedExecution | ExecutionResult[Any] | None = None
        self.outcome_ready: anyio.Event | None = None
        self.pause_lock: anyio.Lock | None = None
        self.scope: anyio.CancelScope | None = None
        self.done: anyio.Event | None = None
        self.result: ExecutionResult[Any] | None = None

    def deliver(self, outcome: PausedExecution | ExecutionResult[Any]) -> None:
        self.outcome = outcome
        if self.outcome_ready is not None:
            self.outcome_ready.set()

    async def next_outcome(self) -> PausedExecution | ExecutionResult[Any]:
        assert self.outcome_ready is not None
        await self.outcome_ready.wait()
        assert self.outcome is not None
        return self.outcome

    async def pause(
        self, interaction_id: str, message: str, schema: dict[str, JsonValue] | None, asking: str
    ) -> InteractionResponse:
        if self.pause_lock is None:
            self.pause_lock = anyio.Lock()
        async with self.pause_lock:  # concurrent questions are asked one at a time
            if self.expired:  # a question that waited its turn behind one that expired
                raise ExecutionExpiredError(
                    "this execution has expired; it cannot ask again", execution_id=self.root_id
                )
            pending = PendingAnswer(interaction_id)
            self.pending = pending
            self.state = "paused"
            self.deliver(PausedExecution(self.root_id, interaction_id, message, schema, asking))
            try:
                with anyio.move_on_after(self.pause_timeout):
                    await pending.answered.wait()
            finally:
                if self.pending is pending:
                    self.pending = None
                if self.state == "paused":
                    self.state = "running"
            if pending.response is None:
                self.expired = True
                raise ExecutionExpiredError(
                    f"nobody answered within the pause timeout of {self.pause_timeout}s",
                    execution_id=self.root_id,
                )
            return pending.response


class PendingAnswer:
    __slots__ = ("answered", "interaction_id", "response")

    def __init__(self, interaction_id: str) -> None:
        self.interaction_id = interaction_id
        self.answered = anyio.Event()
        self.response: InteractionResponse | None = None
