"""tail() and replay(): read a trail's events back."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import onlooker
from onlooker import AuditError, EventValidationError, ExecutionEvent

from ._verify import iter_records, segments_of
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
) -> Iterator[ExecutionEvent]:
    """The events of a trail, oldest first, parsed (``onlooker.parse_event``).

    ``path`` is a session directory or one ``events*.jsonl`` file. A torn
    last line is skipped. With ``follow`` the iterator never ends: it waits
    for records appended to the live file (checking every
    ``poll_interval`` seconds) and follows it across rotations.
    """
    files = segments_of(path)
    if not follow:
        for file, line, record in iter_records(path):
            yield _event(file, line, record)
        return
    for file in files[:-1]:
        for line_no, record in _records(file):
            yield _event(file, line_no, record)
    yield from _follow(files[-1], poll_interval)


def _records(file: Path) -> Iterator[tuple[int, dict[str, object]]]:
    for _, line, record in iter_records(file):
        yield line, record


def _follow(file: Path, poll_interval: float) -> Iterator[ExecutionEvent]:
    """Read ``file`` to its end, then wait for more, re-opening it when it is rotated."""
    live = file.name == LIVE_NAME
    handle = open(file, "rb")  # noqa: SIM115  # re-opened on rotation below
    try:
        buffer = b""
        line_no = 0
        while True:
            chunk = handle.read(65536)
            if chunk:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    line_no += 1
                    yield _parse_line(file, line_no, raw)
                continue
            if live and _rotated(handle, file):
                rest = handle.read()  # the writer may have appended before renaming
                if rest:
                    buffer += rest
                    continue
                handle.close()
                handle = open(file, "rb")  # noqa: SIM115
                buffer, line_no = b"", 0
                continue
            time.sleep(poll_interval)
    finally:
        handle.close()


def _rotated(handle: object, file: Path) -> bool:
    try:
        return os.fstat(handle.fileno()).st_ino != os.stat(file).st_ino  # type: ignore[attr-defined]
    except FileNotFoundError:
        return False  # between the rename and the new file: wait


def _parse_line(file: Path, line_no: int, raw: bytes) -> ExecutionEvent:
    try:
        record = json.loads(raw)
    except ValueError:
        raise AuditError(f"{file}:{line_no}: not a JSON audit record") from None
    if not isinstance(record, dict) or not isinstance(record.get("event"), dict):
        raise AuditError(f"{file}:{line_no}: not an audit record (no event)")
    return _event(file, line_no, record)


async def replay(path: str | os.PathLike[str], store: EventSink, *, batch_size: int = 500) -> int:
    """Load a trail's events into a history store; returns how many the store reported new.

    Calls ``await store.write_events(batch)`` with up to ``batch_size``
    events at a time, oldest first. Stores write idempotently by event id,
    so replaying twice changes nothing (and the second replay returns 0).
    A torn last line is skipped. Run :func:`verify` first to trust the trail.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    written = 0
    batch: list[ExecutionEvent] = []
    for file, line, record in iter_records(path):
        batch.append(_event(file, line, record))
        if len(batch) >= batch_size:
            written += await store.write_events(batch)
            batch = []
    if batch:
        written += await store.write_events(batch)
    return written
