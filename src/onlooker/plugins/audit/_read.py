"""tail() and replay(): read a trail's events back."""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

import onlooker
from onlooker import AuditError, EventValidationError, ExecutionEvent
from onlooker._shared import json_loads

from ._verify import is_note, iter_records, opened_segments, records_in
from ._writer import LIVE_NAME

__all__ = ["EventSink", "replay", "tail"]


class EventSink(Protocol):
    """What :func:`replay` writes into: a history store (``onlooker.plugins.history``)."""

    async def write_events(self, events: Sequence[ExecutionEvent], /) -> int:
        """Store ``events``, ignoring those already stored (by event id); return how many were new."""
        ...


def _event(file: Path, line: int, record: dict[str, object]) -> ExecutionEvent:
    try:
        return onlooker.parse_event(record["event"])  # type: ignore[arg-type]  # checked by iter_records
    except EventValidationError as exc:
        raise AuditError(f"{file}:{line}: the recorded event is invalid: {exc}") from None


def tail(
    path: str | os.PathLike[str], follow: bool = False, *, poll_interval: float = 0.2
) -> Generator[ExecutionEvent, None, None]:
    """The events of a trail, oldest first, parsed (``onlooker.parse_event``).

    ``path`` is a session directory or one ``events*.jsonl`` file. A torn
    last line is skipped, and so are the writer's notes (gap and retirement
    records, which hold no event). With ``follow`` the iterator never ends: it waits
    for records appended to the live file (checking every
    ``poll_interval`` seconds) and follows it across rotations; ``close()``
    it to release the file.
    """
    if not follow:
        for file, line, record in iter_records(path):
            yield _event(file, line, record)
        return
    follower = _Follower(poll_interval)
    yield from follower.events(path)


def _seq_of(record: dict[str, object], default: int) -> int:
    seq = record.get("seq")
    return seq if isinstance(seq, int) else default


class _Follower:
    """Reads the live file as it grows; on rotation, the segments it missed, then the new file."""

    def __init__(self, poll_interval: float) -> None:
        self.last_seq = -1
        self.poll_interval = poll_interval

    def events(self, path: str | os.PathLike[str]) -> Iterator[ExecutionEvent]:
        file, handle = yield from self._read_rotated(path, None)
        rotates = file.name == LIVE_NAME
        try:
            buffer, line_no = b"", 0
            while True:
                chunk = handle.read(65536)
                if chunk:
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for raw in lines:
                        line_no += 1
                        event = self._parse(file, line_no, raw)
                        if event is not None:
                            yield event
                    continue
                if not rotates or not _rotated(handle, file):
                    time.sleep(self.poll_interval)
                    continue
                old = os.fstat(handle.fileno()).st_ino
                handle.close()
                file, handle = yield from self._read_rotated(file.parent, old)
                buffer, line_no = b"", 0
        finally:
            handle.close()

    def _read_rotated(
        self, path: str | os.PathLike[str], since_inode: int | None
    ) -> Generator[ExecutionEvent, None, tuple[Path, BinaryIO]]:
        """Records of every segment but the newest (from the one ``since_inode`` names, if
        still there) past the last seq seen; returns the newest segment, open, to follow."""
        with opened_segments(path) as opened:
            *rotated, newest = opened
            start = 0
            for index, segment in enumerate(rotated):
                if since_inode is not None and segment.inode() == since_inode:
                    start = index
            for segment in rotated[start:]:
                with segment.reading() as handle:
                    for line, record in records_in(segment.file, handle, last=True):
                        if _seq_of(record, self.last_seq + 1) > self.last_seq:
                            self.last_seq = _seq_of(record, self.last_seq)
                            yield _event(segment.file, line, record)
            with newest.reading() as live:  # the newest is always opened at the listing
                return newest.file, os.fdopen(os.dup(live.fileno()), "rb")

    def _parse(self, file: Path, line_no: int, raw: bytes) -> ExecutionEvent | None:
        try:
            record = json_loads(raw)
        except ValueError:
            raise AuditError(f"{file}:{line_no}: not a JSON audit record") from None
        if is_note(record):  # the writer's own record: no event, but it takes a seq
            self.last_seq = max(self.last_seq, _seq_of(record, self.last_seq))
            return None
        if not isinstance(record, dict) or not isinstance(record.get("event"), dict):
            raise AuditError(f"{file}:{line_no}: not an audit record (no event)")
        seq = _seq_of(record, self.last_seq + 1)
        if seq <= self.last_seq:
            return None
        self.last_seq = seq
        return _event(file, line_no, record)


def _rotated(handle: BinaryIO, file: Path) -> bool:
    try:
        return os.fstat(handle.fileno()).st_ino != os.stat(file).st_ino
    except FileNotFoundError:
        return False  # between the rename and the new file: wait


async def replay(path: str | os.PathLike[str], store: EventSink, *, batch_size: int = 500) -> int:
    """Load a trail's events into a history store; returns how many the store reported new.

    Calls ``await store.write_events(batch)`` with up to ``batch_size``
    events at a time, oldest first. Stores write idempotently by event id,
    so replaying twice changes nothing (and the second replay returns 0).
    A torn last line and the writer's notes are skipped. A line that holds
    no valid event raises ``AuditError`` naming it, once every event before
    it is written. Run :func:`verify` first to trust the trail.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    written = 0
    batch: list[ExecutionEvent] = []
    try:
        for file, line, record in iter_records(path):
            batch.append(_event(file, line, record))
            if len(batch) >= batch_size:
                written += await store.write_events(batch)
                batch = []
    except AuditError:
        if batch:  # the events before the bad line are written, then it is named
            await store.write_events(batch)
        raise
    if batch:
        written += await store.write_events(batch)
    return written
