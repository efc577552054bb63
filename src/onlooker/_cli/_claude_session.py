"""One Claude Code session: its state between hook processes, and the events each payload means.

Standard library only: the hook builds events in the JSON form of onlooker's
event models (``onlooker.parse_event`` accepts every one) in a fresh
interpreter on every tool call. Field names are those of Claude Code's hook
inputs (``claude_agent_sdk.types``: ``PreToolUseHookInput`` ...).

A session is an execution (program ``claude-code``, id the session id); each
prompt a child execution up to its ``Stop``; each sub-agent a child of the
execution whose ``Agent``/``Task`` call started it; a compaction a child
until the next event. Tool calls, permission prompts and notifications
belong to the sub-agent that made them (``agent_id``), else to the open
turn, else to the session.

=====================  =====================================================================
hook event             onlooker events
=====================  =====================================================================
SessionStart           ``ExecutionStarted`` of the session (trigger metadata: ``source``,
                       ``model``, ``cwd``, ...); nothing when it is already open (a
                       compaction, a resume without ``SessionEnd``); after ``SessionEnd``
                       (a resume) a new execution ``<session>.r2`` whose trigger names the
                       one it ``resumes``: never a second pair with one id
UserPromptSubmit       ``ExecutionStarted`` of a turn ``<session>.turn-N`` (program
                       ``prompt``, ``input`` ``{"prompt": ...}``); a turn left open (no
                       ``Stop``: interrupted) is finished ``cancelled`` first
PreToolUse             ``ToolCallStarted`` (``tool_call_id`` = ``tool_use_id``, ``args`` =
                       ``tool_input``); a denied call: then ``ToolCallFinished(blocked)``
PostToolUse            ``ToolCallFinished(completed)``, ``result`` = ``tool_response``,
                       ``duration_ms`` the payload's when given, else the time since
                       ``PreToolUse``; ``metadata``: ``cwd``, ``permission_mode``, ...
PostToolUseFailure     ``ToolCallFinished(failed)`` with the ``error``; ``cancelled``
                       (cause ``interrupt``) when ``is_interrupt``
PermissionRequest      ``InteractionStarted`` for the call it gates (``requested_schema``
                       holds ``tool_name``, ``tool_input``, ``permission_suggestions``),
                       resolved ``accepted`` when the call runs, ``declined`` (the call
                       ``blocked``) when its turn ends without it
Notification           ``InteractionStarted`` + ``InteractionResolved(accepted)`` with
                       ``title`` and ``notification_type``
SubagentStart          ``ExecutionStarted`` of ``<session>.agent-<agent_id>`` (program
                       ``agent_type``), linked to its ``Agent``/``Task`` call
SubagentStop / Stop    ``ExecutionFinished(completed)`` of the sub-agent / turn, ``result``
                       the payload's fields; a turn waits for its background sub-agents
PreCompact             ``ExecutionStarted`` of ``<session>.compact-N`` (``input``: ``trigger``,
                       ``custom_instructions``), finished by the next event
SessionEnd             what is still open closes (calls ``cancelled``), then
                       ``ExecutionFinished(completed)`` with ``{"reason": ...}``
PermissionDenied       ``ToolCallFinished(blocked)`` of the open call Claude Code refused
                       (its auto mode, a rule or a hook), the ``reason`` as the error; its
                       permission prompt, if one was open, ``declined``; nothing for a call
                       closed already (the deny rules refused it at its ``PreToolUse``)
StopFailure            ``ExecutionFinished(failed)`` of the turn an API error ended
                       (``APIError``: ``error``, the kind, and ``error_details``), once its
                       background sub-agents stop, as for ``Stop``
PostCompact            ends the open compaction, ``result``: ``compact_summary``
=====================  =====================================================================

The last three are newer than the others: they are recorded when a settings
file sends them, and ``hook install`` leaves them out (:data:`LATER_EVENTS`).
"""

from __future__ import annotations

import os

from ._claude_state import AGENT_TOOLS, PROGRAM, Executions
from ._claude_values import digest, error_info, pick

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final

    Verdict = tuple[str, str, str]
    """The deny rules' decision: ``deny`` or ``ask``, the rule as recorded, the reason."""

