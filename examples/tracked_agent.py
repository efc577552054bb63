"""A scripted agent loop that onlooker does not run, tracked end to end.

The agent below is its own little framework: a scripted "model" picks tool
calls (with its own call ids), the loop runs the tools itself, and a
sub-agent handles one step. onlooker only watches and governs, through
``engine.track``: each call goes through onlooker's pre-hooks first (here a
policy refuses ``delete_file``), the loop enforces the verdict, and history
and the audit trail record everything. Run it with
``.venv/bin/python examples/tracked_agent.py``; it prints the recorded tree
from history and the audit trail's verdict.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

import onlooker
from onlooker import HookAction, HookMatcher, PreHookResult, ToolUseContext
from onlooker.plugins import audit, history, summary

FILES = {"notes.md": "Refunds take five days.", "draft.md": ""}

# The agent's own tools: plain functions onlooker never calls.
TOOLS: dict[str, Callable[..., Any]] = {
    "read_file": lambda path: FILES[path],
    "write_file": lambda path, text: FILES.__setitem__(path, text),
    "delete_file": lambda path: FILES.pop(path),
}

# What the scripted model asks for, turn by turn: (call id, tool, arguments).
SCRIPT = [
    ("call_1", "read_file", {"path": "notes.md"}),
    ("call_2", "read_file", {"path": "missing.md"}),  # fails: no such file
    ("call_3", "delete_file", {"path": "notes.md"}),  # refused by the policy below
    ("call_4", "summarize", {"path": "notes.md"}),  # handled by a sub-agent
]


def no_deletes(use: ToolUseContext) -> PreHookResult | None:
    """Governance: the agent may not delete files."""
    return PreHookResult(HookAction.BLOCK, reason="deleting files is not allowed")


async def call_tool(run: onlooker.TrackedExecution, call_id: str, tool: str, args: Any) -> str:
    """What an adapter does for each call: ask onlooker, enforce, run, report."""
    call = await run.tool_started(tool, args, tool_call_id=call_id)
    if not call.allowed:
        return f"refused: {call.reason}"  # the framework's own way of refusing a call
    try:
        output = TOOLS[tool](**call.input)
    except Exception as exc:
        await call.failed(exc)
        return f"error: {exc!r}"
    return str(await call.finished(output))


async def summarizer(run: onlooker.TrackedExecution, path: str) -> str:
    """A sub-agent: one more tool call, in its own (child) execution."""
    text = await call_tool(run, "sub_1", "read_file", {"path": path})
    summary = text.split(".")[0]
    await call_tool(run, "sub_2", "write_file", {"path": "draft.md", "text": summary})
    return summary


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="onlooker-tracked-") as tmp:
        await run_in(Path(tmp))


async def run_in(data: Path) -> None:
    """Track the scripted agent with history and an audit trail kept in ``data``."""
    recorded_history = history.plugin(f"sqlite:///{data / 'history.db'}")
    summaries = summary.plugin()
    plugins: list[onlooker.Plugin[Any]] = [
        recorded_history,
        audit.plugin(data / "audit", session_id="tracked-demo"),
        summaries,
    ]
    policy = HookMatcher(pattern="delete_*", pre=[no_deletes])
    async with onlooker.ExecutionEngine(plugins=plugins, hooks=[policy]) as engine:
        engine.declare_tool(onlooker.ToolDeclaration("write_file", mutating=True, writes="path"))
        engine.declare_tool(onlooker.ToolDeclaration("delete_file", mutating=True))
        async with engine.track("support-bot", trigger="scripted", input="tidy my notes") as run:
            for call_id, tool, args in SCRIPT:
                if tool == "summarize":
                    call = await run.tool_started(tool, args, tool_call_id=call_id)
                    async with run.child("summarizer", parent_tool_call_id=call_id) as child:
                        short = await summarizer(child, args["path"])
                    await call.finished(short)
                else:
                    await call_tool(run, call_id, tool, args)
        tree = await engine.extension(recorded_history).get_execution(run.execution_id)
        child_summary = engine.extension(summaries).get(child.execution_id)
    assert tree is not None and child_summary is not None
    print(f"{tree.program}  {tree.status}")
    for recorded in tree.tool_calls:
        print(f"  {recorded.tool_call_id}  {recorded.tool:<12} {recorded.status}")
    for child_tree in tree.children:
        print(f"  child {child_tree.program}  {child_tree.status}")
        for recorded in child_tree.tool_calls:
            print(f"    {recorded.tool_call_id}  {recorded.tool:<12} {recorded.status}")
    print(f"the sub-agent wrote: {child_summary.files_written}")
    report = audit.verify(data / "audit" / "tracked-demo")
    print(f"audit trail: {'intact' if report.ok else report.reason}, {report.records} records")
    print(f"files now: {sorted(FILES)}")


if __name__ == "__main__":
    anyio.run(main)
