"""The one tool-call lifecycle: pre-hooks, started, (the tool runs), post-hooks, finished.

``ExecutionContext.call`` (onlooker runs the tool) and
``TrackedExecution.tool_started`` / ``TrackedToolCall.finished`` (another
framework runs it) are front doors over these three functions:

- :func:`open_call` refuses a call of an aborted execution, checks the
  arguments and, when no pre-hook has to decide, emits ``ToolCallStarted``;
  :func:`settle_call` runs the pre-hooks of a ``pending`` call (then emits
  ``ToolCallStarted``) and waits for a congested bus. A refused call
  (skipped, blocked, invalid) has its pair closed at once and carries the
  refusal. Split in two so that a call without pre-hooks never awaits;
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
from typing import Any, final

from pydantic import JsonValue

from ._bus import EventBus
from ._emitter import CANCELLED, Emitter
from ._errors import HookAbortError, ToolBlockedError
from ._events import ErrorInfo, ToolCallStatus
from ._hooks import (
    AbortState,
    HookAction,
    HookPlans,
    Revalidate,
    SkipCall,
    aborted_refusal,
    detached,
    run_post_hooks,
    run_pre_hooks,
    use_context,
)
from ._results import error_info
from ._tools import ToolRegistry

__all__ = [
    "AbortState",
    "CallState",
    "Runtime",
    "fail_call",
    "finish_call",
    "open_call",
    "settle_call",
]


@final
@dataclass(slots=True, eq=False)
class Runtime:
    """What every execution of one engine shares: the bus, the tools, the hook plans."""

    bus: EventBus
    tools: ToolRegistry
    hooks: HookPlans
    extension: Callable[[Any], Any]
    """``engine.extension``: a plugin's extension by its ``Plugin``."""


Check = Callable[[Mapping[str, Any]], dict[str, Any]]
"""Validates a call's arguments into the dict the tool (or framework) receives."""


@final
class CallState:
    """One tool call from its start to its single close.

    What every call sets lives in slots; what only governed or refused calls
    set (hook state, verdicts) falls back to class defaults and goes to an
    instance ``__dict__`` made on first use, so the hot path never builds one.
    """

    __slots__ = (
        "__dict__",
        "attribution",
        "began",
        "emitter",
        "input",
        "pending",
        "run",
        "started",
        "status",
        "tool",
        "tool_call_id",
    )

    action: HookAction = HookAction.CONTINUE
    reason: str | None = None
    refusal: BaseException | None = None
    """Why the call did not start (raised into a native program)."""
    metadata: dict[str, JsonValue] | None = None
    """Hook metadata (a dict once the call has hooks)."""
    pre_steps: tuple[Any, ...] = ()
    post_steps: tuple[Any, ...] = ()
    use: Any = None

    def __init__(
        self,
        emitter: Emitter,
        run: AbortState,
        tool: str,
        tool_call_id: str,
        args: Mapping[str, Any],
    ) -> None:
        self.emitter = emitter
        self.run = run
        self.tool = tool
        self.tool_call_id = tool_call_id
        self.input: Mapping[str, Any] = args
        self.began = perf_counter()
        self.attribution = emitter.attribution() if emitter.tracked else None
        """Both events of a tracked call carry the attribution it started with."""
        self.status: ToolCallStatus | None = None
        """``None`` while the call is open; its final status once closed."""
        self.started = False
        self.pending = False
        """Whether ``settle_call`` must run before the tool does."""

    def close(
        self,
        status: ToolCallStatus,
        result: object,
        error: ErrorInfo | None,
        duration_ms: float | None = None,
    ) -> None:
        """Emit ``ToolCallFinished``; a call already closed stays as it was recorded."""
        if self.status is not None:
            return
        self.status = status
        if self.started:
            emitter = self.emitter
            if emitter.open_call is self:
                emitter.open_call = None
            else:
                emitter.closed(self.tool_call_id)
        self.emitter.tool_call_finished(
            tool_call_id=self.tool_call_id,
            tool=self.tool,
            status=status,
            result=result,
            error=error,
            duration_ms=(perf_counter() - self.began) * 1000.0
            if duration_ms is None
            else duration_ms,
            metadata=self.metadata,
            attribution=self.attribution,
        )

    def cut_short(self) -> None:
        """Close the call ``cancelled``: its execution is finishing while it runs."""
        self.close("cancelled", None, CANCELLED)


