"""The steps of a tracked run and its calls: each verdict enforced the PydanticAI way, each record guarded.

Every record here is the adapter's own work: its failure is logged on
``onlooker.integrations.pydantic_ai`` and never reaches the agent; a
verdict (``SKIP``, ``BLOCK``, ``ABORT``) is no failure, and is raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, final

import anyio
from pydantic import JsonValue
from pydantic_ai.exceptions import SkipToolExecution, ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequestPart,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
)
from pydantic_ai.tools import DeferredToolRequests, RunContext

from onlooker import ErrorInfo, ExecutionStatus, HookAbortError, HookAction, InteractionStatus
from onlooker._results import error_info

from .._json import json_copy
from .._per_engine import per_engine

if TYPE_CHECKING:
    from onlooker import ExecutionEngine, TrackedExecution, TrackedToolCall

__all__ = [
    "RunState",
    "ask",
    "ask_all",
    "expected",
    "fail_call",
    "finish_call",
    "finish_run",
    "logger",
    "pause",
    "prompt_json",
    "refuse",
    "resolve",
    "resumed",
    "settle",
    "validator",
]

logger: Final = logging.getLogger("onlooker.integrations.pydantic_ai")

REJECTED: Final = ErrorInfo(
    type="ToolApprovalRejected", message="a person rejected the call", cause="failure"
)
"""What a call held for approval closes with when the person denies it (``ToolDenied``)."""

ANSWERED_OUTSIDE: Final = ErrorInfo(
    type="ExternalResult",
    message="the call's result came from outside the run (DeferredToolResults.calls): "
    "it is the response of the call's interaction",
    cause="interrupt",
)
"""What a call the tool deferred (``CallDeferred``) closes with when its result is given."""


@final
@dataclass(slots=True, eq=False)
class RunState:
    """What one tracked run remembers across its tool calls."""

    ids: set[str] = field(default_factory=set)
    """The tool call ids used (a scripted model may repeat one)."""
    deferred: dict[str, Deferred] = field(default_factory=dict)
    """Calls awaiting approval or an external result, by PydanticAI's call id."""


@final
@dataclass(frozen=True, slots=True)
class Deferred:
    """A call awaiting approval or an external result."""

    tool: str
    question: str
    """The open interaction that asks for it."""
    approval: bool
    """Awaits a person's approval (else an external result)."""
    call: TrackedToolCall | None = None
    """The call the tool deferred while running (``None``: deferred before any tool
    hook, ``requires_approval=True`` or an external tool); it stays open."""
    args: dict[str, Any] | None = None
    """The arguments PydanticAI gave that call (before any pre-hook's rewrite): an
    approval that overrides them is a call the pre-hooks have not seen."""


async def ask(
    run: TrackedExecution,
    state: RunState,
    call: ToolCallPart,
    *,
    approval: bool,
    tracked: TrackedToolCall | None = None,
    args: dict[str, Any] | None = None,
) -> None:
    """Record a deferred call as a question (once): it waits for PydanticAI's next decision.

    Approved (inline by ``HandleDeferredToolCalls``, or by the ``deferred_tool_results``
    of the run that resumes this one), the call runs and the question is ``accepted``;
    denied, it is ``declined`` (see :func:`settle`).
    """
    if call.tool_call_id in state.deferred:
        return
    waits = "approval" if approval else "an external result"
    shown = call.tool_call_id if tracked is None else tracked.tool_call_id
    try:
        question = await run.interaction_started(
            f"tool {call.tool_name!r} (call {shown}) awaits {waits}"
        )
    except Exception:
        logger.exception("onlooker could not record the deferral of %s", call.tool_call_id)
        return
    state.deferred[call.tool_call_id] = Deferred(call.tool_name, question, approval, tracked, args)


async def ask_all(run: TrackedExecution, state: RunState, requests: DeferredToolRequests) -> None:
    """Ask about each call of ``requests`` not asked yet (see :func:`ask`)."""
    for call in requests.approvals:
        await ask(run, state, call, approval=True)
    for call in requests.calls:
        await ask(run, state, call, approval=False)


async def settle(run: TrackedExecution, state: RunState, parts: Sequence[ModelRequestPart]) -> None:
    """Record the decisions PydanticAI answered deferred calls with, but did not run.

    A call a person denied (``ToolDenied``: its return's outcome is ``denied``) is
    ``declined``, and the call the tool deferred, if any, ``failed``
    (``ToolApprovalRejected``); an external result is ``accepted`` (the result is the
    response; an external ``ModelRetry`` or ``ToolFailed``: ``failed``, its message the
    response), and the call the tool deferred closes ``cancelled``: its tool did not
    produce the result. An approved call is resolved when it runs (``wrap_tool_execute``).
    """
    for part in parts:
        if not isinstance(part, ToolReturnPart):
            continue
        pending = state.deferred.get(part.tool_call_id)
        if pending is None or pending.tool != part.tool_name:
            continue
        if pending.approval and part.outcome != "denied":
            continue  # approved: resolved as the call runs; else it closes with the run
        del state.deferred[part.tool_call_id]
        if part.outcome == "denied":
            await resolve(
                run,
                pending.question,
                "declined",
                {"tool_call_approved": False, "message": str(part.content)},
            )
            error = REJECTED
        elif part.outcome in ("failed", "retried"):  # answered with ModelRetry or ToolFailed
            await resolve(run, pending.question, "failed", {"error": str(part.content)})
            error = ANSWERED_OUTSIDE
        else:
            await resolve(run, pending.question, "accepted", {"result": json_copy(part.content)})
            error = ANSWERED_OUTSIDE
        if pending.call is not None:
            await fail_call(pending.call, error)


