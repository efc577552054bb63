"""LangChain / LangGraph: a real StateGraph with a ToolNode, driven by GenericFakeChatModel.

The graph is LangGraph's own ReAct loop (an agent node, ``ToolNode``,
``tools_condition``) built with ``StateGraph``, as ``create_react_agent`` builds it;
``create_react_agent`` itself is deprecated in LangGraph 1.x and cannot bind tools to
the fake model. The model is LangChain's ``GenericFakeChatModel``, scripted with
``AIMessage``\\ s that carry tool calls.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import InjectedState, ToolNode, tools_condition
from langgraph.prebuilt.tool_node import AsyncToolCallWrapper
from langgraph.types import Command, interrupt

import onlooker
from onlooker import (
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    HookAction,
    HookMatcher,
    PostHookResult,
    PreHookResult,
    ToolCallFinished,
    ToolCallStarted,
    ToolUseContext,
)
from onlooker.integrations.langchain import OnlookerCallbackHandler, wrap_tool_call
from onlooker.plugins import audit, history
from onlooker.testing import RecordingObserver

pytestmark = pytest.mark.anyio

Graph = CompiledStateGraph[Any, Any, Any, Any]
CheckStream = Callable[[Sequence[ExecutionEvent]], None]


@pytest.fixture
def anyio_backend() -> str:
    # LangChain's async callback manager and LangGraph's ToolNode call asyncio.gather and
    # asyncio.create_task themselves: LangGraph runs on asyncio only.
    return "asyncio"


# -- the agent --------------------------------------------------------------------------


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    """A scripted model turn that asks for one tool call."""
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def model(*turns: AIMessage) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(turns))


class Agent:
    """A ReAct graph whose tool bodies and model inputs the test can inspect."""

    def __init__(self, wrapper: AsyncToolCallWrapper | None = None) -> None:
        self.ran: list[str] = []
        """Which tool bodies ran, in order."""
        self.seen: list[list[AnyMessage]] = []
        """The messages each model turn received."""
        self.wrapper = wrapper

    def tools(self) -> list[BaseTool]:
        ran = self.ran

        @tool
        def lookup(order_id: str) -> str:
            """Look an order up."""
            ran.append(f"lookup:{order_id}")
            return f"order {order_id}: shipped"

        @tool
        def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            ran.append(f"refund:{order_id}")
            return "refunded"

        def reserve(order_id: str) -> str:
            """Reserve stock for an order."""
            ran.append(f"reserve:{order_id}")
            raise ToolException(f"order {order_id} is on hold")

        @tool
        def cancel(order_id: str) -> str:
            """Cancel an order."""
            ran.append(f"cancel:{order_id}")
            raise ToolException("already shipped")

        # The tool handles its own ToolException: on_tool_end gets ToolMessage(status="error").
        handled = StructuredTool.from_function(reserve, handle_tool_error=True)
        return [lookup, refund, handled, cancel]

    def graph(
        self,
        name: str,
        chat: GenericFakeChatModel,
        tools: Sequence[BaseTool],
        *,
        handle_tool_errors: bool = True,
        checkpointer: InMemorySaver | None = None,
    ) -> Graph:
        seen = self.seen

        def agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
            seen.append(list(state["messages"]))
            return {"messages": [chat.invoke(state["messages"])]}

        async def aagent(state: MessagesState) -> dict[str, list[AnyMessage]]:
            seen.append(list(state["messages"]))
            return {"messages": [await chat.ainvoke(state["messages"])]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", RunnableLambda(agent, afunc=aagent))
        builder.add_node(
            "tools",
            ToolNode(
                tools,
                awrap_tool_call=self.wrapper,
                # ToolNode turns a ToolException the tool did not handle into an error message
                handle_tool_errors=handle_tool_errors,
            ),
        )
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder.compile(name=name, checkpointer=checkpointer)

    def support_bot(self) -> Graph:
        """Five calls: completed, blocked, failed twice, and a researcher sub-agent."""
        researcher = self.graph(
            "researcher",
            model(call("lookup", "s1", order_id="A1-history"), AIMessage(content="A1 is fine")),
            self.tools()[:1],
        )
        ran = self.ran

        @tool
        async def research(topic: str) -> str:
            """Ask the researcher sub-agent."""
            ran.append(f"research:{topic}")
            state = await researcher.ainvoke({"messages": [HumanMessage(topic)]})
            return str(state["messages"][-1].content)

        chat = model(
            call("lookup", "c1", order_id="A1"),
            call("refund", "c2", order_id="A1", amount=120.0),
            call("reserve", "c3", order_id="A1"),
            call("cancel", "c4", order_id="A1"),
            call("research", "c5", topic="A1"),
            AIMessage(content="done"),
        )
        return self.graph("support-bot", chat, [*self.tools(), research])

    def tool_message(self, call_id: str) -> ToolMessage:
        """The ToolMessage for ``call_id`` that the model received."""
        for message in self.seen[-1]:
            if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
                return message
        raise AssertionError(f"the model never saw a result for {call_id}")


def block_refunds(context: ToolUseContext) -> PreHookResult:
    return PreHookResult(action=HookAction.BLOCK, reason="refunds need a human")


REFUNDS = HookMatcher(pattern="refund", pre=[block_refunds])


def steps(events: Sequence[ExecutionEvent], root: str) -> list[tuple[str, ...]]:
    """Each event as (who, kind, tool, tool_call_id, status): the shape of the run."""
    out: list[tuple[str, ...]] = []
    for event in events:
        who = "root" if event.execution_id == root else "child"
        match event:
            case ToolCallStarted():
                out.append((who, "started", event.tool, event.tool_call_id))
            case ToolCallFinished():
                out.append((who, event.status, event.tool, event.tool_call_id))
            case ExecutionStarted():
                out.append((who, "ExecutionStarted", event.program))
            case ExecutionFinished():
                out.append((who, "ExecutionFinished", event.status))
            case _:
                out.append((who, event.kind))
    return out


def config(handler: OnlookerCallbackHandler, run_id: uuid.UUID) -> RunnableConfig:
    return {"callbacks": [handler], "run_id": run_id}


# -- handler + wrapper: recorded once, governed -----------------------------------------


async def test_handler_and_wrapper_record_and_govern_every_call(
    tmp_path: Path, check_stream: CheckStream
) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    recorder = RecordingObserver()
    root_id = uuid.uuid4()
    async with onlooker.ExecutionEngine(
        hooks=[REFUNDS],
        plugins=[history.plugin(url), audit.plugin(directory=tmp_path, session_id="lc")],
    ) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        state = await agent.support_bot().ainvoke(
            {"messages": [HumanMessage("refund A1")]},
            config(OnlookerCallbackHandler(engine), root_id),
        )
    root = str(root_id)
    assert state["messages"][-1].content == "done"
    events = recorder.events
    check_stream(events)
    assert steps(events, root) == [
        ("root", "ExecutionStarted", "support-bot"),
        ("root", "started", "lookup", "c1"),
        ("root", "completed", "lookup", "c1"),
        ("root", "started", "refund", "c2"),
        ("root", "blocked", "refund", "c2"),
        ("root", "started", "reserve", "c3"),
        ("root", "failed", "reserve", "c3"),
        ("root", "started", "cancel", "c4"),
        ("root", "failed", "cancel", "c4"),
        ("root", "started", "research", "c5"),
        ("child", "ExecutionStarted", "researcher"),
        ("child", "started", "lookup", "s1"),
        ("child", "completed", "lookup", "s1"),
        ("child", "ExecutionFinished", "completed"),
        ("root", "completed", "research", "c5"),
        ("root", "ExecutionFinished", "completed"),
    ]
    # The refused tool never ran, and the model got the refusal instead.
    assert agent.ran == [
        "lookup:A1",
        "reserve:A1",
        "cancel:A1",
        "research:A1",
        "lookup:A1-history",
    ]
    refusal = agent.tool_message("c2")
    assert (refusal.status, refusal.content, refusal.name) == (
        "error",
        "refunds need a human",
        "refund",
    )
    assert agent.tool_message("c3").status == agent.tool_message("c4").status == "error"
    assert agent.tool_message("c5").content == "A1 is fine"

    started = recorder.of(ExecutionStarted)
    assert started[0].execution_id == root and started[0].trigger.kind == "langgraph"
    child = started[1]
    assert child.attribution.parent_execution_id == root
    assert child.attribution.parent_tool_call_id == "c5"
    assert child.attribution.depth == 1
    finished = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
    assert finished["c1"].result == "order A1: shipped"
    assert (
        finished["c2"].error is not None and "refunds need a human" in finished["c2"].error.message
    )
    assert (
        finished["c3"].error is not None and finished["c3"].error.message == "order A1 is on hold"
    )
    # ToolNode turned cancel's exception into an error message; the handler saw the
    # exception itself, and the wrapper records that.
    assert finished["c4"].error is not None
    assert (finished["c4"].error.type, finished["c4"].error.message) == (
        "ToolException",
        "already shipped",
    )
    assert recorder.of(ToolCallStarted)[0].args == {"order_id": "A1"}

    async with history.open(url) as store:
        tree = await store.get_execution(root)
    assert tree is not None and tree.status == "completed" and tree.program == "support-bot"
    assert [(c.tool_call_id, c.status) for c in tree.tool_calls] == [
        ("c1", "completed"),
        ("c2", "blocked"),
        ("c3", "failed"),
        ("c4", "failed"),
        ("c5", "completed"),
    ]
    [sub] = tree.children
    assert (sub.program, sub.parent_tool_call_id, sub.status) == ("researcher", "c5", "completed")
    assert [(c.tool_call_id, c.status) for c in sub.tool_calls] == [("s1", "completed")]
    report = audit.verify(tmp_path / "lc")
    assert report.ok and report.records == len(events)


async def test_hooks_rewrite_the_arguments_and_the_result() -> None:
    def shout(context: ToolUseContext) -> PreHookResult:
        return PreHookResult(
            modified_input={"order_id": str(context.tool_input["order_id"]).upper()}
        )

    def redact(context: ToolUseContext, output: Any) -> PostHookResult:
        return PostHookResult(modified_output=f"[redacted: {len(str(output))} chars]")

    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(
        hooks=[HookMatcher(pattern="lookup", pre=[shout], post=[redact])]
    ) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        chat = model(call("lookup", "c1", order_id="a7"), AIMessage(content="done"))
        await agent.graph("bot", chat, agent.tools()).ainvoke(
            {"messages": [HumanMessage("where is a7?")]},
            config(OnlookerCallbackHandler(engine), uuid.uuid4()),
        )
    assert agent.ran == ["lookup:A7"]  # the tool got the rewritten arguments
    assert agent.tool_message("c1").content == "[redacted: 17 chars]"  # the model the new output
    [started] = recorder.of(ToolCallStarted)
    [ended] = recorder.of(ToolCallFinished)
    assert started.args == {"order_id": "A7"}
    assert (ended.status, ended.result) == ("completed", "[redacted: 17 chars]")


def copying_tools(ran: list[dict[str, Any]]) -> list[BaseTool]:
    """``copy`` with a default; ``count`` with an argument the ``ToolNode`` injects."""

    @tool
    def copy(doc: str, copies: int, mode: str = "fast") -> str:
        """Copy a document."""
        ran.append({"doc": doc, "copies": copies, "mode": mode})
        return "copied"

    @tool
    def count(word: str, state: Annotated[dict[str, Any], InjectedState]) -> int:
        """Count the messages so far that mention a word."""
        ran.append({"word": word, "messages": len(state["messages"])})
        return sum(word in str(m.content) for m in state["messages"])

    return [copy, count]


def copies_as_text(context: ToolUseContext) -> PreHookResult | None:
    """Rewrite ``copies`` as a string, and drop ``mode``: the tool's schema restores both."""
    if context.tool_call_id != "c1":
        return None
    return PreHookResult(modified_input={"doc": "a", "copies": "2"})