def open_call(
    emitter: Emitter,
    run: AbortState,
    runtime: Runtime,
    tool: str,
    args: Mapping[str, Any],
    *,
    tool_call_id: str,
    mutating: bool,
    check: Check,
) -> CallState:
    """Check one call and, when no pre-hook has to decide it, record its start.

    A refused call comes back already closed: ``refusal`` holds the exception
    a native program gets (``HookAbortError`` after an abort,
    ``ToolInputError``, ``UnknownToolError``). When ``call.pending``, the
    caller must ``await settle_call(call, ...)`` before the tool runs: the
    pre-hooks decide it there, or the bus is congested.

    One function on purpose: it is every tool call's path, and each extra
    Python frame shows in ``bench/overhead.py``.
    """
    call = CallState(emitter, run, tool, tool_call_id, args)
    try:
        if run.aborted is not None:  # ABORT ended the whole execution
            raise aborted_refusal(tool, run.aborted)
        validated = check(args)
        call.input = validated
        hooks = runtime.hooks
        if hooks.matchers:
            attribution = call.attribution or emitter.attribution()
            plan = hooks.plan(tool, attribution.phase)
            if plan.pre_steps or plan.post_steps:
                call.metadata = {}
                call.use = use_context(
                    tool,
                    detached(validated),
                    tool_call_id,
                    attribution,
                    emitter.execution_id,
                    mutating,
                )
                call.post_steps = plan.post_steps
                if plan.pre_steps:
                    call.pre_steps = plan.pre_steps
                    call.pending = True
                    return call  # started once the pre-hooks allow it
    except Exception as exc:
        _refuse(call, exc)
        return call
    call.started = True  # _start(call), inlined: this is every call's path
    if emitter.open_call is None:
        emitter.open_call = call
    else:
        emitter.also_open(tool_call_id, call)
    try:
        emitter.tool_call_started(
            tool_call_id=tool_call_id,
            tool=tool,
            args=call.input,
            attribution=call.attribution,
        )
    except BaseException as exc:  # an observer's KeyboardInterrupt: still close the pair
        call.close("cancelled", None, error_info(exc))
        raise
    call.pending = runtime.bus.congested
    return call


async def settle_call(call: CallState, runtime: Runtime, revalidate: Revalidate) -> None:
    """Run a pending call's pre-hooks (then record its start) and wait for a congested bus.

    Fail-closed: a refusal (``SKIP``, ``BLOCK``, ``ABORT``, a broken hook, a
    rewritten input that does not validate) closes the call, with
    ``action``, ``reason`` and ``refusal`` saying why. A cancellation closes
    it ``cancelled`` and propagates.
    """
    call.pending = False
    try:
        if call.pre_steps:
            metadata = call.metadata
            assert metadata is not None
            use, rewritten = await run_pre_hooks(
                call.pre_steps, call.use, metadata, revalidate, call.run
            )
            if rewritten is not None:  # a hook's modified_input, validated
                call.input = rewritten
            call.use = use
            call.pre_steps = ()
            _start(call)
        if runtime.bus.congested:
            await runtime.bus.wait_for_space()
    except SkipCall as skip:
        call.action = HookAction.SKIP
        call.reason = skip.reason
        _start(call)
        call.close("skipped", None, None)
    except BaseException as exc:
        if not isinstance(exc, Exception):
            if not call.started:
                _start(call)
            call.close("cancelled", None, error_info(exc))
            raise
        _refuse(call, exc)


def _refuse(call: CallState, exc: Exception) -> None:
    """Close a call that may not run, recording why (its start first, if still unrecorded)."""
    if not call.started:
        _start(call)
    call.refusal = exc
    if isinstance(exc, HookAbortError):
        call.action = HookAction.ABORT
        call.reason = exc.reason
        if call.run.aborted is None:  # the first abort decides; later refusals only repeat it
            call.run.aborted = exc
        call.close("blocked", None, error_info(exc))
    elif isinstance(exc, ToolBlockedError):
        call.action = HookAction.BLOCK
        call.reason = exc.reason or str(exc)
        call.close("blocked", None, error_info(exc))
    else:  # unknown tool, invalid arguments: a failure, refused as a block would be
        call.action = HookAction.BLOCK
        call.reason = str(exc)
        call.close("failed", None, error_info(exc))


def _start(call: CallState) -> None:
    call.started = True
    emitter = call.emitter
    if emitter.open_call is None:
        emitter.open_call = call
    else:
        emitter.also_open(call.tool_call_id, call)
    try:
        call.emitter.tool_call_started(
            tool_call_id=call.tool_call_id,
            tool=call.tool,
            args=call.input,
            attribution=call.attribution,
        )
    except BaseException as exc:  # an observer's KeyboardInterrupt: still close the pair
        call.close("cancelled", None, error_info(exc))
        raise


async def finish_call(call: CallState, output: Any, *, duration_ms: float | None = None) -> Any:
    """Run the post-hooks and close the call ``completed``; the output they leave.

    A post-hook ``ABORT`` closes it ``blocked``, aborts the run and raises
    ``HookAbortError``; a cancellation during the post-hooks closes it
    ``cancelled`` and propagates. Without post-hooks it only closes the call
    (``ctx.call`` does that itself, on its hot path).
    """
    if call.post_steps:
        # The clock stops when the tool returned, not after the post-hooks.
        if duration_ms is None:
            duration_ms = (perf_counter() - call.began) * 1000.0
        metadata = call.metadata
        assert metadata is not None
        try:
            output = await run_post_hooks(call.post_steps, call.use, output, metadata)
        except HookAbortError as abort:
            if call.run.aborted is None:
                call.run.aborted = abort
            call.close("blocked", None, error_info(abort), duration_ms)
            raise
        except BaseException as exc:
            call.close("cancelled", None, error_info(exc), duration_ms)
            raise
    call.close("completed", output, None, duration_ms)
    return output


def fail_call(
    call: CallState, error: BaseException | ErrorInfo, *, duration_ms: float | None = None
) -> None:
    """Close the call ``failed`` (``cancelled`` for a cancellation or a cancelled ErrorInfo)."""
    info = error if isinstance(error, ErrorInfo) else error_info(error)
    status: ToolCallStatus = "cancelled" if info.cause == "interrupt" else "failed"
    call.close(status, None, info, duration_ms)
