"""The history store when things go wrong: poison events, odd values, lost or full disks.

Each scenario counts what reached the database against what was emitted:
zero events lost. Scenarios that need a read-only or full file system make
one as root (``chattr +i``, a size-limited tmpfs); CI runs as root.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import sniffio
import sqlalchemy as sa

import onlooker
import postgres
from onlooker import (
    Attribution,
    ExecutionContext,
    ExecutionEvent,
    InteractionResolved,
    InteractionStarted,
    ToolCallStarted,
)
from onlooker._ui import _queries
from onlooker.plugins import audit, history
from onlooker.plugins.history import _read, _rows, _writer, tables
from onlooker.plugins.history._db import Database
from onlooker.plugins.history._spill import DeadLetters, Spill, SpillFile
from onlooker.plugins.history._writer import MAX_COOLDOWN
from test_history_support import (
    T0,
    ManualClock,
    Outage,
    add,
    backend_url,
    execution_events,
    one_call,
    track_with_nuls,
)

pytestmark = pytest.mark.anyio

FAST = (0.01, 0.02)
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def needs_root() -> None:
    """chattr +i and mount: only root can; CI runs the suite as root."""
    if not ROOT:
        pytest.skip("needs root (chattr +i, mount -t tmpfs); CI runs as root")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from backend_url(str(request.param), tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def outage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    backend = str(request.param)
    for base in backend_url(backend, tmp_path):
        failure = Outage(backend, base + "?timeout=0.05" if backend == "sqlite" else base)
        try:
            yield failure
        finally:
            failure.end()


def poison(execution_id: str, seq: int, secret: str = "none") -> ToolCallStarted:
    """A tool call no database takes: its ``seq`` is past any SQL integer (by ``seq``)."""
    return ToolCallStarted(
        event_id=f"{execution_id}/poison",
        execution_id=execution_id,
        seq=2**64 + seq,
        at=T0,
        attribution=Attribution(),
        tool_call_id=f"{execution_id}/bad",
        tool="echo",
        args={"text": "bad string", "password": secret},
    )


def many_executions(count: int) -> list[ExecutionEvent]:
    return [
        event
        for index in range(count)
        for event in execution_events(f"x{index}", tools=[("echo", "completed", 1.0)])
    ]


def dead_letters(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def stored(url: str, **options: Any) -> tuple[int, int, int]:
    """(executions, tool calls, events) in the database, spill files loaded first."""
    async with history.open(url, **options) as store:
        counts: list[int] = await store.query(
            lambda conn: [
                int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
                for table in (tables.executions, tables.tool_calls, tables.events)
            ]
        )
    return counts[0], counts[1], counts[2]


class TestPoison:
    """Issue 12, item 3: one bad string must not cost the other events of its batch."""

    async def test_write_events_sets_the_poison_aside_and_writes_the_rest(
        self, url: str, tmp_path: Path
    ) -> None:
        good = many_executions(20)
        bad = poison("x7", 99, secret="hunter2hunter2")
        batch = [*good[:40], bad, *good[40:]]
        async with history.open(url, spill_path=tmp_path / "spill.jsonl") as store:
            assert await store.write_events(batch) == len(good) == 80
            for index in range(20):
                events = await store.events(f"x{index}")
                assert events == [e for e in good if e.execution_id == f"x{index}"]
            (letter,) = dead_letters(store.dead_letter_path)
        assert store.dead_letter_path == tmp_path / "spill.dead.jsonl"
        assert (letter["event_id"], letter["execution_id"], letter["kind"]) == (
            "x7/poison",
            "x7",
            "ToolCallStarted",
        )
        assert letter["reason"]  # the driver's or the server's refusal
        # recoverable and redacted like the rest
        assert letter["event"]["seq"] == 2**64 + 99
        assert letter["event"]["args"] == {
            "text": "bad string",
            "password": "[REDACTED:secret_field]",
        }
        assert "hunter2" not in (tmp_path / "spill.dead.jsonl").read_text()

    async def test_a_poison_event_written_twice_is_set_aside_once(
        self, url: str, tmp_path: Path
    ) -> None:
        """Replaying a trail twice changes nothing: not the database, not the dead letters."""
        batch = [*many_executions(2), poison("x1", 99)]
        for _ in range(2):  # each time a new store, as `onlooker audit replay` opens one
            async with history.open(url, spill_path=tmp_path / "spill.jsonl") as store:
                await store.write_events(batch)
        assert [d["event_id"] for d in dead_letters(tmp_path / "spill.dead.jsonl")] == ["x1/poison"]

    async def test_the_plugin_isolates_the_poison_in_a_batch(
        self, url: str, tmp_path: Path
    ) -> None:
        good = many_executions(20)
        plugin = history.plugin(
            url, spill_path=tmp_path / "spill.jsonl", flush_interval=0.5, retry_delays=FAST
        )
        async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
            store = engine.extension(plugin)
            for event in [*good[:41], poison("x10", 99), *good[41:]]:
                await engine.bus.send(event)
            await engine.bus.flush()
            await store.flush()
            statistics = store.statistics()
            assert statistics is not None
            assert (statistics.written, statistics.dead_letters, statistics.spilled) == (80, 1, 0)
            assert statistics.dropped == 0
            assert len(await store.list_executions(limit=100)) == 20
        (letter,) = dead_letters(tmp_path / "spill.dead.jsonl")
        assert letter["event_id"] == "x10/poison"
        assert not (tmp_path / "spill.jsonl").exists()

    async def test_a_poison_event_while_the_database_is_down(
        self, outage: Outage, tmp_path: Path
    ) -> None:
        good = many_executions(10)
        spill = tmp_path / "spill.jsonl"
        plugin = history.plugin(outage.url, spill_path=spill, retry_delays=FAST)
        async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
            store = engine.extension(plugin)
            await engine.bus.flush()
            outage.begin()
            for event in [*good[:20], poison("x5", 99), *good[20:]]:
                await engine.bus.send(event)
            await engine.bus.flush()
            await store.flush()
            statistics = store.statistics()
            assert statistics is not None
            # Spilled with its batch: only the database can tell it will never take it.
            assert (statistics.spilled, statistics.dead_letters, statistics.dropped) == (41, 0, 0)
        outage.end()
        assert await stored(outage.url, spill_path=spill) == (10, 10, 40)
        assert [d["event_id"] for d in dead_letters(tmp_path / "spill.dead.jsonl")] == ["x5/poison"]


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


@onlooker.tool
def take(x: Any, keep: int = 0) -> Any:
    """Returns what it was given."""
    return x


async def odd_values(ctx: ExecutionContext) -> object:
    loop: list[object] = []
    loop.append(loop)
    for value in (b"\xff\xfe", b"plain bytes", BadRepr(), loop, {"nested": BadRepr(), "ok": 1}):
        await ctx.call("take", x=value, keep=1)
    return BadRepr()


class TestUnserializableValues:
    """Issue 12, item 4: a value that cannot be serialized costs that value, not the execution."""

    async def test_history_reads_every_execution_back_and_replay_goes_on(
        self, url: str, tmp_path: Path
    ) -> None:
        recorder = onlooker.testing.RecordingObserver()
        plugins: list[onlooker.Plugin[Any]] = [
            history.plugin(url, spill_path=tmp_path / "spill.jsonl"),
            audit.plugin(directory=tmp_path / "audit", session_id="s1"),
        ]
        async with onlooker.ExecutionEngine(tools=[take], plugins=plugins) as engine:
            engine.bus.subscribe(recorder)
            results = [await engine.execute(odd_values) for _ in range(3)]
            store = engine.extension(plugins[0])
            for result in results:
                assert result.status == "completed"
                tree = await store.get_execution(result.execution_id)
                assert tree is not None and tree.status == "completed"
                assert len(tree.tool_calls) == 5
                for call in tree.tool_calls:  # still an object; the other value unharmed
                    assert call.args is not None and call.args["keep"] == 1
                *marked, nested = [call.args["x"] for call in tree.tool_calls if call.args]
                assert all(isinstance(value, str) for value in marked)
                assert nested == {  # only the value that cannot be copied is marked
                    "nested": "<not JSON-serializable BadRepr: no repr for you>",
                    "ok": 1,
                }
                assert await store.events(result.execution_id) == recorder.for_execution(
                    result.execution_id
                )
        rebuilt = f"sqlite:///{tmp_path / 'rebuilt.db'}"
        async with history.open(rebuilt) as copy:
            assert await audit.replay(tmp_path / "audit" / "s1", copy) == len(recorder.events)
            for result in results:
                assert await copy.events(result.execution_id) == recorder.for_execution(
                    result.execution_id
                )


def sqlite_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'history.db'}"


class TestLostDatabaseFile:
    """Issue 12, item 5: the SQLite file removed or replaced under a running writer."""

    @pytest.mark.parametrize("how", ["directory removed", "file replaced"])
    async def test_the_writer_reopens_and_loses_nothing(
        self, how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        data = tmp_path / "data"
        url = sqlite_url(data)
        plugin = history.plugin(url, spill_fallback=tmp_path / "fallback.jsonl")
        async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
            store = engine.extension(plugin)
            for _ in range(3):
                await engine.execute(one_call)
            await store.flush()
            if how == "directory removed":
                shutil.rmtree(data)
            else:
                other = tmp_path / "other.db"
                async with history.open(f"sqlite:///{other}"):
                    pass
                for leftover in data.glob("history.db-*"):  # the old file's WAL goes with it
                    leftover.unlink()
                os.replace(other, data / "history.db")
            with caplog.at_level(logging.WARNING, logger="onlooker"):
                after = [await engine.execute(one_call) for _ in range(5)]
                await engine.bus.flush()
                await store.flush()
            statistics = store.statistics()
            assert statistics is not None
            assert (statistics.reopened, statistics.spilled, statistics.dropped) == (1, 0, 0)
            assert any(
                "history.db was" in record.getMessage() and "reopening" in record.getMessage()
                for record in caplog.records
            )
            for result in after:  # reads see the new file too
                tree = await store.get_execution(result.execution_id)
                assert tree is not None and tree.status == "completed"
        assert await stored(url) == (5, 5, 20)


def chattr(flag: str, *paths: Path) -> None:
    subprocess.run(["chattr", flag, *map(str, paths)], check=True, capture_output=True)


@contextlib.contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """Paths even root cannot write (the SQLite -shm file is left alone: it is mapped)."""
    present = [path for path in paths if path.exists()]
    chattr("+i", *present)
    try:
        yield
    finally:
        chattr("-i", *present)


@contextlib.contextmanager
def small_disk(mount: Path, size: str) -> Iterator[Path]:
    """A size-limited tmpfs at ``mount``."""
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        check=True,
        capture_output=True,
    )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)


def fill(disk: Path) -> Path:
    """Fill ``disk`` up; returns the filler file (remove it for space again)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):  # big blocks, then what is left
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size) == size:
                    pass
    finally:
        os.close(fd)
    return filler