async def test_the_recorded_arguments_are_what_the_tool_receives() -> None:
    ran: list[dict[str, Any]] = []
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(
        hooks=[HookMatcher(pattern="copy", pre=[copies_as_text])]
    ) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        chat = model(
            call("copy", "c1", doc="a", copies=9),
            call("copy", "c2", doc="b", copies="3"),
            call("count", "c3", word="go"),
            AIMessage(content="done"),
        )
        await agent.graph("bot", chat, copying_tools(ran)).ainvoke(
            {"messages": [HumanMessage("go")]},
            config(OnlookerCallbackHandler(engine), uuid.uuid4()),
        )
    assert ran == [
        {"doc": "a", "copies": 2, "mode": "fast"},  # "2" from the hook, coerced
        {"doc": "b", "copies": 3, "mode": "fast"},  # the model's own "3", coerced
        {"word": "go", "messages": 6},  # the injected state still reaches the tool
    ]
    assert [e.args for e in recorder.of(ToolCallStarted)] == [*ran[:2], {"word": "go"}]
    assert [e.status for e in recorder.of(ToolCallFinished)] == ["completed"] * 3


def garble(context: ToolUseContext) -> PreHookResult:
    return PreHookResult(modified_input={"doc": "a", "copies": "many"})


@pytest.mark.parametrize("with_handler", [True, False])
async def test_a_rewrite_the_tool_would_refuse_is_a_failed_call(
    with_handler: bool, check_stream: CheckStream
) -> None:
    ran: list[dict[str, Any]] = []
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(
        hooks=[HookMatcher(pattern="copy", pre=[garble])]
    ) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        chat = model(call("copy", "c1", doc="a", copies=1), AIMessage(content="done"))
        callbacks = config(OnlookerCallbackHandler(engine), uuid.uuid4()) if with_handler else None
        await agent.graph("bot", chat, copying_tools(ran)).ainvoke(
            {"messages": [HumanMessage("copy")]}, callbacks
        )
    assert ran == []
    message = agent.tool_message("c1")  # the model reads the refusal, as for a block
    assert message.status == "error"
    assert "invalid arguments for tool 'copy' (input modified by hook 'garble')" in str(
        message.content
    )
    [ended] = recorder.of(ToolCallFinished)
    assert ended.status == "failed" and ended.error is not None
    assert ended.error.type == "ToolInputError" and "'garble'" in ended.error.message
    # the graph's execution goes on; a call that is an execution of its own fails with it
    assert [e.status for e in recorder.of(ExecutionFinished)] == [
        "completed" if with_handler else "failed"
    ]
    check_stream(recorder.events)


