"""execute_with_pause / resume / cancel: detached executions, scope, expiry, closing."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import onlooker
from onlooker import (
    ExecutionContext,
    ExecutionEngine,
    ExecutionEvent,
    ExecutionExpiredError,
    ExecutionFinished,
    ExecutionNotPausedError,
    ExecutionResult,
    ExecutionStarted,
    InteractionResolved,
    InteractionResponse,
    InteractionStarted,
    PausedExecution,
    ToolCallFinished,
    UnknownExecutionError,
)
from onlooker.testing import RecordingObserver

pytestmark = pytest.mark.anyio

Check = Callable[[Sequence[ExecutionEvent]], None]
ACCEPT = InteractionResponse.accept


@onlooker.tool
def note(text: str) -> str:
    """Echo ``text``."""
    return text


async def ask_twice(ctx: ExecutionContext) -> list[Any]:
    first = await ctx.elicit("name?", schema={"type": "object"})
    await ctx.call(note, text="between")
    second = await ctx.elicit("sure?")
    return [first.content, second.action]


def paused(outcome: ExecutionResult[Any] | PausedExecution) -> PausedExecution:
    assert isinstance(outcome, PausedExecution), outcome
    return outcome


def finished(outcome: ExecutionResult[Any] | PausedExecution) -> ExecutionResult[Any]:
    assert isinstance(outcome, ExecutionResult), outcome
    return outcome


class FinishWatcher:
    """A sync observer that lets a test wait for an execution's end without sleeping."""

    def __init__(self) -> None:
        self.done = anyio.Event()

    def handle(self, event: ExecutionEvent) -> None:
        if isinstance(event, ExecutionFinished) and event.attribution.depth == 0:
            self.done.set()


