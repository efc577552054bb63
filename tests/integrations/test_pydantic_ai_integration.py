"""PydanticAI through OnlookerCapability: real agents on PydanticAI's own FunctionModel, offline."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ApprovalRequired, CallDeferred, ModelRetry, RunContext, ToolFailed
from pydantic_ai.capabilities import HandleDeferredToolCalls, Hooks
from pydantic_ai.exceptions import SkipToolExecution
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDefinition,
    ToolDenied,
)

import onlooker
from onlooker import (
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
from onlooker.integrations.pydantic_ai import OnlookerCapability
from onlooker.plugins import audit, history
from onlooker.testing import RecordingObserver

pytestmark = pytest.mark.anyio

Check = Callable[[Sequence[onlooker.ExecutionEvent]], None]


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: PydanticAI starts every run with ``asyncio.create_task`` (under trio:
    "RuntimeError: no running event loop")."""
    return "asyncio"


class Script:
    """A scripted model: one response per model request, and what the model was shown."""

    def __init__(self, *turns: ToolCallPart | str) -> None:
        self.turns = turns
        self.seen: list[ToolReturnPart] = []

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            self.seen.extend(p for p in last.parts if isinstance(p, ToolReturnPart))
        turn = self.turns[sum(isinstance(m, ModelResponse) for m in messages)]
        return ModelResponse(parts=[TextPart(turn) if isinstance(turn, str) else turn])

    def model(self) -> FunctionModel:
        return FunctionModel(self.respond)

    def shown(self, tool_call_id: str) -> ToolReturnPart:
        (part,) = [p for p in self.seen if p.tool_call_id == tool_call_id]
        return part


def deny(use: ToolUseContext) -> PreHookResult:
    return PreHookResult(action=HookAction.BLOCK, reason=f"{use.tool_name} is never allowed")


async def run_doubler(
    script: Script, hooks: Sequence[HookMatcher] = ()
) -> tuple[list[int], RecordingObserver, str]:
    """An agent with one tool, ``double(x: int)``, run on ``script`` under the capability:
    the arguments the tool ran with, the events, the run's output."""
    ran: list[int] = []
    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(hooks=hooks) as engine:
        engine.bus.subscribe(recorder, name="recorder")
        agent: Agent[None, str] = Agent(
            script.model(), name="doubler", capabilities=[OnlookerCapability(engine)]
        )

        @agent.tool_plain
        def double(x: int) -> int:
            ran.append(x)
            return 2 * x

        output = (await agent.run("go")).output
    return ran, recorder, output


def shape(events: Sequence[onlooker.ExecutionEvent]) -> list[tuple[str, ...]]:
    """Each event as (kind, tool, status) — enough to pin the exact sequence."""
    rows: list[tuple[str, ...]] = []
    for e in events:
        if isinstance(e, ExecutionStarted):
            rows.append((e.kind, e.program))
        elif isinstance(e, ToolCallStarted):
            rows.append((e.kind, e.tool, e.tool_call_id))
        elif isinstance(e, ToolCallFinished):
            rows.append((e.kind, e.tool, e.tool_call_id, e.status))
        elif isinstance(e, ExecutionFinished):
            rows.append((e.kind, e.status))
        else:
            rows.append((e.kind,))
    return rows


class Team:
    """The coordinator and the researcher it delegates to, both on one capability."""

    def __init__(self, engine: onlooker.ExecutionEngine) -> None:
        self.ran: list[str] = []
        self.lead_script = Script(
            ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="call-add"),
            ToolCallPart("flaky", {}, tool_call_id="call-flaky"),
            ToolCallPart("delete_everything", {"path": "/"}, tool_call_id="call-delete"),
            ToolCallPart("delegate", {"question": "refund policy?"}, tool_call_id="call-delegate"),
            "done",
        )
        self.helper_script = Script(
            ToolCallPart("lookup", {"topic": "refunds"}, tool_call_id="call-lookup"),
            "30 days",
        )
        capability = OnlookerCapability(engine)
        self.researcher: Agent[None, str] = Agent(
            self.helper_script.model(), name="researcher", capabilities=[capability]
        )
        self.coordinator: Agent[None, str] = Agent(
            self.lead_script.model(), name="coordinator", capabilities=[capability]
        )
        ran = self.ran
        researcher = self.researcher

        @self.coordinator.tool_plain
        def add(a: int, b: int) -> int:
            ran.append("add")
            return a + b

        @self.coordinator.tool_plain
        def flaky() -> str:
            ran.append("flaky")
            raise ModelRetry("the service is busy, try later")

        @self.coordinator.tool_plain
        def delete_everything(path: str) -> str:
            ran.append("delete_everything")
            return f"deleted {path}"

        @self.coordinator.tool
        async def delegate(ctx: RunContext[None], question: str) -> str:
            ran.append("delegate")
            answer = await researcher.run(question, usage=ctx.usage)
            return answer.output

        @self.researcher.tool_plain
        def lookup(topic: str) -> str:
            ran.append("lookup")
            return f"{topic}: 30 days"


