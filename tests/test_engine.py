"""ExecutionEngine: lifecycle, tool calls, questions, children, every pair closing on every path."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import onlooker
from onlooker import (
    Elicitation,
    ExecutionContext,
    ExecutionEngine,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionResponse,
    InteractionStarted,
    ToolCallFinished,
    ToolCallStarted,
    ToolError,
    ToolInputError,
    Trigger,
    UnknownToolError,
)
from onlooker.testing import RecordingObserver
from running import run, stray_cancellation

pytestmark = pytest.mark.anyio

Check = Callable[[Sequence[ExecutionEvent]], None]


class Stop(BaseException):
    """A BaseException that is not cancellation."""


class Oops(Exception):
    pass


@onlooker.tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


@onlooker.tool(name="fetch", description="Fetch a page.")
async def fetch_page(url: str) -> str:
    await anyio.lowlevel.checkpoint()
    return f"<{url}>"


@onlooker.tool
def explode(message: str = "boom") -> None:
    """Raise a plain exception (a defect)."""
    raise Oops(message)


@onlooker.tool
def refuse() -> None:
    """Raise a ToolError (an expected failure)."""
    raise ToolError("not today", tool="refuse")


@onlooker.tool
async def hang() -> None:
    """Never return."""
    await anyio.sleep_forever()


TOOLS: list[onlooker.Tool[..., Any]] = [add, fetch_page, explode, refuse, hang]


class TestLifecycle:
    async def test_order_and_seq(self, check_stream: Check) -> None:
        async def program(ctx: ExecutionContext) -> int:
            first = await ctx.call("add", a=1, b=2)
            answer = await ctx.elicit("more?", schema={"type": "object"})
            assert answer.action == "accept"
            return int(first) + await ctx.call(add, a=10)

        async def yes(question: Elicitation) -> InteractionResponse:
            assert question.message == "more?"
            assert question.requested_schema == {"type": "object"}
            return InteractionResponse.accept({"ok": True})

        result, recorder = await run(
            program, tools=TOOLS, on_elicitation=yes, input={"n": 1}, owner="ann"
        )
        assert result.status == "completed" and result.ok
        assert result.value == 14
        assert result.error is None
        assert result.duration_ms >= 0
        assert recorder.kinds() == [
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
            "InteractionStarted",
            "InteractionResolved",
            "ToolCallStarted",
            "ToolCallFinished",
            "ExecutionFinished",
        ]
        assert [e.seq for e in recorder] == list(range(8))
        assert {e.execution_id for e in recorder} == {result.execution_id}
        assert len({e.event_id for e in recorder}) == 8
        check_stream(recorder.events)
        started = recorder.of(ExecutionStarted)[0]
        assert started.input == {"n": 1}
        assert started.owner == "ann"
        assert started.program.endswith("program")
        assert started.trigger == Trigger(kind="api")
        calls = recorder.of(ToolCallStarted)
        assert [c.args for c in calls] == [{"a": 1, "b": 2}, {"a": 10, "b": 1}]
        done = recorder.of(ToolCallFinished)
        assert [(d.status, d.result, d.error) for d in done] == [
            ("completed", 3, None),
            ("completed", 11, None),
        ]
        assert [d.tool_call_id for d in done] == [c.tool_call_id for c in calls]
        question = recorder.of(InteractionStarted)[0]
        assert (question.mode, question.message) == ("inline", "more?")
        assert question.requested_schema == {"type": "object"}
        answer = recorder.of(InteractionResolved)[0]
        assert (answer.status, answer.response) == ("accepted", {"ok": True})
        finished = recorder.of(ExecutionFinished)[0]
        assert (finished.status, finished.result, finished.error) == ("completed", 14, None)

    async def test_trigger_shorthand(self) -> None:
        async def program(ctx: ExecutionContext) -> str:
            return ctx.trigger.kind

        result, recorder = await run(program, tools=TOOLS, trigger="cli")
        assert result.value == "cli"
        assert recorder.of(ExecutionStarted)[0].trigger == Trigger(kind="cli", metadata={})
        full = Trigger(kind="schedule", metadata={"cron": "* * * * *"})
        _, recorder = await run(program, tools=TOOLS, trigger=full)
        assert recorder.of(ExecutionStarted)[0].trigger == full

    async def test_a_string_triggers_metadata_is_read_only(self) -> None:
        """Executions started with one string share one Trigger: none can write into the
        metadata of another's."""

        async def tags_its_trigger(ctx: ExecutionContext) -> None:
            ctx.trigger.metadata["user"] = "alice"

        async def reads_its_trigger(ctx: ExecutionContext) -> dict[str, Any]:
            return dict(ctx.trigger.metadata)

        tagged, _ = await run(tags_its_trigger, tools=TOOLS, trigger="cli")
        assert tagged.error is not None and "metadata=" in tagged.error.message
        later, recorder = await run(reads_its_trigger, tools=TOOLS, trigger="cli")
        assert later.value == {}
        assert recorder.of(ExecutionStarted)[0].trigger == Trigger(kind="cli")

    @pytest.mark.parametrize("trigger", ["", 3, None])
    async def test_bad_trigger(self, trigger: Any) -> None:
        async def program(ctx: ExecutionContext) -> None:
            pass

        async with ExecutionEngine() as engine:
            with pytest.raises(TypeError, match="trigger"):
                await engine.execute(program, trigger=trigger)

    async def test_async_and_sync_tools_by_name_and_object(self) -> None:
        async def program(ctx: ExecutionContext) -> list[Any]:
            return [
                await ctx.call("fetch", url="a"),
                await ctx.call(fetch_page, url="b"),
                await ctx.call("add", a=1),
            ]

        result, recorder = await run(program, tools=TOOLS)
        assert result.value == ["<a>", "<b>", 2]
        assert [e.tool for e in recorder.of(ToolCallStarted)] == ["fetch", "fetch", "add"]

    async def test_no_handler_declines(self) -> None:
        async def program(ctx: ExecutionContext) -> str:
            return (await ctx.elicit("hello?")).action

        result, recorder = await run(program, tools=TOOLS)
        assert result.value == "decline"
        resolved = recorder.of(InteractionResolved)[0]
        assert (resolved.status, resolved.response) == ("declined", None)

    @pytest.mark.parametrize(
        ("response", "status"),
        [(InteractionResponse.decline(), "declined"), (InteractionResponse.cancel(), "cancelled")],
    )
    async def test_handler_answers(self, response: InteractionResponse, status: str) -> None:
        async def program(ctx: ExecutionContext) -> str:
            return (await ctx.elicit("hello?")).action

        async def handler(_: Elicitation) -> InteractionResponse:
            return response

        result, recorder = await run(program, tools=TOOLS, on_elicitation=handler)
        assert result.value == response.action
        assert recorder.of(InteractionResolved)[0].status == status

    async def test_failing_handler(self, check_stream: Check) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.elicit("hello?")

        async def handler(_: Elicitation) -> InteractionResponse:
            raise Oops("handler broke")

        result, recorder = await run(program, tools=TOOLS, on_elicitation=handler)
        assert result.status == "failed"
        resolved = recorder.of(InteractionResolved)[0]
        assert resolved.status == "failed"
        assert resolved.error is not None and resolved.error.type == "Oops"
        check_stream(recorder.events)

    async def test_handler_returning_garbage(self) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.elicit("hello?")

        async def handler(_: Elicitation) -> InteractionResponse:
            return "yes"  # type: ignore[return-value]

        result, recorder = await run(program, tools=TOOLS, on_elicitation=handler)
        assert result.status == "failed"
        assert result.error is not None and "InteractionResponse" in result.error.message
        assert recorder.of(InteractionResolved)[0].status == "failed"

    async def test_engine_runs_once(self) -> None:
        engine = ExecutionEngine()
        async with engine:
            with pytest.raises(RuntimeError, match="once"):
                await engine.__aenter__()
        with pytest.raises(RuntimeError):
            async with engine:
                pass

    async def test_execute_needs_a_running_engine(self) -> None:
        async def program(ctx: ExecutionContext) -> None:
            pass

        engine = ExecutionEngine()
        with pytest.raises(RuntimeError, match="async with"):
            await engine.execute(program)
        async with engine:
            pass
        with pytest.raises(RuntimeError, match="closed"):
            await engine.execute(program)

    async def test_aclose(self) -> None:
        engine = ExecutionEngine()
        await engine.__aenter__()
        await engine.aclose()
        with pytest.raises(RuntimeError):
            await engine.execute_with_pause(add)  # type: ignore[arg-type]

    def test_bad_arguments(self) -> None:
        with pytest.raises(ValueError, match="pause_timeout"):
            ExecutionEngine(pause_timeout=0)
        with pytest.raises(ValueError, match="pause_timeout must be a positive number"):
            ExecutionEngine(pause_timeout=float("nan"))
        with pytest.raises(TypeError, match="pause_timeout must be a number of seconds"):
            ExecutionEngine(pause_timeout="5")  # type: ignore[arg-type]  # the point of the test
        with pytest.raises(ValueError, match="keep_results must be 0 or more, not -1"):
            ExecutionEngine(keep_results=-1)
        with pytest.raises(TypeError, match="keep_results must be an int, not str"):
            ExecutionEngine(keep_results="3")  # type: ignore[arg-type]  # the point of the test
        with pytest.raises(TypeError, match="HookMatcher"):
            ExecutionEngine(hooks=["nope"])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="add"):
            ExecutionEngine(tools=[add, add])

    @pytest.mark.parametrize(
        ("message", "schema", "named"),
        [(5, None, "message must be a str"), ("?", "str", "schema must be a JSON Schema")],
    )
    async def test_a_bad_question_names_the_problem(
        self, message: Any, schema: Any, named: str
    ) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.elicit(message, schema=schema)

        result, recorder = await run(program)
        assert result.status == "failed" and result.error is not None
        assert result.error.type == "TypeError" and named in result.error.message
        assert "InteractionStarted" not in recorder.kinds()

    async def test_an_owner_that_is_not_a_string_is_refused(self) -> None:
        async with ExecutionEngine() as engine:
            for start in (engine.execute, engine.execute_with_pause):
                with pytest.raises(TypeError, match="owner must be a string or None, not 7"):
                    await start(_returns_one, owner=7)  # type: ignore[arg-type]  # the point of the test

    async def test_calling_something_that_is_not_a_tool_names_it(self) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.call(5)  # type: ignore[call-overload]  # the point of the test

        result, recorder = await run(program, tools=TOOLS)
        assert result.error is not None and result.error.type == "TypeError"
        assert result.error.message == "ctx.call takes a tool's name or its Tool, not 5"
        assert recorder.kinds() == ["ExecutionStarted", "ExecutionFinished"]

    async def test_tool_registry(self) -> None:
        engine = ExecutionEngine(tools=TOOLS)
        assert sorted(engine.tools) == ["add", "explode", "fetch", "hang", "refuse"]
        assert engine.tools["fetch"].description == "Fetch a page."
        assert engine.tools["add"].description == "Add two numbers."


