"""Every error onlooker raises on purpose.

The hierarchy::

    OnlookerError
    ├── EventValidationError      malformed event JSON or dict (parse_event)
    ├── PluginError               a plugin that cannot be set up (duplicate id, ...)
    ├── ToolError                 a tool's own, expected failure ("failure", not "defect")
    │   ├── UnknownToolError      ctx.call() named no registered tool
    │   ├── ToolInputError        the arguments did not validate
    │   ├── ToolBlockedError      a pre-hook (or a failing one) refused this call
    │   └── HookAbortError        a hook ended the whole execution
    ├── ExecutionError            misuse of an execution id
    │   ├── UnknownExecutionError   no execution with that id
    │   ├── ExecutionNotPausedError resume() of a running execution
    │   ├── ExecutionExpiredError   raised in a program whose pause timed out
    │   └── TrackingError           misuse of a tracked execution (a call finished twice, ...)
    │       └── (NotRunningTrackingError, also a RuntimeError: engine.track on an engine not running)
    ├── HistoryError              the history store (plugins.history)
    │   └── SchemaVersionError      a database written by a newer onlooker
    └── AuditError                the audit trail (plugins.audit)

Errors carry their context as attributes (``tool``, ``execution_id``, ``hook``,
``field``), not only in their message.
"""

from __future__ import annotations

__all__ = [
    "AuditError",
    "EventValidationError",
    "ExecutionError",
    "ExecutionExpiredError",
    "ExecutionNotPausedError",
    "HistoryError",
    "HookAbortError",
    "OnlookerError",
    "PluginError",
    "SchemaVersionError",
    "ToolBlockedError",
    "ToolError",
    "ToolInputError",
    "TrackingError",
    "UnknownExecutionError",
    "UnknownToolError",
]


class OnlookerError(Exception):
    """Base class of every error onlooker raises on purpose."""


class EventValidationError(OnlookerError, ValueError):
    """Input to :func:`onlooker.parse_event` is not a valid event.

    ``field`` names the first offending field (dotted path) when there is one.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class PluginError(OnlookerError):
    """A plugin cannot be installed: a duplicate id, a failing setup."""

    def __init__(self, message: str, *, plugin_id: str | None = None) -> None:
        super().__init__(message)
        self.plugin_id = plugin_id


class ToolError(OnlookerError):
    """An expected failure of a tool.

    Raise it (or a subclass) from a tool to say "this call failed, as tools
    sometimes do"; the finished event records ``cause="failure"``. Any other
    exception is recorded as a ``defect``.
    """

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool


class UnknownToolError(ToolError):
    """``ctx.call()`` named a tool the engine does not know."""


class ToolInputError(ToolError):
    """A tool's arguments did not validate against its signature.

    ``hook`` names the pre-hook whose modified input was invalid, if any.
    """

    def __init__(self, message: str, *, tool: str | None = None, hook: str | None = None) -> None:
        super().__init__(message, tool=tool)
        self.hook = hook


class ToolBlockedError(ToolError):
    """A pre-hook refused this one call; the execution goes on.

    ``reason`` is the hook's reason; ``hook`` names the hook when one failed
    or timed out (fail-closed).
    """

    def __init__(
        self,
        message: str,
        *,
        tool: str | None = None,
        reason: str | None = None,
        hook: str | None = None,
    ) -> None:
        super().__init__(message, tool=tool)
        self.reason = reason
        self.hook = hook


class HookAbortError(ToolError):
    """A hook aborted the whole execution; it finishes ``failed`` even if caught."""

    def __init__(self, message: str, *, tool: str | None = None, reason: str | None = None) -> None:
        super().__init__(message, tool=tool)
        self.reason = reason


class ExecutionError(OnlookerError):
    """Misuse of an execution id (``resume``/``cancel``)."""

    def __init__(self, message: str, *, execution_id: str) -> None:
        super().__init__(message)
        self.execution_id = execution_id


class UnknownExecutionError(ExecutionError):
    """No execution with this id is known to the engine."""


class ExecutionNotPausedError(ExecutionError):
    """The execution is running, or another ``resume`` is already answering it."""


class ExecutionExpiredError(ExecutionError):
    """Raised inside a program whose pause was not answered within ``pause_timeout``.

    The execution finishes ``expired`` even if the program catches it.
    """


class TrackingError(ExecutionError, ValueError):
    """Misuse of a tracked execution; nothing recorded changes.

    A tool call finished twice, an id this execution does not know (a call
    of another execution, an unknown interaction), a call on a finished
    run, a ``tool_call_id`` used twice. ``tool_call_id`` and
    ``interaction_id`` name the call or question when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        execution_id: str,
        tool_call_id: str | None = None,
        interaction_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id)
        self.tool_call_id = tool_call_id
        self.interaction_id = interaction_id


class NotRunningTrackingError(TrackingError, RuntimeError):
    """``engine.track`` on an engine not running (not entered, or closed): a misuse of
    tracking, and the ``RuntimeError`` every other entry point raises then.
    ``execution_id`` is the one given, ``""`` when none was. Not exported: catch
    ``TrackingError`` or ``RuntimeError``."""


class HistoryError(OnlookerError):
    """The history store failed: an unreachable database, a bad query, a corrupt row.

    ``execution_id`` and ``event_id`` name the execution and event a corrupt
    row belongs to, when the error is about one.
    """

    def __init__(
        self, message: str, *, execution_id: str | None = None, event_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.execution_id = execution_id
        self.event_id = event_id


class SchemaVersionError(HistoryError):
    """The database's schema version is not this onlooker's: a newer onlooker wrote it
    (``found > supported``), or an older one did and a read-only open cannot migrate it."""

    def __init__(self, message: str, *, found: int, supported: int) -> None:
        super().__init__(message)
        self.found = found
        self.supported = supported


class AuditError(OnlookerError):
    """The audit trail cannot be used: a bad session id, an unreadable file."""