GUARD = HookMatcher(pattern="delete_*", pre=(deny,))


class TestRun:
    async def test_exact_events_ids_statuses_and_a_child(self, check_stream: Check) -> None:
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(hooks=[GUARD]) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            team = Team(engine)
            result = await team.coordinator.run("What is the refund policy?")

        assert result.output == "done"
        assert team.ran == ["add", "flaky", "delegate", "lookup"]  # delete_everything never ran
        events = recorder.events
        check_stream(events)
        assert shape(events) == [
            ("ExecutionStarted", "coordinator"),
            ("ToolCallStarted", "add", "call-add"),
            ("ToolCallFinished", "add", "call-add", "completed"),
            ("ToolCallStarted", "flaky", "call-flaky"),
            ("ToolCallFinished", "flaky", "call-flaky", "failed"),
            ("ToolCallStarted", "delete_everything", "call-delete"),
            ("ToolCallFinished", "delete_everything", "call-delete", "blocked"),
            ("ToolCallStarted", "delegate", "call-delegate"),
            ("ExecutionStarted", "researcher"),
            ("ToolCallStarted", "lookup", "call-lookup"),
            ("ToolCallFinished", "lookup", "call-lookup", "completed"),
            ("ExecutionFinished", "completed"),
            ("ToolCallFinished", "delegate", "call-delegate", "completed"),
            ("ExecutionFinished", "completed"),
        ]
        root, child = recorder.of(ExecutionStarted)
        assert root.trigger.kind == "pydantic-ai"
        assert isinstance(root.trigger.metadata["run_id"], str)
        assert root.input == "What is the refund policy?"
        assert root.attribution.depth == 0
        assert child.input == "refund policy?"
        assert child.attribution.parent_execution_id == root.execution_id
        assert child.attribution.parent_tool_call_id == "call-delegate"
        assert child.attribution.depth == 1

        started = {e.tool_call_id: e for e in recorder.of(ToolCallStarted)}
        finished = {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}
        assert started["call-add"].args == {"a": 2, "b": 3}
        assert finished["call-add"].result == 5
        flaky = finished["call-flaky"].error
        assert flaky is not None and flaky.type == "ModelRetry"
        assert flaky.message == "the service is busy, try later"
        assert flaky.cause == "failure"  # PydanticAI's typed "retry" signal, not a defect
        assert started["call-delete"].args == {"path": "/"}
        assert finished["call-delete"].result is None
        assert finished["call-delegate"].result == "30 days"
        assert recorder.of(ExecutionFinished)[-1].result == "done"

        # what the model read: PydanticAI's own outcomes, the refusal's reason
        assert team.lead_script.shown("call-add").content == 5
        assert team.lead_script.shown("call-flaky").outcome == "retried"
        refused = team.lead_script.shown("call-delete")
        assert refused.outcome == "failed"
        assert "delete_everything is never allowed" in str(refused.content)

    async def test_history_and_audit_verify_accept_the_run(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'history.db'}"
        trail_plugin = audit.plugin(directory=tmp_path / "audit", session_id="s1")
        history_plugin = history.plugin(url)
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(
            hooks=[GUARD], plugins=[history_plugin, trail_plugin]
        ) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            await Team(engine).coordinator.run("What is the refund policy?")
            trail = engine.extension(trail_plugin)
        root_id = recorder.of(ExecutionStarted)[0].execution_id

        report = audit.verify(trail.session_dir)
        assert report.ok and report.records == len(recorder.events) == 14
        async with history.open(url) as store:
            tree = await store.get_execution(root_id)
        assert tree is not None
        assert (tree.program, tree.status, tree.trigger) == (
            "coordinator",
            "completed",
            "pydantic-ai",
        )
        assert [(c.tool_call_id, c.status) for c in tree.tool_calls] == [
            ("call-add", "completed"),
            ("call-flaky", "failed"),
            ("call-delete", "blocked"),
            ("call-delegate", "completed"),
        ]
        (child,) = tree.children
        assert (child.program, child.parent_tool_call_id, child.depth) == (
            "researcher",
            "call-delegate",
            1,
        )
        assert [(c.tool, c.status) for c in child.tool_calls] == [("lookup", "completed")]


