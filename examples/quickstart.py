"""onlooker in one file: tools, a question, a child execution, and a plugin.

Run it with ``.venv/bin/python examples/quickstart.py``.
"""

from __future__ import annotations

import contextlib
from typing import assert_never

import anyio

import onlooker
from onlooker import (
    Elicitation,
    ExecutionContext,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionResponse,
    InteractionStarted,
    ToolCallFinished,
    ToolCallStarted,
)

NOTES = {"a.md": "onlooker watches tool-calling programs.", "b.md": "Every step is an event."}


@onlooker.tool(reads="path")
def read_file(path: str) -> str:
    """Read a note."""
    if path not in NOTES:
        raise onlooker.ToolError(f"no such note: {path}")
    return NOTES[path]


@onlooker.tool
async def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


class PrintEvents:
    """A plugin's observer: one line per event, matched exhaustively (mypy checks it)."""

    def handle(self, event: ExecutionEvent) -> None:
        indent = "  " * event.attribution.depth
        match event:
            case ExecutionStarted(program=program):
                line = f"▶ {program}"
            case ToolCallStarted(tool=tool, args=args):
                line = f"  → {tool}({args})"
            case ToolCallFinished(tool=tool, status=status, duration_ms=ms):
                line = f"  ← {tool}: {status} in {ms:.2f} ms"
            case InteractionStarted(message=message):
                line = f"  ? {message}"
            case InteractionResolved(status=status):
                line = f"  ! {status}"
            case ExecutionFinished(status=status, result=result):
                line = f"■ {status}: {result}"
            case _:
                assert_never(event)
        print(f"{indent}{event.seq:>2} {line}")


printer = onlooker.define_plugin(id="printer", observer=lambda _ext: PrintEvents())


async def count_words(ctx: ExecutionContext) -> int:
    """A child execution: count the words of every note."""
    total = 0
    for path in NOTES:
        total += await ctx.call(word_count, text=await ctx.call(read_file, path=path))
    return total


async def program(ctx: ExecutionContext) -> str:
    """Read a note, ask before counting, delegate the count to a child."""
    await ctx.call("read_file", path="a.md")
    with contextlib.suppress(onlooker.ToolError):  # recorded as `failed`; the program goes on
        await ctx.call("read_file", path="missing.md")
    answer = await ctx.elicit("Count the words of every note?", schema={"type": "object"})
    if answer.action != "accept":
        return "not counted"
    child = await ctx.spawn(count_words, task_id="count")
    return f"{child.value} words"


async def approve(question: Elicitation) -> InteractionResponse:
    """Answer every question with yes (a real app would ask a person)."""
    return InteractionResponse.accept({"approved": True})


async def main() -> None:
    async with onlooker.ExecutionEngine(tools=[read_file, word_count], plugins=[printer]) as engine:
        result = await engine.execute(program, on_elicitation=approve, trigger="cli")
    print(f"\nresult: {result.status}, {result.value!r}")


if __name__ == "__main__":
    anyio.run(main)
