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
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, SkipToolExecution, ToolFailed
from pydantic_ai.messages import ToolCallPart, UserContent
from pydantic_ai.tools import RunContext

from onlooker import ErrorInfo, ExecutionStatus, HookAbortError, HookAction, InteractionStatus

from .._json import json_copy

if TYPE_CHECKING:
    from onlooker import TrackedExecution, TrackedToolCall

__all__ = [
    "RunState",
    "defer",
    "fail_call",
    "finish_call",
    "finish_run",
    "logger",
    "prompt_json",
    "refuse",
    "resolve",
    "validator",
]

logger: Final = logging.getLogger("onlooker.integrations.pydantic_ai")


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

    call: TrackedToolCall
    question: str
    """The open interaction that asks for it."""
    args: dict[str, Any]
    """The arguments PydanticAI gave (before any pre-hook's rewrite): an approval that
    overrides them is a call the pre-hooks have not seen."""


async def defer(
    run: TrackedExecution,
    state: RunState,
    tracked: TrackedToolCall,
    call: ToolCallPart,
    args: dict[str, Any],
    deferral: ApprovalRequired | CallDeferred,
) -> None:
    """Record a deferral as a question; the call stays open until PydanticAI runs it again.

    Approved inline (``HandleDeferredToolCalls``), the call runs again under its id
    and the question is ``accepted``; otherwise the run's end closes both ``cancelled``
    (the approved call then runs in a later run, a new execution).
    """
    waits = "approval" if isinstance(deferral, ApprovalRequired) else "an external result"
    try:
        question = await run.interaction_started(
            f"tool {call.tool_name!r} (call {tracked.tool_call_id}) awaits {waits}"
        )
    except Exception:
        logger.exception("onlooker could not record the deferral of %s", tracked.tool_call_id)
        return
    state.deferred[call.tool_call_id] = Deferred(tracked, question, args)


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
