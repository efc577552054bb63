"""OpenTelemetry both ways: executions exported as GenAI spans, GenAI spans ingested as tracked runs.

Export runs on the SDK's own ``TracerProvider`` with its ``InMemorySpanExporter``,
and with ``opentelemetry-exporter-otlp-proto-http`` against a local OTLP/HTTP
receiver that decodes what arrived. Ingest runs PydanticAI's own
instrumentation (``FunctionModel`` scripting the tool calls) and plain SDK
spans made on another thread.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import http.server
import json
import logging
import re
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as ProtoStatus
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, DeferredToolRequests, ModelRetry, RunContext, ToolFailed
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import CallDeferred
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

import onlooker
from onlooker import (
    ExecutionContext,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    HookAction,
    HookMatcher,
    InteractionResponse,
    PreHookResult,
    ToolCallFinished,
    ToolCallStarted,
    ToolUseContext,
)
from onlooker.integrations import opentelemetry as otel
from onlooker.plugins import audit, history
from onlooker.testing import RecordingObserver

pytestmark = pytest.mark.anyio
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# -- tools and programs ---------------------------------------------------------------

ran: list[str] = []


@onlooker.tool(description="Search the knowledge base.")
def lookup(q: str) -> str:
    """Search."""
    ran.append(f"lookup {q}")
    return f"found {q}"


@onlooker.tool
def explode() -> None:
    """Always fails."""
    ran.append("explode")
    raise onlooker.ToolError("boom")


@onlooker.tool(mutating=True)
def delete(path: str) -> None:
    """Refused by a pre-hook: never runs."""
    ran.append(f"delete {path}")


@onlooker.tool
def ping() -> str:
    """Skipped by a pre-hook: never runs."""
    ran.append("ping")
    return "pong"


@onlooker.tool
async def delegate(task: str) -> str:
    """Runs a child execution from inside a tool call."""
    result = await onlooker.current_context().spawn(helper, task_id=task)
    return str(result.value)


async def helper(ctx: ExecutionContext) -> str:
    return str(await ctx.call("lookup", q="sub"))


async def program(ctx: ExecutionContext) -> str:
    await ctx.call("lookup", q="refund")
    with contextlib.suppress(onlooker.ToolError):
        await ctx.call("explode")
    with contextlib.suppress(onlooker.ToolBlockedError):
        await ctx.call("delete", path="/etc")
    assert await ctx.call("ping") is None
    await ctx.call("delegate", task="sub")
    answer = await ctx.elicit("Proceed?", schema={"type": "object"})
    assert answer.action == "accept"
    await ctx.spawn(helper)
    return "ok"


async def crashing(ctx: ExecutionContext) -> None:
    raise RuntimeError("kaput")


def refuse_deletes(use: ToolUseContext) -> PreHookResult:
    return PreHookResult(action=HookAction.BLOCK, reason="no deletes")


def skip_pings(use: ToolUseContext) -> PreHookResult:
    return PreHookResult(action=HookAction.SKIP, reason="pings are noise")


HOOKS = [
    HookMatcher(pattern="delete", pre=(refuse_deletes,)),
    HookMatcher(pattern="ping", pre=(skip_pings,)),
]


async def accept(elicitation: onlooker.Elicitation) -> InteractionResponse:
    return InteractionResponse.accept({"go": True})


@pytest.fixture(autouse=True)
def _reset_ran() -> None:
    ran.clear()


@pytest.fixture
def memory() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


# -- helpers ---------------------------------------------------------------------------


def ns(at: datetime) -> int:
    return (at - EPOCH) // timedelta(microseconds=1) * 1_000


def attrs(span: ReadableSpan) -> Mapping[str, Any]:
    return dict(span.attributes or {})


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def one(spans: Sequence[ReadableSpan], name: str, **attributes: object) -> ReadableSpan:
    found = [
        s
        for s in spans
        if s.name == name and all(attrs(s).get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, f"{name} {attributes}: {[s.name for s in spans]}"
    return found[0]


def call_ids(recorder: RecordingObserver, execution_id: str) -> dict[str, list[str]]:
    ids: dict[str, list[str]] = {}
    for event in recorder.of(ToolCallStarted, execution_id):
        ids.setdefault(event.tool, []).append(event.tool_call_id)
    return ids


def assert_true_to_events(spans: Sequence[ReadableSpan], recorder: RecordingObserver) -> None:
    """Every span starts and ends exactly at its events' ``at``."""
    times: dict[str, tuple[int, int]] = {}
    for started in recorder.of(ExecutionStarted):
        times[started.execution_id] = (ns(started.at), 0)
    for finished in recorder.of(ExecutionFinished):
        times[finished.execution_id] = (times[finished.execution_id][0], ns(finished.at))
    for call in recorder.of(ToolCallStarted):
        times[call.execution_id + "/" + call.tool_call_id] = (ns(call.at), 0)
    for done in recorder.of(ToolCallFinished):
        key = done.execution_id + "/" + done.tool_call_id
        times[key] = (times[key][0], ns(done.at))
    for span in spans:
        a = attrs(span)
        key = a["onlooker.execution.id"]
        if a["gen_ai.operation.name"] == "execute_tool":
            key += "/" + a["gen_ai.tool.call.id"]
        assert (span.start_time, span.end_time) == times[key], span.name


# -- export ------------------------------------------------------------------------------