class TestGovernance:
    async def test_skip_rewrite_and_output_rewrite_reach_the_tool_and_the_model(
        self, check_stream: Check
    ) -> None:
        received: list[tuple[str, int]] = []

        def skip_reads(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.SKIP, reason="reads are cached")

        def cap_copies(use: ToolUseContext) -> PreHookResult:
            copies = use.tool_input["copies"]
            assert isinstance(copies, int)
            return PreHookResult(modified_input={**use.tool_input, "copies": min(copies, 2)})

        def redact(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(modified_output=str(output).replace("secret", "[redacted]"))

        hooks = [
            HookMatcher(pattern="read", pre=(skip_reads,)),
            HookMatcher(pattern="copy", pre=(cap_copies,), post=(redact,)),
        ]
        script = Script(
            ToolCallPart("read", {"name": "a.txt"}, tool_call_id="r1"),
            ToolCallPart("copy", {"name": "secret.txt", "copies": "9"}, tool_call_id="c1"),
            "ok",
        )
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(hooks=hooks) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(), name="copier", capabilities=[OnlookerCapability(engine)]
            )

            @agent.tool_plain
            def read(name: str) -> str:
                raise AssertionError("a skipped tool must not run")

            @agent.tool_plain
            def copy(name: str, copies: int) -> str:
                received.append((name, copies))
                return f"copied {name} x{copies}"

            await agent.run("go")

        check_stream(recorder.events)
        assert shape(recorder.events)[1:-1] == [
            ("ToolCallStarted", "read", "r1"),
            ("ToolCallFinished", "read", "r1", "skipped"),
            ("ToolCallStarted", "copy", "c1"),
            ("ToolCallFinished", "copy", "c1", "completed"),
        ]
        # PydanticAI validated "9" into 9; the hook capped it; the tool got an int
        assert received == [("secret.txt", 2)]
        assert recorder.of(ToolCallStarted)[1].args == {"name": "secret.txt", "copies": 2}
        assert recorder.of(ToolCallFinished)[1].result == "copied [redacted].txt x2"
        skipped = script.shown("r1")
        assert (skipped.outcome, skipped.content) == (
            "success",
            "Tool call skipped: reads are cached",
        )
        assert script.shown("c1").content == "copied [redacted].txt x2"

    @pytest.mark.parametrize("phase", ["pre", "post"])
    async def test_abort_ends_the_run_failed(self, check_stream: Check, phase: str) -> None:
        def abort(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.ABORT, reason="kill switch")

        def abort_after(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(action=HookAction.ABORT)

        matcher = HookMatcher(pre=(abort,)) if phase == "pre" else HookMatcher(post=(abort_after,))
        ran: list[str] = []
        script = Script(ToolCallPart("launch", {}, tool_call_id="l1"), "never")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(hooks=[matcher]) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(), name="launcher", capabilities=[OnlookerCapability(engine)]
            )

            @agent.tool_plain
            def launch() -> str:
                ran.append("launch")
                return "launched"

            with pytest.raises(onlooker.HookAbortError):
                await agent.run("go")

        assert ran == ([] if phase == "pre" else ["launch"])
        check_stream(recorder.events)
        assert shape(recorder.events) == [
            ("ExecutionStarted", "launcher"),
            ("ToolCallStarted", "launch", "l1"),
            ("ToolCallFinished", "launch", "l1", "blocked"),
            ("ExecutionFinished", "failed"),
        ]
        error = recorder.of(ExecutionFinished)[0].error
        assert error is not None and error.type == "HookAbortError"

    async def test_a_raising_tool_fails_its_call_and_the_run(self, check_stream: Check) -> None:
        script = Script(ToolCallPart("divide", {"a": 1, "b": 0}, tool_call_id="d1"), "never")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(), name="calculator", capabilities=[OnlookerCapability(engine)]
            )

            @agent.tool_plain
            def divide(a: int, b: int) -> float:
                return a / b

            with pytest.raises(ZeroDivisionError):
                await agent.run("go")

        check_stream(recorder.events)
        assert shape(recorder.events) == [
            ("ExecutionStarted", "calculator"),
            ("ToolCallStarted", "divide", "d1"),
            ("ToolCallFinished", "divide", "d1", "failed"),
            ("ExecutionFinished", "failed"),
        ]
        call_error = recorder.of(ToolCallFinished)[0].error
        run_error = recorder.of(ExecutionFinished)[0].error
        assert call_error is not None and call_error.type == "ZeroDivisionError"
        assert run_error is not None and run_error.type == "ZeroDivisionError"