class TestAContextKeptAfterItsExecution:
    """A program may keep its ``ctx`` (in a closure, a task); used after the end, it refuses."""

    @pytest.mark.parametrize("detached", [False, True])
    async def test_calls_questions_and_children_are_refused(self, detached: bool) -> None:
        kept: list[ExecutionContext] = []

        async def program(ctx: ExecutionContext) -> None:
            kept.append(ctx)

        async def child(ctx: ExecutionContext) -> None:
            raise AssertionError("a finished execution started a child")

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=TOOLS, pause_timeout=None) as engine:
            engine.bus.subscribe(recorder)
            if detached:
                await engine.execute_with_pause(program)
            else:
                await engine.execute(program)
            (ctx,) = kept
            seen = len(recorder.events)
            with anyio.fail_after(5):  # a question once waited for an answer for ever
                uses: list[tuple[Callable[[], Awaitable[object]], str]] = [
                    (lambda: ctx.call("add", a=1), "cannot call tool 'add'"),
                    (lambda: ctx.elicit("still there?"), "cannot ask a question"),
                    (lambda: ctx.spawn(child), "cannot spawn a child execution"),
                ]
                for use, words in uses:
                    with pytest.raises(onlooker.ExecutionError, match=words) as caught:
                        await use()
                    assert caught.value.execution_id == ctx.execution_id
        assert len(recorder.events) == seen  # nothing recorded for a finished execution

    async def test_a_call_and_a_question_still_running_at_the_end_close_cancelled(
        self, check_stream: Check
    ) -> None:
        """Started in a task the program does not wait for (or shielded from its
        cancellation), they outlive the execution: they close with it, ``cancelled``,
        and their own ends, when they come, are dropped (they were never closed)."""
        release = anyio.Event()
        asked = anyio.Event()
        outcomes: list[object] = []

        @onlooker.tool
        async def slow() -> str:
            """Wait for the test."""
            await release.wait()
            return "late"

        async def answer(elicitation: Elicitation) -> InteractionResponse:
            asked.set()
            await release.wait()
            return InteractionResponse.accept({"ok": True})

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[slow]) as engine, anyio.create_task_group() as outer:
            engine.bus.subscribe(recorder)

            async def program(ctx: ExecutionContext) -> str:
                async def call() -> None:
                    outcomes.append(await ctx.call("slow"))

                async def question() -> None:
                    outcomes.append((await ctx.elicit("go on?")).action)

                outer.start_soon(call)
                outer.start_soon(call)  # two at once
                outer.start_soon(question)
                await asked.wait()
                return "left them running"

            result = await engine.execute(program, on_elicitation=answer)
            release.set()
        assert result.status == "completed"
        assert sorted(map(str, outcomes)) == ["accept", "late", "late"]  # the program got all
        check_stream(recorder.events)
        assert [e.kind for e in recorder.events[-4:]] == [
            "ToolCallFinished",
            "ToolCallFinished",
            "InteractionResolved",
            "ExecutionFinished",
        ]
        [resolved] = recorder.of(InteractionResolved)
        for finished in recorder.of(ToolCallFinished):
            assert finished.status == "cancelled" and finished.error is not None
            assert finished.error.message == "closed with its execution"
        assert resolved.status == "cancelled" and resolved.error is not None
        assert resolved.error.message == "closed with its execution"


