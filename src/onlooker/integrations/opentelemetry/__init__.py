"""OpenTelemetry, both ways: onlooker's events as GenAI spans, and GenAI spans as tracked executions.

**Export** — :func:`plugin` returns an onlooker plugin whose synchronous
observer turns every execution (native or tracked) into spans that follow
OpenTelemetry's GenAI semantic conventions, on the ``TracerProvider`` you
give it (or the global one), so any exporter (OTLP, console, in-memory) sees
them:

=========================  ===============================================================
onlooker event             span
=========================  ===============================================================
``ExecutionStarted``       starts ``invoke_agent {program}`` (INTERNAL):
                           ``gen_ai.operation.name=invoke_agent``, ``gen_ai.agent.name``,
                           ``onlooker.execution.id``, trigger, attribution. A child
                           execution's span is a child of the parent's ``execute_tool``
                           span (``attribution.parent_tool_call_id``) or else of the
                           parent's ``invoke_agent`` span; a root one is a child of the
                           span current where the execution started, if any
``ToolCallStarted``        starts ``execute_tool {tool}`` (INTERNAL), a child of its
                           execution's span: ``gen_ai.operation.name=execute_tool``,
                           ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
                           ``gen_ai.tool.type=function``, ``gen_ai.tool.description``
                           when declared; ``gen_ai.tool.call.arguments`` (JSON) only with
                           ``record_content=True``. For a native call (``ctx.call``) the
                           span is current while the tool runs: its body's spans
                           nest under it
``ToolCallFinished``       ends it: ``onlooker.tool.status`` on every tool span
                           (completed / failed / skipped / blocked / cancelled);
                           failed, blocked and cancelled set status ERROR and
                           ``error.type``; ``gen_ai.tool.call.result`` (JSON) only with
                           ``record_content=True``; hook metadata as
                           ``onlooker.tool.metadata`` (JSON)
``InteractionStarted``     span event ``onlooker.interaction.started`` on the execution's
                           span (the message and schema only with ``record_content=True``)
``InteractionResolved``    span event ``onlooker.interaction.resolved`` (its status; the
                           response only with ``record_content=True``)
``ExecutionFinished``      ends ``invoke_agent``: ``onlooker.execution.status``; failed,
                           cancelled and expired set status ERROR and ``error.type``
=========================  ===============================================================

Span start and end times are the events' own ``at``, so a span is exactly as
long as the events say. Tool arguments, results, inputs, outputs and
questions may hold sensitive data: as the conventions ask, they are recorded
only when you opt in with ``record_content=True``.

**Ingest** — :class:`OnlookerSpanProcessor` is an SDK ``SpanProcessor``:
add it to the ``TracerProvider`` of any framework that emits GenAI spans
(``gen_ai.operation.name``: PydanticAI's instrumentation, your own spans; not
OpenInference's or OpenLLMetry's own vocabularies) and its tool calls become
a tracked execution (``engine.track``):

=================================================  ===========================================
span                                               tracked call
=================================================  ===========================================
``invoke_agent`` span starts                       ``engine.track(gen_ai.agent.name)`` and
                                                   ``run.start()``; nested in another agent's
                                                   tool span: ``parent.child(...,
                                                   parent_tool_call_id=...)``
``execute_tool`` span starts                       ``run.tool_started(gen_ai.tool.name,
                                                   arguments, tool_call_id=gen_ai.tool.call.id
                                                   or the span id)``, an id repeated in the run
                                                   suffixed ``#2``, ``#3`` ...; with no
                                                   ``invoke_agent`` above it, in one execution
                                                   per trace, named after the trace's local
                                                   root span
a tool span lacking its name or call id          its call recorded whole when the span ends,
at its start (or only a tool at its end)           from its final attributes (earlier, as it
                                                   is, if an ``invoke_agent`` span starts in it)
``execute_tool`` span ends, status not ERROR       ``call.finished(gen_ai.tool.call.result,
and no ``error.type``                              duration_ms=span duration)``
``execute_tool`` span ends, status ERROR or        ``call.failed(ErrorInfo(type=error.type or
an ``error.type``                                  the exception's type, message=description
                                                   ...), duration_ms=span duration)``
``invoke_agent`` span ends                         ``run.finish("completed")``, or ``"failed"``
                                                   when its status is ERROR (or ``error.type``)
the trace's last local span ends                   ``run.finish("completed")`` (per-trace run)
``shutdown()``                                     every run still open finishes ``cancelled``
=================================================  ===========================================

Ingest is **watch only**: the tool has run (or is running) by the time its
span reaches the processor, so onlooker's pre-hooks are consulted and their
verdict recorded (a refused call is recorded ``blocked`` / ``skipped`` and a
warning is logged), but nothing is enforced. Govern a framework with its own
adapter (``onlooker.integrations.pydantic_ai``, ...).

Threads: ``on_start`` / ``on_end`` may run on any thread. They only copy
what they need from the span into a queue (under a lock) and never block or
raise into the instrumented application. The processor captures the
engine's event loop at construction (``anyio.lowlevel.current_token()``):
from another thread it hops onto the loop with the loop's own thread-safe
"call soon" (``loop.call_soon_threadsafe`` on asyncio,
``TrioToken.run_sync_soon`` on trio); on the loop it starts one drain task
(``loop.create_task`` / ``trio.lowlevel.spawn_system_task``, in the context
the processor was built in, so ``onlooker.observing()`` scopes apply) that
applies the queued spans to the engine in order.
"""

from __future__ import annotations

from ._conventions import SCOPE_NAME
from ._export import TraceExport, plugin
from ._ingest import OnlookerSpanProcessor

__all__ = ["SCOPE_NAME", "OnlookerSpanProcessor", "TraceExport", "plugin"]
