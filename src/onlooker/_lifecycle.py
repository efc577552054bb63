"""The one tool-call lifecycle: pre-hooks, started, (the tool runs), post-hooks, finished.

``ExecutionContext.call`` (onlooker runs the tool) and
``TrackedExecution.tool_started`` / ``TrackedToolCall.finished`` (another
framework runs it) are front doors over these three functions:

- :func:`open_call` refuses a call of an aborted execution, checks the
  arguments, runs the pre-hooks and emits ``ToolCallStarted``; a refused call
  (skipped, blocked, invalid) has its pair closed at once and carries the
  refusal;
- :func:`finish_call` runs the post-hooks and emits ``ToolCallFinished``
  ``completed``;
- :func:`fail_call` emits ``failed`` (or ``cancelled`` for a cancellation).

Every opened call is closed exactly once: a second close is refused by the
call's own state, never emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from time import perf_counter
from types import MappingProxyType
from typing import Any, Final, Protocol, final

from pydantic import JsonValue

from ._bus import EventBus
from ._emitter import Emitter
from ._errors import HookAbortError, ToolBlockedError
from ._events import ErrorInfo, ToolCallStatus, snapshot, snapshot_object
from ._hooks import (
    NO_HOOKS,
    HookAction,
    HookPlans,
    Revalidate,
    SkipCall,
    run_post_hooks,
    run_pre_hooks,
    use_context,
)
from ._results import error_info
from ._tools import ToolRegistry

__all__ = ["CallState", "Runtime", "complete_call", "fail_call", "finish_call", "open_call"]


@final
@dataclass(slots=True, eq=False)
class Runtime:
    """What every execution of one engine shares: the bus, the tools, the hook plans."""

    bus: EventBus
    tools: ToolRegistry
    hooks: HookPlans
    extension: Callable[[Any], Any]
    """``engine.extension``: a plugin's extension by its ``Plugin``."""


class AbortState(Protocol):
    """The state an ABORT leaves for every later call of a run (root and children)."""

    aborted: HookAbortError | None


Check = Callable[[Mapping[str, Any]], dict[str, Any]]
"""Validates a call's arguments into the dict the tool (or framework) receives."""


@final
class CallState:
    """One tool call from its start to its single close."""

    __slots__ = (
        "action",
        "attribution",
        "began",
        "emitter",
        "input",
        "metadata",
        "mutating",
        "post_steps",
        "reason",
        "refusal",
        "run",
        "status",
        "tool",
        "tool_call_id",
        "use",
    )

    def __init__(
        self,
        emitter: Emitter,
        run: AbortState,
        tool: str,
        tool_call_id: str,
        args: Mapping[str, Any],
        mutating: bool,
    ) -> None:
        self.emitter = emitter
        self.run = run
        self.tool = tool
        self.tool_call_id = tool_call_id
        self.input: Mapping[str, Any] = args
        self.mutating = mutating
        self.metadata: dict[str, JsonValue] = {}
        self.began = perf_counter()
        self.post_steps: tuple[Any, ...] = ()
        self.use: Any = None
        self.action = HookAction.CONTINUE
        self.reason: str | None = None
        self.refusal: BaseException | None = None
        """Why the call did not start (raised into a native program)."""
        self.status: ToolCallStatus | None = None
        """``None`` while the call is open; its final status once closed."""
        self.attribution = emitter.pinned_attribution()
        """Both events of a call carry the attribution it started with (tracked calls)."""

    def close(
        self,
        status: ToolCallStatus,
        result: JsonValue,
        error: ErrorInfo | None,
        duration_ms: float | None = None,
    ) -> None:
        """Emit ``ToolCallFinished``; a call already closed stays as it was recorded."""
        if self.status is not None:
            return
        self.status = status
        self.emitter.tool_call_finished(
            tool_call_id=self.tool_call_id,
            tool=self.tool,
            status=status,
            result=result,
            error=error,
            duration_ms=(perf_counter() - self.began) * 1000.0
            if duration_ms is None
            else duration_ms,
            metadata=snapshot_object(self.metadata) if self.metadata else {},
            attribution=self.attribution,
        )


