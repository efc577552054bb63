"""A PydanticAI agent recorded and governed by onlooker, offline.

A support agent (scripted with PydanticAI's own ``FunctionModel``, so no API
key and no network) looks an order up, tries an over-limit refund — which an
onlooker pre-hook blocks before the tool body runs — and asks a researcher
sub-agent about the policy, which becomes a child execution. Every event is
printed as it happens, then the tree the history plugin stored.

Run it with ``.venv/bin/python examples/integrations/pydantic_ai_agent.py``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

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
from onlooker.integrations.pydantic_ai import OnlookerCapability
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


def scripted(*turns: ToolCallPart | str) -> FunctionModel:
    """A model that answers each request with the next scripted turn."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = turns[sum(isinstance(m, ModelResponse) for m in messages)]
        return ModelResponse(parts=[TextPart(turn) if isinstance(turn, str) else turn])

    return FunctionModel(respond)


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
    guard = HookMatcher(pattern="refund", pre=(refund_limit,))
    async with onlooker.ExecutionEngine(hooks=[guard], plugins=[history.plugin(url)]) as engine:
        engine.bus.subscribe(show, name="printer")
        capability = OnlookerCapability(engine)

        researcher: Agent[None, str] = Agent(
            scripted(
                ToolCallPart("search_policy", {"topic": "refunds"}, tool_call_id="call_search"),
                "Refunds are accepted within 30 days.",
            ),
            name="researcher",
            capabilities=[capability],
        )
        support: Agent[None, str] = Agent(
            scripted(
                ToolCallPart("lookup_order", {"order_id": 42}, tool_call_id="call_lookup"),
                ToolCallPart("refund", {"order_id": 42, "amount": 250}, tool_call_id="call_refund"),
                ToolCallPart(
                    "ask_researcher", {"question": "refund window?"}, tool_call_id="call_ask"
                ),
                "I cannot refund 250 myself; a colleague will follow up within 30 days.",
            ),
            name="support",
            capabilities=[capability],
        )

        @researcher.tool_plain
        def search_policy(topic: str) -> str:
            return f"{topic}: accepted within 30 days of delivery"

        @support.tool_plain
        def lookup_order(order_id: int) -> dict[str, object]:
            return {"order_id": order_id, "total": 250, "delivered": "2024-05-02"}

        @support.tool_plain
        def refund(order_id: int, amount: float) -> str:
            raise AssertionError("never runs: onlooker blocks it first")

        @support.tool
        async def ask_researcher(ctx: RunContext[None], question: str) -> str:
            answer = await researcher.run(question, usage=ctx.usage)  # a child execution
            return answer.output

        result = await support.run("Please refund order 42 in full.")
        print(f"\nThe agent answered: {result.output}")

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
