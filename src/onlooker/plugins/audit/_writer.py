"""TrailWriter: appends hash-chained records to a session's audit trail.

Standard library only (plus ``onlooker._errors``): the coding-agent hook
imports this in a fresh interpreter on every tool call. The record format
(and the writer's own notes: gaps, retired segments) is in ``_record.py``;
the session's files, its lock and rotation in ``_segments.py``;
``audit.err`` in ``_sidecar.py``.

The path of one batch: each event is serialized (``_encode.py``), the
redactor's screen picks the few whose text holds a hint of a secret (or a
string over the cap), only those are redacted value by value; then the
batch is chained and appended with one ``write``.
"""

from __future__ import annotations

import os
from _thread import allocate_lock

from onlooker._errors import AuditError
from onlooker._shared import iso_time, json_dumps

from ._encode import encode_dicts, json_bytes
from ._record import (
    EVENT,
    GENESIS,
    LIVE_NAME,
    NOTE,
    RECORD_VERSION,
    RecordMaker,
    segment_name,
)
from ._redact import Redactor
from ._segments import Segments, new_session_id, validate_session_id
from ._sidecar import ERROR_NAME, Sidecar

# Neither `from typing import ...` nor json, re, threading or contextlib at run
# time: this module is imported by the coding-agent hook in a fresh interpreter
# on every tool call, where each of them costs a millisecond or more (json
# alone brings re and enum). onlooker._shared has what it needs from them.
# Type checkers treat any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import TracebackType
    from typing import Any, Final, final

    from ._types import FsyncMode
else:

    def final(cls: type) -> type:
        return cls


__all__ = [
    "ERROR_NAME",
    "GENESIS",
    "LIVE_NAME",
    "RECORD_VERSION",
    "AuditWriteError",
    "TrailWriter",
    "WriterStatistics",
    "compact_json",
    "new_session_id",
    "segment_name",
    "validate_session_id",
]

compact_json: Final = json_dumps
"""Compact JSON, non-ASCII kept: how events are serialized into records.

``json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode``, byte for
byte, without importing ``json``.
"""
_FSYNC_MODES: Final = ("never", "batch", "always")


class AuditWriteError(AuditError):
    """Appending to an audit trail failed (disk full, permission, directory gone).

    ``written`` events of the batch reached the file (in order) before the
    failure; the rest did not and can be written again. The failure was also
    appended to ``audit.err``.
    """

    def __init__(self, message: str, *, path: str, written: int) -> None:
        super().__init__(message)
        self.path = path
        self.written = written


