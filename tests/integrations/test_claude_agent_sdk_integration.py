"""The Claude Agent SDK adapter: the SDK's typed hook inputs, then the real CLI, offline.

``TestTypedHookInputs`` sends the SDK's own typed hook inputs
(``PreToolUseHookInput(...)``, ...) to the callbacks of ``hooks(engine)`` in
the order a real session produces them (the order below is the one the
bundled CLI produced in ``TestBundledCli``). ``TestBundledCli`` runs the
SDK's bundled Claude Code CLI for real: ``query()`` with the adapter's
hooks, against a scripted Anthropic Messages API served on 127.0.0.1
(``ANTHROPIC_BASE_URL``), so the tool bodies are the CLI's own built-ins,
working in a temporary directory.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final, cast

import anyio
import pytest
from claude_agent_sdk import (
    ClaudeAgentOptions,
    PermissionResult,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    ToolPermissionContext,
    query,
)
from claude_agent_sdk import HookMatcher as SdkHookMatcher
from claude_agent_sdk.types import (
    CanUseTool,
    HookEvent,
    HookInput,
    HookJSONOutput,
    PostToolUseFailureHookInput,
    PostToolUseHookInput,
    PreToolUseHookInput,
    StopHookInput,
    SubagentStartHookInput,
    SubagentStopHookInput,
    UserPromptSubmitHookInput,
)

import onlooker
from onlooker import (
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    HookAction,
    HookMatcher,
    InteractionResolved,
    InteractionStarted,
    PostHookResult,
    PreHookResult,
    ToolCallFinished,
    ToolCallStarted,
    ToolUseContext,
)
from onlooker.integrations.claude_agent_sdk import _adapter, approvals, hooks
from onlooker.plugins import audit, history
from onlooker.testing import RecordingObserver

pytestmark = pytest.mark.anyio

Check = Callable[[Sequence[ExecutionEvent]], None]

SESSION = "6d36d693-243c-4cd0-b962-c87303e0c678"
PROMPT_ID = "4ddf2462-1c1f-4e37-8ae6-33b12ba19439"
CWD = "/work/notes"
TRANSCRIPT = "/home/u/.claude/projects/-work-notes/6d36d693.jsonl"


# -- onlooker's hooks: what the tests govern ------------------------------------------------


def refuse(use: ToolUseContext) -> PreHookResult:
    """Refuse shell commands and writes to a file called ``blocked.txt``."""
    path = str(use.tool_input.get("file_path", ""))
    if use.tool_name == "Bash" or path.endswith("blocked.txt"):
        return PreHookResult(action=HookAction.BLOCK, reason="not on this machine")
    return PreHookResult()


def sign(use: ToolUseContext) -> PreHookResult:
    """Rewrite what ``Write`` writes to ``signed.txt``."""
    if str(use.tool_input.get("file_path", "")).endswith("signed.txt"):
        content = str(use.tool_input["content"])
        return PreHookResult(
            modified_input={**use.tool_input, "content": content + "-- onlooker\n"}
        )
    return PreHookResult()


def redact(use: ToolUseContext, output: Any) -> PostHookResult:
    """Redact what ``Read`` read from ``secret.txt``, keeping the output's shape."""
    if isinstance(output, dict) and str(output["file"]["filePath"]).endswith("secret.txt"):
        return PostHookResult(
            modified_output={**output, "file": {**output["file"], "content": "[redacted]\n"}}
        )
    return PostHookResult()


def abort(use: ToolUseContext) -> PreHookResult:
    return PreHookResult(action=HookAction.ABORT, reason="kill switch")


GOVERNANCE = [
    HookMatcher(pre=(refuse,)),
    HookMatcher(pattern="Write", pre=(sign,)),
    HookMatcher(pattern="Read", post=(redact,)),
]


# -- the engine, recorded -------------------------------------------------------------------


@dataclass
class Recorded:
    engine: onlooker.ExecutionEngine
    recorder: RecordingObserver
    trail: audit.AuditTrail
    history_url: str


@asynccontextmanager
async def engine_for(tmp_path: Path, extra: Sequence[HookMatcher] = ()) -> AsyncIterator[Recorded]:
    """An engine with the governance hooks, history and audit; closed (all written) on exit."""
    url = f"sqlite:///{tmp_path / 'history.db'}"
    trail_plugin = audit.plugin(directory=tmp_path / "audit", session_id="claude")
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(
        plugins=[history.plugin(url), trail_plugin], hooks=[*extra, *GOVERNANCE]
    ) as engine:
        engine.bus.subscribe(recorder)
        yield Recorded(engine, recorder, engine.extension(trail_plugin), url)


def tool_events(
    recorder: RecordingObserver, execution_id: str
) -> list[tuple[str, str, str, str | None]]:
    """(kind, tool, tool_call_id, status) of an execution's tool-call events, in order."""
    return [
        (e.kind, e.tool, e.tool_call_id, e.status if isinstance(e, ToolCallFinished) else None)
        for e in recorder.for_execution(execution_id)
        if isinstance(e, ToolCallStarted | ToolCallFinished)
    ]


async def assert_history_and_audit(recorded: Recorded, root_id: str) -> history.ExecutionTree:
    """History holds the whole tree as the events say; the audit trail verifies."""
    async with history.open(recorded.history_url) as store:
        tree = await store.get_execution(root_id)
        assert tree is not None
        for node in [tree, *tree.children]:
            assert await store.events(node.execution_id) == recorded.recorder.for_execution(
                node.execution_id
            )
    report = audit.verify(recorded.trail.path)
    assert report.ok and report.records == len(recorded.recorder.events)
    return tree


# -- driving the hooks as the SDK does ------------------------------------------------------


class Sdk:
    """Sends typed hook inputs to ``hooks(engine)`` as the SDK's ``Query`` does.

    Every matcher registered for the input's event is called (the adapter's
    match every tool), each callback with ``(input, tool_use_id, context)``.
    """

    def __init__(self, registered: dict[HookEvent, list[SdkHookMatcher]]) -> None:
        self.registered = registered

    async def send(self, data: HookInput, tool_use_id: str | None = None) -> HookJSONOutput:
        outputs: list[HookJSONOutput] = []
        for matcher in self.registered[data["hook_event_name"]]:
            assert matcher.matcher is None
            for callback in matcher.hooks:
                outputs.append(await callback(data, tool_use_id, {"signal": None}))
        (output,) = outputs
        return output


def prompt(text: str, prompt_id: str = PROMPT_ID) -> UserPromptSubmitHookInput:
    return UserPromptSubmitHookInput(
        session_id=SESSION,
        transcript_path=TRANSCRIPT,
        cwd=CWD,
        permission_mode="default",
        prompt_id=prompt_id,
        hook_event_name="UserPromptSubmit",
        prompt=text,
    )


def pre(
    tool: str, args: dict[str, Any], tool_use_id: str, agent_id: str | None = None
) -> PreToolUseHookInput:
    data = PreToolUseHookInput(
        session_id=SESSION,
        transcript_path=TRANSCRIPT,
        cwd=CWD,
        permission_mode="default",
        prompt_id=PROMPT_ID,
        hook_event_name="PreToolUse",
        tool_name=tool,
        tool_input=args,
        tool_use_id=tool_use_id,
    )
    if agent_id is not None:
        data["agent_id"], data["agent_type"] = agent_id, "general-purpose"
    return data


