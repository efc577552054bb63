"""The OpenAI Agents SDK under onlooker: a real ``Runner.run`` on the SDK's own ``ScriptedModel``.

Every run is offline: the model is ``agents.testing.ScriptedModel`` (the SDK's
deterministic ``Model``), and the only trace processor is onlooker's, so
nothing is exported.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    InputGuardrail,
    OutputGuardrail,
    RunConfig,
    RunContextWrapper,
    Runner,
    ToolInputGuardrail,
    UserError,
    function_tool,
    handoff,
    set_trace_processors,
    set_tracing_disabled,
    trace,
)
from agents.exceptions import (
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    ModelBehaviorError,
    OutputGuardrailTripwireTriggered,
    ToolInputGuardrailTripwireTriggered,
)
from agents.run_config import ToolExecutionConfig
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message, function_call

import onlooker
from onlooker import (
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
from onlooker.integrations.openai_agents import (
    OnlookerRunHooks,
    OnlookerTracingProcessor,
    tool_guardrail,
)
from onlooker.plugins import audit, history
from onlooker.testing import RecordingObserver, check_invariants

pytestmark = pytest.mark.anyio

Check = Callable[[Sequence[onlooker.ExecutionEvent]], None]
LOGGER = "onlooker.integrations.openai_agents"


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: the SDK's runner is built on asyncio (tasks, shields), not anyio."""
    return "asyncio"


@pytest.fixture(autouse=True)
def offline_tracing() -> Iterator[None]:
    """Tracing on (failures live in spans), never the SDK's exporter: tests add onlooker's."""
    set_tracing_disabled(False)
    set_trace_processors([])
    yield
    set_trace_processors([])


