"""What the ingest processor reads from a span: the ops it queues for the engine's loop.

Plain data, copied from a span under the processor's lock on whatever thread
the span started or ended on; the drain task on the engine's loop applies
them in order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from pydantic import JsonValue

from ._conventions import (
    AGENT_NAME,
    ERROR_TYPE,
    OPERATION,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_NAME,
    TOOL_RESULT,
    trace_api,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

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
    "end_of",
    "role_of",
    "start_of",
]

Role: TypeAlias = Literal["agent", "tool"]
"""What a span is to the processor: an agent's run, or a tool call."""

_AGENT_OPERATIONS: Final = frozenset({"invoke_agent", "invoke_workflow"})

RunKey: TypeAlias = tuple[Literal["agent", "trace"], int]
"""Who owns a tool call: an ``invoke_agent`` span (by span id) or a whole trace (by trace id)."""


@dataclass(slots=True)
class OpenSpan:
    """What the processor remembers of a span that started and has not ended."""

    role: Role | None
    trace_id: int
    run: RunKey | None
    """The run a tool started under this span belongs to (None: no agent or tool above)."""
    tool_call_id: str | None
    """The call id of the nearest enclosing tool span (this one, for a tool), within ``run``."""
    root_name: str
    """The name of the trace's local root span (it names a per-trace run)."""


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


@dataclass(frozen=True, slots=True)
class TraceEnd:
    trace_id: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    pass


Op: TypeAlias = AgentStart | ToolStart | End | TraceEnd | Shutdown


def start_of(
    role: Role | None,
    name: str,
    ids: tuple[int, int],
    attributes: Mapping[str, object],
    above: OpenSpan | None,
) -> tuple[Op | None, OpenSpan]:
    """The op a span's start queues (``None``: neither agent nor tool) and what to remember of it.

    ``ids`` is the span's (span id, trace id); ``above`` the open span it is
    nested in, within the same trace.
    """
    span_id, trace_id = ids
    run = above.run if above is not None else None
    call_id = above.tool_call_id if above is not None else None
    root_name = above.root_name if above is not None else name
    op: Op | None = None
    if role == "agent":
        op = AgentStart(
            span_id=span_id,
            trace_id=trace_id,
            program=text(attributes.get(AGENT_NAME)) or after(name, "invoke_agent") or "agent",
            parent_run=run,
            parent_tool_call_id=call_id,
        )
        run, call_id = ("agent", span_id), None
    elif role == "tool":
        run = run if run is not None else ("trace", trace_id)
        call_id = text(attributes.get(TOOL_CALL_ID)) or f"{span_id:016x}"
        op = ToolStart(
            span_id=span_id,
            trace_id=trace_id,
            run=run,
            root_name=root_name,
            tool=text(attributes.get(TOOL_NAME)) or after(name, "execute_tool") or "tool",
            tool_call_id=call_id,
            args=arguments(attributes.get(TOOL_ARGUMENTS)),
        )
    return op, OpenSpan(role, trace_id, run, call_id, root_name)


def role_of(name: str, attributes: Mapping[str, object]) -> Role | None:
    """What a span is, by its ``gen_ai.operation.name`` (else by its name's prefix)."""
    operation = attributes.get(OPERATION)
    if operation == "execute_tool" or (operation is None and name.startswith("execute_tool")):
        return "tool"
    if operation in _AGENT_OPERATIONS or (operation is None and name.startswith("invoke_agent")):
        return "agent"
    return None


def end_of(role: Role, span_id: int, span: ReadableSpan) -> End:
    attributes = span.attributes or {}
    error: str | None = None
    if span.status.status_code is trace_api.StatusCode.ERROR:
        error = span.status.description or text(attributes.get(ERROR_TYPE)) or _exception_of(span)
    duration = None
    if span.start_time is not None and span.end_time is not None:
        duration = max(span.end_time - span.start_time, 0) / 1e6
    result: JsonValue = None
    if role == "tool" and error is None:
        result = _decoded(attributes.get(TOOL_RESULT))
    return End(role=role, span_id=span_id, error=error, result=result, duration_ms=duration)


def _exception_of(span: ReadableSpan) -> str:
    """The first recorded exception's ``type: message``, or a plain word."""
    for event in span.events:
        if event.name == "exception" and event.attributes:
            kind = text(event.attributes.get("exception.type"))
            message = text(event.attributes.get("exception.message"))
            if kind or message:
                return f"{kind}: {message}" if kind and message else kind or message
    return "error"


def text(value: object) -> str:
    return value if isinstance(value, str) else ""


def after(name: str, prefix: str) -> str:
    return name[len(prefix) :].strip() if name.startswith(prefix) else ""


def _decoded(value: object) -> JsonValue:
    """An attribute as JSON: a JSON string decoded, other strings and scalars kept."""
    if isinstance(value, str):
        try:
            decoded: JsonValue = json.loads(value)
        except ValueError:
            return value
        return decoded
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, tuple | list):
        return [item if isinstance(item, str | bool | int | float) else str(item) for item in value]
    return str(value)


def arguments(value: object) -> dict[str, JsonValue]:
    decoded = _decoded(value)
    if decoded is None:
        return {}
    if isinstance(decoded, dict):
        return decoded
    return {"arguments": decoded}