class TestToolFailures:
    async def test_a_tools_exception_reaches_the_program_unchanged(
        self, check_stream: Check
    ) -> None:
        caught: list[BaseException] = []

        async def program(ctx: ExecutionContext) -> str:
            try:
                await ctx.call("explode", message="kaput")
            except Oops as exc:
                caught.append(exc)
            return "survived"

        result, recorder = await run(program, tools=TOOLS)
        assert result.value == "survived"
        assert type(caught[0]) is Oops and str(caught[0]) == "kaput"
        finished = recorder.of(ToolCallFinished)[0]
        assert finished.status == "failed"
        assert finished.result is None
        assert finished.error is not None
        assert (finished.error.type, finished.error.message, finished.error.cause) == (
            "Oops",
            "kaput",
            "defect",
        )
        check_stream(recorder.events)

    async def test_tool_error_is_a_failure(self) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("refuse")

        result, recorder = await run(program, tools=TOOLS)
        assert result.status == "failed"
        assert result.error is not None
        assert (result.error.type, result.error.cause) == ("ToolError", "failure")
        assert recorder.of(ToolCallFinished)[0].error == result.error

    async def test_failing_program(self, check_stream: Check) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("add", a=1)
            raise KeyError("missing")

        result, recorder = await run(program, tools=TOOLS)
        assert result.status == "failed" and not result.ok
        assert result.value is None
        assert result.error is not None
        assert (result.error.type, result.error.cause) == ("KeyError", "defect")
        finished = recorder.of(ExecutionFinished)[0]
        assert (finished.status, finished.error) == ("failed", result.error)
        check_stream(recorder.events)

    @pytest.mark.parametrize(
        ("args", "problem"),
        [
            ({"a": "not a number"}, "a"),
            ({}, "a"),
            ({"a": 1, "c": 2}, "c"),
        ],
    )
    async def test_bad_arguments(
        self, args: dict[str, Any], problem: str, check_stream: Check
    ) -> None:
        errors: list[ToolInputError] = []
        ran: list[bool] = []

        @onlooker.tool
        def strict(a: int) -> int:
            ran.append(True)
            return a

        async def program(ctx: ExecutionContext) -> None:
            try:
                await ctx.call("strict", **args)
            except ToolInputError as exc:
                errors.append(exc)

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[strict]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(program)
        assert result.status == "completed"
        assert ran == []
        (error,) = errors
        assert error.tool == "strict"
        assert "strict" in str(error) and problem in str(error)
        assert recorder.kinds() == [
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
            "ExecutionFinished",
        ]
        assert recorder.of(ToolCallStarted)[0].args == args
        finished = recorder.of(ToolCallFinished)[0]
        assert finished.status == "failed"
        assert finished.error is not None
        assert (finished.error.type, finished.error.cause) == ("ToolInputError", "failure")
        assert problem in finished.error.message
        check_stream(recorder.events)

    async def test_uncaught_bad_arguments_fail_the_execution(self) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("add", a=[1])

        result, _ = await run(program, tools=TOOLS)
        assert result.status == "failed"
        assert result.error is not None and result.error.type == "ToolInputError"

    async def test_unknown_tool(self, check_stream: Check) -> None:
        errors: list[UnknownToolError] = []

        async def program(ctx: ExecutionContext) -> None:
            try:
                await ctx.call("teleport", where="moon")
            except UnknownToolError as exc:
                errors.append(exc)
            await ctx.call("teleport")

        result, recorder = await run(program, tools=TOOLS)
        assert errors[0].tool == "teleport"
        assert "teleport" in str(errors[0]) and "add" in str(errors[0])
        assert result.status == "failed"
        assert result.error is not None
        assert (result.error.type, result.error.cause) == ("UnknownToolError", "failure")
        assert recorder.kinds().count("ToolCallStarted") == 2
        assert recorder.kinds().count("ToolCallFinished") == 2
        assert recorder.of(ToolCallStarted)[0].args == {"where": "moon"}
        assert {f.status for f in recorder.of(ToolCallFinished)} == {"failed"}
        check_stream(recorder.events)