async def test_an_abort_stops_the_graph_and_fails_the_execution() -> None:
    def abort(context: ToolUseContext) -> PreHookResult:
        return PreHookResult(action=HookAction.ABORT, reason="stop everything")

    recorder = RecordingObserver()
    root_id = uuid.uuid4()
    async with onlooker.ExecutionEngine(
        hooks=[HookMatcher(pattern="refund", pre=[abort])]
    ) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        chat = model(call("refund", "c1", order_id="A1", amount=5.0), AIMessage(content="done"))
        graph = agent.graph("bot", chat, agent.tools(), handle_tool_errors=False)
        with pytest.raises(onlooker.HookAbortError, match="stop everything"):
            await graph.ainvoke(
                {"messages": [HumanMessage("refund")]},
                config(OnlookerCallbackHandler(engine), root_id),
            )
    assert agent.ran == []
    assert steps(recorder.events, str(root_id)) == [
        ("root", "ExecutionStarted", "bot"),
        ("root", "started", "refund", "c1"),
        ("root", "blocked", "refund", "c1"),
        ("root", "ExecutionFinished", "failed"),
    ]


async def test_a_skipped_call_returns_the_reason_as_a_result() -> None:
    def skip(context: ToolUseContext) -> PreHookResult:
        return PreHookResult(action=HookAction.SKIP, reason="cached: shipped")

    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(
        hooks=[HookMatcher(pattern="lookup", pre=[skip])]
    ) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        chat = model(call("lookup", "c1", order_id="A1"), AIMessage(content="done"))
        await agent.graph("bot", chat, agent.tools()).ainvoke(
            {"messages": [HumanMessage("x")]}, config(OnlookerCallbackHandler(engine), uuid.uuid4())
        )
    assert agent.ran == []
    message = agent.tool_message("c1")
    assert (message.status, message.content) == ("success", "cached: shipped")
    [ended] = recorder.of(ToolCallFinished)
    assert (ended.tool_call_id, ended.status) == ("c1", "skipped")


# -- either one alone -------------------------------------------------------------------


async def test_the_handler_alone_records_but_cannot_refuse(
    caplog: pytest.LogCaptureFixture, check_stream: CheckStream
) -> None:
    recorder = RecordingObserver()
    root_id = uuid.uuid4()
    async with onlooker.ExecutionEngine(hooks=[REFUNDS]) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent()  # no awrap_tool_call: callbacks only
        with caplog.at_level(logging.WARNING, logger="onlooker.integrations.langchain"):
            await agent.support_bot().ainvoke(
                {"messages": [HumanMessage("refund A1")]},
                config(OnlookerCallbackHandler(engine), root_id),
            )
    check_stream(recorder.events)
    assert [step for step in steps(recorder.events, str(root_id)) if step[1] != "started"] == [
        ("root", "ExecutionStarted", "support-bot"),
        ("root", "completed", "lookup", "c1"),
        ("root", "blocked", "refund", "c2"),  # the hooks' verdict ...
        ("root", "failed", "reserve", "c3"),
        ("root", "failed", "cancel", "c4"),
        ("child", "ExecutionStarted", "researcher"),
        ("child", "completed", "lookup", "s1"),
        ("child", "ExecutionFinished", "completed"),
        ("root", "completed", "research", "c5"),
        ("root", "ExecutionFinished", "completed"),
    ]
    assert "refund:A1" in agent.ran  # ... which a callback cannot enforce
    assert agent.tool_message("c2").content == "refunded"
    assert any("cannot stop a call" in r.getMessage() for r in caplog.records)
    child = recorder.of(ExecutionStarted)[1]
    assert child.attribution.parent_tool_call_id == "c5"


