"""LangGraph's half of ``bench/integrations.py``: per-tool-call time without and with the adapter.

A scripted ReAct agent (a ``StateGraph`` with an agent node and a ``ToolNode``,
the model LangChain's own ``GenericFakeChatModel``) makes one tool call per
model turn, ``PER_RUN`` calls per run. The same agent runs plain, and with the
whole adapter (``OnlookerCallbackHandler`` in the run's callbacks, which also
switches on LangChain's callback machinery for every run, and
``ToolNode(awrap_tool_call=wrap_tool_call(engine))``; an engine with no
plugins), alternately, in one process. The per-call time includes the
framework's own turn (the graph step, the model, the tool node), which is the
cost the adapter's share is compared against.

Run alone: ``.venv/bin/python bench/_integrations_langgraph.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Iterator
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.prebuilt.tool_node import AsyncToolCallWrapper

import onlooker
from onlooker.integrations.langchain import OnlookerCallbackHandler, wrap_tool_call

PER_RUN = 10
"""Tool calls per agent run (one per model turn), so the message history stays short."""
REPEATS = 5

Graph = CompiledStateGraph[Any, Any, Any, Any]


def _script() -> Iterator[AIMessage]:
    """Calls ``add`` ``PER_RUN`` times, one call per turn, then answers; forever."""
    turn = 0
    while True:
        for _ in range(PER_RUN):
            call = {"name": "add", "args": {"a": turn, "b": 1}, "id": f"c{turn}"}
            yield AIMessage(content="", tool_calls=[call])
            turn += 1
        yield AIMessage(content="done")


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _agent(wrapper: AsyncToolCallWrapper | None) -> Graph:
    chat = GenericFakeChatModel(messages=_script())

    async def agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [await chat.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([add], awrap_tool_call=wrapper))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(name="bench")


async def _per_call(graph: Graph, callbacks: list[BaseCallbackHandler], calls: int) -> float:
    runs = max(1, calls // PER_RUN)
    gc.collect()  # a full collection lands at random otherwise, costing milliseconds
    gc.disable()
    try:
        began = time.process_time()
        for _ in range(runs):
            await graph.ainvoke(
                {"messages": [HumanMessage("add")]},
                config={"callbacks": callbacks, "recursion_limit": 4 * PER_RUN},
            )
        elapsed = time.process_time() - began
    finally:
        gc.enable()
    return elapsed / (runs * PER_RUN) * 1e6


async def measure(calls: int) -> tuple[float, float]:
    """Median µs per tool call of the scripted agent: (without the adapter, with it)."""
    async with onlooker.ExecutionEngine() as engine:
        plain = _agent(None)
        tracked = _agent(wrap_tool_call(engine))
        handler: list[BaseCallbackHandler] = [OnlookerCallbackHandler(engine)]
        await _per_call(plain, [], PER_RUN)  # warm up both (imports, graph caches)
        await _per_call(tracked, handler, PER_RUN)
        without: list[float] = []
        with_adapter: list[float] = []
        for _ in range(REPEATS):  # A B B A: drift within a repeat hits both alike
            first = await _per_call(plain, [], calls)
            with_adapter.append(await _per_call(tracked, handler, calls))
            with_adapter.append(await _per_call(tracked, handler, calls))
            without.extend((first, await _per_call(plain, [], calls)))
    return statistics.median(without), statistics.median(with_adapter)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    without, with_adapter = asyncio.run(measure(calls))
    added = with_adapter - without
    print(f"LangGraph, {calls} tool calls x {REPEATS} (median):")
    print(f"  framework alone         {without:9.1f} µs/call")
    print(f"  with handler + wrapper  {with_adapter:9.1f} µs/call")
    print(
        f"  added                   {added:9.1f} µs/call ({added / without:.1%} of the framework)"
    )


if __name__ == "__main__":
    main()
