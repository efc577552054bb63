"""The capability: each agent run a tracked execution, each tool call governed (mapping in ``__init__``)."""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, final

from pydantic import JsonValue, ValidationError
from pydantic_ai import ModelRequestNode
from pydantic_ai.capabilities import (
    AbstractCapability,
    AgentNode,
    CapabilityOrdering,
    RawToolArgs,
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipToolExecution,
    ToolFailedError,
    ToolRetryError,
)
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelRequestPart, ToolCallPart
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolDefinition

from onlooker import ErrorInfo, ExecutionStatus, ToolInputError, Trigger

from .._ids import unused_id
from ._calls import (
    RunState,
    ask,
    ask_all,
    expected,
    fail_call,
    finish_call,
    finish_run,
    logger,
    pause,
    prompt_json,
    refuse,
    resolve,
    resumed,
    settle,
    validator,
)

if TYPE_CHECKING:
    from pydantic_ai.run import AgentRunResult

    from onlooker import ExecutionEngine, TrackedExecution, TrackedToolCall

__all__ = ["OnlookerCapability"]

_TRIGGER = "pydantic-ai"
"""The trigger kind of every execution this adapter tracks."""


@final
@dataclass(frozen=True, slots=True)
class _Scope:
    """Where a task is: in a tracked run of ``engine``, and in which of its tool calls."""

    engine: ExecutionEngine
    run: TrackedExecution
    call: TrackedToolCall | None
    state: RunState


_scope: ContextVar[_Scope | None] = ContextVar("onlooker_pydantic_ai_scope", default=None)


