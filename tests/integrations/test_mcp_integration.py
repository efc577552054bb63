"""The MCP adapter on a real ``mcp`` 2.3 server, driven by the SDK's in-process client.

``Client(server, mode="legacy")`` speaks the handshake protocol over the SDK's
in-memory streams (one session: one execution of every call); ``Client(server)``
speaks the 2026-07-28 protocol in-process (no sessions: one execution per call).
MCP has no sub-agents, so there is no child execution to track.
"""

from __future__ import annotations

import importlib
import logging
import math
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from mcp import Client
from mcp.client._memory import InMemoryTransport
from mcp.client.session import ElicitationFnT
from mcp.server import Server
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)
from mcp_types.jsonrpc import JSONRPCNotification, JSONRPCRequest
from pydantic import AfterValidator, BaseModel

import onlooker
from onlooker import (
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    HookAction,
    HookMatcher,
    InteractionResolved,
    InteractionStarted,
    PostHookResult,
    PreHookResult,
    ToolCallFinished,
    ToolCallStarted,
    ToolUseContext,
)
from onlooker.integrations.mcp import OnlookerMiddleware, request_id_of
from onlooker.plugins import audit, history
from onlooker.testing import RecordingObserver

pytestmark = pytest.mark.anyio

Check = Callable[[Sequence[ExecutionEvent]], None]


def refuse_deletes(use: ToolUseContext) -> PreHookResult:
    return PreHookResult(action=HookAction.BLOCK, reason=f"{use.tool_name} is not allowed here")


def polite_name(use: ToolUseContext) -> PreHookResult:
    return PreHookResult(modified_input={**use.tool_input, "name": f"Dr. {use.tool_input['name']}"})


def shout(use: ToolUseContext, output: Any) -> PostHookResult:
    """Rewrite a whole CallToolResult: its text and its structured content agree."""
    loud = str(output["structuredContent"]["result"]).upper()
    return PostHookResult(
        modified_output={
            **output,
            "content": [{"type": "text", "text": loud}],
            "structuredContent": {"result": loud},
        }
    )


def redact(use: ToolUseContext, output: Any) -> PostHookResult:
    """A plain string: the one text content the client gets."""
    return PostHookResult(modified_output="[redacted]")


HOOKS = [
    HookMatcher(pattern="delete_*", pre=(refuse_deletes,)),
    HookMatcher(pattern="greet", pre=(polite_name,), post=(shout,)),
    HookMatcher(pattern="echo", post=(redact,)),
]


@dataclass
class Calc:
    """An MCPServer whose tools note what ran; an outer middleware notes each tools/call id."""

    server: MCPServer
    ran: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)


