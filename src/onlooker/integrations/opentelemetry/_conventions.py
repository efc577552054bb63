"""What both directions share: the OpenTelemetry import, the GenAI attribute names, time and JSON."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from .. import require

if TYPE_CHECKING:
    from opentelemetry import context as context_api
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace import SpanProcessor
else:
    trace_api = require("opentelemetry.trace", extra="opentelemetry", framework="OpenTelemetry")
    context_api = require("opentelemetry.context", extra="opentelemetry", framework="OpenTelemetry")
    SpanProcessor = require(
        "opentelemetry.sdk.trace", extra="opentelemetry", framework="OpenTelemetry"
    ).SpanProcessor

__all__ = [
    "AGENT_NAME",
    "DEFERRAL_NAME",
    "ERROR_TYPE",
    "LEGACY_TOOL_ARGUMENTS",
    "LEGACY_TOOL_RESULT",
    "OPERATION",
    "SCOPE_NAME",
    "TOOL_ARGUMENTS",
    "TOOL_CALL_ID",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "TOOL_RESULT",
    "TOOL_TYPE",
    "WORKFLOW_NAME",
    "SpanProcessor",
    "context_api",
    "logger",
    "ns",
    "to_json",
    "trace_api",
    "utf8",
]

logger: Final = logging.getLogger("onlooker.integrations.opentelemetry")

SCOPE_NAME: Final = "onlooker.integrations.opentelemetry"
"""The instrumentation scope of the exported spans (the ingest processor skips them)."""

# The GenAI semantic conventions (development status), spelled out: their
# constants in opentelemetry-semantic-conventions are deprecated there, moved
# to the conventions' own repository.
OPERATION: Final = "gen_ai.operation.name"
AGENT_NAME: Final = "gen_ai.agent.name"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_RESULT: Final = "gen_ai.tool.call.result"
ERROR_TYPE: Final = "error.type"
WORKFLOW_NAME: Final = "gen_ai.workflow.name"

# Read by the ingest processor only: PydanticAI's names for a tool's arguments and
# result before the GenAI ones (its ``InstrumentationSettings(version=2)``), and the
# attribute it sets on the span of a call it deferred (``CallDeferred``).
LEGACY_TOOL_ARGUMENTS: Final = "tool_arguments"
LEGACY_TOOL_RESULT: Final = "tool_response"
DEFERRAL_NAME: Final = "pydantic_ai.tool.deferral.name"

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def ns(at: datetime) -> int:
    """Nanoseconds since the epoch, exactly (a float timestamp would round)."""
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def to_json(value: object) -> str:
    """A compact JSON string (attribute values are strings, numbers or booleans)."""
    return utf8(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def utf8(text: str) -> str:
    """``text`` as OpenTelemetry can encode it: a lone surrogate (an undecodable file name
    in a program's value) as its ``\\udXXX`` escape; an exporter refuses a whole batch for one."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")
