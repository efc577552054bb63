"""The audit plugin under an engine: every event on disk, failures contained, tail, replay."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

import onlooker
from onlooker.plugins import audit
from onlooker.plugins.audit import _plugin
from onlooker.testing import RecordingObserver
from running import run

pytestmark = pytest.mark.anyio

HAS_DEV_FULL = os.path.exists("/dev/full")


@onlooker.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@onlooker.tool
def fail(reason: str) -> None:
    """Always fails."""
    raise onlooker.ToolError(reason)


async def program(ctx: onlooker.ExecutionContext) -> int:
    total = 0
    for i in range(5):
        total = await ctx.call("add", a=total, b=i)
    with contextlib.suppress(onlooker.ToolError):
        await ctx.call("fail", reason="nope")
    child = await ctx.spawn(child_program, task_id="child")
    assert child.status == "completed"
    return total


async def child_program(ctx: onlooker.ExecutionContext) -> int:
    return int(await ctx.call("add", a=1, b=2))


TOOLS: list[onlooker.Tool[..., Any]] = [add, fail]


class TestRecording:
    async def test_every_event_reaches_the_trail_in_order(self, tmp_path: Path) -> None:
        recorder = RecordingObserver()
        result, trail = await run(
            program,
            tools=TOOLS,
            extension=audit.plugin(directory=tmp_path, session_id="s1"),
            recorder=recorder,
            trigger="test",
        )
        assert result.status == "completed" and result.value == 10
        assert trail.session_id == "s1"
        assert trail.session_dir == tmp_path / "s1"
        assert trail.path == tmp_path / "s1" / "events.jsonl"
        assert trail.enabled
        assert list(audit.tail(trail.session_dir)) == recorder.events
        report = audit.verify(trail.path)
        assert report.ok and report.records == len(recorder.events) == 18
        stats = trail.statistics()
        assert (stats.written, stats.errors, stats.dropped, stats.pending) == (18, 0, 0, 0)
        assert not trail.error_path.exists()

    @pytest.mark.parametrize("trigger", ["plain", "secret"])
    async def test_keys_holding_lone_surrogates_are_kept_apart(
        self, tmp_path: Path, trigger: str
    ) -> None:
        """Undecodable file names as keys: pydantic's JSON mode writes each as U+FFFD, which
        made the two keys one and lost a value. A secret elsewhere sends the event through
        the field-by-field redaction."""
        files = {
            f"caf{chr(0xDCE9)}.txt": 12,
            f"caf{chr(0xDCE8)}.txt": 13,
        }  # ruff merges the literals
        note = "sk-" + "a" * 40 if trigger == "secret" else "plain"

        @onlooker.tool
        def sizes(files: dict[str, int], note: str) -> dict[str, int]:
            return dict(files)

        async def sized(ctx: onlooker.ExecutionContext) -> object:
            return await ctx.call("sizes", files=files, note=note)

        recorder = RecordingObserver()
        _, trail = await run(
            sized,
            tools=[sizes],
            extension=audit.plugin(directory=tmp_path, session_id="s1"),
            recorder=recorder,
        )
        recorded = {e.kind: e for e in audit.tail(trail.session_dir)}
        started, finished = recorded["ToolCallStarted"], recorded["ToolCallFinished"]
        assert isinstance(started, onlooker.ToolCallStarted)
        assert isinstance(finished, onlooker.ToolCallFinished)
        assert started.args["files"] == files
        assert finished.result == files
        assert audit.verify(trail.path).ok

    async def test_a_lone_surrogate_in_a_key_of_the_arguments_is_recorded_as_given(
        self, tmp_path: Path
    ) -> None:
        """A call's own arguments (refused, so recorded as given) keyed by an undecodable
        file name, no surrogate anywhere else: pydantic wrote the key as three U+FFFD
        without raising, in the trail and in history's events."""
        from onlooker.plugins import history

        @onlooker.tool
        def sizes(files: dict[str, int]) -> int:
            return len(files)

        async def misnamed(ctx: onlooker.ExecutionContext) -> None:
            with contextlib.suppress(onlooker.ToolInputError):
                await ctx.call("sizes", **{"caf\udce9.txt": 12})

        trail_plugin = audit.plugin(directory=tmp_path, session_id="s1")
        store_plugin = history.plugin(f"sqlite:///{tmp_path / 'h.db'}")
        async with onlooker.ExecutionEngine(
            tools=[sizes], plugins=[trail_plugin, store_plugin]
        ) as engine:
            result = await engine.execute(misnamed)
            trail = engine.extension(trail_plugin)
            stored = await engine.extension(store_plugin).events(result.execution_id)
        from_trail = [e for e in audit.tail(trail.session_dir) if e.kind == "ToolCallStarted"]
        from_history = [e for e in stored if e.kind == "ToolCallStarted"]
        for started in (*from_trail, *from_history):
            assert isinstance(started, onlooker.ToolCallStarted)
            assert started.args == {"caf\udce9.txt": 12}
        assert len(from_trail) == len(from_history) == 1
        assert audit.verify(trail.path).ok

    async def test_flush_makes_the_events_so_far_durable(self, tmp_path: Path) -> None:
        plugin = audit.plugin(directory=tmp_path, session_id="s1", fsync="always")
        async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
            await engine.execute(program)
            trail = engine.extension(plugin)
            await trail.flush()
            assert audit.verify(trail.session_dir).records == 18
            assert trail.statistics().pending == 0

    async def test_a_generated_session_id_sorts_by_time(self, tmp_path: Path) -> None:
        _, first = await run(
            program, tools=TOOLS, extension=audit.plugin(directory=tmp_path), trigger="test"
        )
        _, second = await run(
            program, tools=TOOLS, extension=audit.plugin(directory=tmp_path), trigger="test"
        )
        assert first.session_id != second.session_id
        assert first.session_id[:8].isdigit()
        assert sorted(os.listdir(tmp_path)) == sorted([first.session_id, second.session_id])

    async def test_engines_sharing_a_session_share_one_chain(self, tmp_path: Path) -> None:
        plugin = audit.plugin(directory=tmp_path, session_id="s1", max_bytes=3000, keep=100)
        await run(program, tools=TOOLS, extension=plugin, trigger="test")
        await run(program, tools=TOOLS, extension=plugin, trigger="test")
        report = audit.verify(tmp_path / "s1")
        assert report.ok and report.records == 36 and report.segments > 1

    async def test_many_calls_with_backpressure(self, tmp_path: Path) -> None:
        async def busy(ctx: onlooker.ExecutionContext) -> None:
            for i in range(3000):
                await ctx.call("add", a=i, b=1)

        plugin = audit.plugin(directory=tmp_path, session_id="s1", fsync="never")
        async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
            await engine.execute(busy)
            trail = engine.extension(plugin)
        assert trail.statistics().written == 6002
        assert audit.verify(trail.session_dir).ok

    async def test_truncation_of_long_values(self, tmp_path: Path) -> None:
        @onlooker.tool
        def echo(text: str) -> str:
            return text

        async def shout(ctx: onlooker.ExecutionContext) -> None:
            await ctx.call("echo", text="y" * 150)

        plugin = audit.plugin(directory=tmp_path, session_id="s1", max_value_chars=100)
        async with onlooker.ExecutionEngine(tools=[echo], plugins=[plugin]) as engine:
            await engine.execute(shout)
        started = [
            e for e in audit.tail(tmp_path / "s1") if isinstance(e, onlooker.ToolCallStarted)
        ]
        assert started[0].args == {"text": "y" * 100 + "…[truncated 50 chars]"}

    async def test_a_record_of_many_small_values_is_capped(self, tmp_path: Path) -> None:
        from onlooker.plugins.audit._plugin import MAX_RECORD_CHARS

        @onlooker.tool
        def count(items: list[int]) -> int:
            return len(items)

        async def program(ctx: onlooker.ExecutionContext) -> None:
            await ctx.call("count", items=list(range(400_000)))

        plugin = audit.plugin(directory=tmp_path, session_id="s1")
        async with onlooker.ExecutionEngine(tools=[count], plugins=[plugin]) as engine:
            await engine.execute(program)
        lines = (tmp_path / "s1" / "events.jsonl").read_bytes().splitlines()
        longest = max(map(len, lines))
        assert longest < MAX_RECORD_CHARS + 1000  # the event, plus the record's envelope
        (started,) = [
            e for e in audit.tail(tmp_path / "s1") if isinstance(e, onlooker.ToolCallStarted)
        ]
        items = started.args["items"]
        assert isinstance(items, list) and isinstance(items[-1], str)
        assert items[-1].startswith("…[truncated ")
        assert audit.verify(tmp_path / "s1").ok


