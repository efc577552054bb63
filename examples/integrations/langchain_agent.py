"""A LangGraph agent under onlooker: every tool call recorded, governed and audited.

Runs offline: LangChain's ``GenericFakeChatModel`` plays the model, scripted to
ask for four tool calls: one completes, one fails (a ``ToolException`` the
``ToolNode`` turns into an error message), one an onlooker pre-hook refuses
before the tool body runs, and one asks a researcher sub-agent (a graph run by a
tool), which becomes a child execution.

    python examples/integrations/langchain_agent.py
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import anyio
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, ToolException, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.prebuilt.tool_node import AsyncToolCallWrapper

import onlooker
from onlooker.integrations.langchain import OnlookerCallbackHandler, wrap_tool_call
from onlooker.plugins import audit, history

ORDERS = {"A1": "shipped", "B2": "packing"}


@tool
def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: {ORDERS[order_id]}"


@tool
def cancel(order_id: str) -> str:
    """Cancel an order."""
    raise ToolException(f"order {order_id} has already shipped")


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    raise AssertionError("never reached: onlooker refuses refunds first")


def needs_a_human(use: onlooker.ToolUseContext) -> onlooker.PreHookResult:
    return onlooker.PreHookResult(
        action=onlooker.HookAction.BLOCK, reason=f"{use.tool_name} needs a human"
    )


def ask(name: str, call_id: str, **args: object) -> AIMessage:
    """A scripted model turn asking for one tool call."""
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def react_agent(
    name: str, turns: list[AIMessage], tools: list[BaseTool], wrapper: AsyncToolCallWrapper
) -> CompiledStateGraph[MessagesState, None, MessagesState, MessagesState]:
    """LangGraph's ReAct loop: the model, then its tool calls, until it answers."""
    chat = GenericFakeChatModel(messages=iter(turns))

    async def agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [await chat.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools, awrap_tool_call=wrapper, handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(name=name)


async def main() -> None:
    directory = Path(tempfile.mkdtemp(prefix="onlooker-langchain-"))
    url = f"sqlite:///{directory / 'history.db'}"
    trail = audit.plugin(directory=directory / "audit", session_id="langchain-example")
    async with onlooker.ExecutionEngine(
        plugins=[history.plugin(url), trail],
        hooks=[onlooker.HookMatcher(pattern="refund", pre=(needs_a_human,))],
    ) as engine:
        governed = wrap_tool_call(engine)  # ToolNode(awrap_tool_call=...): enforces verdicts
        researcher = react_agent(
            "researcher",
            [ask("lookup", "r1", order_id="B2"), AIMessage("B2 is packing")],
            [lookup],
            governed,
        )

        @tool
        async def research(question: str) -> str:
            """Ask the researcher sub-agent."""
            state = await researcher.ainvoke({"messages": [HumanMessage(question)]})
            return str(state["messages"][-1].content)

        support = react_agent(
            "support-bot",
            [
                ask("lookup", "c1", order_id="A1"),
                ask("cancel", "c2", order_id="A1"),
                ask("refund", "c3", order_id="A1", amount=120.0),
                ask("research", "c4", question="Where is B2?"),
                AIMessage("A1 shipped; a person will look at the refund; B2 is packing."),
            ],
            [lookup, cancel, refund, research],
            governed,
        )
        run_id = uuid.uuid4()  # LangChain's run id is the execution's id
        state = await support.ainvoke(
            {"messages": [HumanMessage("Cancel or refund A1, and where is B2?")]},
            config={"callbacks": [OnlookerCallbackHandler(engine)], "run_id": run_id},
        )
        for message in state["messages"]:
            if isinstance(message, ToolMessage):
                print(f"  tool {message.tool_call_id} ({message.status}): {message.content!r}")
            elif isinstance(message, AIMessage) and message.tool_calls:
                print(f"    ai asks: {[(c['name'], c['args']) for c in message.tool_calls]}")
            else:
                print(f"{message.type:>6}: {message.content}")
        audit_path = engine.extension(trail).path

    async with history.open(url) as store:
        tree = await store.get_execution(str(run_id))
        assert tree is not None
        print(f"\nexecution {tree.execution_id} ({tree.program}): {tree.status}")
        for call in tree.tool_calls:
            print(f"  {call.tool_call_id} {call.tool}: {call.status}")
        for child in tree.children:
            print(f"  child {child.program} (from {child.parent_tool_call_id}): {child.status}")
            for call in child.tool_calls:
                print(f"    {call.tool_call_id} {call.tool}: {call.status}")
    report = audit.verify(audit_path)
    print(
        f"audit trail {audit_path}: {'intact' if report.ok else 'BROKEN'} ({report.records} records)"
    )


if __name__ == "__main__":
    anyio.run(main)