@final
class WriterStatistics:
    """A snapshot of a :class:`TrailWriter`'s counters."""

    __slots__ = ("batches", "bytes", "errors", "reopened", "rotations", "written")

    def __init__(
        self,
        written: int,
        errors: int,
        batches: int,
        bytes: int,
        rotations: int,
        reopened: int = 0,
    ) -> None:
        self.written = written
        """Records appended."""
        self.errors = errors
        """Failed attempts (each also appended to ``audit.err``)."""
        self.batches = batches
        """Successful ``write`` calls."""
        self.bytes = bytes
        """Bytes appended."""
        self.rotations = rotations
        """Segments rotated by this writer."""
        self.reopened = reopened
        """Times the session's files were found removed, and the trail went on in new ones."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WriterStatistics) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"WriterStatistics(written={self.written}, errors={self.errors}, "
            f"batches={self.batches}, bytes={self.bytes}, rotations={self.rotations}, "
            f"reopened={self.reopened})"
        )

    def _fields(self) -> tuple[int, int, int, int, int, int]:
        return (
            self.written,
            self.errors,
            self.batches,
            self.bytes,
            self.rotations,
            self.reopened,
        )


def _check_options(
    max_bytes: int, keep: int, fsync: str, max_value_chars: int, lock_timeout: float | None
) -> None:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be a positive integer, not {max_bytes!r}")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValueError(f"keep must be an integer >= 0, not {keep!r}")
    if fsync not in _FSYNC_MODES:
        raise ValueError(f"fsync must be one of 'never', 'batch', 'always', not {fsync!r}")
    if (
        isinstance(max_value_chars, bool)
        or not isinstance(max_value_chars, int)
        or max_value_chars < 1
    ):
        raise ValueError(f"max_value_chars must be a positive integer, not {max_value_chars!r}")
    if lock_timeout is not None and (
        isinstance(lock_timeout, bool)
        or not isinstance(lock_timeout, int | float)
        or not 0 <= lock_timeout < float("inf")
    ):
        raise ValueError(
            f"lock_timeout must be a non-negative, finite number of seconds or None, "
            f"not {lock_timeout!r}"
        )


@final
class TrailWriter:
    """Appends events to ``<directory>/<session_id>/events.jsonl`` as hash-chained records.

    The low-level API: no engine, no threads, no pydantic. ``write(events)``
    takes events in their JSON form (``event.model_dump(mode="json")``),
    redacts and truncates them, chains and appends them, rotating the live
    file into ``events.1.jsonl`` ... ``events.<keep>.jsonl`` when it would
    exceed ``max_bytes``. It raises :class:`AuditWriteError` when the disk
    refuses (after noting the failure in ``audit.err``); nothing is ever
    half-written. A write waits for the session's lock (another writer of
    the same session holds it meanwhile) at most ``lock_timeout`` seconds,
    then raises :class:`AuditWriteError` as well; ``None`` waits as long as
    the holder keeps it.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        session_id: str,
        *,
        max_bytes: int = 4 * 1024 * 1024,
        keep: int = 10,
        fsync: FsyncMode = "batch",
        redactor: Redactor | None = None,
        max_value_chars: int = 2000,
        lock_timeout: float | None = None,
    ) -> None:
        self.session_id: Final = validate_session_id(session_id)
        _check_options(max_bytes, keep, fsync, max_value_chars, lock_timeout)
        self.directory: Final = os.fspath(directory)
        self.session_dir: Final = os.path.join(self.directory, session_id)
        self.path: Final = os.path.join(self.session_dir, LIVE_NAME)
        """The live file."""
        self._sidecar: Final = Sidecar(self.directory, self.session_dir, session_id)
        self.error_path: Final = self._sidecar.path
        self.max_bytes: Final = max_bytes
        self.keep: Final = keep
        self.fsync: Final[FsyncMode] = fsync
        self.redactor: Final = redactor if redactor is not None else Redactor()
        self.max_value_chars: Final = max_value_chars
        self._files: Final = Segments(
            self.session_dir,
            keep=keep,
            durable=fsync != "never",
            report=self.report,
            lock_timeout=lock_timeout,
        )
        self._mutex = allocate_lock()
        self._written = self._errors = self._batches = self._bytes = self._reopened = 0
        self._batch_written = 0
        self._closed = False
        self._outage: dict[str, Any] | None = None  # since the first refused write

    # -- public ------------------------------------------------------------------

    def write(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Redact, truncate, chain and append ``events`` (JSON-form dicts), in order.

        Raises :class:`AuditWriteError` if the disk refuses; its ``written``
        says how many of ``events`` were appended before that.
        """
        self.write_encoded(self.encode(events))

    def encode(self, events: Sequence[Mapping[str, Any]]) -> list[bytes]:
        """Events' JSON forms redacted, truncated and serialized (UTF-8): their ``event`` members.

        The same bytes as :meth:`serialize` gives each, found faster: only
        the events the redactor's screen suspects are redacted value by value
        (the others are serialized by pydantic-core, see ``_encode.py``).
        """

        def redact(index: int) -> bytes:
            return self.serialize(events[index]).encode("utf-8", "backslashreplace")

        try:
            return encode_dicts(events, self.redactor, self.max_value_chars, redact)
        except RecursionError:  # a value holding itself, or nested thousands deep
            raise TypeError(
                "an event holds a value nested too deeply to serialize (or holding itself)"
            ) from None

    def serialize(self, event: Mapping[str, Any]) -> str:
        """One event's JSON form redacted, truncated and serialized: the ``event`` member."""
        redacted = self.redactor.redact_event(
            event if type(event) is dict else dict(event), max_chars=self.max_value_chars
        )
        return compact_json(redacted)

    def write_serialized(self, texts: Sequence[str]) -> None:
        """Chain and append events already redacted and serialized by :meth:`serialize`.

        Each text must be one JSON object; nothing here redacts it.
        """
        self.write_encoded([text.encode("utf-8", "backslashreplace") for text in texts])

    def write_encoded(self, bodies: Sequence[bytes]) -> None:
        """Chain and append events already redacted and serialized, in UTF-8 (:meth:`encode`).

        Each body must be one JSON object; nothing here redacts it.
        """
        if not bodies:
            return
        with self._mutex:
            if self._closed:
                raise AuditError(f"this audit writer for {self.path!r} is closed")
            try:
                self._append(bodies)
            except OSError as exc:
                raise self._refused(exc, len(bodies)) from exc
            self._batches += 1
            if self._sidecar.holding:
                self._sidecar.report_late()

    @property
    def failing(self) -> bool:
        """Whether the last write was refused (a gap record will follow the next one that works)."""
        return self._outage is not None

    def lost(self, records: int) -> None:
        """Count ``records`` given up on by the caller during the current outage (gap record)."""
        if self._outage is not None:
            self._outage["dropped"] += records

    def report(self, message: str, **fields: object) -> bool:
        """Append one problem to ``audit.err`` (JSON lines), falling back to ``<directory>/audit.err``.

        Never raises. When no file can be written (a full disk), the problem
        is kept (the last 1,000) and appended, marked ``"delayed": true``,
        after the next write to the trail that works. Returns whether it was
        written now.
        """
        return self._sidecar.report(message, **fields)

    def statistics(self) -> WriterStatistics:
        """The writer's counters."""
        return WriterStatistics(
            written=self._written,
            errors=self._errors,
            batches=self._batches,
            bytes=self._bytes,
            rotations=self._files.rotations,
            reopened=self._reopened,
        )

    def close(self) -> None:
        """Close the files. Idempotent."""
        with self._mutex:
            self._closed = True
            self._files.close()

    def __enter__(self) -> TrailWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- appending -----------------------------------------------------------------

    def _refused(self, exc: OSError, count: int) -> AuditWriteError:
        """Count and report a refused write; the error to raise."""
        written = self._batch_written
        self._errors += 1
        self._files.close()
        outage = self._outage
        if outage is None:
            outage = self._outage = {"since": iso_time(), "attempts": 0, "dropped": 0}
        outage["attempts"] += 1
        outage["error"] = f"{type(exc).__name__}: {exc}"
        message = f"cannot append {count - written} record(s) to {self.path}: {exc}"
        self.report(message, error=type(exc).__name__, records=count - written)
        return AuditWriteError(message, path=self.path, written=written)

    def _append(self, bodies: Sequence[bytes]) -> None:
        """Append under the session lock, preceded by a gap note after an outage."""
        self._batch_written = 0
        files = self._files
        try:
            files.lock()
            note: dict[str, object] | None = None
            if self._outage is not None:
                note = {"kind": "gap", **self._outage, "until": iso_time()}
            if files.removed:
                note = (note or {"kind": "reopened"}) | {"files_removed_after_seq": files.seq}
                self._reopened_here(files.seq)
            self._append_locked(bodies, None if note is None else json_bytes(note))
            self._outage = None
        finally:
            files.unlock()

    def _reopened_here(self, last_seq: int) -> None:
        """The session's files were gone: say so in ``audit.err`` (and, next, in the trail)."""
        self._files.removed = False
        self._reopened += 1
        self.report(
            f"the session's files were removed from {self._files.session_dir}: the trail goes "
            f"on in new files from seq {last_seq + 1}, chained to the last record written "
            "before; the records that were in them are lost, and verify reports the head missing",
            after_seq=last_seq,
        )

    def _append_locked(self, bodies: Sequence[bytes], note: bytes | None) -> None:
        """Chain and write ``bodies`` (events), preceded by ``note`` if given.

        The common batch (no note, no per-record fsync) is chained in one
        go and written if it fits in the live file; otherwise record by
        record (:meth:`_append_each`).
        """
        files = self._files
        maker = RecordMaker(self.session_id, iso_time())
        if note is None and self.fsync != "always":
            data, last = maker.lines(bodies, files.seq + 1, files.prev.encode())
            if files.size + len(data) <= self.max_bytes:
                self._flush([data], len(data), files.seq + len(bodies), last, 0, len(bodies))
                return
        self._append_each(maker, bodies, note)

    def _append_each(self, maker: RecordMaker, bodies: Sequence[bytes], note: bytes | None) -> None:
        """Chain and write ``bodies`` one by one, preceded by ``note`` if given.

        An event that would take the live file past ``max_bytes`` rotates it
        first (what came before is written out) and opens the new segment.
        When the rotation deletes the oldest segment, a retirement note saying
        so ends the segment it closes (with ``keep=0``, which deletes the live
        file itself, it follows the event in the new one).
        With ``fsync="always"`` each record is written and synced on its own.
        """
        files = self._files
        always = self.fsync == "always"
        seq, prev = files.seq, files.prev.encode()
        lines: list[bytes] = []
        pending = notes = 0  # bytes in ``lines``; notes among them
        index, count = 0, len(bodies)
        while True:
            if note is not None:  # the writer's own record comes before the next event
                member, body, note = NOTE, note, None
            elif index < count:
                member, body = EVENT, bodies[index]
                index += 1
            else:
                break
            line, digest = maker.line(seq + 1, prev, member, body)
            if (
                member is EVENT  # a note never rotates: that would write another note
                and files.size + pending > 0
                and files.size + pending + len(line) > self.max_bytes
            ):
                self._flush(lines, pending, seq, prev, notes)
                lines, pending, notes = [], 0, 0
                # The rotation deletes the oldest segment: say so first, at the end of the
                # segment it closes, so that no crash leaves the deletion unsaid.
                through = files.retiring()
                if through is not None:
                    retired = json_bytes({"kind": "retired", "through_seq": through})
                    note_line, note_digest = maker.line(seq + 1, prev, NOTE, retired)
                    seq, prev = seq + 1, note_digest
                    self._flush([note_line], len(note_line), seq, prev, 1)
                    line, digest = maker.line(seq + 1, prev, member, body)
                through = files.rotate()
                if through is not None and files.keep == 0:  # the new segment's second record
                    note = json_bytes({"kind": "retired", "through_seq": through})
            seq, prev = seq + 1, digest
            lines.append(line)
            pending += len(line)
            notes += member is NOTE
            if always:
                self._flush(lines, pending, seq, prev, notes)
                lines, pending, notes = [], 0, 0
        self._flush(lines, pending, seq, prev, notes)

    def _flush(
        self,
        lines: list[bytes],
        size: int,
        seq: int,
        prev: bytes,
        notes: int,
        records: int | None = None,
    ) -> None:
        """Write whole record ``lines`` (``notes`` of them the writer's notes), commit the chain.

        ``records`` is how many records the lines hold (one per line unless given).
        """
        if not lines:
            return
        data = b"".join(lines) if len(lines) > 1 else lines[0]
        self._files.append(data, seq, prev.decode("ascii"), fsync=self.fsync != "never")
        events = (len(lines) if records is None else records) - notes
        self._written += events
        self._batch_written += events
        self._bytes += size
