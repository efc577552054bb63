"""Soak and fault runs: many executions against misbehaving parts; prints what was lost.

Each run is one function returning :class:`Report` rows, one per observer or
store: what was emitted to it, what it received, what was dropped (and
counted) or failed (and counted), and what was *lost* — neither delivered
nor counted. Lost must be zero everywhere; the script exits 1 otherwise.

Observer runs (issue 12, items 1, 2 and 8):

- ``observer_faults``: healthy sync, async and Rx observers beside flaky
  ones (an ``Exception`` on some events), a slow one, a ``drop`` one and a
  hung one, under concurrent executions whose tools fail and whose callers
  cancel some of them;
- ``dying_observer``: an async observer dies of a ``BaseException``
  mid-run; the engine must close (within ``--deadline`` seconds) and the
  exception come out of it;
- ``sync_base_exception``: a synchronous observer raises a
  ``BaseException`` on some tool calls; every other observer's stream must
  stay well formed.

Store runs (issue 12, items 3 and 5): ``store_faults``, the history and
audit plugins while their database directory is removed or read-only, the
disk is full, the spill location refuses, and poison events arrive.

Run: ``.venv/bin/python bench/soak.py [--executions N] [--calls N] [--backend trio]``.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

import onlooker
from onlooker import ExecutionContext, ExecutionEngine, ExecutionEvent
from onlooker.testing import RecordingObserver, check_invariants


class Stop(BaseException):
    """A BaseException that is not cancellation."""


@dataclass
class Report:
    """One observer's (or store's) account of a run."""

    run: str
    name: str
    emitted: int
    received: int
    dropped: int = 0
    failed: int = 0
    note: str = ""

    @property
    def lost(self) -> int:
        """Events neither received nor counted as dropped."""
        return self.emitted - self.received - self.dropped


class Counting:
    """An observer that counts what it is handed, failing on every ``fail_every``-th event."""

    def __init__(self, fail_every: int = 0) -> None:
        self.received = 0
        self.fail_every = fail_every

    def _count(self) -> None:
        self.received += 1
        if self.fail_every and self.received % self.fail_every == 0:
            raise ValueError("a flaky observer")


class SyncCounting(Counting):
    def handle(self, event: ExecutionEvent) -> None:
        self._count()


class AsyncCounting(Counting):
    def __init__(self, fail_every: int = 0, pause: float | None = None) -> None:
        super().__init__(fail_every)
        self.pause = pause

    async def handle(self, event: ExecutionEvent) -> None:
        if self.pause is not None:
            await anyio.sleep(self.pause)
        self._count()


class Hung(Counting):
    """An async observer that never returns from its first event."""

    async def handle(self, event: ExecutionEvent) -> None:
        await anyio.sleep_forever()


@onlooker.tool
async def work(n: int, fail: bool = False) -> int:
    """A tool that yields once and fails when asked."""
    await anyio.lowlevel.checkpoint()
    if fail:
        raise ValueError(f"tool failure {n}")
    return n


def calls_program(calls: int, rng: random.Random) -> Callable[[ExecutionContext], Awaitable[int]]:
    async def program(ctx: ExecutionContext) -> int:
        done = 0
        for n in range(calls):
            with suppress(ValueError):  # the program goes on after a failed call
                await ctx.call(work, n=n, fail=rng.random() < 0.1)
            done += 1
        return done

    return program


async def run_executions(
    engine: ExecutionEngine, executions: int, calls: int, rng: random.Random
) -> None:
    """``executions`` concurrent executions; the callers of about one in ten cancel them."""

    async def one() -> None:
        program = calls_program(calls, rng)
        if rng.random() < 0.1:
            with anyio.move_on_after(rng.random() * 0.01):
                await engine.execute(program)
        else:
            await engine.execute(program)

    async with anyio.create_task_group() as tg:
        for _ in range(executions):
            tg.start_soon(one)


async def observer_faults(executions: int, calls: int, deadline: float) -> list[Report]:
    """Healthy and faulty observers side by side; the healthy lose nothing, the rest is counted."""
    rng = random.Random(12)
    sync_ok, async_ok = SyncCounting(), AsyncCounting()
    sync_flaky, async_flaky = SyncCounting(fail_every=7), AsyncCounting(fail_every=5)
    slow = AsyncCounting(pause=0.0005)
    dropper = AsyncCounting(pause=0.001)
    hung = Hung()
    recorder = RecordingObserver()
    rx_seen: list[ExecutionEvent] = []
    began = time.perf_counter()
    with anyio.fail_after(deadline):
        async with ExecutionEngine(tools=[work], shutdown_timeout=1.0) as engine:
            bus = engine.bus
            bus.subscribe(sync_ok, name="sync-ok")
            bus.subscribe(recorder, name="recorder")
            bus.subscribe(sync_flaky, name="sync-flaky")
            bus.subscribe(async_ok, name="async-ok")
            bus.subscribe(async_flaky, name="async-flaky")
            bus.subscribe(slow, name="slow", queue_size=64)
            bus.subscribe(dropper, name="dropper", overflow="drop", queue_size=16)
            bus.subscribe(hung, name="hung", queue_size=64, stall_timeout=0.2)
            bus.events.subscribe(rx_seen.append)
            await run_executions(engine, executions, calls, rng)
    elapsed = time.perf_counter() - began
    check_invariants(recorder.events)
    check_invariants(rx_seen)
    stats = engine.bus.statistics()
    run = f"observer_faults ({elapsed:.1f} s)"
    rows = [
        Report(run, "recorder", stats.emitted, len(recorder)),
        Report(run, "bus.events", stats.emitted, len(rx_seen)),
    ]
    for name, observer in [
        ("sync-ok", sync_ok),
        ("sync-flaky", sync_flaky),
        ("async-ok", async_ok),
        ("async-flaky", async_flaky),
        ("slow", slow),
        ("dropper", dropper),
        ("hung", hung),
    ]:
        rows.append(
            Report(
                run,
                name,
                stats.emitted,
                observer.received,
                stats.dropped_by_observer.get(name, 0),
                stats.errors_by_observer.get(name, 0),
            )
        )
    return rows


async def dying_observer(executions: int, calls: int, deadline: float) -> list[Report]:
    """An async observer dies of a BaseException mid-run: the engine closes, nothing hangs."""
    rng = random.Random(1)
    healthy = RecordingObserver()
    async_ok = AsyncCounting()
    dying = AsyncCounting()
    dies_after = executions * calls  # about half-way through
    died: list[bool] = []

    async def handle(event: ExecutionEvent) -> None:
        await dying.handle(event)
        if dying.received == dies_after:
            died.append(True)
            raise Stop

    outcome = "the engine did not raise"
    began = time.perf_counter()
    try:
        with anyio.fail_after(deadline):
            async with ExecutionEngine(tools=[work]) as engine:
                engine.bus.subscribe(healthy, name="healthy")
                engine.bus.subscribe(async_ok, name="async-ok")
                engine.bus.subscribe(handle, name="dying")
                await run_executions(engine, executions, calls, rng)
    except Stop:
        outcome = f"Stop came out of the engine after {time.perf_counter() - began:.2f} s"
    check_invariants(healthy.events)
    stats = engine.bus.statistics()
    run = "dying_observer"
    return [
        Report(run, "healthy", stats.emitted, len(healthy), note=outcome),
        Report(
            run,
            "async-ok",
            stats.emitted,
            async_ok.received,
            stats.dropped_by_observer.get("async-ok", 0),
            note="cancelled with the engine's task group",
        ),
        Report(
            run,
            "dying",
            stats.emitted,
            dying.received - len(died),  # the event it died on is counted as dropped
            stats.dropped_by_observer.get("dying", 0),
            note=f"queued after its death: {stats.queued}",
        ),
    ]


async def sync_base_exception(executions: int, calls: int, deadline: float) -> list[Report]:
    """A sync observer raises a BaseException on some tool calls; other streams stay whole."""
    rng = random.Random(8)
    before, after = RecordingObserver(), RecordingObserver()
    async_seen = RecordingObserver()
    raised = 0

    def stopper(event: ExecutionEvent) -> None:
        if event.kind == "ToolCallStarted" and rng.random() < 0.05:
            raise Stop

    async def async_handle(event: ExecutionEvent) -> None:
        async_seen.handle(event)

    async def one(engine: ExecutionEngine) -> None:
        nonlocal raised
        try:
            await engine.execute(calls_program(calls, rng))
        except Stop:
            raised += 1

    with anyio.fail_after(deadline):
        async with ExecutionEngine(tools=[work]) as engine:
            engine.bus.subscribe(before, name="before")
            engine.bus.subscribe(stopper, name="stopper")
            engine.bus.subscribe(after, name="after")
            engine.bus.subscribe(async_handle, name="async")
            async with anyio.create_task_group() as tg:
                for _ in range(executions):
                    tg.start_soon(one, engine)
    for recorder in (before, after, async_seen):
        check_invariants(recorder.events)
    stats = engine.bus.statistics()
    run = "sync_base_exception"
    note = f"{raised} executions ended by Stop, every pair closed"
    return [
        Report(run, "before", stats.emitted, len(before), note=note),
        Report(run, "after", stats.emitted, len(after)),
        Report(run, "async", stats.emitted, len(async_seen)),
    ]


async def store_faults(executions: int, calls: int, deadline: float) -> list[Report]:
    """History and audit while their disks misbehave (issue 12, items 3 and 5).

    A database directory removed, made read-only, a full disk, an unwritable
    spill location, poison events: see ``bench/_soak_stores.py``. Scenarios
    that need root (``chattr +i``, a tmpfs) say "skipped" without it.
    """
    from _soak_stores import store_faults as run_store_faults  # bench/ is on sys.path

    return [Report(*row) for row in await run_store_faults(executions, calls, deadline)]


RUNS: list[Callable[[int, int, float], Awaitable[list[Report]]]] = [
    observer_faults,
    dying_observer,
    sync_base_exception,
    store_faults,
]


def print_reports(reports: list[Report]) -> None:
    header = f"{'run':<28} {'observer':<12} {'emitted':>8} {'received':>9} {'dropped':>8} {'failed':>7} {'lost':>5}  note"
    print(header)
    print("-" * len(header))
    for r in reports:
        print(
            f"{r.run:<28} {r.name:<12} {r.emitted:>8} {r.received:>9} {r.dropped:>8} "
            f"{r.failed:>7} {r.lost:>5}  {r.note}"
        )


class LogCount(logging.Handler):
    """Counts the ``onlooker`` logger's records by level instead of printing thousands."""

    def __init__(self) -> None:
        super().__init__()
        self.levels: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.levels[record.levelname] += 1


async def main(executions: int, calls: int, deadline: float) -> int:
    log = LogCount()
    onlooker_logger = logging.getLogger("onlooker")
    onlooker_logger.addHandler(log)
    onlooker_logger.propagate = False
    reports: list[Report] = []
    for run in RUNS:
        reports.extend(await run(executions, calls, deadline))
    print_reports(reports)
    lost = sum(r.lost for r in reports)
    print(f"onlooker log records: {dict(log.levels)}")
    print(f"lost: {lost}   expected: 0")
    return 1 if lost else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=200)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds a run may take")
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    options = parser.parse_args()
    args: tuple[Any, ...] = (options.executions, options.calls, options.deadline)
    sys.exit(anyio.run(main, *args, backend=options.backend))
