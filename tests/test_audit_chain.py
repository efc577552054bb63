"""The audit trail's chain: records, verify, tampering, torn tails, rotation, many writers."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import onlooker
from onlooker.plugins import audit
from onlooker.plugins.audit import GENESIS, TrailWriter

SRC = Path(__file__).resolve().parents[1] / "src"


def tool_events(calls: int, execution_id: str = "exec-1") -> list[dict[str, Any]]:
    """The JSON form of an execution with ``calls`` tool calls."""
    at = datetime(2025, 1, 1, tzinfo=UTC)
    envelope: dict[str, Any] = {"execution_id": execution_id, "at": at, "attribution": {}}
    events: list[onlooker.ExecutionEvent] = [
        onlooker.ExecutionStarted(
            **envelope,
            event_id=f"{execution_id}-s",
            seq=0,
            program="p",
            trigger=onlooker.Trigger(kind="cli"),
        )
    ]
    for i in range(calls):
        events.append(
            onlooker.ToolCallStarted(
                **envelope,
                event_id=f"{execution_id}-{i}a",
                seq=2 * i + 1,
                tool_call_id=f"c{i}",
                tool="add",
                args={"a": i, "b": 1},
            )
        )
        events.append(
            onlooker.ToolCallFinished(
                **envelope,
                event_id=f"{execution_id}-{i}b",
                seq=2 * i + 2,
                tool_call_id=f"c{i}",
                tool="add",
                status="completed",
                result=i + 1,
                duration_ms=0.5,
            )
        )
    events.append(
        onlooker.ExecutionFinished(
            **envelope,
            event_id=f"{execution_id}-f",
            seq=2 * calls + 1,
            status="completed",
            duration_ms=1.0,
        )
    )
    return [event.model_dump(mode="json") for event in events]


def write_trail(directory: Path, events: list[dict[str, Any]], **options: Any) -> Path:
    with TrailWriter(directory, "s1", **options) as writer:
        for event in events:
            writer.write([event])
    return directory / "s1"


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def rehash(record: dict[str, Any]) -> bytes:
    """A record line with a correct hash for its (possibly forged) content."""
    record = {k: v for k, v in record.items() if k != "hash"}
    body = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()
    digest = hashlib.sha256(body).hexdigest()
    return body[:-1] + f',"hash":"{digest}"}}\n'.encode()


class TestRecords:
    def test_a_clean_trail_verifies(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(5))
        report = audit.verify(session)
        assert report.ok and not report.tampered
        assert (report.records, report.segments, report.first_seq, report.last_seq) == (
            12,
            1,
            0,
            11,
        )
        assert report.first_bad is None and report.reason is None
        records = [json.loads(line) for line in lines_of(session / "events.jsonl")]
        assert report.last_hash == records[-1]["hash"]
        assert [r["seq"] for r in records] == list(range(12))
        assert records[0]["prev"] == GENESIS
        for before, after in itertools.pairwise(records):
            assert after["prev"] == before["hash"]
        assert {r["session_id"] for r in records} == {"s1"}
        assert all(r["v"] == 1 for r in records)

    def test_members_and_hash_as_documented(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(1))
        line = lines_of(session / "events.jsonl")[1].rstrip(b"\n")
        record = json.loads(line)
        assert list(record) == ["v", "seq", "at", "session_id", "prev", "event", "hash"]
        without_hash = {k: v for k, v in record.items() if k != "hash"}
        canonical = json.dumps(without_hash, separators=(",", ":"), ensure_ascii=False).encode()
        assert hashlib.sha256(canonical).hexdigest() == record["hash"]
        assert line == canonical[:-1] + f',"hash":"{record["hash"]}"}}'.encode()
        assert record["event"] == tool_events(1)[1]
        assert record["at"].endswith("Z")

    @pytest.mark.skipif(
        shutil.which("jq") is None or shutil.which("sha256sum") is None, reason="needs jq"
    )
    def test_the_shell_recipe_in_the_docs_verifies_by_hand(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(3))
        script = (
            "prev=0000000000000000000000000000000000000000000000000000000000000000\n"
            "while IFS= read -r line; do\n"
            "  want=$(printf '%s' \"$line\" | jq -r .hash)\n"
            '  got=$(printf \'%s\' "$line" | sed -E \'s/,"hash":"[0-9a-f]{64}"}$/}/\' '
            "| tr -d '\\n' | sha256sum | cut -d' ' -f1)\n"
            '  [ "$want" = "$got" ] || { echo "bad hash"; exit 1; }\n'
            '  [ "$(printf \'%s\' "$line" | jq -r .prev)" = "$prev" ] || { echo "bad link"; exit 1; }\n'
            "  prev=$want\n"
            "done < events.jsonl\n"
            "echo intact\n"
        )
        done = subprocess.run(
            ["bash", "-c", script], cwd=session, capture_output=True, text=True, check=False
        )
        assert done.stdout.strip() == "intact", done.stdout + done.stderr

    def test_non_ascii_and_lone_surrogates_round_trip(self, tmp_path: Path) -> None:
        event = tool_events(1)[1]
        event["args"] = {"text": "héllo ✓ 日本", "bad": "x\udcffy"}
        session = write_trail(tmp_path, [event])
        assert audit.verify(session).ok
        (recorded,) = audit.tail(session)
        assert isinstance(recorded, onlooker.ToolCallStarted)
        assert recorded.args == {"text": "héllo ✓ 日本", "bad": "x\udcffy"}

    @pytest.mark.parametrize("fsync", ["never", "batch", "always"])
    def test_every_fsync_mode_writes_the_same_chain(self, tmp_path: Path, fsync: Any) -> None:
        with TrailWriter(tmp_path, "s1", fsync=fsync) as writer:
            writer.write(tool_events(3))
            writer.write(tool_events(2, "exec-2"))
        report = audit.verify(tmp_path / "s1")
        assert report.ok and report.records == 14

    def test_a_second_writer_continues_the_chain(self, tmp_path: Path) -> None:
        write_trail(tmp_path, tool_events(2))
        session = write_trail(tmp_path, tool_events(2, "exec-2"))
        report = audit.verify(session)
        assert report.ok and report.records == 12 and report.last_seq == 11


class TestTampering:
    def trail(self, tmp_path: Path) -> tuple[Path, list[bytes]]:
        session = write_trail(tmp_path, tool_events(4))
        return session / "events.jsonl", lines_of(session / "events.jsonl")

    def check(self, path: Path, reason: str, line: int) -> None:
        report = audit.verify(path.parent)
        assert not report.ok and report.tampered
        assert report.reason == reason, report.detail
        assert report.first_bad == audit.BadLine(path, line)
        if report.segments == 1:
            assert report.records == line - 1
        assert str(report.first_bad) == f"{path}:{line}"

    def test_an_edited_line(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        lines[3] = lines[3].replace(b'"a":1', b'"a":7')
        path.write_bytes(b"".join(lines))
        self.check(path, "hash_mismatch", 4)

    def test_an_edited_line_with_its_hash_recomputed(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        record = json.loads(lines[3])
        record["event"]["args"]["a"] = 7
        lines[3] = rehash(record)
        path.write_bytes(b"".join(lines))
        self.check(path, "broken_link", 5)

    def test_a_deleted_line(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        del lines[2]
        path.write_bytes(b"".join(lines))
        self.check(path, "broken_link", 3)

    def test_an_inserted_copy(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        lines.insert(3, lines[1])
        path.write_bytes(b"".join(lines))
        self.check(path, "broken_link", 4)

    def test_an_inserted_forgery_with_a_valid_hash(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        forged = json.loads(lines[2])
        forged["event"]["tool"] = "rm"
        lines.insert(3, rehash(forged))
        path.write_bytes(b"".join(lines))
        self.check(path, "broken_link", 4)

    def test_reordered_lines(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        lines[2], lines[3] = lines[3], lines[2]
        path.write_bytes(b"".join(lines))
        self.check(path, "broken_link", 3)

    def test_a_forged_first_record(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        first = json.loads(lines[0])
        first["prev"] = "1" * 64
        lines[0] = rehash(first)
        path.write_bytes(b"".join(lines))
        self.check(path, "broken_link", 1)

    def test_a_line_that_is_not_a_record(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        lines.insert(2, b'{"hello": "world"}\n')
        path.write_bytes(b"".join(lines))
        self.check(path, "malformed", 3)

    def test_a_cut_line_in_the_middle_is_tampering_not_a_torn_tail(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        lines[2] = lines[2][:40] + b"\n"
        path.write_bytes(b"".join(lines))
        self.check(path, "malformed", 3)

    def test_another_session_spliced_in(self, tmp_path: Path) -> None:
        path, lines = self.trail(tmp_path)
        record = json.loads(lines[2])
        record["session_id"] = "other"
        lines[2] = rehash(record)
        prev = json.loads(lines[2])["hash"]
        after = json.loads(lines[3])
        after["prev"] = prev
        lines[3] = rehash(after)
        path.write_bytes(b"".join(lines[:4]))
        self.check(path, "session_mismatch", 3)

    def test_a_broken_link_between_segments(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(20), max_bytes=1500, keep=50)
        older = session / "events.1.jsonl"
        lines = lines_of(older)
        older.write_bytes(b"".join(lines[:-1]))  # the newest segment no longer links
        self.check(session / "events.jsonl", "broken_link", 1)

    def test_a_missing_segment(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(20), max_bytes=1500, keep=50)
        (session / "events.2.jsonl").unlink()
        report = audit.verify(session)
        assert report.reason == "missing_segment"
        assert report.first_bad == audit.BadLine(session / "events.1.jsonl", 1)

    def test_a_missing_live_file_is_a_missing_segment(self, tmp_path: Path) -> None:
        """A rotation always leaves a live file: without it, the newest records were removed."""
        session = write_trail(tmp_path, tool_events(20), max_bytes=1500, keep=50)
        (session / "events.jsonl").unlink()
        report = audit.verify(session)
        assert not report.ok and report.reason == "missing_segment"
        assert report.first_bad == audit.BadLine(session / "events.jsonl", 1)
        assert "events.jsonl is missing" in report.detail and report.records > 0


class TestTornTail:
    def test_a_torn_last_line_is_told_apart_and_repaired(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(3))
        live = session / "events.jsonl"
        whole = live.read_bytes()
        extra = TrailWriter(tmp_path / "other", "s1")
        extra.write(tool_events(1, "exec-9")[:1])
        extra.close()
        torn = (tmp_path / "other" / "s1" / "events.jsonl").read_bytes()[:57]
        live.write_bytes(whole + torn)

        report = audit.verify(session)
        assert not report.ok and not report.tampered
        assert report.reason == "torn_tail"
        assert report.first_bad == audit.BadLine(live, 9)
        assert report.records == 8
        assert [e.seq for e in audit.tail(session)] == [e["seq"] for e in tool_events(3)]

        write_trail(tmp_path, tool_events(1, "exec-2"))  # the next writer repairs it
        report = audit.verify(session)
        assert report.ok and report.records == 12
        problems = [json.loads(line) for line in (session / "audit.err").read_text().splitlines()]
        assert problems[0]["error"] == "torn_tail"
        assert problems[0]["text"] == torn.decode()

    def test_a_whole_last_record_missing_only_its_newline_is_kept(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(2))
        live = session / "events.jsonl"
        live.write_bytes(live.read_bytes()[:-1])
        assert audit.verify(session).ok
        write_trail(tmp_path, tool_events(1, "exec-2"))
        report = audit.verify(session)
        assert report.ok and report.records == 10


class TestHeadTruncation:
    """Issue 12, item 7: lines deleted from the head of a trail are found."""

    @pytest.mark.parametrize("deleted", [1, 5])
    def test_a_trail_that_never_rotated_must_start_at_seq_0(
        self, tmp_path: Path, deleted: int
    ) -> None:
        session = write_trail(tmp_path, tool_events(5))
        live = session / "events.jsonl"
        live.write_bytes(b"".join(lines_of(live)[deleted:]))
        for target in (session, live):  # the directory, or the only file given alone
            report = audit.verify(target)
            assert not report.ok and report.tampered
            assert report.reason == "head_truncated"
            assert report.first_bad == audit.BadLine(live, 1)
            assert report.first_seq == deleted
            assert f"starts at seq {deleted}" in report.detail
            assert report.records == 0  # none before the first bad line, the first
            assert f"the {12 - deleted} records kept after them chain" in report.detail

    @pytest.mark.parametrize("later", [b"\n", b"not json\n"])
    def test_a_cut_head_is_the_first_bad_line_even_with_a_later_one(
        self, tmp_path: Path, later: bytes
    ) -> None:
        session = write_trail(tmp_path, tool_events(5))
        live = session / "events.jsonl"
        live.write_bytes(b"".join(lines_of(live)[1:]) + later)
        report = audit.verify(session)
        assert not report.ok and report.reason == "head_truncated"
        assert report.first_bad == audit.BadLine(live, 1) and report.records == 0

    def test_deleting_the_oldest_retained_segment_is_found(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(30), max_bytes=2000, keep=3)
        assert audit.verify(session).ok
        (session / "events.3.jsonl").unlink()
        report = audit.verify(session)
        assert not report.ok and report.reason == "head_truncated"
        assert report.first_bad == audit.BadLine(session / "events.2.jsonl", 1)

    def test_a_rotated_segment_verified_alone_is_not_held_to_seq_0(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(30), max_bytes=2000, keep=100)
        report = audit.verify(session / "events.2.jsonl")
        assert report.ok and report.first_seq is not None and report.first_seq > 0

    def test_notes_are_chained_but_not_events(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(30), max_bytes=2000, keep=1)
        report = audit.verify(session)
        assert report.ok and report.notes
        events = list(audit.tail(session))
        assert len(events) + len(report.notes) == report.records
        notes = [
            record
            for file in report.files
            for record in map(json.loads, lines_of(file))
            if "note" in record
        ]
        assert [record["note"] for record in notes] == list(report.notes)
        assert all("event" not in record for record in notes)

    @pytest.mark.parametrize("max_bytes", [300, 450, 600])
    def test_statistics_count_events_not_notes(self, tmp_path: Path, max_bytes: int) -> None:
        with TrailWriter(tmp_path, "s1", max_bytes=max_bytes, keep=1) as writer:
            writer.write(tool_events(20))  # a rotation (and a note) every record or two
            assert writer.statistics().written == 42
        report = audit.verify(tmp_path / "s1")
        assert report.ok and len(list(audit.tail(tmp_path / "s1"))) + len(report.notes) == (
            report.records
        )


class TestRotation:
    def test_segments_keep_the_chain_and_the_size_cap(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(30), max_bytes=2000, keep=100)
        names = sorted(p.name for p in session.glob("events*.jsonl"))
        assert len(names) > 3
        report = audit.verify(session)
        assert report.ok and report.records == 62 and report.first_seq == 0
        assert report.segments == len(names)
        for segment in session.glob("events*.jsonl"):
            assert segment.stat().st_size <= 2000
        newest_rotated = json.loads(lines_of(session / "events.1.jsonl")[-1])
        first_live = json.loads(lines_of(session / "events.jsonl")[0])
        assert first_live["prev"] == newest_rotated["hash"]
        assert first_live["seq"] == newest_rotated["seq"] + 1

    def test_retention_keeps_the_newest_segments(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(30), max_bytes=2000, keep=2)
        names = sorted(p.name for p in session.glob("events*.jsonl"))
        assert names == ["events.1.jsonl", "events.2.jsonl", "events.jsonl"]
        report = audit.verify(session)
        assert report.ok and report.first_seq is not None and report.first_seq > 0
        # each deletion is proven by a retirement record, chained like the events
        assert report.notes[-1] == {"kind": "retired", "through_seq": report.first_seq - 1}
        assert list(audit.tail(session))[-1].event_id == "exec-1-f"
        seqs = [e["seq"] for e in map(json.loads, lines_of(session / "events.2.jsonl"))]
        assert seqs[0] == report.first_seq

    def test_keep_zero_keeps_only_the_live_file(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(10), max_bytes=1000, keep=0)
        assert [p.name for p in session.glob("events*.jsonl")] == ["events.jsonl"]
        report = audit.verify(session)
        assert report.ok and report.first_seq == report.notes[-1]["through_seq"] + 1
        assert list(audit.tail(session))[-1].event_id == "exec-1-f"

    def test_a_record_larger_than_the_cap_gets_a_segment_of_its_own(self, tmp_path: Path) -> None:
        events = tool_events(2)
        events[1]["args"] = {"blob": "x" * 1500}
        session = write_trail(tmp_path, events, max_bytes=1000, keep=10)
        assert audit.verify(session).ok
        sizes = sorted(len(lines_of(p)) for p in session.glob("events*.jsonl"))
        assert 1 in sizes

    def test_a_rotation_cut_short_by_a_crash_leaves_a_trail_that_verifies(
        self, tmp_path: Path
    ) -> None:
        """Segments are renamed one by one, oldest first: a crash after the first rename
        leaves its old number free. The chain links across it; later rotations go on."""
        session = write_trail(tmp_path, tool_events(20), max_bytes=1500, keep=50)
        oldest = max(int(p.name.split(".")[1]) for p in session.glob("events.*.jsonl"))
        assert oldest >= 3
        os.replace(session / f"events.{oldest}.jsonl", session / f"events.{oldest + 1}.jsonl")
        assert audit.verify(session).ok
        write_trail(tmp_path, tool_events(20, "exec-2"), max_bytes=1500, keep=50)
        report = audit.verify(session)
        assert report.ok and report.first_seq == 0
        assert [e.event_id for e in audit.tail(session)][-1] == "exec-2-f"
        (session / "events.2.jsonl").unlink()  # records lost: still found
        report = audit.verify(session)
        assert (report.reason, report.first_bad) == (
            "missing_segment",
            audit.BadLine(session / "events.1.jsonl", 1),
        )

    def test_a_crash_right_after_the_oldest_segment_is_deleted_is_not_tampering(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The retirement note is written before the deletion: no crash can separate them
        (it followed the deletion, and a crash in between read as a cut head)."""
        session = write_trail(tmp_path, tool_events(10), max_bytes=1500, keep=2)

        class Crash(BaseException):
            pass

        def unlink_then_crash(path: Any) -> None:
            unlink(path)
            raise Crash

        unlink = os.unlink
        monkeypatch.setattr(os, "unlink", unlink_then_crash)  # the module _segments uses
        writer = TrailWriter(tmp_path, "s1", max_bytes=1500, keep=2)
        with pytest.raises(Crash):
            for event in tool_events(10, "exec-2"):
                writer.write([event])
        report = audit.verify(session)
        assert report.ok and report.first_seq is not None and report.first_seq > 0
        assert report.first_seq - 1 in [n["through_seq"] for n in report.notes]

    def test_every_segment_past_keep_is_retired_with_its_note(self, tmp_path: Path) -> None:
        """Also when ``keep`` itself is a free number (a crash mid-rotation) or smaller than
        the one the session was written with."""
        session = write_trail(tmp_path, tool_events(20), max_bytes=1500, keep=50)
        oldest = max(int(p.name.split(".")[1]) for p in session.glob("events.*.jsonl"))
        assert oldest >= 3
        os.replace(session / f"events.{oldest}.jsonl", session / f"events.{oldest + 1}.jsonl")
        with TrailWriter(tmp_path, "s1", max_bytes=1500, keep=oldest) as writer:
            for event in tool_events(5, "exec-2"):
                writer.write([event])
                if writer.statistics().rotations:
                    break  # one rotation: the deletion of events.<oldest + 1> alone
        report = audit.verify(session)
        assert report.ok and report.first_seq is not None and report.first_seq > 0
        write_trail(tmp_path, tool_events(5, "exec-3"), max_bytes=1500, keep=2)
        assert sorted(p.name for p in session.glob("events*.jsonl")) == [
            "events.1.jsonl",
            "events.2.jsonl",
            "events.jsonl",
        ]
        assert audit.verify(session).ok

    def test_a_rotation_renames_only_the_segments_there_are(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Whatever ``keep`` is: it tried a rename for every number up to ``keep``, holding
        the session's lock (``keep=100000`` took seconds per rotation)."""
        renames: list[str] = []
        replace = os.replace

        def counted(source: Any, target: Any) -> None:
            renames.append(str(source))
            replace(source, target)

        monkeypatch.setattr(os, "replace", counted)  # the module _segments uses
        with TrailWriter(tmp_path, "s1", max_bytes=1500, keep=100_000) as writer:
            writer.write(tool_events(20))
            rotations = writer.statistics().rotations
        segments = len(list((tmp_path / "s1").glob("events.*.jsonl")))
        assert segments == rotations > 2
        tails = sum(name.endswith(".tmp") for name in renames)  # the chain tail's own file
        assert len(renames) - tails == sum(range(1, rotations + 1))  # each segment, once a turn
        assert audit.verify(tmp_path / "s1").ok

    def test_rotation_inside_one_batch(self, tmp_path: Path) -> None:
        with TrailWriter(tmp_path, "s1", max_bytes=1500, keep=100) as writer:
            writer.write(tool_events(20))
            assert writer.statistics().rotations > 2
        report = audit.verify(tmp_path / "s1")
        assert report.ok and report.records == 42


class TestReadingDuringARotation:
    """Readers list and open a session's files under the writers' lock, so that a rotation
    half done (the live file renamed, its successor not yet created) is never seen: it made
    ``verify`` report a missing segment, ``tail`` find no trail, and ``tail -f`` follow a
    rotated segment for ever."""

    @staticmethod
    @contextlib.contextmanager
    def rotation_half_done(session: Path) -> Iterator[None]:
        fd = os.open(session / ".lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(session / "events.jsonl", session / "moving")
        try:
            yield
            time.sleep(0.2)  # the reader has reached the lock meanwhile
        finally:
            os.replace(session / "moving", session / "events.jsonl")
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def test_verify_and_tail_wait_for_the_rotation(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(10), max_bytes=1500, keep=3)
        with ThreadPoolExecutor(2) as pool:
            with self.rotation_half_done(session):
                report = pool.submit(audit.verify, session)
                events = pool.submit(lambda: list(audit.tail(session)))
            assert report.result(timeout=30).ok
            assert events.result(timeout=30)[-1].event_id == "exec-1-f"

    def test_tail_follow_started_meanwhile_follows_the_live_file(self, tmp_path: Path) -> None:
        session = write_trail(tmp_path, tool_events(10), max_bytes=1500, keep=3)
        seen: queue.Queue[str] = queue.Queue()

        def follow() -> None:
            for event in audit.tail(session, follow=True, poll_interval=0.01):
                seen.put(event.event_id)
                if event.event_id == "exec-2-f":
                    return

        follower = threading.Thread(target=follow, daemon=True)  # a lost follower never ends
        with self.rotation_half_done(session):
            follower.start()
        write_trail(tmp_path, tool_events(1, "exec-2"), max_bytes=1500, keep=3)
        follower.join(timeout=30)
        assert not follower.is_alive(), "the follower missed the new live file"
        ids = [seen.get_nowait() for _ in range(seen.qsize())]
        assert ids[-4:] == ["exec-2-s", "exec-2-0a", "exec-2-0b", "exec-2-f"]
        assert ids[:-4] == [event["event_id"] for event in tool_events(10)][-len(ids) + 4 :]

    def test_a_trail_of_more_segments_than_open_files_allowed(self, tmp_path: Path) -> None:
        """Readers opened every segment at once under the lock: a trail kept with a large
        ``keep`` failed with "Too many open files" (past 256 segments on macOS's limit)."""
        with TrailWriter(tmp_path, "s1", max_bytes=700, keep=1000) as writer:
            for event in tool_events(150):
                writer.write([event])
        session = tmp_path / "s1"
        assert len(list(session.glob("events*.jsonl"))) > 250
        script = (
            "import resource, sys\n"
            f"sys.path.insert(0, {str(SRC)!r})\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))\n"
            "from onlooker.plugins import audit\n"
            f"report = audit.verify({str(session)!r})\n"
            f"events = list(audit.tail({str(session)!r}))\n"
            "print(report.ok, report.records, len(events))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
        )
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout.split() == ["True", "302", "302"]


WORKER = """
import sys
sys.path.insert(0, {src!r})
from onlooker.plugins.audit import TrailWriter
name, batches = sys.argv[1], int(sys.argv[2])
with TrailWriter({directory!r}, "shared", max_bytes=20000, keep=1000) as writer:
    for i in range(batches):
        writer.write([{{"kind": "note", "writer": name, "n": i, "part": p}} for p in range(3)])
"""


def test_several_processes_append_to_one_session(tmp_path: Path) -> None:
    script = WORKER.format(src=str(SRC), directory=str(tmp_path))
    batches = 150
    procs = [
        subprocess.Popen([sys.executable, "-c", script, f"w{i}", str(batches)]) for i in range(3)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    session = tmp_path / "shared"
    report = audit.verify(session)
    assert report.ok, report
    assert report.records == 3 * batches * 3 and report.first_seq == 0
    seen: dict[str, list[tuple[int, int]]] = {}
    for file in audit.verify(session).files:
        for line in lines_of(file):
            event = json.loads(line)["event"]
            seen.setdefault(event["writer"], []).append((event["n"], event["part"]))
    for name in ("w0", "w1", "w2"):  # each writer's records, whole and in order
        assert seen[name] == [(i, p) for i in range(batches) for p in range(3)]


class TestWriterErrors:
    @pytest.mark.parametrize(
        "session_id",
        ["", ".", "..", ".hidden", "a/b", "../up", "a\\b", "-x", "a b", "x" * 129, "é", None, 7],
    )
    def test_unsafe_session_ids_are_refused(self, tmp_path: Path, session_id: Any) -> None:
        with pytest.raises(onlooker.AuditError, match="session id"):
            TrailWriter(tmp_path, session_id)
        assert list(tmp_path.iterdir()) == []

    @pytest.mark.parametrize("session_id", ["a", "A.b-c_1", "x" * 128, "2025.log"])
    def test_safe_session_ids(self, tmp_path: Path, session_id: str) -> None:
        with TrailWriter(tmp_path, session_id) as writer:
            writer.write(tool_events(1))
        assert writer.session_id == session_id
        assert os.listdir(tmp_path) == [session_id]
        report = audit.verify(tmp_path / session_id)
        assert report.ok and report.records == len(tool_events(1))

    @pytest.mark.parametrize(
        ("option", "value"),
        [
            ("max_bytes", 0),
            ("keep", -1),
            ("fsync", "sometimes"),
            ("max_value_chars", 0),
            ("lock_timeout", -1),
            ("lock_timeout", float("nan")),
        ],
    )
    def test_bad_options(self, tmp_path: Path, option: str, value: Any) -> None:
        with pytest.raises(ValueError, match=option):
            TrailWriter(tmp_path, "s1", **{option: value})

    def test_a_lock_held_by_another_writer_is_waited_for_at_most_lock_timeout(
        self, tmp_path: Path
    ) -> None:
        from onlooker._shared import lock_file

        writer = TrailWriter(tmp_path, "s1", lock_timeout=0.1)
        writer.write(tool_events(1))
        with open(tmp_path / "s1" / ".lock", "a+b") as held:
            lock_file(held.fileno())  # another writer of the session, stuck
            with pytest.raises(audit.AuditWriteError, match=r"stayed taken for 0\.1 s") as caught:
                writer.write(tool_events(1))
        assert caught.value.written == 0
        writer.write(tool_events(1))  # free again: the next write goes through
        writer.close()
        assert audit.verify(tmp_path / "s1").ok

    def test_a_refused_write_raises_reports_and_resumes(self, tmp_path: Path) -> None:
        writer = TrailWriter(tmp_path, "s1")
        (tmp_path / "s1" / "events.jsonl").mkdir(parents=True)  # the live file cannot be opened
        with pytest.raises(audit.AuditWriteError) as caught:
            writer.write(tool_events(1))
        assert caught.value.written == 0
        assert writer.statistics().errors == 1
        problem = json.loads((tmp_path / "s1" / "audit.err").read_text())
        assert problem["records"] == 4 and problem["error"] == "IsADirectoryError"
        (tmp_path / "s1" / "events.jsonl").rmdir()
        writer.write(tool_events(1))
        writer.close()
        assert audit.verify(tmp_path / "s1").ok
        assert writer.statistics().written == 4

    def test_the_disk_full_leaves_no_half_record(self, tmp_path: Path) -> None:
        if not os.path.exists("/dev/full"):
            pytest.skip("needs /dev/full")
        session = write_trail(tmp_path, tool_events(1))
        live = session / "events.jsonl"
        live.rename(session / "saved.jsonl")
        live.symlink_to("/dev/full")
        with TrailWriter(tmp_path, "s1") as writer, pytest.raises(audit.AuditWriteError):
            writer.write(tool_events(1, "exec-2"))
        assert "No space left" in (session / "audit.err").read_text()
        live.unlink()
        (session / "saved.jsonl").rename(live)
        write_trail(tmp_path, tool_events(1, "exec-3"))
        report = audit.verify(session)
        assert report.ok and report.records == 8

    def test_a_refused_report_is_written_late_with_a_gap_record(self, tmp_path: Path) -> None:
        writer = TrailWriter(tmp_path, "s1")
        writer.write(tool_events(1))
        session = tmp_path / "s1"
        (session / "events.jsonl").rename(session / "saved.jsonl")
        (session / "events.jsonl").mkdir()  # the trail refuses...
        (session / "audit.err").mkdir()  # ...and so do both sidecars
        (tmp_path / "audit.err").mkdir()
        with pytest.raises(audit.AuditWriteError):
            writer.write(tool_events(1, "exec-2"))
        assert writer.failing
        for path in (session / "events.jsonl", session / "audit.err", tmp_path / "audit.err"):
            path.rmdir()
        (session / "saved.jsonl").rename(session / "events.jsonl")
        writer.write(tool_events(1, "exec-2"))
        writer.close()
        assert [writer.failing] == [False]  # (a list: mypy keeps the narrowing above)
        report = audit.verify(session)
        assert report.ok and report.records == 8 + 1
        (gap,) = report.notes
        assert gap["kind"] == "gap" and gap["attempts"] == 1
        assert "IsADirectoryError" in gap["error"] and gap["since"] <= gap["until"]
        (late,) = map(json.loads, (session / "audit.err").read_text().splitlines())
        assert late["delayed"] is True and late["records"] == 4

    def test_writing_after_close_is_an_error(self, tmp_path: Path) -> None:
        writer = TrailWriter(tmp_path, "s1")
        writer.close()
        with pytest.raises(onlooker.AuditError, match="closed"):
            writer.write(tool_events(1))

    def test_verify_needs_a_trail(self, tmp_path: Path) -> None:
        with pytest.raises(onlooker.AuditError, match="no such audit trail"):
            audit.verify(tmp_path / "missing")
        with pytest.raises(onlooker.AuditError, match="no audit trail"):
            audit.verify(tmp_path)