class TestCancellation:
    async def test_move_on_after_around_execute(self, check_stream: Check) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("add", a=1)
            await ctx.call("hang")

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=TOOLS) as engine:
            with onlooker.observing(recorder):
                with anyio.move_on_after(0.05) as scope:
                    await engine.execute(program)
                assert scope.cancelled_caught
                assert await engine.execute(_returns_one) is not None
        cancelled = [
            e for e in recorder.events if e.execution_id == recorder.events[0].execution_id
        ]
        kinds = [e.kind for e in cancelled]
        assert kinds == [
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
            "ToolCallStarted",
            "ToolCallFinished",
            "ExecutionFinished",
        ]
        hung = cancelled[4]
        assert isinstance(hung, ToolCallFinished)
        assert hung.status == "cancelled"
        assert hung.error is not None and hung.error.cause == "interrupt"
        finished = cancelled[5]
        assert isinstance(finished, ExecutionFinished)
        assert finished.status == "cancelled"
        assert finished.error is not None and finished.error.cause == "interrupt"
        check_stream(recorder.events)

    async def test_cancel_scope_cancelled_directly(self, check_stream: Check) -> None:
        recorder = RecordingObserver()

        async def program(ctx: ExecutionContext) -> None:
            await anyio.sleep_forever()

        async with ExecutionEngine(tools=TOOLS) as engine:
            with onlooker.observing(recorder), anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(engine.execute, program)
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()
        assert recorder.kinds() == ["ExecutionStarted", "ExecutionFinished"]
        assert recorder.of(ExecutionFinished)[0].status == "cancelled"
        check_stream(recorder.events)

    async def test_cancelled_while_a_handler_answers(self, check_stream: Check) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.elicit("wait for me")

        async def slow(_: Elicitation) -> InteractionResponse:
            await anyio.sleep_forever()
            raise AssertionError

        recorder = RecordingObserver()
        async with ExecutionEngine() as engine:
            with onlooker.observing(recorder), anyio.move_on_after(0.02):
                await engine.execute(program, on_elicitation=slow)
        resolved = recorder.of(InteractionResolved)[0]
        assert resolved.status == "cancelled"
        assert resolved.error is not None and resolved.error.cause == "interrupt"
        assert recorder.of(ExecutionFinished)[0].status == "cancelled"
        check_stream(recorder.events)

    async def test_a_cancellations_message_holds_no_address_or_path(
        self, anyio_backend: str
    ) -> None:
        """The runtime's cancel text names scopes and tasks by memory address and the
        install's paths; the record keeps the reason only."""

        async def program(ctx: ExecutionContext) -> None:
            await ctx.elicit("wait for me")

        recorder = RecordingObserver()
        async with ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            with anyio.move_on_after(0.02):
                await engine.execute(program, on_elicitation=_never_answers)
            paused = await engine.execute_with_pause(program)
            assert isinstance(paused, onlooker.PausedExecution)
            await engine.cancel(paused.execution_id)
        messages = [e.error.message for e in recorder.of(ExecutionFinished) if e.error]
        deadline, explicit = {
            "asyncio": ("cancelled: deadline exceeded", "cancelled"),
            "trio": ("cancelled due to deadline", "cancelled due to explicit"),
        }[anyio_backend]
        assert messages == [deadline, explicit]

    async def test_cancelled_inside_a_child(self, check_stream: Check) -> None:
        async def child(ctx: ExecutionContext) -> None:
            await ctx.call("hang")

        async def parent(ctx: ExecutionContext) -> None:
            await ctx.spawn(child)

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=TOOLS) as engine:
            with onlooker.observing(recorder), anyio.move_on_after(0.02):
                await engine.execute(parent)
        statuses = [e.status for e in recorder.of(ExecutionFinished)]
        assert statuses == ["cancelled", "cancelled"]
        check_stream(recorder.events)

    async def test_a_clean_up_that_raises_while_cancelled_fails_only_its_execution(
        self, check_stream: Check
    ) -> None:
        """A task of the program whose clean-up raises while the execution is cancelled: on
        trio a group of the cancellation and the error, whose error crashed the engine (and
        every other execution). The execution is recorded failed, the rest goes on."""

        async def fragile() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                raise ValueError("clean-up failed")  # the program's own bug

        async def program(ctx: ExecutionContext) -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(fragile)
                await ctx.elicit("go on?")

        recorder = RecordingObserver()
        async with ExecutionEngine() as engine:
            with onlooker.observing(recorder):
                bystander = await engine.execute_with_pause(_bystander)
                paused = await engine.execute_with_pause(program)
                assert isinstance(paused, onlooker.PausedExecution)
                result = await engine.cancel(paused.execution_id)
                with anyio.move_on_after(0.05):  # the caller's own timeout, too
                    await engine.execute(program)
                assert isinstance(bystander, onlooker.PausedExecution)
                answered = await engine.resume(
                    bystander.execution_id, InteractionResponse.accept({})
                )
        assert result.status == "failed" and result.error is not None
        assert "clean-up failed" in result.error.message or result.error.type.endswith("Group")
        assert isinstance(answered, onlooker.ExecutionResult) and answered.status == "completed"
        statuses = sorted(e.status for e in recorder.of(ExecutionFinished))
        assert statuses == ["completed", "failed", "failed"]
        check_stream(recorder.events)

    async def test_the_callers_cancellation_goes_on_past_the_programs_own_error(
        self, check_stream: Check
    ) -> None:
        """The same clean-up, the caller cancelling: the execution is recorded failed with the
        program's error, and the caller's cancellation goes on (asyncio's task group left it
        out of the group it raised: ``execute`` returned after the caller's deadline)."""

        async def fragile() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                raise ValueError("clean-up failed")

        async def program(ctx: ExecutionContext) -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(fragile)
                await anyio.sleep_forever()

        recorder = RecordingObserver()
        returned: list[object] = []
        async with ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            with anyio.move_on_after(0.05) as scope:
                returned.append(await engine.execute(program))
        assert scope.cancelled_caught and returned == []
        [end] = recorder.of(ExecutionFinished)
        assert end.status == "failed" and end.error is not None
        assert "clean-up failed" in end.error.message
        check_stream(recorder.events)

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's own cancellations
    async def test_an_asyncio_timeout_goes_on_past_the_programs_own_error(self) -> None:
        import asyncio

        async def program(ctx: ExecutionContext) -> None:
            async def fragile() -> None:
                try:
                    await asyncio.sleep(3600)
                finally:
                    raise ValueError("clean-up failed")

            async with asyncio.TaskGroup() as group:
                group.create_task(fragile())
                await asyncio.sleep(3600)

        async with ExecutionEngine() as engine:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await engine.execute(program)
            task = asyncio.current_task()
            assert task is not None and task.cancelling() == 0

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio.TaskGroup
    async def test_an_asyncio_task_groups_failure_is_no_cancellation(self) -> None:
        """A task group whose child fails after the group's body ended cancels its task and,
        before Python 3.13, never takes the request back: the execution fails, and the caller
        gets its result, not a CancelledError, with its task's count of cancellations
        unchanged. So when a tool's group failed and the program failed later, or an async
        pre-hook's group failed."""
        import asyncio

        async def fails_soon() -> None:
            await asyncio.sleep(0)
            raise TypeError("a child's own error")

        async def with_a_group() -> None:
            async with asyncio.TaskGroup() as group:
                group.create_task(fails_soon())

        @onlooker.tool
        async def fan_out() -> None:
            await with_a_group()

        async def program(ctx: ExecutionContext) -> None:
            await with_a_group()

        async def program_after_a_tool(ctx: ExecutionContext) -> None:
            with contextlib.suppress(ExceptionGroup):
                await ctx.call("fan_out")
            raise Oops("later")

        async def pre_hook(context: onlooker.ToolUseContext) -> None:
            await with_a_group()

        async def program_after_a_hook(ctx: ExecutionContext) -> None:
            with contextlib.suppress(onlooker.ToolBlockedError):
                await ctx.call("add", a=1, b=2)
            raise Oops("later")

        hooks = [onlooker.HookMatcher(pattern="add", pre=(pre_hook,))]
        async with ExecutionEngine(tools=[*TOOLS, fan_out], hooks=hooks) as engine:
            results = [
                await engine.execute(program),
                await engine.execute(program_after_a_tool),
                await engine.execute(program_after_a_hook),
            ]
            task = asyncio.current_task()
            assert task is not None and task.cancelling() == 0
        assert [(r.status, r.error and r.error.type) for r in results] == [
            ("failed", "ExceptionGroup"),
            ("failed", "Oops"),
            ("failed", "Oops"),
        ]

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio's Cancelled is never stray
    async def test_a_stray_cancelled_error_fails_the_execution_and_stays_in(
        self, check_stream: Check
    ) -> None:
        """A program that awaits a task it cancelled gets a CancelledError nobody meant for
        it: the execution (and its child) failed, and the caller, not cancelled, gets a
        result rather than a cancellation."""
        import asyncio

        async def child(ctx: ExecutionContext) -> None:
            task = asyncio.ensure_future(asyncio.sleep(10))
            await asyncio.sleep(0)
            task.cancel()
            await task

        async def parent(ctx: ExecutionContext) -> str:
            result = await ctx.spawn(child)
            assert result.status == "failed"
            raise asyncio.CancelledError  # by hand, as well

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=TOOLS) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(parent)
            assert await engine.execute(_returns_one) is not None  # the caller goes on
        assert result.status == "failed"
        assert result.error is not None and result.error.cause == "defect"
        assert "nothing cancelled it" in result.error.message
        finished = recorder.of(ExecutionFinished)
        assert [(e.status, e.error and e.error.type) for e in finished] == [
            ("failed", "CancelledError"),
            ("failed", "CancelledError"),
        ]
        check_stream(recorder.events)

    async def test_a_stray_cancellation_raised_by_hand_fails_the_execution(self) -> None:
        """On either backend (trio's Cancelled raised outside the scope it came from)."""

        async def program(ctx: ExecutionContext) -> None:
            raise await stray_cancellation()

        recorder = RecordingObserver()
        async with ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            result = await engine.execute(program)  # returns: the caller is not cancelled
        name = anyio.get_cancelled_exc_class().__name__
        assert result.status == "failed" and result.error is not None
        assert (result.error.type, result.error.cause) == (name, "defect")
        assert f"the program raised {name}, but nothing cancelled it" in result.error.message


async def _never_answers(_: Elicitation) -> InteractionResponse:
    await anyio.sleep_forever()
    raise AssertionError


async def _bystander(ctx: ExecutionContext) -> str:
    answer = await ctx.elicit("a bystander's question")
    return answer.action


