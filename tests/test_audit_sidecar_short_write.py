"""``audit.err`` on a disk that fills in the middle of a line."""

from __future__ import annotations

import errno
import json
import os
import types
from pathlib import Path

import pytest

from onlooker.plugins.audit import TrailWriter, _sidecar


def _full_after(room: int) -> types.SimpleNamespace:
    """``os`` whose ``write`` writes ``room`` more bytes, then fails as a full disk does."""
    left = [room]

    def write(fd: int, data: bytes | memoryview) -> int:
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = os.write(fd, bytes(data[: left[0]]))
        left[0] -= n
        return n

    fake = types.SimpleNamespace(
        **{name: getattr(os, name) for name in dir(os) if not name.startswith("__")}
    )
    fake.write = write
    return fake


def test_a_line_the_disk_cut_short_is_neither_kept_nor_counted_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = TrailWriter(str(tmp_path), "s1")
    writer.write([{"kind": "x", "n": 0}])
    assert writer.report("first problem")
    with monkeypatch.context() as patched:
        patched.setattr(_sidecar, "os", _full_after(10))
        assert not writer.report("second problem, on a disk that fills after ten bytes")
    assert writer.report("third problem")
    writer.close()
    lines = Path(writer.error_path).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["first problem", "third problem"]


def test_another_process_report_appended_meanwhile_is_left_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hook processes share audit.err: a report another one appends while ours is cut short
    is not cut back with ours (our torn part stays, before it: no report is lost)."""
    writer = TrailWriter(str(tmp_path), "s1")
    other = b'{"message":"other process"}\n'
    fake = _full_after(10)
    full_disk_write = fake.write

    def write(fd: int, data: bytes | memoryview) -> int:
        wrote: int = full_disk_write(fd, data)
        with open(writer.error_path, "ab") as handle:  # the other process, between our writes
            handle.write(other)
        return wrote

    fake.write = write
    with monkeypatch.context() as patched:
        patched.setattr(_sidecar, "os", fake)
        assert not writer.report("ours, on a disk that fills after ten bytes")
    writer.close()
    assert Path(writer.error_path).read_bytes().endswith(other)
