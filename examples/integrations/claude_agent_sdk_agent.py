"""A Claude Agent SDK agent recorded and governed by onlooker, offline.

The SDK's bundled Claude Code CLI runs for real, with its own built-in tools
working in a temporary directory; only the model is scripted: a tiny
Anthropic Messages API served on 127.0.0.1 (``ANTHROPIC_BASE_URL``), so no
API key and no network. The agent writes a note (an onlooker pre-hook signs
it through ``updatedInput``), reads a file that is not there (a failed
call), tries ``rm -rf`` (an onlooker pre-hook denies it: the command never
runs) and hands a check to a sub-agent (a child execution). Every event is
printed as it happens, then what the summary plugin made of the turn.

Run it with ``.venv/bin/python examples/integrations/claude_agent_sdk_agent.py``.
To use the real model instead, drop ``ANTHROPIC_BASE_URL`` and the script.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

import onlooker
from onlooker import (
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    HookAction,
    HookMatcher,
    PreHookResult,
    ToolCallFinished,
    ToolCallStarted,
    ToolUseContext,
)
from onlooker.integrations.claude_agent_sdk import hooks
from onlooker.plugins import summary


def no_rm(use: ToolUseContext) -> PreHookResult:
    """Deny destructive shell commands (Claude reads the reason as the tool's error)."""
    if "rm " in str(use.tool_input.get("command", "")):
        return PreHookResult(action=HookAction.BLOCK, reason="no deleting on this machine")
    return PreHookResult()


def sign(use: ToolUseContext) -> PreHookResult:
    """Sign every note Claude writes (it reaches the CLI as ``updatedInput``)."""
    content = f"{use.tool_input.get('content', '')}-- written under onlooker\n"
    return PreHookResult(modified_input={**use.tool_input, "content": content})


def script(work: Path) -> dict[str, list[list[dict[str, Any]]]]:
    """What the scripted model answers: the main agent's turns, then the sub-agent's."""

    def use(tool_use_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_use", "id": tool_use_id, "name": name, "input": args}

    def say(text: str) -> dict[str, Any]:
        return {"type": "text", "text": text}

    note = {"file_path": str(work / "notes.md"), "content": "# Notes\nship on Friday\n"}
    check = {
        "description": "check the notes",
        "prompt": "SUBAGENT: read notes.md and say if it is signed",
        "subagent_type": "general-purpose",
        "run_in_background": False,
    }
    return {
        "MAIN:": [
            [say("Writing the note."), use("toolu_write", "Write", note)],
            [use("toolu_read", "Read", {"file_path": str(work / "todo.md")})],
            [use("toolu_rm", "Bash", {"command": "rm -rf build", "description": "clean"})],
            [use("toolu_task", "Task", check)],
            [say("Notes written and checked; I was not allowed to clean up.")],
        ],
        "SUBAGENT:": [
            [use("toolu_sub_read", "Read", {"file_path": str(work / "notes.md")})],
            [say("The note is signed.")],
        ],
    }


class ScriptedModel:
    """A scripted Anthropic Messages API (streaming) on 127.0.0.1, in a thread."""

    def __init__(self, replies: dict[str, list[list[dict[str, Any]]]]) -> None:
        ids = itertools.count()

        def reply(request: dict[str, Any]) -> list[dict[str, Any]]:
            first = next(m for m in request["messages"] if m["role"] == "user")
            text = json.dumps(first["content"])
            turn = sum(m["role"] == "assistant" for m in request["messages"])
            for marker, turns in replies.items():
                if marker in text and turn < len(turns):
                    return turns[turn]
            return [{"type": "text", "text": "ok"}]

        def stream(blocks: list[dict[str, Any]]) -> bytes:
            message: dict[str, Any] = {
                "id": f"msg_{next(ids)}",  # the CLI merges replies that share an id
                "type": "message",
                "role": "assistant",
                "model": "scripted",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
            events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
            for i, block in enumerate(blocks):
                start: dict[str, Any]
                delta: dict[str, Any]
                if block["type"] == "text":
                    start = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": block["text"]}
                else:
                    start = {**block, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                events += [
                    {"type": "content_block_start", "index": i, "content_block": start},
                    {"type": "content_block_delta", "index": i, "delta": delta},
                    {"type": "content_block_stop", "index": i},
                ]
            stop = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
            events += [
                {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                 "usage": {"output_tokens": 1}},
                {"type": "message_stop"},
            ]  # fmt: skip
            return "".join(
                f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events
            ).encode()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["content-length"])))
                streaming = self.path.split("?")[0] == "/v1/messages" and request.get("stream")
                body = stream(reply(request)) if streaming else b'{"input_tokens": 1}'  # counting
                self.send_response(200)
                self.send_header(
                    "content-type", "text/event-stream" if streaming else "application/json"
                )
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def show(event: ExecutionEvent) -> None:
    """Print each event, indented by the depth of its execution."""
    pad = "  " * event.attribution.depth
    match event:
        case ExecutionStarted():
            print(f"{pad}▶ {event.program} (trigger {event.trigger.kind})")
        case ToolCallStarted():
            print(f"{pad}  → {event.tool} [{event.tool_call_id}]")
        case ToolCallFinished():
            why = "" if event.error is None else f": {event.error.message}"
            print(f"{pad}  ← {event.tool} {event.status}{why}")
        case ExecutionFinished():
            print(f"{pad}■ {event.status}: {event.result!r}")
        case _:
            pass


async def main(directory: Path) -> None:
    work = directory / "work"
    work.mkdir()
    model = ScriptedModel(script(work))
    governance = [
        HookMatcher(pattern="Bash", pre=(no_rm,)),
        HookMatcher(pattern="Write", pre=(sign,)),
    ]
    summaries = summary.plugin()
    turns: list[str] = []
    async with onlooker.ExecutionEngine(hooks=governance, plugins=[summaries]) as engine:
        engine.bus.subscribe(show, name="printer")
        engine.bus.subscribe(
            lambda e: (
                turns.append(e.execution_id)
                if isinstance(e, ExecutionStarted) and e.attribution.depth == 0
                else None
            ),
            name="turns",
        )
        options = ClaudeAgentOptions(
            hooks=hooks(engine, program="notes-agent"),
            cwd=work,
            allowed_tools=["Read", "Write", "Bash", "Agent", "Task"],
            setting_sources=[],
            env={
                "ANTHROPIC_BASE_URL": model.url,  # the scripted model
                "ANTHROPIC_API_KEY": "sk-offline",
                "HOME": str(directory / "home"),  # no user settings, nothing written to yours
                "CLAUDE_CODE_TMPDIR": str(directory / "tmp"),
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
        )
        async for message in query(prompt="MAIN: write my notes, then tidy up", options=options):
            if isinstance(message, ResultMessage):
                print(f"\nClaude answered: {message.result}")
        (turn,) = turns
        done = engine.extension(summaries).get(turn)
    model.server.shutdown()

    assert done is not None
    print(f"\nThe turn, summarised: {done.status}, tools {done.tool_usage}")
    print(f"  read {done.files_read}, wrote {done.files_written}")
    print(f"  sub-agents: {[(c.status, c.tool_usage) for c in done.children]}")
    print(f"\nnotes.md now reads: {(work / 'notes.md').read_text()!r}")
    print(f"files in the work directory: {sorted(p.name for p in work.iterdir())}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(main, Path(tmp))
