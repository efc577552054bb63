"""One tool call of a tracked execution, and the execution's calls by id.

The framework runs the tool; onlooker runs the pre-hooks when the call
starts (:meth:`TrackedCalls.open`) and the post-hooks when the framework
reports its end (:meth:`TrackedToolCall.finished`), through the same
lifecycle as ``ctx.call`` (``_lifecycle``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, final

import anyio

from ._emitter import CANCELLED, Emitter
from ._errors import ToolInputError, TrackingError
from ._events import ErrorInfo, ToolCallStatus
from ._hooks import HookAction, Revalidate
from ._lifecycle import (
    AbortState,
    CallState,
    Runtime,
    fail_call,
    finish_call,
    open_call,
    settle_call,
)
from ._tracked_checks import as_error_info, same_arguments, tool_arguments

__all__ = ["TrackedCalls", "TrackedToolCall", "Validate"]

Validate: TypeAlias = Callable[[dict[str, Any]], Mapping[str, Any]]
"""A framework's validator of a tool's arguments: what the tool receives, or it raises."""


@final
class TrackedToolCall:
    """One tool call of a tracked execution, as ``tool_started`` returned it.

    ``allowed`` says whether onlooker's pre-hooks let it run (``action`` is
    ``CONTINUE``); then the adapter hands ``input`` (after every
    ``modified_input``) to its framework and later reports ``finished`` or
    ``failed``. A refused call (``reason`` says why) is already recorded as
    ``skipped`` or ``blocked``; the adapter refuses it in its framework.
    """

    __slots__ = ("_closing", "_execution_id", "_state")

    def __init__(self, execution_id: str, state: CallState) -> None:
        self._execution_id = execution_id
        self._state = state
        self._closing = False

    def __repr__(self) -> str:
        status = self._state.status or "open"
        return f"<TrackedToolCall {self.tool!r} {self.tool_call_id!r} {status}>"

    @property
    def tool_call_id(self) -> str:
        """The call's id: the framework's own when it gave one."""
        return self._state.tool_call_id

    @property
    def tool(self) -> str:
        """The tool's name."""
        return self._state.tool

    @property
    def execution_id(self) -> str:
        """The tracked execution this call belongs to."""
        return self._execution_id

    @property
    def action(self) -> HookAction:
        """The pre-hooks' verdict: ``CONTINUE``, ``SKIP``, ``BLOCK`` or ``ABORT``."""
        return self._state.action

    @property
    def allowed(self) -> bool:
        """Whether the framework may run the call (``action is CONTINUE``)."""
        return self._state.action is HookAction.CONTINUE

    @property
    def input(self) -> dict[str, Any]:
        """The arguments after every pre-hook's ``modified_input`` (hand these to the tool)."""
        return dict(self._state.input)

    @property
    def reason(self) -> str | None:
        """Why the call was refused (``None`` when it is allowed)."""
        return self._state.reason

    @property
    def status(self) -> ToolCallStatus | None:
        """The recorded final status, or ``None`` while the call is open."""
        return self._state.status

    @property
    def done(self) -> bool:
        """Whether the call is closed (finished, failed, refused or cancelled)."""
        return self._state.status is not None

    async def finished(self, output: Any, *, duration_ms: float | None = None) -> Any:
        """Record the call ``completed``; returns the output the post-hooks left.

        Hand the returned output back to the framework: a post-hook may have
        rewritten it. ``duration_ms`` (the framework's own measure) wins over
        onlooker's clock. A post-hook ``ABORT`` records the call ``blocked``
        and raises ``HookAbortError``.
        """
        self._claim(duration_ms)
        return await finish_call(self._state, output, duration_ms=duration_ms)

    async def failed(
        self, error: BaseException | str | ErrorInfo, *, duration_ms: float | None = None
    ) -> None:
        """Record the call ``failed``: an exception, a message, or an ``ErrorInfo``.

        A cancellation (a ``BaseException`` that is not an ``Exception``, or an
        ``ErrorInfo`` with ``cause="interrupt"``) records it ``cancelled``.
        """
        info = as_error_info(error, "ToolError")
        self._claim(duration_ms)
        fail_call(self._state, info, duration_ms=duration_ms)

    def _claim(self, duration_ms: float | None) -> None:
        if self._closing or self._state.status is not None:
            status = self._state.status or "being finished"
            raise TrackingError(
                f"tool call {self.tool_call_id!r} ({self.tool!r}) of execution "
                f"{self.execution_id!r} is already closed ({status}); nothing was recorded",
                execution_id=self.execution_id,
                tool_call_id=self.tool_call_id,
            )
        if duration_ms is not None and (
            isinstance(duration_ms, bool)
            or not isinstance(duration_ms, int | float)
            or not 0 <= duration_ms < math.inf
        ):
            raise ValueError(
                f"duration_ms must be a non-negative, finite number, not {duration_ms!r}"
            )
        self._closing = True

    def _cancel(self, refusal: str | None = None) -> None:
        """Close the call ``cancelled`` if it is open; a ``refusal`` also tells the adapter no."""
        if self._state.status is None:
            if refusal is not None:
                self._state.action, self._state.reason = HookAction.BLOCK, refusal
            self._closing = True
            fail_call(self._state, CANCELLED)