class OnlookerCapability(AbstractCapability[object]):
    """A PydanticAI capability that records, and governs, an agent's runs on an onlooker engine.

    ``Agent(model, capabilities=[OnlookerCapability(engine)])``: each run
    becomes a tracked execution named ``program`` (default: the agent's
    name, which PydanticAI infers from the agent's variable when ``name=``
    is not given; ``"agent"`` if it has none) with trigger ``pydantic-ai``
    (its metadata holds PydanticAI's ``run_id``), each tool call a tracked
    call carrying ``ToolCallPart.tool_call_id``. onlooker's pre-hooks decide
    each call before it runs (skip, block, abort, rewrite its arguments); post-hooks
    may rewrite what the model reads. One capability may serve many agents
    and concurrent runs: it keeps no per-run state (a run paused awaiting
    decisions is remembered per engine, for the run that resumes it).
    """

    def __init__(
        self,
        engine: ExecutionEngine,
        *,
        program: str | None = None,
        owner: str | None = None,
    ) -> None:
        super().__init__()
        self.engine = engine
        """The engine the runs are tracked on (started, on this event loop)."""
        self.program = program
        """The program name of every tracked run; ``None`` for the agent's name."""
        self.owner = owner
        """Who the tracked runs belong to (``ExecutionStarted.owner``)."""

    def __repr__(self) -> str:
        return f"OnlookerCapability(engine={self.engine!r}, program={self.program!r})"

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """``None``: an engine cannot be written into an agent spec."""
        return None

    def get_ordering(self) -> CapabilityOrdering:
        """Outermost: onlooker decides before any other capability sees a call."""
        return CapabilityOrdering(position="outermost")

    # -- the run ---------------------------------------------------------------------

    async def wrap_run(
        self, ctx: RunContext[object], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Track the run: started before ``handler()``, finished with its outcome.

        A run that ends awaiting decisions (``DeferredToolRequests``) is paused, not
        finished: the run given those calls' history goes on in the same execution.
        """
        paused = resumed(self.engine, ctx.messages)
        run, state = paused if paused is not None else (await self._start_run(ctx), RunState())
        token = _scope.set(None if run is None else _Scope(self.engine, run, None, state))
        try:
            result = await handler()
        except BaseException as exc:
            if run is not None:
                status: ExecutionStatus = "failed" if isinstance(exc, Exception) else "cancelled"
                await finish_run(run, status, None, exc)
            raise
        finally:
            _scope.reset(token)
        if run is None:
            return result
        await settle(run, state, [p for m in result.new_messages() for p in _request_parts(m)])
        if isinstance(result.output, DeferredToolRequests):
            await ask_all(run, state, result.output)
            if state.deferred:
                pause(self.engine, run, state, ctx.run_id)
                return result
        await finish_run(run, "completed", result.output, None)
        return result

    async def _start_run(self, ctx: RunContext[object]) -> TrackedExecution | None:
        try:
            name = self.program or (ctx.agent.name if ctx.agent is not None else None) or "agent"
            metadata: dict[str, JsonValue] = {}
            if ctx.run_id is not None:
                metadata["run_id"] = ctx.run_id
            if ctx.conversation_id is not None:
                metadata["conversation_id"] = ctx.conversation_id
            trigger = Trigger(kind=_TRIGGER, metadata=metadata)
            prompt = prompt_json(ctx.prompt)
            parent = _scope.get()
            if parent is not None and parent.engine is self.engine and not parent.run.finished:
                run = parent.run.child(
                    name,
                    parent_tool_call_id=None if parent.call is None else parent.call.tool_call_id,
                    trigger=trigger,
                    input=prompt,
                    owner=self.owner,
                )
            else:
                run = self.engine.track(name, trigger=trigger, input=prompt, owner=self.owner)
            await run.start()
        except Exception:
            logger.exception(
                "onlooker could not start tracking a PydanticAI run; it runs untracked"
            )
            return None
        return run

    async def before_node_run(
        self, ctx: RunContext[object], *, node: AgentNode[object]
    ) -> AgentNode[object]:
        """Record the decisions on deferred calls that PydanticAI answered without running
        them (a denial, an external result): the request to the model carries them."""
        scope = _scope.get()
        if (
            isinstance(node, ModelRequestNode)
            and scope is not None
            and scope.engine is self.engine
            and scope.state.deferred
        ):
            await settle(scope.run, scope.state, node.request.parts)
        return node

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[object], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Record each deferred call as a question before any handler decides it; decide none."""
        scope = _scope.get()
        if scope is not None and scope.engine is self.engine and not scope.run.finished:
            await ask_all(scope.run, scope.state, requests)
        return None

    # -- tool calls ------------------------------------------------------------------

    async def on_tool_validate_error(
        self,
        ctx: RunContext[object],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        error: ValidationError | ModelRetry,
    ) -> ValidatedToolArgs:
        """A call whose arguments the tool refuses: recorded ``failed`` (``ToolInputError``),
        as ``ctx.call`` records one; PydanticAI then shows the model a retry prompt."""
        scope = _scope.get()
        if scope is not None and scope.engine is self.engine and not scope.run.finished:
            try:
                # Read as PydanticAI reads a call's arguments (JSON text from most providers)
                given = args if isinstance(args, dict) else replace(call, args=args).args_as_dict()
                tracked = await scope.run.tool_started(
                    call.tool_name,
                    given,
                    tool_call_id=unused_id(scope.state.ids, call.tool_call_id),
                )
                if tracked.allowed:  # else recorded refused: the call does not run either
                    message = f"invalid arguments for tool {call.tool_name!r}: {error}"
                    await tracked.failed(ToolInputError(message, tool=call.tool_name))
            except Exception:
                logger.exception(
                    "onlooker could not record PydanticAI tool call %r (%s) with invalid arguments",
                    call.tool_name,
                    call.tool_call_id,
                )
        raise error

    async def wrap_tool_execute(
        self,
        ctx: RunContext[object],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Govern and record one tool call around PydanticAI's execution of it."""
        scope = _scope.get()
        if scope is None or scope.engine is not self.engine:
            return await handler(args)
        opened = await _open_call(ctx, call, args, scope)
        if opened is None:
            return await handler(args)
        tracked, tool_args = opened
        run, state = scope.run, scope.state
        token = _scope.set(_Scope(self.engine, run, tracked, state))
        try:
            result = await handler(tool_args)
        except SkipToolExecution as skip:  # another capability replaced the call's result
            return await finish_call(tracked, skip.result)
        except (ToolRetryError, ToolFailedError) as exc:  # ModelRetry / ToolFailed from the tool
            cause = exc.__cause__
            await fail_call(tracked, expected(cause if isinstance(cause, Exception) else exc))
            raise
        except (ApprovalRequired, CallDeferred) as deferral:
            # Not an end: the call waits for a person's approval or an external result.
            approval = isinstance(deferral, ApprovalRequired)
            await ask(run, state, call, approval=approval, tracked=tracked, args=args)
            raise
        except BaseException as exc:
            await fail_call(tracked, exc)
            raise
        finally:
            _scope.reset(token)
        return await finish_call(tracked, result)


async def _open_call(
    ctx: RunContext[object], call: ToolCallPart, args: dict[str, Any], scope: _Scope
) -> tuple[TrackedToolCall, dict[str, Any]] | None:
    """The tracked call and the arguments its tool gets; ``None`` if it cannot be recorded.

    An approved call the tool deferred goes on under its tracked call, with the
    arguments the pre-hooks left; a new one (also an approved call deferred
    before it ran, ``requires_approval=True``) is decided by the pre-hooks, whose
    refusal raises here. An approval that overrides the arguments is a new
    call (the deferred one closes ``cancelled``): the pre-hooks decide it too.
    """
    run, state = scope.run, scope.state
    pending = state.deferred.get(call.tool_call_id)
    # Only the same tool: a model may reuse the id of a call decided earlier.
    if pending is not None and pending.tool == call.tool_name:
        held = pending.call if pending.call is not None and args == pending.args else None
        if not ctx.tool_call_approved:
            if held is not None:
                return held, held.input  # run again undecided: the same call still waits
        else:
            del state.deferred[call.tool_call_id]
            await resolve(run, pending.question, "accepted", {"tool_call_approved": True})
            if held is not None:
                return held, held.input
            if pending.call is not None:
                await fail_call(pending.call, _overridden(call))
    try:
        tracked = await run.tool_started(
            call.tool_name,
            args,
            tool_call_id=unused_id(state.ids, call.tool_call_id),
            validate=validator(ctx, call),
        )
    except Exception:
        logger.exception(
            "onlooker could not record PydanticAI tool call %r (%s); it runs unrecorded",
            call.tool_name,
            call.tool_call_id,
        )
        return None
    if not tracked.allowed:
        refuse(tracked)
    return tracked, tracked.input


def _overridden(call: ToolCallPart) -> ErrorInfo:
    return ErrorInfo(
        type="ApprovalOverride",
        message=f"call {call.tool_call_id!r} was approved with other arguments: they run as a "
        "new call, decided by the pre-hooks",
        cause="interrupt",
    )


def _request_parts(message: ModelMessage) -> Sequence[ModelRequestPart]:
    return message.parts if isinstance(message, ModelRequest) else ()
