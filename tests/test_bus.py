"""EventBus: isolation, ordering, async queues, overflow, statistics, Rx operators."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, assert_type

import anyio
import anyio.lowlevel
import pytest
import reactivex
from anyio import wait_all_tasks_blocked
from reactivex import operators as ops

import onlooker
from onlooker import (
    Attribution,
    BusStatistics,
    EventBus,
    ExecutionContext,
    ExecutionEngine,
    ExecutionEvent,
    ExecutionFinished,
    ToolCallStarted,
)
from onlooker.testing import RecordingObserver
from running import stray_cancellation

pytestmark = pytest.mark.anyio

Check = Callable[[Sequence[ExecutionEvent]], None]


def seq_of(e: ExecutionEvent) -> int:
    return e.seq


def kind_of(e: ExecutionEvent) -> str:
    return e.kind


def odd(e: ExecutionEvent) -> bool:
    return e.seq % 2 == 1


def tool_finished(e: ExecutionEvent) -> bool:
    return e.kind == "ToolCallFinished"


def event(seq: int, execution_id: str = "x") -> ToolCallStarted:
    return ToolCallStarted(
        event_id=f"e{seq}",
        execution_id=execution_id,
        seq=seq,
        at=datetime.now(UTC),
        attribution=Attribution(),
        tool_call_id=f"c{seq}",
        tool="t",
        args={},
    )


@onlooker.tool
def step(n: int) -> int:
    """Return ``n``."""
    return n


async def calls_forever(ctx: ExecutionContext) -> None:
    """Tool calls until cancelled, each waiting a little (the observers' workers run meanwhile)."""
    while True:
        await ctx.call(step, n=1)
        await anyio.sleep(0.001)


async def calls(ctx: ExecutionContext) -> int:
    """Four tool calls: 10 events."""
    total = 0
    for n in range(4):
        total += await ctx.call(step, n=n)
    return total


class Boom(Exception):
    pass


class Stop(BaseException):
    """A BaseException that is not cancellation."""


class TestSyncObservers:
    def test_inline_in_subscription_order(self) -> None:
        bus = EventBus()
        seen: list[tuple[str, int]] = []
        bus.subscribe(lambda e: seen.append(("a", e.seq)))
        bus.subscribe(lambda e: seen.append(("b", e.seq)))
        bus.emit(event(0))
        bus.emit(event(1))
        assert seen == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]

    def test_observer_object_and_callable(self) -> None:
        bus = EventBus()
        recorder = RecordingObserver()
        plain: list[ExecutionEvent] = []
        bus.subscribe(recorder)
        bus.subscribe(plain.append)
        sent = event(0)
        bus.emit(sent)
        assert recorder.events == plain == [sent]
        assert recorder.events[0] is sent

    def test_dispose_unsubscribes(self) -> None:
        bus = EventBus()
        seen: list[int] = []
        other: list[int] = []
        subscription = bus.subscribe(lambda e: seen.append(e.seq))
        bus.subscribe(lambda e: other.append(e.seq))
        bus.emit(event(0))
        subscription.dispose()
        bus.emit(event(1))
        assert seen == [0]
        assert other == [0, 1]
        assert bus.statistics().subscribers == 1

    def test_failing_observer_is_isolated_and_logged(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        bus = EventBus()
        before: list[int] = []
        after: list[int] = []

        def flaky(e: ExecutionEvent) -> None:
            if e.seq % 2 == 0:
                raise Boom(f"no {e.seq}")

        bus.subscribe(lambda e: before.append(e.seq))
        bus.subscribe(flaky, name="flaky-one")
        bus.subscribe(lambda e: after.append(e.seq))
        with caplog.at_level(logging.ERROR, logger="onlooker"):
            for seq in range(5):
                bus.emit(event(seq, execution_id="exec-42"))
        assert before == after == [0, 1, 2, 3, 4]
        records = [r for r in caplog.records if r.name == "onlooker"]
        assert len(records) == 3
        for record in records:
            message = record.getMessage()
            assert "flaky-one" in message
            assert "ToolCallStarted" in message
            assert "exec-42" in message
            assert record.exc_info is not None and isinstance(record.exc_info[1], Boom)
        stats = bus.statistics()
        assert stats.emitted == 5
        assert stats.observer_errors == 3
        assert stats.errors_by_observer == {"flaky-one": 3}
        assert stats.delivered == 5 * 3 - 3
        assert stats.dropped == 0
        assert stats.subscribers == 3

    def test_base_exception_propagates_to_the_emitter(self) -> None:
        bus = EventBus()
        first: list[int] = []

        def stop(e: ExecutionEvent) -> None:
            raise Stop

        bus.subscribe(lambda e: first.append(e.seq))
        bus.subscribe(stop)
        with pytest.raises(Stop):
            bus.emit(event(0))
        assert first == [0]
        assert bus.statistics().observer_errors == 0

    def test_keyboard_interrupt_propagates(self) -> None:
        bus = EventBus()

        def interrupt(e: ExecutionEvent) -> None:
            raise KeyboardInterrupt

        bus.subscribe(interrupt)
        with pytest.raises(KeyboardInterrupt):
            bus.emit(event(0))

    def test_statistics_is_a_frozen_snapshot(self) -> None:
        bus = EventBus()
        stats = bus.statistics()
        bus.subscribe(lambda e: None)
        bus.emit(event(0))
        assert stats.emitted == 0
        with pytest.raises(AttributeError):
            stats.emitted = 3  # type: ignore[misc]
        assert bus.statistics().emitted == 1
        assert bus.statistics().delivered == 1

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [({"overflow": "explode"}, "overflow"), ({"queue_size": 0}, "queue_size")],
    )
    def test_bad_subscribe_arguments(self, kwargs: dict[str, Any], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            EventBus().subscribe(lambda e: None, **kwargs)

    def test_not_an_observer(self) -> None:
        with pytest.raises(TypeError, match="handle"):
            EventBus().subscribe(42)  # type: ignore[arg-type]

    async def test_flush_without_async_observers_returns(self) -> None:
        bus = EventBus()  # no engine: flush() would raise if it had anything to wait for
        seen: list[int] = []
        bus.subscribe(lambda e: seen.append(e.seq))
        bus.emit(event(0))
        await bus.flush()
        assert seen == [0]
        stats = bus.statistics()
        assert (stats.emitted, stats.delivered, stats.queued) == (1, 1, 0)


class TestRx:
    def test_operators(self) -> None:
        bus = EventBus()
        batches: list[list[int]] = []
        bus.events.pipe(
            ops.filter(odd),
            ops.map(seq_of),
            ops.buffer_with_count(2),
        ).subscribe(batches.append)
        for seq in range(9):
            bus.emit(event(seq))
        assert batches == [[1, 3], [5, 7]]

    async def test_operators_on_engine_events(self) -> None:
        finished: list[list[str]] = []
        completed: list[bool] = []
        async with ExecutionEngine(tools=[step]) as engine:
            engine.bus.events.pipe(
                ops.filter(tool_finished),
                ops.map(kind_of),
                ops.buffer_with_count(2),
            ).subscribe(finished.append, on_completed=lambda: completed.append(True))
            result = await engine.execute(calls)
            assert result.value == 6
            assert completed == []
        assert finished == [["ToolCallFinished"] * 2] * 2
        assert completed == [True], "closing the engine completes the Rx stream"

    def test_raising_subscriber_costs_the_others_nothing(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        bus = EventBus()
        first: list[int] = []
        last: list[int] = []
        attempts: list[int] = []
        sync_seen: list[int] = []

        def explode(e: ExecutionEvent) -> None:
            attempts.append(e.seq)
            raise Boom("rx subscriber")

        bus.subscribe(lambda e: sync_seen.append(e.seq))
        bus.events.subscribe(lambda e: first.append(e.seq))
        bus.events.subscribe(explode)
        bus.events.pipe(ops.map(seq_of)).subscribe(last.append)
        with caplog.at_level(logging.ERROR, logger="onlooker"):
            for seq in range(4):
                bus.emit(event(seq))
        assert first == last == sync_seen == [0, 1, 2, 3]
        assert attempts == [0, 1, 2, 3], "the raising subscriber stays subscribed"
        stats = bus.statistics()
        assert stats.observer_errors == 4
        assert list(stats.errors_by_observer.values()) == [4]
        assert stats.subscribers == 4
        assert len([r for r in caplog.records if "ToolCallStarted" in r.getMessage()]) == 4

    def test_a_raising_subscriber_after_a_buffer_stays_subscribed(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Raised where the subscriber is called: the buffer is never left half-way (it used
        to fail on every later event, with an IndexError the user never raised)."""
        bus = EventBus()
        batches: list[list[int]] = []

        def once_bad(batch: list[int]) -> None:
            batches.append(batch)
            if len(batches) == 1:
                raise Boom("first batch")

        more = bus.events.pipe(ops.map(seq_of), ops.buffer_with_count(2))
        assert_type(more, reactivex.Observable[list[int]])  # users' mypy keeps Rx's types
        more.pipe(ops.map(len)).subscribe(lambda _: None)  # piped again: guarded at its end
        more.subscribe(once_bad)
        with caplog.at_level(logging.ERROR, logger="onlooker"):
            for seq in range(6):
                bus.emit(event(seq))
        assert batches == [[0, 1], [2, 3], [4, 5]]
        assert bus.statistics().errors_by_observer == {"bus.events#2": 1}
        (record,) = records_naming(caplog, "bus.events#2", "first batch")
        assert record.exc_info is not None and isinstance(record.exc_info[1], Boom)

    def test_a_connectable_pipeline_keeps_connect(self) -> None:
        bus = EventBus()
        seen: list[int] = []
        published = bus.events.pipe(ops.map(seq_of), ops.publish())
        published.subscribe(seen.append)
        bus.emit(event(0))
        published.connect()
        bus.emit(event(1))
        assert seen == [1]

    def test_each_subscriber_of_a_shared_pipeline_is_named_apart(self) -> None:
        bus = EventBus()
        shared = bus.events.pipe(ops.map(seq_of), ops.share())

        def raises(value: object) -> None:
            raise Boom("subscriber")

        shared.subscribe(raises)
        shared.subscribe(raises)  # no subscription of its own to the Subject
        bus.events.subscribe(raises)
        bus.emit(event(0))
        assert bus.statistics().errors_by_observer == {
            "bus.events#1": 1,
            "bus.events#2": 1,
            "bus.events#3": 1,
        }

    def test_operator_error_is_logged_not_raised(self, caplog: pytest.LogCaptureFixture) -> None:
        bus = EventBus()
        others: list[int] = []

        def bad_map(e: ExecutionEvent) -> int:
            raise Boom("in an operator")

        bus.events.pipe(ops.map(bad_map)).subscribe(lambda _: None)
        bus.events.subscribe(lambda e: others.append(e.seq))
        with caplog.at_level(logging.ERROR, logger="onlooker"):
            bus.emit(event(0))
            bus.emit(event(1))
        assert others == [0, 1]
        # the failed pipeline detaches after its first error: one failure, logged and counted
        (record,) = records_naming(caplog, "bus.events#1", "in an operator")
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None and isinstance(record.exc_info[1], Boom)
        assert bus.statistics().errors_by_observer == {"bus.events#1": 1}

    def test_a_pipeline_ending_in_retry_outlives_an_operator_error(self) -> None:
        """concepts.md: ``ops.retry()`` subscribes the pipeline again to the live stream."""
        bus = EventBus()
        seen: list[int] = []

        def picky(e: ExecutionEvent) -> int:
            if e.seq == 1:
                raise Boom("one bad event")
            return e.seq

        bus.events.pipe(ops.map(picky), ops.retry()).subscribe(seen.append)
        for seq in range(4):
            bus.emit(event(seq))
        assert seen == [0, 2, 3]
        assert bus.statistics().subscribers == 1

    def test_dispose_rx_subscription(self) -> None:
        bus = EventBus()
        seen: list[int] = []
        subscription = bus.events.subscribe(lambda e: seen.append(e.seq))
        bus.emit(event(0))
        subscription.dispose()
        bus.emit(event(1))
        assert seen == [0]
        assert bus.statistics().subscribers == 0

    def test_events_is_an_observable(self) -> None:
        assert isinstance(EventBus().events, reactivex.Observable)


class TestAsyncObservers:
    async def test_flush_delivers_in_order(self) -> None:
        seen: list[int] = []

        async def slow(e: ExecutionEvent) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(e.seq)

        async with ExecutionEngine() as engine:
            engine.bus.subscribe(slow, name="slow")
            for seq in range(50):
                engine.bus.emit(event(seq))
            await engine.bus.flush()
            assert seen == list(range(50))
            assert engine.bus.statistics().queued == 0
            assert engine.bus.statistics().delivered == 50

    async def test_failing_async_observer_is_isolated(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        seen: list[int] = []

        class Flaky:
            async def handle(self, e: ExecutionEvent) -> None:
                seen.append(e.seq)
                if e.seq == 1:
                    raise Boom("async")

        with caplog.at_level(logging.ERROR, logger="onlooker"):
            async with ExecutionEngine() as engine:
                engine.bus.subscribe(Flaky(), name="flaky-async")
                for seq in range(3):
                    engine.bus.emit(event(seq, execution_id="exec-7"))
                await engine.bus.flush()
        assert seen == [0, 1, 2]
        stats = engine.bus.statistics()
        assert stats.errors_by_observer == {"flaky-async": 1}
        assert stats.delivered == 2
        (record,) = [r for r in caplog.records if r.name == "onlooker"]
        assert "flaky-async" in record.getMessage()
        assert "exec-7" in record.getMessage()

    async def test_drop_counts_what_it_drops(self) -> None:
        gate = anyio.Event()
        seen: list[int] = []

        async def blocked(e: ExecutionEvent) -> None:
            await gate.wait()
            seen.append(e.seq)

        async with ExecutionEngine() as engine:
            engine.bus.subscribe(blocked, name="dropper", overflow="drop", queue_size=2)
            await wait_all_tasks_blocked()
            for seq in range(10):
                engine.bus.emit(event(seq))
            stats = engine.bus.statistics()
            assert stats.dropped == 8
            assert stats.dropped_by_observer == {"dropper": 8}
            gate.set()
            await engine.bus.flush()
        assert seen == [0, 1]
        assert engine.bus.statistics().delivered == 2

    async def test_block_applies_backpressure(self, check_stream: Check) -> None:
        gate = anyio.Event()
        ran: list[int] = []
        seen: list[ExecutionEvent] = []

        @onlooker.tool
        def record(n: int) -> int:
            ran.append(n)
            return n

        async def handle(e: ExecutionEvent) -> None:
            await gate.wait()
            seen.append(e)

        async def program(ctx: ExecutionContext) -> None:
            for n in range(3):
                await ctx.call(record, n=n)

        plugin = onlooker.define_plugin(
            id="slow", observer=lambda _: handle, overflow="block", queue_size=1
        )
        async with ExecutionEngine(tools=[record], plugins=[plugin]) as engine:
            await wait_all_tasks_blocked()
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.execute, program)
                await wait_all_tasks_blocked()
                assert ran == [], "the emitter waits while the queue is full"
                assert engine.bus.congested
                assert engine.bus.statistics().queued >= 1
                gate.set()
        assert ran == [0, 1, 2]
        assert engine.bus.statistics().dropped == 0
        assert len(seen) == 8
        check_stream(seen)

    async def test_async_observer_base_exception_leaves_the_engine(self) -> None:
        async def stop(e: ExecutionEvent) -> None:
            if e.kind == "ToolCallStarted":
                raise Stop

        plugin = onlooker.define_plugin(id="stopper", observer=lambda _: stop)
        with anyio.fail_after(10), pytest.raises(Stop):
            async with ExecutionEngine(tools=[step], plugins=[plugin]) as engine:
                await engine.execute(calls)
                await anyio.sleep_forever()  # the crashed worker cancels this

    async def test_async_observer_base_exception_while_idle(self) -> None:
        async def stop(e: ExecutionEvent) -> None:
            raise Stop

        with anyio.fail_after(10), pytest.raises(Stop):
            async with ExecutionEngine() as engine:
                engine.bus.subscribe(stop)
                engine.bus.emit(event(0))
                await engine.bus.flush()

    async def test_close_flushes(self) -> None:
        seen: list[int] = []

        async def slow(e: ExecutionEvent) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(e.seq)

        async with ExecutionEngine() as engine:
            engine.bus.subscribe(slow)
            for seq in range(20):
                engine.bus.emit(event(seq))
        assert seen == list(range(20))

    async def test_subscribe_after_close_is_refused(self) -> None:
        async with ExecutionEngine() as engine:
            pass
        with pytest.raises(RuntimeError, match="closed"):
            engine.bus.subscribe(lambda e: None)


class TestPlainCallableReturningAnAwaitable:
    """DESIGN: a plain callable ``(event) -> None | Awaitable[None]`` is an observer too."""

    async def test_a_lambda_returning_a_coroutine_gets_every_event_in_order(
        self, recwarn: pytest.WarningsRecorder
    ) -> None:
        seen: list[int] = []

        async def record(e: ExecutionEvent) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(e.seq)

        async with ExecutionEngine(tools=[step]) as engine:
            engine.bus.subscribe(lambda e: record(e), name="lambda")
            await engine.execute(calls)
            await engine.bus.flush()
            assert seen == list(range(10))
            stats = engine.bus.statistics()
            assert stats.delivered == 10  # each event once, not once more when it turned async
            assert stats.observer_errors == 0
            assert stats.subscribers == 1
        assert not [w for w in recwarn if "never awaited" in str(w.message)]

    async def test_a_sync_handle_returning_an_awaitable_and_its_disposal(self) -> None:
        seen: list[int] = []

        class Deferring:
            def handle(self, e: ExecutionEvent) -> Any:
                async def later() -> None:
                    seen.append(e.seq)

                return later()

        async with ExecutionEngine() as engine:
            subscription = engine.bus.subscribe(Deferring(), name="deferring")
            for seq in range(3):
                engine.bus.emit(event(seq))
            await engine.bus.flush()
            subscription.dispose()
            engine.bus.emit(event(3))
            await engine.bus.flush()
            assert engine.bus.statistics().subscribers == 0
        assert seen == [0, 1, 2]

    async def test_it_still_gets_events_in_order_under_backpressure(self) -> None:
        seen: list[int] = []

        async def record(e: ExecutionEvent) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(e.seq)

        async with ExecutionEngine() as engine:
            engine.bus.subscribe(lambda e: record(e), queue_size=2)
            for seq in range(20):
                await engine.bus.send(event(seq))
            await engine.bus.flush()
        assert seen == list(range(20))


class TestPlainCallableEdges:
    """The turn to asynchronous, at the edges: mixed returns, a closed bus, a disposal."""

    async def test_after_the_turn_a_call_returning_none_is_simply_done(self) -> None:
        seen: list[Any] = []

        async def record(e: ExecutionEvent) -> None:
            seen.append(e.seq)

        def sometimes(e: ExecutionEvent) -> Any:
            if e.seq % 2:
                return record(e)
            seen.append(("inline", e.seq))
            return None

        async with ExecutionEngine() as engine:
            engine.bus.subscribe(sometimes, name="mixed")
            for seq in range(6):
                engine.bus.emit(event(seq))
            await engine.bus.flush()
            stats = engine.bus.statistics()
        assert seen == [("inline", 0), 1, ("inline", 2), 3, ("inline", 4), 5]
        assert (stats.delivered, stats.observer_errors) == (6, 0)

    async def test_an_awaitable_after_the_close_is_dropped_and_counted(
        self, recwarn: pytest.WarningsRecorder
    ) -> None:
        seen: list[int] = []

        async def record(e: ExecutionEvent) -> None:
            seen.append(e.seq)

        async with ExecutionEngine() as engine:
            engine.bus.subscribe(lambda e: record(e), name="late")
        engine.bus.emit(event(0))  # after the close
        stats = engine.bus.statistics()
        assert seen == [] and (stats.dropped, stats.queued) == (1, 0)
        assert stats.dropped_by_observer == {"late": 1}
        assert not [w for w in recwarn if "never awaited" in str(w.message)]

    async def test_one_disposed_during_an_emit_never_turns(self) -> None:
        seen: list[int] = []
        subscriptions: dict[str, Any] = {}

        async def record(e: ExecutionEvent) -> None:
            seen.append(e.seq)

        def disposer(e: ExecutionEvent) -> None:
            if e.seq == 0:
                subscriptions["late"].dispose()

        async with ExecutionEngine() as engine:
            engine.bus.subscribe(disposer, name="disposer")
            subscriptions["late"] = engine.bus.subscribe(lambda e: record(e), name="late")
            for seq in range(4):
                engine.bus.emit(event(seq))
            await engine.bus.flush()
            assert engine.bus.statistics().subscribers == 1
        assert seen == []


class TestBusBeforeTheEngine:
    async def test_async_observer_subscribed_before_the_engine_starts(self) -> None:
        bus = EventBus()
        seen: list[int] = []

        async def handle(e: ExecutionEvent) -> None:
            seen.append(e.seq)

        bus.subscribe(handle)
        bus.emit(event(0))
        with pytest.raises(RuntimeError, match="started engine"):
            await bus.flush()
        async with ExecutionEngine(bus=bus) as engine:
            assert engine.bus is bus
            bus.emit(event(1))
            await bus.flush()
            assert seen == [0, 1]


def records_naming(caplog: pytest.LogCaptureFixture, *words: str) -> list[logging.LogRecord]:
    """The ``onlooker`` log records whose message holds every one of ``words``."""
    return [
        r
        for r in caplog.records
        if r.name == "onlooker" and all(w in r.getMessage() for w in words)
    ]


class TestDeadAsyncObserver:
    """Issue 12, item 1: an async observer that dies of a BaseException."""

    async def test_its_worker_takes_no_more_events(self, caplog: pytest.LogCaptureFixture) -> None:
        after_death: list[BusStatistics] = []
        healthy = RecordingObserver()

        async def dies(e: ExecutionEvent) -> None:
            raise Stop

        with anyio.fail_after(10), pytest.raises(Stop):
            async with ExecutionEngine() as engine:
                engine.bus.subscribe(dies, name="dies")
                engine.bus.subscribe(healthy)
                engine.bus.emit(event(0))  # the one it dies on
                engine.bus.emit(event(1))  # queued behind it
                try:
                    await anyio.sleep_forever()  # the crashed worker cancels this
                finally:  # as an execution's closing events, emitted after the death
                    for seq in range(2, 5):
                        engine.bus.emit(event(seq))
                    after_death.append(engine.bus.statistics())
        (stats,) = after_death
        assert stats.queued == 0, "no event is queued for a dead worker"
        assert stats.subscribers == 1, "only the healthy observer is left"
        # the event in its hands and the one queued behind, then the three emitted later:
        # none of them is delivered, every one of them is counted
        assert stats.dropped_by_observer == {"dies": 5}
        assert stats.dropped_by_reason == {"died": 5}
        assert [e.seq for e in healthy] == [0, 1, 2, 3, 4]
        (record,) = records_naming(caplog, "dies", "Stop")
        assert record.levelno == logging.ERROR

    async def test_a_cancellation_it_raises_itself_is_a_death_named_in_the_log(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """As when it awaits a future something else cancelled, or re-raises trio's
        Cancelled outside its scope: nothing cancelled its worker."""

        async def dies(e: ExecutionEvent) -> None:
            raise await stray_cancellation()

        name = anyio.get_cancelled_exc_class().__name__
        with anyio.fail_after(10), pytest.raises(anyio.get_cancelled_exc_class()):
            async with ExecutionEngine() as engine:
                engine.bus.subscribe(dies, name="dies")
                engine.bus.emit(event(0))
                await anyio.sleep_forever()  # the crashed worker cancels this
        assert engine.bus.statistics().dropped_by_reason == {"died": 1}
        (record,) = records_naming(caplog, "dies", f"it died of {name}")
        assert record.levelno == logging.ERROR

    async def test_one_it_raises_while_the_close_drains_it_is_a_death_too(self) -> None:
        """The block was cancelled, so the close hands the observer its events itself; a
        cancellation of its own there was taken for the close's: the event was handed
        again and again until the shutdown timeout (on trio, the close waited for it)."""
        calls: list[int] = []

        async def dies(e: ExecutionEvent) -> None:
            calls.append(e.seq)
            if e.seq == 0:
                await anyio.sleep(0.3)  # cut off by the cancellation: handed back at close
                return
            raise await stray_cancellation()

        engine = ExecutionEngine(shutdown_timeout=5)
        with anyio.fail_after(10), anyio.move_on_after(0.1):
            async with engine:
                engine.bus.subscribe(dies, name="dies")
                for seq in range(3):
                    engine.bus.emit(event(seq))
                await anyio.sleep_forever()
        assert calls == [0, 0, 1]
        assert engine.bus.statistics().dropped_by_reason == {"died": 2}

    async def test_the_engine_closes_while_executions_go_on(self, check_stream: Check) -> None:
        """The issue's case: executions still emit (their closing events) after the death."""

        @onlooker.tool
        async def pause(n: int) -> int:
            await anyio.sleep(0.001)
            return n

        async def many_calls(ctx: ExecutionContext) -> None:
            for n in range(50):
                await ctx.call(pause, n=n)

        async def stop_on_a_call(e: ExecutionEvent) -> None:
            if e.kind == "ToolCallStarted":
                raise Stop

        plugin = onlooker.define_plugin(id="stopper", observer=lambda _: stop_on_a_call)
        healthy = RecordingObserver()
        with anyio.fail_after(10), pytest.raises(Stop):
            async with ExecutionEngine(tools=[pause], plugins=[plugin]) as engine:
                engine.bus.subscribe(healthy)
                async with anyio.create_task_group() as tg:
                    for _ in range(3):
                        tg.start_soon(engine.execute, many_calls)
        stats = engine.bus.statistics()
        assert stats.queued == 0
        assert stats.dropped_by_reason.keys() == {"died"}
        stopper_delivered = stats.delivered - len(healthy)
        assert stopper_delivered + stats.dropped_by_observer["stopper"] == stats.emitted, (
            "every event is delivered to the dead observer or counted as dropped"
        )
        assert len(healthy.of(onlooker.ExecutionFinished)) == 3
        assert {e.status for e in healthy.of(onlooker.ExecutionFinished)} == {"cancelled"}
        check_stream(healthy.events)

    async def test_an_emitter_waiting_on_its_full_queue_is_released(self) -> None:
        entered = anyio.Event()

        async def dies_later(e: ExecutionEvent) -> None:
            entered.set()
            await anyio.sleep(0.01)
            raise Stop

        with anyio.fail_after(10), pytest.raises(Stop):
            async with ExecutionEngine() as engine:
                engine.bus.subscribe(dies_later, name="dies", queue_size=1)
                engine.bus.emit(event(0))
                await entered.wait()
                engine.bus.emit(event(1))  # fills the queue
                # full: waits until the worker dies (its stall timeout is 30 s)
                await engine.bus.send(event(2))
                await anyio.sleep_forever()
        assert engine.bus.statistics().dropped_by_reason == {"died": 3}


class TestStalledAsyncObserver:
    """Issue 12, item 2: a hung async observer stalls the emitter for at most its stall timeout."""

    async def test_a_hung_observer_holds_no_execution(
        self, caplog: pytest.LogCaptureFixture, check_stream: Check
    ) -> None:
        async def hung(e: ExecutionEvent) -> None:
            await anyio.sleep_forever()

        plugin = onlooker.define_plugin(
            id="hung", observer=lambda _: hung, queue_size=2, stall_timeout=0.05
        )
        healthy = RecordingObserver()
        with anyio.fail_after(10):
            async with ExecutionEngine(
                tools=[step], plugins=[plugin], shutdown_timeout=0.05
            ) as engine:
                engine.bus.subscribe(healthy)
                results = []
                for _ in range(5):
                    results.append(await engine.execute(calls))
                during = engine.bus.statistics()
        assert [r.status for r in results] == ["completed"] * 5
        assert len(healthy) == 50
        check_stream(healthy.events)
        assert during.dropped_by_reason["stalled"] > 0
        stats = engine.bus.statistics()
        assert stats.dropped_by_observer == {"hung": stats.emitted}, "every event is accounted for"
        assert stats.dropped_by_reason.keys() == {"stalled", "shutdown"}
        assert stats.queued == 0
        (stalled,) = records_naming(caplog, "hung", "stalled", "stall_timeout")
        assert stalled.levelno == logging.ERROR
        assert len(records_naming(caplog, "hung", "shutdown timeout")) == 1

    async def test_the_close_names_an_observer_that_swallows_its_cancellation(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """No task can be ended from outside: the close waits for it, and says for which."""
        gives_up_at: list[float] = []

        async def stubborn(e: ExecutionEvent) -> None:
            while True:  # a retry loop that catches everything, cancellation included
                try:
                    await anyio.sleep(1000)
                except BaseException:
                    if gives_up_at and anyio.current_time() > gives_up_at[0]:
                        raise  # so that this test ends

        with anyio.fail_after(10):
            async with ExecutionEngine(shutdown_timeout=0.05) as engine:
                engine.bus.subscribe(stubborn, name="stubborn")
                engine.bus.emit(event(0))
                await wait_all_tasks_blocked()
                gives_up_at.append(anyio.current_time() + 1.5)
        (waits,) = records_naming(caplog, "waits for observer 'stubborn'", "cancellation")
        assert waits.levelno == logging.ERROR

    async def test_cancelling_the_task_in_the_engine_block_still_flushes(
        self, check_stream: Check
    ) -> None:
        """The observers' workers are cancelled with the engine's task group; the close hands
        what they held (the event cut off in their hands again) to the observer itself,
        within the shutdown timeout. It used to drop them all, the closing events too."""
        got: list[ExecutionEvent] = []

        async def slow(event: ExecutionEvent) -> None:
            await anyio.sleep(0.002)
            got.append(event)

        plugin = onlooker.define_plugin(id="slow", observer=lambda _: slow, queue_size=64)
        engine = ExecutionEngine(tools=[step], plugins=[plugin], shutdown_timeout=30)
        with anyio.fail_after(20):
            with anyio.move_on_after(0.2) as cancelled:
                async with engine:
                    await engine.execute(calls_forever)
        assert cancelled.cancelled_caught
        stats = engine.bus.statistics()
        assert stats.dropped == 0
        assert len(got) == stats.emitted
        assert isinstance(got[-1], ExecutionFinished) and got[-1].status == "cancelled"
        check_stream(got)

    async def test_after_the_cancel_a_flush_hands_them_over_too_each_queue_at_once(
        self,
    ) -> None:
        """A shielded clean-up's ``bus.flush()`` used to wait for ever for the cancelled
        workers; a hung observer no longer costs a healthy one its events."""
        healthy: list[ExecutionEvent] = []

        async def hung(event: ExecutionEvent) -> None:
            await anyio.sleep_forever()

        async def slow(event: ExecutionEvent) -> None:
            await anyio.sleep(0.001)
            healthy.append(event)

        engine = ExecutionEngine(tools=[step], shutdown_timeout=1)
        flushed: list[bool] = []
        with anyio.fail_after(20):
            with anyio.move_on_after(0.2):
                async with engine:
                    engine.bus.subscribe(hung, name="hung", stall_timeout=30)
                    engine.bus.subscribe(slow, name="healthy")
                    try:
                        await engine.execute(calls_forever)
                    finally:
                        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                            await engine.bus.flush()  # hung still holds one: it cannot end
                            flushed.append(True)
        assert flushed == []
        stats = engine.bus.statistics()
        assert len(healthy) == stats.emitted  # every event, while the hung one held on
        assert stats.dropped_by_observer.keys() == {"hung"}

    async def test_two_flushes_hand_a_queue_over_once_and_a_cut_off_one_loses_nothing(
        self, check_stream: Check
    ) -> None:
        """One flush claims an orphaned queue, so its observer is never called twice at once;
        a flush cut off in a handler puts the event back for the next one."""
        got: list[ExecutionEvent] = []
        in_flight: list[int] = [0, 0]  # now, peak

        async def slow(event: ExecutionEvent) -> None:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            try:
                await anyio.sleep(0.005)
            finally:
                in_flight[0] -= 1
            got.append(event)

        engine = ExecutionEngine(tools=[step], shutdown_timeout=30)
        with anyio.fail_after(20):
            with anyio.move_on_after(0.2):
                async with engine:
                    engine.bus.subscribe(slow, name="slow")
                    try:
                        await engine.execute(calls_forever)
                    finally:
                        with anyio.CancelScope(shield=True):
                            with anyio.move_on_after(0.012):  # cut off in a handler
                                await engine.bus.flush()
                            async with anyio.create_task_group() as both:
                                both.start_soon(engine.bus.flush)
                                both.start_soon(engine.bus.flush)
        assert in_flight[1] == 1
        stats = engine.bus.statistics()
        assert stats.dropped == 0 and len(got) == stats.emitted
        check_stream(got)

    async def test_an_observer_dying_while_the_close_hands_it_events(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """It takes no more events, the others still get theirs, the counts add up, and the
        exception comes out or, when the close met it, is logged (the block's cancellation
        is what comes out then)."""

        class Stop(BaseException):
            pass

        other: list[ExecutionEvent] = []

        async def dies_late(event: ExecutionEvent) -> None:
            await anyio.sleep(0.001)
            if event.kind == "ExecutionFinished":
                raise Stop

        async def records(event: ExecutionEvent) -> None:
            await anyio.sleep(0.001)
            other.append(event)

        engine = ExecutionEngine(tools=[step], shutdown_timeout=30)
        came_out = False
        with anyio.fail_after(20):
            try:
                with anyio.move_on_after(0.2):
                    async with engine:
                        engine.bus.subscribe(dies_late, name="dies")
                        engine.bus.subscribe(records, name="records")
                        await engine.execute(calls_forever)
            except Stop:  # it died in its own worker, before the close: it crashed the engine
                came_out = True
        logged = records_naming(caplog, "closing the engine failed", "cancelled")
        if not came_out:  # it died while the close handed it events: logged, not lost
            assert [r.exc_info[0] for r in logged if r.exc_info] == [Stop]
        stats = engine.bus.statistics()
        assert len(other) == stats.emitted  # the other observer got everything
        assert stats.dropped_by_reason == {"died": 1}  # the event it died on
        assert stats.delivered + stats.observer_errors + stats.dropped == 2 * stats.emitted
        assert stats.queued == 0

    async def test_several_hung_observers_hold_the_emitter_for_the_longest_timeout(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Their timeouts run together from when the emitter began to wait (they used to add
        up: three hung exporters held every execution three times as long)."""

        async def hung(e: ExecutionEvent) -> None:
            await anyio.sleep_forever()

        with anyio.fail_after(10):
            async with ExecutionEngine(shutdown_timeout=0.05) as engine:
                for name in ("hung0", "hung1", "hung2"):
                    engine.bus.subscribe(hung, name=name, queue_size=1, stall_timeout=0.5)
                await wait_all_tasks_blocked()
                began = anyio.current_time()
                for seq in range(3):
                    await engine.bus.send(event(seq))
                waited = anyio.current_time() - began
        assert 0.5 <= waited < 1.3  # one timeout, not three (1.5 s)
        assert len(records_naming(caplog, "stalled", "stall_timeout 0.5 s")) == 3

    @pytest.mark.parametrize("loop", ["questions", "unknown tools", "blocked calls"])
    async def test_a_loop_that_runs_no_tool_is_held_back_too(self, loop: str) -> None:
        """Every kind of step waits on a full queue: a program asking questions, or making
        calls that are refused, in a loop, used to fill a "bounded" queue without end."""
        gate = anyio.Event()

        async def gated(e: ExecutionEvent) -> None:
            await gate.wait()

        def refuse(use: onlooker.ToolUseContext) -> onlooker.PreHookResult:
            return onlooker.PreHookResult(action=onlooker.HookAction.BLOCK)

        async def program(ctx: ExecutionContext) -> None:
            for _ in range(200):
                with contextlib.suppress(onlooker.OnlookerError):
                    if loop == "questions":
                        await ctx.elicit("again?")
                    elif loop == "unknown tools":
                        await ctx.call("nope")
                    else:
                        await ctx.call(step)
            assert engine.bus.statistics().queued <= 8

        hooks = [onlooker.HookMatcher(pre=(refuse,))] if loop == "blocked calls" else []
        with anyio.fail_after(10):
            async with ExecutionEngine(tools=[step], hooks=hooks) as engine:
                engine.bus.subscribe(gated, name="gated", queue_size=4, stall_timeout=0.05)
                result = await engine.execute(program)
                gate.set()
        assert result.status == "completed", result.error
        stats = engine.bus.statistics()
        assert stats.dropped_by_reason["stalled"] > 390  # waited, then dropped, as for tools
        assert stats.delivered + stats.dropped == stats.emitted

    async def test_a_slow_observer_catches_up_and_waits_again(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        gate = anyio.Event()
        seen: list[int] = []

        async def gated(e: ExecutionEvent) -> None:
            await gate.wait()
            seen.append(e.seq)

        with anyio.fail_after(10):
            async with ExecutionEngine() as engine:
                engine.bus.subscribe(gated, name="gated", queue_size=2, stall_timeout=0.05)
                await wait_all_tasks_blocked()
                for seq in range(6):
                    await engine.bus.send(event(seq))
                stalled = engine.bus.statistics()
                assert not engine.bus.congested, "a stalled queue holds nobody"
                gate.set()
                await engine.bus.flush()
                for seq in range(6, 9):  # caught up: accepted again, none dropped
                    await engine.bus.send(event(seq))
                await engine.bus.flush()
        # 0 in the observer's hands, 1 and 2 queued (2 past the full mark, while its
        # emitter waited), then 3, 4, 5 dropped without waiting
        assert stalled.dropped_by_reason == {"stalled": 3}
        assert seen == [0, 1, 2, 6, 7, 8]
        stats = engine.bus.statistics()
        assert stats.delivered + stats.dropped == stats.emitted == 9
        assert len(records_naming(caplog, "gated", "caught up")) == 1

    async def test_a_drop_observer_logs_once_per_episode(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        gate = anyio.Event()

        async def gated(e: ExecutionEvent) -> None:
            await gate.wait()

        async with ExecutionEngine() as engine:
            engine.bus.subscribe(gated, name="dropper", overflow="drop", queue_size=2)
            await wait_all_tasks_blocked()
            for seq in range(10):
                engine.bus.emit(event(seq))
            gate.set()
            await engine.bus.flush()
        assert engine.bus.statistics().dropped_by_reason == {"overflow": 8}
        assert len(records_naming(caplog, "dropper", "dropping events")) == 1
        assert len(records_naming(caplog, "dropper", "caught up", "8")) == 1

    @pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan")])
    def test_bad_stall_timeout(self, value: float) -> None:
        with pytest.raises(ValueError, match="stall_timeout"):
            EventBus().subscribe(lambda e: None, stall_timeout=value)
        with pytest.raises(ValueError, match="stall_timeout"):
            onlooker.define_plugin(id="p", stall_timeout=value)

    def test_stall_timeout_is_a_number(self) -> None:
        with pytest.raises(TypeError, match="stall_timeout"):
            EventBus().subscribe(lambda e: None, stall_timeout="5")  # type: ignore[arg-type]


class TestSyncObserverBaseException:
    """Issue 12, item 8: a BaseException propagates only after every observer has the event."""

    def test_every_other_observer_gets_the_event_first(self) -> None:
        bus = EventBus()
        before: list[int] = []
        after: list[int] = []
        rx_seen: list[int] = []

        def stop(e: ExecutionEvent) -> None:
            raise Stop

        bus.subscribe(lambda e: before.append(e.seq))
        bus.subscribe(stop, name="stopper")
        bus.subscribe(lambda e: after.append(e.seq))
        bus.events.subscribe(lambda e: rx_seen.append(e.seq))
        with pytest.raises(Stop):
            bus.emit(event(0))
        assert before == after == rx_seen == [0]
        stats = bus.statistics()
        assert stats.observer_errors == 0
        assert stats.delivered == 3

    def test_the_first_of_two_is_raised(self) -> None:
        bus = EventBus()

        def stop(e: ExecutionEvent) -> None:
            raise Stop

        def interrupt(e: ExecutionEvent) -> None:
            raise KeyboardInterrupt

        bus.events.subscribe(interrupt)
        bus.subscribe(stop)
        with pytest.raises(Stop):  # sync observers come before bus.events subscribers
            bus.emit(event(0))

    def test_an_rx_subscriber_costs_the_later_ones_nothing(self) -> None:
        bus = EventBus()
        later: list[int] = []

        def stop(e: ExecutionEvent) -> None:
            raise Stop

        bus.events.subscribe(stop)
        bus.events.subscribe(lambda e: later.append(e.seq))
        with pytest.raises(Stop):
            bus.emit(event(0))
        assert later == [0]

    async def test_pairs_stay_whole_for_the_other_observers(self, check_stream: Check) -> None:
        ran: list[int] = []

        @onlooker.tool
        def record(n: int) -> int:
            ran.append(n)
            return n

        async def program(ctx: ExecutionContext) -> None:
            await ctx.call(record, n=1)

        def stop_on_call(e: ExecutionEvent) -> None:
            if e.kind == "ToolCallStarted":
                raise Stop

        before, after, rx_seen, scoped = (RecordingObserver() for _ in range(4))
        async_seen: list[ExecutionEvent] = []

        async def async_observer(e: ExecutionEvent) -> None:
            async_seen.append(e)

        async with ExecutionEngine(tools=[record]) as engine:
            engine.bus.subscribe(before)
            engine.bus.subscribe(stop_on_call, name="stopper")
            engine.bus.subscribe(after)
            engine.bus.subscribe(async_observer)
            engine.bus.events.subscribe(rx_seen.handle)
            with onlooker.observing(scoped), pytest.raises(Stop):
                await engine.execute(program)
        assert ran == [], "the tool never ran"
        for seen in (before.events, after.events, rx_seen.events, scoped.events, async_seen):
            assert [e.kind for e in seen] == [
                "ExecutionStarted",
                "ToolCallStarted",
                "ToolCallFinished",
                "ExecutionFinished",
            ]
            check_stream(seen)


class TestOneGuard:
    """Issue 14, item 2: every path is isolated and counted the same way."""

    async def test_rx_on_completed_failure_is_counted(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        def explode() -> None:
            raise Boom("on_completed")

        async with ExecutionEngine() as engine:
            engine.bus.events.subscribe(on_completed=explode)
        assert engine.bus.statistics().errors_by_observer == {"bus.events#1": 1}
        assert len(records_naming(caplog, "bus.events#1", "on_completed")) == 1

    async def test_scoped_observers_are_counted_by_name(self) -> None:
        def bad(e: ExecutionEvent) -> None:
            raise Boom("scoped")

        async with ExecutionEngine(tools=[step]) as engine:
            with onlooker.observing(bad, name="bad-scope") as scope:
                await engine.execute(calls)
        stats = engine.bus.statistics()
        assert stats.errors_by_observer == {"bad-scope": 10}
        assert scope.errors == 10


class TestDisposedAsyncObserversAreReleased:
    """A long-lived engine whose async observers come and go (one per request, say) keeps
    none of them once disposed and drained: not the observer, not its queue."""

    @pytest.mark.parametrize("plain_callable", [False, True])
    async def test_subscribe_and_dispose_many_times(self, plain_callable: bool) -> None:
        import gc
        import weakref

        class Counting:
            def __init__(self) -> None:
                self.seen = 0

            async def handle(self, e: ExecutionEvent) -> None:
                self.seen += 1

        async def program(ctx: ExecutionContext) -> None:
            return None

        refs: list[weakref.ref[Counting]] = []
        async with ExecutionEngine() as engine:
            for _ in range(50):
                observer = Counting()
                refs.append(weakref.ref(observer))
                target: Any = (lambda e, o=observer: o.handle(e)) if plain_callable else observer
                subscription = engine.bus.subscribe(target, name="per-request")
                await engine.execute(program)
                await engine.bus.flush()
                assert observer.seen == 2
                subscription.dispose()
                del observer, target, subscription
            await wait_all_tasks_blocked()  # the disposed workers end
            gc.collect()
            alive = sum(ref() is not None for ref in refs)
            assert alive == 0, f"{alive} of 50 disposed async observers are still held by the bus"
            assert engine.bus.statistics().subscribers == 0
            await engine.bus.flush()  # still works, and the bus still closes cleanly