def post(
    tool: str,
    args: dict[str, Any],
    tool_use_id: str,
    response: Any,
    duration_ms: int,
    agent_id: str | None = None,
) -> PostToolUseHookInput:
    data = PostToolUseHookInput(
        session_id=SESSION,
        transcript_path=TRANSCRIPT,
        cwd=CWD,
        permission_mode="default",
        prompt_id=PROMPT_ID,
        hook_event_name="PostToolUse",
        tool_name=tool,
        tool_input=args,
        tool_response=response,
        tool_use_id=tool_use_id,
        duration_ms=duration_ms,
    )
    if agent_id is not None:
        data["agent_id"], data["agent_type"] = agent_id, "general-purpose"
    return data


def failure(
    tool: str, args: dict[str, Any], tool_use_id: str, error: str, *, interrupt: bool = False
) -> PostToolUseFailureHookInput:
    return PostToolUseFailureHookInput(
        session_id=SESSION,
        transcript_path=TRANSCRIPT,
        cwd=CWD,
        permission_mode="default",
        prompt_id=PROMPT_ID,
        hook_event_name="PostToolUseFailure",
        tool_name=tool,
        tool_input=args,
        tool_use_id=tool_use_id,
        error=error,
        is_interrupt=interrupt,
        duration_ms=5,
    )


def subagent_start(agent_id: str) -> SubagentStartHookInput:
    return SubagentStartHookInput(
        session_id=SESSION,
        transcript_path=TRANSCRIPT,
        cwd=CWD,
        prompt_id=PROMPT_ID,
        hook_event_name="SubagentStart",
        agent_id=agent_id,
        agent_type="general-purpose",
    )


def subagent_stop(agent_id: str, last: str) -> SubagentStopHookInput:
    return SubagentStopHookInput(
        session_id=SESSION,
        transcript_path=TRANSCRIPT,
        cwd=CWD,
        permission_mode="default",
        prompt_id=PROMPT_ID,
        hook_event_name="SubagentStop",
        stop_hook_active=False,
        agent_id=agent_id,
        agent_transcript_path=f"{TRANSCRIPT[:-6]}/subagents/agent-{agent_id}.jsonl",
        agent_type="general-purpose",
        last_assistant_message=last,
        background_tasks=[],
        session_crons=[],
    )


def stop(last: str, *running_agents: str) -> StopHookInput:
    return StopHookInput(
        session_id=SESSION,
        transcript_path=TRANSCRIPT,
        cwd=CWD,
        permission_mode="default",
        prompt_id=PROMPT_ID,
        hook_event_name="Stop",
        stop_hook_active=False,
        last_assistant_message=last,
        background_tasks=[
            {
                "id": agent_id,
                "type": "subagent",
                "status": "running",
                "description": "look",
                "agent_type": "general-purpose",
            }
            for agent_id in running_agents
        ],
        session_crons=[],
    )


def batch(*calls: tuple[str, dict[str, Any], str, Any]) -> HookInput:
    """PostToolBatch, which the CLI sends once a batch of calls is answered (no typed input in
    the SDK): each call's (tool, input, tool_use_id, what the model got)."""
    return cast(
        "HookInput",
        {
            "session_id": SESSION,
            "transcript_path": TRANSCRIPT,
            "cwd": CWD,
            "permission_mode": "default",
            "prompt_id": PROMPT_ID,
            "hook_event_name": "PostToolBatch",
            "tool_calls": [
                {"tool_name": tool, "tool_input": args, "tool_use_id": i, "tool_response": said}
                for tool, args, i, said in calls
            ],
        },
    )


NOTES = {"file_path": f"{CWD}/notes.md", "content": "# notes\n"}
MISSING = {"file_path": f"{CWD}/missing.md"}
RM = {"command": "rm -rf build", "description": "clean"}
DELEGATE = {"description": "check", "prompt": "check notes.md", "subagent_type": "general-purpose"}
WRITTEN = {"type": "create", "filePath": NOTES["file_path"], "content": "# notes\n"}
READ_NOTES = {
    "type": "text",
    "file": {"filePath": NOTES["file_path"], "content": "# notes\n", "numLines": 2},
}
DELEGATED = {"status": "completed", "agentId": "a1", "agentType": "general-purpose"}


async def one_turn(sdk: Sdk) -> list[HookJSONOutput]:
    """A turn with a write, a failing read, a refused command and a sub-agent, in CLI order."""
    return [
        await sdk.send(prompt("tidy my notes"), "uuid-1"),
        await sdk.send(pre("Write", NOTES, "toolu_01"), "toolu_01"),
        await sdk.send(post("Write", NOTES, "toolu_01", WRITTEN, 36), "toolu_01"),
        await sdk.send(pre("Read", MISSING, "toolu_02"), "toolu_02"),
        await sdk.send(failure("Read", MISSING, "toolu_02", "File does not exist."), "toolu_02"),
        await sdk.send(pre("Bash", RM, "toolu_03"), "toolu_03"),
        await sdk.send(pre("Agent", DELEGATE, "toolu_04"), "toolu_04"),
        await sdk.send(subagent_start("a1"), "uuid-2"),
        await sdk.send(pre("Read", NOTES, "toolu_05", agent_id="a1"), "toolu_05"),
        await sdk.send(post("Read", NOTES, "toolu_05", READ_NOTES, 8, agent_id="a1"), "toolu_05"),
        await sdk.send(subagent_stop("a1", "the notes look fine"), "uuid-3"),
        await sdk.send(post("Agent", DELEGATE, "toolu_04", DELEGATED, 300), "toolu_04"),
        await sdk.send(stop("all tidy"), "uuid-4"),
    ]


DENY_RM: HookJSONOutput = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "onlooker blocked this Bash call: not on this machine",
    }
}