class TestFrameworkFeatures:
    async def test_parallel_calls_keep_their_own_ids(self, check_stream: Check) -> None:
        calls = [ToolCallPart("square", {"x": x}, tool_call_id=f"sq-{x}") for x in (1, 2, 3)]

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if len(messages) == 1:
                return ModelResponse(parts=list(calls))
            return ModelResponse(parts=[TextPart("squared")])

        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                FunctionModel(respond), name="squarer", capabilities=[OnlookerCapability(engine)]
            )

            @agent.tool_plain
            async def square(x: int) -> int:
                return x * x

            await agent.run("go")

        check_stream(recorder.events)
        results = {e.tool_call_id: e.result for e in recorder.of(ToolCallFinished)}
        assert results == {"sq-1": 1, "sq-2": 4, "sq-3": 9}

    async def test_a_deferral_approved_inline_is_one_call_and_an_accepted_question(
        self, check_stream: Check
    ) -> None:
        async def approve_all(
            ctx: RunContext[None], requests: DeferredToolRequests
        ) -> DeferredToolResults:
            return requests.build_results(approve_all=True)

        script = Script(ToolCallPart("pay", {"amount": 5}, tool_call_id="p1"), "paid")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(),
                name="payer",
                capabilities=[
                    OnlookerCapability(engine),
                    HandleDeferredToolCalls(handler=approve_all),
                ],
            )

            @agent.tool
            def pay(ctx: RunContext[None], amount: int) -> str:
                if not ctx.tool_call_approved:
                    raise ApprovalRequired()
                return f"paid {amount}"

            await agent.run("pay")

        check_stream(recorder.events)
        assert shape(recorder.events) == [
            ("ExecutionStarted", "payer"),
            ("ToolCallStarted", "pay", "p1"),
            ("InteractionStarted",),
            ("InteractionResolved",),
            ("ToolCallFinished", "pay", "p1", "completed"),
            ("ExecutionFinished", "completed"),
        ]
        (question,) = recorder.of(onlooker.InteractionStarted)
        assert question.message == "tool 'pay' (call p1) awaits approval"
        assert recorder.of(onlooker.InteractionResolved)[0].status == "accepted"
        assert recorder.of(ToolCallFinished)[0].result == "paid 5"

    @pytest.mark.parametrize("override", [False, True], ids=["approved", "approved-overridden"])
    async def test_an_approved_call_runs_with_what_the_pre_hooks_decided(
        self, override: bool, check_stream: Check
    ) -> None:
        """The approval re-runs the call: with the pre-hooks' rewrite, and an approval that
        overrides the arguments is a new call the pre-hooks decide."""

        def cap(use: ToolUseContext) -> PreHookResult | None:
            if use.tool_input["amount"] > 10:
                return PreHookResult(modified_input={"amount": 10})
            return None

        async def approve(
            ctx: RunContext[None], requests: DeferredToolRequests
        ) -> DeferredToolResults:
            if override:
                return requests.build_results(
                    approvals={"p1": ToolApproved(override_args={"amount": 999})}
                )
            return requests.build_results(approve_all=True)

        paid: list[int] = []
        script = Script(ToolCallPart("pay", {"amount": 500}, tool_call_id="p1"), "done")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(
            hooks=[HookMatcher(pattern="pay", pre=(cap,))]
        ) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(),
                name="payer",
                capabilities=[OnlookerCapability(engine), HandleDeferredToolCalls(handler=approve)],
            )

            @agent.tool
            def pay(ctx: RunContext[None], amount: int) -> str:
                if not ctx.tool_call_approved:
                    raise ApprovalRequired()
                paid.append(amount)
                return f"paid {amount}"

            await agent.run("pay")

        check_stream(recorder.events)
        assert paid == [10]
        started = [(e.tool_call_id, e.args) for e in recorder.of(ToolCallStarted)]
        finished = [(e.tool_call_id, e.status, e.result) for e in recorder.of(ToolCallFinished)]
        if override:
            assert started == [("p1", {"amount": 10}), ("p1#2", {"amount": 10})]
            assert finished == [("p1", "cancelled", None), ("p1#2", "completed", "paid 10")]
        else:
            assert started == [("p1", {"amount": 10})]
            assert finished == [("p1", "completed", "paid 10")]

    async def test_a_denied_calls_id_reused_is_a_new_call(self, check_stream: Check) -> None:
        """The model reuses the id of a call a person denied: its pre-hooks still decide."""

        def never_delete(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.BLOCK, reason="never delete")

        async def deny(
            ctx: RunContext[None], requests: DeferredToolRequests
        ) -> DeferredToolResults:
            return requests.build_results(approvals={"c0": ToolDenied("a person said no")})

        ran: list[str] = []
        script = Script(
            ToolCallPart("pay", {"amount": 5}, tool_call_id="c0"),
            ToolCallPart("delete_everything", {"path": "/"}, tool_call_id="c0"),
            "done",
        )
        hooks = [HookMatcher(pattern="delete_*", pre=(never_delete,))]
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(hooks=hooks) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(),
                name="reuser",
                capabilities=[OnlookerCapability(engine), HandleDeferredToolCalls(handler=deny)],
            )

            @agent.tool
            def pay(ctx: RunContext[None], amount: int) -> str:
                if not ctx.tool_call_approved:
                    raise ApprovalRequired()
                ran.append("pay")
                return "paid"

            @agent.tool_plain
            def delete_everything(path: str) -> str:
                ran.append("delete_everything")
                return "deleted"

            await agent.run("go")

        check_stream(recorder.events)
        assert ran == []
        finished = [(e.tool, e.tool_call_id, e.status) for e in recorder.of(ToolCallFinished)]
        assert ("delete_everything", "c0#2", "blocked") in finished

    @pytest.mark.parametrize("approved", [True, False], ids=["approved", "denied"])
    @pytest.mark.parametrize("deferral", ["requires_approval", "ApprovalRequired"])
    async def test_a_run_awaiting_approval_is_paused_and_the_next_run_resumes_it(
        self, deferral: str, approved: bool, check_stream: Check
    ) -> None:
        """``DeferredToolRequests`` output: the execution stays open with its question; the
        run given the decision goes on in it, answers the question, and runs the call once."""
        script = Script(ToolCallPart("pay", {"amount": 5}, tool_call_id="p1"), "over")
        paid: list[int] = []
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str | DeferredToolRequests] = Agent(
                script.model(),
                name="payer",
                capabilities=[OnlookerCapability(engine)],
                output_type=[str, DeferredToolRequests],
            )

            if deferral == "requires_approval":

                @agent.tool_plain(requires_approval=True)
                def pay(amount: int) -> str:
                    paid.append(amount)
                    return f"paid {amount}"

            else:

                @agent.tool
                def pay(ctx: RunContext[None], amount: int) -> str:
                    if not ctx.tool_call_approved:
                        raise ApprovalRequired()
                    paid.append(amount)
                    return f"paid {amount}"

            first = await agent.run("pay")
            assert isinstance(first.output, DeferredToolRequests)
            assert shape(recorder.events)[-1] == ("InteractionStarted",)  # paused, not finished
            decision = True if approved else ToolDenied("not today")
            second = await agent.run(
                message_history=first.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"p1": decision}),
            )
            assert second.output == "over"

        check_stream(recorder.events)
        assert paid == ([5] if approved else [])
        held = deferral == "ApprovalRequired"  # the tool started, then asked
        rows = shape(recorder.events)
        asked = [("InteractionStarted",), ("InteractionResolved",)]
        if approved:
            ran = [("ToolCallStarted", "pay", "p1"), ("ToolCallFinished", "pay", "p1", "completed")]
            expected = (
                [ran[0], *asked, ran[1]] if held else [*asked, *ran]
            )  # one call, the framework's id
        else:
            expected = [
                *([("ToolCallStarted", "pay", "p1")] if held else []),
                *asked,
                *([("ToolCallFinished", "pay", "p1", "failed")] if held else []),
            ]
        assert rows == [
            ("ExecutionStarted", "payer"),
            *expected,
            ("ExecutionFinished", "completed"),
        ]
        (question,) = recorder.of(onlooker.InteractionStarted)
        assert question.message == "tool 'pay' (call p1) awaits approval"
        (answer,) = recorder.of(onlooker.InteractionResolved)
        assert answer.status == ("accepted" if approved else "declined")
        if not approved:
            assert answer.response == {"tool_call_approved": False, "message": "not today"}
        if held and not approved:
            error = recorder.of(ToolCallFinished)[0].error
            assert error is not None and error.type == "ToolApprovalRejected"
            assert error.cause == "failure"
        assert recorder.of(ExecutionFinished)[0].result == "over"

    async def test_a_paused_run_never_resumed_closes_with_the_engine(
        self, check_stream: Check
    ) -> None:
        script = Script(ToolCallPart("pay", {"amount": 5}, tool_call_id="p1"), "over")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str | DeferredToolRequests] = Agent(
                script.model(),
                name="payer",
                capabilities=[OnlookerCapability(engine)],
                output_type=[str, DeferredToolRequests],
            )

            @agent.tool_plain(requires_approval=True)
            def pay(amount: int) -> str:
                return f"paid {amount}"

            assert isinstance((await agent.run("pay")).output, DeferredToolRequests)

        check_stream(recorder.events)
        assert recorder.of(onlooker.InteractionResolved)[0].status == "cancelled"
        assert recorder.of(ExecutionFinished)[0].status == "cancelled"

    @pytest.mark.parametrize("deferral", ["requires_approval", "ApprovalRequired"])
    async def test_a_paused_run_nobody_resumes_expires_after_the_pause_timeout(
        self, deferral: str, check_stream: Check
    ) -> None:
        """As a paused native execution: the question and the run end ``expired`` (a held
        call ``cancelled``), and a later resume of that history is a new execution."""
        script = Script(ToolCallPart("pay", {"amount": 5}, tool_call_id="p1"), "over")
        recorder = RecordingObserver()
        expired = anyio.Event()

        def on_end(event: onlooker.ExecutionEvent) -> None:
            if isinstance(event, ExecutionFinished):
                expired.set()

        async with onlooker.ExecutionEngine(pause_timeout=0.05) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            engine.bus.subscribe(on_end, name="on_end")
            agent: Agent[None, str | DeferredToolRequests] = Agent(
                script.model(),
                name="payer",
                capabilities=[OnlookerCapability(engine)],
                output_type=[str, DeferredToolRequests],
            )

            if deferral == "requires_approval":

                @agent.tool_plain(requires_approval=True)
                def pay(amount: int) -> str:
                    return f"paid {amount}"

            else:

                @agent.tool
                def pay(ctx: RunContext[None], amount: int) -> str:
                    if not ctx.tool_call_approved:
                        raise ApprovalRequired()
                    return f"paid {amount}"

            first = await agent.run("pay")
            assert isinstance(first.output, DeferredToolRequests)
            with anyio.fail_after(5):
                await expired.wait()
            (question,) = recorder.of(onlooker.InteractionResolved)
            assert question.status == "expired"
            assert question.error is not None
            assert question.error.type == "ExecutionExpiredError"
            (end,) = recorder.of(ExecutionFinished)
            assert end.status == "expired"
            assert end.error is not None
            assert "pause timeout of 0.05s" in end.error.message
            if deferral == "ApprovalRequired":  # the call the tool held
                assert recorder.of(ToolCallFinished)[0].status == "cancelled"
            second = await agent.run(
                message_history=first.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"p1": True}),
            )
            assert second.output == "over"

        check_stream(recorder.events)
        starts = recorder.of(ExecutionStarted)
        assert len(starts) == 2  # the late resume is an execution of its own
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["expired", "completed"]
        assert recorder.of(ExecutionFinished)[1].execution_id == starts[1].execution_id

    async def test_a_resumed_run_no_longer_expires(self, check_stream: Check) -> None:
        """The clock stops at the resume: a resumed run slower than the pause timeout ends
        as it ends (``completed``), not ``expired``."""
        script = Script(ToolCallPart("pay", {"amount": 5}, tool_call_id="p1"), "over")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(pause_timeout=0.05) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str | DeferredToolRequests] = Agent(
                script.model(),
                name="payer",
                capabilities=[OnlookerCapability(engine)],
                output_type=[str, DeferredToolRequests],
            )

            @agent.tool_plain(requires_approval=True)
            async def pay(amount: int) -> str:
                await anyio.sleep(0.3)  # six pause timeouts
                return f"paid {amount}"

            first = await agent.run("pay")
            assert isinstance(first.output, DeferredToolRequests)
            second = await agent.run(
                message_history=first.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"p1": True}),
            )
            assert second.output == "over"

        check_stream(recorder.events)
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["completed"]
        assert recorder.of(onlooker.InteractionResolved)[0].status == "accepted"

    @pytest.mark.parametrize("decision", ["approve", "deny", "external", "external-failure"])
    async def test_a_decision_taken_inline_answers_the_question(
        self, decision: str, check_stream: Check
    ) -> None:
        """``HandleDeferredToolCalls``: approved, the call runs once; denied, the question is
        declined (and a call the tool held fails ``ToolApprovalRejected``); an external
        result answers it, and the call the tool deferred is not recorded with it."""

        async def decide(
            ctx: RunContext[None], requests: DeferredToolRequests
        ) -> DeferredToolResults:
            if decision == "external":
                return DeferredToolResults(calls={"p1": "paid elsewhere"})
            if decision == "external-failure":
                return DeferredToolResults(calls={"p1": ModelRetry("the bank is down")})
            if decision == "deny":
                return requests.build_results(approvals={"p1": ToolDenied("no")})
            return requests.build_results(approve_all=True)

        script = Script(ToolCallPart("pay", {"amount": 5}, tool_call_id="p1"), "over")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(),
                name="payer",
                capabilities=[OnlookerCapability(engine), HandleDeferredToolCalls(handler=decide)],
            )

            if decision == "approve":

                @agent.tool_plain(requires_approval=True)
                def pay(amount: int) -> str:
                    return f"paid {amount}"

            else:

                @agent.tool
                def pay(ctx: RunContext[None], amount: int) -> str:
                    if decision.startswith("external"):
                        raise CallDeferred()
                    if not ctx.tool_call_approved:
                        raise ApprovalRequired()
                    return f"paid {amount}"

            assert (await agent.run("pay")).output == "over"

        check_stream(recorder.events)
        (answer,) = recorder.of(onlooker.InteractionResolved)
        finished = [(e.status, e.result) for e in recorder.of(ToolCallFinished)]
        if decision == "approve":
            assert answer.status == "accepted"
            assert shape(recorder.events)[1:3] == [
                ("InteractionStarted",),
                ("InteractionResolved",),
            ]
            assert finished == [("completed", "paid 5")]
        elif decision == "deny":
            assert answer.status == "declined"
            assert finished == [("failed", None)]
        elif decision == "external-failure":  # it was answered with a failure, not a result
            assert (answer.status, answer.response) == ("failed", {"error": "the bank is down"})
            assert finished == [("cancelled", None)]
        else:
            assert (answer.status, answer.response) == ("accepted", {"result": "paid elsewhere"})
            assert finished == [("cancelled", None)]
            error = recorder.of(ToolCallFinished)[0].error
            assert error is not None and error.type == "ExternalResult"

    @pytest.mark.parametrize("signal", [ModelRetry, ToolFailed])
    async def test_a_tools_retry_or_failure_signal_is_an_expected_failure(
        self, signal: type[ModelRetry | ToolFailed], check_stream: Check
    ) -> None:
        script = Script(ToolCallPart("fetch", {}, tool_call_id="f1"), "ok")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(), name="fetcher", capabilities=[OnlookerCapability(engine)]
            )

            @agent.tool_plain
            def fetch() -> str:
                raise signal("the service is busy")

            assert (await agent.run("go")).output == "ok"

        check_stream(recorder.events)
        (finished,) = recorder.of(ToolCallFinished)
        assert finished.status == "failed" and finished.error is not None
        assert (finished.error.type, finished.error.cause) == (signal.__name__, "failure")
        assert recorder.of(ExecutionFinished)[0].status == "completed"

    async def test_an_output_tool_is_the_runs_result_not_a_tool_call(
        self, check_stream: Check
    ) -> None:
        class Refund(BaseModel):
            order: int

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            name = info.output_tools[0].name
            if len(messages) == 1:  # the first answer does not validate: PydanticAI retries
                return ModelResponse(parts=[ToolCallPart(name, {"order": "x"}, tool_call_id="o1")])
            return ModelResponse(parts=[ToolCallPart(name, {"order": 42}, tool_call_id="o2")])

        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, Refund] = Agent(
                FunctionModel(respond),
                name="refunder",
                output_type=Refund,
                capabilities=[OnlookerCapability(engine)],
            )
            assert (await agent.run("go")).output == Refund(order=42)

        check_stream(recorder.events)
        assert shape(recorder.events) == [
            ("ExecutionStarted", "refunder"),
            ("ExecutionFinished", "completed"),
        ]
        assert recorder.of(ExecutionFinished)[0].result == {"order": 42}

    async def test_a_rewrite_that_does_not_validate_fails_the_call(
        self, check_stream: Check
    ) -> None:
        def garble(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={"x": "not a number"})

        script = Script(ToolCallPart("double", {"x": 2}, tool_call_id="d1"), "ok")
        ran, recorder, _ = await run_doubler(script, [HookMatcher(pre=(garble,))])
        assert ran == []
        check_stream(recorder.events)
        (started,) = recorder.of(ToolCallStarted)
        assert started.args == {"x": 2}  # the last input that validated: the tool ran with none
        (finished,) = recorder.of(ToolCallFinished)
        assert finished.status == "failed"
        assert finished.error is not None and finished.error.type == "ToolInputError"
        assert "garble'" in finished.error.message  # the hook is named
        shown = script.shown("d1")
        assert shown.outcome == "failed"
        assert str(shown.content).startswith(
            "Tool call failed: invalid arguments for tool 'double'"
        )
        assert "garble'" in str(shown.content)

    async def test_arguments_the_tool_refuses_are_a_failed_call(self, check_stream: Check) -> None:
        """The model's own invalid arguments: PydanticAI asks it again (a retry prompt)."""
        script = Script(
            ToolCallPart("double", '{"x": "many"}', tool_call_id="d1"),  # JSON, as providers send
            ToolCallPart("double", {"x": 2}, tool_call_id="d2"),
            "ok",
        )
        ran, recorder, output = await run_doubler(script)
        assert output == "ok" and ran == [2]
        check_stream(recorder.events)
        first, second = recorder.of(ToolCallFinished)
        assert (first.tool_call_id, first.status, second.status) == ("d1", "failed", "completed")
        assert first.error is not None and first.error.type == "ToolInputError"
        assert recorder.of(ToolCallStarted)[0].args == {"x": "many"}  # as the model sent them
        assert script.shown("d1").outcome == "retried"

    async def test_a_rewrite_is_recorded_as_the_tool_receives_it(self, check_stream: Check) -> None:
        seen: list[dict[str, Any]] = []

        def as_text(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={"name": use.tool_input["name"], "copies": "2"})

        def look(use: ToolUseContext) -> None:
            seen.append(dict(use.tool_input))  # the next hook sees the validated rewrite

        received: list[dict[str, Any]] = []
        script = Script(ToolCallPart("copy", {"name": "a", "copies": 9}, tool_call_id="c1"), "ok")
        recorder = RecordingObserver()
        hooks = [HookMatcher(pattern="copy", pre=(as_text, look))]
        async with onlooker.ExecutionEngine(hooks=hooks) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(), name="copier", capabilities=[OnlookerCapability(engine)]
            )

            @agent.tool_plain
            def copy(name: str, copies: int, mode: str = "fast") -> str:
                received.append({"name": name, "copies": copies, "mode": mode})
                return "ok"

            await agent.run("go")

        check_stream(recorder.events)
        # PydanticAI's validator coerced "2" and filled the default: the record says so too
        assert received == [{"name": "a", "copies": 2, "mode": "fast"}]
        assert seen == received
        assert [e.args for e in recorder.of(ToolCallStarted)] == received
        assert recorder.of(ToolCallFinished)[0].status == "completed"

    async def test_another_capabilitys_skip_is_recorded_with_its_replacement(
        self, check_stream: Check
    ) -> None:
        async def cached(
            ctx: RunContext[None], *, call: ToolCallPart, tool_def: ToolDefinition, args: Any
        ) -> Any:
            raise SkipToolExecution("from cache")

        ran: list[str] = []
        script = Script(ToolCallPart("fetch", {"url": "u"}, tool_call_id="f1"), "ok")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agent: Agent[None, str] = Agent(
                script.model(),
                name="fetcher",
                capabilities=[Hooks(before_tool_execute=cached), OnlookerCapability(engine)],
            )

            @agent.tool_plain
            def fetch(url: str) -> str:
                ran.append(url)
                return "fresh"

            await agent.run("go")

        assert ran == []
        check_stream(recorder.events)
        (finished,) = recorder.of(ToolCallFinished)
        assert (finished.status, finished.result) == ("completed", "from cache")


