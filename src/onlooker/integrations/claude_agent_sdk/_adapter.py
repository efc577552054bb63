"""The adapter behind :func:`hooks`: one callback for every hook event, and each session's state.

The mapping is in the package docstring.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from onlooker import ErrorInfo, HookAbortError, HookAction, Trigger

from .._claude_declarations import AGENT_TOOLS, TRIGGER, ToolInterrupted
from .._ids import unused_id
from .._json import json_copy

if TYPE_CHECKING:
    from claude_agent_sdk.types import (
        HookContext,
        HookInput,
        HookJSONOutput,
        PermissionResult,
        PostToolUseFailureHookInput,
        PostToolUseHookInput,
        PostToolUseHookSpecificOutput,
        PreToolUseHookInput,
        StopHookInput,
        SubagentStartHookInput,
        SubagentStopHookInput,
        SyncHookJSONOutput,
        ToolPermissionContext,
        UserPromptSubmitHookInput,
    )

    from onlooker import ExecutionEngine, TrackedExecution, TrackedToolCall

__all__ = ["REJECTED", "Adapter", "Asked", "logger"]

logger: Final = logging.getLogger("onlooker.integrations.claude_agent_sdk")

REJECTED: Final = ErrorInfo(
    type="ToolApprovalRejected", message="a person rejected the call", cause="failure"
)
"""What a call the permission prompt denied closes with (the CLI never runs it, and sends no
``PostToolUse*`` hook for it)."""


@dataclass(eq=False, slots=True)
class _Turn:
    """A tracked execution of a session: the turn itself or a sub-agent of it."""

    run: TrackedExecution
    session_id: str
    parent: _Turn | None = None
    agent_id: str | None = None
    agents: set[str] = field(default_factory=set)  # sub-agents still running
    stopped: bool = False  # Stop / SubagentStop came; finish once `agents` is empty
    result: str | None = None
    aborted: str | None = None  # a hook's ABORT ended it, for this reason
    call_ids: set[str] = field(default_factory=set)  # recorded: a repeated id gets "#2"

    @property
    def root(self) -> _Turn:
        turn = self
        while turn.parent is not None:
            turn = turn.parent
        return turn


@dataclass(frozen=True, slots=True)
class _Spawn:
    """An ``Agent``/``Task`` call waiting for the ``SubagentStart`` it causes."""

    turn: _Turn
    tool_use_id: str
    agent_type: str | None
    prompt: str | None


@dataclass(frozen=True, slots=True)
class Asked:
    """A permission prompt recorded as an interaction of the call it asks about."""

    session_id: str
    tool_use_id: str
    call: TrackedToolCall
    turn: _Turn
    interaction_id: str


class Adapter:
    """One callback for every hook event; the state of every session it has seen."""

    def __init__(self, engine: ExecutionEngine, *, program: str, owner: str | None) -> None:
        self._engine = engine
        self._program = program
        self._owner = owner
        self._turns: dict[str, _Turn] = {}  # session_id -> the turn in progress
        self._agents: dict[tuple[str, str], _Turn] = {}  # (session_id, agent_id) -> child
        # (session_id, tool_use_id) -> the open call and the execution it belongs to
        self._calls: dict[tuple[str, str], tuple[TrackedToolCall, _Turn]] = {}
        self._spawns: dict[str, list[_Spawn]] = {}  # session_id -> Agent calls awaiting start
        # (session_id, agent_id) -> the Agent call whose result named that agent before it started
        self._launched: dict[tuple[str, str], _Spawn] = {}

    async def __call__(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        event: str = input_data.get("hook_event_name", "?")  # StopFailure too, beyond HookInput
        try:
            if input_data["hook_event_name"] == "PreToolUse":
                return await self._pre_tool_use(input_data)
            if input_data["hook_event_name"] == "PostToolUse":
                return await self._post_tool_use(input_data)
            if input_data["hook_event_name"] == "PostToolUseFailure":
                await self._post_tool_use_failure(input_data)
            elif input_data["hook_event_name"] == "UserPromptSubmit":
                await self._user_prompt_submit(input_data)
            elif input_data["hook_event_name"] == "SubagentStart":
                await self._subagent_start(input_data)
            elif input_data["hook_event_name"] == "SubagentStop":
                await self._subagent_stop(input_data)
            elif input_data["hook_event_name"] == "Stop":
                await self._stop(input_data)
            elif event == "StopFailure":
                await self._stop_failure(cast("Mapping[str, Any]", input_data))
            elif event == "PostToolBatch":
                await self._post_tool_batch(cast("Mapping[str, Any]", input_data))
        except Exception:
            logger.exception("onlooker could not record Claude's %s hook", event)
        return {}

    # -- turns ------------------------------------------------------------------------

    async def _user_prompt_submit(self, data: UserPromptSubmitHookInput) -> None:
        session_id = data["session_id"]
        previous = self._turns.pop(session_id, None)
        if previous is not None and not previous.run.finished:
            logger.info("turn %s ended without Stop (interrupted)", previous.run.execution_id)
            await previous.run.finish("cancelled", error="interrupted: a new prompt came first")
        await self._begin(session_id, data.get("prompt_id"), prompt=data["prompt"])

    async def _begin(self, session_id: str, prompt_id: str | None, *, prompt: str | None) -> _Turn:
        metadata: dict[str, Any] = {"session_id": session_id}
        if prompt_id is not None:
            metadata["prompt_id"] = prompt_id
        run = self._engine.track(
            self._program,
            trigger=Trigger(kind=TRIGGER, metadata=metadata),
            input=None if prompt is None else {"prompt": prompt},
            owner=self._owner,
        )
        turn = _Turn(run, session_id)
        # Registered before the await: start() never yields, so concurrent hooks
        # of this session (parallel tool calls) find this turn, not a second one.
        self._turns[session_id] = turn
        await run.start()
        return turn

    async def _turn(self, session_id: str, prompt_id: str | None) -> _Turn:
        turn = self._turns.get(session_id)
        if turn is None or (turn.run.finished and turn.aborted is None):
            turn = await self._begin(session_id, prompt_id, prompt=None)  # no prompt, or closed
        return turn

    async def _stop(self, data: StopHookInput) -> None:
        turn = self._turns.pop(data["session_id"], None)
        if turn is None:
            return
        # Sub-agents it launched in the background whose SubagentStart is still to come.
        turn.agents |= {
            agent_id
            for (session_id, agent_id), spawn in self._launched.items()
            if session_id == turn.session_id and spawn.turn is turn
        }
        tasks = data.get("background_tasks")
        if tasks is not None:  # the CLI's own list of what still runs wins over ours
            turn.agents &= {task["id"] for task in tasks if task.get("type") == "subagent"}
        await self._stopped(turn, data.get("last_assistant_message"))

    async def _stop_failure(self, data: Mapping[str, Any]) -> None:
        """An API error ended the turn (or a sub-agent's): it finishes ``failed``, with what
        the CLI said. A sub-agent's (``agent_id``) fails that child only; its parent goes on."""
        session_id, agent_id = data["session_id"], data.get("agent_id")
        if agent_id is not None:
            turn = self._agents.pop((session_id, agent_id), None)
        else:
            turn = self._turns.pop(session_id, None)
        if turn is None or turn.run.finished:
            return
        kind = data.get("error") or data.get("error_type")
        details = data.get("error_details") or data.get("error_message")
        said = details or data.get("last_assistant_message")
        message = ": ".join(str(part) for part in (kind, said) if part) or "an API error"
        error = ErrorInfo(type="APIError", message=message, cause="failure")
        await turn.run.finish("failed", error=error)
        parent = turn.parent
        if parent is not None and turn.agent_id is not None:  # a parent waiting for it finishes
            parent.agents.discard(turn.agent_id)
            if parent.stopped:
                await self._stopped(parent, parent.result)

    async def _stopped(self, turn: _Turn, result: str | None) -> None:
        """The turn (or sub-agent) stopped; finish it once its sub-agents have stopped too."""
        turn.stopped, turn.result = True, result
        current: _Turn | None = turn
        while current is not None and current.stopped and not current.agents:
            if not current.run.finished:
                await current.run.finish("completed", result=current.result)
            parent = current.parent
            if parent is not None and current.agent_id is not None:
                parent.agents.discard(current.agent_id)
            current = parent  # a stopped parent that waited for this one finishes now

    async def _abort(self, turn: _Turn, reason: str) -> None:
        """A hook's ABORT ended the execution: finish the turn (``failed``, the tree says why).

        The turn stays the session's until its ``Stop`` or next prompt, so the
        calls Claude still asks for in it (parallel siblings, a sub-agent's
        next step) are refused, not started in a new execution.
        """
        root = turn.root
        root.aborted = reason
        await root.run.finish("completed")  # an aborted tree finishes failed

    def _aborted(self, session_id: str) -> str | None:
        """Why the session's turn was aborted, if it was (its later calls are all refused)."""
        turn = self._turns.get(session_id)
        return None if turn is None else turn.aborted

    # -- sub-agents -------------------------------------------------------------------

    async def _subagent_start(self, data: SubagentStartHookInput) -> None:
        await self._start_agent(data["session_id"], data["agent_id"], data["agent_type"], None)

    async def _start_agent(
        self, session_id: str, agent_id: str, agent_type: str | None, prompt_id: str | None
    ) -> _Turn:
        spawn = self._launched.pop((session_id, agent_id), None) or self._claim_spawn(
            session_id, agent_type
        )
        parent = None if spawn is None else spawn.turn
        if parent is None or parent.run.finished:  # too late to link it to its Agent call
            parent, spawn = await self._turn(session_id, prompt_id), None
        metadata: dict[str, Any] = {"session_id": session_id, "agent_id": agent_id}
        if agent_type is not None:
            metadata["agent_type"] = agent_type
        run = parent.run.child(
            agent_type or "subagent",
            parent_tool_call_id=None if spawn is None else spawn.tool_use_id,
            trigger=Trigger(kind=TRIGGER, metadata=metadata),
            input=None if spawn is None or spawn.prompt is None else {"prompt": spawn.prompt},
        )
        child = _Turn(run, session_id, parent=parent, agent_id=agent_id)
        self._agents[session_id, agent_id] = child
        parent.agents.add(agent_id)
        await run.start()
        return child

    def _claim_spawn(self, session_id: str, agent_type: str | None) -> _Spawn | None:
        """The oldest open Agent/Task call of the session for this agent type (or any).

        A call that closed without causing its sub-agent (refused outside onlooker,
        closed with its turn) causes none any more: it is dropped, not claimed.
        """
        spawns = self._spawns.get(session_id)
        if spawns:
            spawns[:] = [spawn for spawn in spawns if self._still_open(session_id, spawn)]
        if not spawns:
            return None
        chosen = next((s for s in spawns if s.agent_type == agent_type), spawns[0])
        spawns.remove(chosen)
        return chosen

    async def _subagent_stop(self, data: SubagentStopHookInput) -> None:
        child = self._agents.pop((data["session_id"], data["agent_id"]), None)
        if child is not None:
            await self._stopped(child, data.get("last_assistant_message"))

    async def _owner_of(
        self, session_id: str, agent_id: str | None, agent_type: str | None, prompt_id: str | None
    ) -> _Turn:
        """The execution a tool hook belongs to: its sub-agent's, or the session's turn."""
        if agent_id is None:
            return await self._turn(session_id, prompt_id)
        child = self._agents.get((session_id, agent_id))
        if child is None or child.run.finished:  # its SubagentStart was missed
            child = await self._start_agent(session_id, agent_id, agent_type, prompt_id)
        return child

    # -- tool calls -------------------------------------------------------------------

    async def _pre_tool_use(self, data: PreToolUseHookInput) -> SyncHookJSONOutput:
        session_id, tool_use_id = data["session_id"], data["tool_use_id"]
        tool, args = data["tool_name"], data["tool_input"]
        aborted = self._aborted(session_id)
        if aborted is not None:
            return _after_abort(tool, aborted)
        turn = await self._owner_of(
            session_id, data.get("agent_id"), data.get("agent_type"), data.get("prompt_id")
        )
        call_id = unused_id(turn.call_ids, tool_use_id)  # a proxy may repeat one: still governed
        call = await turn.run.tool_started(tool, args, tool_call_id=call_id)
        if not call.allowed:
            if (aborted := self._aborted(session_id)) is not None:
                return _after_abort(tool, aborted)  # a parallel sibling's ABORT, meanwhile
            refusal = _deny(call)
            if call.action is HookAction.ABORT:
                try:
                    await self._abort(turn, call.reason or "refused by a hook")
                except Exception:  # the refusal is sent whatever happens to the record
                    logger.exception("onlooker could not finish the aborted turn")
            return refusal
        self._calls[session_id, tool_use_id] = call, turn
        if tool in AGENT_TOOLS:  # the sub-agent gets what the pre-hooks left
            subagent_type, prompt = call.input.get("subagent_type"), call.input.get("prompt")
            self._spawns.setdefault(session_id, []).append(
                _Spawn(
                    turn,
                    tool_use_id,
                    subagent_type if isinstance(subagent_type, str) else None,
                    prompt if isinstance(prompt, str) else None,
                )
            )
        if call.input == args:
            return {}
        updated = cast("dict[str, Any]", json_copy(call.input))  # as recorded: the CLI gets JSON
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": updated}}

    async def _open_call(
        self, data: PostToolUseHookInput | PostToolUseFailureHookInput
    ) -> tuple[TrackedToolCall, _Turn] | None:
        """The call a PostToolUse* hook closes (recorded now if its PreToolUse was missed)."""
        session_id, tool_use_id = data["session_id"], data["tool_use_id"]
        spawn = self._take_spawn(session_id, tool_use_id)  # an Agent call no sub-agent claimed
        if spawn is not None and data["hook_event_name"] == "PostToolUse":
            agent_id = _launched_agent(data.get("tool_response"))
            if agent_id is not None:  # a background launch can end before SubagentStart
                self._launched[session_id, agent_id] = spawn
        found = self._calls.pop((session_id, tool_use_id), None)
        if found is None and self._aborted(session_id) is not None:
            return None  # refused after the abort: nothing to close
        if found is None:
            logger.warning(
                "Claude's %s call %s ended without a recorded PreToolUse; recording it now",
                data["tool_name"],
                tool_use_id,
            )
            turn = await self._owner_of(
                session_id, data.get("agent_id"), data.get("agent_type"), data.get("prompt_id")
            )
            call = await turn.run.tool_started(
                data["tool_name"],
                data["tool_input"],
                tool_call_id=unused_id(turn.call_ids, tool_use_id),
            )
            found = call, turn
        call, turn = found
        return None if call.done else found  # refused late, or closed with its execution

    def _still_open(self, session_id: str, spawn: _Spawn) -> bool:
        found = self._calls.get((session_id, spawn.tool_use_id))
        return found is not None and not found[0].done and not spawn.turn.run.finished

    def _take_spawn(self, session_id: str, tool_use_id: str) -> _Spawn | None:
        spawns = self._spawns.get(session_id, [])
        spawn = next((s for s in spawns if s.tool_use_id == tool_use_id), None)
        if spawn is not None:
            spawns.remove(spawn)
        return spawn

    async def _post_tool_use(self, data: PostToolUseHookInput) -> SyncHookJSONOutput:
        found = await self._open_call(data)
        if found is None:
            return {}
        call, turn = found
        response = data.get("tool_response")
        try:
            output = await call.finished(response, duration_ms=_duration(data))
        except HookAbortError as abort:
            try:
                await self._abort(turn, str(abort))
            except Exception:  # the stop is sent whatever happens to the record
                logger.exception("onlooker could not finish the aborted turn")
            return {"continue_": False, "stopReason": f"onlooker aborted the run: {abort}"}
        if output is response or output == response:
            return {}
        output = json_copy(output)  # as recorded: the SDK sends the CLI JSON
        rewrite: PostToolUseHookSpecificOutput = {
            "hookEventName": "PostToolUse",
            "updatedToolOutput": output,
        }
        if data["tool_name"].startswith("mcp__"):  # CLIs before updatedToolOutput know only this
            rewrite["updatedMCPToolOutput"] = output
        return {"hookSpecificOutput": rewrite}

    # -- permission prompts (can_use_tool) ----------------------------------------------

    async def ask(self, tool: str, context: ToolPermissionContext) -> Asked | None:
        """Record the permission prompt ``can_use_tool`` answers; ``None`` if it cannot be.

        ``can_use_tool`` carries no ``session_id``: the call is found by its
        ``tool_use_id`` among the open calls of every session. Never raises.
        """
        try:
            tool_use_id = context.tool_use_id
            found = [
                (session_id, entry)
                for (session_id, call_id), entry in self._calls.items()
                if call_id == tool_use_id
            ]
            if tool_use_id is None or len(found) != 1:
                logger.info(
                    "no single open %s call %s to record its permission prompt on",
                    tool,
                    tool_use_id,
                )
                return None
            session_id, (call, turn) = found[0]
            if call.done or turn.run.finished:
                return None
            interaction_id = await turn.run.interaction_started(
                f"tool {call.tool!r} (call {call.tool_call_id}) awaits approval"
            )
            return Asked(session_id, tool_use_id, call, turn, interaction_id)
        except Exception:
            logger.exception("onlooker could not record the permission prompt for %s", tool)
            return None

    async def answered(
        self, asked: Asked | None, result: PermissionResult | None, error: BaseException | None
    ) -> None:
        """Record the answer to a prompt :meth:`ask` recorded (a deny fails the call). Never raises."""
        if asked is None:
            return
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

        try:
            run = asked.turn.run
            if error is not None:  # the callback raised, or the CLI withdrew the question
                await run.interaction_resolved(
                    asked.interaction_id,
                    "failed" if isinstance(error, Exception) else "cancelled",
                    error=error,
                )
                if isinstance(error, Exception):  # the CLI refuses the call ("request failed")
                    await self._refused(asked, error)
            elif isinstance(result, PermissionResultAllow):
                updated = result.updated_input
                rewrite = None if updated is None else {"updated_input": json_copy(updated)}
                await run.interaction_resolved(asked.interaction_id, "accepted", rewrite)
            elif isinstance(result, PermissionResultDeny):
                response: dict[str, Any] = {"message": result.message}
                if result.interrupt:
                    response["interrupt"] = True
                await run.interaction_resolved(asked.interaction_id, "declined", response)
                # The CLI never runs a denied call and sends no PostToolUse* for it: close it here.
                await self._refused(asked, _rejected(result.message))
                if result.interrupt:  # the CLI ends the turn: no Stop comes
                    root = asked.turn.root
                    if self._turns.get(asked.session_id) is root:
                        del self._turns[asked.session_id]
                    await root.run.finish("cancelled", error=_INTERRUPTED)
            else:  # the SDK refuses any other answer (and the CLI the call)
                problem = f"not a PermissionResult: {result!r}"
                await run.interaction_resolved(asked.interaction_id, "failed", error=problem)
                await self._refused(asked, problem)
        except Exception:
            logger.exception("onlooker could not record the answer to a permission prompt")

    async def _refused(self, asked: Asked, error: BaseException | str | ErrorInfo) -> None:
        """The CLI refused the call the prompt asked about (it never runs, no PostToolUse*)."""
        self._calls.pop((asked.session_id, asked.tool_use_id), None)
        self._take_spawn(asked.session_id, asked.tool_use_id)
        if not asked.call.done:
            await asked.call.failed(error)

    async def _post_tool_batch(self, data: Mapping[str, Any]) -> None:
        """The CLI answered a batch of calls: one still open got no ``PostToolUse*``.

        Such a call was refused outside onlooker (a ``PreToolUse`` hook of the
        application's own, the CLI's permission rules): it never ran. It is
        recorded ``failed`` (``ToolRefused``, with what the CLI told the model),
        and causes no sub-agent.
        """
        session_id = data["session_id"]
        for entry in data.get("tool_calls") or ():
            tool_use_id = entry.get("tool_use_id") if isinstance(entry, Mapping) else None
            if not isinstance(tool_use_id, str):
                continue
            self._take_spawn(session_id, tool_use_id)
            found = self._calls.pop((session_id, tool_use_id), None)
            if found is None or found[0].done:
                continue
            said = entry.get("tool_response") or "refused"
            message = said if isinstance(said, str) else json.dumps(said, default=str)
            await found[0].failed(ErrorInfo(type="ToolRefused", message=message, cause="failure"))

    async def _post_tool_use_failure(self, data: PostToolUseFailureHookInput) -> None:
        found = await self._open_call(data)
        if found is None:
            return
        error: BaseException | str = data["error"]
        if data.get("is_interrupt"):
            error = ToolInterrupted(data["error"])
        await found[0].failed(error, duration_ms=_duration(data))


def _deny(call: TrackedToolCall) -> SyncHookJSONOutput:
    """The PreToolUse answer that refuses ``call`` in Claude (and stops the turn on ABORT)."""
    verdict = {HookAction.SKIP: "skipped", HookAction.ABORT: "aborted the run at"}.get(
        call.action, "blocked"
    )
    reason = f"onlooker {verdict} this {call.tool} call: {call.reason or 'refused by a hook'}"
    return _refusal(reason, stop=call.action is HookAction.ABORT)


def _after_abort(tool: str, aborted: str) -> SyncHookJSONOutput:
    """The answer to every ``PreToolUse`` of a turn a hook's ABORT ended: deny, and stop."""
    return _refusal(
        f"onlooker refused this {tool} call: the run was aborted ({aborted})", stop=True
    )


def _refusal(reason: str, *, stop: bool) -> SyncHookJSONOutput:
    """A PreToolUse deny with ``reason``; with ``stop``, Claude's turn stops too."""
    output: SyncHookJSONOutput = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
    if stop:
        output["continue_"] = False
        output["stopReason"] = reason
    return output


_INTERRUPTED: Final = ErrorInfo(
    type="Interrupted", message="a permission prompt's deny interrupted the turn", cause="interrupt"
)


def _rejected(message: str) -> ErrorInfo:
    """What a call the person denied closes with: :data:`REJECTED`, with their message."""
    if not message:
        return REJECTED
    return ErrorInfo(type=REJECTED.type, message=f"{REJECTED.message}: {message}", cause="failure")


def _launched_agent(response: object) -> str | None:
    """The ``agentId`` an Agent/Task call's result names (a sub-agent launched in the background)."""
    if isinstance(response, Mapping):
        agent_id = response.get("agentId")
        if isinstance(agent_id, str) and agent_id:
            return agent_id
    return None


def _duration(data: Mapping[str, object]) -> float | None:
    duration = data.get("duration_ms")
    if (
        isinstance(duration, int | float)
        and not isinstance(duration, bool)
        and 0 <= duration < math.inf
    ):
        return float(duration)
    return None
