"""History store throughput and what the history plugin costs a tool call.

Measured in one process, for SQLite and PostgreSQL:

(1) tool calls stored per second through ``store.write_events`` in batches
    of 500 events;
(2) tool calls per second end to end through the plugin: an engine running
    executions of 200 calls, then closed (every event written);
(3) per tool call, in a tight loop on SQLite: the execution thread's own
    CPU (``time.thread_time``) with history off, with a no-op synchronous
    observer (the engine then builds and emits its events: the part of the
    cost that is not history's) and with history on; the writer thread's
    CPU; and the wall time including the drain at engine close.

The writer thread shares the GIL with the execution, so (2) and the wall
time of (3) are roughly the sum of both threads' CPU on a busy machine.

``--baseline DIR`` compares this tree with another (``DIR`` holds the
``onlooker`` package, for example ``git archive HEAD src | tar -x -C
/tmp/base`` then ``--baseline /tmp/base/src``) in the same run: each round
measures both, in alternating order, each in its own process, and the
medians are printed side by side with their ratio.

PostgreSQL: ``--pg-url postgresql+psycopg://...`` (a server whose databases
the bench may create), or, without it, a throwaway cluster from
``tests/postgres.py`` when PostgreSQL is installed.

Run: ``.venv/bin/python bench/history.py [--calls N] [--rounds R] [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

import onlooker
from onlooker import ExecutionContext, ExecutionEvent
from onlooker.plugins import history
from onlooker.testing import RecordingObserver

BATCH = 500  # the plugin's default batch on SQLite (2,000 on PostgreSQL: _plugin.DEFAULT_BATCH)
CALLS_PER_EXECUTION = 200
ROOT = Path(__file__).resolve().parent.parent
WRITER_THREAD = "onlooker history writer"  # the prefix of the writer thread's name


@onlooker.tool
async def add(a: int, b: int) -> int:
    """The tool under measurement: as cheap as a tool can be."""
    return a + b


def calls_program(calls: int, timing: list[tuple[float, float]]) -> Any:
    """A program making ``calls`` calls; appends (wall, execution-thread CPU) seconds."""

    async def program(ctx: ExecutionContext) -> None:
        began, cpu = time.perf_counter(), time.thread_time()
        for i in range(calls):
            await ctx.call("add", a=i, b=1)
        timing.append((time.perf_counter() - began, time.thread_time() - cpu))

    return program


async def recorded_events(calls: int) -> list[ExecutionEvent]:
    """The events of ``calls`` tool calls, as the engine emits them."""
    recorder = RecordingObserver()
    program = calls_program(CALLS_PER_EXECUTION, [])
    async with onlooker.ExecutionEngine(tools=[add]) as engine:
        engine.bus.subscribe(recorder)
        for _ in range(calls // CALLS_PER_EXECUTION):
            await engine.execute(program)
    return recorder.events


async def store_throughput(url: str, events: list[ExecutionEvent], calls: int) -> float:
    """(1): tool calls per second through ``store.write_events``."""
    async with history.open(url) as store:
        began = time.perf_counter()
        for start in range(0, len(events), BATCH):
            await store.write_events(events[start : start + BATCH])
        return calls / (time.perf_counter() - began)


async def plugin_throughput(url: str, calls: int) -> float:
    """(2): tool calls per second through the plugin, the engine's close included."""
    program = calls_program(CALLS_PER_EXECUTION, [])
    plugin = history.plugin(url)
    began = time.perf_counter()
    async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
        for _ in range(calls // CALLS_PER_EXECUTION):
            await engine.execute(program)
    return calls / (time.perf_counter() - began)


def _thread_cpu(prefix: str) -> Callable[[], float]:
    """The summed CPU seconds of the live threads named ``prefix...`` (Linux, macOS)."""
    clocks = [
        time.pthread_getcpuclockid(thread.ident)
        for thread in threading.enumerate()
        if thread.name.startswith(prefix) and thread.ident is not None
    ]
    return lambda: sum(time.clock_gettime(clock) for clock in clocks)


def _ignore(event: ExecutionEvent) -> None:
    """A synchronous observer that does nothing."""


async def per_call(calls: int, url: str | None, *, observed: bool = False) -> dict[str, float]:
    """(3): µs per call in one execution of ``calls`` calls; history on when ``url`` is given,
    a no-op observer subscribed when ``observed``."""
    timing: list[tuple[float, float]] = []
    program = calls_program(calls, timing)
    plugins = [history.plugin(url)] if url is not None else []
    writer = 0.0
    began = time.perf_counter()
    async with onlooker.ExecutionEngine(tools=[add], plugins=plugins) as engine:
        if observed:
            engine.bus.subscribe(_ignore)
        writer_cpu = _thread_cpu(WRITER_THREAD)
        await engine.execute(program)
        if plugins:
            await engine.extension(plugins[0]).flush()
        writer = writer_cpu()
    total = time.perf_counter() - began
    _, cpu = timing[0]
    return {"total": total / calls * 1e6, "cpu": cpu / calls * 1e6, "writer": writer / calls * 1e6}


async def measure(work: Path, calls: int, pg_urls: list[str]) -> dict[str, float]:
    """One round of every figure, in this process."""
    events = await recorded_events(calls)
    figures: dict[str, float] = {}
    sqlite = [f"sqlite:///{work / f'{name}.db'}" for name in ("store", "plugin", "overhead")]
    figures["sqlite write_events"] = await store_throughput(sqlite[0], events, calls)
    figures["sqlite end to end"] = await plugin_throughput(sqlite[1], calls)
    if pg_urls:
        figures["postgresql write_events"] = await store_throughput(pg_urls[0], events, calls)
        figures["postgresql end to end"] = await plugin_throughput(pg_urls[1], calls)
    off = await per_call(calls, None)
    noop = await per_call(calls, None, observed=True)
    on = await per_call(calls, sqlite[2])
    figures["execution thread CPU, history off"] = off["cpu"]
    figures["execution thread CPU, a no-op observer"] = noop["cpu"]
    figures["execution thread CPU, history on"] = on["cpu"]
    figures["writer thread CPU"] = on["writer"]
    figures["wall, history on, with the drain"] = on["total"]
    return figures


UNITS = {
    "sqlite write_events": "calls/s",
    "sqlite end to end": "calls/s",
    "postgresql write_events": "calls/s",
    "postgresql end to end": "calls/s",
    "execution thread CPU, history off": "µs/call",
    "execution thread CPU, a no-op observer": "µs/call",
    "execution thread CPU, history on": "µs/call",
    "writer thread CPU": "µs/call",
    "wall, history on, with the drain": "µs/call",
}
TARGETS = {"sqlite end to end": "≥ 50,000", "postgresql end to end": "≥ 20,000"}


class Postgres:
    """Fresh databases for each round: on ``--pg-url``'s server, or a throwaway cluster."""

    def __init__(self, given: str | None) -> None:
        self.given = given
        self.cluster: Any = None
        self.reason = ""
        if given is not None:
            return
        sys.path.insert(0, str(ROOT / "tests"))
        try:
            self.cluster = importlib.import_module("postgres").cluster_or_skip()
        except BaseException as exc:  # pytest's skip is a BaseException
            self.reason = str(exc)

    def urls(self, count: int) -> list[str]:
        """``count`` database URLs (none when PostgreSQL is not available)."""
        if self.given is not None:
            return [self.given] * count
        if self.cluster is None:
            return []
        return [str(self.cluster.create_database()) for _ in range(count)]


def run_child(source: Path, calls: int, urls: list[str]) -> dict[str, float]:
    """One round in a new process importing ``onlooker`` from ``source``."""
    environment = {**os.environ, "PYTHONPATH": str(source)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--calls", str(calls), *urls],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the bench failed on {source}:\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def fmt(name: str, value: float) -> str:
    return f"{value:,.0f}" if UNITS[name] == "calls/s" else f"{value:.2f}"


def compare(baseline: Path, calls: int, rounds: int, postgres: Postgres) -> None:
    """Both trees, ``rounds`` times each, alternating; medians side by side."""
    sources = {"before": baseline, "after": ROOT / "src"}
    results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for index in range(rounds):
        order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
        for side in order:
            results[side].append(run_child(sources[side], calls, postgres.urls(2)))
    print(f"{calls:,} tool calls per measurement, median of {rounds} rounds per side")
    print(f"before: {baseline}\nafter:  {sources['after']}\n")
    print("| | before | after | after / before | target |\n|---|---|---|---|---|")
    for name in results["after"][0]:
        before = statistics.median(r[name] for r in results["before"])
        after = statistics.median(r[name] for r in results["after"])
        print(
            f"| {name} ({UNITS[name]}) | {fmt(name, before)} | {fmt(name, after)} "
            f"| {after / before:.2f}x | {TARGETS.get(name, '')} |"
        )


async def main(args: argparse.Namespace) -> None:
    if args.child:
        work = Path(tempfile.mkdtemp(prefix="onlooker-bench-"))
        try:
            print(json.dumps(await measure(work, args.calls, args.urls)))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    postgres = Postgres(args.pg_url)
    if postgres.reason:
        print(f"PostgreSQL: not measured ({postgres.reason})")
    if args.baseline is not None:
        compare(Path(args.baseline), args.calls, args.rounds, postgres)
        return
    runs = [run_child(ROOT / "src", args.calls, postgres.urls(2)) for _ in range(args.rounds)]
    print(f"{args.calls:,} tool calls per measurement, median of {args.rounds} rounds\n")
    print("| | measured | target |\n|---|---|---|")
    for name in runs[0]:
        value = statistics.median(run[name] for run in runs)
        print(f"| {name} ({UNITS[name]}) | {fmt(name, value)} | {TARGETS.get(name, '')} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg-url", default=None)
    parser.add_argument("--baseline", default=None, help="a src directory to compare with")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("urls", nargs="*", help=argparse.SUPPRESS)
    anyio.run(main, parser.parse_args())
