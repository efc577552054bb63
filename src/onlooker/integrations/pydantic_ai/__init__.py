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
``wrap_run`` returns                   ``run.finish("completed", result=output)``; with
                                       ``DeferredToolRequests``: paused, open with its questions
``wrap_run`` enters with the history   the paused execution goes on (no ``ExecutionStarted``)
of a paused run's awaited calls
``wrap_run`` raises / is cancelled     ``run.finish("failed", error=exc)`` / ``"cancelled"``
``on_tool_validate_error`` (the        ``run.tool_started(call.tool_name, args as sent)`` then
model's arguments do not validate)     ``tracked.failed(ToolInputError)``; the error goes on: the
                                       model reads a retry prompt
``wrap_tool_execute`` enters           ``run.tool_started(call.tool_name, args,
                                       tool_call_id=call.tool_call_id,
                                       validate=tool.args_validator)`` (pre-hooks)
- verdict ``SKIP``                     ``raise SkipToolExecution(reason)``: the tool never runs; the
                                       model reads the reason as its result (PydanticAI says
                                       "success"; onlooker records ``skipped``)
- verdict ``BLOCK``                    ``raise ToolFailed(reason)``: the tool never runs; the model
                                       reads a failed result carrying the reason
- verdict ``ABORT``                    ``raise HookAbortError``: the run ends ``failed``
- ``modified_input``                   validated by the tool's own validator (``validate=``)
                                       before ``ToolCallStarted``, which records what the tool
                                       receives; invalid: recorded ``failed``, ``raise
                                       ToolFailed(reason)``
the tool returns                       ``tracked.finished(result)``; the output the post-hooks left
                                       (``modified_output``) is what the model reads
``ModelRetry`` / ``ToolFailed``        ``tracked.failed(error)``, cause ``failure`` (expected); the
                                       model reads a retry prompt / a failed result, and the run
                                       goes on
any other exception                    ``tracked.failed(error)``; the run ends ``failed``
``ApprovalRequired`` /                 ``run.interaction_started("... awaits approval")``, the
``CallDeferred``                       call left open
``handle_deferred_tool_calls``         the same question for a call deferred before any tool hook
                                       (``requires_approval=True``); returns ``None``
approved (inline or by a later         ``interaction_resolved("accepted")``; the held call goes on
run's ``deferred_tool_results``)       with the pre-hooks' arguments (overridden ones: a new call
                                       ``<id>#2``), one never started starts now
``before_node_run`` (``ModelRequest``  denied: ``"declined"``, a held call ``failed``
returning a deferred call unrun)       (``ToolApprovalRejected``); an external result:
                                       ``"accepted"`` with it, a held call ``cancelled``
``SkipToolExecution`` of an inner      ``tracked.finished(replacement)``: recorded ``completed``,
capability                             with the replacement as the result
=====================================  ============================================================

Sub-agents: while a tool runs, its tracked call is held in a
:class:`~contextvars.ContextVar`; an agent run started inside it (the usual
``await other_agent.run(..., usage=ctx.usage)`` delegation) on a capability
of the same engine becomes a child execution linked to that call.

What cannot be governed: output tools and output functions (not tool calls
here: the execution's result records the output they carry; PydanticAI runs
them through output hooks, not tool hooks), native tools the provider runs
(web search, code execution), model requests, and the decision on a deferred
call (``HandleDeferredToolCalls``, ``deferred_tool_results``), which
PydanticAI takes outside the tool hooks: onlooker records it as the answer to
the call's question.

The adapter's own failures are logged on ``onlooker.integrations.pydantic_ai``
and never reach the agent: the run, or the call, goes on untracked.
onlooker's verdicts (``SKIP``, ``BLOCK``, ``ABORT``) are not failures; they
are enforced. PydanticAI runs on asyncio; run agents on the engine's event
loop (``await agent.run(...)``, not ``agent.run_sync`` from another thread).
"""

from __future__ import annotations

from .. import require

require("pydantic_ai", extra="pydantic-ai", framework="PydanticAI")

from ._capability import OnlookerCapability  # noqa: E402  # after require(): a missing extra is named

__all__ = ["OnlookerCapability"]
