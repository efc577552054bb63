"""observing(), emit_event() and attribution(): context-scoped observers and attribution."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import anyio
import anyio.lowlevel
import pytest

import onlooker
from onlooker import (
    Attribution,
    ExecutionContext,
    ExecutionEngine,
    ExecutionEvent,
    ToolCallStarted,
    emit_event,
    observing,
)
from onlooker.testing import RecordingObserver

pytestmark = pytest.mark.anyio


def event(seq: int = 0) -> ToolCallStarted:
    return ToolCallStarted(
        event_id=f"e{seq}",
        execution_id="x",
        seq=seq,
        at=datetime.now(UTC),
        attribution=Attribution(),
        tool_call_id="c",
        tool="t",
        args={},
    )


async def nothing(ctx: ExecutionContext) -> None:
    return None


class Stop(BaseException):
    """A BaseException that is not cancellation."""


class TestObserving:
    def test_emit_event_without_scope_is_a_no_op(self, caplog: pytest.LogCaptureFixture) -> None:
        closed = RecordingObserver()
        with observing(closed):
            pass
        with caplog.at_level(logging.DEBUG, logger="onlooker"):
            emit_event(event())  # nothing in scope: nothing happens, nothing raises
        assert closed.events == [], "a scope that has ended receives nothing"
        assert caplog.records == []

    def test_emit_event_refuses_what_is_not_an_event(self) -> None:
        """A dict reached the observers in scope, typed as receiving events."""
        recorder = RecordingObserver()
        with observing(recorder), pytest.raises(TypeError, match="not dict"):
            emit_event({"kind": "ToolCallStarted"})  # type: ignore[arg-type]
        assert recorder.events == []

    def test_sync_scope(self) -> None:
        recorder = RecordingObserver()
        sent = event()
        with observing(recorder):
            emit_event(sent)
        emit_event(event(1))
        assert recorder.events == [sent]

    async def test_async_scope(self) -> None:
        recorder = RecordingObserver()
        async with observing(recorder):
            emit_event(event(0))
            await anyio.lowlevel.checkpoint()
            emit_event(event(1))
        emit_event(event(2))
        assert [e.seq for e in recorder] == [0, 1]

    def test_nesting_adds(self) -> None:
        outer = RecordingObserver()
        inner = RecordingObserver()
        with observing(outer):
            emit_event(event(0))
            with observing(inner):
                emit_event(event(1))
            emit_event(event(2))
        assert [e.seq for e in outer] == [0, 1, 2]
        assert [e.seq for e in inner] == [1]

    def test_same_observer_twice_gets_it_twice(self) -> None:
        seen: list[int] = []

        def record(e: ExecutionEvent) -> None:
            seen.append(e.seq)

        with observing(record), observing(record):
            emit_event(event(0))
        assert seen == [0, 0]

    def test_plain_callable(self) -> None:
        seen: list[ExecutionEvent] = []
        with observing(seen.append):
            emit_event(event())
        assert len(seen) == 1

    def test_async_observer_is_refused(self) -> None:
        async def handle(e: ExecutionEvent) -> None:
            pass

        with pytest.raises(TypeError, match="synchronous"):
            observing(handle)

    def test_a_callable_returning_an_awaitable_is_an_error_in_a_scope(
        self, caplog: pytest.LogCaptureFixture, recwarn: pytest.WarningsRecorder
    ) -> None:
        """A scope runs observers inline: an awaitable it cannot await is closed, and
        the failure is counted and logged with what to do instead."""

        async def record(e: ExecutionEvent) -> None:
            raise AssertionError("never runs")

        with (
            caplog.at_level(logging.ERROR, logger="onlooker"),
            onlooker.observing(lambda e: record(e), name="lazy"),
        ):
            onlooker.emit_event(event())
        (record_,) = [r for r in caplog.records if r.name == "onlooker"]
        assert "lazy" in record_.getMessage()
        assert "engine.bus.subscribe" in record_.getMessage()
        assert not [w for w in recwarn if "never awaited" in str(w.message)]

    def test_not_an_observer(self) -> None:
        with pytest.raises(TypeError):
            observing("nope")  # type: ignore[arg-type]

    def test_a_scope_object_cannot_be_entered_twice(self) -> None:
        scope = observing(RecordingObserver())
        with scope, pytest.raises(RuntimeError, match="already"), scope:
            pass

    def test_a_scope_object_can_be_reused_after_exit(self) -> None:
        recorder = RecordingObserver()
        scope = observing(recorder)
        with scope:
            emit_event(event(0))
        with scope:
            emit_event(event(1))
        assert len(recorder) == 2

    def test_failing_scoped_observer_is_logged_and_isolated(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        after = RecordingObserver()

        def bad(e: ExecutionEvent) -> None:
            raise ValueError("scoped failure")

        with (
            caplog.at_level(logging.ERROR, logger="onlooker"),
            observing(bad, name="bad-scope"),
            observing(after),
        ):
            emit_event(event(3))
        assert len(after) == 1
        (record,) = caplog.records
        assert "bad-scope" in record.getMessage()
        assert "ToolCallStarted" in record.getMessage()

    def test_base_exception_passes_through(self) -> None:
        def interrupt(e: ExecutionEvent) -> None:
            raise KeyboardInterrupt

        with observing(interrupt), pytest.raises(KeyboardInterrupt):
            emit_event(event())

    def test_base_exception_after_every_scoped_observer(self) -> None:
        """Issue 12, item 8, for scopes: the later observers get the event before it propagates."""
        after = RecordingObserver()

        def stop(e: ExecutionEvent) -> None:
            raise Stop

        with observing(stop), observing(after), pytest.raises(Stop):
            emit_event(event(0))
        assert [e.seq for e in after] == [0]

    def test_emit_event_counts_failures(self, caplog: pytest.LogCaptureFixture) -> None:
        """Issue 14, item 2: a failure is counted whichever path delivered the event."""

        def bad(e: ExecutionEvent) -> None:
            raise ValueError("scoped failure")

        with caplog.at_level(logging.ERROR, logger="onlooker"), observing(bad) as scope:
            emit_event(event(0))
            emit_event(event(1))
        assert scope.errors == 2
        assert len(caplog.records) == 2

    async def test_scope_does_not_leak_into_sibling_tasks(self) -> None:
        recorder = RecordingObserver()

        async def inside() -> None:
            with observing(recorder):
                emit_event(event(0))
                await anyio.sleep(0.001)

        async def outside() -> None:
            await anyio.lowlevel.checkpoint()
            emit_event(event(1))

        async with anyio.create_task_group() as tg:
            tg.start_soon(inside)
            tg.start_soon(outside)
        assert [e.seq for e in recorder] == [0]

    async def test_engine_events_reach_the_scope_of_execute(self) -> None:
        recorder = RecordingObserver()
        other = RecordingObserver()
        async with ExecutionEngine() as engine:
            with observing(recorder):
                inside = await engine.execute(nothing)
            with observing(other):
                pass
            outside = await engine.execute(nothing)
        assert recorder.kinds() == ["ExecutionStarted", "ExecutionFinished"]
        assert {e.execution_id for e in recorder} == {inside.execution_id}
        assert outside.execution_id != inside.execution_id
        assert len(other) == 0

    async def test_failing_scoped_observer_is_counted_by_the_bus(self) -> None:
        def bad(e: ExecutionEvent) -> None:
            raise ValueError("scoped")

        async with ExecutionEngine() as engine:
            with observing(bad, name="bad-scope") as scope:
                result = await engine.execute(nothing)
        assert result.status == "completed"
        stats = engine.bus.statistics()
        assert stats.errors_by_observer == {"bad-scope": 2}
        assert scope.errors == 2

    async def test_scoped_deliveries_are_counted_by_the_bus(self) -> None:
        async with ExecutionEngine() as engine:
            with observing(RecordingObserver()), observing(RecordingObserver()):
                await engine.execute(nothing)
        assert engine.bus.statistics().delivered == 2 * 2


class TestAttribution:
    async def test_task_and_phase_ride_the_events(self) -> None:
        recorder = RecordingObserver()
        async with ExecutionEngine() as engine:
            with observing(recorder), onlooker.attribution(task_id="t1", phase="plan"):
                assert onlooker.current_attribution().task_id == "t1"
                await engine.execute(nothing)
            await engine.execute(nothing)
        first = [e for e in recorder.events if e.attribution.task_id == "t1"]
        assert len(first) == 2
        assert all(e.attribution.phase == "plan" for e in first)
        assert onlooker.current_attribution() == Attribution()

    def test_nesting_inherits_unset_fields(self) -> None:
        with onlooker.attribution(task_id="t", phase="a"):
            with onlooker.attribution(phase="b") as inner:
                assert inner.task_id == "t"
                assert inner.phase == "b"
            assert onlooker.current_attribution().phase == "a"
        assert onlooker.current_attribution().task_id is None

    async def test_async_form(self) -> None:
        async with onlooker.attribution(task_id="x") as current:
            assert current.task_id == "x"
            assert onlooker.current_attribution().task_id == "x"
        assert onlooker.current_attribution().task_id is None

    @pytest.mark.parametrize(("field", "value"), [("task_id", 5), ("phase", ["plan"])])
    def test_a_field_that_is_not_a_string_is_refused(self, field: str, value: object) -> None:
        """It was taken, and every event emitted inside then broke its own schema (history
        set the tool calls aside as poison: the execution read back without them)."""
        with pytest.raises(TypeError, match=f"{field} must be a string or None"):
            onlooker.attribution(**{field: value})  # type: ignore[arg-type]
        assert onlooker.current_attribution() == Attribution()
