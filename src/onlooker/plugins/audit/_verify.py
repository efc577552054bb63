"""verify(): prove a trail whole, or name its first bad line. Standard library only."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal, TypeAlias, final

from onlooker._errors import AuditError
from onlooker._shared import json_loads, lock_file_within, unlock_file

from ._record import GENESIS, LIVE_NAME, RECORD_VERSION

__all__ = [
    "BadLine",
    "Reason",
    "Segment",
    "VerifyReport",
    "is_note",
    "iter_records",
    "opened_segments",
    "records_in",
    "segments_of",
    "verify",
]

Reason: TypeAlias = Literal[
    "hash_mismatch",
    "broken_link",
    "seq_gap",
    "malformed",
    "unsupported_version",
    "session_mismatch",
    "missing_segment",
    "head_truncated",
    "torn_tail",
]
"""Why :func:`verify` rejected a trail (see docs/audit.md)."""

_SEGMENT: Final = re.compile(r"events(?:\.([1-9][0-9]*))?\.jsonl")
_LOCK_NAME: Final = ".lock"  # the writers' session lock (``_segments.py``)
_LOCK_WAIT: Final = 10.0  # seconds; past it, a reader lists the files without the lock
_HEX64: Final = re.compile(rb"[0-9a-f]{64}")
_SUFFIX: Final = len(b',"hash":"') + 64 + len(b'"}')
_FIELDS: Final = ("v", "seq", "at", "session_id", "prev", "hash")


@final
@dataclass(frozen=True, slots=True)
class BadLine:
    """Where a trail first goes wrong: a file and a 1-based line number."""

    file: Path
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@final
@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What :func:`verify` found.

    ``ok`` is true when every record is intact and chained to the one
    before. Otherwise ``first_bad`` names the first bad line and ``reason``
    says why; ``reason == "torn_tail"`` is a last line cut short by a crash
    (not tampering: every record before it is intact). ``records`` counts
    the intact records read before the first bad line (all of them when
    ``ok``). ``last_seq`` and ``last_hash`` are those of the last intact
    record: keep them elsewhere to detect later removal of the newest
    records; ``first_seq`` above 0 means older segments were rotated away.
    """

    ok: bool
    records: int
    segments: int
    first_bad: BadLine | None = None
    reason: Reason | None = None
    detail: str = ""
    first_seq: int | None = None
    last_seq: int | None = None
    last_hash: str | None = None
    files: tuple[Path, ...] = ()
    notes: tuple[dict[str, Any], ...] = ()

    @property
    def tampered(self) -> bool:
        """Whether the trail was altered (bad for any reason but a torn last line)."""
        return not self.ok and self.reason != "torn_tail"


def segments_of(path: str | os.PathLike[str]) -> list[Path]:
    """The segment files of a trail, oldest first.

    ``path`` is a session directory (every ``events*.jsonl`` in it) or one
    segment file (just that file). Raises :class:`onlooker.AuditError` when
    there is no trail there, or the directory cannot be read.
    """
    target = Path(path)
    if target.is_dir():
        numbered: list[tuple[int, Path]] = []
        try:
            entries = list(target.iterdir())
        except OSError as exc:
            raise AuditError(f"cannot read audit trail {str(target)!r}: {exc}") from exc
        for entry in entries:
            match = _SEGMENT.fullmatch(entry.name)
            if match and entry.is_file():
                numbered.append((int(match.group(1) or 0), entry))
        if not numbered:
            raise AuditError(f"no audit trail (events*.jsonl) in {str(target)!r}")
        return [entry for _, entry in sorted(numbered, key=lambda item: -item[0])]
    if target.is_file():
        return [target]
    raise AuditError(f"no such audit trail: {str(target)!r}")


_MAX_OPEN: Final = 128
"""Segments a reader opens at once under the lock; older ones (a trail kept with a large
``keep``) are opened as they are read, so that no trail runs out of file descriptors."""