class TestPauseResume:
    async def test_round_trip(self, check_stream: Check) -> None:
        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[note]) as engine:
            with onlooker.observing(recorder):
                first = paused(await engine.execute_with_pause(ask_twice, trigger="api"))
            assert first.message == "name?"
            assert first.requested_schema == {"type": "object"}
            assert first.asking_execution_id == first.execution_id
            second = paused(await engine.resume(first.execution_id, ACCEPT({"name": "Ada"})))
            assert second.execution_id == first.execution_id
            assert second.interaction_id != first.interaction_id
            assert second.message == "sure?"
            result = finished(
                await engine.resume(first.execution_id, InteractionResponse.decline())
            )
        assert result.status == "completed"
        assert result.value == [{"name": "Ada"}, "decline"]
        assert result.execution_id == first.execution_id
        assert recorder.kinds() == [
            "ExecutionStarted",
            "InteractionStarted",
            "InteractionResolved",
            "ToolCallStarted",
            "ToolCallFinished",
            "InteractionStarted",
            "InteractionResolved",
            "ExecutionFinished",
        ]
        questions = recorder.of(InteractionStarted)
        assert [q.mode for q in questions] == ["paused", "paused"]
        assert [q.interaction_id for q in questions] == [
            first.interaction_id,
            second.interaction_id,
        ]
        answers = recorder.of(InteractionResolved)
        assert [(a.status, a.response) for a in answers] == [
            ("accepted", {"name": "Ada"}),
            ("declined", None),
        ]
        check_stream(recorder.events)

    async def test_a_program_that_never_asks_returns_its_result(self) -> None:
        async def quick(ctx: ExecutionContext) -> str:
            return await ctx.call(note, text="hi")

        async def broken(ctx: ExecutionContext) -> None:
            raise ValueError("broken")

        async with ExecutionEngine(tools=[note]) as engine:
            result = finished(await engine.execute_with_pause(quick))
            assert (result.status, result.value) == ("completed", "hi")
            failure = finished(await engine.execute_with_pause(broken))
            assert failure.status == "failed"
            assert failure.error is not None and failure.error.type == "ValueError"

    async def test_resume_unknown_id(self) -> None:
        async with ExecutionEngine() as engine:
            with pytest.raises(UnknownExecutionError, match="nope") as info:
                await engine.resume("nope", ACCEPT())
            assert info.value.execution_id == "nope"
            with pytest.raises(UnknownExecutionError):
                await engine.cancel("nope")

    async def test_resume_of_a_running_execution(self, check_stream: Check) -> None:
        gate = anyio.Event()

        @onlooker.tool
        async def wait() -> str:
            await gate.wait()
            return "waited"

        async def program(ctx: ExecutionContext) -> str:
            await ctx.elicit("go?")
            return await ctx.call(wait)

        recorder = RecordingObserver()
        outcomes: list[ExecutionResult[Any] | PausedExecution] = []
        async with ExecutionEngine(tools=[wait]) as engine:
            engine.bus.subscribe(recorder)
            pause = paused(await engine.execute_with_pause(program))

            async def answer() -> None:
                outcomes.append(await engine.resume(pause.execution_id, ACCEPT()))

            async with anyio.create_task_group() as tg:
                tg.start_soon(answer)
                await anyio.wait_all_tasks_blocked()
                with pytest.raises(ExecutionNotPausedError) as info:
                    await engine.resume(pause.execution_id, ACCEPT())
                assert info.value.execution_id == pause.execution_id
                gate.set()
        result = finished(outcomes[0])
        assert (result.status, result.value) == ("completed", "waited")
        assert recorder.kinds().count("InteractionResolved") == 1
        check_stream(recorder.events)

    async def test_second_concurrent_resume_is_refused(self) -> None:
        async with ExecutionEngine() as engine:
            pause = paused(await engine.execute_with_pause(ask_twice_no_tool))
            outcomes: list[ExecutionResult[Any] | PausedExecution] = []
            errors: list[BaseException] = []

            async def answer(content: dict[str, Any]) -> None:
                try:
                    outcomes.append(await engine.resume(pause.execution_id, ACCEPT(content)))
                except ExecutionNotPausedError as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(answer, {"n": 1})
                tg.start_soon(answer, {"n": 2})
            assert len(errors) == 1 and len(outcomes) == 1
            second = paused(outcomes[0])
            result = finished(await engine.resume(second.execution_id, ACCEPT({"n": 3})))
        assert result.value in ([{"n": 1}, {"n": 3}], [{"n": 2}, {"n": 3}])

    async def test_resume_of_a_finished_execution_returns_the_same_result(self) -> None:
        async with ExecutionEngine(tools=[note]) as engine:
            pause = paused(await engine.execute_with_pause(ask_twice))
            again = paused(await engine.resume(pause.execution_id, ACCEPT({"a": 1})))
            result = finished(await engine.resume(again.execution_id, ACCEPT()))
            assert await engine.resume(pause.execution_id, ACCEPT()) == result
            assert await engine.resume(pause.execution_id, InteractionResponse.cancel()) is result
            assert await engine.cancel(pause.execution_id) is result

    async def test_finished_results_are_kept_for_a_bounded_number(self) -> None:
        async def quick(ctx: ExecutionContext) -> int:
            return 1

        async with ExecutionEngine(keep_results=2) as engine:
            ids = [finished(await engine.execute_with_pause(quick)).execution_id for _ in range(3)]
            with pytest.raises(UnknownExecutionError):
                await engine.resume(ids[0], ACCEPT())
            assert finished(await engine.resume(ids[1], ACCEPT())).value == 1
            assert finished(await engine.resume(ids[2], ACCEPT())).value == 1

    async def test_resume_needs_a_response(self) -> None:
        async with ExecutionEngine(tools=[note]) as engine:
            pause = paused(await engine.execute_with_pause(ask_twice))
            with pytest.raises(TypeError, match="InteractionResponse"):
                await engine.resume(pause.execution_id, {"name": "x"})  # type: ignore[arg-type]
            # the execution is undisturbed
            assert isinstance(
                await engine.resume(pause.execution_id, ACCEPT({"x": 1})), PausedExecution
            )

    async def test_many_paused_at_once(self, check_stream: Check) -> None:
        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[note]) as engine:
            engine.bus.subscribe(recorder)
            pauses = [paused(await engine.execute_with_pause(ask_twice)) for _ in range(50)]
            assert len({p.execution_id for p in pauses}) == 50
            results: list[ExecutionResult[Any]] = []

            async def drive(pause: PausedExecution) -> None:
                outcome = await engine.resume(pause.execution_id, ACCEPT({"id": pause.message}))
                results.append(
                    finished(await engine.resume(paused(outcome).execution_id, ACCEPT()))
                )

            async with anyio.create_task_group() as tg:
                for pause in pauses:
                    tg.start_soon(drive, pause)
        assert len(results) == 50 and all(r.status == "completed" for r in results)
        check_stream(recorder.events)


