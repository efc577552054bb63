"""Per-tool-call observation overhead, measured against baselines in the same run.

(a) awaiting the tool function directly; (b) the same tool through
``ctx.call`` with no plugins; (c) with three sync recording plugins; (d) one
OpenTelemetry SDK span (SimpleSpanProcessor + InMemorySpanExporter) around the
direct call; (e) the floor: building two events and two ``Subject.on_next``; (f) the
direct call reported as a tracked call (``run.tool_started`` +
``call.finished``), as an adapter does for a tool another framework runs.
Also: (g) a 10,000-item list argument through ``ctx.call`` with no plugins;
events/s built and emitted to three sync observers; the per-call cost at 1,
10, 100 and 1,000 concurrent executions (it must stay flat); and the memory
of 10,000 paused executions.

Run: ``.venv/bin/python bench/overhead.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
from reactivex.subject import Subject

import onlooker
from onlooker import ExecutionContext, ExecutionEvent
from onlooker._events import Attribution, ToolCallFinished, ToolCallStarted, _build, _now, new_id

REPEATS = 5


@onlooker.tool
async def add(a: int, b: int) -> int:
    """The tool under measurement: as cheap as a tool can be."""
    return a + b


@onlooker.tool
async def total(items: list[int]) -> int:
    """A tool taking a large argument."""
    return len(items)


class Recorder:
    """A sync plugin observer that keeps every event."""

    def __init__(self) -> None:
        self.events: list[ExecutionEvent] = []

    def handle(self, event: ExecutionEvent) -> None:
        self.events.append(event)


def recording_plugin(index: int) -> onlooker.Plugin[Recorder]:
    return onlooker.define_plugin(
        id=f"recorder{index}", extension=lambda _ctx: Recorder(), observer=lambda r: r
    )


async def best_of(run: Callable[[], Awaitable[float]]) -> float:
    """Median of a few repeats, in µs per call."""
    return statistics.median([await run() for _ in range(REPEATS)])


async def direct(calls: int) -> float:
    began = time.perf_counter()
    for i in range(calls):
        await add.fn(a=i, b=1)
    return (time.perf_counter() - began) / calls * 1e6


async def through_engine(calls: int, plugins: list[onlooker.Plugin[Any]]) -> float:
    timing: list[float] = []

    async def program(ctx: ExecutionContext) -> None:
        began = time.perf_counter()
        for i in range(calls):
            await ctx.call("add", a=i, b=1)
        timing.append((time.perf_counter() - began) / calls * 1e6)

    async with onlooker.ExecutionEngine(tools=[add], plugins=plugins) as engine:
        await engine.execute(program)
    for plugin in plugins:  # keep memory flat between repeats
        del plugin
    return timing[0]


async def large_argument(calls: int) -> float:
    """(g): µs per ``ctx.call`` with a 10,000-item list argument, no plugins."""
    items = list(range(10_000))
    timing: list[float] = []

    async def program(ctx: ExecutionContext) -> None:
        began = time.perf_counter()
        for _ in range(calls):
            await ctx.call("total", items=items)
        timing.append((time.perf_counter() - began) / calls * 1e6)

    async with onlooker.ExecutionEngine(tools=[total]) as engine:
        await engine.execute(program)
    return timing[0]


@onlooker.tool
async def step(a: int) -> int:
    """A tool that lets the other executions run (one scheduler checkpoint)."""
    await anyio.lowlevel.checkpoint()
    return a


async def concurrent(executions: int, calls: int, *, observed: bool = True) -> float:
    """µs per call with ``executions`` executions running at once, interleaved call by call.

    Each execution makes the same number of calls (so each pays the same
    start and finish per call); rounds repeat until about ``calls`` calls
    were made. Three sync counting observers. With ``observed=False`` the
    same tasks await the tool function directly: the scheduler's own cost at
    that concurrency, which the observed figure is compared against.
    """
    per_execution = 200
    rounds = max(calls // (executions * per_execution), 1)
    counters = [Counter() for _ in range(3)]

    async def program(ctx: ExecutionContext) -> None:
        for i in range(per_execution):
            await ctx.call("step", a=i)

    async def direct_task() -> None:
        for i in range(per_execution):
            await step.fn(a=i)

    async with onlooker.ExecutionEngine(tools=[step]) as engine:
        for counter in counters:
            engine.bus.subscribe(counter)
        began = time.perf_counter()
        for _ in range(rounds):
            async with anyio.create_task_group() as group:
                for _ in range(executions):
                    if observed:
                        group.start_soon(engine.execute, program)
                    else:
                        group.start_soon(direct_task)
        elapsed = time.perf_counter() - began
    if observed:
        assert counters[0].count == rounds * executions * (per_execution * 2 + 2)
    return elapsed / (rounds * executions * per_execution) * 1e6


async def tracked(calls: int) -> float:
    """(f): what an adapter pays per call of a tool onlooker does not run."""
    async with onlooker.ExecutionEngine() as engine, engine.track("bench") as run:
        began = time.perf_counter()
        for i in range(calls):
            call = await run.tool_started("add", {"a": i, "b": 1})
            await call.finished(await add.fn(a=i, b=1))
        elapsed = time.perf_counter() - began
    return elapsed / calls * 1e6


def otel_tracer() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("bench"), exporter


async def with_otel_span(calls: int) -> float:
    tracer, exporter = otel_tracer()
    began = time.perf_counter()
    for i in range(calls):
        with tracer.start_as_current_span("add"):
            await add.fn(a=i, b=1)
    elapsed = (time.perf_counter() - began) / calls * 1e6
    exporter.clear()
    return elapsed


def event_floor(calls: int) -> float:
    subject: Subject[ExecutionEvent] = Subject()
    subject.subscribe(lambda _e: None)
    attribution = Attribution()
    began = time.perf_counter()
    envelope: dict[str, Any] = {
        "execution_id": "x",
        "attribution": attribution,
        "schema_version": 1,
    }
    for i in range(calls):
        started = _build(
            ToolCallStarted,
            {
                **envelope,
                "kind": "ToolCallStarted",
                "event_id": new_id(),
                "seq": 2 * i,
                "at": _now(),
                "tool_call_id": "c",
                "tool": "add",
                "args": {"a": i, "b": 1},
            },
        )
        subject.on_next(started)
        finished = _build(
            ToolCallFinished,
            {
                **envelope,
                "kind": "ToolCallFinished",
                "event_id": new_id(),
                "seq": 2 * i + 1,
                "at": _now(),
                "tool_call_id": "c",
                "tool": "add",
                "status": "completed",
                "result": i + 1,
                "error": None,
                "duration_ms": 0.0,
                "metadata": {},
            },
        )
        subject.on_next(finished)
    return (time.perf_counter() - began) / calls * 1e6


class Counter:
    """A sync observer that counts events (and keeps none alive)."""

    def __init__(self) -> None:
        self.count = 0

    def handle(self, event: ExecutionEvent) -> None:
        self.count += 1


async def events_per_second(calls: int) -> float:
    """Events built by the engine's own event path and delivered to three sync observers, per second."""
    counters = [Counter() for _ in range(3)]
    timing: list[float] = []

    async def program(ctx: ExecutionContext) -> None:
        emit = ctx._emitter.tool_call_started
        began = time.perf_counter()
        for i in range(calls):
            emit(tool_call_id="c", tool="add", args={"a": i})
        timing.append(time.perf_counter() - began)

    async with onlooker.ExecutionEngine(tools=[add]) as engine:
        for counter in counters:
            engine.bus.subscribe(counter)
        await engine.execute(program)
    assert counters[0].count == calls + 2
    return calls / timing[0]