class TestRobustness:
    async def test_the_adapters_own_failure_never_reaches_the_agent(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        engine = onlooker.ExecutionEngine()  # never started: tracking cannot work
        script = Script(ToolCallPart("echo", {"text": "hi"}, tool_call_id="e1"), "fine")
        agent: Agent[None, str] = Agent(
            script.model(), name="echoer", capabilities=[OnlookerCapability(engine)]
        )

        @agent.tool_plain
        def echo(text: str) -> str:
            return text

        with caplog.at_level(logging.ERROR, logger="onlooker.integrations.pydantic_ai"):
            result = await agent.run("go")
        assert result.output == "fine"
        assert script.shown("e1").content == "hi"
        assert any("untracked" in r.getMessage() for r in caplog.records)

    async def test_a_call_with_an_empty_id_is_still_governed(self) -> None:
        """Some OpenAI-compatible servers send ``""``: the call gets onlooker's own id."""
        ran: list[str] = []

        def deny(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.BLOCK, reason="never")

        script = Script(ToolCallPart("delete_all", {}, tool_call_id=""), "done")
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(hooks=[HookMatcher(pre=(deny,))]) as engine:
            engine.bus.subscribe(recorder)
            agent: Agent[None, str] = Agent(
                script.model(), name="cleaner", capabilities=[OnlookerCapability(engine)]
            )

            @agent.tool_plain
            def delete_all() -> str:
                ran.append("delete_all")
                return "deleted"

            await agent.run("go")
        assert ran == []
        (finished,) = recorder.of(ToolCallFinished)
        assert finished.status == "blocked" and finished.tool_call_id.startswith("call-")

    def test_a_missing_framework_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "pydantic_ai", None)
        monkeypatch.delitem(sys.modules, "onlooker.integrations.pydantic_ai")
        with pytest.raises(ImportError, match=r'pip install "onlooker\[pydantic-ai\]"'):
            importlib.import_module("onlooker.integrations.pydantic_ai")


