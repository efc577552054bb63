"""Which audit sessions mention an execution, and each session's ``audit.verify`` verdict.

An audit directory holds one trail per session (``<dir>/<session>/events*.jsonl``)
and nothing in history says which session recorded an execution, so the
index reads the trails for execution ids. It reads each file once and then
only what was appended since (a live trail grows while the UI is open);
a file that was replaced or shrank is read again. Verdicts are cached
until a segment of the session changes. Every method blocks: the app runs
them in a worker thread.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from onlooker import AuditError
from onlooker.plugins import audit
from onlooker.plugins.history._rows import as_stored, no_surrogate

__all__ = ["AuditIndex", "SessionVerdict"]

_SEGMENT: Final = re.compile(r"events(?:\.[1-9][0-9]*)?\.jsonl")
# The recorded event's own "execution_id", right after its id: not one a tool's
# arguments or result hold, nor "parent_execution_id".
_EXECUTION_ID: Final = re.compile(
    rb'"event"\s*:\s*\{\s*(?:"kind"\s*:\s*"\w+"\s*,\s*)?'  # the hook writes its kind first
    rb'"event_id"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*"execution_id"\s*:\s*("(?:[^"\\]|\\.)*")'
)
_BAD_LINE_CHARS: Final = 2000
_RESCAN_SECONDS: Final = 1.0


@dataclass(frozen=True, slots=True)
class SessionVerdict:
    """A session's trail and what ``audit.verify`` said of it."""

    session: str
    path: Path
    report: audit.VerifyReport | None
    """``None`` when the trail could not be read at all (see ``problem``)."""
    problem: str = ""
    bad_line: str | None = None
    """The text of the first bad line (cut to 2,000 characters), when there is one."""

    @property
    def verdict(self) -> str:
        """``intact``, ``torn tail``, ``tampered`` or ``unreadable``."""
        if self.report is None:
            return "unreadable"
        if self.report.ok:
            return "intact"
        return "torn tail" if self.report.reason == "torn_tail" else "tampered"


@dataclass(slots=True)
class _File:
    identity: tuple[int, int]
    size: int
    mtime_ns: int
    offset: int  # bytes read up to the last complete line
    ids: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)  # the ids as any history spells them


def _key(execution_id: str) -> str:
    """One spelling of an id for every history: a lone surrogate and a NUL as U+FFFD (as
    PostgreSQL stores them), so a trail matches whichever spelling a page was opened by."""
    return as_stored(execution_id, "postgresql")


class AuditIndex:
    """The sessions of one audit directory, searchable by execution id."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._files: dict[Path, _File] = {}
        self._verdicts: dict[str, tuple[tuple[tuple[str, int, int], ...], SessionVerdict]] = {}
        self._scanned_at: float | None = None

    def sessions(self) -> list[str]:
        """Every session that has a trail, sorted by name (so by time, for generated ids)."""
        try:
            entries = list(self.directory.iterdir())
        except OSError:
            return []
        return sorted(entry.name for entry in entries if entry.is_dir() and any(_segments(entry)))

    def sessions_of(self, execution_id: str) -> list[str]:
        """The sessions whose trails hold an event of ``execution_id``."""
        with self._lock:
            self._refresh()
            key = _key(execution_id)
            found = {path.parent.name for path, entry in self._files.items() if key in entry.keys}
        return sorted(found)

    def executions_of(self, session: str) -> list[str]:
        """The execution ids a session's trail mentions, sorted."""
        with self._lock:
            self._refresh()
            ids: set[str] = set()
            for path, entry in self._files.items():
                if path.parent.name == session:
                    ids |= entry.ids
        return sorted(ids)

    def verdict(self, session: str) -> SessionVerdict:
        """``audit.verify`` of the session's trail (cached until one of its files changes)."""
        path = self.directory / session
        signature = tuple(
            (segment.name, stat.st_size, stat.st_mtime_ns)
            for segment in _segments(path)
            if (stat := _stat(segment)) is not None
        )
        with self._lock:
            cached = self._verdicts.get(session)
            if cached is not None and cached[0] == signature:
                return cached[1]
        result = _verify(session, path)
        with self._lock:
            self._verdicts[session] = (signature, result)
        return result

    def _refresh(self) -> None:
        now = time.monotonic()
        if self._scanned_at is not None and now - self._scanned_at < _RESCAN_SECONDS:
            return
        self._scanned_at = now
        seen: set[Path] = set()
        for session in self.sessions():
            for segment in _segments(self.directory / session):
                seen.add(segment)
                self._scan(segment)
        for gone in set(self._files) - seen:
            del self._files[gone]

    def _scan(self, path: Path) -> None:
        stat = _stat(path)
        if stat is None:
            return
        identity = (stat.st_dev, stat.st_ino)
        entry = self._files.get(path)
        if entry is not None and entry.identity == identity and stat.st_size >= entry.size:
            if stat.st_size == entry.size and stat.st_mtime_ns == entry.mtime_ns:
                return
        else:  # new, replaced or cut short: read from the start
            entry = _File(identity, 0, 0, 0)
            self._files[path] = entry
        try:
            with open(path, "rb") as handle:
                handle.seek(entry.offset)
                data = handle.read()
        except OSError:
            return
        complete = data.rfind(b"\n") + 1  # a line being written is read next time
        for match in _EXECUTION_ID.finditer(data, 0, complete):
            try:
                value = json.loads(match.group(1))
            except ValueError:
                continue
            if isinstance(value, str):
                entry.ids.add(no_surrogate(value))  # as history names the execution
                entry.keys.add(_key(value))
        entry.offset += complete
        entry.size = stat.st_size
        entry.mtime_ns = stat.st_mtime_ns


def _segments(session_dir: Path) -> list[Path]:
    try:
        return sorted(
            entry
            for entry in session_dir.iterdir()
            if _SEGMENT.fullmatch(entry.name) and entry.is_file()
        )
    except OSError:
        return []


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def _verify(session: str, path: Path) -> SessionVerdict:
    try:
        report = audit.verify(path)
    except AuditError as exc:
        return SessionVerdict(session, path, None, problem=str(exc))
    bad_line = None
    if report.first_bad is not None:
        bad_line = _read_line(report.first_bad.file, report.first_bad.line)
    return SessionVerdict(session, path, report, bad_line=bad_line)


def _read_line(path: Path, number: int) -> str | None:
    try:
        with open(path, "rb") as handle:
            for index, raw in enumerate(handle, 1):
                if index == number:
                    text = raw.rstrip(b"\n")[:_BAD_LINE_CHARS].decode("utf-8", "replace")
                    return text + ("…" if len(raw.rstrip(b"\n")) > _BAD_LINE_CHARS else "")
    except OSError:
        return None
    return None
