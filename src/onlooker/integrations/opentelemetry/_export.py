"""Export: an onlooker plugin that turns events into GenAI spans (the mapping is in ``__init__``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, final

import anyio

import onlooker
from onlooker import (
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionStarted,
    Plugin,
    PluginContext,
    ToolCallFinished,
    ToolCallStarted,
    ToolRegistry,
)
from onlooker.plugins.audit import Redactor

from ._conventions import (
    AGENT_NAME,
    ERROR_TYPE,
    OPERATION,
    SCOPE_NAME,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_RESULT,
    TOOL_TYPE,
    context_api,
    logger,
    ns,
    to_json,
    trace_api,
    utf8,
)

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.util.types import AttributeValue

__all__ = ["TraceExport", "plugin"]

_ERROR_TOOL_STATUSES: Final = frozenset({"failed", "blocked", "cancelled"})
_MAX_CHARS: Final = 20_000
"""Strings a span carries are cut here, as history cuts them (redacted first, scanning only
what is kept): an error message of megabytes would have been a status description of as many."""
_Key = tuple[str, str | None]


def plugin(
    tracer_provider: trace_api.TracerProvider | None = None,
    *,
    record_content: bool = False,
    redactor: Redactor | None = None,
) -> Plugin[TraceExport]:
    """An onlooker plugin that exports every execution as GenAI spans.

    ``tracer_provider`` defaults to the global one (``trace.get_tracer_provider()``).
    ``record_content=True`` also records tool arguments and results
    (``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``), execution
    inputs and results, and interaction messages and responses, as JSON strings:
    opt-in, since they may hold sensitive data. Every value and error message
    a span carries goes through ``redactor`` first (an
    :class:`onlooker.plugins.audit.Redactor`; default: its default policy, the
    one history and the audit trail apply). Works for native and tracked
    executions alike; the extension is a :class:`TraceExport`.
    """

    _redactor_of(redactor)  # a bad one is named now, not when the engine starts

    @asynccontextmanager
    async def extension(ctx: PluginContext) -> AsyncIterator[TraceExport]:
        tracer = trace_api.get_tracer(
            SCOPE_NAME, onlooker.__version__, tracer_provider=tracer_provider
        )
        export = TraceExport(
            tracer, tools=ctx.tools, record_content=record_content, redactor=redactor
        )
        try:
            yield export
        finally:
            export.close()

    return onlooker.define_plugin(
        id="opentelemetry", extension=extension, observer=lambda export: export
    )


@final
class TraceExport:
    """The export plugin's extension and observer: opens and ends spans as events arrive.

    A synchronous observer (cheap work, inline): it never raises into the
    execution; a failure is logged on ``onlooker.integrations.opentelemetry``.
    """

    __slots__ = (
        "_current",
        "_dispatch",
        "_executions",
        "_record_content",
        "_redactor",
        "_tool_spans",
        "_tools",
        "_tracer",
    )

    def __init__(
        self,
        tracer: trace_api.Tracer,
        *,
        tools: ToolRegistry,
        record_content: bool = False,
        redactor: Redactor | None = None,
    ) -> None:
        self._tracer = tracer
        self._tools = tools
        self._record_content = record_content
        self._redactor = _redactor_of(redactor)
        self._executions: dict[str, trace_api.Span] = {}
        # Keyed by (execution id, call id): a framework's call ids repeat across runs.
        self._tool_spans: dict[tuple[str, str], trace_api.Span] = {}
        # An execution or call onlooker runs has its span current while its program or
        # tool runs: their own spans (a model call, an HTTP client) nest under it. Keyed
        # by (execution id, call id), the call id None for the execution's own span.
        self._current: dict[_Key, tuple[int | None, Token[Context]]] = {}
        self._dispatch: dict[type[Any], Callable[[Any], None]] = {
            ExecutionStarted: self._execution_started,
            ToolCallStarted: self._tool_started,
            ToolCallFinished: self._tool_finished,
            InteractionStarted: self._interaction_started,
            InteractionResolved: self._interaction_resolved,
            ExecutionFinished: self._execution_finished,
        }

    @property
    def tracer(self) -> trace_api.Tracer:
        """The tracer the spans are made with (scope ``onlooker.integrations.opentelemetry``)."""
        return self._tracer

    @property
    def open_spans(self) -> int:
        """How many spans are open now (executions and tool calls still running)."""
        return len(self._executions) + len(self._tool_spans)

    def span(self, execution_id: str) -> trace_api.Span | None:
        """The ``invoke_agent`` span of a running execution (to add your own attributes)."""
        return self._executions.get(execution_id)

    def handle(self, event: ExecutionEvent) -> None:
        """Turn one event into span work; never raises an ``Exception``."""
        try:
            self._dispatch[type(event)](event)
        except Exception:
            logger.exception(
                "OpenTelemetry export failed on %s (execution %s)", event.kind, event.execution_id
            )

    def close(self) -> None:
        """End every span still open (the engine closed before its events did)."""
        leftovers = [*self._tool_spans.values(), *self._executions.values()]
        self._current.clear()  # each in the context of a task that is gone or cancelled
        self._tool_spans.clear()
        self._executions.clear()
        for span in leftovers:
            try:
                span.set_status(
                    trace_api.Status(trace_api.StatusCode.ERROR, "the engine closed first")
                )
                span.set_attribute(ERROR_TYPE, "_OTHER")
                span.end()
            except Exception:
                logger.exception("OpenTelemetry export could not end a span")

    # -- one method per kind ----------------------------------------------------------

    def _execution_started(self, event: ExecutionStarted) -> None:
        attribution = event.attribution
        attributes: dict[str, AttributeValue] = {
            OPERATION: "invoke_agent",
            AGENT_NAME: event.program,
            "onlooker.execution.id": event.execution_id,
            "onlooker.trigger.kind": event.trigger.kind,
            "onlooker.depth": attribution.depth,
        }
        if event.owner is not None:
            attributes["onlooker.owner"] = event.owner
        _attribution_attributes(attributes, event)
        if attribution.parent_execution_id is not None:
            attributes["onlooker.parent_execution.id"] = attribution.parent_execution_id
        if attribution.parent_tool_call_id is not None:
            attributes["onlooker.parent_tool_call.id"] = attribution.parent_tool_call_id
        if event.input is not None:
            value = self._learn(event.input)
            if self._record_content:
                attributes["onlooker.execution.input"] = to_json(value)
        span = self._executions[event.execution_id] = self._tracer.start_span(
            utf8(f"invoke_agent {event.program}"),
            context=self._parent_context(event),
            kind=trace_api.SpanKind.INTERNAL,
            attributes=_encodable(attributes),
            start_time=ns(event.at),
        )
        if _native(event):
            self._enter((event.execution_id, None), span)

    def _json(self, value: Any) -> str:
        """A value as a span attribute: redacted, then JSON."""
        return to_json(self._redactor.redact(value, max_chars=_MAX_CHARS))

    def _learn(self, value: Any) -> Any:
        """``value`` redacted when the span records it; either way the redactor learns the
        secrets under secret keys (a tool's ``password`` argument) and scrubs them from
        the error messages the spans always carry, as the audit trail and history do.
        (Without content only the keys are read: redacting every string a tool returned,
        inline on the event loop, cost milliseconds a call for nothing kept.)"""
        if self._record_content:
            return self._redactor.redact(value, max_chars=_MAX_CHARS)
        self._redactor.learn(value)
        return None

    def _text(self, text: str) -> str:
        """A message as a span's status description: redacted, cut, encodable."""
        return utf8(self._redactor.redact(text, max_chars=_MAX_CHARS))

    def _parent_context(self, event: ExecutionStarted) -> Context | None:
        """A child's parent span: the parent's tool-call span, else the parent's execution span."""
        attribution = event.attribution
        parent_id = attribution.parent_execution_id
        if parent_id is None:
            return None  # a root: the span current where it started, if any
        parent = None
        if attribution.parent_tool_call_id is not None:
            parent = self._tool_spans.get((parent_id, attribution.parent_tool_call_id))
        if parent is None:
            parent = self._executions.get(parent_id)
        return trace_api.set_span_in_context(parent) if parent is not None else None

    def _tool_started(self, event: ToolCallStarted) -> None:
        attributes: dict[str, AttributeValue] = {
            OPERATION: "execute_tool",
            TOOL_NAME: event.tool,
            TOOL_CALL_ID: event.tool_call_id,
            TOOL_TYPE: "function",
            "onlooker.execution.id": event.execution_id,
        }
        declaration = self._tools.declaration(event.tool)
        if declaration is not None and declaration.description:
            attributes[TOOL_DESCRIPTION] = declaration.description
        _attribution_attributes(attributes, event)
        args = self._learn(event.args)
        if self._record_content:
            attributes[TOOL_ARGUMENTS] = to_json(args)
        execution = self._executions.get(event.execution_id)
        key = (event.execution_id, event.tool_call_id)
        span = self._tool_spans[key] = self._tracer.start_span(
            utf8(f"execute_tool {event.tool}"),
            context=trace_api.set_span_in_context(execution) if execution is not None else None,
            kind=trace_api.SpanKind.INTERNAL,
            attributes=_encodable(attributes),
            start_time=ns(event.at),
        )
        if _native(event):
            self._enter(key, span)

    def _tool_finished(self, event: ToolCallFinished) -> None:
        key = (event.execution_id, event.tool_call_id)
        span = self._tool_spans.pop(key, None)
        if span is None:  # its start was never seen: a zero-length span still tells the story
            self._tool_started(_started_of(event))
            span = self._tool_spans.pop(key)
        self._leave(key, span)
        span.set_attribute("onlooker.tool.status", event.status)
        span.set_attribute("onlooker.tool.duration_ms", event.duration_ms)
        if event.metadata:
            span.set_attribute("onlooker.tool.metadata", self._json(event.metadata))
        if event.status == "completed":
            result = self._learn(event.result)
            if self._record_content:
                span.set_attribute(TOOL_RESULT, to_json(result))
        if event.status in _ERROR_TOOL_STATUSES:
            error_type = event.error.type if event.error is not None else event.status
            message = event.error.message if event.error is not None else event.status
            span.set_attribute(ERROR_TYPE, utf8(error_type))
            span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, self._text(message)))
        span.end(end_time=ns(event.at))

    def _enter(self, key: _Key, span: trace_api.Span) -> None:
        """Make a native execution's or call's span current until its end event.

        A native execution (``engine.execute``, ``ctx.spawn``) runs its program, and a
        native call (``ctx.call``) its tool, between their two events, in the task that
        emits them (this observer is synchronous: it runs in that task's context). A
        framework's run or call (a tracked one) may end in another context: left alone.
        """
        token = context_api.attach(trace_api.set_span_in_context(span))
        self._current[key] = (_task(), token)

    def _leave(self, key: _Key, span: trace_api.Span) -> None:
        """Make a span no longer current, where this is the context it was made current
        in (its program's or tool's task, as the span is still current there)."""
        entry = self._current.pop(key, None)
        if entry is None:
            return
        task, token = entry
        # Another task (a child holds a copy of the context) must not detach it.
        if task is not None and task == _task() and trace_api.get_current_span() is span:
            context_api.detach(token)

    def _interaction_started(self, event: InteractionStarted) -> None:
        span = self._executions.get(event.execution_id)
        if span is None:
            return
        attributes: dict[str, AttributeValue] = {
            "onlooker.interaction.id": event.interaction_id,
            "onlooker.interaction.mode": event.mode,
        }
        if self._record_content:
            attributes["onlooker.interaction.message"] = self._text(event.message)
            if event.requested_schema is not None:
                attributes["onlooker.interaction.schema"] = self._json(event.requested_schema)
        span.add_event("onlooker.interaction.started", _encodable(attributes), ns(event.at))

    def _interaction_resolved(self, event: InteractionResolved) -> None:
        span = self._executions.get(event.execution_id)
        if span is None:
            return
        attributes: dict[str, AttributeValue] = {
            "onlooker.interaction.id": event.interaction_id,
            "onlooker.interaction.status": event.status,
        }
        if event.error is not None:
            attributes[ERROR_TYPE] = event.error.type
        if event.response is not None:
            response = self._learn(event.response)
            if self._record_content:
                attributes["onlooker.interaction.response"] = to_json(response)
        span.add_event("onlooker.interaction.resolved", _encodable(attributes), ns(event.at))

    def _execution_finished(self, event: ExecutionFinished) -> None:
        span = self._executions.pop(event.execution_id, None)
        # Calls still open when their execution ends (a defect upstream) end with it.
        for key in [key for key in self._tool_spans if key[0] == event.execution_id]:
            call = self._tool_spans.pop(key)
            self._leave(key, call)
            call.end(end_time=ns(event.at))
        if span is None:
            return
        self._leave((event.execution_id, None), span)
        span.set_attribute("onlooker.execution.status", event.status)
        span.set_attribute("onlooker.execution.duration_ms", event.duration_ms)
        if event.status == "completed" and event.result is not None:
            result = self._learn(event.result)
            if self._record_content:
                span.set_attribute("onlooker.execution.result", to_json(result))
        if event.status != "completed":
            error_type = event.error.type if event.error is not None else event.status
            message = event.error.message if event.error is not None else event.status
            span.set_attribute(ERROR_TYPE, utf8(error_type))
            span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, self._text(message)))
        span.end(end_time=ns(event.at))


