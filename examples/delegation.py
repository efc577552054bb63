"""The subagent pattern: a tool spawns child executions and reads what they did.

The parent program calls a ``delegate`` tool; the tool reaches the running
execution with ``onlooker.current_context()``, spawns a child for the task,
and returns the child's summary (files read and modified, tool usage,
errors) from the summary plugin — also when the child failed half-way.

Run it with ``.venv/bin/python examples/delegation.py``.
"""

from __future__ import annotations

from typing import Any

import anyio

import onlooker
from onlooker import ExecutionContext, Program
from onlooker.plugins import summary

FILES: dict[str, str] = {
    "notes/a.md": "onlooker watches tool-calling programs.",
    "notes/b.md": "Every step is an event.",
}
summaries = summary.plugin()


@onlooker.tool(reads="path")
def read_file(path: str) -> str:
    """Read a file."""
    if path not in FILES:
        raise onlooker.ToolError(f"no such file: {path}")
    return FILES[path]


@onlooker.tool(writes="path", mutating=True)
def write_file(path: str, content: str) -> None:
    """Write a file."""
    FILES[path] = content


@onlooker.tool(edits="path", mutating=True)
def append(path: str, line: str) -> None:
    """Append a line to an existing file."""
    FILES[path] = FILES[path] + "\n" + line


async def summarize(ctx: ExecutionContext) -> str:
    """Child: read every note and write a digest."""
    texts = [await ctx.call("read_file", path=p) for p in ("notes/a.md", "notes/b.md")]
    await ctx.call("write_file", path="digest.md", content=" ".join(texts))
    await ctx.call("append", path="digest.md", line="(summarized)")
    return "digest.md"


async def cite(ctx: ExecutionContext) -> str:
    """Child: cite a note that does not exist (it fails half-way)."""
    await ctx.call("read_file", path="notes/a.md")
    await ctx.call("read_file", path="notes/missing.md")  # raises ToolError
    return "unreachable"


TASKS: dict[str, Program[str]] = {"summarize": summarize, "cite": cite}


@onlooker.tool
async def delegate(task: str) -> dict[str, Any]:
    """Run ``task`` as a child execution; return its summary as JSON."""
    ctx = onlooker.current_context()
    result = await ctx.spawn(TASKS[task], task_id=task)
    report = ctx.extension(summaries).get(result.execution_id)
    assert report is not None
    return report.model_dump(mode="json", include={"status", "files_read", "files_modified"})


async def parent(ctx: ExecutionContext) -> str:
    """The parent: delegate two tasks, look at what each child did."""
    for task in TASKS:
        outcome = await ctx.call("delegate", task=task)
        print(f"{task}: {outcome}")
    return ctx.execution_id


async def main() -> None:
    tools: list[onlooker.Tool[..., Any]] = [read_file, write_file, append, delegate]
    async with onlooker.ExecutionEngine(tools=tools, plugins=[summaries]) as engine:
        result = await engine.execute(parent)
        store = engine.extension(summaries)
    assert result.value is not None
    tree = store.get(result.value)
    assert tree is not None
    print(f"\nparent {tree.status}: {tree.tool_usage}, {len(tree.children)} children")
    for child in tree.children:
        errors = [f"{e.tool}: {e.message}" for e in child.errors]
        print(
            f"  {child.status:<9} success {child.success_rate:.0%} modified {child.files_modified} {errors}"
        )
    print("\n" + tree.children[1].to_xml(indent=True))


if __name__ == "__main__":
    anyio.run(main)