class TestPausedRegistry:
    async def test_two_agents_paused_on_the_same_call_id_resume_their_own_runs(
        self, check_stream: Check
    ) -> None:
        """TestModel's call ids are ``pyd_ai_tool_call_id__<tool>``: the run resumed is the
        one whose response the history ends in (its ``run_id``), not the last paused."""
        from pydantic_ai.models.test import TestModel

        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine() as engine:
            engine.bus.subscribe(recorder, name="recorder")
            agents = []
            for name in ("alice", "bob"):
                agent: Agent[None, str | DeferredToolRequests] = Agent(
                    TestModel(),
                    name=name,
                    capabilities=[OnlookerCapability(engine)],
                    output_type=[str, DeferredToolRequests],
                )

                @agent.tool_plain(requires_approval=True)
                def pay(amount: int) -> str:
                    return f"paid {amount}"

                agents.append(agent)
            alice, bob = agents
            first = await alice.run("pay")
            await bob.run("pay")
            assert isinstance(first.output, DeferredToolRequests)
            await alice.run(
                message_history=first.all_messages(),
                deferred_tool_results=first.output.build_results(approve_all=True),
            )
            programs = {e.execution_id: e.program for e in recorder.of(ExecutionStarted)}
            (done,) = recorder.of(ExecutionFinished)  # bob's run is still paused
            assert programs[done.execution_id] == "alice"
        check_stream(recorder.events)

    async def test_a_closed_engine_is_not_kept_alive_by_its_paused_runs(self) -> None:
        import gc
        import weakref

        async def closed_engine() -> weakref.ref[onlooker.ExecutionEngine]:
            script = Script(ToolCallPart("pay", {"amount": 5}, tool_call_id="p1"), "over")
            async with onlooker.ExecutionEngine() as engine:
                agent: Agent[None, str | DeferredToolRequests] = Agent(
                    script.model(),
                    capabilities=[OnlookerCapability(engine)],
                    output_type=[str, DeferredToolRequests],
                )

                @agent.tool_plain(requires_approval=True)
                def pay(amount: int) -> str:
                    return f"paid {amount}"

                assert isinstance((await agent.run("pay")).output, DeferredToolRequests)
            return weakref.ref(engine)

        gone = await closed_engine()
        gc.collect()
        gc.collect()  # a cycle holding objects with finalizers may need a second pass
        assert gone() is None