async def test_the_wrapper_alone_governs_each_call_in_an_execution_of_its_own() -> None:
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(hooks=[REFUNDS]) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine, program="shop"))
        chat = model(
            call("lookup", "c1", order_id="A1"),
            call("refund", "c2", order_id="A1", amount=1.0),
            AIMessage(content="done"),
        )
        await agent.graph("bot", chat, agent.tools()).ainvoke({"messages": [HumanMessage("hi")]})
    assert agent.ran == ["lookup:A1"]
    assert agent.tool_message("c2").status == "error"
    assert [(e.program, e.execution_id) for e in recorder.of(ExecutionStarted)] == [
        ("shop", e.execution_id) for e in recorder.of(ToolCallStarted)
    ]
    assert [(e.tool_call_id, e.status) for e in recorder.of(ToolCallFinished)] == [
        ("c1", "completed"),
        ("c2", "blocked"),
    ]
    assert [e.status for e in recorder.of(ExecutionFinished)] == ["completed", "completed"]


async def test_the_wrapper_alone_ends_a_failed_calls_execution_with_its_error() -> None:
    """A tool that handled its own error: the call was a ``ToolError``, its execution's
    end a generic ``Error``."""
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        chat = model(call("reserve", "c1", order_id="A1"), AIMessage(content="done"))
        await agent.graph("bot", chat, agent.tools()).ainvoke({"messages": [HumanMessage("hi")]})
    [ended] = recorder.of(ToolCallFinished)
    [finished] = recorder.of(ExecutionFinished)
    assert ended.status == finished.status == "failed"
    assert ended.error is not None and finished.error is not None
    expected = ("ToolError", "order A1 is on hold", "failure")
    assert (ended.error.type, ended.error.message, ended.error.cause) == expected
    assert (finished.error.type, finished.error.message, finished.error.cause) == expected


async def test_the_wrapper_alone_records_the_post_hooks_output_as_the_result() -> None:
    """A call's own execution ends with what the graph got, not what a post-hook removed."""

    def scrub(context: ToolUseContext, output: Any) -> PostHookResult:
        return PostHookResult(modified_output=str(output).replace("A1", "[order]"))

    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(hooks=[HookMatcher(post=[scrub])]) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        chat = model(call("lookup", "c1", order_id="A1"), AIMessage(content="done"))
        await agent.graph("bot", chat, agent.tools()).ainvoke({"messages": [HumanMessage("hi")]})
    shown = agent.tool_message("c1").content
    assert "A1" not in shown and "[order]" in shown
    [ended] = recorder.of(ToolCallFinished)
    [finished] = recorder.of(ExecutionFinished)
    assert ended.result == finished.result == shown


# -- shapes of runs ---------------------------------------------------------------------


async def test_a_subgraph_node_is_a_child_execution(check_stream: CheckStream) -> None:
    recorder = RecordingObserver()
    root_id = uuid.uuid4()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        inner = agent.graph(
            "inner",
            model(call("lookup", "s1", order_id="B2"), AIMessage(content="ok")),
            agent.tools()[:1],
        )
        builder = StateGraph(MessagesState)
        builder.add_node("delegate", inner)
        builder.add_edge(START, "delegate")
        builder.add_edge("delegate", END)
        await builder.compile(name="outer").ainvoke(
            {"messages": [HumanMessage("B2?")]},
            config(OnlookerCallbackHandler(engine, program="shop", owner="ana"), root_id),
        )
    check_stream(recorder.events)
    assert steps(recorder.events, str(root_id)) == [
        ("root", "ExecutionStarted", "shop"),
        ("child", "ExecutionStarted", "inner"),
        ("child", "started", "lookup", "s1"),
        ("child", "completed", "lookup", "s1"),
        ("child", "ExecutionFinished", "completed"),
        ("root", "ExecutionFinished", "completed"),
    ]
    child = recorder.of(ExecutionStarted)[1]
    assert child.attribution.parent_execution_id == str(root_id)
    assert child.attribution.parent_tool_call_id is None
    assert (child.trigger.kind, child.owner) == ("langgraph", "ana")  # its root's, not "spawn"


async def test_a_synchronous_invoke_on_a_worker_thread_is_recorded(
    check_stream: CheckStream,
) -> None:
    recorder = RecordingObserver()
    root_id = uuid.uuid4()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent()
        chat = model(call("lookup", "c1", order_id="A1"), AIMessage(content="done"))
        graph = agent.graph("bot", chat, agent.tools())
        handler = OnlookerCallbackHandler(engine)
        await anyio.to_thread.run_sync(
            lambda: graph.invoke({"messages": [HumanMessage("hi")]}, config(handler, root_id))
        )
    check_stream(recorder.events)
    assert steps(recorder.events, str(root_id)) == [
        ("root", "ExecutionStarted", "bot"),
        ("root", "started", "lookup", "c1"),
        ("root", "completed", "lookup", "c1"),
        ("root", "ExecutionFinished", "completed"),
    ]


class BindingModel(GenericFakeChatModel):
    """The fake model ``create_react_agent`` accepts: binding tools changes nothing."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
@pytest.mark.parametrize("wrapped", [False, True], ids=["handler", "handler+wrapper"])
async def test_create_react_agent_is_recorded(wrapped: bool, check_stream: CheckStream) -> None:
    """Its prompt step is synchronous: LangChain runs the handler's callbacks on a thread of
    its own while the engine's loop waits for them (waiting for that loop hung for ever)."""
    from langgraph.prebuilt import create_react_agent

    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine) if wrapped else None)
        tools: Any = (
            ToolNode(agent.tools()[:1], awrap_tool_call=agent.wrapper)
            if wrapped
            else (agent.tools()[:1])
        )
        chat = BindingModel(messages=iter([call("lookup", "c1", order_id="A1"), AIMessage("ok")]))
        graph = create_react_agent(chat, tools)
        with anyio.fail_after(30):
            await graph.ainvoke(
                {"messages": [HumanMessage("look")]},
                {"callbacks": [OnlookerCallbackHandler(engine)]},
            )
    check_stream(recorder.events)
    assert [(e.tool_call_id, e.status) for e in recorder.of(ToolCallFinished)] == [
        ("c1", "completed")
    ]
    assert [e.status for e in recorder.of(ExecutionFinished)] == ["completed"]


