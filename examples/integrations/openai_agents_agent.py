"""An OpenAI Agents SDK agent recorded and governed by onlooker, offline.

A support agent (scripted with the SDK's own ``agents.testing.ScriptedModel``,
so no API key and no network; the only trace processor is onlooker's, so no
trace leaves the machine) looks an order up, checks a carrier whose API is
down (the SDK tells the model "An error occurred"; only the trace span says
the tool failed, and onlooker records it ``failed``), tries an over-limit
refund — which an onlooker pre-hook refuses through the tool guardrail before
the tool body runs — and asks a researcher agent, used as a tool, about the
policy: a child execution linked to that call. Every event is printed as it
happens, then the tree the history plugin stored.

Run it with ``.venv/bin/python examples/integrations/openai_agents_agent.py``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from agents import Agent, Runner, function_tool, set_trace_processors
from agents.testing import ScriptedModel, assistant_message, function_call

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
from onlooker.integrations.openai_agents import (
    OnlookerRunHooks,
    OnlookerTracingProcessor,
    tool_guardrail,
)
from onlooker.plugins import history

REFUND_LIMIT = 100


def refund_limit(use: ToolUseContext) -> PreHookResult:
    """Refunds above the limit need a person: refuse them (the model reads the reason)."""
    amount = use.tool_input.get("amount", 0)
    if isinstance(amount, int | float) and amount > REFUND_LIMIT:
        return PreHookResult(
            action=HookAction.BLOCK, reason=f"refunds above {REFUND_LIMIT} need a person"
        )
    return PreHookResult()


def show(event: ExecutionEvent) -> None:
    """Print each event, indented by the depth of its execution."""
    pad = "  " * event.attribution.depth
    match event:
        case ExecutionStarted():
            print(f"{pad}▶ {event.program} (trigger {event.trigger.kind})")
        case ToolCallStarted():
            print(f"{pad}  → {event.tool}({event.args}) [{event.tool_call_id}]")
        case ToolCallFinished():
            outcome = event.result if event.error is None else event.error.message
            print(f"{pad}  ← {event.tool}: {event.status} {outcome!r}")
        case ExecutionFinished():
            print(f"{pad}■ {event.status}: {event.result!r}")
        case _:
            pass


async def main(directory: Path) -> None:
    url = f"sqlite:///{directory / 'history.db'}"
    limits = HookMatcher(pattern="refund", pre=(refund_limit,))
    async with onlooker.ExecutionEngine(hooks=[limits], plugins=[history.plugin(url)]) as engine:
        engine.bus.subscribe(show, name="printer")
        set_trace_processors([OnlookerTracingProcessor(engine)])  # replaces the OpenAI exporter
        hooks = OnlookerRunHooks(engine, program="support")
        guard = tool_guardrail(engine)  # one guardrail, on every tool

        @function_tool(tool_input_guardrails=[guard])
        def lookup_order(order_id: int) -> dict[str, object]:
            """Find an order."""
            return {"order_id": order_id, "total": 250, "carrier": "swiftship"}

        @function_tool(tool_input_guardrails=[guard])
        def track_parcel(carrier: str) -> str:
            """Ask the carrier where the parcel is."""
            raise ConnectionError(f"{carrier} is down")

        @function_tool(tool_input_guardrails=[guard])
        def refund(order_id: int, amount: float) -> str:
            """Refund an order."""
            raise AssertionError("never runs: onlooker refuses it first")

        @function_tool(tool_input_guardrails=[guard])
        def search_policy(topic: str) -> str:
            """Search the policy handbook."""
            return f"{topic}: accepted within 30 days of delivery"

        researcher = Agent(
            name="researcher",
            model=ScriptedModel(
                [
                    [function_call("search_policy", {"topic": "refunds"}, call_id="call_search")],
                    [assistant_message("Refunds are accepted within 30 days.")],
                ]
            ),
            tools=[search_policy],
        )
        ask_researcher = researcher.as_tool("ask_researcher", "Ask about policy.", hooks=hooks)
        ask_researcher.tool_input_guardrails = [guard]  # links the child run to this call

        support = Agent(
            name="support",
            model=ScriptedModel(
                [
                    [function_call("lookup_order", {"order_id": 42}, call_id="call_lookup")],
                    [function_call("track_parcel", {"carrier": "swiftship"}, call_id="call_track")],
                    [
                        function_call(
                            "refund", {"order_id": 42, "amount": 250}, call_id="call_refund"
                        )
                    ],
                    [
                        function_call(
                            "ask_researcher", {"input": "refund window?"}, call_id="call_ask"
                        )
                    ],
                    [assistant_message("A colleague will refund the 250 within 30 days.")],
                ]
            ),
            tools=[lookup_order, track_parcel, refund, ask_researcher],
        )
        result = await Runner.run(support, "Please refund order 42 in full.", hooks=hooks)
        print(f"\nThe agent answered: {result.final_output}")
    set_trace_processors([])

    async with history.open(url) as store:
        (root,) = [e for e in await store.list_executions() if e.parent_execution_id is None]
        tree = await store.get_execution(root.execution_id)
    assert tree is not None
    print(f"\nHistory: {tree.program} {tree.status}")
    for call in tree.tool_calls:
        print(f"  {call.tool} [{call.tool_call_id}]: {call.status}")
    for child in tree.children:
        print(f"  child {child.program} via {child.parent_tool_call_id}: {child.status}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))