async def ask_twice_no_tool(ctx: ExecutionContext) -> list[Any]:
    first = await ctx.elicit("one")
    second = await ctx.elicit("two")
    return [first.content, second.content]


class TestScopeSurvivesTheDetach:
    async def test_resume_from_another_task_with_another_scope(self, check_stream: Check) -> None:
        at_start = RecordingObserver()
        at_resume = RecordingObserver()
        outcomes: list[ExecutionResult[Any] | PausedExecution] = []
        async with ExecutionEngine(tools=[note]) as engine:
            with onlooker.observing(at_start):
                pause = paused(await engine.execute_with_pause(ask_twice))

            async def resume_elsewhere(response: InteractionResponse) -> None:
                with onlooker.observing(at_resume):
                    outcomes.append(await engine.resume(pause.execution_id, response))

            async with anyio.create_task_group() as tg:
                tg.start_soon(resume_elsewhere, ACCEPT({"who": "me"}))
            paused(outcomes[-1])

            async with anyio.create_task_group() as tg:  # and from a task with no scope
                tg.start_soon(engine.resume, pause.execution_id, ACCEPT())
        assert len(at_resume) == 0, "a scope only resume had gets nothing"
        assert at_start.kinds() == [
            "ExecutionStarted",
            "InteractionStarted",
            "InteractionResolved",
            "ToolCallStarted",
            "ToolCallFinished",
            "InteractionStarted",
            "InteractionResolved",
            "ExecutionFinished",
        ]
        check_stream(at_start.events)

    async def test_cancel_from_another_scope_reports_to_the_start_scope(
        self, check_stream: Check
    ) -> None:
        at_start = RecordingObserver()
        at_cancel = RecordingObserver()
        async with ExecutionEngine(tools=[note]) as engine:
            with onlooker.observing(at_start):
                pause = paused(await engine.execute_with_pause(ask_twice))
            with onlooker.observing(at_cancel):
                result = await engine.cancel(pause.execution_id)
        assert result.status == "cancelled"
        assert len(at_cancel) == 0
        assert at_start.kinds()[-2:] == ["InteractionResolved", "ExecutionFinished"]
        check_stream(at_start.events)

    async def test_attribution_survives_the_detach(self) -> None:
        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[note]) as engine:
            with onlooker.observing(recorder), onlooker.attribution(task_id="t", phase="p"):
                pause = paused(await engine.execute_with_pause(ask_twice))
            with onlooker.attribution(task_id="other"):
                outcome = await engine.resume(pause.execution_id, ACCEPT())
            await engine.resume(paused(outcome).execution_id, ACCEPT())
        assert {(e.attribution.task_id, e.attribution.phase) for e in recorder} == {("t", "p")}


