"""What the Claude Agent SDK adapter declares: its trigger kind, hook events, Claude's built-in tools.

Outside the adapter's package, which needs the SDK: the web view reads
Claude's built-in tool declarations with or without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from onlooker import ToolDeclaration

if TYPE_CHECKING:
    from claude_agent_sdk.types import HookEvent

__all__ = ["AGENT_TOOLS", "BUILTIN_TOOLS", "HOOK_EVENTS", "TRIGGER", "ToolInterrupted"]

TRIGGER: Final = "claude-agent-sdk"
"""The ``Trigger.kind`` of every execution the adapter tracks."""

HOOK_EVENTS: Final[tuple[HookEvent, ...]] = (
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",  # type: ignore[assignment]  # the CLI sends it; the SDK's HookEvent lacks it
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "StopFailure",  # (so too this one: one error for the tuple, on its first such line)
)
"""The hook events :func:`hooks` registers, in the order a turn meets them (``PostToolBatch``
closes the calls of a batch that got no ``PostToolUse*``: refused outside onlooker;
``StopFailure`` ends a turn an API error cut short)."""

BUILTIN_TOOLS: Final[tuple[ToolDeclaration, ...]] = (
    ToolDeclaration("Bash", description="Run a shell command", mutating=True),
    ToolDeclaration("Edit", description="Edit a file", mutating=True, edits="file_path"),
    ToolDeclaration(
        "MultiEdit", description="Edit a file in several places", mutating=True, edits="file_path"
    ),
    ToolDeclaration(
        "NotebookEdit", description="Edit a notebook cell", mutating=True, edits="notebook_path"
    ),
    ToolDeclaration("Read", description="Read a file", reads="file_path"),
    ToolDeclaration("Write", description="Write a file", mutating=True, writes="file_path"),
)
"""What Claude's built-in tools do, declared on the engine by :func:`hooks`."""

AGENT_TOOLS: Final = frozenset({"Agent", "Task"})  # the CLI shows the model "Task", hooks "Agent"


class ToolInterrupted(BaseException):
    """A tool call the user interrupted (``PostToolUseFailure`` with ``is_interrupt``).

    A ``BaseException``, like a cancellation, so the call is recorded
    ``cancelled`` rather than ``failed``. The adapter never raises it.
    """