async def calls_per_second(calls: int) -> float:
    """Whole observed tool calls per second (validation, tool, two events, three observers)."""
    counters = [Counter() for _ in range(3)]
    timing: list[float] = []

    async def program(ctx: ExecutionContext) -> None:
        began = time.perf_counter()
        for i in range(calls):
            await ctx.call("add", a=i, b=1)
        timing.append(time.perf_counter() - began)

    async with onlooker.ExecutionEngine(tools=[add]) as engine:
        for counter in counters:
            engine.bus.subscribe(counter)
        await engine.execute(program)
    return calls / timing[0]


async def paused_memory(count: int) -> float:
    """MB held by ``count`` paused executions (tracemalloc)."""

    async def asks(ctx: ExecutionContext) -> str:
        answer = await ctx.elicit("go?")
        return answer.action

    gc.collect()
    tracemalloc.start()
    async with onlooker.ExecutionEngine() as engine:
        before = tracemalloc.get_traced_memory()[0]
        paused = [await engine.execute_with_pause(asks) for _ in range(count)]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert all(isinstance(p, onlooker.PausedExecution) for p in paused)
    return (after - before) / 1e6


async def main(calls: int, paused: int) -> None:
    a = await best_of(lambda: direct(calls))
    b = await best_of(lambda: through_engine(calls, []))
    c = await best_of(lambda: through_engine(calls, [recording_plugin(i) for i in range(3)]))
    d = await best_of(lambda: with_otel_span(calls))
    e = statistics.median(event_floor(calls) for _ in range(REPEATS))
    f = await best_of(lambda: tracked(calls))
    g = await best_of(lambda: large_argument(max(calls // 20, 100)))
    rate = statistics.median([await events_per_second(calls) for _ in range(REPEATS)])
    call_rate = statistics.median([await calls_per_second(calls) for _ in range(REPEATS)])
    span = d - a
    print(f"calls per measurement: {calls}, median of {REPEATS}")
    print(f"(a) direct await                    {a:8.2f} µs/call")
    print(f"(b) ctx.call, no plugins            {b:8.2f} µs/call   overhead {b - a:6.2f} µs")
    print(f"(c) ctx.call, 3 sync plugins        {c:8.2f} µs/call   overhead {c - a:6.2f} µs")
    print(f"(d) direct + one OpenTelemetry span {d:8.2f} µs/call   overhead {span:6.2f} µs")
    print(f"(e) floor: 2 events + 2 on_next     {e:8.2f} µs/call")
    print(f"(f) tracked call, no plugins        {f:8.2f} µs/call   overhead {f - a:6.2f} µs")
    print(f"(g) 10,000-item list argument       {g:8.2f} µs/call   target <= 250 µs")
    print(f"ratio (b-a)/(d-a) = {(b - a) / span:5.2f}   target <= 0.5")
    print(f"ratio (b)/(e)     = {b / e:5.2f}   target <= 1.2")
    print(f"ratio (c-a)/(d-a) = {(c - a) / span:5.2f}   target <= 1.0")
    print(f"events/s built and emitted to three sync observers: {rate:,.0f}   target >= 300,000")
    print(
        f"whole tool calls/s with three sync observers: {call_rate:,.0f} ({2 * call_rate:,.0f} events/s)"
    )
    scaling: dict[int, tuple[float, float]] = {}
    for n in (1, 10, 100, 1000):
        observed = await best_of(lambda n=n: concurrent(n, max(calls, 40_000)))  # type: ignore[misc]  # bound per n
        bare = await best_of(lambda n=n: concurrent(n, max(calls, 40_000), observed=False))  # type: ignore[misc]  # bound per n
        scaling[n] = (observed, observed - bare)
    print("concurrent executions   µs per call   of which onlooker's   vs 1")
    for n, (cost, added) in scaling.items():
        print(f"{n:>21,}   {cost:11.2f}   {added:19.2f}   {added / scaling[1][1]:5.2f}")
    added_costs = [added for _, added in scaling.values()]
    spread = max(added_costs) / min(added_costs)
    print(f"onlooker's per-call cost, max/min = {spread:4.2f}   target <= 1.2 / 0.8 = 1.5")
    if paused:
        mb = await paused_memory(paused)
        print(f"{paused:,} paused executions: {mb:,.1f} MB   target <= 60 MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--paused", type=int, default=10_000)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    options = parser.parse_args()
    anyio.run(main, options.calls, options.paused, backend=options.backend)