class TestObserverBaseException:
    async def test_stops_the_execution_before_the_tool_runs(self, check_stream: Check) -> None:
        ran: list[int] = []

        @onlooker.tool
        def record(n: int) -> int:
            ran.append(n)
            return n

        def stop_on_call(event: ExecutionEvent) -> None:
            if isinstance(event, ToolCallStarted):
                raise Stop

        async def program(ctx: ExecutionContext) -> None:
            await ctx.call(record, n=1)
            ran.append(99)

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[record]) as engine:
            engine.bus.subscribe(recorder)
            engine.bus.subscribe(stop_on_call, name="stopper")
            with pytest.raises(Stop):
                await engine.execute(program)
            assert ran == [], "neither the tool nor the rest of the program ran"
            assert engine.bus.statistics().observer_errors == 0
        assert recorder.kinds() == [
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
            "ExecutionFinished",
        ]
        assert recorder.of(ToolCallFinished)[0].status == "cancelled"
        assert recorder.of(ExecutionFinished)[0].status == "cancelled"
        check_stream(recorder.events)

    @pytest.mark.parametrize(
        ("kind", "case"),
        [
            ("ToolCallStarted", "skipped"),
            ("ToolCallStarted", "blocked"),
            ("ToolCallStarted", "unknown tool"),
            ("ToolCallStarted", "invalid arguments"),
            ("InteractionStarted", "question"),
        ],
    )
    async def test_on_a_refused_call_or_a_question_the_pair_still_closes(
        self, kind: str, case: str, check_stream: Check
    ) -> None:
        def stop(event: ExecutionEvent) -> None:
            if event.kind == kind:
                raise Stop

        def decide(use: onlooker.ToolUseContext) -> onlooker.PreHookResult:
            action = onlooker.HookAction.SKIP if case == "skipped" else onlooker.HookAction.BLOCK
            return onlooker.PreHookResult(action=action)

        async def program(ctx: ExecutionContext) -> None:
            if case == "question":
                await ctx.elicit("go on?")
            elif case == "unknown tool":
                await ctx.call("nope", a=1)
            elif case == "invalid arguments":
                await ctx.call(add, a="not a number")
            else:
                await ctx.call(add, a=1)

        hooks = [onlooker.HookMatcher(pre=(decide,))] if case in ("skipped", "blocked") else []
        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[add], hooks=hooks) as engine:
            engine.bus.subscribe(recorder)
            engine.bus.subscribe(stop, name="stopper")
            with pytest.raises(Stop):
                await engine.execute(program)
        closes = "ToolCallFinished" if kind == "ToolCallStarted" else "InteractionResolved"
        assert recorder.kinds()[-2:] == [closes, "ExecutionFinished"]
        closing = recorder.events[-2]
        assert isinstance(closing, ToolCallFinished | InteractionResolved)
        assert closing.status == "cancelled"
        check_stream(recorder.events)

    async def test_on_a_closing_event_of_the_close_itself_the_close_still_ends(self) -> None:
        """Raised on the ``ExecutionFinished`` the close sends for a tracked run left open,
        it comes out of ``async with`` once the close is done: every other run closed, the
        async observers flushed, the plugins torn down (it used to hang for ever)."""
        torn_down: list[str] = []

        @contextlib.asynccontextmanager
        async def extension(_ctx: onlooker.PluginContext) -> AsyncIterator[str]:
            yield "ext"
            torn_down.append("ext")

        received: list[str] = []

        async def slow(event: ExecutionEvent) -> None:
            await anyio.sleep(0.01)
            received.append(event.kind)

        plugin = onlooker.define_plugin(id="p", extension=extension, observer=lambda _: slow)

        def stop(event: ExecutionEvent) -> None:
            if event.kind == "ExecutionFinished":
                raise Stop

        recorder = RecordingObserver()
        with anyio.fail_after(10):
            with pytest.raises(Stop):
                async with ExecutionEngine(plugins=[plugin], shutdown_timeout=5) as engine:
                    engine.bus.subscribe(recorder)
                    engine.bus.subscribe(stop, name="stopper")
                    for name in ("one", "two"):
                        await engine.track(name).start()
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["cancelled", "cancelled"]
        assert received.count("ExecutionFinished") == 2  # the async observer was flushed
        assert torn_down == ["ext"]

    async def test_keyboard_interrupt_from_a_plugin(self) -> None:
        def interrupt(event: ExecutionEvent) -> None:
            if event.kind == "ExecutionStarted":
                raise KeyboardInterrupt

        plugin = onlooker.define_plugin(id="ki", observer=lambda _: interrupt)
        ran: list[bool] = []

        async def program(ctx: ExecutionContext) -> None:
            ran.append(True)

        async with ExecutionEngine(plugins=[plugin]) as engine:
            with pytest.raises(KeyboardInterrupt):
                await engine.execute(program)
        assert ran == []


class TestEngineBlock:
    async def test_body_exception_is_not_wrapped(self) -> None:
        with pytest.raises(KeyError) as info:
            async with ExecutionEngine():
                raise KeyError("mine")
        assert type(info.value) is KeyError

    async def test_body_exception_with_a_paused_execution(self, check_stream: Check) -> None:
        recorder = RecordingObserver()

        async def program(ctx: ExecutionContext) -> None:
            await ctx.elicit("?")

        with pytest.raises(KeyError):
            async with ExecutionEngine() as engine:
                engine.bus.subscribe(recorder)
                await engine.execute_with_pause(program)
                raise KeyError("mine")
        assert recorder.of(ExecutionFinished)[0].status == "cancelled"
        check_stream(recorder.events)

    async def test_body_base_exception_is_not_wrapped(self) -> None:
        with pytest.raises(Stop):
            async with ExecutionEngine():
                raise Stop

    async def test_body_cancelled_from_outside(self) -> None:
        with anyio.move_on_after(0.01) as scope:
            async with ExecutionEngine():
                await anyio.sleep_forever()
        assert scope.cancelled_caught


class TestChildren:
    async def test_spawn_records_the_tree(self, check_stream: Check) -> None:
        async def grandchild(ctx: ExecutionContext) -> int:
            return ctx.depth

        async def child(ctx: ExecutionContext) -> int:
            inner = await ctx.spawn(grandchild, phase="deep")
            assert inner.value is not None
            return inner.value + 10

        @onlooker.tool
        async def delegate() -> int:
            nested = await onlooker.current_context().spawn(child, task_id="sub")
            assert nested.value is not None
            return nested.value

        async def parent(ctx: ExecutionContext) -> Any:
            direct = await ctx.spawn(child, task_id="kid", input={"x": 1})
            via_tool = await ctx.call(delegate)
            return [direct.value, via_tool]

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[delegate]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(parent)
        assert result.value == [12, 12]
        check_stream(recorder.events)
        starts = recorder.of(ExecutionStarted)
        assert len(starts) == 5
        root = starts[0]
        assert root.attribution.depth == 0
        assert root.attribution.parent_execution_id is None
        kid = starts[1]
        assert kid.attribution.parent_execution_id == root.execution_id
        assert kid.attribution.parent_tool_call_id is None
        assert (kid.attribution.depth, kid.attribution.task_id) == (1, "kid")
        assert kid.input == {"x": 1}
        assert kid.trigger.kind == "spawn"
        grand = starts[2]
        assert grand.attribution.parent_execution_id == kid.execution_id
        assert (grand.attribution.depth, grand.attribution.phase) == (2, "deep")
        assert grand.attribution.task_id == "kid"
        call = recorder.of(ToolCallStarted)[0]
        sub = starts[3]
        assert sub.attribution.parent_tool_call_id == call.tool_call_id
        assert sub.attribution.parent_execution_id == root.execution_id
        assert sub.attribution.task_id == "sub"

    async def test_failing_child_is_a_result(self) -> None:
        async def child(ctx: ExecutionContext) -> None:
            raise Oops("child")

        async def parent(ctx: ExecutionContext) -> str:
            outcome = await ctx.spawn(child)
            assert outcome.error is not None
            return outcome.status

        result, recorder = await run(parent, tools=TOOLS)
        assert result.value == "failed"
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["failed", "completed"]

    async def test_child_elicitation_goes_to_the_handler(self) -> None:
        asked: list[str] = []

        async def child(ctx: ExecutionContext) -> Any:
            return (await ctx.elicit("child asks")).content

        async def parent(ctx: ExecutionContext) -> Any:
            return (await ctx.spawn(child)).value

        async def handler(question: Elicitation) -> InteractionResponse:
            asked.append(question.execution_id)
            return InteractionResponse.accept({"a": 1})

        result, recorder = await run(parent, tools=TOOLS, on_elicitation=handler)
        assert result.value == {"a": 1}
        child_id = recorder.of(ExecutionStarted)[1].execution_id
        assert asked == [child_id]
        assert recorder.of(InteractionStarted)[0].execution_id == child_id

    def test_current_context_outside(self) -> None:
        with pytest.raises(RuntimeError, match="no onlooker execution"):
            onlooker.current_context()


async def _asks(ctx: ExecutionContext) -> None:
    await ctx.elicit("go on?")


async def _returns_one(ctx: ExecutionContext) -> int:
    return 1


