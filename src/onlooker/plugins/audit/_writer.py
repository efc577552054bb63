"""TrailWriter: appends hash-chained records to a session's audit trail.

Standard library only (plus ``onlooker._errors``): the coding-agent hook
imports this in a fresh interpreter on every tool call.

A record is one line of compact JSON, members in this order::

    {"v":1,"seq":0,"at":"...Z","session_id":"...","prev":"<hex>","event":{...},"hash":"<hex>"}

``hash`` is the SHA-256 (hex) of the line's UTF-8 bytes with its final
``,"hash":"<hex>"`` member removed, i.e. of the record serialized without
``hash``; ``prev`` is the previous record's ``hash`` (:data:`GENESIS` for
the first record of a session); ``seq`` counts records per session, with no
gaps, across rotated segments.

A few records are the writer's own notes, chained like the others, with a
``note`` member in place of ``event``::

    {"v":1,"seq":7,"at":"...Z","session_id":"...","prev":"<hex>","note":{"kind":"gap",...},"hash":"<hex>"}

``{"kind":"retired","through_seq":N}`` follows a rotation that deleted the
oldest segment: records up to seq ``N`` are gone on purpose (``verify``
accepts a trail whose first record is ``N + 1`` only with this proof).
``{"kind":"gap","since":...,"until":...,"attempts":...,"error":...,
"dropped":...}`` is the first record written after the disk refused writes:
the records that follow were written late (their ``at`` is when they were
written), and ``dropped`` were given up on.

Several processes may append to one session: each batch is written under an
exclusive ``flock`` on ``<session>/.lock``, after re-reading the last record
(its ``seq`` and ``hash``) from disk.
"""

from __future__ import annotations

import os
import time
from _thread import allocate_lock

from onlooker._errors import AuditError
from onlooker._shared import (
    SESSION_ID_RULE,
    is_session_id,
    iso_time,
    json_dumps,
    json_loads,
    lock_file,
    sha256,
    unlock_file,
)

from ._redact import Redactor

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
    "GENESIS",
    "LIVE_NAME",
    "RECORD_VERSION",
    "AuditWriteError",
    "TrailWriter",
    "WriterStatistics",
    "new_session_id",
    "segment_name",
    "validate_session_id",
]

RECORD_VERSION: Final = 1
"""The record format version, written as ``v``."""

GENESIS: Final = "0" * 64
"""The ``prev`` of a session's first record."""

LIVE_NAME: Final = "events.jsonl"
"""The live segment's file name; rotated ones are ``events.1.jsonl`` (newest) ... ``events.<keep>.jsonl``."""

_EVENT: Final = '","event":'  # the member after ``prev``: an event, or the writer's note
_NOTE: Final = '","note":'
_MAX_UNREPORTED: Final = 1000  # sidecar lines held while the disk refuses them

ERROR_NAME: Final = "audit.err"
_LOCK_NAME: Final = ".lock"
_TAIL_NAME: Final = ".tail"  # the last record's seq and hash, saved at each rotation
_HASH_SUFFIX_LEN: Final = len(',"hash":"') + 64 + len('"}')
compact_json: Final = json_dumps
"""Compact JSON, non-ASCII kept: how events are serialized into records.

``json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode``, byte for
byte (the hash chain depends on it), without importing ``json``.
"""
_FSYNC_MODES: Final = ("never", "batch", "always")


def segment_name(index: int) -> str:
    """The file name of segment ``index``: 0 is the live file, 1 the newest rotated one."""
    return LIVE_NAME if index == 0 else f"events.{index}.jsonl"


def validate_session_id(session_id: object) -> str:
    """``session_id`` if it is a safe directory name, else :class:`onlooker.AuditError`."""
    if not isinstance(session_id, str) or not is_session_id(session_id):
        raise AuditError(
            f"invalid audit session id {session_id!r}: it must match "
            f"{SESSION_ID_RULE} (no path separators, no leading dot)"
        )
    return session_id