@onlooker.tool
def write_note(text: str) -> int:
    """Pretends to write ``text``; returns its length."""
    return len(text)


async def noted(ctx: ExecutionContext) -> int:
    result: int = await ctx.call("write_note", text="n" * 3000)
    return result


class TestRefusingDisks:
    """Issue 12, item 5: a read-only directory, a full disk, spill locations that refuse."""

    async def test_a_read_only_database_directory_loses_nothing(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        needs_root()
        data = tmp_path / "data"
        url = sqlite_url(data)
        fallback = tmp_path / "fallback" / "spill.jsonl"
        plugin = history.plugin(url, spill_fallback=fallback, retry_delays=FAST)
        async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
            store = engine.extension(plugin)
            before = [await engine.execute(one_call) for _ in range(3)]
            await store.flush()
            db = data / "history.db"
            with (
                caplog.at_level(logging.WARNING, logger="onlooker"),
                immutable(data, db, db.with_name("history.db-wal")),
            ):
                during = [await engine.execute(one_call) for _ in range(5)]
                await engine.bus.flush()
                await store.flush()
                statistics = store.statistics()
                assert statistics is not None
                assert (statistics.spilled, statistics.dropped) == (20, 0)
                assert fallback.is_file() and not (data / "history.db.spill.jsonl").exists()
            after = [await engine.execute(one_call) for _ in range(2)]
        assert any("spill file" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
        assert len(before + during + after) == 10
        assert await stored(url, spill_fallback=fallback) == (10, 10, 40)
        assert not fallback.exists()

    async def test_a_full_disk_loses_nothing_and_says_so(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        needs_root()
        fallback = tmp_path / "fallback" / "spill.jsonl"
        with small_disk(tmp_path / "disk", "3m") as disk:
            url = sqlite_url(disk / "data")
            plugins: list[onlooker.Plugin[Any]] = [
                history.plugin(url, spill_fallback=fallback, retry_delays=FAST),
                audit.plugin(directory=disk / "audit", session_id="s1"),
            ]
            async with onlooker.ExecutionEngine(tools=[write_note], plugins=plugins) as engine:
                store = engine.extension(plugins[0])
                trail = engine.extension(plugins[1])
                await engine.execute(noted)
                await store.flush()
                await trail.flush()
                filler = fill(disk)
                with caplog.at_level(logging.WARNING, logger="onlooker"):
                    for _ in range(40):
                        await engine.execute(noted)
                    await engine.bus.flush()
                    await store.flush()
                    await trail.flush()
                statistics = store.statistics()
                assert statistics is not None
                assert statistics.spilled > 0 and statistics.dropped == 0
                assert trail.statistics().pending > 0 and trail.statistics().dropped == 0
                messages = [r.getMessage() for r in caplog.records]
                assert any("audit: cannot write the trail" in m for m in messages)
                assert any("spill file" in m and "cannot be written" in m for m in messages)
                filler.unlink()  # space again
                await engine.execute(noted)
                await trail.flush()
                assert trail.statistics().pending == 0
            assert await stored(url, spill_fallback=fallback) == (42, 42, 168)
            report = audit.verify(disk / "audit" / "s1")
            assert report.ok and report.records == 168 + 1
            (gap,) = report.notes
            assert gap["kind"] == "gap" and "No space left" in gap["error"]
            problems = [json.loads(line) for line in trail.error_path.read_text().splitlines()]
            assert problems and all(p["delayed"] for p in problems)
            assert "No space left" in problems[0]["message"]

    async def test_an_unwritable_spill_location_falls_back(
        self, outage: Outage, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        (tmp_path / "blocked").write_text("a file where a directory should be")
        spill = tmp_path / "blocked" / "spill.jsonl"  # unwritable, even as root
        fallback = tmp_path / "fallback" / "spill.jsonl"
        plugin = history.plugin(
            outage.url, spill_path=spill, spill_fallback=fallback, retry_delays=FAST
        )
        async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
            store = engine.extension(plugin)
            outage.begin()
            with caplog.at_level(logging.ERROR, logger="onlooker"):
                for _ in range(4):
                    await engine.execute(one_call)
                await engine.bus.flush()
                await store.flush()
            statistics = store.statistics()
            assert statistics is not None
            assert (statistics.spilled, statistics.in_memory, statistics.dropped) == (16, 0, 0)
            assert fallback.is_file()
            assert any(str(spill) in r.getMessage() for r in caplog.records)
            assert any(  # the error that says what was not written says where it waits
                "could not be written" in r.getMessage()
                and f"they wait in {fallback}" in r.getMessage()
                for r in caplog.records
            )
        outage.end()
        assert await stored(outage.url, spill_path=spill, spill_fallback=fallback) == (4, 4, 16)

    async def test_no_spill_location_at_all_holds_events_in_memory(
        self, outage: Outage, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        (tmp_path / "blocked").write_text("a file where a directory should be")
        plugin = history.plugin(
            outage.url,
            spill_path=tmp_path / "blocked" / "one.jsonl",
            spill_fallback=tmp_path / "blocked" / "two.jsonl",
            retry_delays=FAST,
        )
        async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
            store = engine.extension(plugin)
            clock = ManualClock.install(store)
            outage.begin()
            for _ in range(4):
                await engine.execute(one_call)
            await engine.bus.flush()
            await store.flush()
            statistics = store.statistics()
            assert statistics is not None and statistics.in_memory == 16
            assert any("they wait in memory" in r.getMessage() for r in caplog.records)
            outage.end()
            clock.advance(MAX_COOLDOWN)  # the writer's cool-down after a failed batch is over
            await engine.execute(one_call)
            await engine.bus.flush()
            await store.flush()
            statistics = store.statistics()
            assert statistics is not None
            assert (statistics.in_memory, statistics.dropped) == (0, 0)
        assert await stored(outage.url) == (5, 5, 20)

    async def test_held_events_are_written_at_close(self, tmp_path: Path) -> None:
        base = f"sqlite:///{tmp_path / 'h.db'}?timeout=0.05"
        failure = Outage("sqlite", base)
        (tmp_path / "blocked").write_text("in the way")
        plugin = history.plugin(
            base,
            spill_path=tmp_path / "blocked" / "one.jsonl",
            spill_fallback=tmp_path / "blocked" / "two.jsonl",
            retry_delays=FAST,
        )
        try:
            async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
                store = engine.extension(plugin)
                failure.begin()
                await engine.execute(one_call)
                await engine.bus.flush()
                await store.flush()
                failure.end()  # back, but the writer is cooling down: the close writes them
        finally:
            failure.end()
        statistics = store.statistics()
        assert statistics is not None and (statistics.in_memory, statistics.dropped) == (0, 0)
        assert await stored(base) == (1, 1, 4)


class TestSpillChain:
    def test_the_memory_buffer_is_bounded_and_counts_what_it_drops(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        logger = logging.getLogger("onlooker.plugins.history")
        (tmp_path / "blocked").write_text("in the way")
        dead = DeadLetters([tmp_path / "blocked" / "dead.jsonl"], logger)
        spill = Spill(
            [SpillFile(tmp_path / "blocked" / "spill.jsonl", logger)], dead, logger, memory_limit=6
        )
        events = many_executions(2)  # 8 events
        with caplog.at_level(logging.CRITICAL, logger="onlooker"):
            spill.append([_rows.stored(event) for event in events])
        assert (spill.in_memory, spill.dropped) == (6, 2)
        assert any("2 events lost" in r.getMessage() for r in caplog.records)
        written: list[ExecutionEvent] = []

        def write(batch: Sequence[_rows.Stored]) -> int:
            written.extend(ready.event for ready in batch)
            return len(batch)

        assert spill.drain(write) == 6
        assert written == events[2:] and spill.in_memory == 0

    def test_a_file_is_drained_a_chunk_at_a_time_and_what_fails_is_kept(
        self, tmp_path: Path
    ) -> None:
        """Draining read the whole file first: 200,000 spilled events took 769 MB. A chunk
        the database refuses stays in the file with what follows it, and a line already set
        aside as dead letter is not kept (nor set aside again by the next drain)."""
        import tracemalloc

        logger = logging.getLogger("onlooker.plugins.history")
        dead_file = tmp_path / "dead.jsonl"
        dead = DeadLetters([dead_file], logger)
        path = tmp_path / "spill.jsonl"
        events = many_executions(1_500)  # 6,000 events
        lines = [_rows.stored(event).body for event in events]
        # the last line unterminated, as a process killed mid-append may leave it
        path.write_text("\n".join([*lines[:600], "not an event", *lines[600:]]))
        file = SpillFile(path, logger)
        written: list[ExecutionEvent] = []
        refuse = True
        most = 0

        def write(batch: Sequence[_rows.Stored]) -> int:
            nonlocal most
            most = max(most, tracemalloc.get_traced_memory()[0])
            if refuse and written:
                raise sa.exc.OperationalError("INSERT", {}, Exception("database is locked"))
            written.extend(ready.event for ready in batch)
            return len(batch)

        tracemalloc.start()
        try:
            assert file.drain(write, dead) == 500
        finally:
            tracemalloc.stop()
        assert written == events[:500]
        kept = path.read_text()
        assert kept.splitlines() == lines[500:]  # the dead letter not kept
        assert kept.endswith("\n")  # what is appended next starts a line of its own
        assert len(dead_file.read_text().splitlines()) == 1
        assert most < 5_000_000  # about one chunk, not the file
        late = execution_events("late", tools=[("echo", "completed", 1.0)])
        file.append("".join(_rows.stored(event).body + "\n" for event in late))
        refuse = False
        assert file.drain(write, dead) == 5_500 + len(late)
        assert written == events + late and not path.exists()
        assert len(dead_file.read_text().splitlines()) == 1

    def test_a_shared_fallback_directory_must_be_private(self, tmp_path: Path) -> None:
        logger = logging.getLogger("onlooker.plugins.history")
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o777)
        shared.chmod(0o777)
        file = SpillFile(shared / "spill.jsonl", logger, private=True)
        with pytest.raises(PermissionError, match="not a private directory"):
            file.append("{}\n")
        shared.chmod(0o700)
        file.append("{}\n")
        assert (shared / "spill.jsonl").read_text() == "{}\n"


SECRETS = {
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2,
    "slack": "xoxb-123456789012-abcdefghijkl",
    "openai": "sk-" + "Zx9" * 16,
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "bearer": "Bearer abc123def456ghi789jkl",
    "pem": "MIIEowIBAAKCAQEAsecretPEMbodyQWERTY",
    "url": "hunter2hunter2",
    "env": "s3cr3t-env-value-42",
    "bare_env": "q8Zr-bare-environment-value-7731",
}
SECRET_VARIABLE = "ONLOOKER_TEST_SERVICE_TOKEN"


@onlooker.tool
def leaky(query: str, api_key: str, config: dict[str, str]) -> str:
    """Echoes secrets in its result, and fails with one in the message."""
    if query == "fail":
        raise onlooker.ToolError(f"upstream said: token {SECRETS['github']} rejected")
    bare = os.environ.get(SECRET_VARIABLE, "")  # a secret variable's value, echoed bare
    return f"ran {query} with {api_key}; {SECRETS['bearer']}; {config['dsn']}; {bare}"


async def leaking(ctx: ExecutionContext) -> str:
    text = (
        f"aws {SECRETS['aws']} slack {SECRETS['slack']} key {SECRETS['openai']} "
        f"jwt {SECRETS['jwt']} export API_TOKEN={SECRETS['env']} "
        f"-----BEGIN RSA PRIVATE KEY-----\n{SECRETS['pem']}\n-----END RSA PRIVATE KEY-----"
    )
    config = {"dsn": f"postgresql://admin:{SECRETS['url']}@db.example.com/prod"}
    result: str = await ctx.call("leaky", query=text, api_key=SECRETS["openai"], config=config)
    with contextlib.suppress(onlooker.ToolError):
        await ctx.call("leaky", query="fail", api_key="x", config=config)
    return result


class TestSecrets:
    """Issue 12, item 6: every store under the data directory goes through one redaction policy."""

    async def test_no_secret_reaches_any_byte_under_the_data_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(SECRET_VARIABLE, SECRETS["bare_env"])
        data = tmp_path / ".onlooker"
        url = f"sqlite:///{data / 'history.db'}?timeout=0.05"
        failure = Outage("sqlite", url)
        spill, fallback = data / "spill" / "h.jsonl", data / "fallback" / "h.jsonl"
        plugins: list[onlooker.Plugin[Any]] = [
            history.plugin(url, spill_path=spill, spill_fallback=fallback, retry_delays=FAST),
            audit.plugin(directory=data / "audit", session_id="s1"),
        ]
        try:
            async with onlooker.ExecutionEngine(tools=[leaky], plugins=plugins) as engine:
                store = engine.extension(plugins[0])
                await engine.execute(leaking, input={"secret": SECRETS["url"]})  # the database
                await store.flush()
                failure.begin()
                await engine.execute(leaking)  # the spill file
                await store.flush()
                (data / "spill").rename(data / "spill-kept")  # kept aside, then made unwritable
                (data / "spill").write_text("in the way")
                await engine.execute(leaking, trigger=onlooker.Trigger(kind="t", metadata={
                    "auth": SECRETS["jwt"]}))  # the fallback spill file  # fmt: skip
                # spilled too; a dead letter once the spill is drained into the database
                await engine.bus.send(poison("p1", 0, secret=SECRETS["aws"]))
                await engine.bus.flush()
                await store.flush()
                stats = store.statistics()
                assert stats is not None and (stats.spilled, stats.dead_letters) == (13, 0)
        finally:
            failure.end()
        spilled = {p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file()}
        assert {"spill-kept/h.jsonl", "fallback/h.jsonl"} <= spilled
        before = b"".join(p.read_bytes() for p in data.rglob("*") if p.is_file())
        async with history.open(url, spill_path=spill, spill_fallback=fallback) as reopened:
            page = await reopened.list_executions()  # the redacted events read back
            assert [record.status for record in page] == ["completed", "completed"]
        assert (data / "fallback" / "h.dead.jsonl").is_file()
        everything = before + b"".join(p.read_bytes() for p in data.rglob("*") if p.is_file())
        assert everything.count(b"[REDACTED:") > 20
        leaks = {name for name, secret in SECRETS.items() if secret.encode() in everything}
        assert leaks == set()


class TestReadOnly:
    """Issue 12, item 9: reading never creates a database or a directory."""

    async def test_a_missing_file_is_a_clear_error_and_nothing_is_created(
        self, tmp_path: Path
    ) -> None:
        missing = tmp_path / "typo" / "histroy.db"
        with pytest.raises(onlooker.HistoryError, match=r"no history database at .*histroy\.db"):
            async with history.open(f"sqlite:///{missing}", read_only=True):
                pass
        assert not (tmp_path / "typo").exists()
        assert os.listdir(tmp_path) == []

    async def test_a_sqlite_uri_filename_is_read_only_too(self, tmp_path: Path) -> None:
        """``sqlite:///file:...?uri=true`` names a file as a plain path does: reading it
        neither creates it nor writes to it."""
        from onlooker.plugins.history._db import Database

        missing = tmp_path / "new.db"
        with pytest.raises(onlooker.HistoryError, match=r"no history database at .*new\.db"):
            async with history.open(f"sqlite:///file:{missing}?uri=true", read_only=True):
                pass
        assert os.listdir(tmp_path) == []
        real = tmp_path / "h.db"
        async with history.open(f"sqlite:///{real}") as store:
            await store.write_events(execution_events("u1"))
        reader = Database(f"sqlite:///file:{real}?uri=true", read_only=True)
        try:
            with (
                pytest.raises(sa.exc.OperationalError, match="readonly"),
                reader.engine.begin() as conn,
            ):
                conn.exec_driver_sql("CREATE TABLE written (x)")
        finally:
            reader.dispose()
        async with history.open(f"sqlite:///file:{real}?uri=true", read_only=True) as store:
            assert await store.get_execution("u1") is not None

    async def test_a_reader_follows_the_file_at_its_path(self, tmp_path: Path) -> None:
        """Replaced (a new database at the same path), the new file is read, not the old one
        the pooled connections held (``onlooker ui`` showed the old data until restarted);
        removed, a clear error; created again, read again."""
        path, other = tmp_path / "h.db", tmp_path / "other.db"
        async with history.open(f"sqlite:///{path}") as store:
            await store.write_events(execution_events("old"))
        async with history.open(f"sqlite:///{other}") as store:
            await store.write_events(execution_events("new"))
        async with history.open(f"sqlite:///{path}", read_only=True) as reader:

            async def ids() -> list[str]:
                return [e.execution_id for e in await reader.list_executions()]

            assert await ids() == ["old"]
            os.replace(other, path)
            assert await ids() == ["new"]
            path.unlink()
            with pytest.raises(onlooker.HistoryError, match=r"no history database at .*h\.db"):
                await ids()
            assert not path.exists()  # nothing created
            async with history.open(f"sqlite:///{path}") as store:
                await store.write_events(execution_events("again"))
            assert await ids() == ["again"]

    async def test_a_file_that_is_not_a_history_database(self, tmp_path: Path) -> None:
        other = tmp_path / "other.db"
        sqlite3.connect(other).close()
        with pytest.raises(onlooker.HistoryError, match="not an onlooker history database"):
            async with history.open(f"sqlite:///{other}", read_only=True):
                pass

    async def test_another_programs_tables_under_our_names_are_left_alone(
        self, tmp_path: Path
    ) -> None:
        """Opened for writing (as ``onlooker run --db app.db`` does), a database with its own
        ``executions`` table is refused whole: nothing is added to it, no spill file appears."""
        app = tmp_path / "app.db"
        with contextlib.closing(sqlite3.connect(app)) as db:
            db.execute("CREATE TABLE executions (x)")
            db.commit()
        with pytest.raises(onlooker.HistoryError, match="has tables named executions"):
            async with history.open(f"sqlite:///{app}"):
                pass
        with contextlib.closing(sqlite3.connect(app)) as db:
            tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        assert tables == [("executions",)]
        assert os.listdir(tmp_path) == ["app.db"]

    @pytest.mark.parametrize("version", [2, 5, "2.1"])
    @pytest.mark.parametrize("read_only", [False, True])
    async def test_another_programs_schema_version_table_is_left_alone(
        self, tmp_path: Path, version: object, read_only: bool
    ) -> None:
        """``schema_version`` is a common name: without onlooker's ``events`` beside it, the
        database is not onlooker's, whatever version it holds (one at 2 used to be
        "migrated": onlooker's tables added, its version row rewritten)."""
        app = tmp_path / "app.db"
        with contextlib.closing(sqlite3.connect(app)) as db:
            db.execute("CREATE TABLE schema_version (id INTEGER PRIMARY KEY, version)")
            db.execute("INSERT INTO schema_version VALUES (1, ?)", (version,))
            db.commit()
        before = app.read_bytes()
        url = f"sqlite:///{app}"
        with pytest.raises(onlooker.HistoryError, match=f"{url} is not an onlooker history"):
            async with history.open(url, read_only=read_only):
                pass
        if read_only:
            assert app.read_bytes() == before
        with contextlib.closing(sqlite3.connect(app)) as db:
            tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            rows = db.execute("SELECT * FROM schema_version").fetchall()
        assert (tables, rows) == ([("schema_version",)], [(1, version)])
        assert sorted(os.listdir(tmp_path)) == ["app.db"]

    async def test_a_database_with_other_tables_takes_ours_beside_them(
        self, tmp_path: Path
    ) -> None:
        app = tmp_path / "app.db"
        with contextlib.closing(sqlite3.connect(app)) as db:
            db.execute("CREATE TABLE users (name)")
            db.commit()
        async with history.open(f"sqlite:///{app}") as store:
            await store.write_events(execution_events("x1"))
            assert await store.get_execution("x1") is not None

    async def test_reads_work_writes_are_refused_spill_left_alone(
        self, url: str, tmp_path: Path
    ) -> None:
        events = execution_events("r1", tools=[("echo", "completed", 1.0)])
        async with history.open(url) as store:
            await store.write_events(events)
        spill = tmp_path / "spill.jsonl"
        spill.write_text(execution_events("r2")[0].model_dump_json() + "\n")
        async with history.open(url, read_only=True, spill_path=spill) as store:
            assert store.read_only
            assert await store.events("r1") == events
            assert [r.execution_id for r in await store.list_executions()] == ["r1"]
            with pytest.raises(onlooker.HistoryError, match="read-only"):
                await store.write_events(execution_events("r3"))
            if store.url.startswith("postgresql"):  # the session itself refuses to write
                with pytest.raises(sa.exc.InternalError, match="read-only transaction"):
                    await store.query(lambda conn: conn.exec_driver_sql("DELETE FROM events"))
        assert spill.exists()  # loading it is a write: not on a read-only open


class TestCorruptRows:
    """Issue 12, item 9: an error about a corrupt row names the row and its execution."""

    async def test_a_corrupt_event_body(self, url: str) -> None:
        async with history.open(url) as store:
            await store.write_events(execution_events("c1", tools=[("echo", "completed", 1.0)]))
            await store.query(_corrupt("UPDATE events SET body = '{\"kind\": \"Nope\"}' "
                                       "WHERE event_id = 'c1/1'"))  # fmt: skip
            with pytest.raises(onlooker.HistoryError) as caught:
                await store.events("c1")
        assert "'c1/1'" in str(caught.value) and "execution 'c1'" in str(caught.value)
        assert (caught.value.event_id, caught.value.execution_id) == ("c1/1", "c1")

    @pytest.mark.parametrize(
        ("statement", "named"),
        [
            ("UPDATE tool_calls SET args = '\"a string\"'", "tool call 'c1/call0'"),
            ("UPDATE executions SET status = 'exploded'", "execution 'c1'"),
        ],
    )
    async def test_a_corrupt_projection_row(self, url: str, statement: str, named: str) -> None:
        async with history.open(url) as store:
            await store.write_events(execution_events("c1", tools=[("echo", "completed", 1.0)]))
            await store.query(_corrupt(statement))
            with pytest.raises(onlooker.HistoryError, match="corrupt history row") as caught:
                await store.get_execution("c1")
        assert named in str(caught.value) and "execution 'c1'" in str(caught.value)
        assert caught.value.execution_id == "c1"

    async def test_a_json_column_that_is_not_json(self, tmp_path: Path) -> None:
        # SQLite only: PostgreSQL's json type refuses such text in the first place
        async with history.open(sqlite_url(tmp_path)) as store:
            await store.write_events(execution_events("c1", tools=[("echo", "completed", 1.0)]))
            await store.query(_corrupt("UPDATE tool_calls SET result = 'not json {'"))
            with pytest.raises(onlooker.HistoryError, match="result is not JSON") as caught:
                await store.get_execution("c1")
        assert "tool call 'c1/call0' of execution 'c1'" in str(caught.value)

    @pytest.mark.parametrize(
        ("table", "column", "named"),
        [
            ("executions", "started_at", "execution 'c1' of execution 'c1'"),
            ("executions", "sort_at", "execution 'c1' of execution 'c1'"),
            ("executions", "finished_at", "execution 'c2' of execution 'c2'"),
            ("tool_calls", "started_at", "tool call 'c1/call0' of execution 'c1'"),
            ("interactions", "resolved_at", "interaction 'q1' of execution 'c1'"),
        ],
    )
    async def test_a_time_that_does_not_read_back(
        self, url: str, table: str, column: str, named: str
    ) -> None:
        # text on SQLite, a time past Python's on PostgreSQL: neither reads back as a datetime
        owner = named.rsplit("'", 2)[1]
        row = f" WHERE execution_id = '{owner}'" if table == "executions" else ""
        async with history.open(url) as store:
            await store.write_events(_with_a_child_and_a_question())
            await store.query(_corrupt(f"UPDATE {table} SET {column} = 'infinity'{row}"))
            reads: list[Callable[[], Awaitable[object]]] = [lambda: store.get_execution("c1")]
            if table == "executions":
                reads.append(store.list_executions)
            for read in reads:
                with pytest.raises(onlooker.HistoryError, match="corrupt history row") as caught:
                    await read()
                assert f"{named}: {column} does not read back" in str(caught.value)
                assert caught.value.execution_id == owner

    @pytest.mark.parametrize(
        ("statement", "named"),
        [
            ("UPDATE executions SET started_at = 'yesterday'", "execution 'c1'"),
            ("UPDATE tool_calls SET started_at = 'soon'", "tool call 'c1/call0'"),
            ("UPDATE interactions SET resolved_at = 'x'", "interaction 'q1'"),
            ("UPDATE tool_calls SET duration_ms = 'abc'", "tool call 'c1/call0'"),
        ],
    )
    async def test_text_in_a_time_or_number_column(
        self, tmp_path: Path, statement: str, named: str
    ) -> None:
        # SQLite only: PostgreSQL's timestamptz and float columns refuse such text
        async with history.open(sqlite_url(tmp_path)) as store:
            await store.write_events(_with_a_child_and_a_question())
            await store.query(_corrupt(statement))
            for read in (
                lambda: store.get_execution("c1"),
                lambda: store.query(lambda conn: _queries.execution_node(conn, "c1")),
            ):
                with pytest.raises(onlooker.HistoryError, match="corrupt history row") as caught:
                    await read()
                assert f"{named} of execution 'c1'" in str(caught.value)
                assert caught.value.execution_id == "c1"

    async def test_stats_over_a_duration_that_is_not_a_number(self, tmp_path: Path) -> None:
        async with history.open(sqlite_url(tmp_path)) as store:
            await store.write_events(_with_a_child_and_a_question())
            await store.query(_corrupt("UPDATE tool_calls SET duration_ms = 'abc'"))
            with pytest.raises(onlooker.HistoryError, match="corrupt history row") as caught:
                await store.stats()
        assert "tool call 'c1/call0' of execution 'c1'" in str(caught.value)
        assert "duration_ms is not a number: 'abc'" in str(caught.value)
        assert caught.value.execution_id == "c1"

    async def test_stats_over_one_text_duration_among_many(self, tmp_path: Path) -> None:
        """SQLite sorts text after every number: no percentile lands on it, yet it is named."""
        calls = [("read", "completed", float(ms)) for ms in range(1, 21)]
        async with history.open(sqlite_url(tmp_path)) as store:
            await store.write_events(execution_events("e1", tools=calls))
            await store.query(_corrupt("UPDATE tool_calls SET duration_ms = 'abc' WHERE seq = 1"))
            with pytest.raises(onlooker.HistoryError, match="duration_ms is not a number"):
                await store.stats()

    async def test_the_ui_reads_name_the_row_too(self, url: str) -> None:
        async with history.open(url) as store:
            await store.write_events(_with_a_child_and_a_question())
            await store.query(_corrupt("UPDATE executions SET started_at = 'infinity' "
                                       "WHERE execution_id = 'c2'"))  # fmt: skip
            await store.query(_corrupt("UPDATE tool_calls SET finished_at = 'infinity'"))
            reads: list[tuple[str, Callable[[sa.Connection], object]]] = [
                ("execution 'c2'", lambda conn: _queries.execution_node(conn, "c1")),
                ("execution 'c2'", lambda conn: _queries.list_page(conn, _queries.ListFilters())),
                ("tool call 'c1/call0'", lambda conn: _queries.call_record(conn, "c1", "c1/call0")),
            ]
            for named, read in reads:
                with pytest.raises(onlooker.HistoryError, match="does not read back") as caught:
                    await store.query(read)
                assert named in str(caught.value)


def _with_a_child_and_a_question() -> list[ExecutionEvent]:
    """``c1`` with a tool call ``c1/call0``, a question ``q1`` and a child execution ``c2``."""
    question: dict[str, Any] = {
        "execution_id": "c1",
        "attribution": Attribution(),
        "interaction_id": "q1",
    }
    return [
        *execution_events("c1", tools=[("echo", "completed", 1.0)]),
        *execution_events("c2", parent="c1", depth=1),
        InteractionStarted(
            event_id="c1/q", seq=10, at=T0, message="ok?", mode="paused", **question
        ),
        InteractionResolved(event_id="c1/a", seq=11, at=T0, status="accepted", **question),
    ]


def _corrupt(statement: str) -> Any:
    def run(conn: sa.Connection) -> None:
        conn.exec_driver_sql(statement)
        conn.commit()

    return run


class TestLongInts:
    """An int too long for ``int()`` (over 4,300 digits) nested in a value: what JSON readers
    refuse is read as a string saying so, and nothing else of the execution or trail is lost."""

    @pytest.mark.parametrize("with_surrogate", [False, True], ids=["alone", "beside a surrogate"])
    async def test_the_execution_and_its_trail_read_back_whole(
        self, url: str, tmp_path: Path, with_surrogate: bool
    ) -> None:
        @onlooker.tool
        def sink(x: list[Any]) -> str:
            return "ok"

        value: list[Any] = [10**5000, *(["caf\udce9"] if with_surrogate else [])]

        async def program(ctx: ExecutionContext) -> str:
            await ctx.call("sink", x=[1])
            await ctx.call("sink", x=value)
            result: str = await ctx.call("sink", x=[2])
            return result

        recorder = history.plugin(url)
        trail_plugin = audit.plugin(tmp_path / "audit", session_id="s1")
        trigger = onlooker.Trigger(kind="cli", metadata={"n": [10**5000]})
        async with onlooker.ExecutionEngine(
            tools=[sink], plugins=[recorder, trail_plugin]
        ) as engine:
            result = await engine.execute(program, trigger=trigger)
        assert result.status == "completed"
        writer = engine.extension(recorder).statistics()
        assert writer is not None and writer.dead_letters == 0
        assert engine.extension(trail_plugin).statistics().errors == 0
        async with history.open(url) as store:
            tree = await store.get_execution(result.execution_id)
            events = await store.events(result.execution_id)
        assert tree is not None
        assert [call.args for call in tree.tool_calls][0::2] == [{"x": [1]}, {"x": [2]}]
        kept = tree.tool_calls[1].args
        assert kept is not None and isinstance(kept["x"], list)
        [noted, *rest] = kept["x"]
        assert rest == value[1:]
        assert noted in (
            "<int of 5001 digits: too long for JSON readers>",  # as pydantic wrote it
            "<int of 16610 bits: too long for JSON readers>",  # as json writes it
        )
        assert [event.seq for event in events] == list(range(8))
        trail = tmp_path / "audit" / "s1"
        assert audit.verify(trail).ok
        assert [event.event_id for event in audit.tail(trail)] == [e.event_id for e in events]


class TestValueCap:
    """Issue 12, item 9: history caps a stored value as the audit trail does, with its marker."""

    async def test_a_huge_argument_is_cut_with_the_marker(self, url: str) -> None:
        @onlooker.tool
        def swallow(blob: str) -> int:
            return len(blob)

        async def program(ctx: ExecutionContext) -> int:
            result: int = await ctx.call("swallow", blob="y" * 1_000_000)
            return result

        plugin = history.plugin(url, max_value_chars=5000)
        async with onlooker.ExecutionEngine(tools=[swallow], plugins=[plugin]) as engine:
            result = await engine.execute(program)
            store = engine.extension(plugin)
            tree = await store.get_execution(result.execution_id)
            size = await store.query(
                lambda conn: conn.execute(
                    sa.select(sa.func.sum(sa.func.length(sa.cast(tables.events.c.body, sa.Text))))
                ).scalar_one()
            )
        assert result.value == 1_000_000  # the tool got the whole value; history keeps a cut
        assert tree is not None and tree.tool_calls[0].args is not None
        blob = tree.tool_calls[0].args["blob"]
        assert isinstance(blob, str) and blob.startswith("y" * 5000)
        assert "…[truncated " in blob and len(blob) < 5100
        assert size < 20_000

    async def test_many_small_values_are_capped_as_one_record(self, url: str) -> None:
        from onlooker.plugins.history._rows import MAX_RECORD_CHARS

        @onlooker.tool
        def count(items: list[int]) -> int:
            return len(items)

        async def program(ctx: ExecutionContext) -> int:
            result: int = await ctx.call("count", items=list(range(200_000)))
            return result

        plugin = history.plugin(url)
        async with onlooker.ExecutionEngine(tools=[count], plugins=[plugin]) as engine:
            result = await engine.execute(program)
            store = engine.extension(plugin)
            (started,) = [
                e for e in await store.events(result.execution_id) if isinstance(e, ToolCallStarted)
            ]
        items = started.args["items"]
        assert isinstance(items, list) and items[:3] == [0, 1, 2]
        assert isinstance(items[-1], str) and items[-1].startswith("…[truncated ")
        assert len(started.model_dump_json()) <= MAX_RECORD_CHARS

    async def test_a_cut_value_is_not_cut_again_when_the_spill_is_loaded(
        self, outage: Outage, tmp_path: Path
    ) -> None:
        @onlooker.tool
        def echo(text: str) -> str:
            return text

        async def program(ctx: ExecutionContext) -> str:
            result: str = await ctx.call("echo", text="y" * 150)
            return result

        spill = tmp_path / "spill.jsonl"
        plugin = history.plugin(
            outage.url, spill_path=spill, max_value_chars=100, retry_delays=FAST
        )
        async with onlooker.ExecutionEngine(tools=[echo], plugins=[plugin]) as engine:
            outage.begin()
            result = await engine.execute(program)
            await engine.bus.flush()
            await engine.extension(plugin).flush()
        outage.end()
        assert spill.is_file()
        async with history.open(outage.url, spill_path=spill, max_value_chars=100) as store:
            tree = await store.get_execution(result.execution_id)
        assert tree is not None and tree.tool_calls[0].args == {
            "text": "y" * 100 + "…[truncated 50 chars]"
        }

    def test_bad_cap_settings_fail_when_the_plugin_is_made(self) -> None:
        with pytest.raises(ValueError, match="max_value_chars"):
            history.plugin(max_value_chars=0)
        with pytest.raises(TypeError, match="Redactor"):
            history.plugin(redactor="yes")  # type: ignore[arg-type]


class TestDroppedConnection:
    async def test_a_connection_dropped_while_idle_is_replaced_at_once(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """PostgreSQL writes take no ping before each batch (a round trip): a pooled
        connection the server dropped fails its batch, which is written again at once on a
        fresh one (the pool emptied: its other connections went with it), with no retry
        delay, warning or spill."""
        for url in backend_url("postgres", tmp_path):
            async with history.open(url, spill_path=tmp_path / "spill.jsonl") as store:
                await store.write_events(execution_events("before"))
                writes = store._db._writes  # three idle connections in its pool, all to drop
                with writes.connect(), writes.connect(), writes.connect():
                    pass
                name = url.rsplit("/", 1)[1]
                postgres.cluster_or_skip().sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
                )
                with caplog.at_level(logging.WARNING, logger="onlooker.plugins.history"):
                    await store.write_events(execution_events("after"))
                assert await store.get_execution("before") is not None
                assert await store.get_execution("after") is not None
            assert not caplog.records
            assert not (tmp_path / "spill.jsonl").exists()


class TestLockedDatabase:
    """A database another connection keeps locked must not freeze the program or the close."""

    async def test_the_program_goes_on_while_the_database_is_locked(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """The writer's backpressure blocks the emitter, and so the event loop: it must stop
        once the writer takes nothing, or the loop freezes for as long as the lock lasts."""
        monkeypatch.setattr(_writer, "STALL_SECONDS", 0.1)
        db = tmp_path / "history.db"
        plugin = history.plugin(f"sqlite:///{db}?timeout=1", batch_size=100, retry_delays=FAST)
        calls = 1_100  # 2,200 events: past the 2,000 the writer lets wait before it holds us

        async def busy(ctx: ExecutionContext) -> None:
            for i in range(calls):
                await ctx.call("add", a=i, b=1)

        async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
            store = engine.extension(plugin)
            await engine.execute(one_call)
            await store.flush()
            lock = sqlite3.connect(db, isolation_level=None)
            lock.execute("BEGIN EXCLUSIVE")
            try:
                with caplog.at_level(logging.WARNING, logger="onlooker.plugins.history"):
                    # Frozen, the loop could not even run this deadline until the writer
                    # gave up on its retries (about 5 s here).
                    with anyio.fail_after(3):
                        result = await engine.execute(busy)
            finally:
                lock.execute("ROLLBACK")
                lock.close()
        assert result.status == "completed"
        assert "the program goes on, and what waits beyond 2000 events goes to" in caplog.text
        stats = store.statistics()
        assert stats is not None and stats.dropped == 0
        assert stats.written + stats.spilled == stats.accepted == 4 + 2 + 2 * calls

    async def test_backpressure_resumes_once_a_stalled_writer_moves(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A writer that stalled once, then goes on slower than the program, must hold the
        program back again: else the events waiting in memory grow without bound."""
        import threading

        monkeypatch.setattr(_writer, "STALL_SECONDS", 0.05)
        gate = threading.Semaphore(0)  # one release: one batch written
        opened = threading.Event()
        write = _writer.BatchWriter._write

        def gated(self: _writer.BatchWriter, ready: list[Any]) -> None:
            if not opened.is_set():
                gate.acquire(timeout=10)
            write(self, ready)

        def started(i: int) -> ToolCallStarted:
            return ToolCallStarted(
                event_id=f"s/{i}", execution_id="s", seq=i, at=T0,
                attribution=Attribution(), tool_call_id=f"s/c{i}", tool="add", args={},
            )  # fmt: skip

        monkeypatch.setattr(_writer.BatchWriter, "_write", gated)
        plugin = history.plugin(f"sqlite:///{tmp_path / 'h.db'}", batch_size=100)
        async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
            writer = engine.extension(plugin)._writer
            assert writer is not None
            try:
                for i in range(2_300):  # past the 2,000 events the writer lets wait
                    writer.handle(started(i))
                assert writer._stall.stalled  # it took nothing: the program went on
                gate.release()  # one batch, and the writer is as stuck as before
                with anyio.fail_after(10):
                    while writer.statistics().pending > 2_200:  # noqa: ASYNC110  # a thread's
                        await anyio.sleep(0.01)
                assert writer.statistics().pending > 1_000  # far from caught up halfway
                writer.handle(started(2_300))
                assert not writer._stall.stalled  # it moved: past the limit, emitters wait again
            finally:
                opened.set()
                gate.release()

    async def test_a_store_starts_while_another_connection_holds_a_write_lock(
        self, tmp_path: Path
    ) -> None:
        """Setting the schema up took a write lock even with nothing to create: a start
        failed with "database is locked" while another program wrote for long."""
        db = tmp_path / "history.db"
        url = f"sqlite:///{db}?timeout=0.2"
        async with history.open(url) as store:
            await store.write_events(execution_events("kept"))
        lock = sqlite3.connect(db, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            async with history.open(url) as store:
                assert (await store.get_execution("kept")) is not None
        finally:
            lock.execute("ROLLBACK")
            lock.close()

    async def test_a_stalled_writer_holds_a_bounded_backlog_the_rest_is_spilled(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """While the writer took nothing (a database locked for long), every event waited
        in memory: 2.3 million events, 1.7 GB in 20 s of a tight loop, none spilled, all
        lost to a kill. Past twice the backpressure limit they now go to the spill file."""
        import threading

        monkeypatch.setattr(_writer, "STALL_SECONDS", 0.05)
        stuck = threading.Event()
        write = _writer.BatchWriter._write

        def held(self: _writer.BatchWriter, ready: list[Any]) -> None:
            stuck.wait(timeout=30)  # the database answers nothing until released
            write(self, ready)

        def started(i: int) -> ToolCallStarted:
            return ToolCallStarted(
                event_id=f"s/{i}", execution_id="s", seq=i, at=T0,
                attribution=Attribution(), tool_call_id=f"s/c{i}", tool="add", args={"i": i},
            )  # fmt: skip

        url = f"sqlite:///{tmp_path / 'h.db'}"
        spill = tmp_path / "spill.jsonl"
        monkeypatch.setattr(_writer.BatchWriter, "_write", held)
        plugin = history.plugin(url, batch_size=100, spill_path=spill)
        async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
            writer = engine.extension(plugin)._writer
            assert writer is not None
            try:
                most = 0
                busy = writer._spill._lock  # the spill busy for a while: a shed waits, fails
                busy.acquire()
                for i in range(5_000):
                    writer.handle(started(i))
                busy.release()
                assert writer.statistics().spilled == 0
                for i in range(5_000, 20_000):  # shedding again, after the one that failed
                    writer.handle(started(i))
                    most = max(most, writer.statistics().pending)
                assert writer._stall.stalled
                stats = writer.statistics()
                assert most <= 3 * 2_000 + 100  # the next try came a limit later
                assert stats.pending <= 2 * 2_000 + 100  # the batch it holds, twice the limit
                assert stats.spilled >= 20_000 - most and stats.in_memory == 0
                assert len(spill.read_text().splitlines()) == stats.spilled
            finally:
                stuck.set()
        monkeypatch.undo()
        assert writer is not None
        closed = writer.statistics()
        assert closed.written + closed.spilled == closed.accepted == 20_000
        assert closed.dropped == 0
        async with onlooker.ExecutionEngine(plugins=[history.plugin(url, spill_path=spill)]):
            pass  # its start drains the spill
        async with history.open(url) as store:
            assert len(await store.events("s")) == 20_000

    async def test_postgresql_gives_up_on_a_lock_and_spills(self, tmp_path: Path) -> None:
        """Without a lock timeout, COPY waits for another session's lock for ever, and the
        engine's close with it."""
        import psycopg

        cluster = postgres.cluster_or_skip()
        url = cluster.create_database()
        try:
            db = Database(url)
            db.setup()
            with db.engine.connect() as conn:
                assert conn.exec_driver_sql("SHOW lock_timeout").scalar() == "5s"
            db.engine.dispose()
            # The URL's own options come after onlooker's: the test need not wait 5 s a try.
            short = f"{url}?options=-c%20lock_timeout%3D100"
            spill = tmp_path / "spill.jsonl"
            plugin = history.plugin(short, spill_path=spill, retry_delays=FAST)
            holder = psycopg.connect(
                host="127.0.0.1", port=cluster.port, user="postgres", dbname=url.rsplit("/", 1)[1]
            )
            try:
                holder.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
                with anyio.fail_after(20):
                    async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
                        await engine.execute(one_call)
                stats = engine.extension(plugin).statistics()
            finally:
                holder.close()
            assert stats is not None and stats.spilled == stats.accepted == 4
            assert spill.is_file()
        finally:
            cluster.drop_database(url)

    async def test_a_postgresql_server_that_stops_answering_cannot_hold_the_close(
        self, tmp_path: Path
    ) -> None:
        """The session's server process stopped (SIGSTOP: a hung server, the connection
        open): the close waited for the writer thread for ever. Now it leaves the thread
        behind after ``shutdown_timeout`` and spills what it had not written; nothing is
        lost: the next start drains the spill file."""
        import signal

        import psycopg

        cluster = postgres.cluster_or_skip()
        url = cluster.create_database()
        name = url.rsplit("/", 1)[1]
        spill = tmp_path / "spill.jsonl"
        stopped: list[int] = []
        plugin = history.plugin(url, spill_path=spill, retry_delays=FAST)
        recorder = onlooker.testing.RecordingObserver()
        outcome: dict[str, Any] = {}

        async def stop_the_server_then_close() -> None:
            async with onlooker.ExecutionEngine(
                tools=[add], plugins=[plugin], shutdown_timeout=1.0
            ) as engine:
                engine.bus.subscribe(recorder)
                await engine.execute(one_call)
                await engine.extension(plugin).flush()
                with psycopg.connect(
                    host="127.0.0.1", port=cluster.port, user="postgres", dbname="postgres"
                ) as admin:
                    rows = admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,)
                    ).fetchall()
                for (pid,) in rows:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                await engine.execute(one_call)
                await engine.execute(one_call)
            outcome["writer"] = engine.extension(plugin)._writer

        def in_its_own_thread(backend: str) -> None:  # a close that hangs then fails the test
            try:
                anyio.run(stop_the_server_then_close, backend=backend)
            except BaseException as exc:
                outcome["error"] = exc

        thread = threading.Thread(
            target=in_its_own_thread, args=(sniffio.current_async_library(),), daemon=True
        )
        try:
            thread.start()
            await anyio.to_thread.run_sync(thread.join, 30)
            hung = thread.is_alive()
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        assert not hung, "the close waited for the stopped server"
        assert "error" not in outcome, outcome.get("error")
        assert stopped
        assert spill.is_file()  # what the stuck writer had not written
        writer = outcome["writer"]
        assert writer is not None and writer.left_behind
        await anyio.to_thread.run_sync(writer._thread.join, 20)  # it ends, and closes its pool
        assert not writer._thread.is_alive()
        try:
            async with onlooker.ExecutionEngine(
                plugins=[history.plugin(url, spill_path=spill, retry_delays=FAST)]
            ):
                pass  # the start drains the spill file
            async with history.open(url) as store:
                stored = {
                    event.event_id
                    for execution in await store.list_executions()
                    for event in await store.events(execution.execution_id)
                }
            assert stored == {event.event_id for event in recorder.events}
            assert not spill.exists()
        finally:
            cluster.drop_database(url)


class TestWriterLeftBehind:
    """A writer stuck in a database that never answers, at the engine's close."""

    @staticmethod
    def stuck_writes(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
        """Every batch write waits until the returned event is set (a database that hangs)."""
        answer = threading.Event()
        write = _writer.BatchWriter._write

        def hangs(self: _writer.BatchWriter, batch: list[Any]) -> None:
            answer.wait(30)
            write(self, batch)

        monkeypatch.setattr(_writer.BatchWriter, "_write", hangs)
        return answer

    async def test_the_batch_it_holds_and_the_rest_are_spilled(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The batch the writer had taken (not yet redacted) was neither written nor spilled,
        and ``pending`` never went back to 0."""
        answer = self.stuck_writes(monkeypatch)
        url = f"sqlite:///{tmp_path / 'h.db'}"
        spill = tmp_path / "spill.jsonl"
        plugin = history.plugin(url, spill_path=spill, batch_size=4)
        recorder = onlooker.testing.RecordingObserver()
        try:
            with anyio.fail_after(20):
                async with onlooker.ExecutionEngine(
                    tools=[add], plugins=[plugin], shutdown_timeout=0.2
                ) as engine:
                    engine.bus.subscribe(recorder)
                    for _ in range(3):
                        await engine.execute(one_call)
            writer = engine.extension(plugin)._writer
            assert writer is not None and writer.left_behind
            stats = writer.statistics()
            assert (stats.accepted, stats.spilled, stats.pending) == (12, 12, 0)
            spilled = {json.loads(line)["event_id"] for line in spill.read_text().splitlines()}
            assert spilled == {event.event_id for event in recorder.events}
        finally:
            answer.set()
        await anyio.to_thread.run_sync(writer._thread.join, 20)
        assert not writer._thread.is_alive()
        assert await stored(url, spill_path=spill) == (3, 3, 12)  # the next start drains it

    async def test_a_spill_file_held_locked_sends_them_to_the_next_place(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A drain stuck in the database holds the spill file's lock: the close waited for
        it (and so lost the events at exit). It now tries the next place."""
        from onlooker._shared import lock_file

        answer = self.stuck_writes(monkeypatch)
        spill, fallback = tmp_path / "spill.jsonl", tmp_path / "fallback.jsonl"
        plugin = history.plugin(
            f"sqlite:///{tmp_path / 'h.db'}", spill_path=spill, spill_fallback=fallback
        )
        held: int | None = None
        try:
            with anyio.fail_after(20):
                async with onlooker.ExecutionEngine(
                    tools=[add], plugins=[plugin], shutdown_timeout=0.2
                ) as engine:
                    await engine.execute(one_call)
                    held = os.open(spill, os.O_RDWR | os.O_CREAT)  # what a stuck drain holds
                    lock_file(held)
        finally:
            if held is not None:
                os.close(held)
            answer.set()
        writer = engine.extension(plugin)._writer
        assert writer is not None
        assert writer.statistics().spilled == 4
        assert len(fallback.read_text().splitlines()) == 4
        assert spill.read_text() == ""
        await anyio.to_thread.run_sync(writer._thread.join, 20)

    @staticmethod
    def nowhere_to_spill(
        tmp_path: Path,
    ) -> tuple[Outage, Path, onlooker.Plugin[history.HistoryStore]]:
        """An outage of a history database whose spill places are blocked by a file (so
        its events wait in memory); the blocked directory, to unblock."""
        base = f"sqlite:///{tmp_path / 'h.db'}?timeout=0.05"
        blocked = tmp_path / "blocked"
        blocked.write_text("in the way")
        plugin = history.plugin(
            base,
            spill_path=blocked / "spill.jsonl",
            spill_fallback=blocked / "fallback.jsonl",
            retry_delays=FAST,
        )
        return Outage("sqlite", base), blocked, plugin

    @staticmethod
    async def held_in_memory(
        engine: onlooker.ExecutionEngine,
        plugin: onlooker.Plugin[history.HistoryStore],
        failure: Outage,
    ) -> history.HistoryStore:
        """One execution's four events, held in memory through the outage."""
        store = engine.extension(plugin)
        failure.begin()
        await engine.execute(one_call)
        await engine.bus.flush()
        await store.flush()
        stats = store.statistics()
        assert stats is not None and stats.in_memory == 4
        return store

    async def test_events_held_in_memory_and_stuck_at_close_are_spilled(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Held in memory (no spill file took them), then written at close into a database
        that hangs: the close left the writer behind and the events were neither spilled
        nor counted."""
        failure, blocked, plugin = self.nowhere_to_spill(tmp_path)
        answer = threading.Event()
        write_isolating = _writer.BatchWriter._write_isolating

        def hangs(self: _writer.BatchWriter, batch: Any) -> int:
            answer.wait(30)
            return write_isolating(self, batch)

        try:
            with anyio.fail_after(20):
                async with onlooker.ExecutionEngine(
                    tools=[add], plugins=[plugin], shutdown_timeout=0.2
                ) as engine:
                    store = await self.held_in_memory(engine, plugin, failure)
                    failure.end()
                    monkeypatch.setattr(_writer.BatchWriter, "_write_isolating", hangs)
                    blocked.unlink()  # the spill location works again
                    blocked.mkdir()
            writer = store._writer
            assert writer is not None and writer.left_behind
            stats = writer.statistics()
            assert (stats.in_memory, stats.dropped, stats.pending) == (0, 0, 0)
            assert len((blocked / "spill.jsonl").read_text().splitlines()) == 4
        finally:
            failure.end()
            answer.set()
        await anyio.to_thread.run_sync(writer._thread.join, 20)
        assert not writer._thread.is_alive()

    async def test_held_events_taken_as_the_close_goes_on_are_spilled_by_the_writer(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The close's saver ran between the writer taking the held events and telling it
        so: the saver did not see them, and the writer, stuck after, never saved them."""
        answer = threading.Event()

        def hangs(self: _writer.BatchWriter, batch: Any) -> int:
            answer.wait(30)
            return 0

        failure, blocked, plugin = self.nowhere_to_spill(tmp_path)
        writer: _writer.BatchWriter | None = None
        try:
            async with onlooker.ExecutionEngine(
                tools=[add], plugins=[plugin], shutdown_timeout=0.2
            ) as engine:
                store = await self.held_in_memory(engine, plugin, failure)
                writer = store._writer
                assert writer is not None
                take_memory = writer._spill.take_memory

                abandon = _writer.BatchWriter._abandon
                abandoned: list[float] = []

                def once(self: _writer.BatchWriter, waited: float) -> None:
                    if not abandoned:  # the close's saver runs once
                        abandoned.append(waited)
                        abandon(self, waited)

                def taken_as_the_close_goes_on(wait: float | None = None) -> list[Any]:
                    held = take_memory(wait)
                    if held:
                        writer._abandon(0.0)  # the saver, at this very moment
                    return held

                monkeypatch.setattr(_writer.BatchWriter, "_abandon", once)

                monkeypatch.setattr(writer._spill, "take_memory", taken_as_the_close_goes_on)
                monkeypatch.setattr(_writer.BatchWriter, "_write_isolating", hangs)
                blocked.unlink()  # the spill location works again
                blocked.mkdir()
            assert writer is not None
            stats = writer.statistics()
            assert (stats.in_memory, stats.dropped) == (0, 0)
            assert len((blocked / "spill.jsonl").read_text().splitlines()) == 4
        finally:
            failure.end()
            answer.set()
        if writer is not None:
            await anyio.to_thread.run_sync(writer._thread.join, 20)


class TestLoneSurrogates:
    """An undecodable file name (a lone surrogate) is no poison: stored escaped, read back."""

    async def test_an_execution_holding_one_is_stored_whole(self, url: str) -> None:
        @onlooker.tool
        def listdir() -> list[str]:
            return ["ok.txt", "caf\udce9.txt"]

        async def program(ctx: ExecutionContext) -> str:
            names: list[str] = await ctx.call("listdir")
            return names[1]

        recorder = onlooker.testing.RecordingObserver()
        plugin = history.plugin(url)
        async with onlooker.ExecutionEngine(tools=[listdir], plugins=[plugin]) as engine:
            engine.bus.subscribe(recorder)
            result = await engine.execute(program)
        stats = engine.extension(plugin).statistics()
        assert stats is not None and (stats.written, stats.dead_letters) == (4, 0)
        async with history.open(url) as store:
            tree = await store.get_execution(result.execution_id)
            stored_events = await store.events(result.execution_id)
        assert tree is not None and tree.status == "completed"
        assert tree.result == "caf\udce9.txt"
        assert [(c.status, c.result) for c in tree.tool_calls] == [
            ("completed", ["ok.txt", "caf\udce9.txt"])
        ]
        assert stored_events == recorder.events

    async def test_one_in_a_key_is_stored_too(self, url: str) -> None:
        """File names as keys (``{name: size}``): pydantic's fallback refused the key, and its
        JSON mode wrote each as U+FFFD, so two such keys became one."""
        found = {f"caf{chr(0xDCE9)}.txt": 12, f"caf{chr(0xDCE8)}.txt": 13}  # ruff merges literals

        @onlooker.tool
        def sizes(names: dict[str, int]) -> dict[str, int]:
            return dict(names)

        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("sizes", names=found)

        recorder = onlooker.testing.RecordingObserver()
        plugin = history.plugin(url)
        async with onlooker.ExecutionEngine(tools=[sizes], plugins=[plugin]) as engine:
            engine.bus.subscribe(recorder)
            result = await engine.execute(program)
        stats = engine.extension(plugin).statistics()
        assert stats is not None and (stats.written, stats.dead_letters) == (4, 0)
        async with history.open(url) as store:
            tree = await store.get_execution(result.execution_id)
            stored_events = await store.events(result.execution_id)
        assert tree is not None
        assert [(c.status, c.args, c.result) for c in tree.tool_calls] == [
            ("completed", {"names": found}, found)
        ]
        assert stored_events == recorder.events

    async def test_one_in_an_id_is_stored_too(self, url: str) -> None:
        """A framework may give an undecodable name as an id: the events are stored (their
        id columns with U+FFFD, the raw events as emitted), and found by either spelling."""
        recorder = onlooker.testing.RecordingObserver()
        plugin = history.plugin(url)
        async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
            engine.bus.subscribe(recorder)
            async with engine.track("p", execution_id="run-caf\udce9") as run:
                call = await run.tool_started("ls", {}, tool_call_id="c-caf\udce9")
                await call.finished("ok")
        stats = engine.extension(plugin).statistics()
        assert stats is not None and (stats.written, stats.dead_letters) == (4, 0)
        async with history.open(url) as store:
            for spelling in ("run-caf\udce9", "run-caf\ufffd"):
                tree = await store.get_execution(spelling)
                assert tree is not None and tree.execution_id == "run-caf\ufffd"
                assert [c.tool_call_id for c in tree.tool_calls] == ["c-caf\ufffd"]
                assert await store.events(spelling) == recorder.events

    async def test_a_nul_in_what_is_looked_up(self, url: str) -> None:
        """PostgreSQL stores a NUL in an id, trigger or tool name as U+FFFD; a lookup by
        the name given raised the driver's DataError there (and the UI showed a 503)."""
        await track_with_nuls(url)
        async with history.open(url) as store:
            tree = await store.get_execution("run\x00x")
            assert tree is not None and len(tree.tool_calls) == 1
            assert len(await store.events("run\x00x")) == 4
            for found in (
                await store.list_executions(trigger="t\x00rig"),
                await store.list_executions(tool="to\x00ol"),
            ):
                assert [e.execution_id for e in found] == [tree.execution_id]
            assert await store.get_execution("other\x00") is None
            assert await store.events("other\x00") == []
            for odd in ("zz\x00", "zz\udce9"):  # a cursor made by hand
                cursor = _read.encode_cursor(datetime.now(UTC) + timedelta(days=1), odd)
                assert len(await store.list_executions(cursor=cursor)) == 1

    def test_parse_event_reads_the_escape_json_writes(self) -> None:
        event = poison("x", 0)
        raw = json.dumps(event.model_dump(mode="json") | {"tool": "caf\udce9"})
        assert "\\udce9" in raw
        parsed = onlooker.parse_event(raw)
        assert isinstance(parsed, ToolCallStarted) and parsed.tool == "caf\udce9"
        with pytest.raises(onlooker.EventValidationError, match="not valid JSON"):
            onlooker.parse_event(raw[:-1])
