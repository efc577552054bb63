"""The OpenAI Agents SDK under onlooker: every run a tracked execution, every tool call governed.

Three pieces, built on one engine, share what they know (so each call is
recorded once, correlated by the SDK's own ``ToolContext.tool_call_id``)::

    hooks = OnlookerRunHooks(engine)                  # the run and its tool calls
    guard = tool_guardrail(engine)                    # onlooker's pre-hooks, enforced
    set_trace_processors([OnlookerTracingProcessor(engine)])   # or add_trace_processor(...)
    agent = Agent(name="support", tools=[function_tool(lookup, tool_input_guardrails=[guard])])
    await Runner.run(agent, "Where is my refund?", hooks=hooks)

How the SDK's callbacks map onto :meth:`onlooker.ExecutionEngine.track`:

=========================================  ==================================================
SDK callback                               onlooker
=========================================  ==================================================
``on_agent_start`` (first agent of a run)  ``engine.track(program, trigger="openai-agents")``
                                           and ``run.start()``; inside a guarded tool call (an
                                           agent used as a tool): ``run.child(agent.name,
                                           parent_tool_call_id=...)``
``on_handoff``                             the same execution goes on with the new agent
``on_agent_end``                           ``run.finish("completed", result=output)``
tool input guardrail (``tool_guardrail``)  ``run.tool_started(tool_name, arguments,
                                           tool_call_id=ToolContext.tool_call_id)``; a refusal
                                           becomes ``reject_content(reason)`` (``SKIP`` /
                                           ``BLOCK``) or ``raise_exception`` (``ABORT``: the
                                           run stays open until its agent span ends, so
                                           ``tool_started`` refuses the rest of the batch;
                                           without the processor ``run.finish()`` at once)
``on_llm_end``                             notes the response's function calls: one no hook
                                           sees is awaiting approval (``needs_approval``)
``on_tool_start``                          ``run.tool_started(...)`` only for a call the
                                           guardrail did not open (watch only)
``on_tool_end``                            ``call.failed(...)`` when the tool's trace span
                                           carries an error (the SDK hands a failing tool's
                                           message to ``on_tool_end`` as a normal result)
                                           or the result is the SDK's timeout message,
                                           else ``call.finished(result)``
function span ends, call still open        ``call.failed(...)``: ``cancelled`` when the task
(``OnlookerTracingProcessor``)             ending the span is being cancelled, else the span
                                           error (the tool raised past
                                           ``failure_error_function``), or the
                                           SDK's timeout message as output; else
                                           ``call.finished(span output)``
agent span ends, calls awaiting approval   the run is paused: ``run.interaction_started(...)``
                                           per awaited call; ``Runner.run(agent, state)``
                                           goes on with the same execution and resolves them
                                           ``accepted`` / ``declined``
agent span ends, run still open            after an ``ABORT`` ``run.finish()`` (``failed``);
(``OnlookerTracingProcessor``)             ``run.finish("cancelled")`` when the run's task is
                                           being cancelled; ``run.finish("failed",
                                           error=span error)``; else ``run.finish("completed")``
=========================================  ==================================================

What cannot be governed: the SDK hands a function tool the arguments the
model sent, so a pre-hook's ``modified_input`` cannot reach the tool; such a
call is refused (``reject_content``) and recorded ``failed``, never run with
arguments onlooker did not approve. ``on_tool_end`` cannot change the result
the model sees: a post-hook's ``modified_output`` is recorded but does not
reach the model. Hosted tools (web search, file search, code interpreter,
hosted MCP) run on OpenAI's side and reach no hook; local non-function tools
(computer, shell, apply-patch) are recorded from ``on_tool_start`` /
``on_tool_end`` without arguments or call id, and cannot be refused.
Failures are told apart only while tracing is enabled (the function span is
what says a tool failed). A cancelled run leaves no error on its spans: the
processor tells it apart by the task that ends them, which is being
cancelled (``Task.cancelling()``). The SDK runs on asyncio only; run it on
the engine's event loop.
"""

from __future__ import annotations

from .. import require

require("agents", extra="openai-agents", framework="OpenAI Agents SDK")

# The SDK's classes are subclassed in the modules below, so it is imported with
# this package (never with `import onlooker`); `require` above names the extra
# when it is missing.
from ._guardrail import tool_guardrail  # noqa: E402
from ._hooks import OnlookerRunHooks  # noqa: E402
from ._tracing import OnlookerTracingProcessor  # noqa: E402

__all__ = ["OnlookerRunHooks", "OnlookerTracingProcessor", "tool_guardrail"]
