"""The record on: history (SQLite) + audit + metrics together, against one OpenTelemetry span.

Measured in one process, in one run, interleaved:

(d) the tool awaited directly inside one OpenTelemetry SDK span
    (SimpleSpanProcessor + InMemorySpanExporter): the baseline;
(b) ``ctx.call`` with no plugins: the bare path;
(r) ``ctx.call`` with history (SQLite), audit and metrics on.

For (b) and (r): wall time per call in a tight loop *including the drain at
engine close* (everything written), and the execution thread's own CPU per
call (``time.thread_time``: what the writer threads cost the execution, they
cost it through the GIL, in wall time). Then, with all three plugins on,
per-call wall time (with the drain) for a 100 KB string argument against a
1 KB one. For (r) it also prints the CPU of every thread of the process over
the same span (``getrusage``: the writers' threads included) divided by the
cores and by (d): above 1.0, the record's work exceeds what the machine's
cores can do in (d)'s time, however it is split among threads or processes.

Targets (issue 13): (r) wall ≤ 1.0 times (d); (r) execution-thread CPU ≤ 1.5 times
(b)'s; 100 KB ≤ 2 times 1 KB.

Run: ``.venv/bin/python bench/record.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

import onlooker
from onlooker import ExecutionContext
from onlooker.plugins import audit, history, metrics

REPEATS = 5


@onlooker.tool
async def add(a: int, b: int) -> int:
    """The tool under measurement: as cheap as a tool can be."""
    return a + b


@onlooker.tool
async def measure(text: str) -> int:
    """A tool taking one string argument (its size is what varies)."""
    return len(text)


def record_plugins(directory: Path, run: int) -> list[onlooker.Plugin[Any]]:
    """History on SQLite, the audit trail (group commit) and metrics: the record on."""
    return [
        history.plugin(f"sqlite:///{directory}/history-{run}.db"),
        audit.plugin(directory=directory / "audit", session_id=f"bench-{run}"),
        metrics.plugin(),
    ]


def process_cpu() -> float:
    """CPU seconds of every thread of this process so far (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def per_call(
    calls: int, plugins: list[onlooker.Plugin[Any]], text: str | None = None
) -> tuple[float, float, float]:
    """µs per call: wall including the drain at engine close, the execution thread's CPU,
    and the CPU of all threads (the writers' included) over the same span."""
    cpu: list[float] = []
    began_at: list[float] = []

    async def program(ctx: ExecutionContext) -> None:
        began_at.append(time.perf_counter())
        began_at.append(process_cpu())
        began = time.thread_time()
        if text is None:
            for i in range(calls):
                await ctx.call("add", a=i, b=1)
        else:
            for _ in range(calls):
                await ctx.call("measure", text=text)
        cpu.append(time.thread_time() - began)

    async with onlooker.ExecutionEngine(tools=[add, measure], plugins=plugins) as engine:
        await engine.execute(program)
    wall = time.perf_counter() - began_at[0]  # engine set-up excluded, the drain at close included
    every_thread = process_cpu() - began_at[1]
    return wall / calls * 1e6, cpu[0] / calls * 1e6, every_thread / calls * 1e6


def otel_span(calls: int) -> float:
    """(d): µs per call of the direct call inside one OpenTelemetry SDK span."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")

    async def body() -> float:
        began = time.perf_counter()
        for i in range(calls):
            with tracer.start_as_current_span("add"):
                await add.fn(a=i, b=1)
        return (time.perf_counter() - began) / calls * 1e6

    elapsed = anyio.run(body)
    exporter.clear()
    return elapsed


def median(values: list[float]) -> float:
    return statistics.median(values)


async def main(calls: int, big_calls: int) -> None:
    span: list[float] = []
    bare: list[tuple[float, float, float]] = []
    record: list[tuple[float, float, float]] = []
    small: list[float] = []
    big: list[float] = []
    kilobyte, hundred_kb = "x" * 1024, "y" * (100 * 1024)
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        for run in range(REPEATS):
            span.append(await anyio.to_thread.run_sync(otel_span, calls))
            bare.append(await per_call(calls, []))
            record.append(await per_call(calls, record_plugins(directory, run)))
            small.append(
                (await per_call(big_calls, record_plugins(directory, 100 + run), kilobyte))[0]
            )
            big.append(
                (await per_call(big_calls, record_plugins(directory, 200 + run), hundred_kb))[0]
            )
    d = median(span)
    b_wall, b_cpu = median([w for w, _, _ in bare]), median([c for _, c, _ in bare])
    r_wall, r_cpu = median([w for w, _, _ in record]), median([c for _, c, _ in record])
    r_all = median([a for _, _, a in record])
    s, g = median(small), median(big)
    print(
        f"calls per measurement: {calls} ({big_calls} for the payload sizes), median of {REPEATS}"
    )
    print(f"(d) direct + one OpenTelemetry span        {d:8.2f} µs/call")
    print(
        f"(b) ctx.call, no plugins, with the drain   {b_wall:8.2f} µs/call   thread CPU {b_cpu:6.2f}"
    )
    print(
        f"(r) history + audit + metrics, the drain   {r_wall:8.2f} µs/call   thread CPU {r_cpu:6.2f}"
    )
    print(f"    CPU of all threads (writers included)  {r_all:8.2f} µs/call")
    print(f"    1 KB string argument, record on        {s:8.2f} µs/call")
    print(f"    100 KB string argument, record on      {g:8.2f} µs/call")
    verdict = {True: "met", False: "NOT met"}
    print(f"(r) / (d) wall            = {r_wall / d:5.2f}   target <= 1.0  {verdict[r_wall <= d]}")
    cpu_ratio = r_cpu / b_cpu
    print(
        f"(r) / (b) thread CPU      = {cpu_ratio:5.2f}   target <= 1.5  {verdict[cpu_ratio <= 1.5]}"
    )
    print(f"100 KB / 1 KB per call    = {g / s:5.2f}   target <= 2.0  {verdict[g / s <= 2.0]}")
    cores = os.cpu_count() or 1
    print(
        f"(r) CPU of all threads / {cores} cores / (d) = {r_all / cores / d:5.2f}"
        "   (over 1.0: no split of the work across threads or processes meets (r) <= (d) here)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--big-calls", type=int, default=2_000)
    options = parser.parse_args()
    anyio.run(main, options.calls, options.big_calls)