class TestCancelAndClose:
    async def test_cancel_a_paused_execution(self, check_stream: Check) -> None:
        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[note]) as engine:
            engine.bus.subscribe(recorder)
            pause = paused(await engine.execute_with_pause(ask_twice))
            result = await engine.cancel(pause.execution_id)
            assert result.status == "cancelled"
            assert result.error is not None and result.error.cause == "interrupt"
            assert await engine.resume(pause.execution_id, ACCEPT()) is result
        resolved = recorder.of(InteractionResolved)[0]
        assert resolved.status == "cancelled"
        finish = recorder.of(ExecutionFinished)[0]
        assert (finish.status, finish.error) == ("cancelled", result.error)
        check_stream(recorder.events)

    async def test_cancel_a_running_execution(self, check_stream: Check) -> None:
        @onlooker.tool
        async def forever() -> None:
            await anyio.sleep_forever()

        async def program(ctx: ExecutionContext) -> None:
            await ctx.elicit("start?")
            await ctx.call(forever)

        recorder = RecordingObserver()
        outcomes: list[ExecutionResult[Any] | PausedExecution] = []
        async with ExecutionEngine(tools=[forever]) as engine:
            engine.bus.subscribe(recorder)
            pause = paused(await engine.execute_with_pause(program))

            async def answer() -> None:
                outcomes.append(await engine.resume(pause.execution_id, ACCEPT()))

            async with anyio.create_task_group() as tg:
                tg.start_soon(answer)
                await anyio.wait_all_tasks_blocked()
                result = await engine.cancel(pause.execution_id)
        assert result.status == "cancelled"
        assert outcomes == [result], "the waiting resume gets the final result"
        assert recorder.of(ToolCallFinished)[0].status == "cancelled"
        check_stream(recorder.events)

    async def test_a_caller_gone_before_the_first_pause_cancels_the_run(
        self, check_stream: Check
    ) -> None:
        """Nobody got its id (a request timed out): it must not wait out pause_timeout."""
        started = anyio.Event()

        async def slow_to_ask(ctx: ExecutionContext) -> None:
            started.set()
            await anyio.sleep(5)
            await ctx.elicit("too late")

        recorder = RecordingObserver()
        async with ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(engine.execute_with_pause, slow_to_ask)
                    await started.wait()
                    scope.cancel()
            with anyio.fail_after(5):
                while not recorder.of(ExecutionFinished):  # noqa: ASYNC110  # the run's own task
                    await anyio.sleep(0.01)
            (finish,) = recorder.of(ExecutionFinished)
            assert finish.status == "cancelled"
            assert not recorder.of(InteractionStarted)
            done = await engine.execute_with_pause(ask_twice)  # the engine goes on
            assert isinstance(done, PausedExecution)
        check_stream(recorder.events)

    async def test_close_cancels_paused_executions(self, check_stream: Check) -> None:
        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[note]) as engine:
            engine.bus.subscribe(recorder)
            for _ in range(5):
                paused(await engine.execute_with_pause(ask_twice))
        ends = recorder.of(ExecutionFinished)
        assert [e.status for e in ends] == ["cancelled"] * 5
        assert [e.status for e in recorder.of(InteractionResolved)] == ["cancelled"] * 5
        check_stream(recorder.events)

    async def test_close_delivers_closing_events_to_async_observers(
        self, check_stream: Check
    ) -> None:
        seen: list[ExecutionEvent] = []

        async def handle(event: ExecutionEvent) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(event)

        plugin = onlooker.define_plugin(id="late", observer=lambda _: handle)
        async with ExecutionEngine(tools=[note], plugins=[plugin]) as engine:
            for _ in range(3):
                paused(await engine.execute_with_pause(ask_twice))
        assert [e.kind for e in seen].count("ExecutionFinished") == 3
        check_stream(seen)


