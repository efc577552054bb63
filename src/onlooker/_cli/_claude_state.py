"""A Claude Code session's executions between two hook processes, as a JSON state.

Standard library only (the hook imports it on every tool call). The state
file keeps, per session, the open executions (the session, its turns,
sub-agents and compactions) with their next ``seq``, their start time, and
their open tool calls and permission prompts; ids, times and tool names,
never a tool's input or output (those are on the trail, redacted).
:class:`Executions` opens and closes them; ``_claude_session.Session`` says
which hook event does what.
"""

from __future__ import annotations

import os

from onlooker._shared import attribution, envelope, iso_time

from ._claude_values import digest, error_info, pick

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final

__all__ = ["AGENT_TOOLS", "PROGRAM", "Executions"]

PROGRAM: Final = "claude-code"
"""The program (and trigger kind) of a session's execution."""
AGENT_TOOLS: Final = frozenset({"Agent", "Task"})  # the CLI shows the model "Task", hooks "Agent"
_ENDED_KEPT: Final = 256  # finished sub-agent executions remembered, so no id starts twice


class Executions:
    """The open executions of one session; emits the events that open and close them.

    ``safe_id`` makes an id from a payload safe to record (no path
    characters, no secret); ``keep`` redacts a value kept in the state
    between two hook processes.
    """

    def __init__(
        self,
        session_id: str,
        state: dict[str, Any],
        now: float,
        *,
        safe_id: Callable[[object], str | None],
        keep: Callable[[Any], Any],
    ) -> None:
        self.sid = session_id
        self.state = state
        self.execs: dict[str, Any] = self.state["execs"]
        self.now = now
        self.at = iso_time(now)
        self.events: list[dict[str, Any]] = []
        self._safe_id = safe_id
        self._keep = keep

    def _agent(self, agent: str, payload: dict[str, Any]) -> str:
        """The execution of sub-agent ``agent`` (started now if its SubagentStart was missed)."""
        found = self.state["agents"].get(agent)
        if found in self.execs:
            return str(found)
        root = self._root(payload)
        kind = payload.get("agent_type")
        link = self.state["launched"].pop(agent, None) or self._claim_spawn(kind)
        parent, call = (link[0], link[1]) if link and link[0] in self.execs else (None, None)
        metadata = {"agent_id": agent, **pick(payload, ("agent_type",))}
        eid = self._child(
            parent or self.state["turn"] or root,
            "agent",
            str(kind or "subagent"),
            payload,
            None,
            call=call,
            name=agent,
            metadata=metadata,
        )
        self.execs[eid]["agent"] = agent
        self.state["agents"][agent] = eid
        return eid

    def _claim_spawn(self, agent_type: object) -> list[str] | None:
        """The oldest open Agent/Task call for this agent type (or any), now taken.

        A call keeps its ``subagent_type`` as a fingerprint (tool input never
        sits in the state), so the agent type is compared by its fingerprint.
        """
        spawns = [
            (call["t"], eid, call_id, call)
            for eid, execution in self.execs.items()
            for call_id, call in execution["calls"].items()
            if "spawn" in call
        ]
        if not spawns:
            return None
        spawns.sort(key=lambda spawn: spawn[0])
        wanted = digest(agent_type)
        chosen = next((s for s in spawns if s[3]["spawn"] == wanted), spawns[0])
        del chosen[3]["spawn"]
        return [chosen[1], chosen[2]]

    def _open_call(self, payload: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        """The open call a PostToolUse* closes (started now if its PreToolUse was missed)."""
        call_id = self._call_id(payload)
        found = self._find_call(call_id)
        if found is None:
            home = self._home(payload)
            self._call_started(home, call_id, payload)
        else:
            home = found[0]
        return home, call_id, self.execs[home]["calls"][call_id]

    def _call_started(self, home: str, call_id: str, payload: dict[str, Any]) -> None:
        tool = str(payload.get("tool_name") or "unknown")
        tool_input = payload.get("tool_input")
        # The state keeps the tool's name redacted (an MCP server's name may hold a
        # secret) and its input only as fingerprints.
        call: dict[str, Any] = {"tool": self._keep(tool), "t": self.now, "in": digest(tool_input)}
        if tool in AGENT_TOOLS and isinstance(tool_input, dict):
            call["spawn"] = digest(tool_input.get("subagent_type"))
        self.execs[home]["calls"][call_id] = call
        args = tool_input if isinstance(tool_input, dict) else {"input": tool_input}
        self._emit(home, "ToolCallStarted", {"tool_call_id": call_id, "tool": tool, "args": args})

    def _call_finished(
        self,
        home: str,
        call_id: str,
        status: str,
        result: Any,
        error: dict[str, str] | None,
        metadata: dict[str, Any],
        duration_ms: float | None = None,
    ) -> None:
        call = self.execs[home]["calls"].pop(call_id)
        if call.get("asked_by"):
            metadata = {**metadata, "asked_by": call["asked_by"]}
        if duration_ms is None:
            duration_ms = max(0.0, (self.now - float(call["t"])) * 1000.0)
        self._emit(
            home,
            "ToolCallFinished",
            {
                "tool_call_id": call_id,
                "tool": call["tool"],
                "status": status,
                "result": result,
                "error": error,
                "duration_ms": duration_ms,
                "metadata": metadata,
            },
        )

    def _answer(self, home: str, call: dict[str, Any], status: str, response: Any) -> None:
        """Resolve the permission prompt ``call`` waited on, if any."""
        interaction = call.pop("ask", None)
        if interaction is not None and interaction in self.execs[home]["asks"]:
            self._resolved(home, interaction, status, response)

    def _resolved(self, home: str, interaction: str, status: str, response: Any) -> None:
        self.execs[home]["asks"].pop(interaction, None)
        self._emit(
            home,
            "InteractionResolved",
            {"interaction_id": interaction, "status": status, "response": response, "error": None},
        )

    # -- executions --------------------------------------------------------------------------

    def _root(self, payload: dict[str, Any]) -> str:
        """The session's open execution, started now if none is open."""
        root = self.state["root"]
        if root is not None and root in self.execs:
            return str(root)
        self.state["roots"] += 1
        count = self.state["roots"]
        root = self.sid if count == 1 else f"{self.sid}.r{count}"
        metadata = pick(
            payload,
            (
                "source",
                "model",
                "agent_type",
                "cwd",
                "transcript_path",
                "permission_mode",
                "prompt_id",
                "effort",
            ),
        )
        if count > 1 and self.state["last_root"]:
            metadata["resumes"] = self.state["last_root"]
        self.state["root"] = root
        self._start(root, None, None, "session", PROGRAM, metadata, None)
        return root

    def _turn(self, root: str, payload: dict[str, Any], prompt: Any) -> str:
        metadata = pick(payload, ("prompt_id", "permission_mode", "cwd", "effort"))
        turn = self._child(root, "turn", "prompt", payload, prompt, metadata=metadata)
        self.state["turn"] = turn
        return turn

    def _child(
        self,
        parent: str,
        kind: str,
        program: str,
        payload: dict[str, Any],
        input_: Any,
        *,
        call: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        if name is None:
            self.state["counter"] += 1
            name = str(self.state["counter"])
        eid = f"{self.state['root']}.{kind}-{name}"
        ended = self.state.get("ended", ())
        while eid in self.execs or eid in ended:  # an agent seen twice: executions apart
            eid += "-" + os.urandom(2).hex()
        if metadata is None:
            metadata = pick(payload, ("cwd", "permission_mode"))
        self._start(eid, parent, call, kind, program, metadata, input_)
        return eid

    def _start(
        self,
        eid: str,
        parent: str | None,
        call: str | None,
        kind: str,
        program: str,
        metadata: dict[str, Any],
        input_: Any,
    ) -> None:
        depth = 0 if parent is None else int(self.execs[parent]["depth"]) + 1
        self.execs[eid] = {
            "kind": kind,
            "seq": 0,
            "t": self.now,
            "parent": parent,
            "call": call,
            "depth": depth,
            "calls": {},
            "asks": {},
        }
        owner = os.environ.get("USER") or os.environ.get("USERNAME")
        self._emit(
            eid,
            "ExecutionStarted",
            {
                "program": program,
                "trigger": {"kind": PROGRAM, "metadata": metadata},
                "owner": owner,
                "input": input_,
            },
        )

    def _stop(
        self,
        eid: str,
        payload: dict[str, Any],
        keys: tuple[str, ...],
        error: dict[str, str] | None = None,
    ) -> None:
        """Stop/SubagentStop (StopFailure: with ``error``): finish ``eid`` now, or once its
        background sub-agents stop (``failed`` then, with ``error``)."""
        result = pick(payload, (*keys, "background_tasks", "session_crons"))
        if self.state["turn"] == eid:
            self.state["turn"] = None
        tasks = payload.get("background_tasks")
        if isinstance(tasks, list):  # Claude Code's own list of what still runs wins
            listed = {
                self._safe_id(t.get("id"))
                for t in tasks
                if isinstance(t, dict) and t.get("type") == "subagent"
            }
            running = [c for c, e in self.execs.items() if e["parent"] == eid]
            for child in [c for c in running if self.execs[c].get("agent") not in listed]:
                message = "no SubagentStop came before its parent stopped"
                self._finish(
                    child, "cancelled", error=error_info("Cancelled", message, "interrupt")
                )
            launched = self.state["launched"]
            self.state["launched"] = {
                agent: link for agent, link in launched.items() if link[0] != eid or agent in listed
            }
        if self._waiting(eid):
            self.execs[eid].update(stopped=True, result=self._keep(result))
            if error is not None:
                self.execs[eid]["error"] = self._keep(error)
        else:
            self._finish(eid, "completed" if error is None else "failed", result, error)

    def _end_stopped(self, eid: str) -> None:
        """Finish ``eid``, stopped earlier and waiting for its sub-agents, as its stop said."""
        execution = self.execs[eid]
        error = execution.get("error")
        status = "completed" if error is None else "failed"
        self._finish(eid, status, execution.get("result"), error)

    def _waiting(self, eid: str) -> bool:
        """Whether ``eid`` has sub-agents still running, or launched and yet to start."""
        return any(e["parent"] == eid for e in self.execs.values()) or any(
            link[0] == eid for link in self.state["launched"].values()
        )

    def _finish(
        self, eid: str, status: str, result: Any = None, error: dict[str, str] | None = None
    ) -> None:
        """Close ``eid``: its children, interactions and calls first, then the execution."""
        execution = self.execs.get(eid)
        if execution is None or execution.get("closing"):
            return
        execution["closing"] = True
        for child in [c for c, e in self.execs.items() if e["parent"] == eid]:
            if self.execs[child].get("stopped"):  # stopped, waiting for sub-agents: it did end
                self._end_stopped(child)
            else:
                message = "its parent execution ended first"
                self._finish(
                    child, "cancelled", error=error_info("Cancelled", message, "interrupt")
                )
        ended = status == "completed"
        for call_id, call in list(execution["calls"].items()):
            if call.get("ask") and ended:
                self._answer(eid, call, "declined", None)
                message = "not run: its permission prompt was declined"
                failure = error_info("PermissionDeclined", message)
                self._call_finished(eid, call_id, "blocked", None, failure, {})
            else:
                self._answer(eid, call, "cancelled", None)
                message = "no PostToolUse came before its execution ended"
                failure = error_info("Cancelled", message, "interrupt")
                self._call_finished(eid, call_id, "cancelled", None, failure, {})
        for interaction in list(execution["asks"]):
            self._resolved(eid, interaction, "declined" if ended else "cancelled", None)
        self._emit(
            eid,
            "ExecutionFinished",
            {
                "status": status,
                "result": result,
                "error": error,
                "duration_ms": max(0.0, (self.now - float(execution["t"])) * 1000.0),
            },
        )
        del self.execs[eid]
        self._forget(eid)
        parent = execution["parent"]
        stopped = parent in self.execs and self.execs[parent].get("stopped")
        if stopped and not self._waiting(parent):
            self._end_stopped(parent)

    def _forget(self, eid: str) -> None:
        state = self.state
        if eid in state["agents"].values():  # its later events, if any, open a new execution
            state["ended"] = [*state.get("ended", ())[-(_ENDED_KEPT - 1) :], eid]
        for key in ("turn", "compact"):
            if state[key] == eid:
                state[key] = None
        if state["root"] == eid:
            state["root"], state["last_root"] = None, eid
        state["agents"] = {a: e for a, e in state["agents"].items() if e != eid}
        state["launched"] = {a: link for a, link in state["launched"].items() if link[0] != eid}

    # -- helpers ----------------------------------------------------------------------------

    def _home(self, payload: dict[str, Any]) -> str:
        agent = self._safe_id(payload.get("agent_id"))
        if agent is not None:
            return self._agent(agent, payload)
        return str(self.state["turn"] or self._root(payload))

    def _call_id(self, payload: dict[str, Any]) -> str:
        return self._safe_id(payload.get("tool_use_id")) or "call-" + os.urandom(8).hex()

    def _find_call(self, call_id: str) -> tuple[str, dict[str, Any]] | None:
        for eid, execution in self.execs.items():
            call = execution["calls"].get(call_id)
            if call is not None:
                return eid, call
        return None

    def _emit(self, eid: str, kind: str, fields: dict[str, Any]) -> None:
        execution = self.execs[eid]
        event = envelope(
            kind,
            execution_id=eid,
            seq=execution["seq"],
            at=self.at,
            attribution=attribution(
                parent_execution_id=execution["parent"],
                parent_tool_call_id=execution["call"],
                depth=execution["depth"],
            ),
        )
        event.update(fields)
        execution["seq"] += 1
        self.events.append(event)
