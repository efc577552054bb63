"""What the ingest processor reads from a span: the ops it queues for the engine's loop.

Plain data, copied from a span under the processor's lock on whatever thread
the span started or ended on; the drain task on the engine's loop applies
them in order. A tool span whose attributes are not all there at its start
is kept as it is until it ends (:func:`complete`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from pydantic import JsonValue

from .._ids import unused_id
from ._conventions import (
    AGENT_NAME,
    DEFERRAL_NAME,
    ERROR_TYPE,
    LEGACY_TOOL_ARGUMENTS,
    LEGACY_TOOL_RESULT,
    OPERATION,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_NAME,
    TOOL_RESULT,
    WORKFLOW_NAME,
    trace_api,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, Span

__all__ = [
    "AgentStart",
    "End",
    "Op",
    "OpenSpan",
    "Role",
    "RunKey",
    "Shutdown",
    "ToolStart",
    "TraceEnd",
    "agent_start",
    "complete",
    "end_of",
    "opened",
    "role_of",
    "tool_start",
]

Role: TypeAlias = Literal["agent", "tool"]
"""What a span is to the processor: an agent's run, or a tool call."""

_AGENT_OPERATIONS: Final = ("invoke_agent", "invoke_workflow")
_CANCELLATIONS: Final = frozenset({"CancelledError", "Cancelled"})
"""Exception types (the last part of a qualified name) that mean the call was cut short:
asyncio's and concurrent.futures' ``CancelledError``, trio's ``Cancelled``."""

RunKey: TypeAlias = tuple[Literal["agent", "trace"], int]
"""Who owns a tool call: an ``invoke_agent`` span (by span id) or a whole trace (by trace id)."""


@dataclass(slots=True, eq=False)
class OpenSpan:
    """What the processor remembers of a span that started and has not ended."""

    role: Role | None
    span_id: int
    trace_id: int
    run: RunKey | None
    """The run a tool started under this span belongs to (None: no agent or tool above)."""
    call: OpenSpan | None
    """The nearest enclosing tool span (this one, for a tool), within ``run``."""
    root_name: str
    """The name of the trace's local root span (it names a per-trace run)."""
    tool_call_id: str | None = None
    """A tool span's call id, unique in its run, once its start is queued."""
    waiting: Span | None = None
    """A tool span whose start waits for its attributes (see :func:`complete`)."""


@dataclass(frozen=True, slots=True)
class AgentStart:
    span_id: int
    trace_id: int
    program: str
    parent_run: RunKey | None
    parent_tool_call_id: str | None


@dataclass(frozen=True, slots=True)
class ToolStart:
    span_id: int
    trace_id: int
    run: RunKey
    root_name: str
    tool: str
    tool_call_id: str
    args: dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class End:
    role: Role
    span_id: int
    error: str | None
    result: JsonValue
    duration_ms: float | None
    interrupt: str | None = None
    """The cancellation's exception type (``CancelledError``) when the span ended on one."""
    error_type: str | None = None
    """The failure's class: the span's ``error.type``, else its exception event's type."""
    deferred: bool = False
    """A tool the framework deferred (PydanticAI's ``CallDeferred``): not run, not ended."""


@dataclass(frozen=True, slots=True)
class TraceEnd:
    trace_id: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    pass


Op: TypeAlias = AgentStart | ToolStart | End | TraceEnd | Shutdown


def opened(role: Role | None, name: str, ids: tuple[int, int], above: OpenSpan | None) -> OpenSpan:
    """What to remember of a span that starts, nested in ``above`` (an open span of its trace).

    ``ids`` is the span's (span id, trace id).
    """
    span_id, trace_id = ids
    span = OpenSpan(
        role,
        span_id,
        trace_id,
        run=above.run if above is not None else None,
        call=above.call if above is not None else None,
        root_name=above.root_name if above is not None else name,
    )
    if role == "agent":
        span.run, span.call = ("agent", span_id), None
    elif role == "tool":
        span.run, span.call = span.run or ("trace", trace_id), span
    return span


def agent_start(
    span: OpenSpan, name: str, attributes: Mapping[str, object], above: OpenSpan | None
) -> AgentStart:
    """An agent span's start; ``above.call``, if any, has its start queued already."""
    call = above.call if above is not None else None
    return AgentStart(
        span_id=span.span_id,
        trace_id=span.trace_id,
        program=text(attributes.get(AGENT_NAME))
        or text(attributes.get(WORKFLOW_NAME))
        or after(name, "invoke_agent")
        or after(name, "invoke_workflow")
        or "agent",
        parent_run=above.run if above is not None else None,
        parent_tool_call_id=call.tool_call_id if call is not None else None,
    )


