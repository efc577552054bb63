"""Example user code that must pass ``mypy --strict``: an exhaustive observer, typed plugins.

``tests/test_typing.py`` also copies this file outside the package and runs
mypy on it as a user would, next to a copy that forgets one event kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import assert_never, assert_type

import onlooker
from onlooker import (
    ExecutionContext,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionResult,
    ExecutionStarted,
    InteractionResolved,
    InteractionStarted,
    PausedExecution,
    PluginContext,
    ToolCallFinished,
    ToolCallStarted,
)


@dataclass
class Tally:
    """A plugin's extension: what an exhaustive observer saw."""

    started: int = 0
    calls: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)

    def handle(self, event: ExecutionEvent) -> None:
        match event:
            case ExecutionStarted(program=program):
                self.started += 1
                self.calls.append(program)
            case ToolCallStarted(tool=tool, args=args):
                self.calls.append(f"{tool}({len(args)})")
            case ToolCallFinished(status=status):
                self.statuses.append(status)
            case InteractionStarted(message=message):
                self.questions.append(message)
            case InteractionResolved(status=status):
                self.resolved.append(status)
            case ExecutionFinished(status=status, duration_ms=duration):
                self.statuses.append(f"{status} in {duration:.1f} ms")
            case _:
                assert_never(event)


def make_tally(ctx: PluginContext) -> Tally:
    ctx.logger.debug("tally for %d tools", len(ctx.tools))
    return Tally()


tally_plugin = onlooker.define_plugin(
    id="tally", extension=make_tally, observer=lambda tally: tally
)


@onlooker.tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


@onlooker.tool(name="shout", mutating=True)
async def shout(text: str) -> str:
    """Upper-case ``text``."""
    return text.upper()


async def program(ctx: ExecutionContext) -> int:
    assert_type(ctx.extension(tally_plugin), Tally)
    total = await ctx.call(add, a=1, b=2)
    assert_type(total, int)
    loud = await ctx.call(shout, text="hi")
    assert_type(loud, str)
    answer = await ctx.elicit("more?", schema={"type": "object"})
    child = await ctx.spawn(child_program, task_id="child")
    assert_type(child, ExecutionResult[str])
    return total + len(loud) + (1 if answer.action == "accept" else 0)


async def child_program(ctx: ExecutionContext) -> str:
    return ctx.execution_id


async def main() -> None:
    async with onlooker.ExecutionEngine(tools=[add, shout], plugins=[tally_plugin]) as engine:
        tally = engine.extension(tally_plugin)
        assert_type(tally, Tally)
        result = await engine.execute(program, trigger="cli")
        assert_type(result, ExecutionResult[int])
        outcome = await engine.execute_with_pause(program)
        while isinstance(outcome, PausedExecution):
            outcome = await engine.resume(
                outcome.execution_id, onlooker.InteractionResponse.accept({"ok": True})
            )
        print(tally.started, outcome.status, engine.bus.statistics().delivered)