async def asking_synchronously(inner: Any, check_stream: CheckStream) -> RecordingObserver:
    """A graph whose async tool ``ask`` (call ``c1``) runs ``inner`` by its synchronous
    ``invoke``, recorded by the handler; the stream checked."""

    @tool
    async def ask(question: str) -> str:
        """Ask the inner agent."""
        return str(inner.invoke({"messages": [HumanMessage(question)]})["messages"][-1].content)

    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        chat = model(call("ask", "c1", question="why"), AIMessage("done"))
        with anyio.fail_after(30):  # a hang fails the test
            await (
                Agent()
                .graph("outer", chat, [ask])
                .ainvoke(
                    {"messages": [HumanMessage("go")]},
                    config(OnlookerCallbackHandler(engine), uuid.uuid4()),
                )
            )
    check_stream(recorder.events)
    outer, inner_run = recorder.of(ExecutionStarted)
    assert inner_run.attribution.parent_execution_id == outer.execution_id
    assert inner_run.attribution.parent_tool_call_id == "c1"
    return recorder


async def test_a_synchronous_sub_agent_inside_an_async_tool_is_its_child(
    check_stream: CheckStream,
) -> None:
    """A sub-graph's ``invoke`` blocks the engine's loop while LangChain runs the callbacks on
    a thread of its own: they are queued, and recorded in order once the loop is free."""
    inner_chat = model(AIMessage("inner answer"))
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [inner_chat.invoke(state["messages"])]})
    builder.add_edge(START, "agent")
    recorder = await asking_synchronously(builder.compile(name="inner"), check_stream)
    assert [e.status for e in recorder.of(ExecutionFinished)] == ["completed", "completed"]


async def test_a_synchronous_sub_agent_with_a_tool_node_inside_an_async_tool_is_its_child(
    check_stream: CheckStream,
) -> None:
    """A sub-agent's ``invoke`` whose ``ToolNode`` runs its tools on an executor thread: the
    engine's loop waits in that executor, not in LangChain's dispatch (this hung for ever)."""
    agent = Agent()
    inner = agent.graph(
        "inner",
        model(call("lookup", "s1", order_id="B2"), AIMessage("inner answer")),
        agent.tools()[:1],
    )
    recorder = await asking_synchronously(inner, check_stream)
    assert [(e.tool_call_id, e.status) for e in recorder.of(ToolCallFinished)] == [
        ("s1", "completed"),
        ("c1", "completed"),
    ]


async def test_a_failing_graph_fails_its_execution() -> None:
    recorder = RecordingObserver()
    root_id = uuid.uuid4()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        chat = model(call("cancel", "c1", order_id="A1"), AIMessage(content="done"))
        graph = agent.graph("bot", chat, agent.tools(), handle_tool_errors=False)
        with pytest.raises(ToolException, match="already shipped"):
            await graph.ainvoke(
                {"messages": [HumanMessage("x")]}, config(OnlookerCallbackHandler(engine), root_id)
            )
    [ended] = recorder.of(ToolCallFinished)
    [run] = recorder.of(ExecutionFinished)
    assert (ended.tool_call_id, ended.status) == ("c1", "failed")
    assert run.status == "failed" and run.error is not None and run.error.type == "ToolException"


async def test_a_sibling_that_ends_after_the_failed_run_stays_cancelled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """LangGraph leaves a parallel sibling running when another call fails the run: its
    late end is not an adapter error (it was one), and its record stays ``cancelled``."""
    ended = anyio.Event()
    recorder = RecordingObserver()

    @tool
    async def slow() -> str:
        """Takes a while: until boom has failed the run (a 50 ms sleep raced that failure,
        which takes longer on a loaded machine: the call was then recorded completed)."""
        with anyio.fail_after(5):
            while not recorder.of(ExecutionFinished):  # noqa: ASYNC110  # the bus's
                await anyio.sleep(0.005)
        ended.set()
        return "slow"

    @tool
    def boom() -> str:
        """Fails at once."""
        raise ValueError("kaput")

    both = AIMessage(
        content="",
        tool_calls=[
            {"name": "slow", "args": {}, "id": "c1"},
            {"name": "boom", "args": {}, "id": "c2"},
        ],
    )

    def late_end_handled() -> bool:  # recorded as late, or failed to record (the defect)
        return any("tool call 'c1'" in r.getMessage() for r in caplog.records)

    with caplog.at_level(logging.WARNING, logger="onlooker.integrations.langchain"):
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            agent = Agent(wrap_tool_call(engine))
            graph = agent.graph("bot", model(both), [slow, boom], handle_tool_errors=False)
            with pytest.raises(ValueError, match="kaput"):
                await graph.ainvoke(
                    {"messages": [HumanMessage("x")]},
                    config(OnlookerCallbackHandler(engine), uuid.uuid4()),
                )
            with anyio.fail_after(5):
                await ended.wait()
                while not late_end_handled():  # noqa: ASYNC110  # the wrapper's
                    await anyio.sleep(0.01)
    statuses = {e.tool_call_id: e.status for e in recorder.of(ToolCallFinished)}
    assert statuses == {"c1": "cancelled", "c2": "failed"}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("ended after its execution" in r.getMessage() for r in caplog.records)


async def test_an_interrupted_graph_leaves_its_call_cancelled() -> None:
    @tool
    def approve(order_id: str) -> str:
        """Ask a person to approve."""
        return str(interrupt(f"approve {order_id}?"))

    recorder = RecordingObserver()
    root_id = uuid.uuid4()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine))
        chat = model(call("approve", "c1", order_id="A1"), AIMessage(content="done"))
        graph = agent.graph("bot", chat, [approve], checkpointer=InMemorySaver())
        state = await graph.ainvoke(
            {"messages": [HumanMessage("x")]},
            {
                **config(OnlookerCallbackHandler(engine), root_id),
                "configurable": {"thread_id": "t"},
            },
        )
    assert "__interrupt__" in state  # LangGraph paused the run and returned
    assert steps(recorder.events, str(root_id)) == [
        ("root", "ExecutionStarted", "bot"),
        ("root", "started", "approve", "c1"),
        ("root", "cancelled", "approve", "c1"),
        ("root", "ExecutionFinished", "completed"),
    ]