def complete(attributes: Mapping[str, object]) -> bool:
    """Whether a tool span names its call at start: tool name and call id.

    One that does is recorded when it starts (live; its arguments are those
    it has then: many instrumentations record none, an opt-in of the GenAI
    conventions); one that does not is recorded once it ends, from its final
    attributes (a framework may set them later).
    """
    return all(attributes.get(key) is not None for key in (TOOL_NAME, TOOL_CALL_ID))


def tool_start(
    span: OpenSpan, run: RunKey, name: str, attributes: Mapping[str, object], used: set[str]
) -> ToolStart:
    """A tool span's start in ``run``, from its attributes now; sets its call id.

    ``used`` holds the run's call ids so far: a model may repeat one within a
    run (a retried call), and the repeat gets ``#2``, ``#3`` ...
    """
    call_id = text(attributes.get(TOOL_CALL_ID)) or f"{span.span_id:016x}"
    span.tool_call_id, span.waiting = unused_id(used, call_id), None
    return ToolStart(
        span_id=span.span_id,
        trace_id=span.trace_id,
        run=run,
        root_name=span.root_name,
        tool=text(attributes.get(TOOL_NAME)) or after(name, "execute_tool") or "tool",
        tool_call_id=span.tool_call_id,
        args=arguments(_either(attributes, TOOL_ARGUMENTS, LEGACY_TOOL_ARGUMENTS)),
    )


def role_of(name: str, attributes: Mapping[str, object]) -> Role | None:
    """What a span is, by its ``gen_ai.operation.name`` (else by its name's prefix)."""
    operation = attributes.get(OPERATION)
    if operation == "execute_tool" or (operation is None and name.startswith("execute_tool")):
        return "tool"
    if operation in _AGENT_OPERATIONS or (operation is None and name.startswith(_AGENT_OPERATIONS)):
        return "agent"
    return None


def end_of(role: Role, span_id: int, span: ReadableSpan) -> End:
    attributes = span.attributes or {}
    error: str | None = None
    interrupt: str | None = None
    error_type = text(attributes.get(ERROR_TYPE))
    # The conventions' "Recording errors": a failed operation has status ERROR and/or
    # ``error.type``; a successful one has neither.
    if span.status.status_code is trace_api.StatusCode.ERROR or error_type:
        kind, message = _exception_of(span)
        error = (
            span.status.description
            or error_type
            or (f"{kind}: {message}" if kind and message else kind or message or "error")
        )
        interrupt = _cancellation(kind)
        error_type = error_type or kind
    duration = None
    if span.start_time is not None and span.end_time is not None:
        duration = max(span.end_time - span.start_time, 0) / 1e6
    result: JsonValue = None
    if role == "tool" and error is None:
        result = _decoded(_either(attributes, TOOL_RESULT, LEGACY_TOOL_RESULT))
    return End(
        role=role,
        span_id=span_id,
        error=error,
        result=result,
        duration_ms=duration,
        interrupt=interrupt,
        deferred=role == "tool" and attributes.get(DEFERRAL_NAME) is not None,
        error_type=error_type if error is not None else None,
    )


def _exception_of(span: ReadableSpan) -> tuple[str, str]:
    """The first recorded exception's type and message (empty strings if none)."""
    for event in span.events:
        if event.name == "exception" and event.attributes:
            kind = text(event.attributes.get("exception.type"))
            message = text(event.attributes.get("exception.message"))
            if kind or message:
                return kind, message
    return "", ""


def _cancellation(kind: str) -> str | None:
    name = kind.rpartition(".")[2]
    return name if name in _CANCELLATIONS else None


def _either(attributes: Mapping[str, object], name: str, legacy: str) -> object:
    """An attribute by its GenAI name, else by the name older instrumentations gave it."""
    value = attributes.get(name)
    return attributes.get(legacy) if value is None else value


def text(value: object) -> str:
    return value if isinstance(value, str) else ""


def after(name: str, prefix: str) -> str:
    return name[len(prefix) :].strip() if name.startswith(prefix) else ""


def _decoded(value: object) -> JsonValue:
    """An attribute as JSON: a JSON string decoded, a structured value (the form the
    conventions prefer for arguments and results) converted, other scalars kept."""
    if isinstance(value, str):
        try:
            decoded: JsonValue = json.loads(value)
        except ValueError:
            return value
        return decoded
    return _structured(value)


def _structured(value: object) -> JsonValue:
    """A structured attribute value (OpenTelemetry's ``AnyValue``: maps and sequences,
    nested) as JSON; strings in it are kept as they are, bytes and others as text."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {str(key): _structured(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_structured(item) for item in value]
    return str(value)


def arguments(value: object) -> dict[str, JsonValue]:
    decoded = _decoded(value)
    if decoded is None:
        return {}
    if isinstance(decoded, dict):
        return decoded
    return {"arguments": decoded}