__all__ = [
    "AGENT_TOOLS",
    "HOOK_EVENTS",
    "LATER_EVENTS",
    "PROGRAM",
    "RECORDED_EVENTS",
    "Session",
    "new_state",
]

HOOK_EVENTS: Final = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "Notification",
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "PreCompact",
    "SessionEnd",
)
"""The Claude Code hook events ``hook install`` wires the hook to."""

LATER_EVENTS: Final = ("PermissionDenied", "StopFailure", "PostCompact")
"""Recorded too, but not installed: a Claude Code older than these events refuses a settings
file that names them (all of it, every other hook and setting with it)."""

RECORDED_EVENTS: Final = (*HOOK_EVENTS, *LATER_EVENTS)
"""Every hook event the hook records."""

_CONTEXT: Final = ("cwd", "permission_mode", "prompt_id", "effort", "agent_type")
_STOP_FAILURE: Final = (
    "error",
    "error_details",
    "error_type",
    "error_message",
    "last_assistant_message",
)
_API_ERROR: Final = (("error", "error_type"), ("error_details", "error_message"))
"""StopFailure's fields (Claude Code's ``StopFailureHookInput``): the kind, the details;
each with the name some descriptions of the event give it instead."""


class Session(Executions):
    """Turns the payloads of one session into events, keeping ``state`` (a JSON object) current.

    ``state`` is what an earlier hook process left (None for a new
    session); :attr:`state` is what to keep for the next one.
    """

    def __init__(
        self,
        session_id: str,
        state: dict[str, Any] | None,
        now: float,
        *,
        safe_id: Callable[[object], str | None],
        keep: Callable[[Any], Any],
    ) -> None:
        super().__init__(session_id, upgrade(session_id, state), now, safe_id=safe_id, keep=keep)

    def handle(
        self, payload: dict[str, Any], verdict: Verdict | None = None
    ) -> list[dict[str, Any]]:
        """The events ``payload`` stands for (in order); ``verdict`` is the deny rules' decision."""
        kind = payload["hook_event_name"]
        compact = self.state["compact"]
        if compact is not None and kind != "PostCompact":  # it lasts until the next event
            self._finish(compact, "completed")
        _HANDLERS[kind](self, payload, verdict)
        return self.events

    # -- the session and its turns ---------------------------------------------------------

    def _on_session_start(self, payload: dict[str, Any], _: Verdict | None) -> None:
        self._root(payload)  # already open: a compaction or a resume without SessionEnd

    def _on_session_end(self, payload: dict[str, Any], _: Verdict | None) -> None:
        root = self._root(payload)
        reason = payload.get("reason")
        self._finish(root, "completed", {"reason": reason} if reason is not None else None)

    def _on_user_prompt_submit(self, payload: dict[str, Any], _: Verdict | None) -> None:
        root = self._root(payload)
        turn = self.state["turn"]
        if turn is not None:
            message = "interrupted: a new prompt came before Stop"
            self._finish(turn, "cancelled", error=error_info("Cancelled", message, "interrupt"))
        self._turn(root, payload, {"prompt": payload.get("prompt")})

    def _on_stop(self, payload: dict[str, Any], _: Verdict | None) -> None:
        turn = self.state["turn"] or self._turn(self._root(payload), payload, None)
        self._stop(turn, payload, ("last_assistant_message", "stop_hook_active"))

    def _on_stop_failure(self, payload: dict[str, Any], _: Verdict | None) -> None:
        turn = self.state["turn"] or self._turn(self._root(payload), payload, None)
        said = [payload.get(name) or payload.get(alias) for name, alias in _API_ERROR]
        message = ": ".join(str(part) for part in said if part) or "an API error"
        self._stop(turn, payload, _STOP_FAILURE, error_info("APIError", message))

    def _on_post_compact(self, payload: dict[str, Any], _: Verdict | None) -> None:
        compact = self.state["compact"]
        if compact is not None:
            self._finish(compact, "completed", pick(payload, ("compact_summary",)) or None)

    def _on_pre_compact(self, payload: dict[str, Any], _: Verdict | None) -> None:
        parent = self.state["turn"] or self._root(payload)
        self.state["compact"] = self._child(
            parent,
            "compact",
            "compact",
            payload,
            pick(payload, ("trigger", "custom_instructions")),
        )

    def _on_notification(self, payload: dict[str, Any], _: Verdict | None) -> None:
        home = self.state["turn"] or self._root(payload)
        interaction = "notification-" + os.urandom(6).hex()
        self._emit(
            home,
            "InteractionStarted",
            {
                "interaction_id": interaction,
                "message": str(payload.get("message") or ""),
                "requested_schema": None,
                "mode": "inline",
            },
        )
        self._resolved(home, interaction, "accepted", pick(payload, ("title", "notification_type")))

    # -- sub-agents --------------------------------------------------------------------------

    def _on_subagent_start(self, payload: dict[str, Any], _: Verdict | None) -> None:
        self._agent(self._agent_id(payload), payload)

    def _on_subagent_stop(self, payload: dict[str, Any], _: Verdict | None) -> None:
        if "agent_id" not in payload:  # an older Claude Code's: nothing tells which one
            return
        keys = ("last_assistant_message", "agent_transcript_path", "stop_hook_active")
        self._stop(self._agent(self._agent_id(payload), payload), payload, keys)

    def _agent_id(self, payload: dict[str, Any]) -> str:
        """The sub-agent's id; without one its events cannot be told apart (``ValueError``:
        the event is not recorded, and ``audit.err`` says so)."""
        agent = self._safe_id(payload.get("agent_id"))
        if agent is None:
            event = payload["hook_event_name"]
            raise ValueError(f"{event} payload has no usable agent_id; not recorded")
        return agent

    # -- tool calls and permission prompts ----------------------------------------------------

    def _on_pre_tool_use(self, payload: dict[str, Any], verdict: Verdict | None) -> None:
        call_id = self._call_id(payload)
        found = self._find_call(call_id)
        home = found[0] if found else self._home(payload)
        if found is None:
            self._call_started(home, call_id, payload)
        if verdict is None:
            return
        decision, label, reason = verdict
        if decision == "ask":
            self.execs[home]["calls"][call_id]["asked_by"] = label
            return
        metadata = {"denied_by": label, **pick(payload, _CONTEXT)}
        error = error_info("ToolBlockedError", reason)
        self._call_finished(home, call_id, "blocked", None, error, metadata)

    def _on_post_tool_use(self, payload: dict[str, Any], _: Verdict | None) -> None:
        home, call_id, call = self._open_call(payload)
        response = payload.get("tool_response")
        if "spawn" in call and isinstance(response, dict):  # a background launch
            agent = self._safe_id(response.get("agentId"))
            if agent is not None and agent not in self.state["agents"]:
                self.state["launched"][agent] = [home, call_id]
                del call["spawn"]
        self._answer(home, call, "accepted", {"behavior": "allow"})
        metadata = pick(payload, _CONTEXT)
        self._call_finished(
            home, call_id, "completed", response, None, metadata, _duration(payload)
        )

    def _on_post_tool_use_failure(self, payload: dict[str, Any], _: Verdict | None) -> None:
        home, call_id, call = self._open_call(payload)
        message = str(payload.get("error") or "tool failed")
        if payload.get("is_interrupt"):
            self._answer(home, call, "cancelled", None)
            error, status = error_info("Cancelled", message, "interrupt"), "cancelled"
        else:
            rejected = any(word in message.lower() for word in ("doesn't want", "rejected"))
            self._answer(home, call, "declined" if rejected else "accepted", None)
            error, status = error_info("ToolError", message), "failed"
        metadata = pick(payload, _CONTEXT)
        self._call_finished(home, call_id, status, None, error, metadata, _duration(payload))

    def _on_permission_denied(self, payload: dict[str, Any], _: Verdict | None) -> None:
        call_id = self._call_id(payload)
        found = self._find_call(call_id)
        if found is None:  # closed already: denied by the deny rules, at its PreToolUse
            return
        home, call = found
        self._answer(home, call, "declined", None)
        reason = str(payload.get("reason") or "denied by Claude Code")
        metadata = {"denied_by": "claude-code", **pick(payload, _CONTEXT)}
        error = error_info("PermissionDenied", reason)
        self._call_finished(home, call_id, "blocked", None, error, metadata)

    def _on_permission_request(self, payload: dict[str, Any], _: Verdict | None) -> None:
        home = self._home(payload)
        tool = str(payload.get("tool_name") or "unknown")
        fingerprint = digest(payload.get("tool_input"))
        calls = self.execs[home]["calls"]
        kept = self._keep(tool)  # as the state keeps it: redacted
        waiting = [cid for cid, c in calls.items() if c["tool"] == kept and not c.get("ask")]
        same = [cid for cid in waiting if calls[cid].get("in") == fingerprint]
        call_id = (same or waiting or [None])[-1]
        interaction = "permission-" + (call_id or os.urandom(6).hex())
        if interaction in self.execs[home]["asks"]:
            interaction += "-" + os.urandom(3).hex()
        details = pick(payload, ("tool_name", "tool_input", "permission_suggestions"))
        schema = {
            "type": "object",
            "properties": {"behavior": {"enum": ["allow", "deny"]}},
            "x-claude-code": details,
        }
        self._emit(
            home,
            "InteractionStarted",
            {
                "interaction_id": interaction,
                "message": f"Claude Code asks permission to use {tool}",
                "requested_schema": schema,
                "mode": "inline",
            },
        )
        self.execs[home]["asks"][interaction] = call_id
        if call_id is not None:
            calls[call_id]["ask"] = interaction