async def test_a_resume_given_the_same_run_id_is_its_own_execution(
    check_stream: CheckStream, caplog: pytest.LogCaptureFixture
) -> None:
    """Human-in-the-loop code often resumes with the config it started with, ``run_id``
    and all: the resumed run is recorded whole as ``<run_id>#2``, not node by node."""

    @tool
    def approve(order_id: str) -> str:
        """Ask a person to approve."""
        return f"approved {order_id}: {interrupt('ok?')}"

    recorder = RecordingObserver()
    root_id = uuid.uuid4()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        chat = model(call("approve", "c1", order_id="A1"), AIMessage(content="done"))
        graph = Agent(wrap_tool_call(engine)).graph(
            "bot", chat, [approve], checkpointer=InMemorySaver()
        )
        same: RunnableConfig = {
            **config(OnlookerCallbackHandler(engine), root_id),
            "configurable": {"thread_id": "t"},
        }
        with caplog.at_level(logging.WARNING, logger="onlooker"):
            await graph.ainvoke({"messages": [HumanMessage("x")]}, same)
            await graph.ainvoke(Command(resume="yes"), same)
    check_stream(recorder.events)
    started = [(e.execution_id, e.program) for e in recorder.of(ExecutionStarted)]
    assert started == [(str(root_id), "bot"), (f"{root_id}#2", "bot")]
    resumed = recorder.for_execution(f"{root_id}#2")
    assert [(e.kind, getattr(e, "status", None)) for e in resumed][1:] == [
        ("ToolCallStarted", None),
        ("ToolCallFinished", "completed"),
        ("ExecutionFinished", "completed"),
    ]
    assert not caplog.records


MODES = ["handler", "wrapper", "handler+wrapper"]


class CountingRecorder(RecordingObserver):
    """A recorder that says when it has seen ``calls`` tool calls end."""

    def __init__(self, calls: int) -> None:
        super().__init__()
        self.calls = calls
        self.ended = anyio.Event()

    def handle(self, event: ExecutionEvent) -> None:
        super().handle(event)
        if len(self.of(ToolCallFinished)) >= self.calls:
            self.ended.set()


@pytest.mark.parametrize("mode", MODES)
async def test_a_sibling_still_running_at_an_interrupt_is_recorded_as_it_ends(
    mode: str, tmp_path: Path, check_stream: CheckStream
) -> None:
    """Two parallel calls, one pausing the graph with interrupt(): LangGraph returns at
    the interrupt while the other still runs (ToolNode gathers its calls and cancels
    none), keeps neither call's result, and runs both again on resume. Each run is
    recorded as it happens: the sibling's first run completed with its result, the
    interrupting call cancelled by the interrupt, then both runs of the resume."""
    release = anyio.Event()
    ran: list[str] = []

    @tool
    async def lookup(order_id: str) -> str:
        """Look an order up (slowly)."""
        await release.wait()
        ran.append(f"lookup:{order_id}")
        return f"order {order_id}: shipped"

    @tool
    def approve(order_id: str) -> str:
        """Ask a person to approve."""
        ran.append(f"approve:{order_id}")
        return f"approved {order_id}: {interrupt(f'approve {order_id}?')}"

    both = AIMessage(
        content="",
        tool_calls=[
            {"name": "lookup", "args": {"order_id": "A1"}, "id": "c1"},
            {"name": "approve", "args": {"order_id": "A1"}, "id": "c2"},
        ],
    )
    url = f"sqlite:///{tmp_path / 'history.db'}"
    recorder = CountingRecorder(calls=2)
    first, second = uuid.uuid4(), uuid.uuid4()
    async with onlooker.ExecutionEngine(plugins=[history.plugin(url)]) as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine) if "wrapper" in mode else None)
        chat = model(both, AIMessage(content="done"))
        graph = agent.graph("bot", chat, [lookup, approve], checkpointer=InMemorySaver())

        def run_config(run_id: uuid.UUID) -> RunnableConfig:
            handler: RunnableConfig = (
                config(OnlookerCallbackHandler(engine), run_id) if "handler" in mode else {}
            )
            return {**handler, "configurable": {"thread_id": "t"}}

        state = await graph.ainvoke({"messages": [HumanMessage("x")]}, run_config(first))
        assert "__interrupt__" in state
        assert ran == ["approve:A1"]  # the graph returned; lookup still runs
        if "handler" in mode:  # so its execution waits for it
            assert str(first) not in {e.execution_id for e in recorder.of(ExecutionFinished)}
        release.set()
        with anyio.fail_after(5):
            await recorder.ended.wait()  # the sibling's end is recorded
        state = await graph.ainvoke(Command(resume="yes"), run_config(second))
        assert [m.content for m in state["messages"] if isinstance(m, ToolMessage)] == [
            "order A1: shipped",
            "approved A1: yes",
        ]
    # LangGraph kept neither result of the first run: both calls ran again on resume.
    assert sorted(ran) == ["approve:A1", "approve:A1", "lookup:A1", "lookup:A1"]
    events = recorder.events
    check_stream(events)
    finished = recorder.of(ToolCallFinished)
    assert [(e.tool_call_id, e.status) for e in finished[:2]] == [
        ("c2", "cancelled"),
        ("c1", "completed"),
    ]
    paused, sibling = finished[:2]
    assert paused.error is not None
    assert (paused.error.type, paused.error.cause) == ("GraphInterrupt", "interrupt")
    assert "approve A1?" in paused.error.message
    assert sibling.result == "order A1: shipped" and sibling.error is None
    assert sorted((e.tool_call_id, e.status, e.result) for e in finished[2:]) == [
        ("c1", "completed", "order A1: shipped"),
        ("c2", "completed", "approved A1: yes"),
    ]
    if mode == "wrapper":  # each call an execution of its own
        own = {e.execution_id: e for e in recorder.of(ExecutionFinished)}
        end = own[paused.execution_id]
        assert end.status == "cancelled"
        assert end.error is not None and end.error.cause == "interrupt"
        assert own[sibling.execution_id].status == "completed"
        return
    # The paused run's execution finishes once the sibling has ended, and holds both.
    assert paused.execution_id == sibling.execution_id == str(first)
    ends = [(e.execution_id, e.status) for e in recorder.of(ExecutionFinished)]
    assert ends == [(str(first), "completed"), (str(second), "completed")]
    async with history.open(url) as store:
        tree = await store.get_execution(str(first))
        resumed = await store.get_execution(str(second))
    assert tree is not None and tree.status == "completed"
    assert sorted((c.tool_call_id, c.status) for c in tree.tool_calls) == [
        ("c1", "completed"),
        ("c2", "cancelled"),
    ]
    assert resumed is not None and resumed.status == "completed"
    assert sorted((c.tool_call_id, c.status) for c in resumed.tool_calls) == [
        ("c1", "completed"),
        ("c2", "completed"),
    ]


