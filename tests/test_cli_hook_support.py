"""Helpers for the coding-agent hook's tests: Claude Code payloads and ways to run the hook.

Payload fields follow Claude Code's hook inputs (``claude_agent_sdk.types``).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onlooker import ExecutionEvent
from onlooker._cli import _claude_hook
from onlooker.plugins import audit

SESSION = "5c0ffee0-1d2b-4c3a-9e8f-0123456789ab"
CWD = "/home/dev/demo"
EXECUTABLE = shutil.which("onlooker", path=str(Path(sys.executable).parent))


def event(name: str, **fields: Any) -> dict[str, Any]:
    """A hook payload: the base fields every Claude Code hook input has, then ``fields``."""
    base: dict[str, Any] = {
        "hook_event_name": name,
        "session_id": SESSION,
        "transcript_path": "/home/dev/.claude/projects/demo/5c0ffee0.jsonl",
        "cwd": CWD,
        "permission_mode": "default",
    }
    return {**base, **fields}


def pre(call: str, tool: str, tool_input: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A PreToolUse payload."""
    return event("PreToolUse", tool_name=tool, tool_input=tool_input, tool_use_id=call, **fields)


def post(
    call: str, tool: str, tool_input: dict[str, Any], response: Any, **fields: Any
) -> dict[str, Any]:
    """A PostToolUse payload."""
    return event(
        "PostToolUse",
        tool_name=tool,
        tool_input=tool_input,
        tool_use_id=call,
        tool_response=response,
        **fields,
    )


def failure(
    call: str, tool: str, tool_input: dict[str, Any], error: str, **fields: Any
) -> dict[str, Any]:
    """A PostToolUseFailure payload."""
    return event(
        "PostToolUseFailure",
        tool_name=tool,
        tool_input=tool_input,
        tool_use_id=call,
        error=error,
        **fields,
    )


def bash(call: str, command: str, **fields: Any) -> dict[str, Any]:
    """A PreToolUse of Claude Code's Bash tool."""
    return pre(call, "Bash", {"command": command, "description": "run it"}, **fields)


class Hook:
    """Runs ``onlooker hook claude-code`` in this process (fast) on one payload at a time."""

    def __init__(self, audit_dir: Path) -> None:
        self.audit_dir = audit_dir

    def __call__(self, data: dict[str, Any] | str | bytes, *extra: str) -> str:
        """Run the hook on ``data``; returns what it printed on stdout."""
        raw = (
            data
            if isinstance(data, bytes)
            else (data if isinstance(data, str) else json.dumps(data)).encode(
                "utf-8", "surrogateescape"
            )
        )
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
            patch.setattr(sys, "stdout", out)
            code = _claude_hook.run(["--audit-dir", str(self.audit_dir), *extra])
        assert code == 0
        return out.getvalue()

    def all(self, payloads: list[dict[str, Any]], *extra: str) -> list[str]:
        """Run the hook on each payload in turn."""
        return [self(payload, *extra) for payload in payloads]

    def events(self, session: str = SESSION) -> list[ExecutionEvent]:
        """The session's trail, parsed."""
        return list(audit.tail(self.audit_dir / session))

    def errors(self) -> str:
        """What the hook reported in ``audit.err`` ('' when nothing)."""
        path = self.audit_dir / "audit.err"
        return path.read_text() if path.exists() else ""


def hook_process(
    audit_dir: Path,
    data: dict[str, Any] | str,
    *extra: str,
    env: dict[str, str] | None = None,
    executable: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the hook as Claude Code does: a fresh process, the payload on stdin.

    ``executable`` replaces the installed console script (default: :data:`EXECUTABLE`).
    """
    executable = executable or EXECUTABLE
    assert executable is not None, "the onlooker console script is not installed in the venv"
    raw = data if isinstance(data, str) else json.dumps(data)
    return subprocess.run(
        [executable, "hook", "claude-code", "--audit-dir", str(audit_dir), *extra],
        input=raw,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=60,
    )


def decision(stdout: str) -> tuple[str, str] | None:
    """The permission decision and reason the hook printed, or None when it printed nothing."""
    if not stdout:
        return None
    output = json.loads(stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "PreToolUse"
    return output["permissionDecision"], output["permissionDecisionReason"]