def _revalidation(tool: str, validate: Validate | None) -> Revalidate:
    """How a pre-hook's ``modified_input`` becomes the call's input (``ToolInputError`` if not)."""
    if validate is None:
        return lambda changed, hook: tool_arguments(tool, changed, hook)

    def revalidate(changed: Mapping[str, Any], hook: str) -> dict[str, Any]:
        arguments = tool_arguments(tool, changed, hook)
        try:
            validated = validate(arguments)
        except Exception as exc:  # the framework's own validator: any error is a refusal
            raise ToolInputError(
                f"invalid arguments for tool {tool!r} (input modified by hook {hook!r}): {exc}",
                tool=tool,
                hook=hook,
            ) from exc
        return tool_arguments(tool, validated, hook)

    return revalidate


@final
class TrackedCalls:
    """A tracked execution's tool calls by id; an id is reserved while its pre-hooks run.

    The pre-hooks of a call being opened run in a cancel scope the execution's
    end cancels: a run that finishes (or an engine that closes) while a hook
    still decides does not wait out the hook's timeout, and the call is
    refused because the execution finished.
    """

    __slots__ = ("_calls", "_opening", "execution_id")

    def __init__(self, execution_id: str) -> None:
        self.execution_id = execution_id
        self._calls: dict[str, TrackedToolCall] = {}
        self._opening: dict[str, anyio.CancelScope] = {}

    def get(self, tool_call_id: str) -> TrackedToolCall:
        """The call with this id; a ``TrackingError`` when there is none."""
        call = self._calls.get(tool_call_id)
        if call is None:
            raise TrackingError(
                f"execution {self.execution_id!r} has no tool call {tool_call_id!r}",
                execution_id=self.execution_id,
                tool_call_id=tool_call_id,
            )
        return call

    def check_free(self, tool_call_id: str) -> None:
        """Refuse an id this execution already used (or is opening a call with)."""
        if tool_call_id in self._calls or tool_call_id in self._opening:
            raise TrackingError(
                f"tool call id {tool_call_id!r} is already used in execution "
                f"{self.execution_id!r}; nothing was recorded",
                execution_id=self.execution_id,
                tool_call_id=tool_call_id,
            )

    async def open(
        self,
        emitter: Emitter,
        aborts: AbortState,
        runtime: Runtime,
        tool: str,
        arguments: dict[str, Any],
        *,
        tool_call_id: str,
        mutating: bool,
        validate: Validate | None = None,
    ) -> TrackedToolCall:
        """Open a call (its id checked free): run its pre-hooks, record its start or refusal.

        A pre-hook's ``modified_input`` is checked as a call's arguments and,
        given ``validate``, validated by the framework's own validator.
        """
        deciding = self._opening[tool_call_id] = anyio.CancelScope()  # reserves the id
        state: CallState | None = None
        try:
            state = open_call(
                emitter,
                aborts,
                runtime,
                tool,
                arguments,
                tool_call_id=tool_call_id,
                mutating=mutating,
                check=same_arguments,
            )
            call = TrackedToolCall(self.execution_id, state)
            if state.pending:
                with deciding:
                    await settle_call(state, runtime, _revalidation(tool, validate))
                if deciding.cancelled_caught:  # the execution ended while its hooks decided
                    state.action, state.reason = HookAction.BLOCK, "the execution finished"
        except BaseException:
            if state is not None and state.started:  # recorded (and closed): its id stays taken
                self._calls[tool_call_id] = TrackedToolCall(self.execution_id, state)
            raise
        finally:
            self._opening.pop(tool_call_id, None)
        self._calls[tool_call_id] = call
        return call

    def cancel_all(self) -> None:
        """Close every open call ``cancelled`` (the execution is finishing); stop the
        pre-hooks of the calls being opened."""
        for deciding in self._opening.values():
            deciding.cancel()
        for call in self._calls.values():
            call._cancel()