@final
@dataclass(frozen=True, slots=True)
class Segment:
    """One segment of a trail as a reader listed it: its file and, unless it was past
    :data:`_MAX_OPEN`, its handle, opened at the listing."""

    file: Path
    handle: BinaryIO | None

    def reading(self) -> contextlib.AbstractContextManager[BinaryIO]:
        """The segment open for reading (the handle opened at the listing, or one now)."""
        return contextlib.nullcontext(self.handle) if self.handle is not None else _open(self.file)

    def inode(self) -> int | None:
        """The segment's inode (``None`` if it is gone)."""
        try:
            return os.fstat(self.handle.fileno()).st_ino if self.handle else self.file.stat().st_ino
        except OSError:
            return None


@contextlib.contextmanager
def opened_segments(path: str | os.PathLike[str]) -> Iterator[list[Segment]]:
    """The segments of a trail (:func:`segments_of`), open for reading, closed after.

    They are listed and opened under the session's lock, so that no
    writer's rotation renames, deletes or re-creates a file in between
    (a reader would otherwise miss a segment, fail on one just deleted, or
    find no trail at all while the live file is being replaced). Read-only:
    without a lock file (a trail no writer of this version wrote, or one
    the reader may not open) the files are listed as they are. Past
    :data:`_MAX_OPEN` segments, the oldest are opened when read.
    """
    target = Path(path)
    with contextlib.ExitStack() as stack:
        opened: list[Segment] = []
        with _session_quiet(target if target.is_dir() else target.parent):
            files = segments_of(target)
            later = len(files) - _MAX_OPEN
            for index, file in enumerate(files):
                handle = None if index < later else stack.enter_context(_open(file))
                opened.append(Segment(file, handle))
        yield opened


def _open(file: Path) -> BinaryIO:
    try:
        return open(file, "rb")
    except OSError as exc:
        raise AuditError(f"cannot read audit trail {str(file)!r}: {exc}") from exc