async def open_call(
    emitter: Emitter,
    run: AbortState,
    runtime: Runtime,
    tool: str,
    args: Mapping[str, Any],
    *,
    tool_call_id: str,
    mutating: bool,
    check: Check,
    revalidate: Revalidate,
) -> CallState:
    """Check, govern and start one call; a refused call comes back already closed.

    ``refusal`` then holds the exception a native program gets (``ToolBlockedError``,
    ``HookAbortError``, ``ToolInputError``, ``UnknownToolError``), ``action`` the
    verdict (``SKIP`` with no refusal). A cancellation closes the call
    ``cancelled`` and propagates.
    """
    call = CallState(emitter, run, tool, tool_call_id, args, mutating)
    started = False
    try:
        if run.aborted is not None:  # ABORT ended the whole execution
            raise HookAbortError(
                f"tool {tool!r} refused: the execution was aborted ({run.aborted})",
                tool=tool,
                reason=run.aborted.reason,
            )
        validated = check(args)
        call.input = validated
        hooks = runtime.hooks
        if hooks.matchers:
            attribution = call.attribution or emitter.attribution()
            plan = hooks.plan(tool, attribution.phase)
        else:
            plan = NO_HOOKS
        if plan.pre_steps or plan.post_steps:
            use = use_context(
                tool,
                MappingProxyType(validated),
                tool_call_id,
                attribution,
                emitter.execution_id,
                mutating,
            )
            if plan.pre_steps:
                use = await run_pre_hooks(plan.pre_steps, use, call.metadata, revalidate)
                if use.tool_input is not call.input:
                    call.input = dict(use.tool_input)
            call.use = use
            call.post_steps = plan.post_steps
        started = True
        emitter.tool_call_started(
            tool_call_id=tool_call_id,
            tool=tool,
            args=snapshot_object(call.input),
            attribution=call.attribution,
        )
        if runtime.bus.congested:
            await runtime.bus.wait_for_space()
    except SkipCall as skip:
        call.action = HookAction.SKIP
        call.reason = skip.reason
        _start_refused(call)
        call.close("skipped", None, None)
    except BaseException as exc:
        if not started:
            _start_refused(call)
        if not isinstance(exc, Exception):
            call.close("cancelled", None, error_info(exc))
            raise
        call.refusal = exc
        if started:  # only waiting for the bus can fail after the start: a cancellation
            call.close("failed", None, error_info(exc))
        elif isinstance(exc, HookAbortError):
            call.action = HookAction.ABORT
            call.reason = exc.reason
            run.aborted = exc
            call.close("blocked", None, error_info(exc))
        elif isinstance(exc, ToolBlockedError):
            call.action = HookAction.BLOCK
            call.reason = exc.reason or str(exc)
            call.close("blocked", None, error_info(exc))
        else:  # unknown tool, invalid arguments: a failure, refused as a block would be
            call.action = HookAction.BLOCK
            call.reason = str(exc)
            call.close("failed", None, error_info(exc))
    return call


def _start_refused(call: CallState) -> None:
    call.emitter.tool_call_started(
        tool_call_id=call.tool_call_id,
        tool=call.tool,
        args=snapshot_object(call.input),
        attribution=call.attribution,
    )


def complete_call(call: CallState, output: Any, *, duration_ms: float | None = None) -> Any:
    """Close a call that has no post-hooks ``completed`` (the hot path of ``finish_call``)."""
    call.close("completed", snapshot(output), None, duration_ms)
    return output


async def finish_call(call: CallState, output: Any, *, duration_ms: float | None = None) -> Any:
    """Run the post-hooks and close the call ``completed``; the output they leave.

    A post-hook ``ABORT`` closes it ``blocked``, aborts the run and raises
    ``HookAbortError``; a cancellation during the post-hooks closes it
    ``cancelled`` and propagates. Without post-hooks it is :func:`complete_call`.
    """
    if call.post_steps:
        # The clock stops when the tool returned, not after the post-hooks.
        if duration_ms is None:
            duration_ms = (perf_counter() - call.began) * 1000.0
        try:
            output = await run_post_hooks(call.post_steps, call.use, output, call.metadata)
        except HookAbortError as abort:
            call.run.aborted = abort
            call.close("blocked", None, error_info(abort), duration_ms)
            raise
        except BaseException as exc:
            call.close("cancelled", None, error_info(exc), duration_ms)
            raise
    call.close("completed", snapshot(output), None, duration_ms)
    return output


def fail_call(
    call: CallState, error: BaseException | ErrorInfo, *, duration_ms: float | None = None
) -> None:
    """Close the call ``failed`` (``cancelled`` for a cancellation or a cancelled ErrorInfo)."""
    info = error if isinstance(error, ErrorInfo) else error_info(error)
    status: ToolCallStatus = "cancelled" if info.cause == "interrupt" else "failed"
    call.close(status, None, info, duration_ms)


CANCELLED: Final = ErrorInfo(
    type="Cancelled", message="closed with its execution", cause="interrupt"
)
"""The error a call, interaction or child left open at its execution's end closes with."""