def calc_server(middleware: OnlookerMiddleware) -> Calc:
    calc = Calc(MCPServer("calc"))
    server = calc.server

    async def note_request_id(
        ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "tools/call":
            calc.request_ids.append(str(ctx.request_id))
        return await call_next(ctx)

    server.middleware.extend([note_request_id, middleware])

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        calc.ran.append(("add", {"a": a, "b": b}))
        return a + b

    @server.tool()
    def divide(a: int, b: int) -> float:
        """Divide a by b."""
        calc.ran.append(("divide", {"a": a, "b": b}))
        if b == 0:
            raise ToolError("division by zero")
        return a / b

    @server.tool()
    def delete_everything(path: str) -> str:
        """Delete a directory tree."""
        calc.ran.append(("delete_everything", {"path": path}))
        return "deleted"

    @server.tool()
    def greet(name: str) -> str:
        """Greet someone."""
        calc.ran.append(("greet", {"name": name}))
        return f"hello {name}"

    return calc


@dataclass
class Recorded:
    engine: onlooker.ExecutionEngine
    recorder: RecordingObserver
    trail: audit.AuditTrail
    history_url: str


@asynccontextmanager
async def engine_for(
    tmp_path: Path, hooks: Sequence[HookMatcher] = HOOKS
) -> AsyncIterator[Recorded]:
    """An engine with the hooks, history and audit; closed (all written) on exit."""
    url = f"sqlite:///{tmp_path / 'history.db'}"
    trail_plugin = audit.plugin(directory=tmp_path / "audit", session_id="mcp")
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(
        plugins=[history.plugin(url), trail_plugin], hooks=hooks
    ) as engine:
        engine.bus.subscribe(recorder)
        yield Recorded(engine, recorder, engine.extension(trail_plugin), url)


def text(result: CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)
    return result.content[0].text


async def three_calls(client: Client) -> list[CallToolResult]:
    return [
        await client.call_tool("add", {"a": 1, "b": 2}),
        await client.call_tool("divide", {"a": 1, "b": 0}),
        await client.call_tool("delete_everything", {"path": "/"}),
    ]


def tool_events(recorder: RecordingObserver) -> list[tuple[str, str, str | None]]:
    """(kind, tool, status) of every tool-call event, in order."""
    return [
        (e.kind, e.tool, e.status if isinstance(e, ToolCallFinished) else None)
        for e in recorder.events
        if isinstance(e, ToolCallStarted | ToolCallFinished)
    ]


THREE_CALLS = [
    ("ToolCallStarted", "add", None),
    ("ToolCallFinished", "add", "completed"),
    ("ToolCallStarted", "divide", None),
    ("ToolCallFinished", "divide", "failed"),
    ("ToolCallStarted", "delete_everything", None),
    ("ToolCallFinished", "delete_everything", "blocked"),
]


def assert_client_saw(calc: Calc, results: list[CallToolResult]) -> None:
    done, failed, refused = results
    assert (done.is_error, text(done), done.structured_content) == (False, "3", {"result": 3})
    assert (failed.is_error, text(failed)) == (
        True,
        "Error executing tool divide: division by zero",
    )
    assert (refused.is_error, text(refused)) == (True, "delete_everything is not allowed here")
    assert [tool for tool, _ in calc.ran] == ["add", "divide"]  # the refused body never ran


async def assert_history_and_audit(
    recorded: Recorded, statuses: dict[str, list[tuple[str, str]]]
) -> None:
    """History holds each execution's calls with these (tool, status); the trail verifies."""
    async with history.open(recorded.history_url) as store:
        for execution_id, expected in statuses.items():
            tree = await store.get_execution(execution_id)
            assert tree is not None and tree.status == "completed"
            assert [(c.tool, c.status) for c in tree.tool_calls] == expected
            assert await store.events(execution_id) == recorded.recorder.for_execution(execution_id)
    report = audit.verify(recorded.trail.path)
    assert report.ok and report.records == len(recorded.recorder.events)


class TestOneSession:
    async def test_a_session_is_one_execution_of_every_call(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            calc = calc_server(OnlookerMiddleware(recorded.engine, program="calc"))
            async with Client(calc.server, mode="legacy") as client:
                results = await three_calls(client)
        recorder = recorded.recorder

        assert_client_saw(calc, results)
        check_stream(recorder.events)
        assert recorder.kinds() == [
            "ExecutionStarted",
            *[kind for kind, _, _ in THREE_CALLS],
            "ExecutionFinished",
        ]
        assert tool_events(recorder) == THREE_CALLS
        (started,) = recorder.of(ExecutionStarted)
        assert (started.program, started.trigger.kind) == ("calc", "mcp")
        assert started.trigger.metadata["client"] == {"name": "mcp", "version": "0.1.0"}
        (finished,) = recorder.of(ExecutionFinished)
        assert finished.status == "completed"

        ids = [e.tool_call_id for e in recorder.of(ToolCallStarted)]
        assert len(calc.request_ids) == 3
        assert ids == [f"mcp:{started.execution_id}:{rid}" for rid in calc.request_ids]
        assert [request_id_of(i) for i in ids] == calc.request_ids

        add_done, divide_failed, delete_blocked = recorder.of(ToolCallFinished)
        assert add_done.result == {
            "content": [{"type": "text", "text": "3"}],
            "isError": False,
            "structuredContent": {"result": 3},
        }
        assert divide_failed.error is not None
        assert divide_failed.error.message == "Error executing tool divide: division by zero"
        assert delete_blocked.error is not None
        assert "delete_everything is not allowed here" in delete_blocked.error.message

        await assert_history_and_audit(
            recorded,
            {
                started.execution_id: [
                    ("add", "completed"),
                    ("divide", "failed"),
                    ("delete_everything", "blocked"),
                ]
            },
        )

    async def test_hooks_rewrite_the_arguments_and_the_result(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            calc = calc_server(OnlookerMiddleware(recorded.engine))
            async with Client(calc.server, mode="legacy") as client:
                result = await client.call_tool("greet", {"name": "Ada"})

        assert calc.ran == [("greet", {"name": "Dr. Ada"})]
        assert (result.is_error, text(result)) == (False, "HELLO DR. ADA")
        assert result.structured_content == {"result": "HELLO DR. ADA"}
        (started,) = recorded.recorder.of(ToolCallStarted)
        assert started.args == {"name": "Dr. Ada"}
        (finished,) = recorded.recorder.of(ToolCallFinished)
        assert finished.status == "completed"
        assert finished.result == {
            "content": [{"type": "text", "text": "HELLO DR. ADA"}],
            "isError": False,
            "structuredContent": {"result": "HELLO DR. ADA"},
        }
        check_stream(recorded.recorder.events)

    async def test_an_abort_refuses_the_rest_of_the_session(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        def abort(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.ABORT, reason="deletes end the session")

        hooks = [HookMatcher(pattern="delete_*", pre=(abort,))]
        async with engine_for(tmp_path, hooks) as recorded:
            calc = calc_server(OnlookerMiddleware(recorded.engine))
            async with Client(calc.server, mode="legacy") as client:
                aborted = await client.call_tool("delete_everything", {"path": "/"})
                later = await client.call_tool("add", {"a": 1, "b": 2})

        assert calc.ran == []
        assert (aborted.is_error, text(aborted)) == (True, "deletes end the session")
        assert (later.is_error, text(later)) == (True, "deletes end the session")
        check_stream(recorded.recorder.events)
        assert [e.status for e in recorded.recorder.of(ToolCallFinished)] == ["blocked"] * 2
        (finished,) = recorded.recorder.of(ExecutionFinished)
        assert finished.status == "failed"

    async def test_a_reused_request_id_is_governed_and_recorded_apart(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        """JSON-RPC ids 7 and "7", or 8 sent twice, in one session: each call passes the hooks
        (a clash once let a call through ungoverned) and is recorded, the repeat as ``#2``."""
        async with engine_for(tmp_path) as recorded:
            calc = calc_server(OnlookerMiddleware(recorded.engine))
            async with InMemoryTransport(calc.server) as (read, write):

                async def rpc(request_id: int | str, method: str, params: dict[str, Any]) -> Any:
                    request = JSONRPCRequest(
                        jsonrpc="2.0", id=request_id, method=method, params=params
                    )
                    await write.send(SessionMessage(request))
                    while True:
                        received = await read.receive()
                        assert isinstance(received, SessionMessage), received
                        message = received.message
                        if getattr(message, "id", None) == request_id:
                            return message.model_dump(exclude_none=True)["result"]

                await rpc(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "1"}})  # fmt: skip
                await write.send(
                    SessionMessage(
                        JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")
                    )
                )
                calls: list[tuple[int | str, str, dict[str, Any]]] = [
                    (7, "add", {"a": 1, "b": 2}),
                    ("7", "delete_everything", {"path": "/"}),
                    (8, "delete_everything", {"path": "/a"}),
                    (8, "delete_everything", {"path": "/b"}),
                ]
                answers = [
                    await rpc(i, "tools/call", {"name": n, "arguments": a}) for i, n, a in calls
                ]

        assert calc.ran == [("add", {"a": 1, "b": 2})]
        assert [answer.get("isError", False) for answer in answers] == [False, True, True, True]
        check_stream(recorded.recorder.events)
        finished = recorded.recorder.of(ToolCallFinished)
        assert [(request_id_of(e.tool_call_id), e.status) for e in finished] == [
            ("7", "completed"),
            ("7#2", "blocked"),
            ("8", "blocked"),
            ("8#2", "blocked"),
        ]

    async def test_the_authenticated_client_owns_the_execution(self, tmp_path: Path) -> None:
        # What the SDK's bearer-auth ASGI middleware sets for an authenticated HTTP request.
        token = AccessToken(token="t", client_id="ci-bot", scopes=[])
        reset = auth_context_var.set(AuthenticatedUser(token))
        try:
            async with engine_for(tmp_path) as recorded:
                calc = calc_server(OnlookerMiddleware(recorded.engine))
                async with Client(calc.server, mode="legacy") as client:
                    await client.call_tool("add", {"a": 1, "b": 2})
        finally:
            auth_context_var.reset(reset)
        (started,) = recorded.recorder.of(ExecutionStarted)
        assert started.owner == "ci-bot"


class TestNoSessions:
    async def test_each_call_is_its_own_execution(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            calc = calc_server(OnlookerMiddleware(recorded.engine, program="calc"))
            async with Client(calc.server) as client:  # the 2026-07-28 protocol, in-process
                results = await three_calls(client)
        recorder = recorded.recorder

        assert_client_saw(calc, results)
        check_stream(recorder.events)
        assert tool_events(recorder) == THREE_CALLS
        runs = recorder.of(ExecutionStarted)
        assert len(runs) == 3
        assert {r.trigger.metadata["protocol_version"] for r in runs} == {"2026-07-28"}
        for run, rid, (start, end) in zip(
            runs,
            calc.request_ids,
            zip(THREE_CALLS[::2], THREE_CALLS[1::2], strict=True),
            strict=True,
        ):
            assert recorder.kinds(run.execution_id) == [
                "ExecutionStarted", start[0], end[0], "ExecutionFinished"
            ]  # fmt: skip
            (call,) = recorder.of(ToolCallStarted, run.execution_id)
            assert call.tool_call_id == f"mcp:{run.execution_id}:{rid}"
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["completed"] * 3

        await assert_history_and_audit(
            recorded,
            {
                run.execution_id: [(tool, status)]
                for run, (_, tool, status) in zip(runs, THREE_CALLS[1::2], strict=True)
                if status is not None
            },
        )


class Confirm(BaseModel):
    ok: bool


def confirm(amount: int) -> Elicit[Confirm]:
    return Elicit(f"pay {amount}?", Confirm)


def asks_first(ran: list[int]) -> MCPServer:
    """A tool whose argument the 2026 protocol asks the person for (``input_required``)."""
    server = MCPServer("pay")

    @server.tool()  # its annotations are read from this module's globals
    async def pay(amount: int, ok: Annotated[Confirm, Resolve(confirm)]) -> str:
        """Pay, once the person confirmed."""
        ran.append(amount)
        return "paid"

    return server


async def accepts(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


async def declines(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="decline")


def noting_request_ids(server: MCPServer, ids: list[str]) -> None:
    """An outer middleware noting the JSON-RPC id of each tools/call (each round's own)."""

    async def note(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call":
            ids.append(str(ctx.request_id))
        return await call_next(ctx)

    server.middleware.append(note)


PAY_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"title": "Ok", "type": "boolean"}},
    "required": ["ok"],
}

ASKED = [
    "ExecutionStarted",
    "ToolCallStarted",
    "InteractionStarted",
    "InteractionResolved",
    "ToolCallFinished",
    "ExecutionFinished",
]


class TestInputRequired:
    """The 2026 protocol asks the person with ``input_required``; the client retries the call
    with the answer, as a new request. The rounds were recorded as separate calls, the one
    that asked ``completed`` with the question as its result, and no question recorded."""

    @pytest.mark.parametrize(
        ("answer", "question", "response", "call"),
        [(accepts, "accepted", {"ok": True}, "completed"), (declines, "declined", None, "failed")],
    )
    async def test_the_rounds_are_one_call_and_the_question_an_interaction(
        self,
        tmp_path: Path,
        check_stream: Check,
        answer: ElicitationFnT,
        question: str,
        response: object,
        call: str,
    ) -> None:
        ran: list[int] = []
        request_ids: list[str] = []
        async with engine_for(tmp_path) as recorded:
            server = asks_first(ran)
            noting_request_ids(server, request_ids)
            server.middleware.append(OnlookerMiddleware(recorded.engine, server=server))
            async with Client(server, elicitation_callback=answer) as client:
                result = await client.call_tool("pay", {"amount": 5})
        recorder = recorded.recorder

        assert result.is_error is (call == "failed")
        assert ran == ([5] if call == "completed" else [])
        assert len(request_ids) == 2  # the question, then the retry with the answer
        check_stream(recorder.events)
        assert recorder.kinds() == ASKED  # one execution, one call, spanning both requests
        (started,) = recorder.of(ToolCallStarted)
        assert request_id_of(started.tool_call_id) == request_ids[0]
        (asked,) = recorder.of(InteractionStarted)
        assert (asked.message, asked.requested_schema) == ("pay 5?", PAY_SCHEMA)
        (answered,) = recorder.of(InteractionResolved)
        assert answered.interaction_id == asked.interaction_id
        assert (answered.status, answered.response) == (question, response)
        (finished,) = recorder.of(ToolCallFinished)
        assert (finished.tool_call_id, finished.status) == (started.tool_call_id, call)
        if call == "completed":
            assert finished.result == {
                "content": [{"type": "text", "text": "paid"}],
                "isError": False,
                "structuredContent": {"result": "paid"},
            }

    async def test_the_pre_hooks_judge_the_call_once_and_their_rewrite_holds_each_round(
        self, tmp_path: Path
    ) -> None:
        judged: list[object] = []

        def halve(use: ToolUseContext) -> PreHookResult:
            judged.append(use.tool_input["amount"])
            return PreHookResult(modified_input={"amount": use.tool_input["amount"] // 2})

        ran: list[int] = []
        async with engine_for(tmp_path, hooks=[HookMatcher(pre=(halve,))]) as recorded:
            server = asks_first(ran)
            server.middleware.append(OnlookerMiddleware(recorded.engine, server=server))
            async with Client(server, elicitation_callback=accepts) as client:
                result = await client.call_tool("pay", {"amount": 10})
        assert (result.is_error, judged, ran) == (False, [10], [5])
        (asked,) = recorded.recorder.of(InteractionStarted)
        assert asked.message == "pay 5?"

    async def test_a_post_hook_abort_judges_the_result_not_the_question(
        self, tmp_path: Path
    ) -> None:
        """The question is no result of the tool: the post-hooks judge what it returns once
        the person answered (an ABORT on the question was once logged as the adapter's own
        failure, and the tool ran on the retry)."""

        def abort(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(action=HookAction.ABORT, reason="no payments today")

        ran: list[int] = []
        async with engine_for(tmp_path, hooks=[HookMatcher(post=(abort,))]) as recorded:
            server = asks_first(ran)
            server.middleware.append(OnlookerMiddleware(recorded.engine, server=server))
            async with Client(server, elicitation_callback=accepts) as client:
                result = await client.call_tool("pay", {"amount": 5})
        assert ran == [5]
        assert (result.is_error, text(result)) == (True, "no payments today")
        (answered,) = recorded.recorder.of(InteractionResolved)
        assert answered.status == "accepted"
        (finished,) = recorded.recorder.of(ToolCallFinished)
        assert finished.status == "blocked"
        assert [e.status for e in recorded.recorder.of(ExecutionFinished)] == ["failed"]

    async def test_a_question_never_answered_is_cancelled_when_the_engine_closes(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        ran: list[int] = []
        async with engine_for(tmp_path) as recorded:
            server = asks_first(ran)
            server.middleware.append(OnlookerMiddleware(recorded.engine, server=server))
            async with Client(server, elicitation_callback=accepts) as client:  # never retries
                asked = await client.session.call_tool(
                    "pay", {"amount": 5}, allow_input_required=True
                )
            assert isinstance(asked, InputRequiredResult)
            assert recorded.recorder.kinds() == ASKED[:3]  # still waiting for the answer
        check_stream(recorded.recorder.events)  # the engine closes its calls, then its questions
        assert recorded.recorder.kinds() == [
            *ASKED[:3],
            "ToolCallFinished",
            "InteractionResolved",
            "ExecutionFinished",
        ]
        assert [e.status for e in recorded.recorder.of(InteractionResolved)] == ["cancelled"]
        assert [e.status for e in recorded.recorder.of(ToolCallFinished)] == ["cancelled"]
        assert [e.status for e in recorded.recorder.of(ExecutionFinished)] == ["cancelled"]
        assert ran == []

    async def test_a_question_unanswered_in_time_expires(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        """Past ``input_timeout`` (the SDK's requestState lives 600 s by default) the call
        is given up on the next tools/call; a late retry is a call of its own."""
        ran: list[int] = []
        async with engine_for(tmp_path) as recorded:
            server = asks_first(ran)
            middleware = OnlookerMiddleware(recorded.engine, server=server, input_timeout=1e-6)
            server.middleware.append(middleware)
            async with Client(server, elicitation_callback=accepts) as client:
                result = await client.call_tool("pay", {"amount": 5})
        recorder = recorded.recorder
        assert (result.is_error, ran) == (False, [5])
        check_stream(recorder.events)
        assert recorder.kinds() == [
            *ASKED,
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
            "ExecutionFinished",
        ]
        assert [e.status for e in recorder.of(InteractionResolved)] == ["expired"]
        assert [e.status for e in recorder.of(ToolCallFinished)] == ["cancelled", "completed"]
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["expired", "completed"]

    async def test_the_handler_gets_its_own_request_state_back(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        """A low-level server, whose state nobody seals: round one asks without state, round
        two keeps only state; the middleware's token never reaches the handler."""
        states: list[str | None] = []
        elicit = ElicitRequest(
            params=ElicitRequestFormParams(message="which account?", requested_schema=PAY_SCHEMA)
        )

        async def call_tool(
            ctx: ServerRequestContext[Any], params: CallToolRequestParams
        ) -> CallToolResult | InputRequiredResult:
            states.append(params.request_state)
            if len(states) == 1:
                return InputRequiredResult(input_requests={"account": elicit})
            if len(states) == 2:
                return InputRequiredResult(request_state="step-2")
            return CallToolResult(content=[TextContent(type="text", text="done")])

        async def list_tools(
            ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
        ) -> ListToolsResult:
            return ListToolsResult(tools=[Tool(name="pay", input_schema={"type": "object"})])

        async with engine_for(tmp_path) as recorded:
            server = Server("bank", on_list_tools=list_tools, on_call_tool=call_tool)
            server.middleware.append(OnlookerMiddleware(recorded.engine))
            async with Client(server, elicitation_callback=accepts) as client:
                result = await client.call_tool("pay", {"amount": 5})
        assert (result.is_error, text(result)) == (False, "done")
        assert states == [None, None, "step-2"]
        check_stream(recorded.recorder.events)
        assert recorded.recorder.kinds() == ASKED
        (asked,) = recorded.recorder.of(InteractionStarted)
        assert asked.message == "which account?"


def wire(ran: list[str]) -> MCPServer:
    """A tool asking the person mid-call (``ctx.elicit``: ``elicitation/create`` to the client)."""
    server = MCPServer("wire")

    @server.tool()
    async def transfer(amount: int, ctx: Context) -> str:
        """Transfer, once the person confirmed."""
        answer = await ctx.elicit(f"transfer {amount}?", Confirm)
        ran.append(answer.action)
        return answer.action

    return server


class TestElicitation:
    """``ctx.elicit`` on the handshake protocol asks the person while the call runs: a question
    of that call (it was not recorded at all)."""

    @pytest.mark.parametrize(
        ("answer", "question", "response"),
        [(accepts, "accepted", {"ok": True}), (declines, "declined", None)],
    )
    async def test_a_question_asked_mid_call_is_an_interaction(
        self,
        tmp_path: Path,
        check_stream: Check,
        answer: ElicitationFnT,
        question: str,
        response: object,
    ) -> None:
        ran: list[str] = []
        async with engine_for(tmp_path) as recorded:
            server = wire(ran)
            server.middleware.append(OnlookerMiddleware(recorded.engine, server=server))
            async with Client(server, mode="legacy", elicitation_callback=answer) as client:
                result = await client.call_tool("transfer", {"amount": 5})
        recorder = recorded.recorder
        assert (result.is_error, ran) == (False, [{"accepted": "accept"}.get(question, "decline")])
        check_stream(recorder.events)
        assert recorder.kinds() == ASKED
        (asked,) = recorder.of(InteractionStarted)
        assert asked.message == "transfer 5?"
        assert asked.requested_schema == {**PAY_SCHEMA, "title": "Confirm"}
        (started,) = recorder.of(ToolCallStarted)
        assert asked.interaction_id.startswith(started.tool_call_id)
        (answered,) = recorder.of(InteractionResolved)
        assert (answered.status, answered.response) == (question, response)
        assert [e.status for e in recorder.of(ToolCallFinished)] == ["completed"]


def copies_as_text(use: ToolUseContext) -> PreHookResult | None:
    """Rewrite ``copies`` as a string, and drop ``mode``: the server's validator restores both."""
    if use.tool_input["name"] != "a":
        return None
    return PreHookResult(modified_input={"name": "a", "copies": str(use.tool_input["copies"] - 7)})


def garble(use: ToolUseContext) -> PreHookResult:
    return PreHookResult(modified_input={"name": "a", "copies": "many"})


def copier(ran: list[dict[str, Any]]) -> MCPServer:
    server = MCPServer("copier")

    @server.tool()
    def copy(name: str, copies: int, mode: str = "fast") -> str:
        """Copy a document."""
        ran.append({"name": name, "copies": copies, "mode": mode})
        return "copied"

    return server


class TestArguments:
    """Given the server, arguments are recorded as its validator hands them to the tool."""

    async def test_the_recorded_arguments_are_what_the_tool_receives(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        ran: list[dict[str, Any]] = []
        hooks = [HookMatcher(pattern="copy", pre=(copies_as_text,))]
        async with engine_for(tmp_path, hooks) as recorded:
            server = copier(ran)
            server.middleware.append(OnlookerMiddleware(recorded.engine, server=server))
            async with Client(server, mode="legacy") as client:
                rewritten = await client.call_tool("copy", {"name": "a", "copies": 9})
                as_sent = await client.call_tool("copy", {"name": "b", "copies": "3"})

        assert (rewritten.is_error, as_sent.is_error) == (False, False)
        assert ran == [
            {"name": "a", "copies": 2, "mode": "fast"},  # "2" from the hook, coerced
            {"name": "b", "copies": 3, "mode": "fast"},  # the client's own "3", coerced
        ]
        assert [e.args for e in recorded.recorder.of(ToolCallStarted)] == ran
        check_stream(recorded.recorder.events)

    async def test_a_rewrite_the_tool_would_refuse_is_a_failed_call(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        ran: list[dict[str, Any]] = []
        async with engine_for(tmp_path, [HookMatcher(pattern="copy", pre=(garble,))]) as recorded:
            server = copier(ran)
            server.middleware.append(OnlookerMiddleware(recorded.engine, server=server))
            async with Client(server) as client:  # no sessions: the call is its own execution
                result = await client.call_tool("copy", {"name": "a", "copies": 1})

        assert ran == []
        assert result.is_error
        assert "invalid arguments for tool 'copy' (input modified by hook 'garble')" in text(result)
        (finished,) = recorded.recorder.of(ToolCallFinished)
        assert finished.status == "failed" and finished.error is not None
        assert finished.error.type == "ToolInputError"
        assert "'garble'" in finished.error.message
        assert [e.status for e in recorded.recorder.of(ExecutionFinished)] == ["completed"]
        check_stream(recorded.recorder.events)

    async def test_an_unknown_tool_and_invalid_arguments_are_typed(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        """Given the server, the middleware knows its tools and their validators: both
        were recorded as a plain ``ToolError``, as any error result is."""
        ran: list[dict[str, Any]] = []
        async with engine_for(tmp_path, []) as recorded:
            server = copier(ran)
            server.middleware.append(OnlookerMiddleware(recorded.engine, server=server))
            async with Client(server, mode="legacy") as client:
                unknown = await client.call_tool("paste", {"name": "a"})
                invalid = await client.call_tool("copy", {"name": "a", "copies": "many"})
                failing = await client.call_tool("copy", {"name": "a"})  # copies is missing
        assert (unknown.is_error, invalid.is_error, failing.is_error) == (True, True, True)
        assert ran == []
        finished = recorded.recorder.of(ToolCallFinished)
        assert [(e.tool, e.status) for e in finished] == [("paste", "failed")] + [
            ("copy", "failed")
        ] * 2
        errors = [e.error for e in finished]
        assert [(e.type, e.cause) for e in errors if e is not None] == [
            ("UnknownToolError", "failure"),
            ("ToolInputError", "failure"),
            ("ToolInputError", "failure"),
        ]
        assert "paste" in errors[0].message if errors[0] is not None else False
        check_stream(recorded.recorder.events)

    async def test_arguments_no_hook_rewrote_are_validated_once(self, tmp_path: Path) -> None:
        """The server validates the client's own arguments; onlooker's check of them only
        decides what is recorded, so a validator that transforms applies once."""
        ran: list[str] = []
        server = MCPServer("tags")

        @server.tool()
        def tag(label: Annotated[str, AfterValidator(lambda text: "#" + text)]) -> str:
            """Tag a note."""
            ran.append(label)
            return label

        async with engine_for(tmp_path) as recorded:
            server.middleware.append(OnlookerMiddleware(recorded.engine, server=server))
            async with Client(server, mode="legacy") as client:
                await client.call_tool("tag", {"label": "urgent"})
        assert ran == ["#urgent"]
        assert [e.args for e in recorded.recorder.of(ToolCallStarted)] == [{"label": "#urgent"}]

    def test_only_an_mcpserver_validates(self) -> None:
        with pytest.raises(TypeError, match="must be the MCPServer"):
            OnlookerMiddleware(onlooker.ExecutionEngine(), server=Server("low-level"))  # type: ignore[arg-type]  # a low-level Server, refused


class TestCancellation:
    @pytest.mark.parametrize(
        ("mode", "execution_status"),
        [("legacy", "completed"), ("2026-07-28", "cancelled")],
    )
    async def test_a_cancelled_request_is_a_cancelled_call(
        self, tmp_path: Path, check_stream: Check, mode: str, execution_status: str
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            calc = calc_server(OnlookerMiddleware(recorded.engine))

            @calc.server.tool()
            async def slow() -> str:
                """Never answers in time."""
                await anyio.sleep_forever()
                return "late"

            async with Client(calc.server, mode=mode) as client:
                with pytest.raises(MCPError, match=r"[Tt]imed out"):
                    await client.call_tool("slow", {}, read_timeout_seconds=0.2)
        check_stream(recorded.recorder.events)
        assert tool_events(recorded.recorder) == [
            ("ToolCallStarted", "slow", None),
            ("ToolCallFinished", "slow", "cancelled"),
        ]
        (finished,) = recorded.recorder.of(ExecutionFinished)
        assert finished.status == execution_status


def envelope_of(wire: dict[str, Any]) -> dict[str, Any]:
    """What a result carries besides the tool's own answer: the protocol's envelope."""
    return {k: v for k, v in wire.items() if k not in ("content", "isError", "structuredContent")}


class TestRefusalEnvelope:
    @pytest.mark.parametrize("mode", ["legacy", "auto"])  # the 2025-11-25 handshake, and 2026
    @pytest.mark.parametrize("verdict", ["pre", "post"])
    async def test_a_refusal_has_the_envelope_of_the_servers_own_results(
        self, tmp_path: Path, mode: Any, verdict: str
    ) -> None:
        """A middleware that answers without ``call_next`` owns its result's envelope."""

        def block(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.BLOCK, reason="not today")

        def abort(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(action=HookAction.ABORT, reason="not today")

        hooks = [HookMatcher(pre=[block])] if verdict == "pre" else [HookMatcher(post=[abort])]
        wires: list[dict[str, Any]] = []

        async def outermost(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
            result = await call_next(ctx)
            if ctx.method == "tools/call":
                assert result is not None
                wires.append(
                    result
                    if isinstance(result, dict)
                    else result.model_dump(by_alias=True, mode="json", exclude_none=True)
                )
            return result

        def serve(governed: onlooker.ExecutionEngine | None) -> MCPServer:
            server = MCPServer("calc")
            server.middleware.append(outermost)
            if governed is not None:
                server.middleware.append(OnlookerMiddleware(governed, server=server))

            @server.tool()
            def add(a: int, b: int) -> int:
                return a + b

            return server

        async with Client(serve(None), mode=mode) as client:
            await client.call_tool("add", {"a": 1, "b": 2})
        async with (
            engine_for(tmp_path, hooks) as recorded,
            Client(serve(recorded.engine), mode=mode) as client,
        ):
            refused = await client.call_tool("add", {"a": 1, "b": 2})
        assert refused.is_error and text(refused) == "not today"
        own, refusal = wires
        assert envelope_of(refusal) == envelope_of(own)
        assert ("resultType" in refusal) is (mode == "auto")  # 2026-era only


class TestLowLevelServer:
    async def test_a_raising_handler_is_a_failed_call(
        self, tmp_path: Path, check_stream: Check
    ) -> None:
        ran: list[str] = []

        async def list_tools(
            ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
        ) -> ListToolsResult:
            schema = {"type": "object", "properties": {"path": {"type": "string"}}}
            return ListToolsResult(
                tools=[Tool(name=n, input_schema=schema) for n in ("read", "delete_file", "echo")]
            )

        async def call_tool(
            ctx: ServerRequestContext[Any], params: CallToolRequestParams
        ) -> CallToolResult:
            ran.append(params.name)
            if params.name == "read":
                raise MCPError(code=INVALID_PARAMS, message="no such file")
            return CallToolResult(content=[TextContent(type="text", text="secret: hunter2")])

        async with engine_for(tmp_path) as recorded:
            server = Server("files", on_list_tools=list_tools, on_call_tool=call_tool)
            server.middleware.append(OnlookerMiddleware(recorded.engine, program="files"))
            async with Client(server, mode="legacy") as client:
                with pytest.raises(MCPError, match="no such file"):
                    await client.call_tool("read", {"path": "a.md"})
                refused = await client.call_tool("delete_file", {"path": "a.md"})
                echoed = await client.call_tool("echo", {"path": "a.md"})

        assert ran == ["read", "echo"]
        assert (refused.is_error, text(refused)) == (True, "delete_file is not allowed here")
        assert (echoed.is_error, text(echoed)) == (False, "[redacted]")
        check_stream(recorded.recorder.events)
        assert tool_events(recorded.recorder) == [
            ("ToolCallStarted", "read", None),
            ("ToolCallFinished", "read", "failed"),
            ("ToolCallStarted", "delete_file", None),
            ("ToolCallFinished", "delete_file", "blocked"),
            ("ToolCallStarted", "echo", None),
            ("ToolCallFinished", "echo", "completed"),
        ]
        failed, _, redacted = recorded.recorder.of(ToolCallFinished)
        assert redacted.result == "[redacted]"
        assert failed.error is not None
        assert (failed.error.type, failed.error.message) == ("MCPError", "no such file")


class TestWithoutTheConnection:
    async def test_each_call_is_its_own_execution(
        self, tmp_path: Path, check_stream: Check, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Should a later SDK move the Connection, sessions degrade to one execution per call.
        monkeypatch.setattr(OnlookerMiddleware, "_connection", lambda self, ctx: None)
        async with engine_for(tmp_path) as recorded:
            calc = calc_server(OnlookerMiddleware(recorded.engine))
            async with Client(calc.server, mode="legacy") as client:
                results = await three_calls(client)
        assert_client_saw(calc, results)
        check_stream(recorded.recorder.events)
        assert tool_events(recorded.recorder) == THREE_CALLS
        assert [e.status for e in recorded.recorder.of(ExecutionFinished)] == ["completed"] * 3


class TestContainment:
    async def test_a_broken_engine_never_costs_the_client_its_answer(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        async with engine_for(tmp_path) as recorded:
            middleware = OnlookerMiddleware(recorded.engine)
        # The engine is closed: tracking fails, the middleware logs and steps aside.
        calc = calc_server(middleware)
        with caplog.at_level(logging.ERROR, logger="onlooker.integrations.mcp"):
            async with Client(calc.server, mode="legacy") as client:
                result = await client.call_tool("add", {"a": 2, "b": 3})
                refused = await client.call_tool("delete_everything", {"path": "/"})
        assert (result.is_error, text(result)) == (False, "5")
        assert not refused.is_error  # ungoverned once onlooker is gone, as logged
        assert [tool for tool, _ in calc.ran] == ["add", "delete_everything"]
        logged = [r for r in caplog.records if r.name == "onlooker.integrations.mcp"]
        assert logged and all("untracked" in r.getMessage() for r in logged)

    async def test_a_rewrite_that_is_no_result_leaves_the_tools_own(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        def garbage(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(modified_output={"content": "not a list of blocks"})

        async with engine_for(tmp_path, [HookMatcher(pattern="add", post=(garbage,))]) as recorded:
            calc = calc_server(OnlookerMiddleware(recorded.engine))
            with caplog.at_level(logging.ERROR, logger="onlooker.integrations.mcp"):
                async with Client(calc.server, mode="legacy") as client:
                    result = await client.call_tool("add", {"a": 2, "b": 3})
        assert (result.is_error, text(result)) == (False, "5")
        assert any("no CallToolResult" in r.getMessage() for r in caplog.records)
        (finished,) = recorded.recorder.of(ToolCallFinished)
        assert finished.status == "completed"

    def test_a_missing_sdk_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "mcp_types", None)
        with pytest.raises(ImportError, match=r'pip install "onlooker\[mcp\]"'):
            OnlookerMiddleware(onlooker.ExecutionEngine())

    @pytest.mark.parametrize("missing", ["mcp_types", "mcp.server"])
    def test_importing_without_the_sdk_names_the_extra(
        self, monkeypatch: pytest.MonkeyPatch, missing: str
    ) -> None:
        """Without the SDK, even with its ``mcp_types`` package installed on its own."""
        monkeypatch.setitem(sys.modules, missing, None)
        monkeypatch.delitem(sys.modules, "onlooker.integrations.mcp")
        with pytest.raises(ImportError, match=r'pip install "onlooker\[mcp\]"'):
            importlib.import_module("onlooker.integrations.mcp")


def test_request_id_of() -> None:
    assert request_id_of("mcp:0a1b2c-7:42") == "42"
    assert request_id_of("mcp:0a1b2c-7:req:with:colons") == "req:with:colons"
    assert request_id_of("call_1") is None


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(0, ValueError), (-1.0, ValueError), (math.nan, ValueError), ("600", TypeError)],
)
def test_input_timeout_must_be_a_positive_number(timeout: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="input_timeout must be"):
        OnlookerMiddleware(onlooker.ExecutionEngine(), input_timeout=timeout)  # type: ignore[arg-type]
    OnlookerMiddleware(onlooker.ExecutionEngine(), input_timeout=math.inf)  # never expires
