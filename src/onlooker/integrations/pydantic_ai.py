"""PydanticAI: every agent run a tracked execution, every tool call a tracked call.

::

    from onlooker.integrations.pydantic_ai import OnlookerCapability

    async with onlooker.ExecutionEngine(hooks=[...], plugins=[...]) as engine:
        agent = Agent(model, capabilities=[OnlookerCapability(engine)])
        result = await agent.run("Refund order 42")

:class:`OnlookerCapability` is a PydanticAI capability in the outermost
tier, so onlooker's verdict comes before any other capability touches a
call, and a refused call reaches neither them nor the tool. The mapping
(``call`` is PydanticAI's ``ToolCallPart``, ``tracked`` onlooker's call):

=====================================  ============================================================
PydanticAI                             onlooker
=====================================  ============================================================
``wrap_run`` enters                    ``engine.track(agent.name, trigger="pydantic-ai",
                                       input=prompt).start()``; inside another agent's tracked tool
                                       call: ``run.child(name, parent_tool_call_id=...)``
``wrap_run`` returns                   ``run.finish("completed", result=output)``
``wrap_run`` raises / is cancelled     ``run.finish("failed", error=exc)`` / ``"cancelled"``
``wrap_tool_execute`` enters           ``run.tool_started(call.tool_name, args,
                                       tool_call_id=call.tool_call_id)`` (pre-hooks)
- verdict ``SKIP``                     ``raise SkipToolExecution(reason)``: the tool never runs; the
                                       model reads the reason as its result (PydanticAI says
                                       "success"; onlooker records ``skipped``)
- verdict ``BLOCK``                    ``raise ToolFailed(reason)``: the tool never runs; the model
                                       reads a failed result carrying the reason
- verdict ``ABORT``                    ``raise HookAbortError``: the run ends ``failed``
- ``modified_input``                   validated again by the tool's own validator, then handed
                                       to the tool
the tool returns                       ``tracked.finished(result)``; the output the post-hooks left
                                       (``modified_output``) is what the model reads
``ModelRetry`` / ``ToolFailed``        ``tracked.failed(error)``; the model reads a retry prompt / a
                                       failed result, and the run goes on
any other exception                    ``tracked.failed(error)``; the run ends ``failed``
``ApprovalRequired`` /                 ``run.interaction_started("... awaits approval")``, the
``CallDeferred``                       call left open; approved inline, PydanticAI runs it again
                                       under its id: ``interaction_resolved("accepted")`` and the
                                       same call goes on; else the run's end closes both
                                       ``cancelled``
``SkipToolExecution`` of an inner      ``tracked.finished(replacement)``: recorded ``completed``,
capability                             with the replacement as the result
=====================================  ============================================================

Sub-agents: while a tool runs, its tracked call is held in a
:class:`~contextvars.ContextVar`; an agent run started inside it (the usual
``await other_agent.run(..., usage=ctx.usage)`` delegation) on a capability
of the same engine becomes a child execution linked to that call.

What cannot be governed: output tools and output functions (PydanticAI runs
them through output hooks, not tool hooks), native tools the provider runs
(web search, code execution), model requests, and the decision on a deferred
call (``requires_approval``, ``HandleDeferredToolCalls``), which PydanticAI
takes before or outside the tool hooks.

The adapter's own failures are logged on ``onlooker.integrations.pydantic_ai``
and never reach the agent: the run, or the call, goes on untracked.
onlooker's verdicts (``SKIP``, ``BLOCK``, ``ABORT``) are not failures; they
are enforced. PydanticAI runs on asyncio; run agents on the engine's event
loop (``await agent.run(...)``, not ``agent.run_sync`` from another thread).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, final

import anyio
from pydantic import JsonValue
from pydantic_core import to_jsonable_python

from . import require

require("pydantic_ai", extra="pydantic-ai", framework="PydanticAI")

from pydantic_ai.capabilities import (  # noqa: E402  # after require(): a missing extra is named
    AbstractCapability,
    CapabilityOrdering,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import (  # noqa: E402
    ApprovalRequired,
    CallDeferred,
    SkipToolExecution,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
)
from pydantic_ai.messages import ToolCallPart, UserContent  # noqa: E402
from pydantic_ai.tools import RunContext, ToolDefinition  # noqa: E402

from onlooker import (  # noqa: E402
    ExecutionStatus,
    HookAbortError,
    HookAction,
    InteractionStatus,
    Trigger,
)

if TYPE_CHECKING:
    from pydantic_ai.run import AgentRunResult

    from onlooker import ExecutionEngine, TrackedExecution, TrackedToolCall

__all__ = ["OnlookerCapability"]

logger = logging.getLogger("onlooker.integrations.pydantic_ai")

_TRIGGER = "pydantic-ai"
"""The trigger kind of every execution this adapter tracks."""


@final
@dataclass(slots=True, eq=False)
class _RunState:
    """What one tracked run remembers across its tool calls."""

    ids: set[str] = field(default_factory=set)
    """The tool call ids used (a scripted model may repeat one)."""
    deferred: dict[str, tuple[TrackedToolCall, str]] = field(default_factory=dict)
    """Calls awaiting approval or an external result: the call and the open question."""


@final
@dataclass(frozen=True, slots=True)
class _Scope:
    """Where a task is: in a tracked run of ``engine``, and in which of its tool calls."""

    engine: ExecutionEngine
    run: TrackedExecution
    call: TrackedToolCall | None
    state: _RunState


_scope: ContextVar[_Scope | None] = ContextVar("onlooker_pydantic_ai_scope", default=None)


class OnlookerCapability(AbstractCapability[object]):
    """A PydanticAI capability that records, and governs, an agent's runs on an onlooker engine.

    ``Agent(model, capabilities=[OnlookerCapability(engine)])``: each run
    becomes a tracked execution named ``program`` (default: the agent's
    name, else ``"agent"``) with trigger ``pydantic-ai`` (its metadata holds
    PydanticAI's ``run_id``), each tool call a tracked call carrying
    ``ToolCallPart.tool_call_id``. onlooker's pre-hooks decide each call
    before it runs (skip, block, abort, rewrite its arguments); post-hooks
    may rewrite what the model reads. One capability may serve many agents
    and concurrent runs: it keeps no per-run state.
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
        """Track the run: started before ``handler()``, finished with its outcome."""
        run = await self._start_run(ctx)
        token = _scope.set(None if run is None else _Scope(self.engine, run, None, _RunState()))
        try:
            result = await handler()
        except BaseException as exc:
            if run is not None:
                status: ExecutionStatus = "failed" if isinstance(exc, Exception) else "cancelled"
                await _finish_run(run, status, None, exc)
            raise
        finally:
            _scope.reset(token)
        if run is not None:
            await _finish_run(run, "completed", result.output, None)
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
            prompt = _prompt(ctx.prompt)
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

    # -- tool calls ------------------------------------------------------------------

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
        run, state = scope.run, scope.state
        pending = state.deferred.pop(call.tool_call_id, None)
        if pending is not None:  # approved: the deferred call runs now
            tracked, question = pending
            await _resolve(
                run, question, "accepted", {"tool_call_approved": ctx.tool_call_approved}
            )
            tool_args = args
        else:
            try:
                tracked = await run.tool_started(
                    call.tool_name, args, tool_call_id=_unused_id(state.ids, call.tool_call_id)
                )
            except Exception:
                logger.exception(
                    "onlooker could not record PydanticAI tool call %r (%s); it runs unrecorded",
                    call.tool_name,
                    call.tool_call_id,
                )
                return await handler(args)
            if not tracked.allowed:
                _refuse(tracked)
            tool_args = await _rewritten(ctx, call, tracked, args)
        token = _scope.set(_Scope(self.engine, run, tracked, state))
        try:
            result = await handler(tool_args)
        except SkipToolExecution as skip:  # another capability replaced the call's result
            return await _finish_call(tracked, skip.result)
        except (ToolRetryError, ToolFailedError) as exc:  # ModelRetry / ToolFailed from the tool
            cause = exc.__cause__
            await _fail_call(tracked, cause if isinstance(cause, Exception) else exc)
            raise
        except (ApprovalRequired, CallDeferred) as deferral:
            # Not an end: the call waits for a person's approval or an external result.
            await _defer(run, state, tracked, call, deferral)
            raise
        except BaseException as exc:
            await _fail_call(tracked, exc)
            raise
        finally:
            _scope.reset(token)
        return await _finish_call(tracked, result)


async def _rewritten(
    ctx: RunContext[object], call: ToolCallPart, tracked: TrackedToolCall, args: dict[str, Any]
) -> dict[str, Any]:
    """The arguments the tool receives: PydanticAI's, or a pre-hook's rewrite validated again."""
    rewritten = tracked.input
    if rewritten == args:
        return args
    try:
        return _revalidate(ctx, call, rewritten)
    except Exception as exc:
        await _fail_call(tracked, exc)
        raise ToolFailed(
            f"onlooker: a pre-hook rewrote the arguments of {call.tool_name!r} "
            f"into ones that do not validate: {exc}"
        ) from exc


async def _defer(
    run: TrackedExecution,
    state: _RunState,
    tracked: TrackedToolCall,
    call: ToolCallPart,
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
    state.deferred[call.tool_call_id] = (tracked, question)


async def _resolve(
    run: TrackedExecution, question: str, status: InteractionStatus, response: JsonValue
) -> None:
    try:
        await run.interaction_resolved(question, status, response)
    except Exception:
        logger.exception("onlooker could not record the answer to %s", question)


def _unused_id(used: set[str], tool_call_id: str) -> str:
    """The framework's id, suffixed ``#2``, ``#3`` ... when a model repeats an id in one run."""
    candidate, attempt = tool_call_id, 1
    while candidate in used:
        attempt += 1
        candidate = f"{tool_call_id}#{attempt}"
    used.add(candidate)
    return candidate


def _prompt(prompt: str | Sequence[UserContent] | None) -> JsonValue:
    """The run's input as JSON: the prompt text, or its parts (binary content as base64)."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    converted: JsonValue = to_jsonable_python(list(prompt), fallback=repr, bytes_mode="base64")
    return converted


def _refuse(tracked: TrackedToolCall) -> None:
    """Enforce a pre-hook's refusal in PydanticAI (the verdict is already recorded)."""
    reason = tracked.reason or f"refused by onlooker ({tracked.action.value})"
    if tracked.action is HookAction.SKIP:
        raise SkipToolExecution(f"Tool call skipped: {reason}")
    if tracked.action is HookAction.ABORT:
        raise HookAbortError(
            f"tool {tracked.tool!r} aborted the run: {reason}", tool=tracked.tool, reason=reason
        )
    raise ToolFailed(f"Tool call blocked: {reason}")


def _revalidate(
    ctx: RunContext[object], call: ToolCallPart, args: Mapping[str, Any]
) -> dict[str, Any]:
    """Validate a pre-hook's ``modified_input`` as PydanticAI validated the model's arguments."""
    manager = ctx.tool_manager
    tool = None if manager is None or manager.tools is None else manager.tools.get(call.tool_name)
    if tool is None:
        return dict(args)
    validated: dict[str, Any] = tool.args_validator.validate_python(
        dict(args), context=ctx.validation_context
    )
    return validated


async def _finish_call(tracked: TrackedToolCall, output: Any) -> Any:
    """Record the call ``completed``; the output the post-hooks left, for the model."""
    try:
        return await tracked.finished(output)
    except HookAbortError:
        raise  # a post-hook's ABORT ends the run: a verdict, enforced
    except Exception:
        logger.exception("onlooker could not record the end of tool call %s", tracked.tool_call_id)
        return output


async def _fail_call(tracked: TrackedToolCall, error: BaseException) -> None:
    # Shielded: the call is closed even while its task is being cancelled.
    with anyio.CancelScope(shield=True):
        try:
            if not tracked.done:
                await tracked.failed(error)
        except Exception:
            logger.exception(
                "onlooker could not record the failure of tool call %s", tracked.tool_call_id
            )


async def _finish_run(
    run: TrackedExecution, status: ExecutionStatus, result: Any, error: BaseException | None
) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await run.finish(status=status, result=result, error=error)
        except Exception:
            logger.exception("onlooker could not record the end of execution %s", run.execution_id)