@contextlib.contextmanager
def _session_quiet(session_dir: Path) -> Iterator[None]:
    """Holds the writers' session lock, if there is one this process can open, for a while."""
    try:
        fd = os.open(session_dir / _LOCK_NAME, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        locked = lock_file_within(fd, _LOCK_WAIT)  # a writer stuck with it: read anyway
        try:
            yield
        finally:
            if locked:
                unlock_file(fd)
    finally:
        os.close(fd)


def _segment_number(path: Path) -> int | None:
    match = _SEGMENT.fullmatch(path.name)
    return None if match is None else int(match.group(1) or 0)


class _Bad(Exception):
    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason: Reason = reason
        self.detail = detail


def _parse(raw: bytes) -> dict[str, Any]:
    """One record line (without its newline), structure and own hash checked."""
    try:
        record = json_loads(raw)
    except ValueError as exc:
        raise _Bad("malformed", f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise _Bad("malformed", "not a JSON object")
    missing = [name for name in _FIELDS if name not in record]
    if ("event" in record) == ("note" in record):
        missing.append("event")  # exactly one of them
    if missing:
        raise _Bad("malformed", f"missing {', '.join(missing)}")
    if "note" in record and not isinstance(record["note"], dict):
        raise _Bad("malformed", "note is not a JSON object")
    if record["v"] != RECORD_VERSION:
        raise _Bad("unsupported_version", f"record version {record['v']!r} is not {RECORD_VERSION}")
    seq, digest = record["seq"], record["hash"]
    if type(seq) is not int or seq < 0:
        raise _Bad("malformed", f"seq {seq!r} is not a non-negative integer")
    if not isinstance(digest, str) or not raw.endswith(f',"hash":"{digest}"}}'.encode()):
        raise _Bad("malformed", "hash is not the record's last member")
    if not _HEX64.fullmatch(digest.encode()):
        raise _Bad("malformed", "hash is not 64 lowercase hex digits")
    if hashlib.sha256(raw[:-_SUFFIX] + b"}").hexdigest() != digest:
        raise _Bad("hash_mismatch", "the line's content does not match its hash (edited)")
    return record


def verify(path: str | os.PathLike[str]) -> VerifyReport:
    """Check a trail: every line a record, its hash right, chained to the one before.

    ``path`` is a session directory (every segment, oldest first, with the
    chain checked across segments) or one ``events*.jsonl`` file. Raises
    :class:`onlooker.AuditError` if there is no trail there; a damaged
    trail is a report with ``ok=False``, never an exception.

    A trail must start at seq 0 unless a retirement note in it says the
    records before its first one were deleted by rotation: lines deleted
    from the head of a trail are ``head_truncated``. One file given alone is
    held to this only when it is the trail's only segment.
    """
    with opened_segments(path) as opened:
        return _verify(path, opened)


def _verify(path: str | os.PathLike[str], opened: list[Segment]) -> VerifyReport:
    files = [segment.file for segment in opened]
    from_genesis = Path(path).is_dir() or _only_segment(files[0])  # held to seq 0
    state = _Chain()
    numbers = [_segment_number(file) for file in files]
    for index, segment in enumerate(opened):
        file, last_file = segment.file, index == len(files) - 1
        # A number missing between two segments: records lost, unless the chain links across
        # it (a rotation cut short by a crash renamed the older segments, not the newer ones).
        missing: str | None = None
        if index and numbers[index - 1] is not None and numbers[index] is not None:
            expected = (numbers[index - 1] or 0) - 1
            if numbers[index] != expected:
                missing = LIVE_NAME if expected == 0 else f"events.{expected}.jsonl"
        try:
            with segment.reading() as handle:
                for line_no, raw in enumerate(handle, 1):
                    whole = raw.endswith(b"\n")
                    body = raw[:-1] if whole else raw
                    try:
                        record = _parse(body)
                        if missing is not None and line_no == 1 and not _links(state, record):
                            detail = f"{missing} is missing"
                            return state.report(files, BadLine(file, 1), "missing_segment", detail)
                        state.link(record)
                    except _Bad as bad:
                        head = _head_truncated(state, files, from_genesis)
                        if head is not None:  # the first bad line is the trail's first
                            return head
                        if not whole and last_file and bad.reason == "malformed":
                            return state.report(
                                files,
                                BadLine(file, line_no),
                                "torn_tail",
                                "the last line is cut short (a crash mid-write); "
                                "every record before it is intact",
                            )
                        return state.report(files, BadLine(file, line_no), bad.reason, bad.detail)
        except OSError as exc:
            raise AuditError(f"cannot read audit trail {str(file)!r}: {exc}") from exc
    head = _head_truncated(state, files, from_genesis)
    if head is not None:
        return head
    if Path(path).is_dir() and numbers[-1] != 0:  # a writer always leaves a live file
        live = files[-1].with_name(LIVE_NAME)
        detail = f"{LIVE_NAME} is missing: the newest records were removed"
        return state.report(files, BadLine(live, 1), "missing_segment", detail)
    return state.report(files, None, None, "")


def _head_truncated(state: _Chain, files: list[Path], from_genesis: bool) -> VerifyReport | None:
    """The report of a trail whose head was cut (by what was read so far), else ``None``."""
    first = state.first_seq
    if from_genesis and first is not None and first > 0 and first - 1 not in state.retired:
        detail = (
            f"the trail starts at seq {first}: its writer found the session's files removed "
            f"and went on in new ones (a note says so); records 0..{first - 1} are lost"
            if first - 1 in state.removed
            else f"the trail starts at seq {first} and no retirement record says records "
            f"0..{first - 1} were rotated away: lines were deleted from its head"
        )
        detail += f" (the {state.records} records kept after them chain)"
        # Nothing comes before the first bad line, the trail's first: no record counts.
        return state.report(files, BadLine(files[0], 1), "head_truncated", detail, records=0)
    return None


def _links(state: _Chain, record: dict[str, Any]) -> bool:
    """Whether ``record`` follows the last one read (its seq next, its prev that one's hash)."""
    if state.hash is None:
        return True  # nothing read before it: the head's rules apply
    return bool(record["seq"] == state.seq + 1 and record["prev"] == state.hash)


def _only_segment(file: Path) -> bool:
    siblings = [e for e in file.parent.iterdir() if _SEGMENT.fullmatch(e.name) and e.is_file()]
    return len(siblings) == 1 and siblings[0].samefile(file)


class _Chain:
    """The running state of a verification."""

    def __init__(self) -> None:
        self.records = 0
        self.session: str | None = None
        self.first_seq: int | None = None
        self.seq = -1
        self.hash: str | None = None
        self.notes: list[dict[str, Any]] = []
        self.retired: set[int] = set()
        self.removed: set[int] = set()  # the last seq before files the writer found removed

    def link(self, record: dict[str, Any]) -> None:
        seq, prev = record["seq"], record["prev"]
        if self.hash is None:
            if seq == 0 and prev != GENESIS:
                raise _Bad("broken_link", "the first record's prev is not the genesis value")
            self.session = record["session_id"]
            self.first_seq = seq
        else:
            if prev != self.hash:
                raise _Bad(
                    "broken_link",
                    "prev does not match the previous record's hash "
                    "(a line was deleted, inserted or moved)",
                )
            if seq != self.seq + 1:
                raise _Bad("seq_gap", f"seq {seq} follows {self.seq}")
            if record["session_id"] != self.session:
                raise _Bad(
                    "session_mismatch",
                    f"session_id {record['session_id']!r} is not {self.session!r}",
                )
        self.seq, self.hash = seq, record["hash"]
        self.records += 1
        note = record.get("note")
        if note is not None:
            self.notes.append(note)
            through = note.get("through_seq")
            if note.get("kind") == "retired" and type(through) is int:
                self.retired.add(through)
            removed = note.get("files_removed_after_seq")
            if type(removed) is int:
                self.removed.add(removed)

    def report(
        self,
        files: list[Path],
        bad: BadLine | None,
        reason: Reason | None,
        detail: str,
        *,
        records: int | None = None,
    ) -> VerifyReport:
        return VerifyReport(
            ok=bad is None,
            records=self.records if records is None else records,
            segments=len(files),
            first_bad=bad,
            reason=reason,
            detail=detail,
            first_seq=self.first_seq,
            last_seq=self.seq if self.hash is not None else None,
            last_hash=self.hash,
            files=tuple(files),
            notes=tuple(self.notes),
        )


def iter_records(path: str | os.PathLike[str]) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    """Every event record of a trail as ``(file, line, record)``, oldest first.

    The writer's notes (records with ``note`` instead of ``event``) are
    skipped. Hashes are not checked (use :func:`verify`). A torn last line
    is skipped; any other line that is not JSON raises
    :class:`onlooker.AuditError` naming the file and line.
    """
    with opened_segments(path) as opened:
        for index, segment in enumerate(opened):
            with segment.reading() as handle:
                last = index == len(opened) - 1
                for line_no, record in records_in(segment.file, handle, last=last):
                    yield segment.file, line_no, record


def records_in(file: Path, handle: BinaryIO, *, last: bool) -> Iterator[tuple[int, dict[str, Any]]]:
    """The event records of one open segment as ``(line, record)``, as :func:`iter_records`
    reads them; a torn line ends the ``last`` segment, in any other it is an error."""
    for line_no, raw in enumerate(handle, 1):
        try:
            record = json_loads(raw)
        except ValueError:
            if last and not raw.endswith(b"\n"):
                return  # a torn tail: a crash mid-write
            raise AuditError(f"{file}:{line_no}: not a JSON audit record") from None
        if is_note(record):
            continue
        if not isinstance(record, dict) or not isinstance(record.get("event"), dict):
            raise AuditError(f"{file}:{line_no}: not an audit record (no event)")
        yield line_no, record


def is_note(record: object) -> bool:
    """Whether a parsed record is one of the writer's notes (no event in it)."""
    return (
        isinstance(record, dict) and "event" not in record and isinstance(record.get("note"), dict)
    )