@pytest.mark.parametrize("wrapped", [False, True], ids=["handler", "handler+wrapper"])
async def test_a_command_is_recorded_by_the_tool_message_inside_it(wrapped: bool) -> None:
    """A tool that updates the graph's state returns a Command; its ToolMessage says how the
    call went, and its content is the result."""

    @tool
    def book(seat: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Book a seat."""
        if seat == "full":
            answer = ToolMessage("no seats left", tool_call_id=tool_call_id, status="error")
        else:
            answer = ToolMessage(f"booked {seat}", tool_call_id=tool_call_id)
        return Command(update={"messages": [answer]})

    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine) if wrapped else None)
        chat = model(
            call("book", "b1", seat="12A"), call("book", "b2", seat="full"), AIMessage("ok")
        )
        await agent.graph("booking", chat, [book]).ainvoke(
            {"messages": [HumanMessage("book")]},
            config(OnlookerCallbackHandler(engine), uuid.uuid4()),
        )
    booked, refused = recorder.of(ToolCallFinished)
    assert (booked.tool_call_id, booked.status, booked.result) == ("b1", "completed", "booked 12A")
    assert (refused.tool_call_id, refused.status, refused.result) == ("b2", "failed", None)
    assert refused.error is not None and refused.error.message == "no seats left"


@pytest.mark.parametrize("mode", ["handler", "wrapper", "handler+wrapper"])
async def test_a_call_to_a_tool_the_tool_node_lacks_fails_unknown(
    mode: str, check_stream: CheckStream
) -> None:
    """The ``ToolNode`` answers it with an error message and runs no tool (no callback tells
    of it): recorded once, ``failed``, as ``ctx.call`` records a tool it does not know."""
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine) if "wrapper" in mode else None)
        asked = AIMessage(
            content="",
            tool_calls=[
                {"name": "teleport", "args": {"to": "mars"}, "id": "u1"},
                {"name": "lookup", "args": {"order_id": "A1"}, "id": "u2"},
            ],
        )
        handler = config(OnlookerCallbackHandler(engine), uuid.uuid4())
        await agent.graph("bot", model(asked, AIMessage("ok")), agent.tools()[:1]).ainvoke(
            {"messages": [HumanMessage("go")]}, handler if "handler" in mode else None
        )
    check_stream(recorder.events)
    assert agent.tool_message("u1").status == "error"
    assert sorted((e.tool_call_id, e.tool, e.args) for e in recorder.of(ToolCallStarted)) == [
        ("u1", "teleport", {"to": "mars"}),
        ("u2", "lookup", {"order_id": "A1"}),
    ]
    finished = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
    assert finished["u2"].status == "completed"
    unknown = finished["u1"]
    assert unknown.status == "failed" and unknown.error is not None
    assert (unknown.error.type, unknown.error.cause) == ("UnknownToolError", "failure")
    assert unknown.error.message.startswith("Error: teleport is not a valid tool")


@pytest.mark.parametrize("wrapped", [False, True], ids=["handler", "handler+wrapper"])
async def test_a_sub_agent_that_hands_off_to_its_parent_graph_completes(
    wrapped: bool, check_stream: CheckStream
) -> None:
    """LangGraph's multi-agent handoff: a sub-agent's tool returns
    ``Command(goto=..., graph=Command.PARENT)``; the sub-agent ended by handing over, not
    cancelled (the ParentCommand that carries it is no interrupt)."""

    @tool
    def to_billing(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Hand the conversation to billing."""
        moved = ToolMessage("moved to billing", tool_call_id=tool_call_id)
        return Command(goto="billing", graph=Command.PARENT, update={"messages": [moved]})

    recorder = RecordingObserver()
    root_id = uuid.uuid4()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine) if wrapped else None)
        triage = agent.graph(
            "triage", model(call("to_billing", "h1"), AIMessage("?")), [to_billing]
        )
        billing = agent.graph("billing", model(AIMessage("settled")), [to_billing])
        builder = StateGraph(MessagesState)
        builder.add_node("triage", triage, destinations=("billing",))
        builder.add_node("billing", billing)
        builder.add_edge(START, "triage")
        final = await builder.compile(name="support").ainvoke(
            {"messages": [HumanMessage("refund")]}, config(OnlookerCallbackHandler(engine), root_id)
        )
    assert final["messages"][-1].content == "settled"
    check_stream(recorder.events)
    assert steps(recorder.events, str(root_id)) == [
        ("root", "ExecutionStarted", "support"),
        ("child", "ExecutionStarted", "triage"),
        ("child", "started", "to_billing", "h1"),
        ("child", "completed", "to_billing", "h1"),
        ("child", "ExecutionFinished", "completed"),
        ("child", "ExecutionStarted", "billing"),
        ("child", "ExecutionFinished", "completed"),
        ("root", "ExecutionFinished", "completed"),
    ]
    handed_over = recorder.of(ExecutionFinished)[0]
    assert handed_over.error is None and isinstance(handed_over.result, dict)
    assert handed_over.result["goto"] == "billing"