def new_state() -> dict[str, Any]:
    """The state of a session nothing was recorded for yet."""
    return {
        "v": 2,
        "root": None,  # the open session execution
        "roots": 0,  # session executions so far (a resume after SessionEnd adds one)
        "last_root": None,
        "turn": None,
        "compact": None,
        "counter": 0,  # numbers turns and compactions
        "execs": {},  # open executions: id -> seq, start time, parent, open calls and asks
        "agents": {},  # agent_id -> execution id
        "launched": {},  # agent_id -> [execution id, call id] of a background launch
    }


def upgrade(session_id: str, state: dict[str, Any] | None) -> dict[str, Any]:
    """``state`` as this version keeps it (from the single-execution form of earlier ones)."""
    if state is None:
        return new_state()
    if state.get("v") == 2:
        return state
    upgraded = new_state()
    if state.get("started") is not None:
        upgraded.update(root=session_id, roots=1)
        calls = {
            str(call_id): {"tool": str(call.get("tool")), "t": float(call.get("t", 0.0))}
            for call_id, call in dict(state.get("calls") or {}).items()
            if isinstance(call, dict)
        }
        upgraded["execs"][session_id] = {
            "kind": "session",
            "seq": int(state.get("seq", 0)),
            "t": float(state["started"]),
            "parent": None,
            "call": None,
            "depth": 0,
            "calls": calls,
            "asks": {},
        }
    elif state.get("seq"):
        upgraded.update(roots=1, last_root=session_id)
    return upgraded


_HANDLERS: Final[dict[str, Callable[[Session, dict[str, Any], Verdict | None], None]]] = {
    "SessionStart": Session._on_session_start,
    "SessionEnd": Session._on_session_end,
    "UserPromptSubmit": Session._on_user_prompt_submit,
    "Stop": Session._on_stop,
    "PreCompact": Session._on_pre_compact,
    "Notification": Session._on_notification,
    "SubagentStart": Session._on_subagent_start,
    "SubagentStop": Session._on_subagent_stop,
    "PreToolUse": Session._on_pre_tool_use,
    "PostToolUse": Session._on_post_tool_use,
    "PostToolUseFailure": Session._on_post_tool_use_failure,
    "PermissionRequest": Session._on_permission_request,
    "PermissionDenied": Session._on_permission_denied,
    "StopFailure": Session._on_stop_failure,
    "PostCompact": Session._on_post_compact,
}


def _duration(payload: dict[str, Any]) -> float | None:
    """The payload's own ``duration_ms`` (tool time only: no permission prompt, no hook)."""
    duration = payload.get("duration_ms")
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
        return float(duration)
    return None