def _native(event: ExecutionStarted | ToolCallStarted) -> bool:
    """Whether the native execution running here (its start, or its ``ctx.call``)
    emitted ``event``."""
    try:
        return onlooker.current_context().execution_id == event.execution_id
    except RuntimeError:  # no native execution runs here: a tracked call
        return False


def _task() -> int | None:
    """The current task's id (``None`` outside one): the context a token belongs to."""
    try:
        return anyio.get_current_task().id
    except RuntimeError:
        return None


def _redactor_of(redactor: Redactor | None) -> Redactor:
    if redactor is None:
        return Redactor()
    if not isinstance(redactor, Redactor):
        raise TypeError(f"redactor must be an onlooker.plugins.audit.Redactor, not {redactor!r}")
    return redactor


def _encodable(attributes: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
    """The attributes with every string as OpenTelemetry can encode it (see :func:`utf8`)."""
    return {key: utf8(v) if isinstance(v, str) else v for key, v in attributes.items()}


def _attribution_attributes(
    attributes: dict[str, AttributeValue], event: ExecutionStarted | ToolCallStarted
) -> None:
    attribution = event.attribution
    if attribution.task_id is not None:
        attributes["onlooker.task_id"] = attribution.task_id
    if attribution.phase is not None:
        attributes["onlooker.phase"] = attribution.phase
    if attribution.intent_id is not None:
        attributes["onlooker.intent_id"] = attribution.intent_id


def _started_of(event: ToolCallFinished) -> ToolCallStarted:
    return ToolCallStarted(
        event_id=event.event_id,
        execution_id=event.execution_id,
        seq=event.seq,
        at=event.at,
        attribution=event.attribution,
        tool_call_id=event.tool_call_id,
        tool=event.tool,
        args={},
    )