class TestTypedHookInputs:
    async def test_a_turn_is_an_execution_and_a_subagent_its_child(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            outputs = await one_turn(Sdk(hooks(recorded.engine, program="notes-agent")))
        recorder = recorded.recorder

        assert outputs[:5] == [{}] * 5
        assert outputs[5] == DENY_RM
        assert outputs[6:] == [{}] * 7
        check_stream(recorder.events)
        root, child = recorder.of(ExecutionStarted)
        assert (root.program, root.trigger.kind, root.input) == (
            "notes-agent",
            "claude-agent-sdk",
            {"prompt": "tidy my notes"},
        )
        assert root.trigger.metadata == {"session_id": SESSION, "prompt_id": PROMPT_ID}
        assert tool_events(recorder, root.execution_id) == [
            ("ToolCallStarted", "Write", "toolu_01", None),
            ("ToolCallFinished", "Write", "toolu_01", "completed"),
            ("ToolCallStarted", "Read", "toolu_02", None),
            ("ToolCallFinished", "Read", "toolu_02", "failed"),
            ("ToolCallStarted", "Bash", "toolu_03", None),
            ("ToolCallFinished", "Bash", "toolu_03", "blocked"),
            ("ToolCallStarted", "Agent", "toolu_04", None),
            ("ToolCallFinished", "Agent", "toolu_04", "completed"),
        ]
        assert (child.program, child.input) == ("general-purpose", {"prompt": "check notes.md"})
        assert child.trigger.metadata == {
            "session_id": SESSION,
            "agent_id": "a1",
            "agent_type": "general-purpose",
        }
        assert child.attribution.parent_execution_id == root.execution_id
        assert child.attribution.parent_tool_call_id == "toolu_04"
        assert child.attribution.depth == 1
        assert tool_events(recorder, child.execution_id) == [
            ("ToolCallStarted", "Read", "toolu_05", None),
            ("ToolCallFinished", "Read", "toolu_05", "completed"),
        ]
        # The child ends (SubagentStop) before the Agent call that ran it, which ends before Stop.
        assert [
            (e.kind, e.execution_id)
            for e in recorder.events
            if isinstance(e, ExecutionFinished)
            or (isinstance(e, ToolCallFinished) and e.tool == "Agent")
        ] == [
            ("ExecutionFinished", child.execution_id),
            ("ToolCallFinished", root.execution_id),
            ("ExecutionFinished", root.execution_id),
        ]

        written, failed, refused, delegated = recorder.of(ToolCallFinished, root.execution_id)
        assert (written.result, written.duration_ms) == (WRITTEN, 36)
        assert failed.error is not None and failed.error.message == "File does not exist."
        assert (failed.error.cause, failed.duration_ms) == ("failure", 5)
        assert refused.error is not None and "not on this machine" in refused.error.message
        assert delegated.result == DELEGATED
        finished_child, finished_root = recorder.of(ExecutionFinished)
        assert (finished_child.status, finished_child.result) == (
            "completed",
            "the notes look fine",
        )
        assert (finished_root.status, finished_root.result) == ("completed", "all tidy")

        tree = await assert_history_and_audit(recorded, root.execution_id)
        assert [(c.tool_call_id, c.tool, c.status) for c in tree.tool_calls] == [
            ("toolu_01", "Write", "completed"),
            ("toolu_02", "Read", "failed"),
            ("toolu_03", "Bash", "blocked"),
            ("toolu_04", "Agent", "completed"),
        ]
        (subtree,) = tree.children
        assert (subtree.parent_tool_call_id, subtree.status) == ("toolu_04", "completed")
        assert [(c.tool_call_id, c.status) for c in subtree.tool_calls] == [
            ("toolu_05", "completed")
        ]

    async def test_rewrites_reach_claude(self, tmp_path: Path, check_stream: Check) -> None:
        signed = {"file_path": f"{CWD}/signed.txt", "content": "hi\n"}
        secret = {"file_path": f"{CWD}/secret.txt"}
        read = {"type": "text", "file": {"filePath": secret["file_path"], "content": "pw=1\n"}}
        answer = {"content": [{"type": "text", "text": "42"}]}
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("go"))
            rewritten_input = await sdk.send(pre("Write", signed, "toolu_1"))
            await sdk.send(post("Write", signed, "toolu_1", {"type": "create"}, 3))
            await sdk.send(pre("Read", secret, "toolu_2"))
            rewritten_output = await sdk.send(post("Read", secret, "toolu_2", read, 2))
            await sdk.send(pre("mcp__calc__answer", {}, "toolu_3"))
            untouched = await sdk.send(post("mcp__calc__answer", {}, "toolu_3", answer, 1))
            await sdk.send(stop("done"))

        assert rewritten_input == {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "updatedInput": {"file_path": signed["file_path"], "content": "hi\n-- onlooker\n"},
            }
        }
        redacted = {
            "type": "text",
            "file": {"filePath": secret["file_path"], "content": "[redacted]\n"},
        }
        assert rewritten_output == {
            "hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": redacted}
        }
        assert untouched == {}
        check_stream(recorded.recorder.events)
        started = recorded.recorder.of(ToolCallStarted)
        assert started[0].args == {"file_path": signed["file_path"], "content": "hi\n-- onlooker\n"}
        assert recorded.recorder.of(ToolCallFinished)[1].result == redacted

    async def test_a_subagent_records_the_prompt_a_pre_hook_left(self, tmp_path: Path) -> None:
        def narrow(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={**use.tool_input, "prompt": "only read notes.md"})

        async with engine_for(tmp_path, [HookMatcher(pattern="Agent", pre=(narrow,))]) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("go"))
            answer = await sdk.send(pre("Agent", DELEGATE, "toolu_a"))
            await sdk.send(subagent_start("a1"))
            await sdk.send(subagent_stop("a1", "ok"))
            await sdk.send(
                post("Agent", DELEGATE | {"prompt": "only read notes.md"}, "toolu_a", DELEGATED, 5)
            )
            await sdk.send(stop("done"))

        narrowed = DELEGATE | {"prompt": "only read notes.md"}
        assert answer == {
            "hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": narrowed}
        }
        _, child = recorded.recorder.of(ExecutionStarted)
        assert child.attribution.parent_tool_call_id == "toolu_a"
        assert child.input == {"prompt": "only read notes.md"}  # what the sub-agent was given

    async def test_an_mcp_tool_output_is_rewritten_both_ways(self, tmp_path: Path) -> None:
        def shout(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(modified_output={"content": [{"type": "text", "text": "LOUD"}]})

        async with engine_for(tmp_path, [HookMatcher(pattern="mcp__*", post=(shout,))]) as rec:
            sdk = Sdk(hooks(rec.engine))
            await sdk.send(pre("mcp__calc__answer", {}, "toolu_1"))
            output = await sdk.send(post("mcp__calc__answer", {}, "toolu_1", {"content": []}, 1))
        loud = {"content": [{"type": "text", "text": "LOUD"}]}
        assert output == {
            "hookSpecificOutput": {
                "hookEventName": "PostToolUse",
                "updatedToolOutput": loud,
                "updatedMCPToolOutput": loud,
            }
        }

    async def test_a_background_subagent_outlives_stop(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        launched = {"isAsync": True, "status": "async_launched", "agentId": "a1"}
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("look around"))
            await sdk.send(pre("Agent", DELEGATE, "toolu_1"))
            await sdk.send(subagent_start("a1"))
            await sdk.send(post("Agent", DELEGATE, "toolu_1", launched, 4))
            await sdk.send(pre("Read", NOTES, "toolu_2", agent_id="a1"))
            await sdk.send(stop("started a helper", "a1"))  # the helper still runs
            root, child = recorded.recorder.of(ExecutionStarted)
            assert recorded.recorder.of(ExecutionFinished) == []
            await sdk.send(post("Read", NOTES, "toolu_2", READ_NOTES, 8, agent_id="a1"))
            await sdk.send(subagent_stop("a1", "found it"))
            # The CLI then wakes the session with the helper's report: a new turn.
            await sdk.send(prompt("<task-notification>found it</task-notification>", "p2"))
            await sdk.send(stop("the helper found it"))

        recorder = recorded.recorder
        check_stream(recorder.events)
        first_child, first_root, second = recorder.of(ExecutionFinished)
        assert (first_child.execution_id, first_child.result) == (child.execution_id, "found it")
        assert (first_root.execution_id, first_root.status) == (root.execution_id, "completed")
        assert first_root.result == "started a helper"
        assert second.result == "the helper found it"
        assert tool_events(recorder, child.execution_id)[-1] == (
            "ToolCallFinished",
            "Read",
            "toolu_2",
            "completed",
        )
        await assert_history_and_audit(recorded, root.execution_id)

    async def test_a_launch_result_links_its_subagent_exactly(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("two helpers"))
            await sdk.send(pre("Agent", DELEGATE, "toolu_x"))
            await sdk.send(pre("Agent", DELEGATE, "toolu_y"))
            # toolu_y's background launch reports its agent before that agent's SubagentStart.
            launched = {"isAsync": True, "status": "async_launched", "agentId": "b"}
            await sdk.send(post("Agent", DELEGATE, "toolu_y", launched, 3))
            await sdk.send(subagent_start("b"))
            await sdk.send(subagent_start("a"))
            await sdk.send(post("Agent", DELEGATE, "toolu_x", {**launched, "agentId": "a"}, 3))
            await sdk.send(subagent_stop("a", "a done"))
            await sdk.send(subagent_stop("b", "b done"))
            await sdk.send(stop("both done"))
        check_stream(recorded.recorder.events)
        _, first, second = recorded.recorder.of(ExecutionStarted)
        assert (first.trigger.metadata["agent_id"], first.attribution.parent_tool_call_id) == (
            "b",
            "toolu_y",
        )
        assert (second.trigger.metadata["agent_id"], second.attribution.parent_tool_call_id) == (
            "a",
            "toolu_x",
        )

    async def test_stop_waits_for_a_launched_subagent_yet_to_start(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        launched = {"isAsync": True, "status": "async_launched", "agentId": "a1"}
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("look around"))
            await sdk.send(pre("Agent", DELEGATE, "toolu_1"))
            await sdk.send(post("Agent", DELEGATE, "toolu_1", launched, 4))
            await sdk.send(stop("started a helper", "a1"))
            await sdk.send(subagent_start("a1"))
            await sdk.send(subagent_stop("a1", "found it"))
        check_stream(recorded.recorder.events)
        root, child = recorded.recorder.of(ExecutionStarted)
        assert child.attribution.parent_tool_call_id == "toolu_1"
        assert [(e.execution_id, e.status) for e in recorded.recorder.of(ExecutionFinished)] == [
            (child.execution_id, "completed"),
            (root.execution_id, "completed"),
        ]

    async def test_stop_closes_a_subagent_whose_stop_never_came(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(pre("Agent", DELEGATE, "toolu_1"))  # no prompt hook: starts the turn
            await sdk.send(subagent_start("a1"))
            await sdk.send(post("Agent", DELEGATE, "toolu_1", DELEGATED, 4))
            await sdk.send(stop("done"))  # the CLI lists no background task any more
            child_finished, root_finished = recorded.recorder.of(ExecutionFinished)
        check_stream(recorded.recorder.events)
        assert child_finished.status == "cancelled"
        assert (root_finished.status, root_finished.result) == ("completed", "done")
        assert recorded.recorder.of(ExecutionStarted)[0].input is None

    async def test_abort_denies_and_stops_claude(self, tmp_path: Path, check_stream: Check) -> None:
        async with engine_for(tmp_path, [HookMatcher(pattern="Bash", pre=(abort,))]) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("clean up"))
            output = await sdk.send(pre("Bash", RM, "toolu_1"))
            (finished,) = recorded.recorder.of(ExecutionFinished)
        reason = "onlooker aborted the run at this Bash call: kill switch"
        assert output == {
            "continue_": False,
            "stopReason": reason,
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            },
        }
        assert finished.status == "failed"
        assert finished.error is not None and "kill switch" in finished.error.message
        check_stream(recorded.recorder.events)

    async def test_after_an_abort_the_turn_refuses_every_later_call(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        """DESIGN §10: after an ABORT every later call is refused. Claude may still ask for
        a parallel sibling of the aborted call, or a sub-agent's next step: each is denied
        (and stops the turn), none starts a new execution; the session's next prompt does."""
        async with engine_for(tmp_path, [HookMatcher(pattern="Bash", pre=(abort,))]) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("clean up"))
            await sdk.send(pre("Agent", DELEGATE, "toolu_agent"))
            await sdk.send(subagent_start("agent_1"))
            await sdk.send(pre("Bash", RM, "toolu_1", agent_id="agent_1"))
            sibling = await sdk.send(pre("Write", NOTES, "toolu_2"))
            next_step = await sdk.send(pre("Read", MISSING, "toolu_3", agent_id="agent_1"))
            await sdk.send(stop("done"))
            executions = {e.execution_id for e in recorded.recorder.events}
            await sdk.send(prompt("read it", prompt_id="next"))
            allowed = await sdk.send(pre("Read", MISSING, "toolu_4"))
        reason = "onlooker refused this {} call: the run was aborted (kill switch)"
        for output, tool in ((sibling, "Write"), (next_step, "Read")):
            assert output == {
                "continue_": False,
                "stopReason": reason.format(tool),
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": reason.format(tool),
                },
            }
        assert allowed == {}
        assert len(executions) == 2  # the turn and its sub-agent: no third one
        started = [e.tool_call_id for e in recorded.recorder.of(ToolCallStarted)]
        assert started == ["toolu_agent", "toolu_1", "toolu_4"]
        child, root, after = recorded.recorder.of(ExecutionFinished)[:3]
        assert (child.status, root.status) == (
            "failed",
            "failed",
        )  # the abort was in the child, as natively
        assert after.execution_id not in executions
        check_stream(recorded.recorder.events)

    async def test_a_sibling_whose_pre_hooks_ran_during_the_abort_gets_the_abort_answer(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        """The SDK answers parallel PreToolUse requests concurrently: a sibling still in its
        pre-hooks when another call ABORTs gets the same deny, and stops the turn too."""
        aborted = anyio.Event()

        async def waits_for_the_abort(use: ToolUseContext) -> None:
            await aborted.wait()

        def abort_now(use: ToolUseContext) -> PreHookResult:
            aborted.set()
            return abort(use)

        slow = HookMatcher(pattern="Write", pre=(waits_for_the_abort,))
        kill = HookMatcher(pattern="Bash", pre=(abort_now,))
        answers: dict[str, HookJSONOutput] = {}
        async with engine_for(tmp_path, [slow, kill]) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("clean up"))

            async def ask(tool: str, args: dict[str, Any], tool_use_id: str) -> None:
                answers[tool] = await sdk.send(pre(tool, args, tool_use_id))

            async with anyio.create_task_group() as group:
                group.start_soon(ask, "Write", NOTES, "toolu_1")
                await anyio.sleep(0.01)  # the Write call waits in its pre-hook
                group.start_soon(ask, "Bash", RM, "toolu_2")
        reason = "onlooker refused this Write call: the run was aborted (kill switch)"
        assert answers["Write"] == {
            "continue_": False,
            "stopReason": reason,
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            },
        }
        assert answers["Bash"].get("continue_") is False
        check_stream(recorded.recorder.events)

    async def test_an_interrupted_tool_is_cancelled_and_skip_is_a_deny(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        def skip(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.SKIP, reason="dry run")

        async with engine_for(tmp_path, [HookMatcher(pattern="Glob", pre=(skip,))]) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(pre("Read", NOTES, "toolu_1"))
            await sdk.send(failure("Read", NOTES, "toolu_1", "Interrupted by user", interrupt=True))
            skipped = await sdk.send(pre("Glob", {"pattern": "*.md"}, "toolu_2"))
            await sdk.send(stop("ok"))
        check_stream(recorded.recorder.events)
        interrupted, glob = recorded.recorder.of(ToolCallFinished)
        assert interrupted.status == "cancelled"
        assert interrupted.error is not None and interrupted.error.cause == "interrupt"
        assert glob.status == "skipped"
        assert skipped == {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "onlooker skipped this Glob call: dry run",
            }
        }

    async def test_claude_builtin_tools_are_declared(self, tmp_path: Path) -> None:
        async with engine_for(tmp_path, [onlooker.policies.require_intent()]) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            write = await sdk.send(pre("Write", NOTES, "toolu_1"))
            read = await sdk.send(pre("Read", NOTES, "toolu_2"))
            hooks(recorded.engine)  # declaring them twice is harmless
        assert write == {  # Write is mutating: no intent, no write
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "onlooker blocked this Write call: tool 'Write' is "
                "mutating and no intent is selected: select one first "
                "(ctx.select_intent or run.select_intent)",
            }
        }
        assert read == {}  # Read is not

    async def test_a_call_refused_outside_onlooker_fails_at_its_batch(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        """A hook of the application's own denied the first Agent call: it gets no PostToolUse*;
        its batch closes it (failed, what the model read) and the next Agent call's sub-agent
        is linked to that call, not to the refused one."""
        refused = "PreToolUse:Agent hook error: not that task"
        other = {**DELEGATE, "prompt": "look again"}
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("delegate"))
            await sdk.send(pre("Agent", DELEGATE, "toolu_no"))
            await sdk.send(batch(("Agent", DELEGATE, "toolu_no", refused)))
            await sdk.send(pre("Agent", other, "toolu_ok"))
            await sdk.send(subagent_start("a1"))
            await sdk.send(subagent_stop("a1", "looked"))
            await sdk.send(post("Agent", other, "toolu_ok", DELEGATED, 30))
            await sdk.send(batch(("Agent", other, "toolu_ok", "looked")))
            await sdk.send(stop("done"))
        check_stream(recorded.recorder.events)
        root, child = recorded.recorder.of(ExecutionStarted)
        assert (child.attribution.parent_tool_call_id, child.input) == (
            "toolu_ok",
            {"prompt": "look again"},
        )
        no, ok = recorded.recorder.of(ToolCallFinished, root.execution_id)
        assert (no.tool_call_id, no.status, ok.status) == ("toolu_no", "failed", "completed")
        assert no.error is not None
        assert (no.error.type, no.error.message) == ("ToolRefused", refused)

    async def test_a_refused_call_the_batch_gives_no_response_is_refused(
        self, tmp_path: Path
    ) -> None:
        """Its message read "null" (the JSON of a missing response)."""
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("clean"))
            await sdk.send(pre("Read", MISSING, "toolu_r"))
            await sdk.send(batch(("Read", MISSING, "toolu_r", None)))
            await sdk.send(stop("done"))
        (refused,) = recorded.recorder.of(ToolCallFinished)
        assert refused.error is not None
        assert (refused.error.type, refused.error.message) == ("ToolRefused", "refused")

    async def test_an_agent_call_closed_with_its_turn_links_no_later_sub_agent(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        """An Agent call whose sub-agent never started is closed with its turn; the next
        turn's sub-agent is linked to that turn's own Agent call."""
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("one", "p1"))
            await sdk.send(pre("Agent", DELEGATE, "toolu_1"))
            await sdk.send(stop("gave up"))
            await sdk.send(prompt("two", "p2"))
            await sdk.send(pre("Agent", DELEGATE, "toolu_2"))
            await sdk.send(subagent_start("a2"))
            await sdk.send(subagent_stop("a2", "checked"))
            await sdk.send(post("Agent", DELEGATE, "toolu_2", DELEGATED, 30))
            await sdk.send(stop("done"))
        check_stream(recorded.recorder.events)
        _, second, child = recorded.recorder.of(ExecutionStarted)
        assert child.attribution.parent_execution_id == second.execution_id
        assert child.attribution.parent_tool_call_id == "toolu_2"

    async def test_a_call_whose_pre_tool_use_was_missed_is_recorded(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture, check_stream: Check
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            with caplog.at_level(logging.WARNING, logger="onlooker.integrations.claude_agent_sdk"):
                await sdk.send(post("Read", NOTES, "toolu_1", READ_NOTES, 8))
            await sdk.send(stop("ok"))
        assert "without a recorded PreToolUse" in caplog.text
        check_stream(recorded.recorder.events)
        (finished,) = recorded.recorder.of(ToolCallFinished)
        assert (finished.tool_call_id, finished.status, finished.duration_ms) == (
            "toolu_1",
            "completed",
            8,
        )


class TestAdapterErrors:
    async def test_its_own_errors_are_logged_and_answered_empty(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(pre("Read", NOTES, "toolu_1"))
            broken = post("Read", NOTES, "toolu_1", READ_NOTES, 8)
            del broken["tool_use_id"]  # type: ignore[misc]  # a malformed input, on purpose
            with caplog.at_level(logging.ERROR, logger="onlooker.integrations.claude_agent_sdk"):
                assert await sdk.send(broken) == {}
        assert caplog.text.count("onlooker could not record Claude's") == 1

    async def test_a_repeated_tool_use_id_is_still_governed(self, tmp_path: Path) -> None:
        """A proxy in front of the API may repeat an id: the call is recorded ``<id>#2``."""
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(prompt("tidy up"))
            assert await sdk.send(pre("Read", NOTES, "dup")) == {}
            await sdk.send(post("Read", NOTES, "dup", READ_NOTES, 8))
            denied = await sdk.send(pre("Bash", RM, "dup"))
        assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"  # type: ignore[typeddict-item]
        finished = recorded.recorder.of(ToolCallFinished)
        assert [(f.tool_call_id, f.status) for f in finished] == [
            ("dup", "completed"),
            ("dup#2", "blocked"),
        ]

    async def test_a_closed_engine_never_breaks_the_agent(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
        with caplog.at_level(logging.ERROR, logger="onlooker.integrations.claude_agent_sdk"):
            assert await sdk.send(prompt("hello")) == {}
            assert await sdk.send(pre("Bash", RM, "toolu_1")) == {}
        assert "UserPromptSubmit" in caplog.text and "PreToolUse" in caplog.text

    async def test_a_refusal_is_sent_even_when_recording_fails(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        async def broken(self: object, turn: object, reason: str) -> None:
            raise RuntimeError("disk full")

        monkeypatch.setattr(_adapter.Adapter, "_abort", broken)
        async with engine_for(tmp_path, [HookMatcher(pattern="Bash", pre=(abort,))]) as recorded:
            output = await Sdk(hooks(recorded.engine)).send(pre("Bash", RM, "toolu_1"))
        reason = "onlooker aborted the run at this Bash call: kill switch"
        assert output == {
            "continue_": False,
            "stopReason": reason,
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            },
        }

    async def test_a_post_hook_abort_is_sent_even_when_recording_fails(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        async def broken(self: object, turn: object, reason: str) -> None:
            raise RuntimeError("disk full")

        def stop(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(action=HookAction.ABORT)

        monkeypatch.setattr(_adapter.Adapter, "_abort", broken)
        async with engine_for(tmp_path, [HookMatcher(post=(stop,))]) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(pre("Read", NOTES, "toolu_1"))
            output = await sdk.send(post("Read", NOTES, "toolu_1", READ_NOTES, 8))
        assert output["continue_"] is False  # type: ignore[typeddict-item]

    async def test_rewrites_reach_the_cli_as_json(self, tmp_path: Path) -> None:
        """The SDK sends the CLI JSON: a rewrite holding a Path would fail to send, and the
        CLI would run the original call the record says was rewritten."""

        def elsewhere(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={**use.tool_input, "file_path": Path("/safe/x")})

        def stamped(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(modified_output={"read_at": Path("/safe/x")})

        governed = [HookMatcher(pattern="Write", pre=(elsewhere,), post=(stamped,))]
        async with engine_for(tmp_path, governed) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            before = await sdk.send(pre("Write", NOTES, "toolu_1"))
            after = await sdk.send(post("Write", NOTES, "toolu_1", {"ok": True}, 8))
        json.dumps(before)  # what the SDK does before writing to the CLI
        json.dumps(after)
        updated = before["hookSpecificOutput"]["updatedInput"]  # type: ignore[typeddict-item]
        assert updated["file_path"] == "/safe/x"
        (started,) = recorded.recorder.of(onlooker.ToolCallStarted)
        assert started.args == updated  # what the CLI runs is what is recorded

    async def test_an_infinite_duration_is_onlookers_own(self, tmp_path: Path) -> None:
        async with engine_for(tmp_path) as recorded:
            sdk = Sdk(hooks(recorded.engine))
            await sdk.send(pre("Read", NOTES, "toolu_1"))
            broken = post("Read", NOTES, "toolu_1", READ_NOTES, 8)
            broken["duration_ms"] = float("inf")  # type: ignore[typeddict-item]
            await sdk.send(broken)
        (finished,) = recorded.recorder.of(ToolCallFinished)
        assert finished.status == "completed" and finished.duration_ms < 60_000

    async def test_a_permission_callback_that_raises_fails_its_question(
        self, tmp_path: Path
    ) -> None:
        async def broken(
            tool: str, args: dict[str, Any], context: ToolPermissionContext
        ) -> PermissionResult:
            raise RuntimeError("the approval service is down")

        async with engine_for(tmp_path) as recorded:
            registered = hooks(recorded.engine)
            sdk = Sdk(registered)
            await sdk.send(prompt("tidy up"))
            await sdk.send(pre("Write", NOTES, "toolu_1"), "toolu_1")
            with pytest.raises(RuntimeError, match="service is down"):  # the SDK tells the CLI
                await approvals(registered, broken)(
                    "Write", NOTES, ToolPermissionContext(tool_use_id="toolu_1")
                )
            await sdk.send(stop("gave up"))
        (resolved,) = recorded.recorder.of(InteractionResolved)
        assert resolved.status == "failed" and resolved.error is not None
        assert "service is down" in resolved.error.message

    async def test_a_permission_answer_goes_through_when_recording_fails(
        self, tmp_path: Path
    ) -> None:
        async def allow(
            tool: str, args: dict[str, Any], context: ToolPermissionContext
        ) -> PermissionResult:
            return PermissionResultDeny(message="no")

        async with engine_for(tmp_path) as recorded:
            registered = hooks(recorded.engine)
            await Sdk(registered).send(pre("Write", NOTES, "toolu_1"), "toolu_1")
        context = ToolPermissionContext(tool_use_id="toolu_1")
        answer = await approvals(registered, allow)("Write", NOTES, context)  # engine closed
        assert answer == PermissionResultDeny(message="no")

    def test_approvals_need_the_hooks_mapping(self) -> None:
        async def allow(
            tool: str, args: dict[str, Any], context: ToolPermissionContext
        ) -> PermissionResult:
            return PermissionResultAllow()

        with pytest.raises(ValueError, match=r"hooks\(engine\)"):
            approvals({}, allow)
        with pytest.raises(TypeError, match="can_use_tool must be a callable, not NoneType"):
            approvals(hooks(onlooker.ExecutionEngine()), None)  # type: ignore[arg-type]

    def test_a_missing_sdk_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)
        with pytest.raises(ImportError, match=r'pip install "onlooker\[claude-agent-sdk\]"'):
            hooks(onlooker.ExecutionEngine())

    def test_importing_without_the_sdk_names_the_extra(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)
        monkeypatch.delitem(sys.modules, "onlooker.integrations.claude_agent_sdk")
        with pytest.raises(ImportError, match=r'pip install "onlooker\[claude-agent-sdk\]"'):
            importlib.import_module("onlooker.integrations.claude_agent_sdk")


# -- the real CLI against a scripted Messages API -------------------------------------------


Block = dict[str, Any]


def tool_use(tool_use_id: str, name: str, args: dict[str, Any]) -> Block:
    return {"type": "tool_use", "id": tool_use_id, "name": name, "input": args}


def say(text: str) -> Block:
    return {"type": "text", "text": text}


API_ERROR: Final[list[Block]] = [{"type": "api_error"}]
"""A reply in a script that the API answers with an error (HTTP 400) instead."""
API_ERROR_BODY: Final = (
    b'{"type":"error","error":{"type":"invalid_request_error","message":"scripted"}}'
)


class MessagesApi:
    """A scripted Anthropic Messages API on 127.0.0.1.

    ``scripts`` maps a marker found in a conversation's first user message
    (the session's prompt, or a sub-agent's) to its assistant replies, one
    per request; the reply is chosen by how many assistant messages the
    conversation already holds. Anything else gets a plain "ok".
    """

    def __init__(self, scripts: dict[str, list[list[Block]]]) -> None:
        self.scripts = scripts
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @contextmanager
    def serving(self) -> Iterator[MessagesApi]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join()

    def reply(self, request: dict[str, Any]) -> list[Block]:
        first = next(m for m in request["messages"] if m["role"] == "user")
        content = first["content"]
        text = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
        turns = sum(m["role"] == "assistant" for m in request["messages"])
        for marker, replies in self.scripts.items():
            if marker in text and turns < len(replies):
                return replies[turns]
        return [say("ok")]

    def stream(self, blocks: list[Block], model: str) -> bytes:
        """The reply as the API's server-sent events (each message its own id)."""
        message = {"id": f"msg_{next(self._ids)}", "type": "message", "role": "assistant"}
        usage = {"input_tokens": 1, "output_tokens": 1}
        events: list[dict[str, Any]] = [
            {
                "type": "message_start",
                "message": {
                    **message,
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                },
            }
        ]
        for index, block in enumerate(blocks):
            start: Block
            delta: Block
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [
                {"type": "content_block_start", "index": index, "content_block": start},
                {"type": "content_block_delta", "index": index, "delta": delta},
                {"type": "content_block_stop", "index": index},
            ]
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        ended = {"stop_reason": stop_reason, "stop_sequence": None}
        events += [
            {"type": "message_delta", "delta": ended, "usage": {"output_tokens": 1}},
            {"type": "message_stop"},
        ]
        return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if self.path.startswith("/v1/messages/count_tokens"):
                    self.send(200, "application/json", b'{"input_tokens": 1}')
                elif self.path.startswith("/v1/messages") and request.get("stream"):
                    api.requests.append(request)
                    blocks = api.reply(request)
                    if blocks is API_ERROR:
                        self.send(400, "application/json", API_ERROR_BODY)
                        return
                    self.send(
                        200, "text/event-stream", api.stream(blocks, request.get("model", "x"))
                    )
                else:
                    self.send(404, "application/json", b"{}")

            def do_GET(self) -> None:
                self.send(404, "application/json", b"{}")

        return Handler


def tool_result(api: MessagesApi, tool_use_id: str) -> Any:
    """What the CLI sent the model as the result of this call (every later request repeats it)."""
    return next(
        block
        for request in api.requests
        for message in request["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id
    )


def offline_env(tmp_path: Path, api: MessagesApi) -> dict[str, str]:
    """The CLI's environment: the scripted API, a home of its own, no network."""
    return {
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": "sk-offline",
        "CLAUDE_CODE_USE_BEDROCK": "",
        "CLAUDE_CODE_USE_VERTEX": "",
        "HOME": str(tmp_path / "home"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "home" / ".claude"),
        "CLAUDE_CODE_TMPDIR": str(tmp_path / "tmp"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
    }


async def ask_prompt() -> AsyncIterator[dict[str, Any]]:
    """The prompt ``ASK-PROMPT go`` as a stream (``can_use_tool`` needs one)."""
    yield {"type": "user", "message": {"role": "user", "content": "ASK-PROMPT go"}}


def asking_options(
    recorded: Recorded,
    person: CanUseTool,
    work: Path,
    cli: Path,
    api: MessagesApi,
    tmp_path: Path,
) -> ClaudeAgentOptions:
    """The real CLI's options with onlooker's hooks and ``person`` asked through ``approvals``."""
    registered = hooks(recorded.engine, program="asking")
    return ClaudeAgentOptions(
        hooks=registered,
        can_use_tool=approvals(registered, person),
        cwd=work,
        cli_path=cli,
        setting_sources=[],
        env=offline_env(tmp_path, api),
    )


@pytest.fixture
def bundled_cli() -> Path:
    import claude_agent_sdk

    cli = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    if not cli.is_file():  # only the platform wheels bundle it; a source install does not
        pytest.skip("this claude-agent-sdk install has no bundled CLI")
    return cli


class TestBundledCli:
    async def test_an_api_error_fails_the_turn(
        self, tmp_path: Path, bundled_cli: Path, check_stream: Check
    ) -> None:
        """The CLI's StopFailure (no Stop comes): the turn was left open until the engine
        closed it cancelled."""
        work = tmp_path / "work"
        work.mkdir()
        write = tool_use("toolu_w", "Write", {"file_path": str(work / "a.txt"), "content": "a\n"})
        api = MessagesApi({"MAIN-PROMPT": [[write], API_ERROR]})
        async with engine_for(tmp_path) as recorded:
            options = ClaudeAgentOptions(
                hooks=hooks(recorded.engine, program="scripted"),
                cwd=work,
                cli_path=bundled_cli,
                allowed_tools=["Write"],
                setting_sources=[],
                env=offline_env(tmp_path, api),
            )
            with api.serving(), anyio.fail_after(60), pytest.raises(Exception, match="API Error"):
                [m async for m in query(prompt="MAIN-PROMPT go", options=options)]
            [end] = recorded.recorder.of(ExecutionFinished)  # before the engine closes
        assert end.status == "failed" and end.error is not None
        assert (end.error.type, end.error.cause) == ("APIError", "failure")
        assert "scripted" in end.error.message
        assert [(e.tool_call_id, e.status) for e in recorded.recorder.of(ToolCallFinished)] == [
            ("toolu_w", "completed")
        ]
        check_stream(recorded.recorder.events)

    async def test_the_real_cli_is_tracked_and_governed(
        self, tmp_path: Path, bundled_cli: Path, check_stream: Check
    ) -> None:
        work = tmp_path / "work"
        work.mkdir()
        (work / "secret.txt").write_text("password=hunter2\n")
        api = MessagesApi(
            {
                "MAIN-PROMPT": [
                    [say("writing"), tool_use("toolu_w", "Write", {"file_path": str(work / "signed.txt"), "content": "hi\n"})],
                    [tool_use("toolu_r", "Read", {"file_path": str(work / "missing.txt")})],
                    [tool_use("toolu_b", "Write", {"file_path": str(work / "blocked.txt"), "content": "no\n"})],
                    [tool_use("toolu_a", "Task", {"description": "peek", "prompt": "SUB-PROMPT read it",
                                                   "subagent_type": "general-purpose", "run_in_background": False})],
                    [say("all done")],
                ],
                "SUB-PROMPT": [
                    [tool_use("toolu_s", "Read", {"file_path": str(work / "secret.txt")})],
                    [say("read it")],
                ],
            }
        )  # fmt: skip
        async with engine_for(tmp_path) as recorded:
            options = ClaudeAgentOptions(
                hooks=hooks(recorded.engine, program="scripted"),
                cwd=work,
                cli_path=bundled_cli,
                allowed_tools=["Read", "Write", "Agent", "Task"],
                setting_sources=[],
                env=offline_env(tmp_path, api),
            )
            with api.serving(), anyio.fail_after(60):
                messages = [m async for m in query(prompt="MAIN-PROMPT do it", options=options)]
        recorder = recorded.recorder

        assert isinstance(messages[-1], ResultMessage) and messages[-1].result == "all done"
        # Governed for real: the refused Write never ran, the rewrites reached the CLI.
        assert sorted(p.name for p in work.iterdir()) == ["secret.txt", "signed.txt"]
        assert (work / "signed.txt").read_text() == "hi\n-- onlooker\n"
        refusal = tool_result(api, "toolu_b")
        assert refusal["is_error"] is True
        assert "onlooker blocked this Write call: not on this machine" in refusal["content"]
        secret = tool_result(api, "toolu_s")
        assert "[redacted]" in secret["content"] and "hunter2" not in secret["content"]

        check_stream(recorder.events)
        root, child = recorder.of(ExecutionStarted)
        assert (root.program, root.input) == ("scripted", {"prompt": "MAIN-PROMPT do it"})
        assert tool_events(recorder, root.execution_id) == [
            ("ToolCallStarted", "Write", "toolu_w", None),
            ("ToolCallFinished", "Write", "toolu_w", "completed"),
            ("ToolCallStarted", "Read", "toolu_r", None),
            ("ToolCallFinished", "Read", "toolu_r", "failed"),
            ("ToolCallStarted", "Write", "toolu_b", None),
            ("ToolCallFinished", "Write", "toolu_b", "blocked"),
            ("ToolCallStarted", "Agent", "toolu_a", None),
            ("ToolCallFinished", "Agent", "toolu_a", "completed"),
        ]
        assert (child.program, child.attribution.parent_tool_call_id) == (
            "general-purpose",
            "toolu_a",
        )
        assert tool_events(recorder, child.execution_id) == [
            ("ToolCallStarted", "Read", "toolu_s", None),
            ("ToolCallFinished", "Read", "toolu_s", "completed"),
        ]
        finished = {e.execution_id: e for e in recorder.of(ExecutionFinished)}
        assert (finished[child.execution_id].status, finished[child.execution_id].result) == (
            "completed",
            "read it",
        )
        assert (finished[root.execution_id].status, finished[root.execution_id].result) == (
            "completed",
            "all done",
        )
        calls = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
        assert all(calls[i].duration_ms is not None for i in ("toolu_w", "toolu_r", "toolu_s"))
        assert calls["toolu_r"].error is not None
        assert "File does not exist" in calls["toolu_r"].error.message
        tree = await assert_history_and_audit(recorded, root.execution_id)
        assert [c.status for c in tree.tool_calls] == [
            "completed",
            "failed",
            "blocked",
            "completed",
        ]
        assert [c.tool_call_id for c in tree.children[0].tool_calls] == ["toolu_s"]

    async def test_a_permission_prompt_is_an_interaction_of_its_call(
        self, tmp_path: Path, bundled_cli: Path, check_stream: Check
    ) -> None:
        """``can_use_tool`` through ``approvals``: each prompt a question of the call it asks
        about; the denied call, which the CLI never runs (no PostToolUse* comes), failed."""
        work = tmp_path / "work"
        work.mkdir()
        api = MessagesApi(
            {
                "ASK-PROMPT": [
                    [tool_use("toolu_ok", "Write", {"file_path": str(work / "a.txt"), "content": "a\n"})],
                    [tool_use("toolu_no", "Write", {"file_path": str(work / "b.txt"), "content": "b\n"})],
                    [say("done")],
                ]
            }
        )  # fmt: skip
        asked: list[tuple[str, str | None]] = []

        async def person(
            tool: str, args: dict[str, Any], context: ToolPermissionContext
        ) -> PermissionResult:
            asked.append((tool, context.tool_use_id))
            if str(args["file_path"]).endswith("b.txt"):
                return PermissionResultDeny(message="not that one")
            return PermissionResultAllow()

        async with engine_for(tmp_path) as recorded:
            options = asking_options(recorded, person, work, bundled_cli, api, tmp_path)
            with api.serving(), anyio.fail_after(60):
                messages = [m async for m in query(prompt=ask_prompt(), options=options)]
        recorder = recorded.recorder

        assert isinstance(messages[-1], ResultMessage) and messages[-1].result == "done"
        assert asked == [("Write", "toolu_ok"), ("Write", "toolu_no")]
        assert sorted(p.name for p in work.iterdir()) == ["a.txt"]
        check_stream(recorder.events)
        (root,) = recorder.of(ExecutionStarted)
        questions = recorder.of(InteractionStarted)
        assert [q.message for q in questions] == [
            "tool 'Write' (call toolu_ok) awaits approval",
            "tool 'Write' (call toolu_no) awaits approval",
        ]
        assert [(r.status, r.response) for r in recorder.of(InteractionResolved)] == [
            ("accepted", None),
            ("declined", {"message": "not that one"}),
        ]
        assert tool_events(recorder, root.execution_id) == [
            ("ToolCallStarted", "Write", "toolu_ok", None),
            ("ToolCallFinished", "Write", "toolu_ok", "completed"),
            ("ToolCallStarted", "Write", "toolu_no", None),
            ("ToolCallFinished", "Write", "toolu_no", "failed"),
        ]
        denied = recorder.of(ToolCallFinished)[-1]
        assert denied.error is not None
        assert (denied.error.type, denied.error.cause) == ("ToolApprovalRejected", "failure")
        assert "not that one" in denied.error.message
        (finished,) = recorder.of(ExecutionFinished)
        assert finished.status == "completed"
        await assert_history_and_audit(recorded, root.execution_id)

    @pytest.mark.parametrize("answer", ["raises", "not-a-result", "interrupts"])
    async def test_a_prompt_the_cli_refuses_closes_its_call(
        self, tmp_path: Path, bundled_cli: Path, check_stream: Check, answer: str
    ) -> None:
        """A callback that raises, or answers what is no ``PermissionResult``: the CLI
        refuses the call (no PostToolUse* comes), so the call fails with the question; a deny
        that interrupts ends the turn (no Stop comes), cancelled."""
        work = tmp_path / "work"
        work.mkdir()
        write = tool_use("toolu_a", "Write", {"file_path": str(work / "a.txt"), "content": "a"})
        api = MessagesApi({"ASK-PROMPT": [[write], [say("done")]]})

        async def person(
            tool: str, args: dict[str, Any], context: ToolPermissionContext
        ) -> PermissionResult:
            if answer == "raises":
                raise RuntimeError("the prompt's window crashed")
            if answer == "not-a-result":
                return {"behavior": "allow"}  # type: ignore[return-value]  # an app's mistake
            return PermissionResultDeny(message="stop now", interrupt=True)

        async with engine_for(tmp_path) as recorded:
            options = asking_options(recorded, person, work, bundled_cli, api, tmp_path)
            with api.serving(), anyio.fail_after(60), contextlib.suppress(Exception):
                [m async for m in query(prompt=ask_prompt(), options=options)]
            recorder = recorded.recorder
            ended = recorder.of(ExecutionFinished)  # before the engine's close
        assert not (work / "a.txt").exists()
        check_stream(recorder.events)
        [call] = [e for e in recorder.of(ToolCallFinished) if e.tool_call_id == "toolu_a"]
        [resolved] = recorder.of(InteractionResolved)
        if answer == "interrupts":
            assert (resolved.status, call.status) == ("declined", "failed")
            assert [e.status for e in ended] == ["cancelled"]
        else:
            assert (resolved.status, call.status) == ("failed", "failed")

    async def test_an_agent_call_your_own_hook_refuses_links_no_sub_agent(
        self, tmp_path: Path, bundled_cli: Path, check_stream: Check
    ) -> None:
        """The application's own PreToolUse hook denies a Task: the call fails with the CLI's
        words, and the next Task's sub-agent is linked to that Task."""
        work = tmp_path / "work"
        work.mkdir()

        def task(tool_use_id: str, marker: str) -> Block:
            args = {"description": marker, "prompt": f"{marker} please",
                    "subagent_type": "general-purpose", "run_in_background": False}  # fmt: skip
            return tool_use(tool_use_id, "Task", args)

        api = MessagesApi(
            {
                "MAIN-PROMPT": [
                    [task("toolu_no", "DENIED")],
                    [task("toolu_ok", "SUB")],
                    [say("done")],
                ]
            }
        )

        async def mine(data: HookInput, tool_use_id: str | None, context: Any) -> HookJSONOutput:
            if "DENIED" not in json.dumps(data.get("tool_input")):
                return {}
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "not that task",
                }
            }

        async with engine_for(tmp_path) as recorded:
            registered = hooks(recorded.engine, program="main")
            registered["PreToolUse"].append(SdkHookMatcher(matcher="Agent|Task", hooks=[mine]))
            options = ClaudeAgentOptions(
                hooks=registered,
                cwd=work,
                cli_path=bundled_cli,
                allowed_tools=["Task", "Agent"],
                setting_sources=[],
                env=offline_env(tmp_path, api),
            )
            with api.serving(), anyio.fail_after(60):
                [m async for m in query(prompt="MAIN-PROMPT go", options=options)]
            recorder = recorded.recorder
            calls = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}  # before the close
        check_stream(recorder.events)
        [child] = [e for e in recorder.of(ExecutionStarted) if e.attribution.depth == 1]
        assert (child.attribution.parent_tool_call_id, child.input) == (
            "toolu_ok",
            {"prompt": "SUB please"},
        )
        assert (calls["toolu_no"].status, calls["toolu_ok"].status) == ("failed", "completed")
        refused = calls["toolu_no"].error
        assert refused is not None and refused.type == "ToolRefused"
        assert "not that task" in refused.message

    async def test_a_sub_agents_api_error_fails_only_the_sub_agent(
        self, tmp_path: Path, bundled_cli: Path, check_stream: Check
    ) -> None:
        """StopFailure with an agent_id: it failed the main turn, whose later calls then went
        to a second root execution."""
        work = tmp_path / "work"
        work.mkdir()
        task = tool_use(
            "toolu_t",
            "Task",
            {"description": "d", "prompt": "SUB go", "subagent_type": "general-purpose",
             "run_in_background": False},
        )  # fmt: skip
        read = tool_use("toolu_r", "Read", {"file_path": str(work / "x.txt")})
        api = MessagesApi({"MAIN-PROMPT": [[task], [read], [say("main done")]], "SUB": [API_ERROR]})
        async with engine_for(tmp_path) as recorded:
            options = ClaudeAgentOptions(
                hooks=hooks(recorded.engine, program="main"),
                cwd=work,
                cli_path=bundled_cli,
                allowed_tools=["Task", "Agent", "Read"],
                setting_sources=[],
                env=offline_env(tmp_path, api),
            )
            with api.serving(), anyio.fail_after(60), contextlib.suppress(Exception):
                [m async for m in query(prompt="MAIN-PROMPT go", options=options)]
        recorder = recorded.recorder
        check_stream(recorder.events)
        roots = [e for e in recorder.of(ExecutionStarted) if e.attribution.depth == 0]
        assert len(roots) == 1
        ends = {e.execution_id: e for e in recorder.of(ExecutionFinished)}
        assert ends[roots[0].execution_id].status == "completed"
        [child] = [e for e in recorder.of(ExecutionStarted) if e.attribution.depth == 1]
        assert ends[child.execution_id].status == "failed"
