"""History store throughput and the engine's per-tool-call overhead with history on vs off.

(1) tool calls persisted per second through ``store.write_events`` in
batches of 500 events (the plugin's default batch), on SQLite and on
PostgreSQL; (2) the same end to end through the plugin: run N calls, close
the engine (everything written), calls per second; (3) per-call µs of
``ctx.call``: direct await, no plugins, history plugin on SQLite — the
program's own loop ("hot") and including the final drain ("total"); (4) the
writer's redaction (the audit trail's policy, run on every event before it
is stored): µs per event, next to serializing the event, measured in one
run, with no secret in the events (the common case) and with one in each.

PostgreSQL: ``--pg-url postgresql+psycopg://...`` or, without it, a
throwaway cluster from ``tests/postgres.py`` when PostgreSQL is installed.

Run: ``.venv/bin/python bench/history.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

import onlooker
from onlooker import ExecutionContext, ExecutionEvent, ToolCallStarted
from onlooker.plugins import history
from onlooker.testing import RecordingObserver

REPEATS = 3
BATCH = 500
CALLS_PER_EXECUTION = 200


@onlooker.tool
async def add(a: int, b: int) -> int:
    """The tool under measurement: as cheap as a tool can be."""
    return a + b


async def calls_program(calls: int, timing: list[tuple[float, float]]) -> Any:
    """A program making ``calls`` calls; appends (wall, execution-thread CPU) seconds."""

    async def program(ctx: ExecutionContext) -> None:
        began, cpu = time.perf_counter(), time.thread_time()
        for i in range(calls):
            await ctx.call("add", a=i, b=1)
        timing.append((time.perf_counter() - began, time.thread_time() - cpu))

    return program


async def recorded_events(calls: int) -> list[ExecutionEvent]:
    recorder = RecordingObserver()
    timing: list[tuple[float, float]] = []
    program = await calls_program(CALLS_PER_EXECUTION, timing)
    async with onlooker.ExecutionEngine(tools=[add]) as engine:
        engine.bus.subscribe(recorder)
        for _ in range(calls // CALLS_PER_EXECUTION):
            await engine.execute(program)
    return recorder.events


async def store_throughput(url: str, events: list[ExecutionEvent], calls: int) -> float:
    async with history.open(url) as store:
        began = time.perf_counter()
        for start in range(0, len(events), BATCH):
            await store.write_events(events[start : start + BATCH])
        return calls / (time.perf_counter() - began)


async def plugin_throughput(url: str, calls: int) -> float:
    timing: list[tuple[float, float]] = []
    program = await calls_program(CALLS_PER_EXECUTION, timing)
    plugin = history.plugin(url)
    async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
        began = time.perf_counter()
        for _ in range(calls // CALLS_PER_EXECUTION):
            await engine.execute(program)
    return calls / (time.perf_counter() - began)


async def per_call(calls: int, plugins: list[onlooker.Plugin[Any]]) -> tuple[float, float, float]:
    """(hot, total, cpu) µs per call: the program's loop, until the engine has closed,
    and the execution thread's own CPU time in the loop (without the writer thread's)."""
    timing: list[tuple[float, float]] = []
    program = await calls_program(calls, timing)
    began = time.perf_counter()
    async with onlooker.ExecutionEngine(tools=[add], plugins=plugins) as engine:
        await engine.execute(program)
    total = time.perf_counter() - began
    wall, cpu = timing[0]
    return wall / calls * 1e6, total / calls * 1e6, cpu / calls * 1e6


async def direct(calls: int) -> float:
    began = time.perf_counter()
    for i in range(calls):
        await add.fn(a=i, b=1)
    return (time.perf_counter() - began) / calls * 1e6


def postgres_urls(given: str | None) -> Callable[[int], str] | None:
    """A fresh database per measurement (a throwaway cluster), or the given URL."""
    if given:
        return lambda _: given
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    try:
        postgres: Any = importlib.import_module("postgres")
        cluster = postgres.cluster_or_skip()
    except BaseException as exc:  # pytest's skip is a BaseException
        print(f"PostgreSQL: not measured ({exc})")
        return None
    return lambda _: str(cluster.create_database())


def per_event(fn: Callable[[ExecutionEvent], object], events: list[ExecutionEvent]) -> float:
    """µs per event of ``fn`` over ``events`` (median of the repeats)."""
    runs = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        for event in events:
            fn(event)
        runs.append((time.perf_counter() - began) / len(events) * 1e6)
    return statistics.median(runs)


def redaction_cost(events: list[ExecutionEvent]) -> None:
    from onlooker.plugins.history._redaction import DEFAULT_MAX_VALUE_CHARS, Scrubber

    scrub = Scrubber(None, DEFAULT_MAX_VALUE_CHARS).scrub
    serialize = per_event(lambda event: event.model_dump_json(), events)
    clean = per_event(scrub, events)
    secret = [
        e.model_copy(update={"args": {"a": 1, "token": "ghp_" + "x1" * 20}})
        if isinstance(e, ToolCallStarted)
        else e
        for e in events
    ]
    dirty = per_event(scrub, secret)
    print(
        f"(4) redaction per event: {clean:.2f} µs with no secret ({clean / serialize:.2f}x "
        f"serializing it, {serialize:.2f} µs); {dirty:.2f} µs with a secret in every tool call"
    )


def median(values: list[float]) -> float:
    return statistics.median(values)


async def main(calls: int, pg_url: str | None) -> None:
    work = Path(tempfile.mkdtemp(prefix="onlooker-bench-"))
    try:
        await measure(work, calls, pg_url)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def measure(work: Path, calls: int, pg_url: str | None) -> None:
    events = await recorded_events(calls)
    print(f"tool calls per measurement: {calls} ({len(events)} events), median of {REPEATS}")
    targets = {"sqlite": 20_000, "postgresql": 10_000}
    urls: dict[str, Callable[[int], str]] = {
        "sqlite": lambda i: f"sqlite:///{work / f'store{i}.db'}"
    }
    pg = postgres_urls(pg_url)
    if pg is not None:
        urls["postgresql"] = pg

    for name, make in urls.items():
        stored = median([await store_throughput(make(i), events, calls) for i in range(REPEATS)])
        through = median([await plugin_throughput(make(100 + i), calls) for i in range(REPEATS)])
        print(
            f"{name:<10} write_events: {stored:>9,.0f} calls/s   "
            f"engine+plugin end to end: {through:>9,.0f} calls/s   target >= {targets[name]:,}"
        )

    a = median([await direct(calls) for _ in range(REPEATS)])
    off = [await per_call(calls, []) for _ in range(REPEATS)]
    on = [
        await per_call(calls, [history.plugin(f"sqlite:///{work / f'overhead{i}.db'}")])
        for i in range(REPEATS)
    ]
    b_hot, b_cpu = median([r[0] for r in off]), median([r[2] for r in off])
    c_hot, c_total = median([r[0] for r in on]), median([r[1] for r in on])
    c_cpu = median([r[2] for r in on])
    print(f"(a) direct await                      {a:7.2f} µs/call")
    print(
        f"(b) ctx.call, history off             {b_hot:7.2f} µs/call   overhead {b_hot - a:6.2f} µs"
    )
    print(
        f"(c) ctx.call, history on (hot loop)   {c_hot:7.2f} µs/call   overhead {c_hot - a:6.2f} µs"
    )
    print(f"(d) history on, incl. final drain     {c_total:7.2f} µs/call")
    added = (c_hot - b_hot) / (b_hot - a)
    print(f"history adds {added:.0%} to the observed call's overhead, wall (target <= 50%)")
    cpu_added = (c_cpu - b_cpu) / (b_cpu - a)
    print(
        f"execution thread's own CPU: {b_cpu:.2f} off, {c_cpu:.2f} on µs/call: "
        f"history adds {cpu_added:.0%} there (the rest of the wall figure is the writer "
        "thread holding the GIL)"
    )
    redaction_cost(events)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--pg-url", default=None)
    args = parser.parse_args()
    anyio.run(main, args.calls, args.pg_url)