class TestSettings:
    @pytest.mark.parametrize("session_id", ["..", "a/b", "/abs", ".hidden", "", "x" * 129])
    def test_bad_session_ids_fail_when_the_plugin_is_made(
        self, tmp_path: Path, session_id: str
    ) -> None:
        with pytest.raises(onlooker.AuditError, match="session id"):
            audit.plugin(directory=tmp_path, session_id=session_id)

    def test_bad_options_fail_when_the_plugin_is_made(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="fsync"):
            audit.plugin(directory=tmp_path, fsync="often")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_bytes"):
            audit.plugin(directory=tmp_path, max_bytes=-5)
        assert list(tmp_path.iterdir()) == []

    async def test_the_disable_switch(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("ONLOOKER_AUDIT_DISABLE", "1")
        result, trail = await run(
            program,
            tools=TOOLS,
            extension=audit.plugin(directory=tmp_path / "audit", session_id="s1"),
            trigger="test",
        )
        assert result.status == "completed"
        assert not trail.enabled
        assert trail.statistics() == audit.AuditStatistics(0, 0, 0, 0, 0)
        await trail.flush()
        assert not (tmp_path / "audit").exists()

    async def test_a_custom_redactor(self, tmp_path: Path) -> None:
        redactor = audit.Redactor(extra_rules=[audit.Rule("number", r"\b42\b", hints=["42"])])

        @onlooker.tool
        def say(text: str) -> str:
            return text

        async def speak(ctx: onlooker.ExecutionContext) -> None:
            await ctx.call("say", text="the answer is 42")

        plugin = audit.plugin(directory=tmp_path, session_id="s1", redactor=redactor)
        async with onlooker.ExecutionEngine(tools=[say], plugins=[plugin]) as engine:
            await engine.execute(speak)
        text = (tmp_path / "s1" / "events.jsonl").read_text()
        assert "is 42" not in text and "is [REDACTED:number]" in text


def chattr(flag: str, paths: list[str]) -> None:
    subprocess.run(["chattr", flag, *paths], check=True)


@contextlib.contextmanager
def hung_writes(trail: audit.AuditTrail, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every write of ``trail`` hangs (a stuck network disk) until the block ends, and at
    most 10 s: a regression fails the test rather than hangs it. The thread falls behind
    after 64 waiting events."""
    monkeypatch.setattr(_plugin, "_MAX_PENDING", 64)
    hung = threading.Event()
    unstick = threading.Timer(10, hung.set)
    unstick.start()
    write = trail._writer.write_encoded

    def stuck(bodies: Sequence[bytes]) -> None:
        hung.wait()
        write(bodies)

    monkeypatch.setattr(trail._writer, "write_encoded", stuck)
    try:
        yield
    finally:
        hung.set()
        unstick.cancel()


class TestFailures:
    async def test_a_full_disk_loses_the_execution_nothing(self, tmp_path: Path) -> None:
        if not HAS_DEV_FULL:
            pytest.skip("needs /dev/full")
        session = tmp_path / "s1"
        session.mkdir()
        (session / "events.jsonl").symlink_to("/dev/full")
        plugin = audit.plugin(directory=tmp_path, session_id="s1")
        async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
            result = await engine.execute(program)
            trail = engine.extension(plugin)
            await trail.flush()
            assert result.status == "completed" and result.value == 10
            stats = trail.statistics()
            assert stats.errors >= 1 and stats.written == 0 and stats.pending == 18
            problem = json.loads(trail.error_path.read_text().splitlines()[0])
            assert "No space left on device" in problem["message"]

            (session / "events.jsonl").unlink()  # space again: writing resumes
            second = await engine.execute(program)
            await trail.flush()
            assert second.status == "completed"
            assert trail.statistics().written == 36 and trail.statistics().pending == 0
        report = audit.verify(session)
        assert report.ok and report.records == 36 + 1  # and the gap record
        (gap,) = report.notes
        assert gap["kind"] == "gap" and "No space left" in gap["error"] and gap["dropped"] == 0
        assert next(audit.tail(session)).execution_id == result.execution_id

    async def test_a_session_lock_held_for_ever_cannot_hang_the_close(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Another writer of the session (a hung hook process) holds its lock for ever: the
        plugin's writes wait 5 s for it (the CLI hook's wait), then count as refused."""
        from onlooker._shared import lock_file

        monkeypatch.setattr(_plugin, "_LOCK_SECONDS", 0.2)
        (tmp_path / "s1").mkdir()
        held = os.fdopen(os.open(tmp_path / "s1" / ".lock", os.O_RDWR | os.O_CREAT), "r+b")
        lock_file(held.fileno())
        # Let go after 30 s: a close that waits for the lock then ends, late (and fails here).
        release = threading.Timer(30.0, held.close)
        release.start()
        try:
            plugin = audit.plugin(directory=tmp_path, session_id="s1")
            engine = onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin])
            with anyio.fail_after(15):
                async with engine:
                    result = await engine.execute(program)
                    trail = engine.extension(plugin)
        finally:
            release.cancel()
            held.close()
        assert result.status == "completed"
        stats = trail.statistics()
        assert stats.errors >= 1 and stats.written == 0
        assert stats.dropped == 18 and stats.pending == 0  # counted, never lost silently
        assert "stayed taken" in trail.error_path.read_text()

    async def test_an_unwritable_directory_loses_the_execution_nothing(
        self, tmp_path: Path
    ) -> None:
        # Running as root, chmod would not stop us: the session directory's
        # path is taken by a file instead, so nothing can be created in it.
        (tmp_path / "s1").write_text("in the way")
        plugin = audit.plugin(directory=tmp_path, session_id="s1")
        async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
            result = await engine.execute(program)
            trail = engine.extension(plugin)
            await trail.flush()
            assert result.status == "completed"
            assert trail.statistics().errors >= 1 and trail.statistics().written == 0
            fallback = tmp_path / "audit.err"  # beside the log is impossible: one level up
            problem = json.loads(fallback.read_text().splitlines()[0])
            assert problem["session_id"] == "s1" and problem["records"] == 18

            (tmp_path / "s1").unlink()
            await engine.execute(program)
            await trail.flush()
            assert trail.statistics().written == 36
        assert audit.verify(tmp_path / "s1").ok

    async def test_records_still_refused_at_close_are_dropped_with_a_critical_line(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        (tmp_path / "s1").write_text("in the way")  # no session directory can be made
        plugin = audit.plugin(directory=tmp_path, session_id="s1")
        async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
            await engine.execute(program)
        assert engine.extension(plugin).statistics().dropped == 18
        [critical] = [r for r in caplog.records if r.levelno == logging.CRITICAL]
        assert "18 record(s) not written: the trail closed" in critical.getMessage()
        assert str(tmp_path / "s1") in critical.getMessage()

    async def test_a_read_only_directory_is_logged_then_reported_with_a_gap_record(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        if os.geteuid() != 0:
            pytest.skip("needs root for chattr +i (CI runs as root)")
        plugin = audit.plugin(directory=tmp_path / "audit", session_id="s1")
        async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
            trail = engine.extension(plugin)
            await engine.execute(program)
            await trail.flush()
            session = trail.session_dir
            # even root cannot write there: the trail, its lock and both sidecar places
            frozen = [str(p) for p in (tmp_path / "audit", session, trail.path, session / ".lock")]
            chattr("+i", frozen)
            try:
                with caplog.at_level(logging.ERROR, logger="onlooker"):
                    result = await engine.execute(program)
                    await trail.flush()
                assert result.status == "completed"
                stats = trail.statistics()
                assert (stats.written, stats.pending, stats.dropped) == (18, 18, 0)
                (logged,) = [r for r in caplog.records if "cannot write the trail" in r.message]
                assert logged.name == "onlooker.plugins.audit" and "[Errno 1]" in logged.message
                assert not trail.error_path.exists()  # refused too: held until it can be written
            finally:
                chattr("-i", frozen)
            await engine.execute(program)
            await trail.flush()
            assert trail.statistics().written == 54 and trail.statistics().pending == 0
        report = audit.verify(session)
        assert report.ok and report.records == 54 + 1
        (gap,) = report.notes
        assert gap["kind"] == "gap" and "Operation not permitted" in gap["error"]
        problems = [json.loads(line) for line in trail.error_path.read_text().splitlines()]
        assert problems and all(problem["delayed"] for problem in problems)
        assert "Operation not permitted" in problems[0]["message"]

    async def test_removed_session_files_are_noticed_said_and_noted(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A cleanup job removes the session's directory mid-run: the trail goes on in new
        files, chained to the last record written, and says so three ways (a WARNING, the
        counter, audit.err) and in the trail itself, so verify can tell what happened."""
        import shutil

        plugin = audit.plugin(directory=tmp_path / "audit", session_id="s1")
        async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
            trail = engine.extension(plugin)
            await engine.execute(program)
            await trail.flush()
            before = trail.statistics().written
            shutil.rmtree(trail.session_dir)
            with caplog.at_level(logging.WARNING, logger="onlooker.plugins.audit"):
                result = await engine.execute(program)
                await trail.flush()
        assert result.status == "completed"
        assert trail.statistics().reopened == 1
        assert "the session's files were removed" in caplog.text
        (problem,) = [json.loads(line) for line in trail.error_path.read_text().splitlines()]
        assert problem["after_seq"] == before - 1
        first = json.loads(trail.path.read_text().splitlines()[0])
        assert first["seq"] == before
        assert first["note"] == {"kind": "reopened", "files_removed_after_seq": before - 1}
        report = audit.verify(trail.session_dir)
        assert not report.ok and report.reason == "head_truncated"
        assert "found the session's files removed" in report.detail

    async def test_a_hung_disk_never_freezes_the_program(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """A write that hangs (a stuck network disk) must not hold the emitter, and the
        event loop with it, beyond a short stall: the events wait in memory instead."""
        monkeypatch.setattr(_plugin, "_STALL_SECONDS", 0.1)
        plugin = audit.plugin(directory=tmp_path / "audit", session_id="s1")
        async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
            trail = engine.extension(plugin)
            with (
                hung_writes(trail, monkeypatch),
                caplog.at_level(logging.WARNING, logger="onlooker.plugins.audit"),
                anyio.fail_after(5),  # frozen, the loop could not even run this
            ):
                results = [await engine.execute(program) for _ in range(10)]
        assert {result.status for result in results} == {"completed"}
        assert "they wait in memory and the program goes on" in caplog.text
        stats = trail.statistics()
        assert (stats.written, stats.dropped, stats.pending) == (180, 0, 0)

    async def test_a_hung_disk_keeps_a_bounded_backlog(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """While the write hung, every event waited in memory, without bound. Past the
        100,000 records a refusing disk keeps, the oldest are dropped, counted, reported."""
        monkeypatch.setattr(_plugin, "_MAX_RETRY", 500)
        monkeypatch.setattr(_plugin, "_STALL_SECONDS", 0.05)
        plugin = audit.plugin(directory=tmp_path / "audit", session_id="s1")
        async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
            trail = engine.extension(plugin)
            most = 0
            with hung_writes(trail, monkeypatch):
                for _ in range(100):  # 1,800 events
                    await engine.execute(program)
                    most = max(most, trail.statistics().pending)
        stats = trail.statistics()
        assert most <= 500 + 64 + 100  # the bound, a limit of slack, the few the thread holds
        assert stats.dropped > 0 and stats.written + stats.dropped == 1_800
        assert "while the trail took no writes" in trail.error_path.read_text()
        assert audit.verify(trail.session_dir).ok

    async def test_records_still_refused_at_close_are_counted_as_dropped(
        self, tmp_path: Path
    ) -> None:
        (tmp_path / "s1").mkdir()
        (tmp_path / "s1" / "events.jsonl").mkdir()  # the live file can never be opened
        result, trail = await run(
            program,
            tools=TOOLS,
            extension=audit.plugin(directory=tmp_path, session_id="s1"),
            trigger="test",
        )
        assert result.status == "completed"
        stats = trail.statistics()
        assert stats.dropped == 18 and stats.written == 0 and stats.pending == 0
        problems = [json.loads(line) for line in trail.error_path.read_text().splitlines()]
        assert problems[-1]["records"] == 18 and "closed" in problems[-1]["message"]


class Store:
    """A tiny history store: idempotent by event id, as the history plugin's is."""

    def __init__(self) -> None:
        self.events: dict[str, onlooker.ExecutionEvent] = {}
        self.calls = 0

    async def write_events(self, events: Sequence[onlooker.ExecutionEvent]) -> int:
        self.calls += 1
        new = [e for e in events if e.event_id not in self.events]
        self.events.update((e.event_id, e) for e in new)
        return len(new)


class TestReplay:
    async def test_replay_twice_equals_replay_once(self, tmp_path: Path) -> None:
        recorder = RecordingObserver()
        _, trail = await run(
            program,
            tools=TOOLS,
            extension=audit.plugin(directory=tmp_path, session_id="s1"),
            recorder=recorder,
            trigger="test",
        )
        store = Store()
        assert await audit.replay(trail.session_dir, store, batch_size=7) == 18
        once = dict(store.events)
        assert await audit.replay(trail.session_dir, store) == 0
        assert store.events == once
        assert list(once.values()) == recorder.events
        assert store.calls == 4  # 7 + 7 + 4, then one batch

    async def test_replay_skips_a_torn_tail(self, tmp_path: Path) -> None:
        _, trail = await run(
            program,
            tools=TOOLS,
            extension=audit.plugin(directory=tmp_path, session_id="s1"),
            trigger="test",
        )
        trail.path.write_bytes(trail.path.read_bytes() + b'{"v":1,"seq":18,"at":"2025')
        store = Store()
        assert await audit.replay(trail.session_dir, store) == 18

    async def test_replay_refuses_a_corrupt_line(self, tmp_path: Path) -> None:
        _, trail = await run(
            program,
            tools=TOOLS,
            extension=audit.plugin(directory=tmp_path, session_id="s1"),
            trigger="test",
        )
        lines = trail.path.read_bytes().splitlines(keepends=True)
        lines[3] = b"garbage\n"
        trail.path.write_bytes(b"".join(lines))
        store = Store()
        with pytest.raises(onlooker.AuditError, match=r"events.jsonl:4"):
            await audit.replay(trail.session_dir, store)
        assert [e.seq for e in store.events.values()] == [0, 1, 2]  # what came before it

    async def test_replay_writes_the_events_before_an_invalid_one(self, tmp_path: Path) -> None:
        _, trail = await run(
            program,
            tools=TOOLS,
            extension=audit.plugin(directory=tmp_path, session_id="s1"),
            trigger="test",
        )
        lines = trail.path.read_bytes().splitlines(keepends=True)
        lines[2] = lines[2].replace(b'"seq":2', b'"seq":-2')  # a record whose event is invalid
        trail.path.write_bytes(b"".join(lines))
        store = Store()
        with pytest.raises(onlooker.AuditError, match=r"events.jsonl:3: the recorded event"):
            await audit.replay(trail.session_dir, store)
        assert [e.seq for e in store.events.values()] == [0, 1]

    async def test_replay_into_a_sqlite_history_store(self, tmp_path: Path) -> None:
        history = pytest.importorskip("onlooker.plugins.history")
        recorder = RecordingObserver()
        result, trail = await run(
            program,
            tools=TOOLS,
            extension=audit.plugin(directory=tmp_path, session_id="s1"),
            recorder=recorder,
            trigger="test",
        )
        url = f"sqlite:///{tmp_path / 'history.db'}"
        async with history.open(url) as store:
            assert await audit.replay(trail.session_dir, store) == 18
            assert await audit.replay(trail.session_dir, store) == 0
            stored = await store.events(result.execution_id)
        mine = [e for e in recorder.events if e.execution_id == result.execution_id]
        assert list(stored) == mine


class TestTail:
    def test_follow_reads_new_records_across_a_rotation(self, tmp_path: Path) -> None:
        from test_audit_chain import tool_events

        writer = audit.TrailWriter(tmp_path, "s1", max_bytes=1200, keep=100)
        events = tool_events(6)
        writer.write(events[:2])
        follower = audit.tail(tmp_path / "s1", follow=True, poll_interval=0.01)
        try:
            assert [next(follower).event_id for _ in range(2)] == [
                e["event_id"] for e in events[:2]
            ]
            for event in events[2:]:  # rotates on the way
                writer.write([event])
            assert writer.statistics().rotations >= 1
            assert [next(follower).event_id for _ in events[2:]] == [
                e["event_id"] for e in events[2:]
            ]
        finally:
            follower.close()
            writer.close()

    def test_tail_names_a_missing_trail(self, tmp_path: Path) -> None:
        with pytest.raises(onlooker.AuditError, match="no such audit trail"):
            list(audit.tail(tmp_path / "nope"))
