"""Store faults for ``bench/soak.py``: history and audit while their disks misbehave.

Each scenario runs concurrent executions with the history plugin (SQLite)
and the audit plugin, breaks something a third of the way through, repairs
it at two thirds, then counts what reached the stores against what was
emitted (a recording observer on the same engine):

- ``db_dir_removed``: the database's directory is deleted mid-run; every
  event emitted after the deletion must be in the recreated database;
- ``db_read_only``: the database's directory and files become immutable
  (``chattr +i``, root only) for a while;
- ``disk_full``: the database and the trail live on a small tmpfs (root
  only) that fills up for a while; the trail must verify, with a gap record;
- ``spill_unwritable``: the database is locked by another process and the
  first spill location cannot be written: the fallback takes the events;
- ``poison``: events holding a lone surrogate are mixed into the stream:
  each costs only itself (dead letters), every other event is written.

Rows: ``(run, store, emitted, received, dropped, failed, note)``; ``lost`` is
``emitted - received - dropped`` and must be 0.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import sqlalchemy as sa

import onlooker
from onlooker import Attribution, ExecutionContext, ExecutionEngine, ToolCallStarted
from onlooker.plugins import audit, history
from onlooker.plugins.history import tables
from onlooker.testing import RecordingObserver

__all__ = ["store_faults"]

Row = tuple[str, str, int, int, int, int, str]
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
FAST = (0.01, 0.05)


@onlooker.tool
async def store_work(n: int, text: str = "") -> int:
    """A tool that yields once; ``text`` makes the events bigger."""
    await anyio.lowlevel.checkpoint()
    return n + len(text)


def program(calls: int, size: int) -> Callable[[ExecutionContext], Awaitable[int]]:
    async def run(ctx: ExecutionContext) -> int:
        total = 0
        for n in range(calls):
            total += await ctx.call(store_work, n=n, text="x" * size)
        return total

    return run


async def stored_ids(url: str, **options: Any) -> set[str]:
    """Every event id in the database (spill files loaded first)."""
    async with history.open(url, **options) as store:
        ids: list[str] = await store.query(
            lambda conn: list(conn.execute(sa.select(tables.events.c.event_id)).scalars())
        )
    return set(ids)


@asynccontextmanager
async def running(
    plugins: list[onlooker.Plugin[Any]],
    executions: int,
    calls: int,
    *,
    size: int = 0,
    break_it: Callable[[], None],
    repair: Callable[[], None],
    deadline: float,
    hold: float = 1.0,
) -> AsyncIterator[tuple[RecordingObserver, list[int], ExecutionEngine]]:
    """Run the executions; ``break_it`` at a third of the events, ``repair`` ``hold`` s later.

    Yields the recorder, ``[index of the first event emitted after the break]``
    and the (closed) engine, after the run. The executions are paced so that
    the fault lasts through many of the writer's batches.
    """
    recorder = RecordingObserver()
    expected = executions * (2 * calls + 2)
    cut: list[int] = []
    broken = anyio.Event()

    def fault(event: onlooker.ExecutionEvent) -> None:  # inline, in the emitter: exact timing
        if len(recorder) == expected // 3:
            break_it()
            cut.append(len(recorder))
            broken.set()

    async def heal() -> None:
        await broken.wait()
        await anyio.sleep(hold)
        repair()

    async def paced() -> None:
        await anyio.sleep(random.random() * 2 * hold)  # spread over the fault's window
        await engine.execute(program(calls, size))

    with anyio.fail_after(deadline):
        async with ExecutionEngine(tools=[store_work], plugins=plugins) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            engine.bus.subscribe(fault, name="fault")
            async with anyio.create_task_group() as tg:
                tg.start_soon(heal)
                for _ in range(executions):
                    tg.start_soon(paced)
    yield recorder, cut, engine


def history_row(
    run: str, recorder: RecordingObserver, found: set[str], start: int, note: str = ""
) -> Row:
    after = {event.event_id for event in recorder.events[start:]}
    return (run, "history", len(after), len(after & found), 0, 0, note)


def audit_row(run: str, recorder: RecordingObserver, session: Path) -> Row:
    report = audit.verify(session)
    ids = {event.event_id for event in audit.tail(session)}
    emitted = {event.event_id for event in recorder.events}
    gaps = sum(1 for note in report.notes if note.get("kind") == "gap")
    note = f"verify {'ok' if report.ok else report.reason}, {gaps} gap record(s)"
    return (run, "audit", len(emitted), len(emitted & ids), 0, 0, note)


def chattr(flag: str, *paths: Path) -> None:
    present = [str(path) for path in paths if path.exists()]
    subprocess.run(["chattr", flag, *present], check=True, capture_output=True)


@contextlib.contextmanager
def small_disk(size: str) -> Iterator[Path]:
    mount = Path(tempfile.mkdtemp(prefix="onlooker-disk-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        check=True,
        capture_output=True,
    )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)
        shutil.rmtree(mount, ignore_errors=True)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size) == size:
                    pass
    finally:
        os.close(fd)
    return filler


async def db_dir_removed(base: Path, executions: int, calls: int, deadline: float) -> list[Row]:
    data = base / "data"
    url = f"sqlite:///{data / 'history.db'}"
    plugin = history.plugin(url, spill_fallback=base / "fallback.jsonl")
    async with running(
        [plugin],
        executions,
        calls,
        break_it=lambda: shutil.rmtree(data),
        repair=lambda: None,
        deadline=deadline,
    ) as (recorder, cut, engine):
        stats = engine.extension(plugin).statistics()
    found = await stored_ids(url, spill_fallback=base / "fallback.jsonl")
    note = f"counted after the removal; reopened {stats.reopened if stats else '?'}x"
    return [history_row("db_dir_removed", recorder, found, cut[0], note)]


async def db_read_only(base: Path, executions: int, calls: int, deadline: float) -> list[Row]:
    if not ROOT:
        return [("db_read_only", "history", 0, 0, 0, 0, "skipped: needs root (chattr +i)")]
    data = base / "data"
    url = f"sqlite:///{data / 'history.db'}"
    fallback = base / "fallback" / "spill.jsonl"
    db = data / "history.db"
    frozen = (data, db, db.with_name("history.db-wal"))
    plugin = history.plugin(url, spill_fallback=fallback, retry_delays=FAST)
    async with running(
        [plugin],
        executions,
        calls,
        break_it=lambda: chattr("+i", *frozen),
        repair=lambda: chattr("-i", *frozen),
        deadline=deadline,
    ) as (recorder, _, engine):
        stats = engine.extension(plugin).statistics()
    found = await stored_ids(url, spill_fallback=fallback)
    note = f"spilled {stats.spilled if stats else '?'}"
    return [history_row("db_read_only", recorder, found, 0, note)]


async def disk_full(base: Path, executions: int, calls: int, deadline: float) -> list[Row]:
    if not ROOT:
        return [("disk_full", "history", 0, 0, 0, 0, "skipped: needs root (mount -t tmpfs)")]
    fallback = base / "fallback" / "spill.jsonl"
    with small_disk("8m") as disk:
        url = f"sqlite:///{disk / 'data' / 'history.db'}"
        plugins: list[onlooker.Plugin[Any]] = [
            history.plugin(url, spill_fallback=fallback, retry_delays=FAST),
            audit.plugin(directory=disk / "audit", session_id="soak"),
        ]
        filler: list[Path] = []
        async with running(
            plugins,
            executions,
            calls,
            size=500,
            break_it=lambda: filler.append(fill(disk)),
            repair=lambda: filler[0].unlink(),
            deadline=deadline,
        ) as (recorder, _, engine):
            stats = engine.extension(plugins[0]).statistics()
        found = await stored_ids(url, spill_fallback=fallback)
        note = f"spilled {stats.spilled if stats else '?'}"
        return [
            history_row("disk_full", recorder, found, 0, note),
            audit_row("disk_full", recorder, disk / "audit" / "soak"),
        ]


async def spill_unwritable(base: Path, executions: int, calls: int, deadline: float) -> list[Row]:
    url = f"sqlite:///{base / 'history.db'}?timeout=0.05"
    (base / "blocked").write_text("a file where the spill directory should be")
    fallback = base / "fallback" / "spill.jsonl"
    lock: list[sqlite3.Connection] = []

    def break_it() -> None:
        holder = sqlite3.connect(base / "history.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        lock.append(holder)

    def repair() -> None:
        lock[0].execute("COMMIT")
        lock[0].close()

    plugin = history.plugin(
        url, spill_path=base / "blocked" / "spill.jsonl", spill_fallback=fallback, retry_delays=FAST
    )
    async with running(
        [plugin], executions, calls, break_it=break_it, repair=repair, deadline=deadline
    ) as (recorder, _, engine):
        stats = engine.extension(plugin).statistics()
    found = await stored_ids(url, spill_fallback=fallback)
    note = f"spilled {stats.spilled if stats else '?'} to the fallback"
    return [history_row("spill_unwritable", recorder, found, 0, note)]


async def poison(base: Path, executions: int, calls: int, deadline: float) -> list[Row]:
    url = f"sqlite:///{base / 'history.db'}"
    plugin = history.plugin(url, flush_interval=0.2)
    rng = random.Random(3)
    poisons: list[str] = []

    async def inject(engine: ExecutionEngine) -> None:
        for index in range(max(executions // 10, 1)):
            await anyio.sleep(rng.random() * 0.01)
            event = ToolCallStarted(
                event_id=f"poison-{index}",
                execution_id=f"poison-{index}",
                seq=0,
                at=datetime.now(UTC),
                attribution=Attribution(),
                tool_call_id=f"poison-{index}",
                tool="echo",
                args={"text": "\ud800"},
            )
            poisons.append(event.event_id)
            await engine.bus.send(event)

    recorder = RecordingObserver()
    with anyio.fail_after(deadline):
        async with ExecutionEngine(tools=[store_work], plugins=[plugin]) as engine:
            engine.bus.subscribe(recorder, name="recorder")
            async with anyio.create_task_group() as tg:
                tg.start_soon(inject, engine)
                for _ in range(executions):
                    tg.start_soon(engine.execute, program(calls, 0))
    stats = engine.extension(plugin).statistics()  # after the close: everything handled
    found = await stored_ids(url)
    emitted = {event.event_id for event in recorder.events} - set(poisons)
    dead = stats.dead_letters if stats else 0
    return [
        (
            "poison",
            "history",
            len(emitted) + len(poisons),
            len(emitted & found),
            dead,
            0,
            f"{len(poisons)} poison events, {dead} dead letters",
        )
    ]


SCENARIOS = [db_dir_removed, db_read_only, disk_full, spill_unwritable, poison]


async def store_faults(executions: int, calls: int, deadline: float) -> list[Row]:
    """Every scenario, each in a fresh temporary directory; the rows of all of them."""
    rows: list[Row] = []
    for scenario in SCENARIOS:
        base = Path(tempfile.mkdtemp(prefix=f"onlooker-soak-{scenario.__name__}-"))
        began = time.perf_counter()
        try:
            found = await scenario(base, executions, calls, deadline)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        elapsed = time.perf_counter() - began
        for run, store, emitted, received, dropped, failed, note in found:
            rows.append(
                (f"{run} ({elapsed:.1f} s)", store, emitted, received, dropped, failed, note)
            )
    return rows
