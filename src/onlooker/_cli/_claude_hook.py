"""``onlooker hook claude-code``: one Claude Code hook payload in, audit events out.

Runs once per tool call of the agent, so it imports only what recording
needs: no typer, rich, pydantic or anyio. Events are built as the JSON form
of onlooker's event models (``parse_event`` accepts every one of them) and
handed to the audit trail's writer, which redacts and hash-chains them.

Two rules shape it:

- Recording is fail-safe: whatever goes wrong (malformed input, an unknown
  hook event, an unwritable trail) the hook exits 0, prints nothing on
  stdout and appends the problem to ``<audit dir>/audit.err``.
- Governance is fail-closed: with ``--deny-commands FILE``, a ``PreToolUse``
  whose command matches a rule, or any ``PreToolUse`` when the rule file
  cannot be read, is answered with Claude Code's JSON that denies the call.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing alone costs ~10 ms here
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["HOOK_EVENTS", "run"]

HOOK_EVENTS: Final = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "SessionStart",
    "SessionEnd",
)
"""The Claude Code hook events this hook records."""

SCHEMA_VERSION: Final = 1  # onlooker.SCHEMA_VERSION; a test keeps them equal
PROGRAM: Final = "claude-code"
_SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")
_STATE: Final = ".claude-hook-state.json"
_LOCK: Final = ".claude-hook.lock"
_ATTRIBUTION: Final = {
    "task_id": None,
    "phase": None,
    "parent_execution_id": None,
    "parent_tool_call_id": None,
    "depth": 0,
    "intent_id": None,
}


class _HookError(Exception):
    """A problem recording one payload (goes to audit.err, never to the agent)."""


def run(args: list[str]) -> int:
    """Handle one hook invocation; ``args`` follow ``hook claude-code``. Always returns 0."""
    problems: list[Exception] = []
    options = _parse_args(args, problems)
    audit_dir = options.get("--audit-dir") or _default_audit_dir()
    try:
        payload = _read_payload()
        try:
            denial = _decide(payload, options.get("--deny-commands"))
        except Exception as exc:  # fail-closed: broken governance denies
            denial = ("error", f"onlooker: deny rules failed: {exc!r}")
        if denial is not None:
            _deny(denial[1])
        if os.environ.get("ONLOOKER_AUDIT_DISABLE", "").strip() not in ("", "0"):
            return 0
        _record(audit_dir, payload, denial)
    except Exception as exc:  # fail-safe: the agent never pays for a recording problem
        problems.append(exc)
    for problem in problems:
        _report(audit_dir, problem)
    return 0


def _default_audit_dir() -> str:
    project = os.environ.get("CLAUDE_PROJECT_DIR")
    return os.path.join(project or ".", ".onlooker", "audit")


def _parse_args(args: list[str], problems: list[Exception]) -> dict[str, str]:
    """``--audit-dir`` and ``--deny-commands``; anything else is reported and ignored.

    A ``--deny-commands`` without a value is kept as ``""``: an unreadable
    rule file, which denies (fail-closed).
    """
    options: dict[str, str] = {}
    rest = iter(args)
    for arg in rest:
        name, eq, value = arg.partition("=")
        if name not in ("--audit-dir", "--deny-commands"):
            problems.append(_HookError(f"ignored unknown option {arg!r}"))
            continue
        if not eq:
            value = next(rest, "")
        if not value and name == "--audit-dir":
            problems.append(_HookError("option --audit-dir needs a value"))
            continue
        options[name] = value
    return options


def _read_payload() -> dict[str, Any]:
    raw = sys.stdin.buffer.read()
    try:
        payload = json.loads(raw)
    except ValueError as exc:
        # Never the input itself: a malformed payload still carries the agent's secrets.
        raise _HookError(f"hook input ({len(raw)} bytes) is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise _HookError(f"hook input is not a JSON object but {type(payload).__name__}")
    event = payload.get("hook_event_name")
    if event not in HOOK_EVENTS:
        raise _HookError(f"unknown hook event {event!r} (recorded: {', '.join(HOOK_EVENTS)})")
    if not isinstance(payload.get("session_id"), str) or not payload["session_id"]:
        raise _HookError(f"{event} payload has no session_id")
    return payload


# -- governance ---------------------------------------------------------------------------


def _decide(payload: dict[str, Any], rule_file: str | None) -> tuple[str, str] | None:
    """The rule and the reason to deny this call, or None to let it run."""
    if rule_file is None or payload.get("hook_event_name") != "PreToolUse":
        return None
    from ._rules import RuleError, first_match, load_rules

    try:
        rules = load_rules(rule_file)
    except RuleError as exc:  # fail-closed: no readable rules, no tool calls
        return "unreadable-rules", f"onlooker: {exc}; denying every call until it is fixed"
    tool_input = payload.get("tool_input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if command is None:
        return None  # not a shell-like call
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    rule = first_match(rules, str(command))
    return None if rule is None else (rule, f"onlooker: command denied by rule {rule!r}")


def _deny(reason: str) -> None:
    answer = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


# -- recording ----------------------------------------------------------------------------


def session_id_of(raw: str) -> str:
    """The claude session id made safe as an execution and audit session id."""
    cleaned = _UNSAFE.sub("_", raw).lstrip("._-")[:128]
    if not _SESSION_ID.fullmatch(cleaned):
        raise _HookError(f"session_id {raw!r} has no usable characters")
    return cleaned


def _record(audit_dir: str, payload: dict[str, Any], denial: tuple[str, str] | None) -> None:
    session = session_id_of(payload["session_id"])
    session_dir = os.path.join(audit_dir, session)
    try:
        os.makedirs(session_dir, exist_ok=True)
    except OSError as exc:
        raise _HookError(f"cannot create the session directory {session_dir!r}: {exc}") from None
    state_path = os.path.join(session_dir, _STATE)
    # One exclusive lock per session: concurrent hook processes take turns, so
    # seq has no gaps or duplicates and the hash chain stays linear.
    with open(os.path.join(session_dir, _LOCK), "a+b") as lock:
        _lock(lock.fileno())
        state = _load_state(state_path)
        events = _Events(session, state).build(payload, denial)
        _write(audit_dir, session, events)
        _save_state(state_path, state)


def _lock(fd: int) -> None:
    """Take an exclusive lock on ``fd``; closing the file releases it."""
    if sys.platform == "win32":
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)


def _load_state(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except FileNotFoundError:
        return {"seq": 0, "calls": {}, "started": None}
    except (OSError, ValueError) as exc:
        raise _HookError(f"hook state {path!r} is unreadable: {exc}") from None
    if not isinstance(state, dict) or not isinstance(state.get("seq"), int):
        raise _HookError(f"hook state {path!r} is malformed")
    state.setdefault("calls", {})
    state.setdefault("started", None)
    return state


def _save_state(path: str, state: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle)
    os.replace(tmp, path)


def _iso(moment: float) -> str:
    """``moment`` (epoch seconds) as an ISO 8601 UTC time, without importing datetime."""
    micros = int(moment * 1_000_000) % 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) + f".{micros:06d}Z"


def _write(audit_dir: str, session: str, events: list[dict[str, Any]]) -> None:
    from onlooker.plugins.audit._writer import TrailWriter

    writer = TrailWriter(audit_dir, session)
    try:
        writer.write(events)
    finally:
        writer.close()


class _Events:
    """Builds the JSON form of the events one payload stands for, numbering them."""

    def __init__(self, session: str, state: dict[str, Any]) -> None:
        self.session = session
        self.state = state
        self.events: list[dict[str, Any]] = []
        self.now = time.time()
        self.at = _iso(self.now)

    def build(
        self, payload: dict[str, Any], denial: tuple[str, str] | None
    ) -> list[dict[str, Any]]:
        kind = payload["hook_event_name"]
        if kind == "SessionStart":
            self._started(payload)
            return self.events
        if self.state["started"] is None:  # installed mid-session: open the execution first
            self._started(payload)
        if kind == "SessionEnd":
            self._finished(payload)
            return self.events
        call_id = str(payload.get("tool_use_id") or os.urandom(8).hex())
        tool = str(payload.get("tool_name") or "unknown")
        if kind == "PreToolUse":
            self._call_started(call_id, tool, payload.get("tool_input"))
            if denial is not None:
                rule, reason = denial
                self._call_finished(call_id, tool, "blocked", None, reason, {"denied_by": rule})
        elif kind == "PostToolUse":
            self._ensure_started(call_id, tool, payload.get("tool_input"))
            self._call_finished(call_id, tool, "completed", payload.get("tool_response"))
        else:  # PostToolUseFailure
            self._ensure_started(call_id, tool, payload.get("tool_input"))
            error = payload.get("error")
            cause = "interrupt" if payload.get("is_interrupt") else "failure"
            self._call_finished(
                call_id, tool, "failed", None, str(error or "tool failed"), cause=cause
            )
        return self.events

    def _emit(self, kind: str, fields: dict[str, Any]) -> None:
        self.events.append(
            {
                "kind": kind,
                "event_id": os.urandom(12).hex(),
                "execution_id": self.session,
                "seq": self.state["seq"],
                "at": self.at,
                "attribution": dict(_ATTRIBUTION),
                "schema_version": SCHEMA_VERSION,
                **fields,
            }
        )
        self.state["seq"] += 1

    def _started(self, payload: dict[str, Any]) -> None:
        if self.state["started"] is not None:
            return  # a resumed or compacted session: one execution per session id
        self.state["started"] = self.now
        metadata = {
            key: payload[key]
            for key in ("source", "cwd", "transcript_path", "permission_mode", "model")
            if isinstance(payload.get(key), str)
        }
        self._emit(
            "ExecutionStarted",
            {
                "program": PROGRAM,
                "trigger": {"kind": PROGRAM, "metadata": metadata},
                "owner": os.environ.get("USER") or os.environ.get("USERNAME"),
                "input": None,
            },
        )

    def _finished(self, payload: dict[str, Any]) -> None:
        for call_id, call in list(self.state["calls"].items()):
            self._call_finished(
                call_id, call["tool"], "cancelled", None, "session ended", cause="interrupt"
            )
        started = self.state["started"] or self.now
        reason = payload.get("reason")
        self._emit(
            "ExecutionFinished",
            {
                "status": "completed",
                "result": {"reason": reason} if isinstance(reason, str) else None,
                "error": None,
                "duration_ms": max(0.0, (self.now - float(started)) * 1000.0),
            },
        )
        self.state["started"] = None

    def _ensure_started(self, call_id: str, tool: str, tool_input: object) -> None:
        if call_id not in self.state["calls"]:  # no PreToolUse seen: keep the pair closed
            self._call_started(call_id, tool, tool_input)

    def _call_started(self, call_id: str, tool: str, tool_input: object) -> None:
        self.state["calls"][call_id] = {"tool": tool, "t": self.now}
        args = tool_input if isinstance(tool_input, dict) else {"input": tool_input}
        self._emit("ToolCallStarted", {"tool_call_id": call_id, "tool": tool, "args": args})

    def _call_finished(
        self,
        call_id: str,
        tool: str,
        status: str,
        result: object,
        error: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        cause: str = "failure",
    ) -> None:
        call = self.state["calls"].pop(call_id, None)
        began = float(call["t"]) if call else self.now
        self._emit(
            "ToolCallFinished",
            {
                "tool_call_id": call_id,
                "tool": tool,
                "status": status,
                "result": result,
                "error": None
                if error is None
                else {"type": _ERROR_TYPES[status], "message": error, "cause": cause},
                "duration_ms": max(0.0, (self.now - began) * 1000.0),
                "metadata": metadata or {},
            },
        )


_ERROR_TYPES: Final = {
    "blocked": "ToolBlockedError",
    "failed": "ToolError",
    "cancelled": "Cancelled",
}


def _report(audit_dir: str, exc: Exception) -> None:
    line = f"{_iso(time.time())} onlooker hook claude-code: {type(exc).__name__}: {exc}\n"
    try:  # audit.err lives beside the trail: it must never hold a secret either
        from onlooker.plugins.audit._redact import Redactor

        line = Redactor().redact_text(line)
    except Exception:  # reporting must never fail the hook
        pass
    try:
        os.makedirs(audit_dir, exist_ok=True)
        with open(os.path.join(audit_dir, "audit.err"), "a", encoding="utf-8") as err:
            err.write(line)
    except OSError:
        # Nowhere to keep it: stderr is all that is left (never stdout, which the agent reads).
        try:  # noqa: SIM105  # contextlib.suppress would cost an import
            sys.stderr.write(line)
        except OSError:
            pass