class TestExpiry:
    async def test_unanswered_pause_expires(self, check_stream: Check) -> None:
        recorder = RecordingObserver()
        watcher = FinishWatcher()
        async with ExecutionEngine(tools=[note], pause_timeout=0.02) as engine:
            engine.bus.subscribe(recorder)
            engine.bus.subscribe(watcher)
            pause = paused(await engine.execute_with_pause(ask_twice))
            await watcher.done.wait()
            result = finished(await engine.resume(pause.execution_id, ACCEPT()))
        assert result.status == "expired"
        assert result.error is not None
        assert (result.error.type, result.error.cause) == ("ExecutionExpiredError", "failure")
        resolved = recorder.of(InteractionResolved)[0]
        assert resolved.status == "expired"
        assert recorder.of(ExecutionFinished)[0].status == "expired"
        check_stream(recorder.events)

    async def test_expiry_wins_even_if_the_program_catches_it(self, check_stream: Check) -> None:
        caught: list[str] = []

        async def stubborn(ctx: ExecutionContext) -> str:
            try:
                await ctx.elicit("anyone?")
            except ExecutionExpiredError:
                caught.append("first")
            try:
                await ctx.elicit("still there?")
            except ExecutionExpiredError:
                caught.append("second")
            await ctx.call(note, text="after")
            return "done anyway"

        recorder = RecordingObserver()
        watcher = FinishWatcher()
        async with ExecutionEngine(tools=[note], pause_timeout=0.02) as engine:
            engine.bus.subscribe(recorder)
            engine.bus.subscribe(watcher)
            pause = paused(await engine.execute_with_pause(stubborn))
            await watcher.done.wait()
            result = finished(await engine.resume(pause.execution_id, ACCEPT()))
        assert caught == ["first", "second"]
        assert result.status == "expired"
        assert [r.status for r in recorder.of(InteractionResolved)] == ["expired", "expired"]
        assert recorder.of(ExecutionFinished)[0].status == "expired"
        check_stream(recorder.events)

    async def test_pauses_share_one_timer_each_keeping_its_own_deadline(self) -> None:
        """Unanswered pauses expire, answered ones do not, whatever their order; a
        question asked after an answer gets a whole timeout of its own."""
        recorder = RecordingObserver()
        all_ended = anyio.Event()

        def count(event: ExecutionEvent) -> None:
            if len(recorder.of(ExecutionFinished)) == 4:
                all_ended.set()

        async with ExecutionEngine(tools=[note], pause_timeout=0.3) as engine:
            engine.bus.subscribe(recorder)
            engine.bus.subscribe(count)
            pauses = [paused(await engine.execute_with_pause(ask_twice)) for _ in range(4)]
            answered = [pauses[0], pauses[2]]
            for pause in answered:  # their second question starts a fresh deadline
                paused(await engine.resume(pause.execution_id, ACCEPT()))
            with anyio.fail_after(10):
                await all_ended.wait()
            results = [finished(await engine.resume(p.execution_id, ACCEPT())) for p in pauses]
        assert [r.status for r in results] == ["expired"] * 4
        by_execution = {e.execution_id: e.status for e in recorder.of(InteractionResolved)}
        assert len(recorder.of(InteractionResolved)) == 6  # 2 answered + 4 expired questions
        assert set(by_execution.values()) == {"expired"}  # each run's last question expired
        accepted = [r for r in recorder.of(InteractionResolved) if r.status == "accepted"]
        assert {r.execution_id for r in accepted} == {p.execution_id for p in answered}

    async def test_a_detached_run_changes_nothing_in_the_callers_context(self) -> None:
        async def selects_and_asks(ctx: ExecutionContext) -> str | None:
            ctx.select_intent("deploy")
            await ctx.elicit("go?")
            return onlooker.current_attribution().intent_id

        async with ExecutionEngine(tools=[note]) as engine:
            pause = paused(await engine.execute_with_pause(selects_and_asks))
            assert onlooker.current_attribution().intent_id is None
            with pytest.raises(RuntimeError, match="no onlooker execution"):
                onlooker.current_context()
            result = finished(await engine.resume(pause.execution_id, ACCEPT()))
        assert result.value == "deploy"
        assert onlooker.current_attribution().intent_id is None

    async def test_a_question_shielded_from_the_close_still_expires(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The engine's timer outlives the close while a question waits: a program that
        shields its question from cancellation cannot hold the close past its pause timeout."""

        async def shielded(ctx: ExecutionContext) -> str:
            with anyio.CancelScope(shield=True):
                answer = await ctx.elicit("roll back?")
            return answer.action

        recorder = RecordingObserver()
        with anyio.fail_after(10):
            async with ExecutionEngine(pause_timeout=0.3, shutdown_timeout=0.05) as engine:
                engine.bus.subscribe(recorder)
                pause = paused(await engine.execute_with_pause(shielded))
        assert [r.status for r in recorder.of(InteractionResolved)] == ["expired"]
        assert finished(await engine.resume(pause.execution_id, ACCEPT())).status == "expired"

    async def test_the_timer_keeps_nothing_of_the_run_that_paused_first(self) -> None:
        """The timer task is the engine's: a finished run's input is freed, whoever paused first."""

        class Blob(dict[str, str]):  # a dict that a weak reference can follow
            pass

        async def ask_once(ctx: ExecutionContext) -> str:
            return (await ctx.elicit("go?")).action

        async with ExecutionEngine(pause_timeout=3600) as engine:
            blob = Blob(text="x" * 1000)
            alive = weakref.ref(blob)
            pause = paused(await engine.execute_with_pause(ask_once, input=blob))  # type: ignore[arg-type]  # a dict, weakly referenceable
            del blob
            assert finished(await engine.resume(pause.execution_id, ACCEPT())).ok
            for _ in range(100):  # the run's task ends just after it delivered its result
                await anyio.sleep(0.01)
                gc.collect()
                if alive() is None:
                    break
            assert alive() is None

    async def test_closing_the_engine_ends_the_timer_of_waiting_pauses(self) -> None:
        with anyio.fail_after(10):  # the deadline is an hour away: the close must not wait
            async with ExecutionEngine(tools=[note], pause_timeout=3600) as engine:
                pause = paused(await engine.execute_with_pause(ask_twice))
        assert finished(await engine.resume(pause.execution_id, ACCEPT())).status == "cancelled"

    async def test_answered_in_time_does_not_expire(self) -> None:
        async with ExecutionEngine(tools=[note], pause_timeout=30) as engine:
            pause = paused(await engine.execute_with_pause(ask_twice))
            again = paused(await engine.resume(pause.execution_id, ACCEPT()))
            assert finished(await engine.resume(again.execution_id, ACCEPT())).ok


class TestChildPauses:
    async def test_child_elicitation_pauses_the_root(self, check_stream: Check) -> None:
        async def child(ctx: ExecutionContext) -> Any:
            return (await ctx.elicit("child question")).content

        async def parent(ctx: ExecutionContext) -> Any:
            before = await ctx.call(note, text="before")
            outcome = await ctx.spawn(child, task_id="kid")
            return [before, outcome.value]

        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[note]) as engine:
            engine.bus.subscribe(recorder)
            pause = paused(await engine.execute_with_pause(parent))
            root_id = recorder.of(ExecutionStarted)[0].execution_id
            child_id = recorder.of(ExecutionStarted)[1].execution_id
            assert pause.execution_id == root_id
            assert pause.asking_execution_id == child_id
            assert pause.message == "child question"
            question = recorder.of(InteractionStarted)[0]
            assert question.execution_id == child_id
            assert question.interaction_id == pause.interaction_id
            assert question.attribution.parent_execution_id == root_id
            with pytest.raises(UnknownExecutionError):
                await engine.resume(child_id, ACCEPT())
            result = finished(await engine.resume(root_id, ACCEPT({"c": 1})))
        assert result.value == ["before", {"c": 1}]
        assert recorder.of(InteractionResolved)[0].execution_id == child_id
        check_stream(recorder.events)

    async def test_cancelling_the_root_closes_the_child(self, check_stream: Check) -> None:
        async def child(ctx: ExecutionContext) -> None:
            await ctx.elicit("child question")

        async def parent(ctx: ExecutionContext) -> None:
            await ctx.spawn(child)

        recorder = RecordingObserver()
        async with ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            pause = paused(await engine.execute_with_pause(parent))
            await engine.cancel(pause.execution_id)
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["cancelled", "cancelled"]
        check_stream(recorder.events)


class TestConcurrentQuestions:
    async def test_questions_from_concurrent_children_are_asked_one_at_a_time(
        self, check_stream: Check
    ) -> None:
        async def asker(ctx: ExecutionContext) -> Any:
            return (await ctx.elicit(f"from {ctx.attribution.task_id}")).content

        async def parent(ctx: ExecutionContext) -> list[Any]:
            out: list[Any] = []

            async def one(name: str) -> None:
                out.append((await ctx.spawn(asker, task_id=name)).value)

            async with anyio.create_task_group() as tg:
                tg.start_soon(one, "a")
                tg.start_soon(one, "b")
            return out

        recorder = RecordingObserver()
        asked: list[str] = []
        async with ExecutionEngine() as engine:
            engine.bus.subscribe(recorder)
            outcome = await engine.execute_with_pause(parent)
            while isinstance(outcome, PausedExecution):
                asked.append(outcome.message)
                outcome = await engine.resume(
                    outcome.execution_id, ACCEPT({"for": outcome.message})
                )
        result = finished(outcome)
        assert sorted(asked) == ["from a", "from b"]
        assert sorted(v["for"] for v in result.value or []) == ["from a", "from b"]
        check_stream(recorder.events)


class Stop(BaseException):
    """A BaseException that is not cancellation."""


class TestDetachedBaseException:
    async def test_an_observer_base_exception_comes_out_of_the_engine(self) -> None:
        def stop(event: ExecutionEvent) -> None:
            if event.kind == "ToolCallStarted":
                raise Stop

        ran: list[str] = []

        @onlooker.tool
        def never() -> None:
            ran.append("tool")

        async def program(ctx: ExecutionContext) -> None:
            await ctx.elicit("go?")
            await ctx.call(never)

        outcomes: list[ExecutionResult[Any] | PausedExecution] = []
        with anyio.fail_after(10), pytest.raises(Stop):
            async with ExecutionEngine(tools=[never]) as engine:
                engine.bus.subscribe(stop)
                pause = paused(await engine.execute_with_pause(program))
                outcomes.append(await engine.resume(pause.execution_id, ACCEPT()))
                await anyio.sleep_forever()  # the crashed execution cancels the body
        assert ran == []
        assert finished(outcomes[0]).status == "cancelled"


class TestCloseByCancellation:
    async def test_outer_cancel_scope_closes_paused_executions(self, check_stream: Check) -> None:
        recorder = RecordingObserver()
        with anyio.move_on_after(0.02) as scope:
            async with ExecutionEngine(tools=[note]) as engine:
                engine.bus.subscribe(recorder)
                paused(await engine.execute_with_pause(ask_twice))
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["cancelled"]
        check_stream(recorder.events)


class TestAnswerAfterCancel:
    async def test_an_answer_in_the_same_tick_as_a_cancel_wakes_nobody(self) -> None:
        """The cancel reaches the waiting question first; an answer that comes before the
        cancelled waiter runs again must find nobody to wake (trio would refuse to
        reschedule a task twice), and the waiter ends cancelled."""
        from onlooker._run import PendingAnswer

        pending = PendingAnswer()
        woke: list[str] = []

        async def waiter(scope: anyio.CancelScope) -> None:
            with scope:
                await pending.wait()
                woke.append("answered")
            woke.append("cancelled" if scope.cancel_called else "left")

        scope = anyio.CancelScope()
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter, scope)
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
                pending.answer(ACCEPT({"late": True}))  # the same tick: the waiter has not run
        assert woke == ["cancelled"]

    async def test_a_late_answer_after_a_cancel_through_the_engine(
        self, check_stream: Check
    ) -> None:
        """Through the engine, cancel and resume racing: one wins, the stream stays whole."""
        recorder = RecordingObserver()
        async with ExecutionEngine(tools=[note]) as engine:
            engine.bus.subscribe(recorder)
            pause = paused(await engine.execute_with_pause(ask_twice))
            with anyio.fail_after(5):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(engine.cancel, pause.execution_id)
                    tg.start_soon(engine.resume, pause.execution_id, ACCEPT({"n": 1}))
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["cancelled"]
        check_stream(recorder.events)


class TestExpiryWithConcurrentQuestions:
    async def test_a_question_queued_behind_an_expired_one_expires_too(
        self, check_stream: Check
    ) -> None:
        async def asker(ctx: ExecutionContext) -> None:
            await ctx.elicit("which?")

        async def parent(ctx: ExecutionContext) -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ctx.spawn, asker)
                tg.start_soon(ctx.spawn, asker)

        recorder = RecordingObserver()
        first_expired = anyio.Event()

        def watch(event: ExecutionEvent) -> None:
            if isinstance(event, InteractionResolved):
                first_expired.set()

        async with ExecutionEngine(pause_timeout=0.02) as engine:
            engine.bus.subscribe(recorder)
            engine.bus.subscribe(watch)
            pause = paused(await engine.execute_with_pause(parent))
            await first_expired.wait()
            await anyio.wait_all_tasks_blocked()
            # The other question must not be waiting for an answer now.
            late = finished(await engine.resume(pause.execution_id, ACCEPT({"late": True})))
        assert late.status == "expired"
        assert [r.status for r in recorder.of(InteractionResolved)] == ["expired", "expired"]
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["expired"] * 3
        check_stream(recorder.events)


def test_pauses_under_trio_in_guest_mode_on_an_asyncio_loop() -> None:
    """Trio as a guest of an asyncio loop: an asyncio loop runs in the thread, but the
    program's code runs in trio, so a question must not wait on an asyncio future."""
    import asyncio

    import trio

    outcomes: list[str] = []

    async def ask_once(ctx: ExecutionContext) -> str:
        return (await ctx.elicit("go?")).action

    async def trio_main() -> None:
        async with ExecutionEngine(pause_timeout=30) as engine:
            pause = paused(await engine.execute_with_pause(ask_once))
            with anyio.fail_after(5):
                result = finished(await engine.resume(pause.execution_id, ACCEPT()))
            outcomes.append(f"{result.status} {result.value}")

    async def host() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        trio.lowlevel.start_guest_run(
            trio_main,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            done_callback=done.set_result,
            host_uses_signal_set_wakeup_fd=True,
        )
        (await done).unwrap()

    asyncio.run(host())
    assert outcomes == ["completed accept"]


class TestInteractionResponse:
    @pytest.mark.parametrize("content", [5, "yes", ["a", "b"]])
    def test_content_that_is_not_a_dict_is_named(self, content: object) -> None:
        """``accept(5)`` said "'int' object is not iterable", naming neither the argument
        nor what it should be."""
        with pytest.raises(TypeError, match="content must be a dict or None"):
            InteractionResponse.accept(content)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="content must be a dict or None"):
            InteractionResponse("accept", content)  # type: ignore[arg-type]

    def test_a_mapping_is_copied(self) -> None:
        source = {"ok": True}
        response = InteractionResponse.accept(source)
        source["ok"] = False
        assert response.content == {"ok": True}