class TestExportNative:
    async def test_spans_follow_the_genai_conventions(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        provider, exporter = memory
        recorder = RecordingObserver()
        plugin = otel.plugin(provider)
        async with onlooker.ExecutionEngine(
            tools=[lookup, explode, delete, ping, delegate], hooks=HOOKS, plugins=[plugin]
        ) as engine:
            engine.bus.subscribe(recorder)
            result = await engine.execute(program, on_elicitation=accept, trigger="test")
            export = engine.extension(plugin)
            assert export.open_spans == 0
        assert result.status == "completed" and result.value == "ok"
        assert ran == ["lookup refund", "explode", "lookup sub", "lookup sub"]  # no delete, no ping

        spans = exporter.get_finished_spans()
        assert [s.name for s in spans] == [
            "execute_tool lookup",
            "execute_tool explode",
            "execute_tool delete",
            "execute_tool ping",
            "execute_tool lookup",
            "invoke_agent helper",
            "execute_tool delegate",
            "execute_tool lookup",
            "invoke_agent helper",
            "invoke_agent program",
        ]
        assert all(s.kind is trace_api.SpanKind.INTERNAL for s in spans)
        assert all(s.instrumentation_scope is not None for s in spans)
        assert {s.instrumentation_scope.name for s in spans if s.instrumentation_scope} == {
            otel.SCOPE_NAME
        }
        assert len({s.context.trace_id for s in spans if s.context}) == 1
        assert_true_to_events(spans, recorder)

        root = one(spans, "invoke_agent program")
        assert root.parent is None
        assert attrs(root) == {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "program",
            "onlooker.execution.id": result.execution_id,
            "onlooker.trigger.kind": "test",
            "onlooker.depth": 0,
            "onlooker.execution.status": "completed",
            "onlooker.execution.duration_ms": pytest.approx(result.duration_ms),
        }
        assert root.status.status_code is trace_api.StatusCode.UNSET

        ids = call_ids(recorder, result.execution_id)
        looked_up = one(spans, "execute_tool lookup", **{"gen_ai.tool.call.id": ids["lookup"][0]})
        assert parent_id(looked_up) == span_id(root)
        assert attrs(looked_up) == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.id": ids["lookup"][0],
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": "Search the knowledge base.",
            "onlooker.execution.id": result.execution_id,
            "onlooker.tool.status": "completed",
            "onlooker.tool.duration_ms": pytest.approx(
                recorder.of(ToolCallFinished, result.execution_id)[0].duration_ms
            ),
        }
        assert looked_up.status.status_code is trace_api.StatusCode.UNSET

        failed = one(spans, "execute_tool explode")
        assert parent_id(failed) == span_id(root)
        assert attrs(failed)["onlooker.tool.status"] == "failed"
        assert attrs(failed)["error.type"] == "ToolError"
        assert failed.status.status_code is trace_api.StatusCode.ERROR
        assert failed.status.description == "boom"

        blocked = one(spans, "execute_tool delete")
        assert parent_id(blocked) == span_id(root)
        assert attrs(blocked)["onlooker.tool.status"] == "blocked"
        assert attrs(blocked)["error.type"] == "ToolBlockedError"
        assert blocked.status.status_code is trace_api.StatusCode.ERROR
        assert "no deletes" in (blocked.status.description or "")

        skipped = one(spans, "execute_tool ping")
        assert attrs(skipped)["onlooker.tool.status"] == "skipped"
        assert "error.type" not in attrs(skipped)
        assert skipped.status.status_code is trace_api.StatusCode.UNSET

        # A child spawned inside a tool call hangs under that call's span ...
        delegated = one(spans, "execute_tool delegate")
        children = [s for s in spans if s.name == "invoke_agent helper"]
        inside, beside = children
        assert parent_id(inside) == span_id(delegated)
        assert attrs(inside)["onlooker.parent_execution.id"] == result.execution_id
        assert attrs(inside)["onlooker.parent_tool_call.id"] == ids["delegate"][0]
        assert attrs(inside)["onlooker.depth"] == 1
        assert attrs(inside)["onlooker.task_id"] == "sub"
        # ... one spawned by the program under the execution's span.
        assert parent_id(beside) == span_id(root)
        assert "onlooker.parent_tool_call.id" not in attrs(beside)
        for child in children:
            calls = [s for s in spans if parent_id(s) == span_id(child)]
            assert [s.name for s in calls] == ["execute_tool lookup"]

        # Interactions are events on the execution's span; no content by default.
        [question] = recorder.of(onlooker.InteractionStarted)
        [answer] = recorder.of(onlooker.InteractionResolved)
        assert [(e.name, dict(e.attributes or {}), e.timestamp) for e in root.events] == [
            (
                "onlooker.interaction.started",
                {
                    "onlooker.interaction.id": question.interaction_id,
                    "onlooker.interaction.mode": "inline",
                },
                ns(question.at),
            ),
            (
                "onlooker.interaction.resolved",
                {
                    "onlooker.interaction.id": question.interaction_id,
                    "onlooker.interaction.status": "accepted",
                },
                ns(answer.at),
            ),
        ]
        for span in spans:
            assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} & set(attrs(span))
            assert "onlooker.execution.input" not in attrs(span)

    async def test_content_is_recorded_only_on_request(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        provider, exporter = memory
        plugin = otel.plugin(provider, record_content=True)
        async with onlooker.ExecutionEngine(
            tools=[lookup, explode, delete, ping, delegate], hooks=HOOKS, plugins=[plugin]
        ) as engine:
            await engine.execute(program, on_elicitation=accept, input={"ticket": 7})
        spans = exporter.get_finished_spans()
        root = one(spans, "invoke_agent program")
        assert json.loads(attrs(root)["onlooker.execution.input"]) == {"ticket": 7}
        assert json.loads(attrs(root)["onlooker.execution.result"]) == "ok"
        looked_up = next(s for s in spans if s.name == "execute_tool lookup")
        assert json.loads(attrs(looked_up)["gen_ai.tool.call.arguments"]) == {"q": "refund"}
        assert json.loads(attrs(looked_up)["gen_ai.tool.call.result"]) == "found refund"
        failed = one(spans, "execute_tool explode")
        assert json.loads(attrs(failed)["gen_ai.tool.call.arguments"]) == {}
        assert "gen_ai.tool.call.result" not in attrs(failed)
        started, resolved = root.events
        assert started.attributes is not None and resolved.attributes is not None
        assert started.attributes["onlooker.interaction.message"] == "Proceed?"
        assert json.loads(str(started.attributes["onlooker.interaction.schema"])) == {
            "type": "object"
        }
        assert json.loads(str(resolved.attributes["onlooker.interaction.response"])) == {"go": True}

    async def test_a_failed_execution_and_the_ambient_span(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        provider, exporter = memory
        plugin = otel.plugin(provider)
        async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
            with provider.get_tracer("app").start_as_current_span("POST /tickets") as request:
                result = await engine.execute(crashing)
        assert result.status == "failed"
        span = one(exporter.get_finished_spans(), "invoke_agent crashing")
        assert parent_id(span) == request.get_span_context().span_id
        assert span.status.status_code is trace_api.StatusCode.ERROR
        assert span.status.description == "kaput"
        assert attrs(span)["error.type"] == "RuntimeError"
        assert attrs(span)["onlooker.execution.status"] == "failed"

    async def test_a_tools_own_spans_nest_under_its_call(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        """The tool's spans (here made by hand, as an instrumented client would) were
        siblings of its ``execute_tool`` span, not its children."""
        provider, exporter = memory
        tracer = provider.get_tracer("app")

        @onlooker.tool
        async def fetch(url: str) -> str:
            with tracer.start_as_current_span(f"GET {url}"):
                await anyio.sleep(0.001)
            return "page"

        @onlooker.tool
        def parse(text: str) -> int:  # a sync tool, run in a worker thread
            with tracer.start_as_current_span("parse"):
                return len(text)

        async def reads(ctx: ExecutionContext) -> int:
            page = await ctx.call(fetch, url="/a")
            with tracer.start_as_current_span("between calls"):
                pass
            return await ctx.call(parse, text=page)

        plugin = otel.plugin(provider)
        async with onlooker.ExecutionEngine(tools=[fetch, parse], plugins=[plugin]) as engine:
            with tracer.start_as_current_span("request") as request:
                result = await engine.execute(reads)
                assert trace_api.get_current_span() is request  # nothing left current
        assert result.status == "completed"
        spans = exporter.get_finished_spans()
        assert parent_id(one(spans, "GET /a")) == span_id(one(spans, "execute_tool fetch"))
        assert parent_id(one(spans, "parse")) == span_id(one(spans, "execute_tool parse"))
        # the program's own spans are its execution's, not a call's
        execution = one(spans, f"invoke_agent {reads.__qualname__}")
        assert parent_id(one(spans, "between calls")) == span_id(execution)

    async def test_a_programs_own_spans_nest_under_its_execution(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        """A program's own spans (a model call an instrumented client makes) were siblings
        of its ``invoke_agent`` span; they nest under it now, a child's under the child's,
        and after a resume, in the detached task, still under the paused execution's."""
        provider, exporter = memory
        tracer = provider.get_tracer("app")

        async def summarize(ctx: ExecutionContext) -> None:
            with tracer.start_as_current_span("child model call"):
                pass

        async def agent(ctx: ExecutionContext) -> None:
            with tracer.start_as_current_span("model call"):
                pass
            await ctx.spawn(summarize, task_id="summary")
            with tracer.start_as_current_span("after the child"):
                pass
            await ctx.elicit("Go on?")
            with tracer.start_as_current_span("after the answer"):
                pass

        async with onlooker.ExecutionEngine(plugins=[otel.plugin(provider)]) as engine:
            with tracer.start_as_current_span("request") as request:
                outcome = await engine.execute_with_pause(agent)
                assert trace_api.get_current_span() is request
            assert isinstance(outcome, onlooker.PausedExecution)
            result = await engine.resume(outcome.execution_id, InteractionResponse.accept({}))
            assert trace_api.get_current_span() is trace_api.INVALID_SPAN  # nothing left current
            assert isinstance(result, onlooker.ExecutionResult) and result.status == "completed"
            await engine.execute(summarize)  # a root started where no span is current
        spans = exporter.get_finished_spans()
        root = span_id(one(spans, f"invoke_agent {agent.__qualname__}"))
        children = [span for span in spans if span.name == f"invoke_agent {summarize.__qualname__}"]
        own = [span for span in children if parent_id(span) == root]
        assert len(children) == 2 and len(own) == 1
        started_in = request.get_span_context().span_id
        assert parent_id(one(spans, f"invoke_agent {agent.__qualname__}")) == started_in
        for name in ("model call", "after the child", "after the answer"):
            assert parent_id(one(spans, name)) == root, name
        by_parent = {parent_id(span) for span in spans if span.name == "child model call"}
        assert by_parent == {span_id(span) for span in children}

    async def test_spans_carry_no_secret_and_encode_with_an_undecodable_name(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        secret = "sk-abcdefghijklmnopqrstuvwxyz0123456789"

        @onlooker.tool
        def stat(path: str) -> int:
            raise FileNotFoundError(f"no such file: {path} (api_key={secret})")

        async def listing(ctx: ExecutionContext) -> None:
            with contextlib.suppress(FileNotFoundError):
                await ctx.call("stat", path="caf\udce9.txt")  # os.listdir's undecodable name

        def tag(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(metadata={"token": secret})

        provider, exporter = memory
        async with onlooker.ExecutionEngine(
            tools=[stat],
            plugins=[otel.plugin(provider, record_content=True)],
            hooks=[HookMatcher(pre=[tag])],
        ) as engine:
            await engine.execute(listing)
        spans = exporter.get_finished_spans()
        encode_spans(spans)  # an OTLP exporter sends the batch: no span refuses to encode
        span = one(spans, "execute_tool stat")
        assert (
            span.status.description
            == "no such file: caf\\udce9.txt (api_key=[REDACTED:openai_key])"
        )
        assert json.loads(str(attrs(span)["gen_ai.tool.call.arguments"])) == {
            "path": "caf\udce9.txt"
        }
        assert secret not in str(attrs(span)) and secret not in str(span.status)

    async def test_a_secret_argument_echoed_in_an_error_is_redacted_without_content(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        """Content is off, yet the redactor still sees the arguments: a password passed
        under a secret key and echoed in an error message is scrubbed, as on disk."""
        secret = "Zq7-hunter2-pass"

        @onlooker.tool
        def login(user: str, password: str) -> None:
            raise onlooker.ToolError(f"login refused for {user} with {password}")

        async def signing_in(ctx: ExecutionContext) -> None:
            with contextlib.suppress(onlooker.ToolError):
                await ctx.call("login", user="bob", password=secret)
            raise RuntimeError(f"giving up: {secret} did not work")

        provider, exporter = memory
        async with onlooker.ExecutionEngine(
            tools=[login], plugins=[otel.plugin(provider)]
        ) as engine:
            await engine.execute(signing_in)
        spans = exporter.get_finished_spans()
        call = one(spans, "execute_tool login")
        assert call.status.description == "login refused for bob with [REDACTED:secret_field]"
        assert "gen_ai.tool.call.arguments" not in attrs(call)  # content stays opt-in
        [execution] = [s for s in spans if attrs(s)["gen_ai.operation.name"] == "invoke_agent"]
        assert execution.status.description == "giving up: [REDACTED:secret_field] did not work"

    async def test_huge_messages_and_values_are_cut(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        """A megabyte error message is not a megabyte status description (a collector may
        refuse the batch); content is cut as history cuts it, redacted first."""

        @onlooker.tool
        def load(blob: str) -> None:
            raise onlooker.ToolError("bad blob: " + blob)

        async def loading(ctx: ExecutionContext) -> None:
            with contextlib.suppress(onlooker.ToolError):
                await ctx.call("load", blob="x" * 1_000_000 + " api_key=sk-live-0123456789abcdef")

        provider, exporter = memory
        async with onlooker.ExecutionEngine(
            tools=[load], plugins=[otel.plugin(provider, record_content=True)]
        ) as engine:
            await engine.execute(loading)
        call = one(exporter.get_finished_spans(), "execute_tool load")
        description = call.status.description
        assert description is not None and len(description) < 20_100
        assert description.endswith("chars]") and "…[truncated" in description
        arguments = str(attrs(call)["gen_ai.tool.call.arguments"])
        assert len(arguments) < 20_100 and "…[truncated" in arguments

    async def test_without_content_the_values_are_only_read_for_their_secret_keys(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        """Content is off: nothing of a value is kept, so no rule runs on it (redacting every
        string a tool returned, inline, cost milliseconds a call); its secret keys are still
        learned and scrubbed from an error message."""
        seen: list[str] = []

        def count(match: re.Match[str]) -> str:
            seen.append(match.group(0))
            return match.group(0)

        redactor = audit.Redactor(extra_rules=[audit.Rule("count", r"row \d+", count)])

        @onlooker.tool
        def rows() -> dict[str, Any]:
            return {"rows": [f"row {i}" for i in range(50)], "db": {"password": "Zq7-pass-rows"}}

        async def listing(ctx: ExecutionContext) -> None:
            await ctx.call("rows")
            raise RuntimeError("Zq7-pass-rows did not work")

        provider, exporter = memory
        async with onlooker.ExecutionEngine(
            tools=[rows], plugins=[otel.plugin(provider, redactor=redactor)]
        ) as engine:
            await engine.execute(listing)
        assert seen == []
        [execution] = [
            s
            for s in exporter.get_finished_spans()
            if attrs(s)["gen_ai.operation.name"] == "invoke_agent"
        ]
        assert execution.status.description == "[REDACTED:secret_field] did not work"

    def test_a_redactor_of_another_type_is_named(self) -> None:
        with pytest.raises(
            TypeError, match=r"redactor must be an onlooker\.plugins\.audit\.Redactor"
        ):
            otel.plugin(redactor="strict")  # type: ignore[arg-type]  # the point of the test

    async def test_a_broken_tracer_never_breaks_the_execution(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        class BrokenTracer(trace_api.NoOpTracer):
            def start_span(self, *args: Any, **kwargs: Any) -> trace_api.Span:
                raise RuntimeError("exporter on fire")

        class BrokenProvider(trace_api.NoOpTracerProvider):
            def get_tracer(self, *args: Any, **kwargs: Any) -> trace_api.Tracer:
                return BrokenTracer()

        plugin = otel.plugin(BrokenProvider())
        with caplog.at_level(logging.ERROR, logger="onlooker.integrations.opentelemetry"):
            async with onlooker.ExecutionEngine(tools=[lookup], plugins=[plugin]) as engine:
                result = await engine.execute(helper)
                errors = engine.bus.statistics().observer_errors
        assert result.status == "completed" and result.value == "found sub"
        assert errors == 0  # the plugin caught and logged its own failures
        assert "exporter on fire" in caplog.text


class TestExportTracked:
    @pytest.mark.parametrize("known_as", ["declared", "registered"])
    async def test_tracked_calls_leave_the_current_span_alone(
        self, memory: tuple[TracerProvider, InMemorySpanExporter], known_as: str
    ) -> None:
        """A tool declared for a framework (as the Claude adapter declares ``Write``), or
        one of the engine's own tools, had its tracked calls made current: two open at
        once, or one finished in another task, left an ended call current, and the
        program's next span its child."""

        @onlooker.tool(name="Write")
        def write(p: int) -> str:
            return "ok"

        provider, exporter = memory
        tracer = provider.get_tracer("app")
        plugin = otel.plugin(provider)
        tools = [write] if known_as == "registered" else []
        async with onlooker.ExecutionEngine(tools=tools, plugins=[plugin]) as engine:
            if known_as == "declared":
                engine.declare_tool(onlooker.ToolDeclaration("Write", mutating=True))
            with tracer.start_as_current_span("request") as request:
                async with engine.track("agent") as run:
                    first = await run.tool_started("Write", {"p": 1}, tool_call_id="c1")
                    second = await run.tool_started("Write", {"p": 2}, tool_call_id="c2")
                    await first.finished("ok")
                    await second.finished("ok")
                    third = await run.tool_started("Write", {"p": 3}, tool_call_id="c3")
                    async with anyio.create_task_group() as group:
                        group.start_soon(third.finished, "ok")
                assert trace_api.get_current_span() is request
                with tracer.start_as_current_span("next model call"):
                    pass
        spans = exporter.get_finished_spans()
        assert parent_id(one(spans, "next model call")) == request.get_span_context().span_id

    async def test_a_tracked_run_exports_like_a_native_one(
        self, memory: tuple[TracerProvider, InMemorySpanExporter]
    ) -> None:
        provider, exporter = memory
        recorder = RecordingObserver()
        plugin = otel.plugin(provider)
        async with onlooker.ExecutionEngine(hooks=HOOKS, plugins=[plugin]) as engine:
            engine.bus.subscribe(recorder)
            async with engine.track("support-bot", trigger="langgraph") as run:
                search = await run.tool_started("search", {"q": "refund"}, tool_call_id="call_1")
                await search.finished({"hits": 2})
                charge = await run.tool_started("charge", {"eur": 20}, tool_call_id="call_2")
                await charge.failed(ValueError("card declined"))
                refused = await run.tool_started("delete", {"path": "/"}, tool_call_id="call_3")
                assert not refused.allowed
                skipped = await run.tool_started("ping", {}, tool_call_id="call_4")
                assert not skipped.allowed
                task = await run.tool_started("task", {"prompt": "sum up"}, tool_call_id="call_5")
                async with run.child("summarizer", parent_tool_call_id="call_5") as child:
                    # The same framework id in another execution: spans are kept apart.
                    inner = await child.tool_started("search", {"q": "x"}, tool_call_id="call_1")
                    await inner.finished("ok")
                await task.finished("summary")
                question = await run.interaction_started("Refund 20 EUR?", interaction_id="q1")
                await run.interaction_resolved(question, "declined")
            assert engine.extension(plugin).open_spans == 0

        spans = exporter.get_finished_spans()
        assert [s.name for s in spans] == [
            "execute_tool search",
            "execute_tool charge",
            "execute_tool delete",
            "execute_tool ping",
            "execute_tool search",
            "invoke_agent summarizer",
            "execute_tool task",
            "invoke_agent support-bot",
        ]
        assert_true_to_events(spans, recorder)
        root = one(spans, "invoke_agent support-bot")
        assert root.parent is None
        assert attrs(root)["gen_ai.agent.name"] == "support-bot"
        assert attrs(root)["onlooker.execution.id"] == run.execution_id
        assert attrs(root)["onlooker.trigger.kind"] == "langgraph"
        statuses = {
            attrs(s)["gen_ai.tool.call.id"]: (
                attrs(s)["onlooker.tool.status"],
                s.status.status_code,
                attrs(s).get("error.type"),
            )
            for s in spans
            if parent_id(s) == span_id(root)
        }
        assert statuses == {  # the child's span hangs under call_5's span, not the root's
            "call_1": ("completed", trace_api.StatusCode.UNSET, None),
            "call_2": ("failed", trace_api.StatusCode.ERROR, "ValueError"),
            "call_3": ("blocked", trace_api.StatusCode.ERROR, "ToolBlockedError"),
            "call_4": ("skipped", trace_api.StatusCode.UNSET, None),
            "call_5": ("completed", trace_api.StatusCode.UNSET, None),
        }
        child_span = one(spans, "invoke_agent summarizer")
        task_span = one(spans, "execute_tool task")
        assert parent_id(child_span) == span_id(task_span)
        assert attrs(child_span)["onlooker.parent_tool_call.id"] == "call_5"
        [inner_span] = [s for s in spans if parent_id(s) == span_id(child_span)]
        assert attrs(inner_span)["gen_ai.tool.call.id"] == "call_1"
        assert attrs(inner_span)["onlooker.execution.id"] == child.execution_id
        assert [e.name for e in root.events] == [
            "onlooker.interaction.started",
            "onlooker.interaction.resolved",
        ]
        assert root.events[1].attributes is not None
        assert root.events[1].attributes["onlooker.interaction.status"] == "declined"


class OtlpReceiver:
    """A tiny OTLP/HTTP collector on 127.0.0.1: keeps every decoded ``/v1/traces`` request."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.paths.append(self.path)
                if self.path == "/v1/traces":
                    receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1/traces"

    def spans(self) -> list[ProtoSpan]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            if scope.scope.name == otel.SCOPE_NAME
            for span in scope.spans
        ]


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()
    receiver.thread.join()


def value(any_value: AnyValue) -> object:
    return getattr(any_value, any_value.WhichOneof("value") or "string_value")


class TestExportOverOtlp:
    async def test_spans_arrive_at_an_otlp_http_collector(self, receiver: OtlpReceiver) -> None:
        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint))
        )
        try:
            async with onlooker.ExecutionEngine(
                tools=[lookup, explode, delete, ping, delegate],
                hooks=HOOKS,
                plugins=[otel.plugin(provider)],
            ) as engine:
                result = await engine.execute(program, on_elicitation=accept)
        finally:
            provider.shutdown()
        assert set(receiver.paths) == {"/v1/traces"}
        spans = receiver.spans()
        assert len(spans) == 10
        by_id = {span.span_id: span for span in spans}
        repeated = {"execute_tool lookup", "invoke_agent helper"}
        got = {span.name: span for span in spans if span.name not in repeated}
        root = got["invoke_agent program"]
        assert root.parent_span_id == b""
        assert root.kind == ProtoSpan.SPAN_KIND_INTERNAL
        root_attrs = {kv.key: value(kv.value) for kv in root.attributes}
        assert root_attrs["gen_ai.operation.name"] == "invoke_agent"
        assert root_attrs["gen_ai.agent.name"] == "program"
        assert root_attrs["onlooker.execution.id"] == result.execution_id
        assert [event.name for event in root.events] == [
            "onlooker.interaction.started",
            "onlooker.interaction.resolved",
        ]
        for name, status, code in [
            ("execute_tool explode", "failed", ProtoStatus.STATUS_CODE_ERROR),
            ("execute_tool delete", "blocked", ProtoStatus.STATUS_CODE_ERROR),
            ("execute_tool ping", "skipped", ProtoStatus.STATUS_CODE_UNSET),
            ("execute_tool delegate", "completed", ProtoStatus.STATUS_CODE_UNSET),
        ]:
            span = got[name]
            span_attrs = {kv.key: value(kv.value) for kv in span.attributes}
            assert span_attrs["gen_ai.operation.name"] == "execute_tool"
            assert span_attrs["gen_ai.tool.name"] == name.split()[1]
            assert span_attrs["onlooker.tool.status"] == status
            assert span.status.code == code
            assert span.parent_span_id == root.span_id
            assert span.trace_id == root.trace_id
        assert got["execute_tool explode"].status.message == "boom"
        helpers = [span for span in spans if span.name == "invoke_agent helper"]
        assert sorted(by_id[h.parent_span_id].name for h in helpers) == [
            "execute_tool delegate",
            "invoke_agent program",
        ]


# -- ingest --------------------------------------------------------------------------------


def script(*steps: tuple[str, dict[str, Any], str]) -> FunctionModel:
    """A FunctionModel that makes one tool call per response, then answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        made = sum(isinstance(message, ModelResponse) for message in messages)
        if made < len(steps):
            tool, args, call_id = steps[made]
            return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=call_id)])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # PydanticAI runs on asyncio only
class TestIngestPydanticAI:
    async def test_pydantic_ai_spans_become_a_tracked_execution(
        self,
        tmp_path: Path,
        caplog: pytest.LogCaptureFixture,
        check_stream: Callable[[Sequence[ExecutionEvent]], None],
    ) -> None:
        url = f"sqlite:///{tmp_path / 'history.db'}"
        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrumented = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))

        researcher = Agent(
            script(("lookup", {"q": "sub"}, "sub_1")),
            name="researcher",
            capabilities=[instrumented],
        )
        support = Agent(
            script(
                ("lookup", {"q": "refund"}, "call_1"),
                ("explode", {}, "call_2"),
                ("delete", {"path": "/tmp/x"}, "call_3"),
                ("delegate", {"task": "dig"}, "call_4"),
            ),
            name="support",
            capabilities=[instrumented],
        )
        ran_in_framework: list[str] = []

        def lookup_tool(q: str) -> str:
            ran_in_framework.append(f"lookup {q}")
            return f"found {q}"

        def explode_tool() -> str:
            ran_in_framework.append("explode")
            raise ToolFailed("boom")

        def delete_tool(path: str) -> str:
            ran_in_framework.append(f"delete {path}")
            return "deleted"

        async def delegate_tool(ctx: RunContext[None], task: str) -> str:
            result = await researcher.run(task, usage=ctx.usage)
            return result.output

        researcher.tool_plain(name="lookup")(lookup_tool)
        support.tool_plain(name="lookup")(lookup_tool)
        support.tool_plain(name="explode")(explode_tool)
        support.tool_plain(name="delete")(delete_tool)
        support.tool(name="delegate")(delegate_tool)

        recorder = RecordingObserver()
        history_plugin = history.plugin(url)
        audit_plugin = audit.plugin(directory=tmp_path / "audit", session_id="s1")
        export_plugin = otel.plugin(provider)  # the same provider: no feedback loop
        async with onlooker.ExecutionEngine(
            hooks=HOOKS, plugins=[history_plugin, audit_plugin, export_plugin]
        ) as engine:
            with onlooker.observing(recorder):  # the processor's runs report to this scope
                processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            with caplog.at_level(logging.WARNING, logger="onlooker.integrations.opentelemetry"):
                output = await support.run("help me")
                await processor.flush()
            trail = engine.extension(audit_plugin)
        provider.shutdown()

        assert output.output == "done"
        # Watch only: onlooker's pre-hook refused `delete`, but the framework ran it.
        assert ran_in_framework == ["lookup refund", "explode", "delete /tmp/x", "lookup sub"]
        assert "watch-only" in caplog.text

        started = recorder.of(ExecutionStarted)
        assert [(e.program, e.trigger.kind, e.attribution.depth) for e in started] == [
            ("support", "opentelemetry", 0),
            ("researcher", "opentelemetry", 1),
        ]
        main, sub = (e.execution_id for e in started)
        assert started[1].attribution.parent_execution_id == main
        assert started[1].attribution.parent_tool_call_id == "call_4"
        trace_ids = {e.trigger.metadata["trace_id"] for e in started}
        assert len(trace_ids) == 1

        stream = [
            (e.execution_id, e.kind, getattr(e, "tool", None), getattr(e, "tool_call_id", None))
            + ((e.status,) if isinstance(e, ToolCallFinished | ExecutionFinished) else ())
            for e in recorder.events
        ]
        assert stream == [
            (main, "ExecutionStarted", None, None),
            (main, "ToolCallStarted", "lookup", "call_1"),
            (main, "ToolCallFinished", "lookup", "call_1", "completed"),
            (main, "ToolCallStarted", "explode", "call_2"),
            (main, "ToolCallFinished", "explode", "call_2", "failed"),
            (main, "ToolCallStarted", "delete", "call_3"),
            (main, "ToolCallFinished", "delete", "call_3", "blocked"),
            (main, "ToolCallStarted", "delegate", "call_4"),
            (sub, "ExecutionStarted", None, None),
            (sub, "ToolCallStarted", "lookup", "sub_1"),
            (sub, "ToolCallFinished", "lookup", "sub_1", "completed"),
            (sub, "ExecutionFinished", None, None, "completed"),
            (main, "ToolCallFinished", "delegate", "call_4", "completed"),
            (main, "ExecutionFinished", None, None, "completed"),
        ]
        check_stream(recorder.events)

        finished = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
        assert recorder.of(ToolCallStarted)[0].args == {"q": "refund"}
        assert finished["call_1"].result == "found refund"
        assert finished["call_1"].duration_ms > 0
        assert finished["call_2"].error is not None
        assert "boom" in finished["call_2"].error.message
        assert finished["call_4"].result == "done"

        async with history.open(url) as store:
            tree = await store.get_execution(main)
        assert tree is not None and tree.status == "completed" and tree.program == "support"
        assert [(c.tool, c.tool_call_id, c.status) for c in tree.tool_calls] == [
            ("lookup", "call_1", "completed"),
            ("explode", "call_2", "failed"),
            ("delete", "call_3", "blocked"),
            ("delegate", "call_4", "completed"),
        ]
        [child] = tree.children
        assert (child.program, child.parent_tool_call_id) == ("researcher", "call_4")
        assert [(c.tool, c.status) for c in child.tool_calls] == [("lookup", "completed")]
        report = audit.verify(trail.session_dir)
        assert report.ok and report.records == len(recorder.events)

        # The export plugin saw the tracked runs; the processor skipped those spans.
        exported = [
            s.name
            for s in exporter.get_finished_spans()
            if s.instrumentation_scope is not None
            and s.instrumentation_scope.name == otel.SCOPE_NAME
        ]
        assert sorted(exported) == sorted(
            [
                "invoke_agent support",
                "invoke_agent researcher",
                "execute_tool lookup",
                "execute_tool lookup",
                "execute_tool explode",
                "execute_tool delete",
                "execute_tool delegate",
            ]
        )

    async def test_a_call_id_repeated_in_a_run_is_suffixed(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        provider = TracerProvider()
        instrumented = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
        # The model retries `flaky` under the same id; so does a sub-agent, in a run of its own.
        researcher = Agent(
            script(("flaky", {}, "same"), ("flaky", {}, "same")),
            name="researcher",
            capabilities=[instrumented],
        )
        support = Agent(
            script(("flaky", {}, "same"), ("flaky", {}, "same"), ("delegate", {}, "same")),
            name="support",
            capabilities=[instrumented],
        )
        attempts: list[str] = []

        def flaky() -> str:
            attempts.append("flaky")
            if len(attempts) % 2:
                raise ModelRetry("busy")
            return "ok now"

        async def delegate(ctx: RunContext[None]) -> str:
            result = await researcher.run("dig", usage=ctx.usage)
            return result.output

        researcher.tool_plain(name="flaky")(flaky)
        support.tool_plain(name="flaky")(flaky)
        support.tool(name="delegate")(delegate)

        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            with caplog.at_level(logging.WARNING, logger="onlooker.integrations.opentelemetry"):
                assert (await support.run("go")).output == "done"
                await processor.flush()
        provider.shutdown()

        assert attempts == ["flaky"] * 4
        assert caplog.records == []
        main, sub = (e.execution_id for e in recorder.of(ExecutionStarted))
        assert [(e.tool, e.tool_call_id, e.status) for e in recorder.of(ToolCallFinished)] == [
            ("flaky", "same", "failed"),
            ("flaky", "same#2", "completed"),
            ("flaky", "same", "failed"),
            ("flaky", "same#2", "completed"),
            ("delegate", "same#3", "completed"),
        ]
        assert [e.execution_id for e in recorder.of(ToolCallFinished)] == [
            main,
            main,
            sub,
            sub,
            main,
        ]
        assert recorder.of(ExecutionStarted)[1].attribution.parent_tool_call_id == "same#3"
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["completed", "completed"]


async def ingested(agent: Agent[None, Any], provider: TracerProvider) -> RecordingObserver:
    """What the ingest processor records of one run of ``agent`` (its error, if any, swallowed)."""
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine() as engine:
        engine.bus.subscribe(recorder)
        processor = otel.OnlookerSpanProcessor(engine)
        provider.add_span_processor(processor)
        with contextlib.suppress(Exception):
            await agent.run("go")
        await processor.flush()
    provider.shutdown()
    return recorder


def parallel(*calls: tuple[str, str]) -> FunctionModel:
    """A FunctionModel that makes the calls ``(tool, call id)`` at once, then answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(message, ModelResponse) for message in messages):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[ToolCallPart(tool, {}, tool_call_id=id_) for tool, id_ in calls]
        )

    return FunctionModel(respond)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # PydanticAI runs on asyncio only
class TestIngestPydanticAIOutcomes:
    async def test_a_cancelled_run_is_cancelled_and_its_call_keeps_its_outcome(self) -> None:
        """PydanticAI ends the agent span of a run it cancels (status unset) before the
        tool span the cancellation cut short: the run waits for that call's end."""
        provider = TracerProvider()
        instrumented = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
        agent = Agent(script(("wait", {}, "call_1")), name="waiter", capabilities=[instrumented])
        started = anyio.Event()

        async def wait_tool() -> str:
            started.set()
            await anyio.sleep_forever()
            return "never"

        agent.tool_plain(name="wait")(wait_tool)
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            with onlooker.observing(recorder):
                processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            async with anyio.create_task_group() as group:
                group.start_soon(agent.run, "go")
                await started.wait()
                group.cancel_scope.cancel()
            await processor.flush()
        provider.shutdown()
        [call] = recorder.of(ToolCallFinished)
        assert (call.status, call.error and call.error.type) == ("cancelled", "CancelledError")
        [run] = recorder.of(ExecutionFinished)
        assert run.status == "cancelled"

    async def test_the_older_attribute_names_still_give_arguments_and_results(self) -> None:
        provider = TracerProvider()
        with pytest.warns(UserWarning, match="versions 2, 3, and 4 are deprecated"):
            settings = InstrumentationSettings(tracer_provider=provider, version=2)
        agent = Agent(
            script(("lookup", {"q": "refund"}, "call_1")),
            name="support",
            capabilities=[Instrumentation(settings=settings)],
        )

        def lookup_tool(q: str) -> str:
            return f"found {q}"

        agent.tool_plain(name="lookup")(lookup_tool)
        recorder = await ingested(agent, provider)
        (started,) = recorder.of(ToolCallStarted)
        (finished,) = recorder.of(ToolCallFinished)
        assert (started.tool, started.args) == ("lookup", {"q": "refund"})
        assert (finished.status, finished.result) == ("completed", "found refund")

    async def test_a_deferred_call_is_not_a_success(self) -> None:
        provider = TracerProvider()
        agent = Agent(
            script(("later", {}, "call_1")),
            name="deferrer",
            capabilities=[
                Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
            ],
            output_type=[str, DeferredToolRequests],
        )

        def later() -> str:
            raise CallDeferred()

        agent.tool_plain(name="later")(later)
        recorder = await ingested(agent, provider)
        (finished,) = recorder.of(ToolCallFinished)
        assert (finished.tool_call_id, finished.status) == ("call_1", "cancelled")
        assert finished.error is not None and finished.error.cause == "interrupt"

    async def test_a_call_the_framework_cancelled_is_cancelled(self) -> None:
        provider = TracerProvider()
        agent = Agent(
            parallel(("slow", "s1"), ("crash", "c1")),
            name="parallel",
            capabilities=[
                Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
            ],
        )

        async def slow() -> str:
            await anyio.sleep(5)
            return "late"

        async def crash() -> str:
            await anyio.sleep(0.05)
            raise KeyError("missing")

        agent.tool_plain(name="slow")(slow)
        agent.tool_plain(name="crash")(crash)
        recorder = await ingested(agent, provider)
        statuses = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
        assert statuses["c1"].status == "failed"
        assert statuses["s1"].status == "cancelled"
        error = statuses["s1"].error
        assert error is not None
        assert (error.type, error.cause) == ("CancelledError", "interrupt")
        (run,) = recorder.of(ExecutionFinished)
        assert run.status == "failed"  # the crash, not the cancellation it caused


class WindowLock:
    """The processor's lock, but with its race window held open.

    It locks exactly like the lock it replaces. Once ``armed``, the first time
    the loop thread releases it twice in a row with nothing queued or pending
    (the drain task has applied its last op, then found the queue empty), it
    runs ``inject`` right there, before the drain task can take the lock again.
    """

    def __init__(self, processor: otel.OnlookerSpanProcessor, inject: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._processor = processor
        self._inject = inject
        self._loop_thread = threading.get_ident()
        self._idle_releases = 0
        self.armed = False
        self.injected = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        idle = not self._processor._ops and self._processor._pending == 0
        self._lock.release()
        if not self.armed or self.injected or threading.get_ident() != self._loop_thread:
            return
        self._idle_releases = self._idle_releases + 1 if idle else 0
        if self._idle_releases == 2:
            self.injected = True
            self._inject()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def agent_span(
    tracer: trace_api.Tracer, name: str, parent: trace_api.Span | None = None
) -> trace_api.Span:
    """An ``invoke_agent`` span as a framework starts one (inside ``parent``'s, if given)."""
    return tracer.start_span(
        f"invoke_agent {name}",
        context=trace_api.set_span_in_context(parent) if parent is not None else None,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name},
    )


def tool_span(
    tracer: trace_api.Tracer, name: str, call_id: str, parent: trace_api.Span
) -> trace_api.Span:
    """An ``execute_tool`` span inside ``parent``'s, its result ``"ok"``."""
    return tracer.start_span(
        f"execute_tool {name}",
        context=trace_api.set_span_in_context(parent),
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.result": '"ok"',
        },
    )


@contextlib.asynccontextmanager
async def ingesting(recorder: RecordingObserver) -> AsyncIterator[trace_api.Tracer]:
    """An engine whose span processor ingests a tracer's spans into ``recorder``; on leaving,
    the engine closes, then the provider shuts down."""
    provider = TracerProvider()
    async with onlooker.ExecutionEngine() as engine:
        with onlooker.observing(recorder):
            processor = otel.OnlookerSpanProcessor(engine)
        provider.add_span_processor(processor)
        yield provider.get_tracer("app")
        await processor.flush()
    provider.shutdown()


class TestIngestManualSpans:
    async def test_a_tool_span_ending_after_its_agent_span_keeps_its_outcome(self) -> None:
        recorder = RecordingObserver()
        async with ingesting(recorder) as tracer:
            agent = agent_span(tracer, "bot")
            tool = tool_span(tracer, "fetch", "call_1", agent)
            agent.end()  # a background call outlives its agent's span
            tool.end()
        [call] = recorder.of(ToolCallFinished)
        assert (call.status, call.result) == ("completed", "ok")
        [run] = recorder.of(ExecutionFinished)
        assert run.status == "completed"
        assert run.at >= call.at

    async def test_a_parent_run_waits_for_a_child_run_still_waiting_for_its_call(self) -> None:
        """An agent run inside a call of another: the child's agent span ends before its own
        call's, then the parent's call and agent spans end, then the child's call. The
        parent waits for the child, and each call keeps its own outcome."""
        recorder = RecordingObserver()
        async with ingesting(recorder) as tracer:
            outer = agent_span(tracer, "outer")
            delegate = tool_span(tracer, "delegate", "call_1", outer)
            inner = agent_span(tracer, "inner", delegate)
            fetch = tool_span(tracer, "fetch", "call_2", inner)
            for span in (inner, delegate, outer, fetch):
                span.end()
        assert {(c.tool, c.status) for c in recorder.of(ToolCallFinished)} == {
            ("delegate", "completed"),
            ("fetch", "completed"),
        }
        child, parent = recorder.of(ExecutionFinished)
        assert (child.status, parent.status) == ("completed", "completed")
        assert child.execution_id != parent.execution_id
        [inner_started] = [e for e in recorder.of(ExecutionStarted) if e.program == "inner"]
        assert child.execution_id == inner_started.execution_id

    async def test_spans_from_another_thread_make_one_run_per_trace(self) -> None:
        provider = TracerProvider()
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            tracer = provider.get_tracer("my-app")

            def handle_request() -> int:
                with tracer.start_as_current_span("POST /refunds"):
                    with tracer.start_as_current_span(
                        "execute_tool search",
                        attributes={
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": "search",
                            "gen_ai.tool.call.id": "t1",
                            "gen_ai.tool.call.arguments": '{"q": "x"}',
                        },
                    ) as span:
                        span.set_attribute("gen_ai.tool.call.result", '{"hits": 1}')
                    with tracer.start_as_current_span(
                        "execute_tool fetch", attributes={"gen_ai.operation.name": "execute_tool"}
                    ) as span:
                        span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, "timeout"))
                        fetch_id = span.get_span_context().span_id
                    return fetch_id

            fetch_id = await anyio.to_thread.run_sync(handle_request)
            await processor.flush()
            assert await anyio.to_thread.run_sync(processor.force_flush)
        provider.shutdown()

        [started] = recorder.of(ExecutionStarted)
        assert started.program == "POST /refunds"
        assert started.trigger.kind == "opentelemetry"
        assert set(started.trigger.metadata) == {"trace_id", "span_id"}
        calls = recorder.of(ToolCallStarted)
        assert [(c.tool, c.tool_call_id, c.args) for c in calls] == [
            ("search", "t1", {"q": "x"}),
            ("fetch", f"{fetch_id:016x}", {}),
        ]
        done = recorder.of(ToolCallFinished)
        assert [(d.status, d.result) for d in done] == [
            ("completed", {"hits": 1}),
            ("failed", None),
        ]
        assert done[1].error is not None and done[1].error.message == "timeout"
        [finished] = recorder.of(ExecutionFinished)
        assert finished.status == "completed"

    async def test_shutdown_cancels_runs_whose_spans_never_ended(self) -> None:
        provider = TracerProvider()
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            tracer = provider.get_tracer("my-app")
            agent = tracer.start_span(
                "invoke_agent planner", attributes={"gen_ai.operation.name": "invoke_agent"}
            )
            tool = tracer.start_span(
                "execute_tool think",
                context=trace_api.set_span_in_context(agent),
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": "c1"},
            )
            await anyio.to_thread.run_sync(processor.shutdown)  # waits for the engine
            tool.end()
            agent.end()  # after shutdown: ignored
            await processor.flush()
        assert [(e.kind, getattr(e, "status", None)) for e in recorder.events] == [
            ("ExecutionStarted", None),
            ("ToolCallStarted", None),
            ("ToolCallFinished", "cancelled"),
            ("ExecutionFinished", "cancelled"),
        ]
        assert recorder.of(ExecutionStarted)[0].program == "planner"

    async def test_spans_after_the_engine_closed_are_dropped_quietly(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        provider = TracerProvider()
        async with onlooker.ExecutionEngine() as engine:
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
        tracer = provider.get_tracer("my-app")
        with caplog.at_level(logging.WARNING, logger="onlooker.integrations.opentelemetry"):
            for _ in range(3):
                with tracer.start_as_current_span(
                    "execute_tool search", attributes={"gen_ai.operation.name": "execute_tool"}
                ):
                    pass
            await processor.flush()
        assert [r.getMessage() for r in caplog.records] == [
            "OnlookerSpanProcessor stops recording: the engine is closed"
        ]
        assert processor.force_flush()

    @pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
    def test_spans_after_the_event_loop_closed_are_dropped_with_no_warning(
        self, anyio_backend: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A span ending once ``anyio.run`` returned (a late thread, interpreter exit)."""
        provider = TracerProvider()

        async def main() -> None:
            async with onlooker.ExecutionEngine() as engine:
                provider.add_span_processor(otel.OnlookerSpanProcessor(engine))

        anyio.run(main, backend=anyio_backend)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with provider.get_tracer("my-app").start_as_current_span(
                "execute_tool late", attributes={"gen_ai.operation.name": "execute_tool"}
            ):
                pass
            gc.collect()
        assert [str(w.message) for w in caught] == []
        assert "dropped" in caplog.text

    async def test_building_it_outside_an_event_loop_is_an_error(self) -> None:
        async with onlooker.ExecutionEngine() as engine:
            with pytest.raises(anyio.NoEventLoopError):
                await anyio.to_thread.run_sync(otel.OnlookerSpanProcessor, engine)

    async def test_a_span_ending_as_the_drain_task_stops_is_not_stranded(self) -> None:
        provider = TracerProvider()
        recorder = RecordingObserver()
        tracer = provider.get_tracer("my-app")
        tool = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "search",
            "gen_ai.tool.call.id": "t1",
            "gen_ai.tool.call.arguments": "{}",
        }

        def request(name: str) -> None:
            with (
                tracer.start_as_current_span(name),
                tracer.start_as_current_span("execute_tool search", attributes=tool),
            ):
                pass

        def inject() -> None:  # on the loop thread, while the drain task is stopping
            worker = threading.Thread(target=request, args=("second",))
            worker.start()
            worker.join()

        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            lock = WindowLock(processor, inject)
            # Swap the processor's lock, and the condition on it, for the widened one
            # (a Lock in all but its type, hence the ignore).
            condition = threading.Condition(lock)  # type: ignore[arg-type]
            vars(processor).update(_lock=lock, _idle=condition)
            provider.add_span_processor(processor)
            request("first")  # on the loop: all its ops are queued before the drain task runs
            lock.armed = True
            with anyio.fail_after(2):  # stranded, the second request's ops wait forever
                await processor.flush()
            assert lock.injected
            assert await anyio.to_thread.run_sync(processor.force_flush, 1000)
        provider.shutdown()

        runs = recorder.of(ExecutionStarted)
        assert [e.program for e in runs] == ["first", "second"]
        for run in runs:
            assert [
                (e.kind, getattr(e, "status", None))
                for e in recorder.for_execution(run.execution_id)
            ] == [
                ("ExecutionStarted", None),
                ("ToolCallStarted", None),
                ("ToolCallFinished", "completed"),
                ("ExecutionFinished", "completed"),
            ]

    async def test_attributes_set_after_the_start_are_read_at_the_end(
        self, check_stream: Callable[[Sequence[ExecutionEvent]], None]
    ) -> None:
        provider = TracerProvider()
        recorder = RecordingObserver()
        tracer = provider.get_tracer("my-app")
        operation = {"gen_ai.operation.name": "execute_tool"}
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            with tracer.start_as_current_span("request"):
                # Everything at the start: recorded as it starts.
                with tracer.start_as_current_span(
                    "execute_tool search",
                    attributes={
                        **operation,
                        "gen_ai.tool.name": "search",
                        "gen_ai.tool.call.id": "call_0",
                        "gen_ai.tool.call.arguments": '{"q": "first"}',
                    },
                ):
                    await processor.flush()
                    assert [e.tool_call_id for e in recorder.of(ToolCallStarted)] == ["call_0"]
                # The operation at the start, the rest set later: recorded at the end.
                with tracer.start_as_current_span("execute_tool", attributes=operation) as span:
                    await processor.flush()
                    assert len(recorder.of(ToolCallStarted)) == 1
                    span.set_attribute("gen_ai.tool.name", "search")
                    span.set_attribute("gen_ai.tool.call.id", "call_A")
                    span.set_attribute("gen_ai.tool.call.arguments", '{"q": "refund"}')
                    span.set_attribute("gen_ai.tool.call.result", '"3 hits"')
                # Even the operation set later: the call is known, and recorded whole, at the end.
                with tracer.start_as_current_span("search") as span:
                    span.set_attribute("gen_ai.operation.name", "execute_tool")
                    span.set_attribute("gen_ai.tool.name", "search")
                    span.set_attribute("gen_ai.tool.call.id", "call_B")
                    span.set_attribute("gen_ai.tool.call.arguments", '{"q": "other"}')
                    span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, "timeout"))
                # An agent started inside a call names it: the call starts then, as it is.
                with tracer.start_as_current_span("execute_tool", attributes=operation) as span:
                    span.set_attribute("gen_ai.tool.name", "delegate")
                    span.set_attribute("gen_ai.tool.call.id", "call_C")
                    with tracer.start_as_current_span(
                        "invoke_agent helper", attributes={"gen_ai.operation.name": "invoke_agent"}
                    ):
                        pass
                    span.set_attribute("gen_ai.tool.call.arguments", '{"too": "late"}')
            await processor.flush()
        provider.shutdown()

        check_stream(recorder.events)
        main, child = recorder.of(ExecutionStarted)
        assert (child.program, child.attribution.parent_tool_call_id) == ("helper", "call_C")
        stream = [
            (e.kind, getattr(e, "tool", None), getattr(e, "tool_call_id", None))
            + ((e.args,) if isinstance(e, ToolCallStarted) else ())
            + ((e.status, e.result) if isinstance(e, ToolCallFinished) else ())
            for e in recorder.for_execution(main.execution_id)
        ]
        assert stream == [
            ("ExecutionStarted", None, None),
            ("ToolCallStarted", "search", "call_0", {"q": "first"}),
            ("ToolCallFinished", "search", "call_0", "completed", None),
            ("ToolCallStarted", "search", "call_A", {"q": "refund"}),
            ("ToolCallFinished", "search", "call_A", "completed", "3 hits"),
            ("ToolCallStarted", "search", "call_B", {"q": "other"}),
            ("ToolCallFinished", "search", "call_B", "failed", None),
            ("ToolCallStarted", "delegate", "call_C", {}),
            ("ToolCallFinished", "delegate", "call_C", "completed", None),
            ("ExecutionFinished", None, None),
        ]

    async def test_a_waiting_call_whose_agent_ended_first_is_named_in_a_warning(
        self,
        check_stream: Callable[[Sequence[ExecutionEvent]], None],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        provider = TracerProvider()
        recorder = RecordingObserver()
        tracer = provider.get_tracer("my-app")
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            agent = tracer.start_span(
                "invoke_agent bot", attributes={"gen_ai.operation.name": "invoke_agent"}
            )
            call = tracer.start_span(
                "execute_tool",
                context=trace_api.set_span_in_context(agent),
                attributes={"gen_ai.operation.name": "execute_tool"},
            )
            call.set_attribute("gen_ai.tool.name", "search")
            call.set_attribute("gen_ai.tool.call.id", "call_late")
            agent.end()  # out of order: the run ends before its call said who it is
            call.end()
            await processor.flush()
        provider.shutdown()

        check_stream(recorder.events)
        assert [e.kind for e in recorder.events] == ["ExecutionStarted", "ExecutionFinished"]
        assert any("call_late" in r.getMessage() for r in caplog.records)

    async def test_a_call_id_repeated_in_a_trace_is_suffixed(self) -> None:
        provider = TracerProvider()
        recorder = RecordingObserver()
        tracer = provider.get_tracer("my-app")
        tool = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "search",
            "gen_ai.tool.call.id": "t1",
            "gen_ai.tool.call.arguments": "{}",
        }
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            for request in ("first", "second"):  # a run per trace: each its own ids
                with tracer.start_as_current_span(request):
                    for _ in range(3):
                        with tracer.start_as_current_span("execute_tool search", attributes=tool):
                            pass
            await processor.flush()
        provider.shutdown()

        first, second = (e.execution_id for e in recorder.of(ExecutionStarted))
        for run in (first, second):
            assert [e.tool_call_id for e in recorder.of(ToolCallFinished, run)] == [
                "t1",
                "t1#2",
                "t1#3",
            ]

    async def test_a_workflow_run_takes_the_workflow_name(self) -> None:
        provider = TracerProvider()
        recorder = RecordingObserver()
        tracer = provider.get_tracer("my-app")
        workflow = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "triage"}
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            with tracer.start_as_current_span("invoke_workflow triage", attributes=workflow):
                pass
            with tracer.start_as_current_span("invoke_workflow nightly"):  # named, no attribute
                pass
            await processor.flush()
        provider.shutdown()
        assert [e.program for e in recorder.of(ExecutionStarted)] == ["triage", "nightly"]

    async def test_a_failure_keeps_the_error_type_the_span_gives(self) -> None:
        provider = TracerProvider()
        recorder = RecordingObserver()
        tracer = provider.get_tracer("my-app")

        def tool(call_id: str) -> dict[str, str]:
            return {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "fetch",
                "gen_ai.tool.call.id": call_id,
            }

        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            with (
                contextlib.suppress(KeyError),
                tracer.start_as_current_span("invoke_agent support", attributes=agent) as run,
            ):
                with tracer.start_as_current_span(
                    "execute_tool fetch", attributes=tool("c1")
                ) as span:
                    span.set_attribute("error.type", "timeout")
                    span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, "read timed out"))
                with (
                    contextlib.suppress(ValueError),
                    tracer.start_as_current_span("execute_tool fetch", attributes=tool("c2")),
                ):
                    raise ValueError("bad url")  # the SDK's exception event and status
                with tracer.start_as_current_span(
                    "execute_tool fetch", attributes=tool("c3")
                ) as span:
                    span.set_attribute("error.type", "500")  # no status: still a failure
                run.set_attribute("error.type", "KeyError")
                raise KeyError("missing")
            await processor.flush()
        provider.shutdown()

        done = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
        errors = {
            call_id: (
                e.status,
                e.error.type if e.error else None,
                e.error.message if e.error else None,
            )
            for call_id, e in done.items()
        }
        assert errors == {
            "c1": ("failed", "timeout", "read timed out"),
            "c2": ("failed", "ValueError", "ValueError: bad url"),
            "c3": ("failed", "500", "500"),
        }
        [finished] = recorder.of(ExecutionFinished)
        assert finished.status == "failed"
        assert finished.error is not None and finished.error.type == "KeyError"

    async def test_structured_arguments_and_results_are_read_as_json(self) -> None:
        provider = TracerProvider()
        recorder = RecordingObserver()
        tracer = provider.get_tracer("my-app")
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            processor = otel.OnlookerSpanProcessor(engine)
            provider.add_span_processor(processor)
            with tracer.start_as_current_span(
                "execute_tool search",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.id": "t1",
                    # The conventions' preferred form where the SDK takes it (AnyValue).
                    "gen_ai.tool.call.arguments": {
                        "q": "x",
                        "filters": {"lang": "en"},
                        "ids": [1, 2],
                    },
                },
            ) as span:
                span.set_attribute("gen_ai.tool.call.result", {"hits": [{"id": 1}], "total": 1})
            await processor.flush()
        provider.shutdown()

        [started] = recorder.of(ToolCallStarted)
        assert started.args == {"q": "x", "filters": {"lang": "en"}, "ids": [1, 2]}
        [finished] = recorder.of(ToolCallFinished)
        assert finished.result == {"hits": [{"id": 1}], "total": 1}
