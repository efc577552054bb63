"""What the cheap paths skip must not change what observers see.

Events nobody observes are not built, but keep their ``seq``; exact scalar
arguments skip validation but come out as validation would leave them;
snapshots are pydantic-core's JSON conversion, falling back part by part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import pytest
from pydantic import Field
from reactivex import operators as ops

import onlooker
from onlooker import ExecutionContext, ExecutionEvent
from onlooker._events import snapshot
from onlooker.testing import RecordingObserver

pytestmark = pytest.mark.anyio


@onlooker.tool
async def add(a: int, b: int) -> int:
    return a + b


@onlooker.tool
async def scale(x: float, label: str, on: bool = True) -> str:
    return f"{label}:{x * 2}:{on}"


@onlooker.tool
async def positive(n: Annotated[int, Field(gt=0)]) -> int:
    return n


async def test_unobserved_events_are_not_built_but_keep_their_seq() -> None:
    recorder = RecordingObserver()
    joined = anyio.Event()

    async def program(ctx: ExecutionContext) -> None:
        await ctx.call("add", a=1, b=2)  # seq 1 and 2: nobody observes yet
        await joined.wait()
        await ctx.call("add", a=3, b=4)

    async with onlooker.ExecutionEngine(tools=[add]) as engine, anyio.create_task_group() as group:
        group.start_soon(engine.execute, program)
        await anyio.wait_all_tasks_blocked()
        assert engine.bus.statistics().emitted == 0
        engine.bus.subscribe(recorder)
        joined.set()
    seqs = [(event.kind, event.seq) for event in recorder.events]
    assert seqs == [("ToolCallStarted", 3), ("ToolCallFinished", 4), ("ExecutionFinished", 5)]
    assert engine.bus.statistics().emitted == 3


async def test_an_rx_subscriber_counts_as_an_observer_until_disposed() -> None:
    seen: list[ExecutionEvent] = []

    async def program(ctx: ExecutionContext) -> None:
        await ctx.call("add", a=1, b=2)

    async with onlooker.ExecutionEngine(tools=[add]) as engine:
        keep: Any = ops.filter(lambda e: e.seq >= 0)
        subscription = engine.bus.events.pipe(keep).subscribe(seen.append)
        observed = [engine.bus.observed]
        await engine.execute(program)
        subscription.dispose()
        observed.append(engine.bus.observed)
        await engine.execute(program)
    assert observed == [True, False]
    assert [e.kind for e in seen] == [
        "ExecutionStarted",
        "ToolCallStarted",
        "ToolCallFinished",
        "ExecutionFinished",
    ]


async def test_a_scoped_observer_alone_gets_every_event() -> None:
    recorder = RecordingObserver()

    async def program(ctx: ExecutionContext) -> int:
        return await ctx.call("add", a=1, b=2)  # type: ignore[no-any-return]

    async with onlooker.ExecutionEngine(tools=[add]) as engine:
        with onlooker.observing(recorder):
            result = await engine.execute(program)
    assert result.value == 3
    assert [e.seq for e in recorder.events] == [0, 1, 2, 3]
    assert engine.bus.statistics().emitted == 4


def test_exact_scalars_skip_validation_with_the_same_result() -> None:
    assert add.validate_args({"a": 1, "b": 2}) == {"a": 1, "b": 2}
    assert add.validate_args({"a": "1", "b": 2}) == {"a": 1, "b": 2}  # coerced: validated
    assert scale.validate_args({"x": 1, "label": "l", "on": False}) == {
        "x": 1.0,
        "label": "l",
        "on": False,
    }
    assert type(scale.validate_args({"x": 1, "label": "l", "on": False})["x"]) is float
    assert scale.validate_args({"x": 2.0, "label": "l"}) == {"x": 2.0, "label": "l", "on": True}
    with pytest.raises(onlooker.ToolInputError, match="greater than 0"):
        positive.validate_args({"n": 0})
    with pytest.raises(onlooker.ToolInputError, match="c"):
        add.validate_args({"a": 1, "c": 2})


def test_scalar_fast_path_returns_a_copy() -> None:
    given: dict[str, Any] = {"a": 1, "b": 2}
    validated = add.validate_args(given)
    validated["a"] = 99
    assert given == {"a": 1, "b": 2}


@dataclass
class Point:
    x: int
    y: int


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_snapshots_copy_and_convert() -> None:
    items: list[Any] = [1, [2, (3,)], {"k": Point(1, 2)}]
    copied = snapshot(items)
    assert copied == [1, [2, [3]], {"k": {"x": 1, "y": 2}}]
    items[1] = "changed"
    assert copied == [1, [2, [3]], {"k": {"x": 1, "y": 2}}]


def test_a_part_that_cannot_be_converted_is_marked_alone() -> None:
    copied = snapshot({"ok": [1, 2], "bad": Unprintable(), "raw": b"\xff"})
    assert isinstance(copied, dict)
    assert copied["ok"] == [1, 2]
    assert copied["bad"] == "<not JSON-serializable Unprintable: no repr>"
    assert str(copied["raw"]).startswith("<not JSON-serializable bytes")


def test_a_cycle_marks_the_whole_value() -> None:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    assert str(snapshot(cycle)).startswith("<not JSON-serializable list")


class Counted:
    """A value whose snapshot (its ``repr``) is counted."""

    copies = 0

    def __repr__(self) -> str:
        Counted.copies += 1
        return "counted"


async def test_unobserved_executions_snapshot_nothing() -> None:
    async def program(ctx: ExecutionContext) -> Counted:
        await ctx.elicit("ok?", schema={"type": "object"})
        return Counted()

    Counted.copies = 0
    async with onlooker.ExecutionEngine() as engine:
        await engine.execute(program, input={"value": Counted()})  # type: ignore[dict-item]
        unobserved = Counted.copies
        with onlooker.observing(RecordingObserver()):
            await engine.execute(program, input={"value": Counted()})  # type: ignore[dict-item]
    assert unobserved == 0
    assert Counted.copies == 2  # the input and the result