@final
@dataclass(eq=False, slots=True)
class _Paused:
    run: TrackedExecution
    state: RunState
    run_id: str | None
    """PydanticAI's ``run_id`` of the agent run that paused: the ``run_id`` its last
    ``ModelResponse`` carries, which tells two paused runs with the same call ids apart."""


def _paused(engine: ExecutionEngine) -> list[_Paused]:
    """The runs of ``engine`` that ended awaiting decisions, until a run resumes them."""
    return per_engine(engine, "pydantic_ai_paused", list[_Paused])


def _open(entry: _Paused) -> TrackedExecution | None:
    return None if entry.run.finished else entry.run


def pause(
    engine: ExecutionEngine, run: TrackedExecution, state: RunState, run_id: str | None
) -> None:
    """Keep ``run`` open, awaiting its questions' answers, for the run that resumes it
    (until the engine's ``pause_timeout`` expires it)."""
    paused = _paused(engine)
    paused[:] = [entry for entry in paused if _open(entry) is not None]
    paused.append(_Paused(run, state, run_id))
    engine._tracked_paused(run)


def resumed(
    engine: ExecutionEngine, messages: Sequence[ModelMessage]
) -> tuple[TrackedExecution, RunState] | None:
    """The paused run a new agent run goes on with: the one whose awaited calls are
    calls of the history's last model response, made by that run (its ``run_id``)
    (PydanticAI answers those with the ``deferred_tool_results`` given, or runs them again)."""
    paused = _paused(engine)
    if not paused:
        return None
    paused[:] = [entry for entry in paused if _open(entry) is not None]
    response = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    if response is None:
        return None
    calls = {call.tool_call_id: call.tool_name for call in response.tool_calls}
    for entry in reversed(paused):
        if None not in (entry.run_id, response.run_id) and entry.run_id != response.run_id:
            continue  # another agent run's response, with the same call ids
        awaited = {call_id: d.tool for call_id, d in entry.state.deferred.items()}
        run = _open(entry)
        if run is not None and awaited and awaited.items() <= calls.items():
            paused.remove(entry)
            engine._tracked_resumed(run)
            return run, entry.state
    return None


def expected(exc: BaseException) -> ErrorInfo:
    """``ModelRetry`` / ``ToolFailed`` from a tool: PydanticAI's typed, expected outcomes
    (the model reads a retry prompt or a failed result), so cause ``failure``."""
    info = error_info(exc)
    return ErrorInfo(type=info.type, message=info.message, cause="failure")


async def resolve(
    run: TrackedExecution, question: str, status: InteractionStatus, response: JsonValue
) -> None:
    """Record the answer to ``question`` (a failure to record it is logged)."""
    try:
        await run.interaction_resolved(question, status, response)
    except Exception:
        logger.exception("onlooker could not record the answer to %s", question)


def prompt_json(prompt: str | Sequence[UserContent] | None) -> JsonValue:
    """The run's input as JSON: the prompt text, or its parts (binary content as URL-safe base64)."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    return json_copy(list(prompt), bytes_mode="base64")


def refuse(tracked: TrackedToolCall) -> None:
    """Enforce a pre-hook's refusal in PydanticAI (the verdict is already recorded)."""
    reason = tracked.reason or f"refused by onlooker ({tracked.action.value})"
    if tracked.status == "failed":  # a pre-hook's rewrite that the tool's validator refused
        raise ToolFailed(f"Tool call failed: {reason}")
    if tracked.action is HookAction.SKIP:
        raise SkipToolExecution(f"Tool call skipped: {reason}")
    if tracked.action is HookAction.ABORT:
        raise HookAbortError(
            f"tool {tracked.tool!r} aborted the run: {reason}", tool=tracked.tool, reason=reason
        )
    raise ToolFailed(f"Tool call blocked: {reason}")


def validator(ctx: RunContext[object], call: ToolCallPart) -> Callable[[dict[str, Any]], Any]:
    """The tool's own validator, for a pre-hook's ``modified_input`` (``tool_started(validate=)``).

    It validates the rewrite as PydanticAI validated the model's arguments,
    so the recorded ``ToolCallStarted.args`` are what the tool receives. The
    tool is looked up only when a pre-hook rewrites the call.
    """

    def validate(args: dict[str, Any]) -> Any:
        manager = ctx.tool_manager
        tools = None if manager is None else manager.tools
        tool = None if tools is None else tools.get(call.tool_name)
        if tool is None:
            return args
        return tool.args_validator.validate_python(args, context=ctx.validation_context)

    return validate


async def finish_call(tracked: TrackedToolCall, output: Any) -> Any:
    """Record the call ``completed``; the output the post-hooks left, for the model."""
    try:
        return await tracked.finished(output)
    except HookAbortError:
        raise  # a post-hook's ABORT ends the run: a verdict, enforced
    except Exception:
        logger.exception("onlooker could not record the end of tool call %s", tracked.tool_call_id)
        return output


async def fail_call(tracked: TrackedToolCall, error: BaseException | ErrorInfo) -> None:
    # Shielded: the call is closed even while its task is being cancelled.
    with anyio.CancelScope(shield=True):
        try:
            if not tracked.done:
                await tracked.failed(error)
        except Exception:
            logger.exception(
                "onlooker could not record the failure of tool call %s", tracked.tool_call_id
            )


async def finish_run(
    run: TrackedExecution, status: ExecutionStatus, result: Any, error: BaseException | None
) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await run.finish(status=status, result=result, error=error)
        except Exception:
            logger.exception("onlooker could not record the end of execution %s", run.execution_id)