class TestConcurrency:
    async def test_300_concurrent_executions_lose_nothing(self, check_stream: Check) -> None:
        sync_seen: list[ExecutionEvent] = []
        async_seen: list[ExecutionEvent] = []

        async def handle(event: ExecutionEvent) -> None:
            async_seen.append(event)

        plugins = [
            onlooker.define_plugin(id="sync", observer=lambda _: sync_seen.append),
            onlooker.define_plugin(id="async", observer=lambda _: handle, queue_size=16),
        ]
        results: list[onlooker.ExecutionResult[Any]] = []

        async def program(ctx: ExecutionContext) -> int:
            total = await ctx.call("add", a=1)
            return int(total) + int(await ctx.call("fetch", url="u") == "<u>")

        async def one() -> None:
            results.append(await engine.execute(program))

        async with (
            ExecutionEngine(tools=TOOLS, plugins=plugins) as engine,
            anyio.create_task_group() as tg,
        ):
            for _ in range(300):
                tg.start_soon(one)
        assert len(results) == 300
        assert all(r.value == 3 for r in results)
        assert len(sync_seen) == len(async_seen) == 300 * 6
        assert async_seen == sync_seen, "the async observer saw the same order"
        check_stream(sync_seen)
        stats = engine.bus.statistics()
        assert (stats.emitted, stats.delivered, stats.dropped) == (1800, 3600, 0)

    async def test_async_observers_flushed_in_order_on_close(self, check_stream: Check) -> None:
        order: list[tuple[str, int]] = []
        slow_seen: list[tuple[str, int]] = []

        class Slow:
            async def handle(self, event: ExecutionEvent) -> None:
                await anyio.lowlevel.checkpoint()
                slow_seen.append((event.execution_id, event.seq))

        plugin = onlooker.define_plugin(id="slow", observer=lambda _: Slow())

        async def program(ctx: ExecutionContext) -> None:
            for n in range(3):
                await ctx.call("fetch", url=str(n))

        async with ExecutionEngine(tools=TOOLS, plugins=[plugin]) as engine:
            engine.bus.subscribe(lambda e: order.append((e.execution_id, e.seq)))
            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(engine.execute, program)
            assert len(order) == 20 * 8
        assert slow_seen == order


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot print me")


class TestOddFailures:
    async def test_an_exception_that_cannot_be_printed(self, check_stream: Check) -> None:
        @onlooker.tool
        def weird() -> None:
            raise Unprintable

        async def program(ctx: ExecutionContext) -> None:
            await ctx.call(weird)

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[weird]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(program)
        assert result.status == "failed"
        assert result.error is not None
        assert (result.error.type, result.error.message) == ("Unprintable", "Unprintable")
        assert recorder.of(ToolCallFinished)[0].status == "failed"
        check_stream(recorder.events)

    async def test_a_failed_task_group_names_what_failed_inside_it(self) -> None:
        async def program(ctx: ExecutionContext) -> None:
            async def broken() -> None:
                raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

            async with anyio.create_task_group() as tg:
                tg.start_soon(broken)

        result, _ = await run(program)
        assert result.status == "failed" and result.error is not None
        assert result.error.type == "ExceptionGroup"
        assert result.error.message.endswith(
            "(1 sub-exception): TypeError: unsupported operand type(s) for +: 'int' and 'str'"
        )

    def test_a_large_group_names_its_first_errors_nested_ones_opened(self) -> None:
        from onlooker._results import error_info

        nested = ExceptionGroup("inner", [KeyError("k"), OSError("disk")])
        group = ExceptionGroup("outer", [ValueError("v"), nested, Oops("x"), Oops("y")])
        assert error_info(group).message == (
            "outer (4 sub-exceptions): ValueError: v; KeyError: 'k'; OSError: disk; and 2 more"
        )
        deep: ExceptionGroup[Exception] = ExceptionGroup("leaf", [Oops("deepest")])
        for level in range(3000):  # deeper than Python's recursion limit
            deep = ExceptionGroup(f"level {level}", [deep])
        assert error_info(deep).message.endswith("(1 sub-exception): Oops: deepest")


class TestProgramOwnScopes:
    async def test_concurrent_calls_in_one_execution(self, check_stream: Check) -> None:
        async def program(ctx: ExecutionContext) -> int:
            results: list[str] = []

            async def one(n: int) -> None:
                results.append(await ctx.call("fetch", url=str(n)))

            async with anyio.create_task_group() as tg:
                for n in range(20):
                    tg.start_soon(one, n)
            return len(results)

        result, recorder = await run(program, tools=TOOLS)
        assert result.value == 20
        assert len(recorder) == 42
        assert [e.seq for e in recorder] == list(range(42))
        check_stream(recorder.events)

    async def test_the_program_cancels_one_call(self, check_stream: Check) -> None:
        async def program(ctx: ExecutionContext) -> str:
            with anyio.move_on_after(0.01):
                await ctx.call("hang")
            return str(await ctx.call("fetch", url="after"))

        result, recorder = await run(program, tools=TOOLS)
        assert (result.status, result.value) == ("completed", "<after>")
        assert [f.status for f in recorder.of(ToolCallFinished)] == ["cancelled", "completed"]
        check_stream(recorder.events)

    async def test_the_program_cancels_a_child(self, check_stream: Check) -> None:
        async def child(ctx: ExecutionContext) -> None:
            await ctx.call("hang")

        async def program(ctx: ExecutionContext) -> str:
            with anyio.move_on_after(0.01):
                await ctx.spawn(child)
            return "parent goes on"

        result, recorder = await run(program, tools=TOOLS)
        assert result.value == "parent goes on"
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["cancelled", "completed"]
        check_stream(recorder.events)


class SlowObserver:
    """An async observer feeding ``seen`` each event ``delay`` seconds late; while held, it
    takes none (see :func:`queue_for`)."""

    def __init__(self, delay: float, seen: RecordingObserver) -> None:
        self.delay = delay
        self.seen = seen
        self._released: anyio.Event | None = None

    def hold(self) -> None:
        self._released = anyio.Event()

    def release(self) -> None:
        if self._released is not None:
            self._released.set()

    async def __call__(self, event: ExecutionEvent) -> None:
        if self._released is not None:
            await self._released.wait()
        await anyio.sleep(self.delay)
        self.seen.handle(event)


def slow_recording(delay: float) -> tuple[RecordingObserver, SlowObserver]:
    """A recorder, and an async observer feeding it each event ``delay`` seconds late."""
    seen = RecordingObserver()
    return seen, SlowObserver(delay, seen)


async def queue_for(engine: ExecutionEngine, slow: SlowObserver) -> None:
    """Subscribe ``slow`` and run four executions: 16 events wait for it (at 20 ms each, a
    flush of 0.3 s for the close). It is held while they run, so that all 16 still wait
    when this returns however long the executions took (on a loaded machine they took
    longer than its flush, which was over before the cancellations the tests send)."""
    slow.hold()
    engine.bus.subscribe(slow, name="slow")
    try:
        for _ in range(4):
            await engine.execute(fetch_page_program)
    finally:
        slow.release()


async def cleans_up_slowly(ctx: ExecutionContext) -> None:
    """Runs until cancelled, then takes 0.3 s to clean up (a close waits for it)."""
    try:
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.3)