@pytest.fixture(autouse=True)
def no_adapter_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """The adapter logs its own failures instead of raising: none may happen here."""
    yield
    # caplog.records would be this teardown's own records: the test's are the "call" phase's.
    logged = caplog.get_records("call")
    errors = [r for r in logged if r.name == LOGGER and r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


class Tools:
    """The agent's tools, and a record of which bodies actually ran."""

    def __init__(self, guard: ToolInputGuardrail[Any] | None) -> None:
        self.ran: list[str] = []
        guards = None if guard is None else [guard]

        @function_tool(tool_input_guardrails=guards)
        def lookup(city: str) -> str:
            """Look up the weather in a city."""
            self.ran.append(f"lookup:{city}")
            return f"sunny in {city}"

        @function_tool(tool_input_guardrails=guards)
        def explode(reason: str) -> str:
            """Always fails."""
            self.ran.append("explode")
            raise RuntimeError(reason)

        @function_tool(tool_input_guardrails=guards)
        def delete_file(path: str) -> str:
            """Delete a file."""
            self.ran.append(f"delete_file:{path}")
            return "deleted"

        self.lookup, self.explode, self.delete_file = lookup, explode, delete_file


def refuse_deletes(ctx: ToolUseContext) -> PreHookResult:
    return PreHookResult(action=HookAction.BLOCK, reason=f"no deleting {ctx.tool_input['path']}")


GOVERNANCE = [HookMatcher(pattern="delete_file", pre=(refuse_deletes,))]


def build_agents(
    tools: Tools, hooks: OnlookerRunHooks, guard: ToolInputGuardrail[Any] | None
) -> tuple[Agent[Any], ScriptedModel, ScriptedModel]:
    researcher_model = ScriptedModel(
        [
            [function_call("lookup", {"city": "Oslo"}, call_id="call_r1")],
            [assistant_message("Oslo is sunny")],
        ]
    )
    researcher = Agent(name="researcher", model=researcher_model, tools=[tools.lookup])
    research: FunctionTool = researcher.as_tool("research", "Ask the researcher.", hooks=hooks)
    if guard is not None:
        research.tool_input_guardrails = [guard]
    model = ScriptedModel(
        [
            [function_call("lookup", {"city": "Paris"}, call_id="call_1")],
            [function_call("explode", {"reason": "boom"}, call_id="call_2")],
            [function_call("delete_file", {"path": "/etc/passwd"}, call_id="call_3")],
            [function_call("research", {"input": "weather in Oslo?"}, call_id="call_4")],
            [assistant_message("All done")],
        ]
    )
    agent = Agent(
        name="assistant",
        model=model,
        tools=[tools.lookup, tools.explode, tools.delete_file, research],
    )
    return agent, model, researcher_model


def tool_events(events: list[onlooker.ExecutionEvent]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for event in events:
        if isinstance(event, ExecutionStarted):
            out.append(("start", event.program))
        elif isinstance(event, ToolCallStarted):
            out.append(("call", event.tool, event.tool_call_id))
        elif isinstance(event, ToolCallFinished):
            out.append(("done", event.tool, event.tool_call_id, event.status))
        elif isinstance(event, ExecutionFinished):
            out.append(("end", event.status))
    return out


class TestGovernedRun:
    async def test_a_run_with_every_outcome(self, tmp_path: Path, check_stream: Check) -> None:
        recorder = RecordingObserver()
        url = f"sqlite:///{tmp_path / 'history.db'}"
        audit_plugin = audit.plugin(directory=tmp_path / "audit", session_id="s1")
        async with onlooker.ExecutionEngine(
            hooks=GOVERNANCE, plugins=[history.plugin(url), audit_plugin]
        ) as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine, program="support-bot", owner="ana")
            guard = tool_guardrail(engine)
            tools = Tools(guard)
            agent, model, researcher_model = build_agents(tools, hooks, guard)

            result = await Runner.run(agent, "help me", hooks=hooks)
            trail = engine.extension(audit_plugin)

        assert result.final_output == "All done"
        model.assert_complete()
        researcher_model.assert_complete()
        # The refused tool's body never ran; the failing one did, and the model saw its refusal.
        assert tools.ran == ["lookup:Paris", "explode", "lookup:Oslo"]
        seen = [item for call in model.calls for item in call.input if isinstance(item, dict)]
        outputs = {
            i["call_id"]: i["output"] for i in seen if i.get("type") == "function_call_output"
        }
        assert outputs["call_3"] == "Tool call blocked by onlooker: no deleting /etc/passwd"
        assert outputs["call_1"] == "sunny in Paris"
        assert outputs["call_4"] == "Oslo is sunny"

        events = recorder.events
        check_stream(events)
        root = events[0]
        assert isinstance(root, ExecutionStarted)
        child_start = next(
            e for e in events if isinstance(e, ExecutionStarted) and e.program == "researcher"
        )
        assert tool_events(recorder.for_execution(root.execution_id)) == [
            ("start", "support-bot"),
            ("call", "lookup", "call_1"),
            ("done", "lookup", "call_1", "completed"),
            ("call", "explode", "call_2"),
            ("done", "explode", "call_2", "failed"),
            ("call", "delete_file", "call_3"),
            ("done", "delete_file", "call_3", "blocked"),
            ("call", "research", "call_4"),
            ("done", "research", "call_4", "completed"),
            ("end", "completed"),
        ]
        assert tool_events(recorder.for_execution(child_start.execution_id)) == [
            ("start", "researcher"),
            ("call", "lookup", "call_r1"),
            ("done", "lookup", "call_r1", "completed"),
            ("end", "completed"),
        ]
        # the child runs inside the research call, between its start and its end
        order = [(e.execution_id, e.kind, getattr(e, "tool_call_id", None)) for e in events]
        assert (
            order.index((root.execution_id, "ToolCallStarted", "call_4"))
            < order.index((child_start.execution_id, "ExecutionStarted", None))
            < order.index((child_start.execution_id, "ExecutionFinished", None))
            < order.index((root.execution_id, "ToolCallFinished", "call_4"))
        )
        assert root.trigger.kind == "openai-agents" and root.owner == "ana"
        assert (child_start.trigger.kind, child_start.owner) == ("openai-agents", "ana")
        assert root.input == [{"content": "help me", "role": "user"}]
        attribution = child_start.attribution
        assert attribution.parent_execution_id == root.execution_id
        assert attribution.parent_tool_call_id == "call_4"
        assert attribution.depth == 1

        finished = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
        assert finished["call_1"].result == "sunny in Paris"
        assert finished["call_4"].result == "Oslo is sunny"
        error = finished["call_2"].error
        assert error is not None and error.message.startswith("Error running tool")
        assert finished["call_2"].result is None
        blocked = finished["call_3"].error
        assert blocked is not None and "no deleting /etc/passwd" in blocked.message
        started = {e.tool_call_id: e for e in recorder.of(ToolCallStarted)}
        assert started["call_3"].args == {"path": "/etc/passwd"}
        assert started["call_4"].args == {"input": "weather in Oslo?"}
        end = recorder.of(ExecutionFinished, root.execution_id)[0]
        assert end.result == "All done"

        report = audit.verify(trail.path)
        assert report.ok and report.records == len(events)
        async with history.open(url) as store:
            tree = await store.get_execution(root.execution_id)
        assert tree is not None and tree.status == "completed" and tree.program == "support-bot"
        assert [(c.tool_call_id, c.status) for c in tree.tool_calls] == [
            ("call_1", "completed"),
            ("call_2", "failed"),
            ("call_3", "blocked"),
            ("call_4", "completed"),
        ]
        (child,) = tree.children
        assert child.parent_tool_call_id == "call_4" and child.status == "completed"
        assert [(c.tool_call_id, c.status) for c in child.tool_calls] == [("call_r1", "completed")]


class TestWithoutGuardrail:
    async def test_hooks_alone_record_every_call_but_cannot_refuse(
        self, caplog: pytest.LogCaptureFixture, check_stream: Check
    ) -> None:
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(hooks=GOVERNANCE) as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            tools = Tools(None)
            model = ScriptedModel(
                [
                    [function_call("lookup", {"city": "Rome"}, call_id="c1")],
                    [function_call("explode", {"reason": "x"}, call_id="c2")],
                    [function_call("delete_file", {"path": "a.txt"}, call_id="c3")],
                    [assistant_message("ok")],
                ]
            )
            agent = Agent(
                name="watcher", model=model, tools=[tools.lookup, tools.explode, tools.delete_file]
            )
            with caplog.at_level(logging.WARNING, LOGGER):
                await Runner.run(agent, "go", hooks=hooks)

        check_stream(recorder.events)
        assert tool_events(recorder.events) == [
            ("start", "watcher"),
            ("call", "lookup", "c1"),
            ("done", "lookup", "c1", "completed"),
            ("call", "explode", "c2"),
            ("done", "explode", "c2", "failed"),
            ("call", "delete_file", "c3"),
            ("done", "delete_file", "c3", "blocked"),
            ("end", "completed"),
        ]
        # Without the guardrail nothing can stop the call: the log says so.
        assert "delete_file:a.txt" in tools.ran
        assert "cannot stop it" in caplog.text


class TestFailures:
    async def test_a_tool_that_raises_past_the_sdk_fails_the_call_and_the_run(
        self, check_stream: Check
    ) -> None:
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            guard = tool_guardrail(engine)

            @function_tool(failure_error_function=None, tool_input_guardrails=[guard])
            def crash() -> str:
                """Raises, and the SDK does not turn it into a message."""
                raise RuntimeError("disk on fire")

            model = ScriptedModel([[function_call("crash", {}, call_id="k1")]])
            agent = Agent(name="crasher", model=model, tools=[crash])
            with pytest.raises(UserError, match="disk on fire"):
                await Runner.run(agent, "go", hooks=hooks)

        check_stream(recorder.events)
        assert tool_events(recorder.events) == [
            ("start", "crasher"),
            ("call", "crash", "k1"),
            ("done", "crash", "k1", "failed"),
            ("end", "failed"),
        ]

    @pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
    async def test_a_model_behavior_error_no_span_carries_fails_the_run(
        self, streamed: bool, check_stream: Check
    ) -> None:
        """The SDK raises ModelBehaviorError (a reused call id) and puts it on no span."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            tools = Tools(tool_guardrail(engine))
            model = ScriptedModel(
                [
                    [function_call("lookup", {"city": "Oslo"}, call_id="call_0")],
                    [function_call("lookup", {"city": "Rome"}, call_id="call_0")],
                ]
            )
            agent = Agent(name="reuser", model=model, tools=[tools.lookup])
            with pytest.raises(ModelBehaviorError, match="reused"):
                if streamed:
                    result = Runner.run_streamed(agent, "go", hooks=hooks)
                    async for _ in result.stream_events():
                        pass
                else:
                    await Runner.run(agent, "go", hooks=hooks)
        check_stream(recorder.events)
        [end] = recorder.of(ExecutionFinished)
        assert end.status == "failed"
        assert end.error is not None and "ModelBehaviorError" in end.error.message

    async def test_a_run_started_while_the_caller_handles_an_error_completes(
        self, check_stream: Check
    ) -> None:
        """A retry in an ``except`` block: the caller's exception is not the run's."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            first = Agent(name="first", model=ScriptedModel([[assistant_message("a")]]))
            try:
                await Runner.run(first, "go", hooks=hooks, max_turns=0)
            except MaxTurnsExceeded:
                retry = Agent(name="retry", model=ScriptedModel([[assistant_message("ok")]]))
                await Runner.run(retry, "go", hooks=hooks)
        check_stream(recorder.events)
        assert [(e.status, e.result) for e in recorder.of(ExecutionFinished)][-1] == (
            "completed",
            "ok",
        )

    async def test_a_run_inside_the_sdks_handling_of_a_tool_error_completes(
        self, check_stream: Check
    ) -> None:
        """A ``failure_error_function`` that asks another agent: that run ends while the SDK
        handles the tool's error, which is not that run's (it was recorded failed)."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)

            async def explain(context: RunContextWrapper[Any], error: Exception) -> str:
                model = ScriptedModel([[assistant_message("retry later")]])
                explainer = Agent(name="explainer", model=model)
                explained = await Runner.run(explainer, "why?", hooks=hooks)
                return str(explained.final_output)

            @function_tool(failure_error_function=explain)
            def fetch(url: str) -> str:
                """Fetch a page."""
                raise RuntimeError("connection reset")

            first = [function_call("fetch", {"url": "x"}, call_id="call_1")]
            model = ScriptedModel([first, [assistant_message("ok")]])
            await Runner.run(Agent(name="outer", model=model, tools=[fetch]), "go", hooks=hooks)
        check_stream(recorder.events)
        ends = {e.execution_id: e for e in recorder.of(ExecutionFinished)}
        names = {e.execution_id: e.program for e in recorder.of(ExecutionStarted)}
        assert sorted((names[i], e.status) for i, e in ends.items()) == [
            ("explainer", "completed"),
            ("outer", "completed"),
        ]

    @pytest.mark.parametrize("guarded", [False, True], ids=["plain", "output-guardrail"])
    async def test_a_run_is_recorded_finished_when_runner_run_returns(
        self, guarded: bool, check_stream: Check
    ) -> None:
        """A caller may close the engine right after the run: its end must be recorded."""

        async def allow(ctx: Any, agent: Any, data: Any) -> GuardrailFunctionOutput:
            return GuardrailFunctionOutput(output_info="fine", tripwire_triggered=False)

        guardrails = [OutputGuardrail(guardrail_function=allow)] if guarded else []
        model = ScriptedModel([[assistant_message("hello")]])
        agent = Agent(name="quick", model=model, output_guardrails=guardrails)
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            await Runner.run(agent, "go", hooks=hooks, run_config=RunConfig())
            [end] = recorder.of(ExecutionFinished)
            assert (end.status, end.result) == ("completed", "hello")
        check_stream(recorder.events)

    async def test_a_run_whose_processor_was_replaced_still_finishes(
        self, check_stream: Check
    ) -> None:
        """Another engine's set_trace_processors mid-run: the span ends no longer reach this
        processor, so on_agent_end records the end itself."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])

            @function_tool
            def handover() -> str:
                """Replace the trace processors, as another engine's setup would."""
                set_trace_processors([])
                return "ok"

            model = ScriptedModel(
                [[function_call("handover", {}, call_id="r1")], [assistant_message("done")]]
            )
            agent = Agent(name="replaced", model=model, tools=[handover])
            await Runner.run(agent, "go", hooks=OnlookerRunHooks(engine))
            [end] = recorder.of(ExecutionFinished)
        check_stream(recorder.events)
        assert (end.status, end.result) == ("completed", "done")

    @pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
    @pytest.mark.parametrize("which", ["input", "output", "run-config-output"])
    async def test_a_guardrail_tripwire_fails_the_run(
        self, which: str, streamed: bool, check_stream: Check
    ) -> None:
        """The SDK raises a tripwire out of the run; the input guardrail's error is on the
        turn span, and the output guardrails (the agent's or the RunConfig's) run after
        ``on_agent_end`` saw the output."""

        async def trip(ctx: Any, agent: Any, data: Any) -> GuardrailFunctionOutput:
            return GuardrailFunctionOutput(output_info="refused", tripwire_triggered=True)

        guardrails: dict[str, Any] = {}
        config = RunConfig()  # with one, nothing in the SDK awaits after the agent span ends
        if which == "input":
            guardrails = {"input_guardrails": [InputGuardrail(guardrail_function=trip)]}
        elif which == "output":
            guardrails = {"output_guardrails": [OutputGuardrail(guardrail_function=trip)]}
        else:
            config = RunConfig(output_guardrails=[OutputGuardrail(guardrail_function=trip)])
        model = ScriptedModel([[assistant_message("the secret")]])
        agent = Agent(name="guarded", model=model, **guardrails)
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            tripwire = (
                InputGuardrailTripwireTriggered
                if which == "input"
                else OutputGuardrailTripwireTriggered
            )
            with pytest.raises(tripwire):
                if streamed:
                    streaming = Runner.run_streamed(agent, "go", hooks=hooks, run_config=config)
                    async for _ in streaming.stream_events():
                        pass
                else:
                    await Runner.run(agent, "go", hooks=hooks, run_config=config)
            assert recorder.of(ExecutionFinished)  # recorded before the run raised

        check_stream(recorder.events)
        [end] = recorder.of(ExecutionFinished)
        assert end.status == "failed"
        assert end.result is None  # the output the guardrail refused is not the run's result
        assert end.error is not None
        assert end.error.message == "Guardrail tripwire triggered"

    async def test_an_output_keyed_by_undecodable_file_names_is_recorded(
        self, check_stream: Check
    ) -> None:
        """pydantic-core refuses a key holding a lone surrogate; the copy keeps it."""
        sizes = {
            f"caf{chr(0xDCE9)}.txt": 12,
            f"caf{chr(0xDCE8)}.txt": 13,
        }  # ruff merges the literals
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            guard = tool_guardrail(engine)

            @function_tool(tool_input_guardrails=[guard])
            def listing() -> dict[str, int]:
                """File sizes by name."""
                return sizes

            model = ScriptedModel(
                [[function_call("listing", {}, call_id="s1")], [assistant_message("ok")]]
            )
            agent = Agent(name="lister", model=model, tools=[listing])
            await Runner.run(agent, "go", hooks=OnlookerRunHooks(engine))

        check_stream(recorder.events)
        [finished] = recorder.of(ToolCallFinished)
        assert (finished.status, finished.result) == ("completed", sizes)

    async def test_a_tool_the_sdk_stops_at_its_timeout_fails(self, check_stream: Check) -> None:
        """By default the SDK gives the model a timeout message as the tool's result: a
        failure told as a result, recorded ``failed`` with that message."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            guard = tool_guardrail(engine)

            @function_tool(tool_input_guardrails=[guard], timeout=0.05)
            async def hang() -> str:
                """Never answers in time."""
                await asyncio.sleep(30)
                return "late"

            model = ScriptedModel(
                [[function_call("hang", {}, call_id="h1")], [assistant_message("gave up")]]
            )
            agent = Agent(name="waiter", model=model, tools=[hang])
            result = await Runner.run(agent, "go", hooks=hooks)
            assert result.final_output == "gave up"

        check_stream(recorder.events)
        assert tool_events(recorder.events) == [
            ("start", "waiter"),
            ("call", "hang", "h1"),
            ("done", "hang", "h1", "failed"),
            ("end", "completed"),
        ]
        (finished,) = recorder.of(ToolCallFinished)
        assert finished.error is not None
        assert (
            finished.error.message == "ToolTimeoutError: Tool 'hang' timed out after 0.05 seconds."
        )

    async def test_an_abort_halts_the_run(self, check_stream: Check) -> None:
        def abort(ctx: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.ABORT, reason="stop everything")

        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(
            hooks=[HookMatcher(pattern="lookup", pre=(abort,))]
        ) as engine:
            engine.bus.subscribe(recorder)
            hooks = OnlookerRunHooks(engine)
            tools = Tools(tool_guardrail(engine))
            model = ScriptedModel([[function_call("lookup", {"city": "Lima"}, call_id="a1")]])
            agent = Agent(name="aborted", model=model, tools=[tools.lookup])
            with pytest.raises(ToolInputGuardrailTripwireTriggered):
                await Runner.run(agent, "go", hooks=hooks)

        check_stream(recorder.events)
        assert tools.ran == []
        assert tool_events(recorder.events) == [
            ("start", "aborted"),
            ("call", "lookup", "a1"),
            ("done", "lookup", "a1", "blocked"),
            ("end", "failed"),
        ]


def abort_danger(ctx: ToolUseContext) -> PreHookResult:
    return PreHookResult(action=HookAction.ABORT, reason="kill switch")


class Batch:
    """Tools a model turn asks for in parallel: one that waits, one a pre-hook aborts, one more."""

    def __init__(self, guard: ToolInputGuardrail[Any]) -> None:
        self.ran: list[str] = []
        self.started = asyncio.Event()

        @function_tool(tool_input_guardrails=[guard])
        async def wait() -> str:
            """Wait for something that never comes."""
            self.started.set()
            await asyncio.Event().wait()
            return "never"

        @function_tool(tool_input_guardrails=[guard])
        def danger() -> str:
            """A pre-hook aborts every call of it."""
            self.ran.append("danger")
            return "done"

        @function_tool(tool_input_guardrails=[guard])
        def wipe(path: str) -> str:
            """Wipe a path."""
            self.ran.append(f"wipe:{path}")
            return "wiped"

        self.wait, self.danger, self.wipe = wait, danger, wipe


def approved_pay(guard: ToolInputGuardrail[Any], ran: list[int] | None = None) -> FunctionTool:
    """A ``pay`` tool that asks a person first, guarded by ``guard``; each amount paid is
    appended to ``ran``."""

    @function_tool(needs_approval=True, tool_input_guardrails=[guard])
    def pay(amount: int) -> str:
        """Pay an amount."""
        if ran is not None:
            ran.append(amount)
        return f"paid {amount}"

    return pay


async def ended(recorder: RecordingObserver) -> list[ExecutionFinished]:
    """The runs' ends once the processor's deferred records landed, before the engine closes.

    The engine's own close would finish a run left open ``cancelled``: checked
    here, the status is the one the adapter recorded.
    """
    for _ in range(200):
        if ends := recorder.of(ExecutionFinished):
            return ends
        await asyncio.sleep(0.01)
    raise AssertionError("no run was finished")


class TestParallelAbort:
    async def test_an_abort_refuses_the_rest_of_its_batch_in_the_same_execution(
        self, check_stream: Check
    ) -> None:
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(
            hooks=[HookMatcher(pattern="danger", pre=(abort_danger,))]
        ) as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            batch = Batch(tool_guardrail(engine))
            model = ScriptedModel(
                [
                    [
                        function_call("wait", {}, call_id="w1"),
                        function_call("danger", {}, call_id="d1"),
                        function_call("wipe", {"path": "/"}, call_id="x1"),
                    ],
                    [assistant_message("unreachable")],
                ]
            )
            agent = Agent(name="batch", model=model, tools=[batch.wait, batch.danger, batch.wipe])
            with pytest.raises(ToolInputGuardrailTripwireTriggered):
                await Runner.run(agent, "go", hooks=hooks)
            (end,) = await ended(recorder)

        events = recorder.events
        check_stream(events)
        check_invariants(events)
        assert batch.ran == []
        assert len(recorder.of(ExecutionStarted)) == 1  # no second execution for the sibling
        finished = {e.tool_call_id: e.status for e in recorder.of(ToolCallFinished)}
        # the call allowed before the abort was cancelled by the SDK, its body never finished
        assert finished == {"w1": "cancelled", "d1": "blocked", "x1": "blocked"}
        assert end.status == "failed"
        assert end.error is not None and end.error.type == "HookAbortError"

    async def test_without_the_processor_the_aborted_run_still_refuses_its_batch(
        self, check_stream: Check
    ) -> None:
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(
            hooks=[HookMatcher(pattern="danger", pre=(abort_danger,))]
        ) as engine:
            engine.bus.subscribe(recorder)
            hooks = OnlookerRunHooks(engine)
            batch = Batch(tool_guardrail(engine))
            model = ScriptedModel(
                [
                    [
                        function_call("danger", {}, call_id="d1"),
                        function_call("wipe", {"path": "/"}, call_id="x1"),
                    ],
                    [assistant_message("unreachable")],
                ]
            )
            agent = Agent(name="batch", model=model, tools=[batch.danger, batch.wipe])
            with pytest.raises(ToolInputGuardrailTripwireTriggered):
                await Runner.run(agent, "go", hooks=hooks)

        check_stream(recorder.events)
        assert batch.ran == []
        # the abort finished the run at once (nothing else would); the sibling found it ended
        assert tool_events(recorder.events) == [
            ("start", "batch"),
            ("call", "danger", "d1"),
            ("done", "danger", "d1", "blocked"),
            ("end", "failed"),
        ]


Cancel = Callable[[Agent[Any], OnlookerRunHooks, asyncio.Event], Awaitable[None]]


async def by_timeout(agent: Agent[Any], hooks: OnlookerRunHooks, started: asyncio.Event) -> None:
    """asyncio's own timeout, expiring once the tool runs (a fixed delay would be a race)."""

    async def expire(deadline: asyncio.Timeout) -> None:
        await started.wait()
        deadline.reschedule(asyncio.get_running_loop().time())

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as deadline:
            watcher = asyncio.create_task(expire(deadline))
            await Runner.run(agent, "go", hooks=hooks)
    await watcher


async def by_task_cancel(
    agent: Agent[Any], hooks: OnlookerRunHooks, started: asyncio.Event
) -> None:
    task = asyncio.create_task(Runner.run(agent, "go", hooks=hooks))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def by_streamed_cancel(
    agent: Agent[Any], hooks: OnlookerRunHooks, started: asyncio.Event
) -> None:
    result = Runner.run_streamed(agent, "go", hooks=hooks)

    async def consume() -> None:
        async for _ in result.stream_events():
            pass

    consumer = asyncio.create_task(consume())
    await started.wait()
    result.cancel()
    await consumer


class TestCancellation:
    @pytest.mark.parametrize("cancel", [by_timeout, by_task_cancel, by_streamed_cancel])
    async def test_a_cancelled_run_finishes_cancelled(
        self, cancel: Cancel, check_stream: Check
    ) -> None:
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            batch = Batch(tool_guardrail(engine))
            model = ScriptedModel(
                [[function_call("wait", {}, call_id="w1")], [assistant_message("unreachable")]]
            )
            agent = Agent(name="waiter", model=model, tools=[batch.wait])
            await cancel(agent, hooks, batch.started)
            await ended(recorder)

        check_stream(recorder.events)
        assert batch.started.is_set()
        assert tool_events(recorder.events) == [
            ("start", "waiter"),
            ("call", "wait", "w1"),
            ("done", "wait", "w1", "cancelled"),
            ("end", "cancelled"),
        ]


class TestProcessor:
    async def test_a_timeout_in_an_agent_tool_without_the_hooks_fails_by_its_span(
        self, check_stream: Check
    ) -> None:
        """The span's output is the SDK's timeout message, and no span carries an error."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            guard = tool_guardrail(engine)

            @function_tool(tool_input_guardrails=[guard], timeout=0.05)
            async def hang() -> str:
                """Never answers in time."""
                await asyncio.sleep(30)
                return "late"

            inner = ScriptedModel(
                [[function_call("hang", {}, call_id="n1")], [assistant_message("gave up")]]
            )
            research = Agent(name="researcher", model=inner, tools=[hang]).as_tool(
                "research", "Ask the researcher."
            )
            research.tool_input_guardrails = [guard]
            model = ScriptedModel(
                [
                    [function_call("research", {"input": "?"}, call_id="p1")],
                    [assistant_message("ok")],
                ]
            )
            agent = Agent(name="lead", model=model, tools=[research])
            await Runner.run(agent, "go", hooks=OnlookerRunHooks(engine))

        check_stream(recorder.events)
        finished = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
        assert finished["n1"].status == "failed" and finished["n1"].error is not None
        assert finished["n1"].error.message.startswith("ToolTimeoutError: Tool 'hang' timed out")
        assert finished["p1"].status == "completed"

    async def test_an_agent_tool_without_the_hooks_is_closed_by_its_spans(
        self, check_stream: Check
    ) -> None:
        """``as_tool`` without ``hooks=``: no hook sees the nested run; its spans do."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            guard = tool_guardrail(engine)
            tools = Tools(guard)
            inner = ScriptedModel(
                [
                    [function_call("lookup", {"city": "Kyiv"}, call_id="n1")],
                    [assistant_message("Kyiv is sunny")],
                ]
            )
            researcher = Agent(name="researcher", model=inner, tools=[tools.lookup])
            research = researcher.as_tool("research", "Ask the researcher.")
            research.tool_input_guardrails = [guard]
            model = ScriptedModel(
                [
                    [function_call("research", {"input": "Kyiv?"}, call_id="p1")],
                    [assistant_message("done")],
                ]
            )
            agent = Agent(name="lead", model=model, tools=[research])
            await Runner.run(agent, "go", hooks=hooks)

        check_stream(recorder.events)
        assert tool_events(recorder.events) == [
            ("start", "lead"),
            ("call", "research", "p1"),
            ("start", "researcher"),
            ("call", "lookup", "n1"),
            ("done", "lookup", "n1", "completed"),
            ("end", "completed"),
            ("done", "research", "p1", "completed"),
            ("end", "completed"),
        ]
        finished = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
        assert finished["n1"].result == "sunny in Kyiv"  # the span's output


class TestNestedRunsReusingAnId:
    @pytest.mark.parametrize("nested_hooks", [True, False], ids=["hooks", "guardrail-only"])
    async def test_a_nested_call_with_the_outer_call_id_is_governed_in_the_child(
        self, check_stream: Check, nested_hooks: bool
    ) -> None:
        """A model numbering ids per response gives a tool's nested run the id of the call
        it runs in: that call is the nested run's own, refused there, never the tool's."""
        ran: list[str] = []

        def refuse_prod(ctx: ToolUseContext) -> PreHookResult | None:
            if ctx.tool_input.get("target") == "prod":
                return PreHookResult(action=HookAction.BLOCK, reason="never prod")
            return None

        recorder = RecordingObserver()
        governance = [HookMatcher(pattern="deploy", pre=(refuse_prod,))]
        async with onlooker.ExecutionEngine(hooks=governance) as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
            inner = Agent(name="inner")

            @function_tool(tool_input_guardrails=[guard])
            async def deploy(target: str) -> str:
                """Deploy; staging delegates to a sub-agent."""
                ran.append(target)
                if target == "staging":
                    nested = await Runner.run(inner, "more", hooks=hooks if nested_hooks else None)
                    return f"staging, then {nested.final_output}"
                return f"deployed {target}"

            inner.tools = [deploy]
            inner.model = ScriptedModel(
                [
                    [function_call("deploy", {"target": "prod"}, call_id="call_0")],
                    [assistant_message("inner done")],
                ]
            )
            outer = ScriptedModel(
                [
                    [function_call("deploy", {"target": "staging"}, call_id="call_0")],
                    [assistant_message("done")],
                ]
            )
            await Runner.run(Agent(name="outer", model=outer, tools=[deploy]), "go", hooks=hooks)
            await ended(recorder)

        assert ran == ["staging"]  # prod was refused
        check_stream(recorder.events)
        calls = [(e.execution_id, e.status, e.result) for e in recorder.of(ToolCallFinished)]
        (inner_call, outer_call) = calls
        assert inner_call[1] == "blocked" and outer_call[1:] == (
            "completed",
            "staging, then inner done",
        )
        assert inner_call[0] != outer_call[0]  # the child execution's call


class TestCustomTools:
    async def test_a_custom_tool_is_recorded_watch_only_and_the_warning_says_why(
        self, check_stream: Check, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A ``CustomTool`` (raw text input) has no guardrail: recorded with the SDK's id and
        its raw input; a refusal is recorded, not enforced, and the warning gives no advice
        that cannot be followed."""
        from agents.tool import CustomTool
        from openai.types.responses import ResponseCustomToolCall

        ran: list[str] = []

        async def grammar(context: Any, text: str) -> str:
            ran.append(text)
            return f"parsed {text}"

        def refuse(ctx: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.BLOCK, reason="nope")

        recorder = RecordingObserver()
        refusal = [HookMatcher(pattern="grammar", pre=(refuse,))]
        async with onlooker.ExecutionEngine(hooks=refusal) as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            custom = CustomTool(name="grammar", description="Parse.", on_invoke_tool=grammar)
            call_it = ResponseCustomToolCall(
                call_id="u1", input="a b", name="grammar", type="custom_tool_call"
            )
            model = ScriptedModel([[call_it], [assistant_message("done")]])
            with caplog.at_level(logging.WARNING, logger="onlooker"):
                agent = Agent(name="a", model=model, tools=[custom])
                await Runner.run(agent, "go", hooks=OnlookerRunHooks(engine))
            await ended(recorder)
        check_stream(recorder.events)
        assert ran == ["a b"]  # the SDK gives onlooker no way to stop it
        (started,) = recorder.of(ToolCallStarted)
        assert (started.tool_call_id, started.args) == ("u1", {"arguments": "a b"})
        assert recorder.of(ToolCallFinished)[0].status == "blocked"
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert "no guardrail" in warning and "tool_input_guardrails" not in warning


class TestGovernanceLimits:
    async def test_a_rewrite_that_cannot_reach_the_tool_refuses_the_call(
        self, check_stream: Check
    ) -> None:
        def elsewhere(ctx: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={"city": "Nowhere"})

        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(
            hooks=[HookMatcher(pattern="lookup", pre=(elsewhere,))]
        ) as engine:
            engine.bus.subscribe(recorder)
            hooks = OnlookerRunHooks(engine)
            tools = Tools(tool_guardrail(engine))
            model = ScriptedModel(
                [
                    [function_call("lookup", {"city": "Rome"}, call_id="m1")],
                    [assistant_message("ok")],
                ]
            )
            agent = Agent(name="rewritten", model=model, tools=[tools.lookup])
            await Runner.run(agent, "go", hooks=hooks)

        check_stream(recorder.events)
        assert tools.ran == []
        assert tool_events(recorder.events) == [
            ("start", "rewritten"),
            ("call", "lookup", "m1"),
            ("done", "lookup", "m1", "failed"),
            ("end", "completed"),
        ]
        (output,) = [
            item["output"]
            for item in model.calls[1].input
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        assert isinstance(output, str) and output.startswith("Tool call refused by onlooker")

    async def test_a_post_hook_abort_is_enforced_at_the_next_call(
        self, check_stream: Check
    ) -> None:
        """on_tool_end cannot stop the SDK: the next guarded call halts the run. The
        ``no_adapter_errors`` fixture checks that the abort is not logged as a failure."""

        def leaked(ctx: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(action=HookAction.ABORT, reason="leaked data")

        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(
            hooks=[HookMatcher(pattern="lookup", post=(leaked,))]
        ) as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            tools = Tools(tool_guardrail(engine))
            model = ScriptedModel(
                [
                    [function_call("lookup", {"city": "Oslo"}, call_id="p1")],
                    [function_call("lookup", {"city": "Rome"}, call_id="p2")],
                    [assistant_message("done")],
                ]
            )
            agent = Agent(name="leaky", model=model, tools=[tools.lookup])
            with pytest.raises(ToolInputGuardrailTripwireTriggered):
                await Runner.run(agent, "go", hooks=hooks)

        check_stream(recorder.events)
        assert tools.ran == ["lookup:Oslo"]
        assert tool_events(recorder.events) == [
            ("start", "leaky"),
            ("call", "lookup", "p1"),
            ("done", "lookup", "p1", "blocked"),
            ("call", "lookup", "p2"),
            ("done", "lookup", "p2", "blocked"),
            ("end", "failed"),
        ]
        [end] = recorder.of(ExecutionFinished)
        assert end.error is not None and end.error.type == "HookAbortError"

    async def test_when_onlooker_cannot_record_it_the_call_runs_and_the_agent_goes_on(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        engine = onlooker.ExecutionEngine()
        async with engine:
            hooks = OnlookerRunHooks(engine)
            tools = Tools(tool_guardrail(engine))
        model = ScriptedModel(
            [
                [function_call("lookup", {"city": "Rome"}, call_id="x1")],
                [assistant_message("went on")],
            ]
        )
        agent = Agent(name="orphan", model=model, tools=[tools.lookup])
        result = await Runner.run(agent, "go", hooks=hooks)  # the engine is closed

        assert result.final_output == "went on"
        assert tools.ran == ["lookup:Rome"]  # an adapter failure never breaks the agent
        logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert any("runs unrecorded" in message for message in logged)
        caplog.clear()  # those errors were the point


class TestApprovals:
    """``needs_approval``: the run the SDK interrupts is paused, and resumed by ``Runner.run(agent, state)``."""

    @pytest.mark.parametrize("processor", [True, False], ids=["processor", "hooks-only"])
    @pytest.mark.parametrize("before", [False, True], ids=["guarded-after", "guarded-before"])
    @pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
    async def test_an_approval_is_an_interaction_of_one_execution(
        self, processor: bool, before: bool, approve: bool, check_stream: Check
    ) -> None:
        ran: list[int] = []
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            if processor:
                set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
            pay = approved_pay(guard, ran)

            model = ScriptedModel(
                [[function_call("pay", {"amount": 5}, call_id="call_1")], [assistant_message("ok")]]
            )
            agent = Agent(name="payer", model=model, tools=[pay])
            config = RunConfig(
                tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=before)
            )
            result = await Runner.run(agent, "pay 5", hooks=hooks, run_config=config)
            [item] = result.interruptions
            await asyncio.sleep(0)  # what the processor deferred lands
            # Paused, not finished: the question is open (with the processor, or when the
            # guardrail saw the call before the SDK asked; else nothing tells it yet).
            assert not recorder.of(ExecutionFinished)
            asked = recorder.of(InteractionStarted)
            assert len(asked) == (1 if processor or before else 0)
            assert all(question.mode == "paused" for question in asked)  # the run stopped
            assert len(recorder.of(ToolCallStarted)) == (1 if before else 0)

            state = result.to_state()
            if approve:
                state.approve(item)
            else:
                state.reject(item, rejection_message="not today")
            resumed = await Runner.run(agent, state, hooks=hooks, run_config=config)
            assert resumed.final_output == "ok"
            # Finished by the resumed run, not by the engine's close.
            [end] = recorder.of(ExecutionFinished)
            assert (end.status, end.result) == ("completed", "ok")

        assert ran == ([5] if approve else [])
        assert len({event.execution_id for event in recorder.events}) == 1
        [question] = recorder.of(InteractionStarted)
        assert question.message == "tool 'pay' (call call_1) awaits approval"
        [answer] = recorder.of(InteractionResolved)
        assert answer.interaction_id == question.interaction_id
        assert answer.status == ("accepted" if approve else "declined")
        rejected = {"tool_call_approved": False, "message": "not today"}
        assert answer.response == (None if approve else rejected)
        calls = [(e.tool_call_id, e.status) for e in recorder.of(ToolCallFinished)]
        if approve:  # recorded once, whether the guardrail decided it before or after
            assert calls == [("call_1", "completed")]
        elif before:  # the pre-hooks allowed it, the person did not
            assert calls == [("call_1", "failed")]
            [finished] = recorder.of(ToolCallFinished)
            assert finished.error is not None
            assert finished.error.type == "ToolApprovalRejected"
        else:  # the SDK never runs a rejected call's guardrail or hooks
            assert calls == []
        check_stream(recorder.events)

    @pytest.mark.parametrize("before", [False, True], ids=["guarded-after", "guarded-before"])
    async def test_a_paused_run_nobody_resumes_expires_after_the_pause_timeout(
        self, before: bool, check_stream: Check
    ) -> None:
        """As a paused native execution: the question and the run end ``expired`` (a held
        call ``cancelled``); a later resume of that state is an execution of its own. The
        clock starts when the processor sees the interrupted run end."""
        ran: list[int] = []
        recorder = RecordingObserver()
        ended = anyio.Event()

        def on_end(event: onlooker.ExecutionEvent) -> None:
            if isinstance(event, ExecutionFinished):
                ended.set()

        async with onlooker.ExecutionEngine(pause_timeout=0.05) as engine:
            engine.bus.subscribe(recorder)
            engine.bus.subscribe(on_end)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
            pay = approved_pay(guard, ran)

            model = ScriptedModel(
                [[function_call("pay", {"amount": 5}, call_id="call_1")], [assistant_message("ok")]]
            )
            agent = Agent(name="payer", model=model, tools=[pay])
            config = RunConfig(
                tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=before)
            )
            result = await Runner.run(agent, "pay 5", hooks=hooks, run_config=config)
            [item] = result.interruptions
            with anyio.fail_after(5):
                await ended.wait()
            [answer] = recorder.of(InteractionResolved)
            assert answer.status == "expired"
            [end] = recorder.of(ExecutionFinished)
            assert end.status == "expired"
            assert end.error is not None and end.error.type == "ExecutionExpiredError"
            calls = [(e.tool_call_id, e.status) for e in recorder.of(ToolCallFinished)]
            assert calls == ([("call_1", "cancelled")] if before else [])

            state = result.to_state()
            state.approve(item)
            resumed = await Runner.run(agent, state, hooks=hooks, run_config=config)
            assert resumed.final_output == "ok"

        assert ran == [5]
        starts = recorder.of(ExecutionStarted)
        assert len(starts) == 2  # the late resume is an execution of its own
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["expired", "completed"]
        late = [
            e for e in recorder.of(ToolCallFinished) if e.execution_id == starts[1].execution_id
        ]
        assert [(e.tool_call_id, e.status) for e in late] == [("call_1", "completed")]
        check_stream(recorder.events)

    async def test_the_pause_clock_starts_when_the_turn_ends(self, check_stream: Check) -> None:
        """The guardrail holds a call for approval while the same turn runs another, slower
        than the pause timeout: the run is not paused yet, so that call completes."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(pause_timeout=0.05) as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
            pay = approved_pay(guard)

            @function_tool(tool_input_guardrails=[guard])
            async def lookup(q: str) -> str:
                """Look something up, slowly."""
                await asyncio.sleep(0.3)  # six pause timeouts
                return "found"

            model = ScriptedModel(
                [
                    [
                        function_call("pay", {"amount": 5}, call_id="c_pay"),
                        function_call("lookup", {"q": "x"}, call_id="c_look"),
                    ],
                    [assistant_message("ok")],
                ]
            )
            agent = Agent(name="payer", model=model, tools=[pay, lookup])
            config = RunConfig(
                tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=True)
            )
            result = await Runner.run(agent, "go", hooks=hooks, run_config=config)
            assert result.interruptions
            await asyncio.sleep(0)  # what the processor deferred lands
            calls = {e.tool_call_id: e.status for e in recorder.of(ToolCallFinished)}
            assert calls == {"c_look": "completed"}
        check_stream(recorder.events)

    async def test_an_always_approve_resumes_only_its_own_run(self, check_stream: Check) -> None:
        """``approve(item, always_approve=True)`` answers every call of the tool: another
        run paused on it was taken for the one resumed (its question accepted, this
        run's call recorded in it)."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
            pay = approved_pay(guard)

            def payer(name: str, call_id: str, amount: int) -> Agent[Any]:
                model = ScriptedModel(
                    [
                        [function_call("pay", {"amount": amount}, call_id=call_id)],
                        [assistant_message(f"ok {name}")],
                    ]
                )
                return Agent(name=name, model=model, tools=[pay])

            alice, bob = payer("alice", "call_A", 1), payer("bob", "call_B", 2)
            await Runner.run(alice, "pay 1", hooks=hooks)
            paused = await Runner.run(bob, "pay 2", hooks=hooks)
            await asyncio.sleep(0)  # what the processor deferred lands
            state = paused.to_state()
            state.approve(paused.interruptions[0], always_approve=True)
            await Runner.run(bob, state, hooks=hooks)
            programs = {e.execution_id: e.program for e in recorder.of(ExecutionStarted)}
            answered = [
                (programs[e.execution_id], e.status) for e in recorder.of(InteractionResolved)
            ]
            assert answered == [("bob", "accepted")]
            calls = [
                (programs[e.execution_id], e.tool_call_id) for e in recorder.of(ToolCallFinished)
            ]
            assert calls == [("bob", "call_B")]
            assert [programs[e.execution_id] for e in recorder.of(ExecutionFinished)] == ["bob"]
        check_stream(recorder.events)

    async def test_a_closed_engine_is_not_kept_alive_by_its_paused_runs(self) -> None:
        """The adapter's state, keyed weakly by the engine, held the paused run, which holds
        the engine: no closed engine was ever freed."""
        import gc
        import weakref

        async def closed_engine() -> weakref.ref[onlooker.ExecutionEngine]:
            async with onlooker.ExecutionEngine() as engine:
                set_trace_processors([OnlookerTracingProcessor(engine)])
                hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
                pay = approved_pay(guard)

                model = ScriptedModel([[function_call("pay", {"amount": 1}, call_id="c1")]])
                agent = Agent(name="payer", model=model, tools=[pay])
                assert (await Runner.run(agent, "pay", hooks=hooks)).interruptions
            set_trace_processors([])
            return weakref.ref(engine)

        gone = await closed_engine()
        gc.collect()
        gc.collect()  # a cycle holding objects with finalizers may need a second pass
        assert gone() is None

    async def test_a_call_the_pre_hooks_refuse_before_the_approval_is_never_asked(
        self, check_stream: Check
    ) -> None:
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(hooks=GOVERNANCE) as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
            tools = Tools(guard)
            tools.delete_file.needs_approval = True
            model = ScriptedModel(
                [
                    [function_call("delete_file", {"path": "/etc"}, call_id="call_1")],
                    [assistant_message("refused")],
                ]
            )
            agent = Agent(name="cleaner", model=model, tools=[tools.delete_file])
            config = RunConfig(
                tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=True)
            )
            result = await Runner.run(agent, "clean", hooks=hooks, run_config=config)

        assert result.interruptions == [] and result.final_output == "refused"
        assert tool_events(recorder.events) == [
            ("start", "cleaner"),
            ("call", "delete_file", "call_1"),
            ("done", "delete_file", "call_1", "blocked"),
            ("end", "completed"),
        ]
        assert not recorder.of(InteractionStarted)
        check_stream(recorder.events)

    async def test_a_run_left_unanswered_closes_its_question_at_the_engine_close(
        self, check_stream: Check
    ) -> None:
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
            tools = Tools(guard)
            tools.lookup.needs_approval = True
            model = ScriptedModel([[function_call("lookup", {"city": "Rome"}, call_id="c1")]])
            agent = Agent(name="asker", model=model, tools=[tools.lookup])
            result = await Runner.run(agent, "weather?", hooks=hooks)
            assert len(result.interruptions) == 1

        [answer] = recorder.of(InteractionResolved)
        [end] = recorder.of(ExecutionFinished)
        assert (answer.status, end.status) == ("cancelled", "cancelled")
        check_stream(recorder.events)


def payer(name: str, amount: int, pay: FunctionTool) -> Agent[Any]:
    """An agent whose model asks to pay ``amount`` as ``call_1``, as a model numbering its calls."""
    model = ScriptedModel(
        [
            [function_call("pay", {"amount": amount}, call_id="call_1")],
            [assistant_message(name)],
        ]
    )
    return Agent(name=name, model=model, tools=[pay])


class TestApprovalsOfRunsWithTheSameCallIds:
    @pytest.mark.parametrize("serialized", [False, True])
    @pytest.mark.parametrize("processor", [True, False])
    async def test_each_resume_answers_its_own_paused_run(
        self, check_stream: Check, processor: bool, serialized: bool
    ) -> None:
        """Two runs paused on the same call id are told apart by their trace: each decision
        lands in its own execution, which the resume finishes. The SDK resumes a state in
        the trace of the run it interrupted (also from ``to_string``), with or without
        onlooker's tracing processor."""
        ran: list[int] = []
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            if processor:
                set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
            pay = approved_pay(guard, ran)
            alice, bob = payer("alice", 100, pay), payer("bob", 200, pay)
            first = await Runner.run(alice, "pay", hooks=hooks)
            second = await Runner.run(bob, "pay", hooks=hooks)
            await asyncio.sleep(0)
            rejected, approved = second.to_state(), first.to_state()
            if serialized:
                rejected = await RunState.from_string(bob, rejected.to_string())
                approved = await RunState.from_string(alice, approved.to_string())
            [item] = rejected.get_interruptions()
            rejected.reject(item, rejection_message="no")
            await Runner.run(bob, rejected, hooks=hooks)
            [item] = approved.get_interruptions()
            approved.approve(item)
            await Runner.run(alice, approved, hooks=hooks)
            ends = recorder.of(ExecutionFinished)

        check_stream(recorder.events)
        assert ran == [100]
        programs = {e.execution_id: e.program for e in recorder.of(ExecutionStarted)}
        assert sorted(programs.values()) == ["alice", "bob"]
        assert sorted(e.status for e in ends) == ["completed", "completed"]
        answers = {programs[r.execution_id]: r.status for r in recorder.of(InteractionResolved)}
        assert answers == {"alice": "accepted", "bob": "declined"}

    async def test_a_resume_inside_another_runs_open_trace_is_not_taken_for_it(
        self, check_stream: Check, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Resumed inside a trace still open, the SDK keeps that trace: the one alice began
        in. Bob's rejection was recorded as alice's answer; now onlooker cannot tell, says
        so, and records the resume as a new execution."""
        ran: list[int] = []
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            hooks, guard = OnlookerRunHooks(engine), tool_guardrail(engine)
            pay = approved_pay(guard, ran)
            alice, bob = payer("alice", 100, pay), payer("bob", 200, pay)
            second = await Runner.run(bob, "pay", hooks=hooks)  # bob's trace of its own
            with trace("session"):
                first = await Runner.run(alice, "pay", hooks=hooks)
                rejected = second.to_state()
                [item] = rejected.get_interruptions()
                rejected.reject(item, rejection_message="no")
                with caplog.at_level(logging.WARNING, LOGGER):
                    await Runner.run(bob, rejected, hooks=hooks)
            assert first.interruptions
            answered = {(r.execution_id, r.status) for r in recorder.of(InteractionResolved)}
            assert answered == set()  # neither paused run took bob's rejection
        check_stream(recorder.events)
        assert "cannot tell apart" in caplog.text
        assert ran == []


class TestHandoff:
    async def test_a_handoff_continues_the_same_execution(self, check_stream: Check) -> None:
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            hooks = OnlookerRunHooks(engine)
            tools = Tools(tool_guardrail(engine))
            billing_model = ScriptedModel(
                [
                    [function_call("lookup", {"city": "Bern"}, call_id="b1")],
                    [assistant_message("paid")],
                ]
            )
            billing = Agent(name="billing", model=billing_model, tools=[tools.lookup])
            triage_model = ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]])
            triage = Agent(name="triage", model=triage_model, handoffs=[billing])
            result = await Runner.run(triage, "refund?", hooks=hooks)

        assert result.final_output == "paid"
        check_stream(recorder.events)
        assert tool_events(recorder.events) == [
            ("start", "triage"),
            ("call", "lookup", "b1"),
            ("done", "lookup", "b1", "completed"),
            ("end", "completed"),
        ]

    async def test_a_run_that_raises_right_after_a_handoff_fails(self, check_stream: Check) -> None:
        """MaxTurnsExceeded comes after the new agent's span starts, before its on_agent_start:
        that span's end, with the error, ends the run."""
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            billing = Agent(name="billing", model=ScriptedModel([[assistant_message("paid")]]))
            triage_model = ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]])
            triage = Agent(name="triage", model=triage_model, handoffs=[billing])
            with pytest.raises(MaxTurnsExceeded):
                await Runner.run(triage, "refund?", hooks=OnlookerRunHooks(engine), max_turns=1)
            assert recorder.of(ExecutionFinished)  # recorded before the run raised

        check_stream(recorder.events)
        [end] = recorder.of(ExecutionFinished)
        assert end.status == "failed"
        assert end.error is not None and end.error.message == "Max turns exceeded"

    async def test_a_handoff_that_fails_fails_the_run(self, check_stream: Check) -> None:
        """on_handoff came, then the handoff's input filter raised: no agent takes over, and
        the handing agent's span ends with the error."""

        def broken(data: Any) -> Any:
            raise RuntimeError("filter failed")

        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            set_trace_processors([OnlookerTracingProcessor(engine)])
            billing = Agent(name="billing", model=ScriptedModel([[assistant_message("paid")]]))
            triage_model = ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]])
            triage = Agent(
                name="triage", model=triage_model, handoffs=[handoff(billing, input_filter=broken)]
            )
            with pytest.raises(Exception, match="filter failed"):
                await Runner.run(triage, "refund?", hooks=OnlookerRunHooks(engine))
            assert recorder.of(ExecutionFinished)  # recorded before the run raised

        check_stream(recorder.events)
        [end] = recorder.of(ExecutionFinished)
        assert end.status == "failed"
        assert end.error is not None and "filter failed" in end.error.message


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "onlooker.integrations.openai_agents")
    with pytest.raises(ImportError, match=r'pip install "onlooker\[openai-agents\]"'):
        importlib.import_module("onlooker.integrations.openai_agents")
