"""PydanticAI's half of ``bench/integrations.py``: per-tool-call time without and with the adapter.

A scripted agent (PydanticAI's own ``FunctionModel``) makes one tool call per
model turn, ``PER_RUN`` calls per run; the same agent runs without and with
:class:`onlooker.integrations.pydantic_ai.OnlookerCapability` (an engine with
no plugins), alternately, in one process. The per-call time includes the
framework's own turn (model request, validation, message history), which is
the cost the adapter's share is compared against. PydanticAI's turn costs
milliseconds, so the adapter's tens of µs sit within run-to-run noise:
use enough calls (a few hundred) and read the median.

Run alone: ``.venv/bin/python bench/_integrations_pydantic_ai.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import onlooker
from onlooker.integrations.pydantic_ai import OnlookerCapability

PER_RUN = 10
"""Tool calls per agent run (one per model turn), so history stays short."""
REPEATS = 5


class _Script:
    """Calls ``add`` ``PER_RUN`` times, one call per turn, then answers."""

    def __init__(self) -> None:
        self.turn = 0

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = self.turn
        self.turn += 1
        if turn % (PER_RUN + 1) == PER_RUN:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[ToolCallPart("add", {"a": turn, "b": 1}, tool_call_id=f"c{turn}")]
        )


def _agent(capabilities: list[AbstractCapability[object]]) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        FunctionModel(_Script().respond), name="bench", capabilities=capabilities
    )

    @agent.tool_plain
    async def add(a: int, b: int) -> int:
        return a + b

    return agent


async def _per_call(agent: Agent[None, str], calls: int) -> float:
    runs = max(1, calls // PER_RUN)
    gc.collect()  # a full collection lands at random otherwise, costing milliseconds
    gc.disable()
    try:
        began = time.process_time()
        for _ in range(runs):
            await agent.run("add")
        elapsed = time.process_time() - began
    finally:
        gc.enable()
    return elapsed / (runs * PER_RUN) * 1e6


async def measure(calls: int) -> tuple[float, float]:
    """Median µs per tool call of the scripted agent: (without the adapter, with it)."""
    async with onlooker.ExecutionEngine() as engine:
        plain = _agent([])
        tracked = _agent([OnlookerCapability(engine)])
        await _per_call(plain, PER_RUN)  # warm up both (imports, schema caches)
        await _per_call(tracked, PER_RUN)
        without: list[float] = []
        with_adapter: list[float] = []
        for _ in range(REPEATS):  # A B B A: drift within a repeat hits both alike
            first = await _per_call(plain, calls)
            with_adapter.append(await _per_call(tracked, calls))
            with_adapter.append(await _per_call(tracked, calls))
            without.extend((first, await _per_call(plain, calls)))
    return statistics.median(without), statistics.median(with_adapter)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    without, with_adapter = asyncio.run(measure(calls))
    added = with_adapter - without
    print(f"PydanticAI, {calls} tool calls x {REPEATS} (median):")
    print(f"  framework alone       {without:9.1f} µs/call")
    print(f"  with OnlookerCapability {with_adapter:7.1f} µs/call")
    print(f"  added                 {added:9.1f} µs/call ({added / without:.1%} of the framework)")


if __name__ == "__main__":
    main()