async def test_runs_cut_short_by_a_cancellation_are_not_kept(check_stream: CheckStream) -> None:
    """LangChain reports no end for a node (and, before langchain-core 1.7.5, a tool) a
    cancellation cuts short: once the root has ended, the adapter keeps nothing of them
    (a server whose clients time out)."""
    from onlooker.integrations.langchain._shared import registry_of

    @tool
    async def slow(order_id: str) -> str:
        """Take a while."""
        await anyio.sleep(10)
        return order_id

    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        handler, agent = OnlookerCallbackHandler(engine), Agent(wrap_tool_call(engine))
        for number in range(5):
            chat = model(call("slow", f"c{number}", order_id="A1"), AIMessage("never"))
            with anyio.move_on_after(0.05):
                await agent.graph("bot", chat, [slow]).ainvoke(
                    {"messages": [HumanMessage("go")]}, config(handler, uuid.uuid4())
                )
        runs = registry_of(engine).runs
        with anyio.fail_after(5):  # the last root's end is reported after the cancellation
            while runs or len(recorder.of(ExecutionFinished)) < 5:  # noqa: ASYNC110
                await anyio.sleep(0.01)
    check_stream(recorder.events)
    statuses = [e.status for e in recorder.of(ExecutionFinished)]
    assert statuses == ["cancelled"] * 5


@pytest.mark.parametrize("wrapped", [False, True], ids=["handler", "handler+wrapper"])
async def test_a_repeated_model_call_id_gets_a_suffix(wrapped: bool) -> None:
    """As the other adapters record it: the framework's id, then ``#2``."""
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine) if wrapped else None)
        chat = model(
            call("lookup", "c1", order_id="A1"),
            call("lookup", "c1", order_id="A2"),
            AIMessage("ok"),
        )
        await agent.graph("repeats", chat, agent.tools()[:1]).ainvoke(
            {"messages": [HumanMessage("look")]},
            config(OnlookerCallbackHandler(engine), uuid.uuid4()),
        )
    assert [(e.tool_call_id, e.args) for e in recorder.of(ToolCallStarted)] == [
        ("c1", {"order_id": "A1"}),
        ("c1#2", {"order_id": "A2"}),
    ]


@pytest.mark.parametrize("wrapped", [False, True])
async def test_an_empty_model_call_id_gets_onlookers_own(wrapped: bool) -> None:
    """Some servers send ``""``: refused by the engine, the call would go unrecorded."""
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent(wrap_tool_call(engine) if wrapped else None)
        chat = model(call("lookup", "", order_id="A1"), AIMessage("ok"))
        await agent.graph("blank", chat, agent.tools()[:1]).ainvoke(
            {"messages": [HumanMessage("look")]},
            config(OnlookerCallbackHandler(engine), uuid.uuid4()),
        )
    (finished,) = recorder.of(ToolCallFinished)
    assert finished.status == "completed" and finished.tool_call_id


async def test_a_graph_inside_a_repeated_call_is_the_child_of_that_call() -> None:
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        agent = Agent()
        inner = agent.graph("inner", model(AIMessage("inner done"), AIMessage("inner done")), [])

        @tool
        async def delegate(topic: str) -> str:
            """Ask the inner graph."""
            state = await inner.ainvoke({"messages": [HumanMessage(topic)]})
            return str(state["messages"][-1].content)

        chat = model(
            call("delegate", "d1", topic="a"), call("delegate", "d1", topic="b"), AIMessage("ok")
        )
        await agent.graph("outer", chat, [delegate]).ainvoke(
            {"messages": [HumanMessage("go")]},
            config(OnlookerCallbackHandler(engine), uuid.uuid4()),
        )
    children = [e for e in recorder.of(ExecutionStarted) if e.attribution.depth == 1]
    assert [c.attribution.parent_tool_call_id for c in children] == ["d1", "d1#2"]


async def test_a_tool_run_on_its_own_is_an_execution_of_one_call() -> None:
    recorder = RecordingObserver()
    run_id = uuid.uuid4()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        [lookup] = Agent().tools()[:1]
        out = await lookup.ainvoke(
            {"order_id": "A1"}, config(OnlookerCallbackHandler(engine), run_id)
        )
    assert out == "order A1: shipped"
    assert steps(recorder.events, str(run_id)) == [
        ("root", "ExecutionStarted", "lookup"),
        ("root", "started", "lookup", str(run_id)),
        ("root", "completed", "lookup", str(run_id)),
        ("root", "ExecutionFinished", "completed"),
    ]


async def test_a_post_hook_abort_seen_by_the_handler_fails_the_execution(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The callback cannot stop a tool that has run; the abort is recorded, not logged as the
    adapter's failure, and the execution it ends finishes failed before the engine closes."""

    def leaked(context: ToolUseContext, output: object) -> PostHookResult:
        return PostHookResult(action=HookAction.ABORT, reason="leaked data")

    recorder = RecordingObserver()
    run_id = uuid.uuid4()
    async with onlooker.ExecutionEngine(
        hooks=[HookMatcher(pattern="lookup", post=(leaked,))]
    ) as engine:
        engine.bus.subscribe(recorder)
        [lookup] = Agent().tools()[:1]
        with caplog.at_level(logging.WARNING, logger="onlooker.integrations.langchain"):
            out = await lookup.ainvoke(
                {"order_id": "A1"}, config(OnlookerCallbackHandler(engine), run_id)
            )
        assert recorder.of(ExecutionFinished)  # not left for the engine's close to cancel
    assert out == "order A1: shipped"
    assert steps(recorder.events, str(run_id))[2:] == [
        ("root", "blocked", "lookup", str(run_id)),
        ("root", "ExecutionFinished", "failed"),
    ]
    [end] = recorder.of(ExecutionFinished)
    assert end.error is not None and end.error.type == "HookAbortError"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_the_adapter_failing_never_breaks_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    engine = onlooker.ExecutionEngine()  # never started: every onlooker call fails
    agent = Agent(wrap_tool_call(engine))
    chat = model(call("lookup", "c1", order_id="A1"), AIMessage(content="done"))
    with caplog.at_level(logging.ERROR, logger="onlooker.integrations.langchain"):
        state = await agent.graph("bot", chat, agent.tools()).ainvoke(
            {"messages": [HumanMessage("hi")]},
            config(OnlookerCallbackHandler(engine), uuid.uuid4()),
        )
    assert state["messages"][-1].content == "done"
    assert agent.ran == ["lookup:A1"]
    assert caplog.records and all(
        r.name == "onlooker.integrations.langchain" for r in caplog.records
    )


def test_a_missing_langgraph_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.prebuilt", None)  # as if not installed
    with pytest.raises(ImportError, match=r'pip install "onlooker\[langchain\]"'):
        wrap_tool_call(onlooker.ExecutionEngine())
