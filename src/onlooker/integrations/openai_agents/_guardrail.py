"""The tool input guardrail: onlooker's pre-hooks decide each call before the SDK runs it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from agents import ToolGuardrailFunctionOutput, ToolInputGuardrail, ToolInputGuardrailData

from onlooker import HookAction

from ._shared import CURRENT, arguments, awaiting_approval, guarded, logger, state_of

if TYPE_CHECKING:
    from onlooker import ExecutionEngine, TrackedToolCall

__all__ = ["tool_guardrail"]


def tool_guardrail(engine: ExecutionEngine) -> ToolInputGuardrail[Any]:
    """One tool input guardrail that runs onlooker's pre-hooks on every call of the tools it guards.

    Put it in each ``FunctionTool``'s ``tool_input_guardrails`` (last, after
    guardrails of your own), also on agents used as tools. It opens the
    tracked call with the SDK's ``tool_call_id``; a ``SKIP`` or ``BLOCK``
    verdict refuses the call with ``reject_content`` (the model reads the
    reason, the tool never runs), an ``ABORT`` halts the run
    (``raise_exception``) and refuses every later call of it (the rest of a
    parallel batch). A ``modified_input`` cannot reach the tool, so such
    a call is refused too. If onlooker cannot record the call (an adapter
    error, a closed engine), the call runs unrecorded and the error is logged,
    as in every other adapter: an adapter's failure never breaks the agent.
    """
    return ToolInputGuardrail(guardrail_function=_Guardrail(engine), name="onlooker")


class _Guardrail:
    """The function behind :func:`tool_guardrail` (holds the engine, as the hooks do)."""

    def __init__(self, engine: ExecutionEngine) -> None:
        self._engine = engine
        self._state = state_of(engine)

    async def __call__(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Decide one call: allow it, refuse it with a message, or halt the run."""
        state = self._state
        context = data.context
        try:
            found = state.call_for(context)
            if found is None:
                run = state.run_for(context) or await state.open_run(
                    context, data.agent, program=None, owner=None
                )
                found = state.call_for(context)  # held for approval in the run it resumes
            if found is not None:  # guarded twice: the first one decided
                if found.awaiting:  # the person approved it: it runs now
                    state.approved(found, context)
                    CURRENT.set(found)
                return ToolGuardrailFunctionOutput.allow()
            if run.aborted and run.track.finished:  # nothing left to record this call in
                return ToolGuardrailFunctionOutput.raise_exception(
                    output_info={"onlooker": HookAction.ABORT.value, "reason": _ABORTED}
                )
            args = arguments(context.tool_arguments)
            call, entry = await state.open_call(
                run, context, context.tool_name, args, context.tool_call_id
            )
        except Exception:
            logger.exception(
                "could not record tool call %r; it runs unrecorded", context.tool_call_id
            )
            return ToolGuardrailFunctionOutput.allow(output_info={"onlooker": "error"})
        info = {"onlooker": call.action.value, "tool_call_id": call.tool_call_id}
        if call.action is HookAction.ABORT:
            # The run stays known until it ends, so that the calls still to come in it (a
            # parallel batch's siblings) are refused by the same execution, not a new one.
            run.aborted = True
            if run.agent_span_id is None:  # no agent span will tell the processor it ended
                await guarded(run.track.finish(), "an aborted run")  # recorded failed
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info | _why(call))
        if not call.allowed:
            verdict = "skipped" if call.action is HookAction.SKIP else "blocked"
            return ToolGuardrailFunctionOutput.reject_content(
                f"Tool call {verdict} by onlooker: {call.reason or 'refused by a pre-hook'}",
                output_info=info | _why(call),
            )
        if call.input != args:
            reason = (
                "a pre-hook rewrote the arguments, and the OpenAI Agents SDK runs a tool "
                "with the model's own arguments; refused instead"
            )
            await guarded(entry.call.failed(reason), "a refused rewrite")
            return ToolGuardrailFunctionOutput.reject_content(
                f"Tool call refused by onlooker: {reason}.", output_info=info
            )
        if awaiting_approval(context):  # the SDK asks a person next; the tool does not run yet
            await guarded(state.hold(entry, context.tool_call_id), "a call awaiting approval")
            return ToolGuardrailFunctionOutput.allow(output_info=info)
        state.remember(entry)
        CURRENT.set(entry)
        return ToolGuardrailFunctionOutput.allow(output_info=info)


_ABORTED: Final = "the execution was aborted"


def _why(call: TrackedToolCall) -> dict[str, str]:
    return {} if call.reason is None else {"reason": call.reason}
