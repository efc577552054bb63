"""Tracked executions (DESIGN §10): the events, hooks and guarantees of ``ctx.call`` for tools
that another framework runs.

Every async test runs on asyncio and on trio. Bad input must raise a clear error and leave
the recorded stream exactly as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

import onlooker
from conftest import well_formed
from onlooker import (
    ExecutionContext,
    ExecutionEngine,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    HookAbortError,
    HookAction,
    HookMatcher,
    InteractionResolved,
    InteractionStarted,
    PostHookResult,
    PreHookResult,
    ToolCallFinished,
    ToolCallStarted,
    ToolDeclaration,
    ToolInputError,
    ToolUseContext,
    TrackedExecution,
    TrackedToolCall,
    TrackingError,
    policies,
)
from onlooker._cli._app import app
from onlooker.plugins import audit, history, metrics, summary
from onlooker.testing import RecordingObserver

pytestmark = pytest.mark.anyio


def record(engine: ExecutionEngine) -> RecordingObserver:
    """Every event of the engine, in emission order."""
    recorder = RecordingObserver()
    engine.bus.subscribe(recorder, name="recorder")
    return recorder


def finished_calls(recorder: RecordingObserver) -> dict[str, ToolCallFinished]:
    return {e.tool_call_id: e for e in recorder.of(ToolCallFinished)}


@contextlib.contextmanager
def records_nothing(recorder: RecordingObserver) -> Iterator[None]:
    """Assert that the block adds no event to what ``recorder`` has recorded."""
    before = list(recorder.events)
    yield
    assert recorder.events == before, [e.kind for e in recorder.events[len(before) :]]


def verdict(action: HookAction, **fields: Any) -> Callable[[ToolUseContext], PreHookResult]:
    decision = PreHookResult(action, **fields)

    def decide(use: ToolUseContext) -> PreHookResult:
        return decision

    return decide


# -- 1. the API --------------------------------------------------------------------------------


class TestApi:
    async def test_async_with_records_one_whole_execution(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track(
                "support-bot", trigger="langgraph", input={"q": "refund"}, owner="ann"
            )
            assert isinstance(run, TrackedExecution)
            execution_id = run.execution_id  # known before the start
            assert execution_id
            assert (run.started, run.finished, run.status) == (False, False, None)
            assert recorder.events == []
            async with run as entered:
                assert entered is run and run.started and not run.finished
                call = await run.tool_started("search", {"q": "refund"}, tool_call_id="call_1")
                assert isinstance(call, TrackedToolCall)
                assert call.allowed and call.action is HookAction.CONTINUE
                assert (call.reason, call.done, call.status) == (None, False, None)
                assert call.tool_call_id == "call_1"  # the framework's own id, kept
                assert call.tool == "search" and call.execution_id == execution_id
                assert call.input == {"q": "refund"}
                assert await call.finished({"hits": 3}) == {"hits": 3}
                assert (call.done, call.status) == (True, "completed")
                assert run.call("call_1") is call
            assert (run.finished, run.status) == (True, "completed")
        well_formed(recorder.events)
        assert recorder.kinds() == [
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
            "ExecutionFinished",
        ]
        assert {e.execution_id for e in recorder.events} == {execution_id}
        (start,) = recorder.of(ExecutionStarted)
        assert start.program == "support-bot" and start.trigger.kind == "langgraph"
        assert start.owner == "ann" and start.input == {"q": "refund"}
        assert start.attribution.depth == 0 and start.attribution.parent_execution_id is None
        (opened,) = recorder.of(ToolCallStarted)
        assert (opened.tool_call_id, opened.tool, opened.args) == (
            "call_1",
            "search",
            {"q": "refund"},
        )
        (closed,) = recorder.of(ToolCallFinished)
        assert (closed.tool_call_id, closed.status, closed.result, closed.error) == (
            "call_1",
            "completed",
            {"hits": 3},
            None,
        )
        assert closed.metadata == {} and closed.duration_ms >= 0
        (end,) = recorder.of(ExecutionFinished)
        assert end.status == "completed" and end.error is None and end.result is None

    async def test_start_and_finish_for_callback_frameworks(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track("turn", trigger=onlooker.Trigger(kind="claude", metadata={"n": 1}))
            await run.start()
            assert run.started
            call = await run.tool_started("Bash", {"command": "ls"})
            assert call.tool_call_id  # generated when the framework gives none
            await call.finished("a.txt")
            await run.finish(result={"answer": 42})
            await run.finish()  # twice: harmless
            await run.finish(status="failed", error="too late")  # harmless too
            assert run.finished and run.status == "completed"
            with pytest.raises(TrackingError, match="already finished"):
                await run.start()
        well_formed(recorder.events)
        (start,) = recorder.of(ExecutionStarted)
        assert start.trigger == onlooker.Trigger(kind="claude", metadata={"n": 1})
        (end,) = recorder.of(ExecutionFinished)
        assert end.status == "completed" and end.result == {"answer": 42}

    async def test_finish_with_a_status_and_an_error(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            by_message = engine.track("a")
            await by_message.start()
            await by_message.finish("failed", error="the model refused")
            by_exception = engine.track("b")
            await by_exception.start()
            await by_exception.finish("failed", error=ValueError("bad plan"))
            expired = engine.track("c")
            await expired.start()
            await expired.finish("expired")
            with pytest.raises(ValueError, match="status"):
                await engine.track("d").finish("exploded")  # type: ignore[arg-type]  # the point
        well_formed(recorder.events)
        ends = {e.execution_id: e for e in recorder.of(ExecutionFinished)}
        message = ends[by_message.execution_id]
        assert message.status == "failed" and message.error is not None
        assert message.error.message == "the model refused" and message.error.cause == "failure"
        exception = ends[by_exception.execution_id]
        assert exception.error is not None and exception.error.type == "ValueError"
        assert exception.error.message == "bad plan" and exception.error.cause == "defect"
        assert ends[expired.execution_id].status == "expired"
        assert len(ends) == 3  # the refused finish recorded nothing

    async def test_a_given_execution_id_is_used(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track("bot", execution_id="exec-42")
            assert run.execution_id == "exec-42"
            async with run:
                with records_nothing(recorder), pytest.raises(TrackingError, match="exec-42"):
                    engine.track("other", execution_id="exec-42")  # in use
                with pytest.raises(TypeError):
                    engine.track("bot", execution_id="")
            with records_nothing(recorder), pytest.raises(TrackingError, match="finished"):
                engine.track("bot", execution_id="exec-42")  # one id, one execution
        assert {e.execution_id for e in recorder.events} == {"exec-42"}
        assert len(recorder.of(ExecutionStarted)) == 1

    async def test_track_needs_a_running_engine(self) -> None:
        """A TrackingError (tracked.md), and the RuntimeError of every other entry point."""
        engine = ExecutionEngine()
        with pytest.raises(TrackingError, match="not running"):
            engine.track("early")
        async with engine:
            pass
        with pytest.raises(TrackingError, match="closed") as closed:
            engine.track("late", execution_id="late-1")
        assert isinstance(closed.value, RuntimeError)
        assert closed.value.execution_id == "late-1"

    async def test_failed_with_an_exception_or_a_message(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                defect = await run.tool_started("t", {}, tool_call_id="defect")
                await defect.failed(ValueError("bad json from the API"))
                failure = await run.tool_started("t", {}, tool_call_id="failure")
                await failure.failed(onlooker.ToolError("file not found"))
                message = await run.tool_started("t", {}, tool_call_id="message")
                await message.failed("exit code 2")
                interrupt = await run.tool_started("t", {}, tool_call_id="interrupt")
                await interrupt.failed(KeyboardInterrupt())
                wrong = await run.tool_started("t", {}, tool_call_id="wrong")
                with records_nothing(recorder), pytest.raises(TypeError, match="exception"):
                    await wrong.failed(42)  # type: ignore[arg-type]  # the point of the test
                assert not wrong.done
                await wrong.failed("now properly")
        well_formed(recorder.events)
        ends = finished_calls(recorder)
        assert defect.status == failure.status == message.status == "failed"
        errors = {key: ends[key].error for key in ("defect", "failure", "message", "interrupt")}
        assert errors["defect"] == onlooker.ErrorInfo(
            type="ValueError", message="bad json from the API", cause="defect"
        )
        assert errors["failure"] == onlooker.ErrorInfo(
            type="ToolError", message="file not found", cause="failure"
        )
        assert errors["message"] == onlooker.ErrorInfo(
            type="ToolError", message="exit code 2", cause="failure"
        )
        assert ends["interrupt"].status == "cancelled" and interrupt.status == "cancelled"
        assert errors["interrupt"] is not None and errors["interrupt"].cause == "interrupt"
        assert all(ends[key].result is None for key in ends)

    async def test_a_duration_given_by_the_framework_wins(self) -> None:
        async def slow_post(use: ToolUseContext, output: Any) -> None:
            await anyio.sleep(0.02)

        async with ExecutionEngine(hooks=[HookMatcher(post=[slow_post])]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                given = await run.tool_started("t", {}, tool_call_id="given")
                await given.finished("x", duration_ms=1234.5)
                zero = await run.tool_started("t", {}, tool_call_id="zero")
                await zero.failed("x", duration_ms=0)
                measured = await run.tool_started("t", {}, tool_call_id="measured")
                await anyio.sleep(0.01)
                for bad in (-1.0, float("nan"), float("inf"), True, "3"):
                    with records_nothing(recorder), pytest.raises(ValueError, match="duration"):
                        await measured.finished("x", duration_ms=bad)  # type: ignore[arg-type]
                assert not measured.done  # a refused finish leaves the call open
                await measured.finished("x")
        ends = finished_calls(recorder)
        assert ends["given"].duration_ms == 1234.5
        assert ends["zero"].duration_ms == 0
        assert 10 <= ends["measured"].duration_ms < 1000  # onlooker's clock otherwise

    async def test_interactions(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                asked = await run.interaction_started(
                    "Allow Write to a.md?", schema={"type": "object"}
                )
                assert isinstance(asked, str) and asked
                await run.interaction_resolved(asked, "accepted", {"allow": True})
                odd_modes: tuple[object, ...] = ("later", [], None)
                for mode in odd_modes:
                    with records_nothing(recorder), pytest.raises(ValueError, match="mode"):
                        await run.interaction_started("x", mode=mode)  # type: ignore[arg-type]
                named = await run.interaction_started(
                    "Deploy?", interaction_id="perm-1", mode="paused"
                )
                assert named == "perm-1"
                await run.interaction_resolved("perm-1", "declined")
                open_one = await run.interaction_started("x", interaction_id="bad-status")
                with records_nothing(recorder), pytest.raises(ValueError, match="status"):
                    await run.interaction_resolved(open_one, "maybe")  # type: ignore[arg-type]
                await run.interaction_resolved(open_one, "expired")
        well_formed(recorder.events)
        first, second, third = recorder.of(InteractionStarted)
        assert (first.interaction_id, first.message, first.mode) == (
            asked,
            "Allow Write to a.md?",
            "inline",
        )
        assert first.requested_schema == {"type": "object"}
        assert second.interaction_id == "perm-1" and second.requested_schema is None
        assert second.mode == "paused"  # the framework resumes the run for the answer
        statuses = [
            (e.interaction_id, e.status, e.response) for e in recorder.of(InteractionResolved)
        ]
        assert statuses == [
            (asked, "accepted", {"allow": True}),
            ("perm-1", "declined", None),
            ("bad-status", "expired", None),
        ]
        assert third.interaction_id == "bad-status"

    async def test_child_executions(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("orchestrator", trigger="sdk") as run:
                task = await run.tool_started("Task", {"prompt": "sum"}, tool_call_id="task_1")
                child = run.child("summarizer", parent_tool_call_id="task_1", task_id="sum")
                assert isinstance(child, TrackedExecution) and not child.started
                assert child.execution_id != run.execution_id
                async with child:
                    read = await child.tool_started("Read", {"file_path": "a.md"})
                    await read.finished("text")
                    grandchild = child.child("checker", input={"x": 1})
                    async with grandchild:
                        pass
                await task.finished("summary")
                named = run.child("named", execution_id="child-7", trigger="custom", owner="bob")
                await named.start()
                await named.finish()
        well_formed(recorder.events)
        starts = {e.execution_id: e for e in recorder.of(ExecutionStarted)}
        root = starts[run.execution_id].attribution
        first = starts[child.execution_id]
        assert first.program == "summarizer"
        assert first.trigger.kind == "spawn"
        assert first.trigger.metadata == {"parent_execution_id": run.execution_id}
        assert first.attribution.parent_execution_id == run.execution_id
        assert first.attribution.parent_tool_call_id == "task_1"
        assert first.attribution.depth == root.depth + 1 == 1
        assert first.attribution.task_id == "sum"
        assert all(e.attribution.depth == 1 for e in recorder.for_execution(child.execution_id))
        deep = starts[grandchild.execution_id]
        assert deep.attribution.parent_execution_id == child.execution_id
        assert deep.attribution.parent_tool_call_id is None
        assert deep.attribution.depth == 2 and deep.input == {"x": 1}
        assert deep.attribution.task_id == "sum"  # inherited, as ctx.spawn does
        other = starts["child-7"]
        assert other.trigger.kind == "custom" and other.owner == "bob"
        assert other.attribution.parent_execution_id == run.execution_id
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["completed"] * 4

    async def test_a_child_needs_a_running_parent(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track("parent")
            early = run.child("too-early")
            with records_nothing(recorder), pytest.raises(TrackingError, match="parent"):
                await early.start()
            async with run:
                pass
            late = run.child("too-late")
            with records_nothing(recorder), pytest.raises(TrackingError, match="parent"):
                await late.start()
            with pytest.raises(TypeError):
                run.child("")
            with pytest.raises(TypeError):
                run.child("x", parent_tool_call_id="")
        well_formed(recorder.events)


# -- 2. the guarantees of ctx.call -------------------------------------------------------------


class TestHooks:
    @pytest.mark.parametrize("ending", ["finish", "close"])
    async def test_the_end_stops_the_pre_hooks_still_deciding(self, ending: str) -> None:
        """A run that finishes, or an engine that closes, while a pre-hook decides: the
        adapter is refused at once (it waited out the hook's timeout, told it timed out)."""
        stopped = anyio.Event()

        async def deciding(use: ToolUseContext) -> None:
            try:
                await anyio.sleep(30)
            finally:
                stopped.set()

        outcome: dict[str, Any] = {}

        async def call(run: onlooker.TrackedExecution) -> None:
            began = anyio.current_time()
            tracked = await run.tool_started("t", {}, tool_call_id="c1")
            outcome.update(tracked=tracked, waited=anyio.current_time() - began)

        hooks = [HookMatcher(pre=[deciding], timeout=30)]
        # (the adapter's task group outside the engine: else the engine's close, leaving
        # the block, ends the run)
        async with anyio.create_task_group() as group, ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            run = engine.track("bot")
            await run.start()
            group.start_soon(call, run)
            await anyio.wait_all_tasks_blocked()
            if ending == "finish":
                await run.finish()
        tracked = outcome["tracked"]
        assert (tracked.allowed, tracked.reason) == (False, "the execution finished")
        assert outcome["waited"] < 5 and stopped.is_set()
        kinds = [event.kind for event in recorder.events]
        assert kinds == ["ExecutionStarted", "ExecutionFinished"]  # the call is not recorded

    async def test_glob_and_phase_matching(self) -> None:
        seen: list[tuple[str, str | None, str, str, bool, dict[str, Any]]] = []

        def spy(use: ToolUseContext) -> None:
            seen.append(
                (
                    use.tool_name,
                    use.attribution.phase,
                    use.tool_call_id,
                    use.execution_id,
                    use.mutating,
                    dict(use.tool_input),
                )
            )

        hooks = [HookMatcher(pattern="fs.*", phases=("review",), pre=[spy])]
        async with ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                await run.tool_started("fs.read", {"p": 1})  # no phase
                await run.tool_started("net.get", {})
                with onlooker.attribution(phase="review"):
                    await run.tool_started("fs.read", {"p": 2}, tool_call_id="c3", mutating=True)
                    await run.tool_started("net.get", {})
                    await run.tool_started("fsread", {})
                child = run.child("reviewer", phase="review")
                async with child:
                    await child.tool_started("fs.write", {"p": 3}, tool_call_id="c6")
            with onlooker.attribution(phase="review"):
                late = engine.track("tracked-in-review")  # its phase is the one around track
            async with late:
                await late.tool_started("fs.list", {}, tool_call_id="c7")
        assert seen == [
            ("fs.read", "review", "c3", run.execution_id, True, {"p": 2}),
            ("fs.write", "review", "c6", child.execution_id, False, {"p": 3}),
            ("fs.list", "review", "c7", late.execution_id, False, {}),
        ]
        phased = [e for e in recorder.of(ToolCallStarted) if e.attribution.phase == "review"]
        assert [e.tool for e in phased] == ["fs.read", "net.get", "fsread", "fs.write", "fs.list"]

    async def test_modified_input_and_metadata(self) -> None:
        def first(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(
                modified_input={**use.tool_input, "path": "/safe/" + use.tool_input["path"]},
                metadata={"rewritten": True, "by": "first"},
            )

        async def second(use: ToolUseContext) -> PreHookResult:
            await anyio.lowlevel.checkpoint()
            assert use.tool_input["path"] == "/safe/a.md"  # sees the first hook's input
            return PreHookResult(metadata={"by": "second"})

        hooks = [HookMatcher(pattern="Write", pre=[first, second])]
        async with ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                call = await run.tool_started("Write", {"path": "a.md", "content": "x"})
                assert call.allowed
                assert call.input == {"path": "/safe/a.md", "content": "x"}
                await call.finished(None)
                other = await run.tool_started("Read", {"path": "a.md"})
                assert other.input == {"path": "a.md"}
                await other.finished("text")
        (opened, _) = recorder.of(ToolCallStarted)
        assert opened.args == {"path": "/safe/a.md", "content": "x"}
        end = finished_calls(recorder)[call.tool_call_id]
        assert end.metadata == {"rewritten": True, "by": "second"}
        assert finished_calls(recorder)[other.tool_call_id].metadata == {}

    async def test_modified_input_that_is_not_an_object_refuses_the_call_naming_the_hook(
        self,
    ) -> None:
        def breaks_input(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input=["not", "a", "mapping"])  # type: ignore[arg-type]

        async with ExecutionEngine(hooks=[HookMatcher(pre=[breaks_input])]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                call = await run.tool_started("t", {"a": 1})
                assert not call.allowed and call.done
                assert call.reason is not None and "breaks_input" in call.reason
        well_formed(recorder.events)
        end = finished_calls(recorder)[call.tool_call_id]
        assert end.status in ("failed", "blocked")
        assert end.error is not None and "breaks_input" in end.error.message
        assert recorder.of(ExecutionFinished)[0].status == "completed"

    async def test_validate_makes_each_rewrite_what_the_tool_receives(self) -> None:
        validated: list[dict[str, Any]] = []

        def validate(args: dict[str, Any]) -> dict[str, Any]:
            validated.append(args)
            return {"copies": int(args["copies"]), "mode": args.get("mode", "fast")}

        def as_text(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={"copies": "2"})

        seen: list[dict[str, Any]] = []

        def look(use: ToolUseContext) -> None:
            seen.append(dict(use.tool_input))

        hooks = [HookMatcher(pattern="copy", pre=[as_text, look]), HookMatcher(pre=[look])]
        async with ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                call = await run.tool_started("copy", {"copies": 9}, validate=validate)
                assert call.allowed
                assert call.input == {"copies": 2, "mode": "fast"}
                await call.finished("ok")
                # no rewrite: the framework's arguments are taken as they are
                other = await run.tool_started("read", {"n": "1"}, validate=validate)
                assert other.input == {"n": "1"}
                await other.finished("text")
        assert validated == [{"copies": "2"}]  # once, for the one rewrite
        assert seen == [{"copies": 2, "mode": "fast"}] * 2 + [{"n": "1"}]
        assert [e.args for e in recorder.of(ToolCallStarted)] == [
            {"copies": 2, "mode": "fast"},
            {"n": "1"},
        ]
        well_formed(recorder.events)

    async def test_a_rewrite_that_validate_refuses_fails_the_call_naming_the_hook(self) -> None:
        def validate(args: dict[str, Any]) -> dict[str, Any]:
            raise ValueError(f"copies must be a number, not {args['copies']!r}")

        def garble(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={"copies": "many"})

        def never(use: ToolUseContext) -> PreHookResult:
            raise AssertionError("no hook runs after a refused rewrite")

        async with ExecutionEngine(hooks=[HookMatcher(pre=[garble, never])]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                call = await run.tool_started("copy", {"copies": 1}, validate=validate)
                assert not call.allowed and call.done
                assert (call.action, call.status) == (HookAction.BLOCK, "failed")
                assert call.reason is not None and "garble" in call.reason
                assert "'many'" in call.reason  # the validator's own words
        well_formed(recorder.events)
        (started,) = recorder.of(ToolCallStarted)
        assert started.args == {"copies": 1}  # the last input that validated
        end = finished_calls(recorder)[call.tool_call_id]
        assert end.status == "failed"
        assert end.error is not None and end.error.type == "ToolInputError"
        assert "garble" in end.error.message
        assert recorder.of(ExecutionFinished)[0].status == "completed"

    @pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
    async def test_a_raising_pre_hook_blocks(self, is_async: bool) -> None:
        def broken_sync(use: ToolUseContext) -> None:
            raise RuntimeError("policy store is down")

        async def broken_async(use: ToolUseContext) -> None:
            raise RuntimeError("policy store is down")

        hook = broken_async if is_async else broken_sync
        async with ExecutionEngine(hooks=[HookMatcher(pre=[hook])]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                call = await run.tool_started("t", {"x": 1}, tool_call_id="c1")
                assert not call.allowed and call.action is HookAction.BLOCK
                assert call.status == "blocked" and call.done
                assert call.reason is not None
                assert hook.__name__ in call.reason and "policy store is down" in call.reason
                with records_nothing(recorder), pytest.raises(TrackingError, match="c1"):
                    await call.finished("ran anyway")  # a refused call is closed already
        well_formed(recorder.events)
        assert recorder.kinds()[1:3] == ["ToolCallStarted", "ToolCallFinished"]
        end = finished_calls(recorder)["c1"]
        assert end.status == "blocked" and end.error is not None
        assert end.error.type == "ToolBlockedError" and end.error.cause == "failure"
        assert run.status == "completed"  # a block refuses one call; the run goes on

    @pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
    async def test_a_timed_out_pre_hook_blocks(self, is_async: bool) -> None:
        def slow_sync(use: ToolUseContext) -> None:
            time.sleep(0.03)

        async def slow_async(use: ToolUseContext) -> None:
            await anyio.sleep(5)

        hook = slow_async if is_async else slow_sync
        async with ExecutionEngine(hooks=[HookMatcher(pre=[hook], timeout=0.01)]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                with anyio.fail_after(2):
                    call = await run.tool_started("t", {})
                assert not call.allowed and call.action is HookAction.BLOCK
                assert call.reason is not None and "timed out" in call.reason
                assert hook.__name__ in call.reason
        well_formed(recorder.events)
        assert finished_calls(recorder)[call.tool_call_id].status == "blocked"

    async def test_skip_and_block(self) -> None:
        hooks = [
            HookMatcher(
                pattern="cached", pre=[verdict(HookAction.SKIP, reason="hit", metadata={"c": 1})]
            ),
            HookMatcher(pattern="rm", pre=[verdict(HookAction.BLOCK, reason="read-only day")]),
            HookMatcher(pattern="silent", pre=[verdict(HookAction.BLOCK)]),
        ]
        async with ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                skipped = await run.tool_started("cached", {"q": 1})
                blocked = await run.tool_started("rm", {"path": "/"})
                silent = await run.tool_started("silent", {})
                allowed = await run.tool_started("ls", {})
                await allowed.finished([])
        well_formed(recorder.events)
        assert (skipped.action, skipped.allowed, skipped.reason, skipped.status) == (
            HookAction.SKIP,
            False,
            "hit",
            "skipped",
        )
        assert (blocked.action, blocked.allowed, blocked.reason, blocked.status) == (
            HookAction.BLOCK,
            False,
            "read-only day",
            "blocked",
        )
        assert silent.action is HookAction.BLOCK and silent.reason
        ends = finished_calls(recorder)
        assert ends[skipped.tool_call_id].error is None
        assert ends[skipped.tool_call_id].metadata == {"c": 1}
        rm = ends[blocked.tool_call_id].error
        assert rm is not None and rm.type == "ToolBlockedError" and "read-only day" in rm.message
        assert run.status == "completed"

    async def test_require_intent_with_declared_and_given_mutating(self) -> None:
        decided: list[tuple[str, bool]] = []

        def spy(use: ToolUseContext) -> None:
            decided.append((use.tool_name, use.mutating))

        hooks = [HookMatcher(pre=[spy]), policies.require_intent()]
        async with ExecutionEngine(hooks=hooks) as engine:
            engine.declare_tool(ToolDeclaration("Write", mutating=True, writes="file_path"))
            engine.declare_tool(ToolDeclaration("Read", reads="file_path"))
            recorder = record(engine)
            async with engine.track("bot") as run:
                read = await run.tool_started("Read", {"file_path": "a"})
                unknown = await run.tool_started("Grep", {"pattern": "x"})
                bash = await run.tool_started("Bash", {"command": "ls"}, mutating=True)
                write = await run.tool_started("Write", {"file_path": "a"})
                override = await run.tool_started("Write", {"file_path": "b"}, mutating=False)
                for call in (read, unknown, override):
                    assert call.allowed
                    await call.finished(None)
                for call in (bash, write):
                    assert not call.allowed and call.action is HookAction.BLOCK
                    assert call.reason is not None and "no intent is selected" in call.reason
                    assert call.tool in call.reason
                run.select_intent("fix-docs")
                assert run.attribution.intent_id == "fix-docs"
                write_again = await run.tool_started("Write", {"file_path": "a"})
                assert write_again.allowed
                await write_again.finished(None)
                child = run.child("sub")  # inherits the intent
                async with child:
                    in_child = await child.tool_started("Write", {"file_path": "c"})
                    assert in_child.allowed
                    await in_child.finished(None)
                with pytest.raises(ValueError, match="intent"):
                    run.select_intent("")
        well_formed(recorder.events)
        assert decided == [
            ("Read", False),
            ("Grep", False),
            ("Bash", True),
            ("Write", True),
            ("Write", False),
            ("Write", True),
            ("Write", True),
        ]
        ends = finished_calls(recorder)
        assert ends[write.tool_call_id].metadata == {
            "policy": "require_intent",
            "missing_intent": True,
        }
        assert ends[write.tool_call_id].attribution.intent_id is None
        root = recorder.for_execution(run.execution_id)
        after = root[root.index(ends[override.tool_call_id]) + 1 :]
        assert after and all(e.attribution.intent_id == "fix-docs" for e in after)
        assert all(
            e.attribution.intent_id == "fix-docs"
            for e in recorder.for_execution(child.execution_id)
        )

    async def test_abort_refuses_every_later_call_and_fails_the_run(self) -> None:
        def abort_bash(use: ToolUseContext) -> PreHookResult | None:
            if use.tool_name == "Bash":
                return PreHookResult(HookAction.ABORT, reason="dangerous command")
            return None

        ran: list[str] = []

        def spy(use: ToolUseContext) -> None:
            ran.append(use.tool_name)

        hooks = [HookMatcher(pre=[abort_bash]), HookMatcher(pre=[spy])]
        async with ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                child = run.child("sub")
                await child.start()
                before = await run.tool_started("Read", {})
                assert before.allowed
                aborted = await run.tool_started("Bash", {"command": "rm -rf /"})
                assert aborted.action is HookAction.ABORT and not aborted.allowed
                assert aborted.reason == "dangerous command" and aborted.status == "blocked"
                later = await run.tool_started("Read", {})
                in_child = await child.tool_started("Read", {})
                for refused in (later, in_child):
                    assert refused.action is HookAction.ABORT and not refused.allowed
                    assert refused.status == "blocked"
                    assert refused.reason == "dangerous command"
                await before.finished("opened before the abort")  # may still close
                await child.finish()  # "completed" asked: failed after the abort
            # the block completed: the run still fails
        well_formed(recorder.events)
        assert ran == ["Read"]  # no hook runs for a refused call
        ends = {e.execution_id: e for e in recorder.of(ExecutionFinished)}
        for execution in (run, child):
            end = ends[execution.execution_id]
            assert end.status == "failed" and execution.status == "failed"
            assert end.error is not None and end.error.type == "HookAbortError"
            assert "dangerous command" in end.error.message
        calls = finished_calls(recorder)
        assert calls[before.tool_call_id].status == "completed"
        assert [calls[c.tool_call_id].status for c in (aborted, later, in_child)] == ["blocked"] * 3
        errors = [calls[c.tool_call_id].error for c in (aborted, later, in_child)]
        assert all(e is not None and e.type == "HookAbortError" for e in errors)

    async def test_an_abort_in_a_child_fails_its_parent(self) -> None:
        hooks = [HookMatcher(pattern="Bash", pre=[verdict(HookAction.ABORT, reason="no")])]
        async with ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                async with run.child("sub") as child:
                    await child.tool_started("Bash", {})
                later = await run.tool_started("Read", {})
                assert later.action is HookAction.ABORT
        well_formed(recorder.events)
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["failed", "failed"]

    async def test_a_child_left_open_after_an_abort_fails_with_it(self) -> None:
        """The Claude adapter finishes the root alone: the child the abort was in had
        ended ``cancelled``, where a native child ends ``failed``."""
        hooks = [HookMatcher(pattern="Bash", pre=[verdict(HookAction.ABORT, reason="no")])]
        async with ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            run = engine.track("bot")
            await run.start()
            child = run.child("sub")
            await child.start()
            await child.tool_started("Bash", {})
            await run.finish()
        well_formed(recorder.events)
        finished = recorder.of(ExecutionFinished)
        assert [e.status for e in finished] == ["failed", "failed"]
        assert [e.error.type for e in finished if e.error is not None] == ["HookAbortError"] * 2

    @pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
    async def test_post_hooks_rewrite_the_output(self, is_async: bool) -> None:
        def redact_sync(use: ToolUseContext, output: Any) -> PostHookResult | None:
            if "hunter2" in str(output):
                return PostHookResult(modified_output="[redacted]", metadata={"redacted": True})
            return None

        async def redact_async(use: ToolUseContext, output: Any) -> PostHookResult | None:
            await anyio.lowlevel.checkpoint()
            return redact_sync(use, output)

        hook = redact_async if is_async else redact_sync
        async with ExecutionEngine(hooks=[HookMatcher(post=[hook])]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                secret = await run.tool_started("cat", {"path": ".env"})
                assert await secret.finished("password=hunter2") == "[redacted]"
                plain = await run.tool_started("cat", {"path": "a.md"})
                assert await plain.finished("hello") == "hello"
        ends = finished_calls(recorder)
        assert ends[secret.tool_call_id].result == "[redacted]"
        assert ends[secret.tool_call_id].metadata == {"redacted": True}
        assert ends[plain.tool_call_id].result == "hello"

    @pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
    async def test_a_raising_post_hook_leaves_the_output_unchanged(
        self, is_async: bool, caplog: pytest.LogCaptureFixture
    ) -> None:
        def broken_sync(use: ToolUseContext, output: Any) -> None:
            raise RuntimeError("metrics backend down")

        async def broken_async(use: ToolUseContext, output: Any) -> None:
            raise RuntimeError("metrics backend down")

        async def slow(use: ToolUseContext, output: Any) -> PostHookResult:
            await anyio.sleep(5)
            return PostHookResult(modified_output="never")

        hook = broken_async if is_async else broken_sync
        hooks = [HookMatcher(post=[hook]), HookMatcher(post=[slow], timeout=0.01)]
        async with ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            with caplog.at_level(logging.ERROR, logger="onlooker"):
                async with engine.track("bot") as run:
                    call = await run.tool_started("echo", {})
                    assert await call.finished({"intact": [1, 2]}) == {"intact": [1, 2]}
        end = finished_calls(recorder)[call.tool_call_id]
        assert end.status == "completed" and end.result == {"intact": [1, 2]}
        assert run.status == "completed"
        messages = [r.getMessage() for r in caplog.records]
        assert any(hook.__name__ in m for m in messages)
        assert any("slow" in m for m in messages)

    async def test_a_post_hook_abort_blocks_the_call_and_fails_the_run(self) -> None:
        def leak(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(HookAction.ABORT, reason="leaked secret")

        async with ExecutionEngine(hooks=[HookMatcher(pattern="cat", post=[leak])]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                call = await run.tool_started("cat", {})
                with pytest.raises(HookAbortError, match="leaked secret"):
                    await call.finished("secret")
                assert call.status == "blocked"
                later = await run.tool_started("ls", {})
                assert later.action is HookAction.ABORT
        well_formed(recorder.events)
        end = finished_calls(recorder)[call.tool_call_id]
        assert end.status == "blocked" and end.result is None
        assert run.status == "failed"


class TestClosing:
    """Every Started closes exactly once, whatever the way the run ends."""

    async def test_a_run_an_adapter_paused_expires_unless_resumed_in_time(self) -> None:
        """The engine's side of an adapter's paused run (PydanticAI's deferred calls, an
        OpenAI Agents approval): unanswered within ``pause_timeout``, its questions and
        the run end ``expired``; the clock stops at a resume, and a pause restarts it."""
        ended = anyio.Event()

        def on_end(event: onlooker.ExecutionEvent) -> None:
            if isinstance(event, ExecutionFinished):
                ended.set()

        async with ExecutionEngine(pause_timeout=0.05) as engine:
            recorder = record(engine)
            engine.bus.subscribe(on_end)
            expiring, resumed = engine.track("expiring"), engine.track("resumed")
            for run in (expiring, resumed):
                await run.start()
                await run.interaction_started("approve?", interaction_id="q")
                engine._tracked_paused(run)
            engine._tracked_paused(resumed)  # again: one clock
            engine._tracked_resumed(resumed)
            with anyio.fail_after(5):
                await ended.wait()
            await anyio.sleep(0.1)  # twice the timeout: the resumed run is still open
            assert expiring.status == "expired" and not resumed.finished
            await resumed.interaction_resolved("q", "accepted")
            await resumed.finish()
        well_formed(recorder.events)
        answers = {e.execution_id: e for e in recorder.of(onlooker.InteractionResolved)}
        ends = {e.execution_id: e for e in recorder.of(ExecutionFinished)}
        assert answers[expiring.execution_id].status == "expired"
        assert ends[expiring.execution_id].status == "expired"
        error = ends[expiring.execution_id].error
        assert error is not None and error.type == "ExecutionExpiredError"
        assert ends[resumed.execution_id].status == "completed"

    async def test_closing_does_not_wait_for_a_paused_runs_timeout(self) -> None:
        with anyio.fail_after(10):
            async with ExecutionEngine(pause_timeout=3600) as engine:
                recorder = record(engine)
                run = engine.track("paused")
                await run.start()
                await run.interaction_started("approve?")
                engine._tracked_paused(run)
        assert [e.status for e in recorder.of(ExecutionFinished)] == ["cancelled"]

    async def test_an_observer_giving_up_on_a_paused_runs_end_does_not_hold_the_close(
        self,
    ) -> None:
        """A sync observer's BaseException on the closing event skipped the run's closing
        bookkeeping: its pause stayed on the engine's timer, which the close waited for."""

        class GivesUp(BaseException):
            pass

        def strict(event: onlooker.ExecutionEvent) -> None:
            if isinstance(event, ExecutionFinished):
                raise GivesUp

        with anyio.fail_after(10), pytest.raises(GivesUp):
            async with ExecutionEngine(pause_timeout=3600) as engine:
                run = engine.track("paused")
                await run.start()
                await run.interaction_started("approve?")
                engine._tracked_paused(run)
                engine.bus.subscribe(strict)
        assert run.finished and run.status == "cancelled"

    async def test_an_observer_giving_up_is_logged_when_the_close_raises_something_else(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The observer's BaseException was dropped without a word when a plugin's close
        then failed (or a Ctrl-C came): only one exception can come out."""

        class GivesUp(BaseException):
            pass

        def strict(event: onlooker.ExecutionEvent) -> None:
            if isinstance(event, ExecutionFinished):
                raise GivesUp

        @contextlib.asynccontextmanager
        async def breaks_on_close(ctx: onlooker.PluginContext) -> AsyncIterator[None]:
            yield
            raise RuntimeError("teardown failed")

        plugin = onlooker.define_plugin(id="breaks", extension=breaks_on_close)
        with anyio.fail_after(10), pytest.raises(onlooker.PluginError):
            async with ExecutionEngine(plugins=[plugin]) as engine:
                run = engine.track("open")
                await run.start()
                engine.bus.subscribe(strict)
        assert run.status == "cancelled"
        (record,) = [r for r in caplog.records if "on a closing event" in r.getMessage()]
        assert "GivesUp" in record.getMessage() and "PluginError" in record.getMessage()
        assert record.exc_info is not None and isinstance(record.exc_info[1], GivesUp)

    async def open_everything(self, run: TrackedExecution) -> dict[str, Any]:
        call = await run.tool_started("t", {}, tool_call_id="open-call")
        done = await run.tool_started("t", {}, tool_call_id="done-call")
        await done.finished(1)
        question = await run.interaction_started("still asking?", interaction_id="q1")
        child = run.child("sub")
        await child.start()
        child_call = await child.tool_started("t", {}, tool_call_id="child-call")
        await child.interaction_started("child asks", interaction_id="q2")
        return {"call": call, "question": question, "child": child, "child_call": child_call}

    def check_closed(self, recorder: RecordingObserver, opened: dict[str, Any]) -> None:
        well_formed(recorder.events)
        ends = finished_calls(recorder)
        assert ends["done-call"].status == "completed"
        for key in ("open-call", "child-call"):
            assert ends[key].status == "cancelled"
            error = ends[key].error
            assert error is not None and error.cause == "interrupt"
        assert opened["call"].status == opened["child_call"].status == "cancelled"
        resolved = {e.interaction_id: e.status for e in recorder.of(InteractionResolved)}
        assert resolved == {"q1": "cancelled", "q2": "cancelled"}
        child: TrackedExecution = opened["child"]
        assert child.status == "cancelled"
        (child_end,) = recorder.of(ExecutionFinished, child.execution_id)
        assert child_end.status == "cancelled"

    async def test_a_normal_exit(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                opened = await self.open_everything(run)
        self.check_closed(recorder, opened)
        assert run.status == "completed"

    async def test_an_exception_in_the_block(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track("bot")
            with pytest.raises(KeyError, match="missing"):
                async with run:
                    opened = await self.open_everything(run)
                    raise KeyError("missing")
        self.check_closed(recorder, opened)
        (end,) = recorder.of(ExecutionFinished, run.execution_id)
        assert end.status == "failed" and run.status == "failed"
        assert end.error is not None and end.error.type == "KeyError"
        assert end.error.cause == "defect" and "missing" in end.error.message

    async def test_cancellation_of_the_callers_scope(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track("bot")
            with anyio.CancelScope() as scope:
                async with run:
                    opened = await self.open_everything(run)
                    scope.cancel()
                    await anyio.sleep_forever()
            assert scope.cancelled_caught
        self.check_closed(recorder, opened)
        (end,) = recorder.of(ExecutionFinished, run.execution_id)
        assert end.status == "cancelled" and run.status == "cancelled"
        assert end.error is not None and end.error.cause == "interrupt"

    async def test_cancellation_while_pre_hooks_run(self) -> None:
        scope = anyio.CancelScope()

        async def cancels(use: ToolUseContext) -> None:
            scope.cancel()
            await anyio.sleep_forever()

        async with ExecutionEngine(hooks=[HookMatcher(pattern="slow", pre=[cancels])]) as engine:
            recorder = record(engine)
            run = engine.track("bot")
            with scope:
                async with run:
                    await run.tool_started("slow", {}, tool_call_id="slow-call")
            assert scope.cancelled_caught
        well_formed(recorder.events)
        assert finished_calls(recorder)["slow-call"].status == "cancelled"
        assert run.status == "cancelled"

    async def test_finish_with_calls_questions_and_children_open(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track("bot")
            await run.start()
            opened = await self.open_everything(run)
            never_started = run.child("never-started")
            await run.finish()
            self.check_closed(recorder, opened)
            assert run.status == "completed"
            with records_nothing(recorder):
                with pytest.raises(TrackingError, match="open-call"):
                    await opened["call"].finished("too late")
                with pytest.raises(TrackingError):
                    await opened["child"].tool_started("t", {})
                with pytest.raises(TrackingError):
                    await never_started.start()
                await run.finish()
        # a child that never started is either not recorded or recorded whole
        well_formed(recorder.events)

    async def test_engine_close_with_tracked_runs_open(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            engine = await stack.enter_async_context(ExecutionEngine())
            recorder = record(engine)
            run = engine.track("bot")
            await run.start()
            opened = await self.open_everything(run)
            other = engine.track("second")
            await other.start()
            inside = engine.track("inside-a-block")
            async with inside:
                await stack.aclose()  # the engine closes while the block is still open
                assert inside.finished
        self.check_closed(recorder, opened)
        assert run.status == other.status == inside.status == "cancelled"
        ends = {e.execution_id: e for e in recorder.of(ExecutionFinished)}
        assert len(ends) == 4
        assert all(ends[r.execution_id].error is not None for r in (run, other, inside))
        with records_nothing(recorder):
            await run.finish()  # harmless after the close
            with pytest.raises(TrackingError):
                await run.tool_started("t", {})

    async def test_the_engine_close_cancels_as_an_interrupt(self) -> None:
        """``cancelled`` by the close is a cancellation (DESIGN §2: cause ``interrupt``), as
        for the native executions the same close cancels and the calls it closes."""
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track("bot")
            await run.start()
            await run.tool_started("t", {}, tool_call_id="open")
        (end,) = recorder.of(ExecutionFinished)
        assert end.status == "cancelled"
        call_error = finished_calls(recorder)["open"].error
        assert call_error is not None and call_error.cause == "interrupt"
        assert end.error is not None and end.error.cause == "interrupt", end.error

    async def test_a_call_whose_pre_hooks_outlive_the_run_records_nothing_after_its_end(
        self,
    ) -> None:
        entered = anyio.Event()
        gate = anyio.Event()

        async def waits(use: ToolUseContext) -> None:
            entered.set()
            await gate.wait()

        async with ExecutionEngine(hooks=[HookMatcher(pattern="slow", pre=[waits])]) as engine:
            recorder = record(engine)
            run = engine.track("bot")
            await run.start()
            results: list[TrackedToolCall] = []

            async def caller() -> None:
                results.append(await run.tool_started("slow", {}, tool_call_id="slow"))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(caller)
                await entered.wait()
                with pytest.raises(TrackingError, match="slow"):  # reserved while hooks run
                    await run.tool_started("fast", {}, tool_call_id="slow")
                await run.finish()
                gate.set()
        well_formed(recorder.events)
        (call,) = results
        assert not call.allowed and call.done
        assert recorder.events[-1].kind == "ExecutionFinished"

    async def test_a_run_finished_while_a_calls_post_hooks_run(self) -> None:
        """``finish()`` closes the call ``cancelled``; when its post-hooks end later, nothing
        more is recorded and the call's ``status`` stays the one recorded."""
        entered = anyio.Event()
        gate = anyio.Event()

        async def waits(use: ToolUseContext, output: Any) -> None:
            entered.set()
            await gate.wait()

        async with ExecutionEngine(hooks=[HookMatcher(post=[waits])]) as engine:
            recorder = record(engine)
            run = engine.track("bot")
            await run.start()
            call = await run.tool_started("t", {}, tool_call_id="late")
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call.finished, "output")
                await entered.wait()
                await run.finish()
                gate.set()
        well_formed(recorder.events)
        assert finished_calls(recorder)["late"].status == "cancelled"
        assert recorder.events[-1].kind == "ExecutionFinished"
        assert call.done and call.status == "cancelled"  # what was recorded

    async def test_gapless_seq_under_concurrent_callbacks(self) -> None:
        async def pre(use: ToolUseContext) -> None:
            await anyio.lowlevel.checkpoint()

        async def post(use: ToolUseContext, output: Any) -> None:
            await anyio.lowlevel.checkpoint()

        async with ExecutionEngine(hooks=[HookMatcher(pre=[pre], post=[post])]) as engine:
            recorder = record(engine)

            async def one(run: TrackedExecution, i: int) -> None:
                call = await run.tool_started("t", {"i": i})
                await anyio.lowlevel.checkpoint()
                if i % 3:
                    await call.finished(i)
                else:
                    await call.failed(f"call {i}")
                if i % 4 == 0:
                    question = await run.interaction_started(f"q{i}")
                    await anyio.lowlevel.checkpoint()
                    await run.interaction_resolved(question, "accepted")

            async with engine.track("bot") as run:
                child = run.child("sub")
                await child.start()
                async with anyio.create_task_group() as tasks:
                    for i in range(30):
                        tasks.start_soon(one, run if i % 2 else child, i)
                await child.finish()
        well_formed(recorder.events)
        assert len(recorder.of(ToolCallFinished)) == 30


class TestAttributionAndScope:
    async def test_attribution_rides_the_events(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            with onlooker.attribution(task_id="agent-1"):
                run = engine.track("bot")
            async with run:
                plain = await run.tool_started("a", {})
                await plain.finished(1)
                with onlooker.attribution(phase="plan"):
                    phased = await run.tool_started("b", {})
                    await phased.finished(2)
                    asked = await run.interaction_started("ok?")
                with onlooker.attribution(task_id="override"):
                    overridden = await run.tool_started("c", {})
                    await overridden.finished(3)
                run.select_intent("intent-1")
                await run.interaction_resolved(asked, "accepted")
                intended = await run.tool_started("d", {})
                await intended.finished(4)
        well_formed(recorder.events)
        by_call = {e.tool_call_id: e.attribution for e in recorder.of(ToolCallStarted)}
        (start,) = recorder.of(ExecutionStarted)
        assert start.attribution.task_id == "agent-1" and start.attribution.phase is None
        assert by_call[plain.tool_call_id].task_id == "agent-1"
        assert by_call[phased.tool_call_id].phase == "plan"
        assert by_call[phased.tool_call_id].task_id == "agent-1"
        assert recorder.of(InteractionStarted)[0].attribution.phase == "plan"
        assert by_call[overridden.tool_call_id].task_id == "override"
        assert by_call[intended.tool_call_id].intent_id == "intent-1"
        assert recorder.of(InteractionResolved)[0].attribution.intent_id == "intent-1"
        assert recorder.of(ExecutionFinished)[0].attribution.intent_id == "intent-1"
        assert all(e.attribution.depth == 0 for e in recorder.events)

    async def test_a_calls_pair_carries_the_attribution_it_started_with(
        self, tmp_path: Path
    ) -> None:
        """Frameworks report a call's end from another callback, outside the scope the start
        had: the finished event still belongs to the call that started in that phase."""
        plugin = history.plugin(f"sqlite:///{tmp_path / 'h.db'}")
        async with ExecutionEngine(plugins=[plugin]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                with onlooker.attribution(task_id="agent-1", phase="plan"):
                    call = await run.tool_started("search", {})
                    failing = await run.tool_started("search", {})
                await call.finished("found")  # reported from another callback
                await failing.failed("nope")
            tree = await engine.extension(plugin).get_execution(run.execution_id)
        well_formed(recorder.events)
        for one in (call, failing):
            (started,) = [
                e for e in recorder.of(ToolCallStarted) if e.tool_call_id == one.tool_call_id
            ]
            assert started.attribution.phase == "plan"
            assert finished_calls(recorder)[one.tool_call_id].attribution == started.attribution
        assert tree is not None
        assert [(c.phase, c.task_id) for c in tree.tool_calls] == [("plan", "agent-1")] * 2

    async def test_observing_scope_is_that_of_the_caller_of_track(self) -> None:
        at_track = RecordingObserver()
        at_call = RecordingObserver()
        async with ExecutionEngine() as engine:
            everything = record(engine)
            with onlooker.observing(at_track):
                run = engine.track("bot")
                child = None

            async def callback(i: int) -> None:  # another task, another scope
                with onlooker.observing(at_call):
                    call = await run.tool_started("t", {"i": i})
                    await call.finished(i)
                    question = await run.interaction_started("?")
                    await run.interaction_resolved(question, "declined")

            async with run:  # entered outside the scope
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(callback, 1)
                    tasks.start_soon(callback, 2)
                with onlooker.observing(at_call):
                    child = run.child("sub")
                    async with child:
                        await (await child.tool_started("t", {})).finished(0)
        assert child is not None
        well_formed(at_track.events)
        assert at_track.events == everything.events
        assert {e.execution_id for e in at_track.events} == {run.execution_id, child.execution_id}
        assert at_call.events == []


# -- 3. plugins record tracked executions as native ones ---------------------------------------


async def tracked_session(engine: ExecutionEngine) -> TrackedExecution:
    """A small tracked agent: reads, a write, a failure, a question, a sub-agent."""
    engine.declare_tool(ToolDeclaration("Read", reads="file_path"))
    engine.declare_tool(ToolDeclaration("Write", mutating=True, writes="file_path"))
    engine.declare_tool(ToolDeclaration("Edit", mutating=True, edits="file_path"))
    async with engine.track("support-bot", trigger="langgraph", input={"ticket": 7}) as run:
        read = await run.tool_started("Read", {"file_path": "a.md"}, tool_call_id="call_1")
        await read.finished("# A")
        write = await run.tool_started("Write", {"file_path": "out.md", "content": "x"})
        await write.finished(None, duration_ms=5.0)
        broken = await run.tool_started("Write", {"file_path": "ro.md", "content": "x"})
        await broken.failed(PermissionError("read-only"))
        question = await run.interaction_started("Send the reply?", interaction_id="perm-1")
        await run.interaction_resolved(question, "accepted", {"send": True})
        task = await run.tool_started("Task", {"prompt": "summarize"}, tool_call_id="task_1")
        async with run.child("summarizer", parent_tool_call_id="task_1") as child:
            edit = await child.tool_started("Edit", {"file_path": "notes.md"})
            await edit.finished("ok")
            unknown = await child.tool_started("Search", {"q": "x"})
            await unknown.finished([])
        await task.finished("summary")
    return run


class TestPlugins:
    async def test_history_records_the_tree_and_the_events(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'h.db'}"
        plugin = history.plugin(url)
        async with ExecutionEngine(plugins=[plugin]) as engine:
            recorder = record(engine)
            run = await tracked_session(engine)
            store = engine.extension(plugin)
            tree = await store.get_execution(run.execution_id)
            assert tree is not None
            assert await store.events(run.execution_id) == recorder.for_execution(run.execution_id)
            (child_id,) = {e.execution_id for e in recorder.events} - {run.execution_id}
            assert await store.events(child_id) == recorder.for_execution(child_id)
        assert tree is not None
        assert tree.program == "support-bot" and tree.trigger == "langgraph"
        assert tree.status == "completed" and tree.input == {"ticket": 7}
        assert [(c.tool, c.status) for c in tree.tool_calls] == [
            ("Read", "completed"),
            ("Write", "completed"),
            ("Write", "failed"),
            ("Task", "completed"),
        ]
        assert tree.tool_calls[0].tool_call_id == "call_1"
        assert tree.tool_calls[0].args == {"file_path": "a.md"}
        assert tree.tool_calls[0].result == "# A"
        assert tree.tool_calls[1].duration_ms == 5.0
        assert [(i.interaction_id, i.status) for i in tree.interactions] == [("perm-1", "accepted")]
        (child,) = tree.children
        assert child.execution_id == child_id and child.program == "summarizer"
        assert child.parent_execution_id == run.execution_id
        assert child.parent_tool_call_id == "task_1" and child.depth == 1
        assert [(c.tool, c.status) for c in child.tool_calls] == [
            ("Edit", "completed"),
            ("Search", "completed"),
        ]

        def show() -> Any:
            return CliRunner().invoke(app, ["history", "show", run.execution_id, "--db", url])

        shown = await anyio.to_thread.run_sync(show)
        assert shown.exit_code == 0, shown.output
        for text in ("support-bot", "summarizer", "Read", "Edit"):
            assert text in shown.stdout

    async def test_audit_writes_a_trail_that_verifies(self, tmp_path: Path) -> None:
        plugin = audit.plugin(directory=tmp_path, session_id="s1")
        async with ExecutionEngine(plugins=[plugin]) as engine:
            recorder = record(engine)
            await tracked_session(engine)
            trail = engine.extension(plugin)
        assert list(audit.tail(trail.session_dir)) == recorder.events
        report = audit.verify(trail.path)
        assert report.ok and report.records == len(recorder.events)
        assert not trail.error_path.exists()

    async def test_metrics_count_by_status(self) -> None:
        plugin = metrics.plugin()
        async with ExecutionEngine(plugins=[plugin]) as engine:
            await tracked_session(engine)
            with contextlib.suppress(RuntimeError):
                async with engine.track("crashes", trigger="langgraph") as run:
                    raise RuntimeError("boom")
            left_open = engine.track("left-open", trigger="langgraph")
            await left_open.start()
            await left_open.interaction_started("?")
            await left_open.tool_started("Read", {"file_path": "x"})
            exposition = engine.extension(plugin).exposition()
            values = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(exposition)
                for s in family.samples
            }
            assert values["onlooker_interactions_open", ()] == 1
        exposition = engine.extension(plugin).exposition()
        values = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(exposition)
            for s in family.samples
        }
        executions = "onlooker_executions_total"
        assert values[executions, (("status", "completed"), ("trigger", "langgraph"))] == 1
        assert values[executions, (("status", "completed"), ("trigger", "spawn"))] == 1
        assert values[executions, (("status", "failed"), ("trigger", "langgraph"))] == 1
        assert values[executions, (("status", "cancelled"), ("trigger", "langgraph"))] == 1
        assert run.status == "failed"
        calls = "onlooker_tool_calls_total"
        by_status: dict[str, float] = {}
        for (name, labels), value in values.items():
            if name == calls:
                status = dict(labels)["status"]
                by_status[status] = by_status.get(status, 0) + value
        assert by_status == {"completed": 5, "failed": 1, "cancelled": 1}
        assert values["onlooker_interactions_open", ()] == 0
        assert values["onlooker_execution_duration_seconds_count", ()] == 4
        # a name no tool declares shares one label, as for a native program
        assert values[calls, (("status", "completed"), ("tool", "other"))] >= 1
        assert not any(dict(labels).get("tool") == "Search" for _, labels in values)

    async def test_metrics_label_declared_foreign_tools_by_name(self) -> None:
        """A declared foreign tool is a known tool, as an ``@tool`` is: its calls keep their
        name as the ``tool`` label (a tracked agent's calls are not all ``other``)."""
        plugin = metrics.plugin()
        async with ExecutionEngine(plugins=[plugin]) as engine:
            await tracked_session(engine)  # declares Read, Write, Edit; Search stays unknown
            exposition = engine.extension(plugin).exposition()
        values = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(exposition)
            for s in family.samples
        }
        calls = "onlooker_tool_calls_total"
        labelled = {
            (dict(labels)["tool"], dict(labels)["status"]): value
            for (name, labels), value in values.items()
            if name == calls
        }
        assert labelled == {
            ("Read", "completed"): 1,
            ("Write", "completed"): 1,
            ("Write", "failed"): 1,
            ("Edit", "completed"): 1,
            ("other", "completed"): 2,  # Task and Search: declared by nobody
        }

    async def test_summary_counts_calls_files_and_children(self) -> None:
        plugin = summary.plugin()
        async with ExecutionEngine(plugins=[plugin]) as engine:
            run = await tracked_session(engine)
            store = engine.extension(plugin)
            report = store.get(run.execution_id)
        assert report is not None
        assert report.program == "support-bot" and report.status == "completed"
        assert report.tool_calls == 4
        assert report.tool_usage == {"Read": 1, "Task": 1, "Write": 2}
        assert report.files_read == ["a.md"]
        assert report.files_written == ["out.md"]  # the failed write is not counted
        assert report.files_edited == []
        assert report.success_rate == pytest.approx(3 / 4)
        assert [(e.tool, e.status, e.type) for e in report.errors] == [
            ("Write", "failed", "PermissionError")
        ]
        (child,) = report.children
        assert child.program == "summarizer" and child.tool_calls == 2
        assert child.files_edited == ["notes.md"] and child.files_modified == ["notes.md"]

    async def test_summary_of_a_tool_declared_after_the_run_started(self) -> None:
        plugin = summary.plugin()
        async with ExecutionEngine(plugins=[plugin]) as engine:
            async with engine.track("bot") as run:
                before = await run.tool_started("Save", {"to": "early.txt"})
                await before.finished(None)
                engine.declare_tool(ToolDeclaration("Save", writes="to"))
                after = await run.tool_started("Save", {"to": "late.txt"})
                await after.finished(None)
            report = engine.extension(plugin).get(run.execution_id)
        assert report is not None and report.files_written == ["late.txt"]


# -- 4. bad input: a clear error, nothing recorded ---------------------------------------------


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def round_trips(events: Sequence[ExecutionEvent]) -> None:
    for event in events:
        assert onlooker.parse_event(event.model_dump_json()) == event
        json.loads(event.model_dump_json())


class TestBadInput:
    async def test_finishing_a_call_twice(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                call = await run.tool_started("t", {}, tool_call_id="call_9")
                await call.finished(1)
                with records_nothing(recorder):
                    for again in (call.finished(2), call.failed("late")):
                        with pytest.raises(TrackingError, match="call_9") as caught:
                            await again
                        assert caught.value.tool_call_id == "call_9"
                        assert caught.value.execution_id == run.execution_id
                        assert isinstance(caught.value, onlooker.OnlookerError)
                failed = await run.tool_started("t", {})
                await failed.failed("x")
                with records_nothing(recorder), pytest.raises(TrackingError):
                    await failed.finished(1)
        well_formed(recorder.events)
        assert finished_calls(recorder)["call_9"].result == 1

    async def test_finishing_a_call_twice_at_the_same_time(self) -> None:
        entered = anyio.Event()
        gate = anyio.Event()

        async def slow_post(use: ToolUseContext, output: Any) -> None:
            entered.set()
            await gate.wait()

        async with ExecutionEngine(hooks=[HookMatcher(post=[slow_post])]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                call = await run.tool_started("t", {}, tool_call_id="racy")
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(call.finished, "first")
                    await entered.wait()  # the first finish is in its post-hooks
                    with records_nothing(recorder), pytest.raises(TrackingError, match="racy"):
                        await call.finished("second")
                    gate.set()
        well_formed(recorder.events)
        assert finished_calls(recorder)["racy"].result == "first"

    async def test_a_call_of_another_execution(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("a") as run_a, engine.track("b") as run_b:
                call_a = await run_a.tool_started("t", {}, tool_call_id="only-in-a")
                with records_nothing(recorder):
                    with pytest.raises(TrackingError, match="only-in-a") as caught:
                        run_b.call(call_a.tool_call_id)
                    assert caught.value.tool_call_id == "only-in-a"
                    assert caught.value.execution_id == run_b.execution_id
                assert run_a.call("only-in-a") is call_a
                same_id = await run_b.tool_started("t", {}, tool_call_id="only-in-a")
                assert same_id is not call_a  # ids are per execution
                await call_a.finished("a")
                await same_id.finished("b")
        well_formed(recorder.events)

    async def test_calls_on_a_finished_or_not_started_run(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            fresh = engine.track("fresh")
            with records_nothing(recorder):
                with pytest.raises(TrackingError, match="not started"):
                    await fresh.tool_started("t", {}, tool_call_id="c1")
                with pytest.raises(TrackingError, match="not started"):
                    await fresh.interaction_started("?")
            async with engine.track("done") as done:
                pass
            with records_nothing(recorder):
                with pytest.raises(TrackingError, match="finished") as caught:
                    await done.tool_started("t", {}, tool_call_id="c2")
                assert caught.value.execution_id == done.execution_id
                assert caught.value.tool_call_id == "c2"
                with pytest.raises(TrackingError, match="finished"):
                    await done.interaction_started("?")
        well_formed(recorder.events)

    async def test_unknown_interactions_and_resolving_twice(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                asked = await run.interaction_started("?", interaction_id="q1")
                with records_nothing(recorder):
                    with pytest.raises(TrackingError, match="no-such-question") as caught:
                        await run.interaction_resolved("no-such-question", "accepted")
                    assert caught.value.interaction_id == "no-such-question"
                    with pytest.raises(TrackingError, match="q1"):
                        await run.interaction_started("again?", interaction_id="q1")
                await run.interaction_resolved(asked, "accepted")
                with records_nothing(recorder), pytest.raises(TrackingError, match="q1"):
                    await run.interaction_resolved(asked, "declined")
                with records_nothing(recorder), pytest.raises(TrackingError, match="q1"):
                    await run.interaction_started("again?", interaction_id="q1")
                with records_nothing(recorder), pytest.raises(TypeError):
                    await run.interaction_started(42)  # type: ignore[arg-type]  # the point
                with records_nothing(recorder), pytest.raises(TypeError):
                    await run.interaction_started("?", schema="not a schema")  # type: ignore[arg-type]
            other = engine.track("other")
            async with other:
                with records_nothing(recorder), pytest.raises(TrackingError):
                    await other.interaction_resolved("q1", "accepted")  # another run's id
        well_formed(recorder.events)
        assert [e.status for e in recorder.of(InteractionResolved)] == ["accepted"]

    @pytest.mark.parametrize(
        "args",
        [["a", "list"], "a string", None, 42, {1: "an int key"}],
        ids=["list", "str", "none", "int", "int-key"],
    )
    async def test_arguments_that_are_not_a_json_object(self, args: Any) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                with records_nothing(recorder):
                    with pytest.raises(ToolInputError, match="search") as caught:
                        await run.tool_started("search", args, tool_call_id="c1")
                    assert caught.value.tool == "search"
                call = await run.tool_started("search", {"q": 1}, tool_call_id="c1")  # id free
                await call.finished(None)
        well_formed(recorder.events)

    async def test_values_that_are_not_json_are_snapshotted(self) -> None:
        cycle: list[Any] = []
        cycle.append(cycle)
        odd = {
            "data": b"\x00\xff",
            "broken": BadRepr(),
            "path": Path("/tmp/a.md"),
            "when": datetime(2024, 1, 2, tzinfo=UTC),
            "nested": {"set": {1}, "tuple": (1, 2)},
            "cycle": cycle,
        }
        seen: list[dict[str, Any]] = []

        def spy(use: ToolUseContext) -> None:
            seen.append(dict(use.tool_input))

        async with ExecutionEngine(hooks=[HookMatcher(pre=[spy])]) as engine:
            recorder = record(engine)
            raw_input: Any = {"raw": b"bytes", "obj": BadRepr()}  # not JSON: snapshotted
            run = engine.track("bot", input=raw_input)
            async with run:
                call = await run.tool_started("t", odd)
                assert call.allowed and call.input["path"] == Path("/tmp/a.md")
                assert await call.finished(BadRepr()) is not None
                other = await run.tool_started("t", {"x": 1})
                await other.failed("x")
                question = await run.interaction_started("?", schema={"default": b"x"})
                await run.interaction_resolved(question, "accepted", {"answer": BadRepr()})
                await run.finish(result=b"done")
        well_formed(recorder.events)
        round_trips(recorder.events)
        assert seen[0]["broken"] is odd["broken"]  # hooks see the values themselves
        (opened, _) = recorder.of(ToolCallStarted)
        assert set(opened.args) == set(odd)
        assert isinstance(opened.args["broken"], str) and "BadRepr" in opened.args["broken"]
        assert opened.args["path"] == "/tmp/a.md"
        odd["path"] = "changed after the event"
        assert opened.args["path"] == "/tmp/a.md"  # a snapshot
        result = finished_calls(recorder)[call.tool_call_id].result
        assert isinstance(result, str) and "BadRepr" in result

    async def test_a_duplicate_tool_call_id(self) -> None:
        hooks = [HookMatcher(pattern="blocked", pre=[verdict(HookAction.BLOCK)])]
        async with ExecutionEngine(hooks=hooks) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                call = await run.tool_started("t", {"n": 1}, tool_call_id="dup")
                refused = await run.tool_started("blocked", {}, tool_call_id="refused")
                with records_nothing(recorder):
                    for used in ("dup", "refused"):
                        with pytest.raises(TrackingError, match=used) as caught:
                            await run.tool_started("t", {"n": 2}, tool_call_id=used)
                        assert caught.value.tool_call_id == used
                await call.finished("still fine")  # the first call is untouched
                with records_nothing(recorder), pytest.raises(TrackingError, match="dup"):
                    await run.tool_started("t", {}, tool_call_id="dup")  # closed: still used
                assert run.call("dup") is call and run.call("refused") is refused
                with records_nothing(recorder), pytest.raises(TypeError):
                    await run.tool_started("t", {}, tool_call_id="")
                with records_nothing(recorder), pytest.raises(TypeError):
                    await run.tool_started("", {})
        well_formed(recorder.events)
        assert finished_calls(recorder)["dup"].result == "still fine"


# -- foreign tool declarations ----------------------------------------------------------------


@onlooker.tool(mutating=True, writes="path")
def write_file(path: str, content: str = "") -> None:
    """Write (pretend)."""


class TestDeclarations:
    def test_validation(self) -> None:
        declared = ToolDeclaration("Write", mutating=True, writes="file_path")
        assert (declared.name, declared.mutating, declared.writes) == ("Write", True, "file_path")
        assert (declared.reads, declared.edits, declared.description) == (None, None, "")
        with pytest.raises(ValueError, match="name"):
            ToolDeclaration("")
        with pytest.raises(ValueError, match="name"):
            ToolDeclaration(None)  # type: ignore[arg-type]  # the point of the test
        for role in ("reads", "writes", "edits"):
            for bad in ("", 3):
                arguments: dict[str, Any] = {role: bad}
                with pytest.raises(ValueError, match=role):
                    ToolDeclaration("X", **arguments)
        with pytest.raises(dataclasses.FrozenInstanceError):
            declared.mutating = False  # type: ignore[misc]  # the point of the test
        assert write_file.declaration == ToolDeclaration(
            "write_file", description="Write (pretend).", mutating=True, writes="path"
        )

    async def test_declare_tool_conflicts(self) -> None:
        async with ExecutionEngine(tools=[write_file]) as engine:
            write = ToolDeclaration("Write", mutating=True, writes="file_path")
            engine.declare_tool(write)
            engine.declare_tool(ToolDeclaration("Write", mutating=True, writes="file_path"))
            assert engine.tools.declaration("Write") == write
            assert engine.tools.is_mutating("Write")
            assert "Write" not in engine.tools  # a declaration is not a tool onlooker runs
            assert engine.tools.declarations()["write_file"] == write_file.declaration
            with pytest.raises(ValueError, match="Write"):
                engine.declare_tool(ToolDeclaration("Write", mutating=False, writes="file_path"))
            assert engine.tools.declaration("Write") == write  # unchanged
            with pytest.raises(ValueError, match="write_file"):
                engine.declare_tool(ToolDeclaration("write_file"))
            with pytest.raises(ValueError, match="write_file"):
                engine.declare_tool(write_file.declaration)  # even identical: it is runnable
            with pytest.raises(TypeError):
                engine.declare_tool("Write")  # type: ignore[arg-type]  # the point of the test
            assert engine.tools.declaration("write_file") == write_file.declaration

    async def test_calling_a_declared_only_tool_from_a_program_is_unknown(self) -> None:
        caught: list[onlooker.UnknownToolError] = []

        async def program(ctx: ExecutionContext) -> None:
            try:
                await ctx.call("Write", file_path="a.md")
            except onlooker.UnknownToolError as exc:
                caught.append(exc)

        async with ExecutionEngine(tools=[write_file]) as engine:
            engine.declare_tool(ToolDeclaration("Write", mutating=True, writes="file_path"))
            recorder = record(engine)
            result = await engine.execute(program)
        assert result.status == "completed"
        (exc,) = caught
        assert exc.tool == "Write"
        (end,) = recorder.of(ToolCallFinished)
        assert end.status == "failed"
        assert end.error is not None and end.error.type == "UnknownToolError"


# -- 6. what a stranger's review broke -----------------------------------------------------------


class TestIdsAndLateUse:
    async def test_an_execution_id_is_used_by_one_open_run_at_a_time(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            first = engine.track("a", execution_id="X")
            second = engine.track("b", execution_id="X")  # both made before either started
            async with first:
                with records_nothing(recorder), pytest.raises(TrackingError, match="'X'"):
                    await second.start()
                child = first.child("c", execution_id="X")
                with records_nothing(recorder), pytest.raises(TrackingError, match="already used"):
                    await child.start()
            with pytest.raises(TrackingError, match="finished"):
                await second.start()
        well_formed(recorder.events)
        assert [e.kind for e in recorder.events].count("ExecutionStarted") == 1

    async def test_the_id_of_a_native_execution_is_taken_too(self) -> None:
        """An inline root, a child (of an inline or a detached run), running or just
        finished: one id names one execution, whoever runs it."""
        ids: list[str] = []

        async def child(ctx: ExecutionContext) -> None:
            ids.append(ctx.execution_id)
            await clash(ctx.execution_id)

        async def clash(execution_id: str) -> None:
            with records_nothing(recorder), pytest.raises(TrackingError, match="already used"):
                await engine.track("clash", execution_id=execution_id).start()

        async def program(ctx: ExecutionContext) -> None:
            ids.append(ctx.execution_id)
            await clash(ctx.execution_id)
            await ctx.spawn(child)
            await ctx.elicit("go on?")

        async with ExecutionEngine() as engine:
            recorder = record(engine)
            await engine.execute(program)
            outcome = await engine.execute_with_pause(program)
            assert isinstance(outcome, onlooker.PausedExecution)
            await engine.resume(outcome.execution_id, onlooker.InteractionResponse.decline())
            assert len(ids) == 4
            for execution_id in ids:
                with records_nothing(recorder), pytest.raises(TrackingError, match="finished"):
                    await engine.track("late", execution_id=execution_id).start()
        well_formed(recorder.events)
        starts = [e.execution_id for e in recorder.of(onlooker.ExecutionStarted)]
        assert sorted(starts) == sorted(ids)

    async def test_a_cancelled_tool_started_keeps_its_id_taken(self) -> None:
        async def slow(use: ToolUseContext) -> None:
            await anyio.sleep(10)

        async with ExecutionEngine(hooks=[HookMatcher(pattern="slow", pre=[slow])]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                with anyio.move_on_after(0.05):
                    await run.tool_started("slow", {}, tool_call_id="k")
                assert run.call("k").status == "cancelled"
                with records_nothing(recorder), pytest.raises(TrackingError, match="'k'"):
                    await run.tool_started("fast", {}, tool_call_id="k")
        well_formed(recorder.events)

    async def test_a_run_cannot_start_on_a_closed_engine(self) -> None:
        engine = ExecutionEngine()
        async with engine:
            recorder = record(engine)
            never_started = engine.track("late")
            too_late = engine.track("late too")
        with pytest.raises(TrackingError, match="closed"):
            await too_late.start()
        await never_started.finish()  # nothing to record it in, and no error
        assert never_started.finished and never_started.status == "completed"
        assert recorder.events == []

    async def test_the_first_abort_is_the_one_reported(self) -> None:
        abort = verdict(HookAction.ABORT, reason="stop everything")
        async with ExecutionEngine(hooks=[HookMatcher(pattern="x", pre=[abort])]) as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                for tool in ("x", "y", "z"):
                    call = await run.tool_started(tool, {})
                    assert not call.allowed
        finish = recorder.of(ExecutionFinished)[0]
        assert finish.status == "failed" and finish.error is not None
        assert finish.error.message.count("refused") == 0
        assert "stop everything" in finish.error.message

    async def test_a_native_context_cannot_call_after_its_execution(self) -> None:
        kept: list[ExecutionContext] = []

        @onlooker.tool
        def one() -> int:
            return 1

        async def program(ctx: ExecutionContext) -> None:
            kept.append(ctx)

        async with ExecutionEngine(tools=[one]) as engine:
            recorder = record(engine)
            await engine.execute(program)
            with (
                records_nothing(recorder),
                pytest.raises(onlooker.ExecutionError, match="finished"),
            ):
                await kept[0].call(one)


class TestErrorsOfRunsAndCalls:
    async def test_failed_takes_an_error_info(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                interrupted = await run.tool_started("t", {})
                await interrupted.failed(
                    onlooker.ErrorInfo(type="Interrupted", message="user", cause="interrupt")
                )
                broken = await run.tool_started("t", {})
                await broken.failed(onlooker.ErrorInfo(type="E", message="m", cause="defect"))
        statuses = [e.status for e in recorder.of(ToolCallFinished)]
        assert statuses == ["cancelled", "failed"]

    async def test_a_failed_run_without_an_error_still_says_so(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track("bot")
            await run.start()
            with pytest.raises(ValueError, match="completed"), records_nothing(recorder):
                await run.finish("completed", error="boom")
            await run.finish("failed")
        error = recorder.of(ExecutionFinished)[0].error
        assert error is not None and error.cause == "failure"

    async def test_a_question_that_fails_expires_or_is_cancelled_carries_an_error(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                for status in ("failed", "expired", "cancelled"):
                    iid = await run.interaction_started("Deploy?")
                    await run.interaction_resolved(iid, status)
                iid = await run.interaction_started("Deploy?")
                await run.interaction_resolved(iid, "failed", error=RuntimeError("prompt broke"))
                iid = await run.interaction_started("Deploy?")
                with pytest.raises(ValueError, match="accepted"), records_nothing(recorder):
                    await run.interaction_resolved(iid, "accepted", error="no")
                await run.interaction_resolved(iid, "accepted", response={"ok": True})
        errors = [(e.status, e.error) for e in recorder.of(InteractionResolved)]
        assert [(status, error and (error.type, error.cause)) for status, error in errors] == [
            ("failed", ("Error", "failure")),
            ("expired", ("Error", "interrupt")),
            ("cancelled", ("Error", "interrupt")),
            ("failed", ("RuntimeError", "defect")),
            ("accepted", None),
        ]
        assert errors[1][1] is not None and errors[1][1].message == "the interaction expired"

    async def test_mutating_must_be_a_bool(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                with records_nothing(recorder), pytest.raises(TypeError, match="mutating"):
                    await run.tool_started("t", {}, mutating="false")  # type: ignore[arg-type]  # the point

    async def test_validate_must_be_callable(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            async with engine.track("bot") as run:
                with records_nothing(recorder), pytest.raises(TypeError, match="validate"):
                    await run.tool_started("t", {}, validate={"a": int})  # type: ignore[arg-type]  # the point


class TestSynchronousFinishAndParents:
    async def test_finish_nowait_closes_the_run_and_what_is_open(self) -> None:
        async with ExecutionEngine() as engine:
            recorder = record(engine)
            run = engine.track("bot")
            await run.start()
            child = run.child("sub")
            assert child.parent is run and run.parent is None
            await child.start()
            call = await run.tool_started("t", {})
            run.finish_nowait("failed", error="the framework gave up")  # a sync callback
            run.finish_nowait()  # twice: harmless
            assert run.finished and run.status == "failed" and call.status == "cancelled"
            assert child.finished and child.status == "cancelled"
        well_formed(recorder.events)
        finish = [e for e in recorder.of(ExecutionFinished) if e.execution_id == run.execution_id]
        assert finish[0].error is not None and finish[0].error.message == "the framework gave up"
