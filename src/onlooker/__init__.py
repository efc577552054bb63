"""onlooker: see, govern and keep a record of what tool-calling programs do.

Run a program under an :class:`ExecutionEngine`; every step becomes a typed,
frozen event (:data:`ExecutionEvent`) on the engine's :class:`EventBus`, and
plugins observe it without ever being able to break the execution.
"""

from __future__ import annotations

# Not `from typing import TYPE_CHECKING`: importing typing costs milliseconds,
# and the coding-agent hook starts a fresh interpreter on every tool call.
# Type checkers treat any name TYPE_CHECKING as true.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from . import plugins as plugins
    from . import policies as policies
    from . import testing as testing

    # --- generated from _LAZY by tools/public_api.py (make exports); do not edit ---
    from ._bus import BusStatistics, EventBus, Overflow
    from ._context import ExecutionContext, Program, current_context
    from ._engine import ExecutionEngine
    from ._errors import (
        AuditError,
        EventValidationError,
        ExecutionError,
        ExecutionExpiredError,
        ExecutionNotPausedError,
        HistoryError,
        HookAbortError,
        OnlookerError,
        PluginError,
        SchemaVersionError,
        ToolBlockedError,
        ToolError,
        ToolInputError,
        TrackingError,
        UnknownExecutionError,
        UnknownToolError,
    )
    from ._events import (
        SCHEMA_VERSION,
        Attribution,
        ErrorCause,
        ErrorInfo,
        ExecutionEvent,
        ExecutionFinished,
        ExecutionStarted,
        ExecutionStatus,
        InteractionMode,
        InteractionResolved,
        InteractionStarted,
        InteractionStatus,
        ToolCallFinished,
        ToolCallStarted,
        ToolCallStatus,
        Trigger,
        parse_event,
    )
    from ._hooks import (
        HookAction,
        HookMatcher,
        PostHook,
        PostHookResult,
        PreHook,
        PreHookResult,
        ToolUseContext,
    )
    from ._observer import Observer, ObserverLike
    from ._plugin import Plugin, PluginContext, define_plugin
    from ._results import (
        Elicitation,
        ElicitationHandler,
        ExecutionResult,
        InteractionResponse,
        PausedExecution,
    )
    from ._scope import attribution, current_attribution, emit_event, observing
    from ._tools import Tool, ToolDeclaration, ToolRegistry, tool
    from ._tracked import TrackedExecution, TrackedToolCall
    # --- end of generated code ---

__version__ = "0.1.0"

# Names load on first use (PEP 562), so `import onlooker` stays cheap: the
# coding-agent hook starts a fresh interpreter on every tool call.
_LAZY: dict[str, str] = {
    "Attribution": "_events",
    "AuditError": "_errors",
    "BusStatistics": "_bus",
    "Elicitation": "_results",
    "ElicitationHandler": "_results",
    "ErrorCause": "_events",
    "ErrorInfo": "_events",
    "EventBus": "_bus",
    "EventValidationError": "_errors",
    "ExecutionContext": "_context",
    "ExecutionEngine": "_engine",
    "ExecutionError": "_errors",
    "ExecutionEvent": "_events",
    "ExecutionExpiredError": "_errors",
    "ExecutionFinished": "_events",
    "ExecutionNotPausedError": "_errors",
    "ExecutionResult": "_results",
    "ExecutionStarted": "_events",
    "ExecutionStatus": "_events",
    "HistoryError": "_errors",
    "HookAbortError": "_errors",
    "HookAction": "_hooks",
    "HookMatcher": "_hooks",
    "InteractionMode": "_events",
    "InteractionResolved": "_events",
    "InteractionResponse": "_results",
    "InteractionStarted": "_events",
    "InteractionStatus": "_events",
    "Observer": "_observer",
    "ObserverLike": "_observer",
    "OnlookerError": "_errors",
    "Overflow": "_bus",
    "PausedExecution": "_results",
    "Plugin": "_plugin",
    "PluginContext": "_plugin",
    "PluginError": "_errors",
    "PostHook": "_hooks",
    "PostHookResult": "_hooks",
    "PreHook": "_hooks",
    "PreHookResult": "_hooks",
    "Program": "_context",
    "SCHEMA_VERSION": "_events",
    "SchemaVersionError": "_errors",
    "Tool": "_tools",
    "ToolBlockedError": "_errors",
    "ToolCallFinished": "_events",
    "ToolCallStarted": "_events",
    "ToolCallStatus": "_events",
    "ToolDeclaration": "_tools",
    "ToolError": "_errors",
    "ToolInputError": "_errors",
    "ToolRegistry": "_tools",
    "ToolUseContext": "_hooks",
    "TrackedExecution": "_tracked",
    "TrackedToolCall": "_tracked",
    "TrackingError": "_errors",
    "Trigger": "_events",
    "UnknownExecutionError": "_errors",
    "UnknownToolError": "_errors",
    "attribution": "_scope",
    "current_attribution": "_scope",
    "current_context": "_context",
    "define_plugin": "_plugin",
    "emit_event": "_scope",
    "observing": "_scope",
    "parse_event": "_events",
    "tool": "_tools",
}


_SUBMODULES = frozenset({"plugins", "policies", "testing"})


# Hidden from type checkers, so that a misspelt name is an error, not `Any`.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        from ._shared import lazy_attribute

        return lazy_attribute(__name__, _LAZY, name, _SUBMODULES)

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))


# --- generated from _LAZY by tools/public_api.py (make exports); do not edit ---
__all__ = [  # noqa: RUF022  # plainly sorted, one name per line
    "Attribution",
    "AuditError",
    "BusStatistics",
    "Elicitation",
    "ElicitationHandler",
    "ErrorCause",
    "ErrorInfo",
    "EventBus",
    "EventValidationError",
    "ExecutionContext",
    "ExecutionEngine",
    "ExecutionError",
    "ExecutionEvent",
    "ExecutionExpiredError",
    "ExecutionFinished",
    "ExecutionNotPausedError",
    "ExecutionResult",
    "ExecutionStarted",
    "ExecutionStatus",
    "HistoryError",
    "HookAbortError",
    "HookAction",
    "HookMatcher",
    "InteractionMode",
    "InteractionResolved",
    "InteractionResponse",
    "InteractionStarted",
    "InteractionStatus",
    "Observer",
    "ObserverLike",
    "OnlookerError",
    "Overflow",
    "PausedExecution",
    "Plugin",
    "PluginContext",
    "PluginError",
    "PostHook",
    "PostHookResult",
    "PreHook",
    "PreHookResult",
    "Program",
    "SCHEMA_VERSION",
    "SchemaVersionError",
    "Tool",
    "ToolBlockedError",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolCallStatus",
    "ToolDeclaration",
    "ToolError",
    "ToolInputError",
    "ToolRegistry",
    "ToolUseContext",
    "TrackedExecution",
    "TrackedToolCall",
    "TrackingError",
    "Trigger",
    "UnknownExecutionError",
    "UnknownToolError",
    "attribution",
    "current_attribution",
    "current_context",
    "define_plugin",
    "emit_event",
    "observing",
    "parse_event",
    "tool",
]
# --- end of generated code ---
