"""The run hooks: each ``Runner.run`` a tracked execution, its tool calls closed (or watched)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents import Agent, ModelResponse, RunContextWrapper, RunHooks, Tool
from agents.run_context import AgentHookContext
from agents.tool_context import ToolContext
from agents.tracing import get_current_span
from openai.types.responses import ResponseFunctionToolCall

from ._shared import arguments, logger, span_failure, state_of, timeout_failure

if TYPE_CHECKING:
    from onlooker import ExecutionEngine

__all__ = ["OnlookerRunHooks"]


class OnlookerRunHooks(RunHooks[Any]):
    """Run hooks that turn each ``Runner.run`` into a tracked execution of ``engine``.

    Pass it as ``Runner.run(agent, input, hooks=...)``, and to every agent used
    as a tool (``agent.as_tool(..., hooks=...)``), whose run becomes a child
    execution linked to the calling tool call. ``program`` names the
    execution (default: the starting agent's name); ``owner`` is recorded on
    it. The hooks close the tool calls :func:`tool_guardrail` opened, and
    open (watch only) those it did not see. Give every tool the guardrail to
    govern its calls, and register :class:`OnlookerTracingProcessor` so that a
    run that raises is recorded ``failed``, and one cancelled ``cancelled``.
    """

    def __init__(
        self, engine: ExecutionEngine, *, program: str | None = None, owner: str | None = None
    ) -> None:
        self._engine = engine
        self._state = state_of(engine)
        self._program = program
        self._owner = owner

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        """Start the run's tracked execution (or follow a handoff to ``agent``)."""
        try:
            state = self._state
            run = state.run_for(context)
            if run is None:
                await state.open_run(context, agent, program=self._program, owner=self._owner)
                return
            if run.handoff:
                run.handoff, run.agent = False, agent
            elif agent is not run.agent:
                logger.warning(
                    "agent %r started inside run %s without a link to a tool call: give the "
                    "agent tool that runs it onlooker's tool_guardrail; it is not recorded",
                    agent.name,
                    run.track.execution_id,
                )
                return
            state.watch_agent_span(run)
        except Exception:
            logger.exception("could not record the start of agent %r", agent.name)

    async def on_agent_end(
        self, context: AgentHookContext[Any], agent: Agent[Any], output: Any
    ) -> None:
        """Finish the run's tracked execution ``completed`` with the final output.

        While the processor watches the run's spans, the run finishes when its
        agent span ends instead: the SDK runs the output guardrails (the
        agent's and the ``RunConfig``'s) after this hook, and a tripwire (the
        run then raises) is only on the span.
        """
        try:
            state = self._state
            run = state.run_for(context)
            if run is None or agent is not run.agent:
                return
            if run.agent_span_id in state.spans and state.sees_current_span():
                run.output = (output,)  # its end comes with the agent span's (the processor)
                return
            await state.drain()
            state.finish_run(run, "completed", result=output)
        except Exception:
            logger.exception("could not record the end of agent %r", agent.name)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """Note the function calls the model asked for: one that no guardrail or hook then
        sees is one the SDK asks a person to approve (``needs_approval``)."""
        try:
            run = self._state.run_for(context)
            if run is not None:
                run.opened = set()
                run.requested = {
                    item.call_id: item.name
                    for item in response.output
                    if isinstance(item, ResponseFunctionToolCall)
                }
        except Exception:
            logger.exception("could not note the calls of a model response")

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        """Note the handoff: the same execution goes on with ``to_agent``."""
        try:
            run = self._state.run_for(context)
            if run is not None:
                run.handoff, run.agent = True, to_agent
                run.handing_off = run.agent_span_id
        except Exception:
            logger.exception("could not record the handoff to %r", to_agent.name)

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """Open the call if the guardrail did not (it is then recorded, not governed)."""
        try:
            state = self._state
            if state.call_for(context) is not None:
                return  # the guardrail opened (and governed) it
            run = state.run_for(context) or await state.open_run(
                context, agent, program=self._program, owner=self._owner
            )
            if isinstance(context, ToolContext):
                tool_name, tool_call_id = context.tool_name, context.tool_call_id
                args = arguments(context.tool_arguments)
            else:  # computer, shell, apply-patch: no call id or arguments reach the hooks
                tool_name, tool_call_id, args = tool.name, None, {}
            call, entry = await state.open_call(run, context, tool_name, args, tool_call_id)
            if not call.allowed:
                logger.warning(
                    "onlooker refused tool call %r (%s: %s) but cannot stop it: %s",
                    call.tool_call_id,
                    tool_name,
                    call.reason,
                    "give the tool onlooker's tool_guardrail (tool_input_guardrails) to enforce "
                    "refusals"
                    if hasattr(tool, "tool_input_guardrails")
                    else "the SDK gives this kind of tool no guardrail",
                )
                return
            if isinstance(context, ToolContext):
                state.remember(entry)
            else:
                run.local.setdefault(id(tool), []).append(entry)
        except Exception:
            logger.exception("could not record the start of tool %r", tool.name)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        """Close the call: ``failed`` if its trace span carries an error, else ``completed``."""
        try:
            state = self._state
            entry = state.call_for(context)
            if entry is None and not isinstance(context, ToolContext):
                run = state.run_for(context)
                queue = None if run is None else run.local.get(id(tool))
                entry = queue[0] if queue else None
            if entry is None:
                return
            await state.drain()  # a child run the processor is finishing comes first
            failure = span_failure(get_current_span(), entry) or timeout_failure(tool.name, result)
            await state.close_call(entry, result, failure)
        except Exception:
            logger.exception("could not record the end of tool %r", tool.name)