def new_session_id() -> str:
    """A new session id that sorts by creation time: ``20250101T120000Z-3f2a9c``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(3).hex()


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

    __slots__ = ("batches", "bytes", "errors", "rotations", "written")

    def __init__(self, written: int, errors: int, batches: int, bytes: int, rotations: int) -> None:
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

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WriterStatistics) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"WriterStatistics(written={self.written}, errors={self.errors}, "
            f"batches={self.batches}, bytes={self.bytes}, rotations={self.rotations})"
        )

    def _fields(self) -> tuple[int, int, int, int, int]:
        return (self.written, self.errors, self.batches, self.bytes, self.rotations)


@final
class TrailWriter:
    """Appends events to ``<directory>/<session_id>/events.jsonl`` as hash-chained records.

    The low-level API: no engine, no threads, no pydantic. ``write(events)``
    takes events in their JSON form (``event.model_dump(mode="json")``),
    redacts and truncates them, chains and appends them, rotating the live
    file into ``events.1.jsonl`` ... ``events.<keep>.jsonl`` when it would
    exceed ``max_bytes``. It raises :class:`AuditWriteError` when the disk
    refuses (after noting the failure in ``audit.err``); nothing is ever
    half-written.
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
    ) -> None:
        self.session_id: Final = validate_session_id(session_id)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive integer, not {max_bytes!r}")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep must be an integer >= 0, not {keep!r}")
        if fsync not in _FSYNC_MODES:
            raise ValueError(f"fsync must be one of 'never', 'batch', 'always', not {fsync!r}")
        if isinstance(max_value_chars, bool) or not isinstance(max_value_chars, int):
            raise ValueError(f"max_value_chars must be a positive integer, not {max_value_chars!r}")
        if max_value_chars < 1:
            raise ValueError(f"max_value_chars must be a positive integer, not {max_value_chars!r}")
        self.directory: Final = os.fspath(directory)
        self.session_dir: Final = os.path.join(self.directory, session_id)
        self.path: Final = os.path.join(self.session_dir, LIVE_NAME)
        """The live file."""
        self.error_path: Final = os.path.join(self.session_dir, ERROR_NAME)
        self.max_bytes: Final = max_bytes
        self.keep: Final = keep
        self.fsync: Final[FsyncMode] = fsync
        self.redactor: Final = redactor if redactor is not None else Redactor()
        self.max_value_chars: Final = max_value_chars
        self._mutex = allocate_lock()
        self._fd = -1
        self._lock_fd = -1
        self._ino = -1
        self._size = -1
        self._seq = -1  # last seq written in this session, -1 before the first
        self._prev = GENESIS
        self._written = self._errors = self._batches = self._bytes = self._rotations = 0
        self._notes = 0
        self._batch_written = 0
        self._closed = False
        self._outage: dict[str, Any] | None = None  # since the first refused write
        self._unreported: list[dict[str, Any]] = []  # sidecar lines the disk refused too
        self._unreported_lost = 0

    # -- public ------------------------------------------------------------------

    def write(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Redact, truncate, chain and append ``events`` (JSON-form dicts), in order.

        Raises :class:`AuditWriteError` if the disk refuses; its ``written``
        says how many of ``events`` were appended before that.
        """
        texts = [self.serialize(event) for event in events]
        self.write_serialized(texts)

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
        if not texts:
            return
        with self._mutex:
            if self._closed:
                raise AuditError(f"this audit writer for {self.path!r} is closed")
            try:
                self._append(texts)
            except OSError as exc:
                written = self._batch_written
                self._errors += 1
                self._drop_files()
                outage = self._outage
                if outage is None:
                    outage = self._outage = {"since": iso_time(), "attempts": 0, "dropped": 0}
                outage["attempts"] += 1
                outage["error"] = f"{type(exc).__name__}: {exc}"
                message = f"cannot append {len(texts) - written} record(s) to {self.path}: {exc}"
                self.report(message, error=type(exc).__name__, records=len(texts) - written)
                raise AuditWriteError(message, path=self.path, written=written) from exc
            self._batches += 1
            if self._unreported:
                self._report_late()

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
        entry = {"at": iso_time(), "session_id": self.session_id, "message": message, **fields}
        if self._append_error(compact_json(entry)):
            return True
        self._unreported.append(entry)
        if len(self._unreported) > _MAX_UNREPORTED:
            del self._unreported[0]
            self._unreported_lost += 1
        return False

    def _append_error(self, line: str) -> bool:
        for path in (self.error_path, os.path.join(self.directory, ERROR_NAME)):
            try:
                os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except OSError:
                continue
            try:
                os.write(fd, (line + "\n").encode("utf-8", "backslashreplace"))
                return True
            except OSError:
                continue
            finally:
                os.close(fd)
        return False

    def _report_late(self) -> None:
        """The problems the disk refused to record when they happened, now that it takes writes."""
        held, self._unreported = self._unreported, []
        if self._unreported_lost:
            held.insert(
                0,
                {
                    "at": iso_time(),
                    "session_id": self.session_id,
                    "message": f"{self._unreported_lost} older problem report(s) were lost",
                },
            )
            self._unreported_lost = 0
        lines = "\n".join(compact_json({**entry, "delayed": True}) for entry in held)
        if not self._append_error(lines):
            self._unreported = held + self._unreported

    def statistics(self) -> WriterStatistics:
        """The writer's counters."""
        return WriterStatistics(
            written=self._written,
            errors=self._errors,
            batches=self._batches,
            bytes=self._bytes,
            rotations=self._rotations,
        )

    def close(self) -> None:
        """Close the files. Idempotent."""
        with self._mutex:
            self._closed = True
            self._drop_files()

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

    def _append(self, texts: Sequence[str]) -> int:
        """Append under the session lock; returns how many records reached the file."""
        self._batch_written = 0
        self._lock()
        try:
            self._open_live()
            self._sync_tail()
            note = None
            if self._outage is not None:
                note = compact_json({"kind": "gap", **self._outage, "until": iso_time()})
            self._append_locked(texts, note)
            self._outage = None
        finally:
            if self._lock_fd >= 0:
                unlock_file(self._lock_fd)
        return self._batch_written

    def _append_locked(self, texts: Sequence[str], note: str | None = None) -> None:
        """Chain and write ``texts`` (events), preceded by ``note`` if given."""
        head = f'{{"v":{RECORD_VERSION},"seq":'
        middle = f',"at":"{iso_time()}","session_id":"{self.session_id}","prev":"'
        always = self.fsync == "always"
        max_bytes = self.max_bytes
        seq, prev = self._seq, self._prev
        lines: list[bytes] = []
        pending = 0  # bytes in ``lines``
        notes = 0  # note lines among ``lines``
        count = len(texts)
        index = 0
        while True:
            if note is not None:  # the writer's own record comes before the next event
                member, text, note = _NOTE, note, None
            elif index < count:
                member, text = _EVENT, texts[index]
                index += 1
            else:
                break
            seq += 1
            body = (head + str(seq) + middle + prev + member + text + "}").encode(
                "utf-8", "backslashreplace"
            )
            prev = sha256(body).hexdigest()
            line = body[:-1] + b',"hash":"' + prev.encode() + b'"}\n'
            if (
                self._size + pending > 0
                and self._size + pending + len(line) > max_bytes
                and member is not _NOTE  # a note never rotates: that would write another note
            ):
                self._flush(lines, pending, seq - 1, notes)
                lines, pending, notes = [], 0, 0
                through = self._rotate()
                if through is not None:
                    note = compact_json({"kind": "retired", "through_seq": through})
            lines.append(line)
            pending += len(line)
            if member is _NOTE:
                notes += 1
            if always:
                self._flush(lines, pending, seq, notes)
                lines, pending, notes = [], 0, 0
        self._flush(lines, pending, seq, notes)

    def _flush(self, lines: list[bytes], size: int, last_seq: int, notes: int = 0) -> None:
        """Write whole record ``lines`` (``notes`` of them the writer's notes), commit the chain."""
        if not lines:
            return
        data = b"".join(lines) if len(lines) > 1 else lines[0]
        start = self._size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            if self.fsync != "never":
                os.fsync(self._fd)
        except OSError:
            try:  # noqa: SIM105  # never leave half a record behind; contextlib would cost an import
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            raise
        last = lines[-1]
        self._size = start + size
        self._seq = last_seq
        self._prev = last[-(64 + 3) : -3].decode("ascii")
        self._written += len(lines) - notes
        self._batch_written += len(lines) - notes
        self._notes += notes
        self._bytes += size

    # -- files and chain state -----------------------------------------------------------

    def _lock(self) -> None:
        """Take the session's exclusive lock (re-opening the lock file if it was replaced)."""
        lock = os.path.join(self.session_dir, _LOCK_NAME)
        while True:
            if self._lock_fd >= 0 and not _same_file(self._lock_fd, lock):
                self._drop_files()
            if self._lock_fd < 0:
                os.makedirs(self.session_dir, mode=0o700, exist_ok=True)
                self._lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            lock_file(self._lock_fd)
            if _same_file(self._lock_fd, lock):
                return
            unlock_file(self._lock_fd)  # the directory was replaced meanwhile

    def _open_live(self) -> None:
        """Under the lock: (re-)open the live file if another process rotated it."""
        if self._fd >= 0 and not _same_file(self._fd, self.path):
            os.close(self._fd)
            self._fd = -1
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            self._ino = -1  # unknown until the tail is read

    def _drop_files(self) -> None:
        for fd in (self._fd, self._lock_fd):
            if fd >= 0:
                try:  # noqa: SIM105  # contextlib.suppress would cost an import
                    os.close(fd)
                except OSError:
                    pass
        self._fd = self._lock_fd = -1
        self._ino = -1

    def _sync_tail(self) -> None:
        """Under the lock: learn the last record's seq and hash from disk, unless unchanged."""
        stat = os.fstat(self._fd)
        if stat.st_ino == self._ino and stat.st_size == self._size:
            return  # nobody else wrote since our last batch
        self._ino, self._size = stat.st_ino, stat.st_size
        last = self._last_record() if stat.st_size else None
        if last is None:
            last = self._saved_tail()
        if last is not None:  # else: a new session, or its files were removed: keep ours
            self._seq, self._prev = last

    def _last_record(self) -> tuple[int, str] | None:
        """The seq and hash of the live file's last record; repairs a torn last line."""
        size = self._size
        data = b""
        position = size
        while position > 0 and data.count(b"\n", 0, max(len(data) - 1, 0)) == 0:
            step = min(65536, position)
            position -= step
            data = os.pread(self._fd, step, position) + data
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            torn = data[cut:]
            if _record_state(torn) is not None:  # a whole record that only lacks its newline
                os.write(self._fd, b"\n")
                self._size += 1
                data += b"\n"
            else:
                self.report(
                    f"removed a torn last line of {len(torn)} bytes at offset {position + cut} "
                    f"of {self.path} (a crash mid-write); its text is kept here",
                    error="torn_tail",
                    text=torn.decode("utf-8", "backslashreplace"),
                )
                os.ftruncate(self._fd, position + cut)
                self._size = position + cut
                data = data[:cut]
        last = data.rstrip(b"\n").rpartition(b"\n")[2]
        if not last:
            return None
        state = _record_state(last)
        if state is None:
            self.report(
                f"the last line of {self.path} is not a record; the chain goes on from ours"
            )
        return state

    def _saved_tail(self) -> tuple[int, str] | None:
        try:
            with open(os.path.join(self.session_dir, _TAIL_NAME), "rb") as handle:
                saved = json_loads(handle.read())
            return int(saved["seq"]), str(saved["hash"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _rotate(self) -> int | None:
        """Rename the live file to ``events.1.jsonl`` (shifting older ones), start a new one.

        Returns the seq through which records were deleted (the oldest
        segment, past ``keep``), or ``None`` when nothing was deleted.
        """
        join = os.path.join
        directory = self.session_dir
        scratch = join(directory, _TAIL_NAME + ".tmp")
        with open(scratch, "w", encoding="utf-8") as handle:
            # json.dumps's default spacing: the bytes .tail files have always had
            handle.write(f'{{"seq": {self._seq}, "hash": "{self._prev}"}}')
        os.replace(scratch, join(directory, _TAIL_NAME))
        through: int | None = None
        if self.keep == 0:
            through = self._seq
            os.unlink(self.path)
        else:
            oldest = join(directory, segment_name(self.keep))
            if os.path.exists(oldest):
                # the segment after it starts where the deleted records end
                first = _first_seq(join(directory, segment_name(self.keep - 1)))
                through = None if first is None else first - 1
            try:  # noqa: SIM105  # contextlib.suppress would cost an import
                os.unlink(oldest)
            except FileNotFoundError:
                pass
            for index in range(self.keep - 1, 0, -1):
                try:  # noqa: SIM105  # contextlib.suppress would cost an import
                    os.replace(
                        join(directory, segment_name(index)),
                        join(directory, segment_name(index + 1)),
                    )
                except FileNotFoundError:
                    pass
            os.replace(self.path, join(directory, segment_name(1)))
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        stat = os.fstat(self._fd)
        self._ino, self._size = stat.st_ino, stat.st_size
        self._rotations += 1
        if self.fsync != "never":
            _fsync_directory(directory)
        return through


def _first_seq(path: str) -> int | None:
    try:
        with open(path, "rb") as handle:
            state = _record_state(handle.readline().rstrip(b"\n"))
    except OSError:
        return None
    return None if state is None else state[0]


def _record_state(line: bytes) -> tuple[int, str] | None:
    """The seq and hash of one record line, or None if it is not one."""
    try:
        record = json_loads(line.decode("utf-8", "surrogatepass"))  # as json.loads decodes
        seq, digest = record["seq"], record["hash"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(seq, int) and isinstance(digest, str) and len(digest) == 64:
        return seq, digest
    return None


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except OSError:
        return False


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