class TestShutdownTimeout:
    """Issue 12, item 2: a hung async observer cannot hold the engine's close."""

    async def test_close_ends_after_the_shutdown_timeout(
        self, caplog: pytest.LogCaptureFixture, check_stream: Check
    ) -> None:
        async def hung(event: ExecutionEvent) -> None:
            await anyio.sleep_forever()

        async def asks(ctx: ExecutionContext) -> None:
            await ctx.call(add, a=1)
            await ctx.elicit("go?")

        healthy = RecordingObserver()
        plugin = onlooker.define_plugin(id="hung", observer=lambda _: hung, overflow="drop")
        with anyio.fail_after(10):
            async with ExecutionEngine(
                tools=TOOLS, plugins=[plugin], shutdown_timeout=0.05
            ) as engine:
                engine.bus.subscribe(healthy)
                paused = await engine.execute_with_pause(asks)
                assert isinstance(paused, onlooker.PausedExecution)
        stats = engine.bus.statistics()
        # every event of the paused execution, its closing ones (emitted on close) too
        assert len(healthy) == 6
        check_stream(healthy.events)
        assert stats.dropped_by_observer == {"hung": 6}
        assert stats.dropped_by_reason == {"shutdown": 6}
        assert stats.queued == 0
        (record,) = [r for r in caplog.records if "shutdown timeout" in r.getMessage()]
        assert "hung" in record.getMessage() and "6" in record.getMessage()

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's native cancellation
    async def test_a_native_cancellation_during_the_close_still_flushes(
        self, caplog: pytest.LogCaptureFixture, check_stream: Check
    ) -> None:
        """``asyncio.run``'s Ctrl-C (or ``asyncio.timeout``) cancels the closing task, which
        anyio's shield does not keep out: the flush stopped there, and a healthy observer's
        waiting events were dropped as if the shutdown timeout had run out. Now the close
        goes on to its own bound and the cancellation comes out after it."""
        import asyncio

        seen, slow = slow_recording(0.02)

        task = asyncio.current_task()
        assert task is not None
        with pytest.raises(asyncio.CancelledError):
            async with ExecutionEngine(tools=TOOLS, shutdown_timeout=10) as engine:
                await queue_for(engine, slow)
                # the cancellation comes at 0.05 s, during the 0.3 s flush
                asyncio.get_running_loop().call_later(0.05, task.cancel)
        assert task.uncancel() == 0  # still counted when raised (asyncio.run, timeouts read it)
        assert len(seen) == 16
        check_stream(seen.events)
        assert engine.bus.statistics().dropped_by_reason == {}
        assert any("was interrupted (CancelledError)" in r.getMessage() for r in caplog.records)

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's native cancellation
    async def test_a_native_cancellation_while_executions_end_still_closes_the_rest(
        self,
    ) -> None:
        """Cancelled while the close waited for another task's execution to end, the close
        skipped the observers' flush and the plugins' close: the engine's task group then
        waited for ever on the observers' idle workers."""
        import asyncio

        seen, slow = slow_recording(0.01)

        task = asyncio.current_task()
        assert task is not None
        with anyio.move_on_after(20) as guard, pytest.raises(asyncio.CancelledError):
            async with ExecutionEngine(tools=TOOLS, shutdown_timeout=10) as engine:
                engine.bus.subscribe(slow, name="slow")
                await engine.execute(fetch_page_program)
                other = asyncio.create_task(engine.execute(cleans_up_slowly))
                await asyncio.sleep(0.05)
                asyncio.get_running_loop().call_later(0.1, task.cancel)
        assert not guard.cancel_called, "the close hung"
        task.uncancel()
        assert (await other).status == "cancelled"
        assert len(seen) == 6  # both executions, whole
        assert engine.bus.statistics().dropped_by_reason == {}

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's native cancellation
    async def test_an_interruption_taken_by_the_close_wins_over_a_plugins_failing_close(
        self,
    ) -> None:
        """Ctrl-C during the close, then a plugin's teardown raising: the program got the
        plugin's error, and the Ctrl-C was lost."""
        import asyncio
        from contextlib import asynccontextmanager

        @asynccontextmanager
        async def breaks_on_close(ctx: onlooker.PluginContext) -> AsyncIterator[None]:
            yield
            raise RuntimeError("teardown failed")

        plugin = onlooker.define_plugin(id="breaks", extension=breaks_on_close)
        task = asyncio.current_task()
        assert task is not None
        with pytest.raises(asyncio.CancelledError) as raised:
            async with ExecutionEngine(tools=TOOLS, plugins=[plugin]) as engine:
                other = asyncio.create_task(engine.execute(cleans_up_slowly))
                await asyncio.sleep(0.05)
                asyncio.get_running_loop().call_later(0.1, task.cancel)
        task.uncancel()
        await other
        assert isinstance(raised.value.__context__, onlooker.PluginError)

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's native cancellation
    async def test_an_interruption_the_flush_took_wins_over_a_plugins_failing_close(
        self,
    ) -> None:
        """Ctrl-C during the observers' flush, then a plugin's teardown raising: the
        plugin's error came out, and the Ctrl-C the flush had taken was lost."""
        import asyncio
        from contextlib import asynccontextmanager

        @asynccontextmanager
        async def breaks_on_close(ctx: onlooker.PluginContext) -> AsyncIterator[None]:
            yield
            raise RuntimeError("teardown failed")

        seen, slow = slow_recording(0.02)
        plugin = onlooker.define_plugin(id="breaks", extension=breaks_on_close)
        task = asyncio.current_task()
        assert task is not None
        with pytest.raises(asyncio.CancelledError) as raised:
            async with ExecutionEngine(tools=TOOLS, plugins=[plugin]) as engine:
                await queue_for(engine, slow)
                # the cancellation comes at 0.05 s, during the 0.3 s flush
                asyncio.get_running_loop().call_later(0.05, task.cancel)
        assert task.uncancel() == 0
        assert isinstance(raised.value.__context__, onlooker.PluginError)
        assert len(seen) == 16

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's native cancellation
    async def test_a_second_interruption_ends_the_flush_and_says_so(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        import asyncio

        _, slow = slow_recording(0.02)

        task = asyncio.current_task()
        assert task is not None
        with pytest.raises(asyncio.CancelledError):
            async with ExecutionEngine(tools=TOOLS, shutdown_timeout=10) as engine:
                await queue_for(engine, slow)
                loop = asyncio.get_running_loop()
                loop.call_later(0.05, task.cancel)
                loop.call_later(0.1, task.cancel)  # the flush needs 0.3 s: it ends here
        while task.uncancel():
            pass
        dropped = engine.bus.statistics().dropped_by_reason["shutdown"]
        assert 0 < dropped < 16
        messages = [r.getMessage() for r in caplog.records]
        assert any(
            "stopped (the close was interrupted again (CancelledError))" in m
            and f"dropped {dropped} event(s)" in m
            for m in messages
        ), messages

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's native cancellation
    async def test_a_native_cancellation_during_a_cancelled_blocks_close_goes_on(self) -> None:
        """The block was cancelled by an anyio scope, then a native cancellation (Ctrl-C)
        came during the close: the scope took the re-raised cancellation for its own and
        swallowed it, and the program went on as if Ctrl-C never happened."""
        import asyncio

        seen, slow = slow_recording(0.02)

        task = asyncio.current_task()
        assert task is not None
        went_on = False
        with pytest.raises(asyncio.CancelledError):
            with anyio.move_on_after(0.05):
                async with ExecutionEngine(tools=TOOLS, shutdown_timeout=10) as engine:
                    await queue_for(engine, slow)
                    asyncio.get_running_loop().call_later(0.1, task.cancel)
                    await anyio.sleep_forever()  # until the scope cancels the block
            went_on = True
        assert not went_on
        assert task.uncancel() == 0
        assert len(seen) == 16

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's native cancellation
    async def test_a_native_cancellation_outlasted_by_an_execution_still_comes_out(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The engine in the caller's task group, whose execution's clean-up outlasts the
        shutdown timeout, and a Ctrl-C during the close: the close re-raised the Ctrl-C
        chained to its own deadline's cancellation, which the task group took for anyio's
        and swallowed, so the program went on as if Ctrl-C never happened."""
        import asyncio

        task = asyncio.current_task()
        assert task is not None

        async def cleans_up_slowly_through_a_ctrl_c(ctx: ExecutionContext) -> None:
            try:
                await anyio.sleep_forever()
            finally:  # the close cancelled it and waits for it: the Ctrl-C comes now
                asyncio.get_running_loop().call_soon(task.cancel)
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(0.3)

        went_on = False
        with anyio.move_on_after(10) as guard, pytest.raises(asyncio.CancelledError):
            async with (
                anyio.create_task_group() as group,
                ExecutionEngine(tools=TOOLS, shutdown_timeout=0.1) as engine,
            ):
                group.start_soon(engine.execute, cleans_up_slowly_through_a_ctrl_c)  # 0.3 s
                await anyio.sleep(0.05)
            went_on = True
        assert not guard.cancel_called, "the close hung"
        assert not went_on
        assert task.uncancel() == 0
        assert any("still running after 0.1 s" in r.getMessage() for r in caplog.records)

    async def test_aclose_takes_its_own_timeout(self) -> None:
        async def hung(event: ExecutionEvent) -> None:
            await anyio.sleep_forever()

        engine = ExecutionEngine(tools=TOOLS)  # its own shutdown timeout would wait 30 s
        with anyio.fail_after(10):
            await engine.__aenter__()
            engine.bus.subscribe(hung, name="hung", overflow="drop")
            await engine.execute(fetch_page_program)
            await engine.aclose(shutdown_timeout=0.05)
        assert engine.bus.statistics().dropped_by_reason == {"shutdown": 4}

    async def test_a_clean_close_loses_nothing(self) -> None:
        seen: list[int] = []

        async def slow(event: ExecutionEvent) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(event.seq)

        async with ExecutionEngine(tools=TOOLS, shutdown_timeout=5) as engine:
            engine.bus.subscribe(slow)
            for _ in range(20):
                await engine.execute(fetch_page_program)
        assert len(seen) == 80
        assert engine.bus.statistics().dropped == 0

    async def test_a_cancelled_caller_cuts_a_hung_observer_and_counts_it(self) -> None:
        async def hung(event: ExecutionEvent) -> None:
            await anyio.sleep_forever()

        with anyio.fail_after(10):
            with anyio.move_on_after(0.05):
                async with ExecutionEngine(tools=TOOLS, shutdown_timeout=0.05) as engine:
                    engine.bus.subscribe(hung, name="hung", overflow="drop")
                    await engine.execute(fetch_page_program)
                    await anyio.sleep_forever()
        assert engine.bus.statistics().dropped_by_observer == {"hung": 4}

    @pytest.mark.parametrize("value", [0, -5, float("inf")])
    def test_bad_shutdown_timeout(self, value: float) -> None:
        with pytest.raises(ValueError, match="shutdown_timeout"):
            ExecutionEngine(shutdown_timeout=value)

    async def test_bad_aclose_timeout(self) -> None:
        async with ExecutionEngine() as engine:
            with pytest.raises(ValueError, match="shutdown_timeout"):
                await engine.aclose(shutdown_timeout=-1)

    async def test_another_task_can_close_the_engine(
        self, check_stream: Callable[[Sequence[ExecutionEvent]], None]
    ) -> None:
        """A shutdown task closes it; the entering task leaves the task group on its way out."""
        recorder = RecordingObserver()
        closed = anyio.Event()

        async def close_it(engine: ExecutionEngine) -> None:
            await engine.aclose()
            closed.set()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks, ExecutionEngine() as engine:
                engine.bus.subscribe(recorder)
                paused = await engine.execute_with_pause(_asks)
                assert not isinstance(paused, onlooker.ExecutionResult)
                tasks.start_soon(close_it, engine)
                await closed.wait()
                with pytest.raises(RuntimeError, match="closed"):
                    await engine.execute(_returns_one)
                result = await engine.resume(
                    paused.execution_id, onlooker.InteractionResponse("accept", {"ok": True})
                )
        assert isinstance(result, onlooker.ExecutionResult) and result.status == "cancelled"
        assert [e.kind for e in recorder.events][-2:] == [
            "InteractionResolved",
            "ExecutionFinished",
        ]
        check_stream(recorder.events)

    async def test_another_task_closing_cancels_an_inline_execution(
        self, check_stream: Callable[[Sequence[ExecutionEvent]], None]
    ) -> None:
        """It used to run on after the close, the plugins torn down under it and its events
        dropped for the async observers."""
        calls: list[int] = []
        five_calls = anyio.Event()

        @onlooker.tool
        async def slow(n: int) -> int:
            calls.append(n)
            if len(calls) == 5:
                five_calls.set()
            await anyio.sleep(0.01)
            return n

        async def loops(ctx: ExecutionContext) -> str:
            for n in range(1000):
                await ctx.call(slow, n=n)
            return "done"

        received: list[ExecutionEvent] = []

        async def slow_observer(event: ExecutionEvent) -> None:
            await anyio.lowlevel.checkpoint()
            received.append(event)

        open_while: list[bool] = []

        @contextlib.asynccontextmanager
        async def extension(ctx: onlooker.PluginContext) -> AsyncIterator[list[bool]]:
            yield open_while
            open_while.append(False)  # torn down: nothing may run after this

        plugin = onlooker.define_plugin(
            id="p", extension=extension, observer=lambda _: slow_observer
        )

        async def close_soon(engine: ExecutionEngine) -> None:
            await five_calls.wait()
            await engine.aclose()

        with anyio.fail_after(10):
            async with (
                anyio.create_task_group() as tasks,
                ExecutionEngine(tools=[slow], plugins=[plugin]) as engine,
            ):
                tasks.start_soon(close_soon, engine)
                result = await engine.execute(loops)
                ran = len(calls)
        assert result.status == "cancelled" and result.value is None
        assert result.error is not None and result.error.cause == "interrupt"
        assert ran < 1000 and len(calls) == ran, "nothing ran after the close"
        assert open_while == [False]
        assert received[-1].kind == "ExecutionFinished"
        assert isinstance(received[-1], ExecutionFinished) and received[-1].status == "cancelled"
        check_stream(received)
        assert engine.bus.statistics().dropped == 0

    async def test_two_tasks_closing_at_once_close_it_once(self) -> None:
        closes: list[str] = []

        @contextlib.asynccontextmanager
        async def slow_close(ctx: onlooker.PluginContext) -> AsyncIterator[None]:
            yield
            await anyio.sleep(0.05)  # the close takes a while: the other closer waits for it
            closes.append("closed")

        plugin = onlooker.define_plugin(id="slow-close", extension=slow_close)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                async with ExecutionEngine(plugins=[plugin]) as engine:
                    tasks.start_soon(engine.aclose)
                    await anyio.lowlevel.checkpoint()  # the other task starts closing
                with pytest.raises(RuntimeError, match="closed"):
                    await engine.execute(_returns_one)
        assert closes == ["closed"]

    async def test_aclose_after_a_failed_start_returns(self) -> None:
        def broken(ctx: onlooker.PluginContext) -> None:
            raise RuntimeError("cannot start")

        engine = ExecutionEngine(plugins=[onlooker.define_plugin(id="broken", extension=broken)])
        with pytest.raises(onlooker.PluginError):
            async with engine:
                pass
        with anyio.fail_after(5):
            await engine.aclose()  # it had waited for a close that never came

    @pytest.mark.parametrize("how", ["inline", "detached"])
    async def test_closing_from_inside_the_engines_own_execution_is_refused(self, how: str) -> None:
        async def closes_its_engine(ctx: ExecutionContext) -> None:
            await engine.aclose()

        with anyio.fail_after(10):
            async with ExecutionEngine() as engine:
                if how == "inline":
                    result = await engine.execute(closes_its_engine)
                else:
                    outcome = await engine.execute_with_pause(closes_its_engine)
                    assert isinstance(outcome, onlooker.ExecutionResult)
                    result = outcome
        assert result.status == "failed" and result.error is not None
        assert "from inside one of the engine's own executions" in result.error.message


async def fetch_page_program(ctx: ExecutionContext) -> str:
    """One call of an async tool: four events."""
    return await ctx.call(fetch_page, url="a")
