"""A session's files: its name, the lock, the live segment, the chain's tail, rotation.

Standard library only (the coding-agent hook imports it). Several processes
may append to one session: each batch is written under an exclusive
``flock`` on ``<session>/.lock``, after re-reading the last record (its
``seq`` and ``hash``) from disk — or, right after a rotation, from
``.tail`` — unless nobody wrote since this process's last batch. A torn
last line (a crash mid-write) is cut off here, its text kept in
``audit.err``.
"""

from __future__ import annotations

import os
import time

from onlooker._errors import AuditError
from onlooker._shared import (
    SESSION_ID_RULE,
    is_session_id,
    json_loads,
    lock_file,
    lock_file_within,
    unlock_file,
)

from ._record import GENESIS, LIVE_NAME, first_seq, record_state, segment_name

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final, final
else:

    def final(cls: type) -> type:
        return cls


__all__ = ["Segments", "new_session_id", "validate_session_id"]

_LOCK_NAME: Final = ".lock"
_TAIL_NAME: Final = ".tail"  # the last record's seq and hash, saved at each rotation


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


@final
class Segments:
    """The files of one session and the chain's tail: the last ``seq`` and ``prev`` written.

    ``report`` appends a problem to ``audit.err`` (a torn tail repaired, a
    last line that is not a record). Not thread-safe: the writer holds its
    own lock around every use.
    """

    def __init__(
        self,
        session_dir: str,
        *,
        keep: int,
        durable: bool,
        report: Callable[..., bool],
        lock_timeout: float | None = None,
    ) -> None:
        self.session_dir: Final = session_dir
        self.path: Final = os.path.join(session_dir, LIVE_NAME)
        self.keep: Final = keep
        self.durable: Final = durable  # fsync the directory after a rotation
        self._report: Final = report
        self.lock_timeout: Final = lock_timeout  # None: wait as long as the holder keeps it
        self.fd = -1  # the live segment, open for appending
        self._lock_fd = -1
        self._ino = -1
        self.size = -1  # of the live segment, as this process last knew it
        self.seq = -1  # the last seq written in this session, -1 before the first
        self.prev = GENESIS  # the last record's hash
        self.rotations = 0
        self.removed = False  # its files were gone at the last lock: the writer says so

    def lock(self) -> None:
        """Take the session's exclusive lock, open the live segment, learn the chain's tail."""
        lock = os.path.join(self.session_dir, _LOCK_NAME)
        while True:
            if self._lock_fd >= 0 and not _same_file(self._lock_fd, lock):
                self.close()
            if self._lock_fd < 0:
                os.makedirs(self.session_dir, mode=0o700, exist_ok=True)
                self._lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            if self.lock_timeout is None:
                lock_file(self._lock_fd)
            elif not lock_file_within(self._lock_fd, self.lock_timeout):
                raise TimeoutError(
                    f"the session's lock {lock} stayed taken for {self.lock_timeout:g} s"
                )
            if _same_file(self._lock_fd, lock):
                break
            unlock_file(self._lock_fd)  # the directory was replaced meanwhile
        self._open_live()
        self._sync_tail()

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            unlock_file(self._lock_fd)

    def append(self, data: bytes, last_seq: int, last_hash: str, *, fsync: bool) -> None:
        """Write whole record lines (fsync them if asked), then advance the chain's tail.

        On failure the file is cut back to where it was and the error raised:
        never half a record, and the tail stays at the last record on disk.
        """
        start = self.size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
            if fsync:
                os.fsync(self.fd)
        except OSError:
            try:  # noqa: SIM105  # contextlib would cost an import
                os.ftruncate(self.fd, start)
            except OSError:
                pass
            raise
        self.size = start + len(data)
        self.seq, self.prev = last_seq, last_hash

    def rotate(self) -> int | None:
        """Rename the live file to ``events.1.jsonl`` (shifting older ones), start a new one.

        Returns the seq through which records were deleted (the oldest
        segment, past ``keep``), or ``None`` when nothing was deleted.
        """
        join = os.path.join
        directory = self.session_dir
        scratch = join(directory, _TAIL_NAME + ".tmp")
        with open(scratch, "w", encoding="utf-8") as handle:
            # json.dumps's default spacing: the bytes .tail files have always had
            handle.write(f'{{"seq": {self.seq}, "hash": "{self.prev}"}}')
        os.replace(scratch, join(directory, _TAIL_NAME))
        through: int | None = None
        if self.keep == 0:
            through = self.seq
            os.unlink(self.path)
        else:
            through = self._shift_segments()
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        stat = os.fstat(self.fd)
        self._ino, self.size = stat.st_ino, stat.st_size
        self.rotations += 1
        if self.durable:
            _fsync_directory(directory)
        return through

    def close(self) -> None:
        for fd in (self.fd, self._lock_fd):
            if fd >= 0:
                try:  # noqa: SIM105  # contextlib.suppress would cost an import
                    os.close(fd)
                except OSError:
                    pass
        self.fd = self._lock_fd = -1
        self._ino = -1

    # -- under the lock ------------------------------------------------------------------

    def retiring(self) -> int | None:
        """The seq through which the next rotation deletes records (its oldest segment, past
        ``keep``), or ``None`` when it deletes none. The writer records it before rotating,
        so that a crash between the deletion and its record cannot look like tampering."""
        if self.keep == 0:
            return None  # the live file itself goes: nothing is left to hold the record
        numbers = self._rotated()
        if not numbers or numbers[-1] < self.keep:  # none past keep (which may have shrunk)
            return None
        # the segment after it starts where the deleted records end
        newer = max((n for n in numbers if n < self.keep), default=0)
        first = first_seq(os.path.join(self.session_dir, segment_name(newer)))
        return None if first is None else first - 1

    def _rotated(self) -> list[int]:
        """The numbers of the rotated segments there are, newest (1) first.

        Read by hand, not with ``_verify``'s pattern: the hook imports this module,
        and ``re`` costs it milliseconds."""
        numbers = []
        for name in os.listdir(self.session_dir):
            if name.startswith("events.") and name.endswith(".jsonl"):
                index = name[len("events.") : -len(".jsonl")]
                if index.isdigit() and index[0] != "0":
                    numbers.append(int(index))
        return sorted(numbers)

    def _shift_segments(self) -> int | None:
        """Delete the oldest segment past ``keep``, rename the others one up, the live one to 1.

        Only the segments there are are renamed, newest last, so a rotation
        costs the same whatever ``keep`` is. A crash between two renames
        leaves a number missing; the chain still links across it, which is
        what :func:`~onlooker.plugins.audit.verify` checks.
        """
        join = os.path.join
        directory = self.session_dir
        through = self.retiring()
        for index in reversed(self._rotated()):  # the oldest first: each moves to a free name
            source = join(directory, segment_name(index))
            if index >= self.keep:
                os.unlink(source)
            else:
                os.replace(source, join(directory, segment_name(index + 1)))
        os.replace(self.path, join(directory, segment_name(1)))
        return through

    def _open_live(self) -> None:
        """(Re-)open the live file if another process rotated it."""
        if self.fd >= 0 and not _same_file(self.fd, self.path):
            os.close(self.fd)
            self.fd = -1
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            self._ino = -1  # unknown until the tail is read

    def _sync_tail(self) -> None:
        """Learn the last record's seq and hash from disk, unless unchanged since our last batch."""
        stat = os.fstat(self.fd)
        if stat.st_ino == self._ino and stat.st_size == self.size:
            return  # nobody else wrote since our last batch
        self._ino, self.size = stat.st_ino, stat.st_size
        last = self._last_record() if stat.st_size else None
        if last is None:
            last = self._saved_tail()
        if last is not None:
            self.seq, self.prev = last
        elif self.seq >= 0:  # this process wrote here before: the session's files were removed
            self.removed = True  # the chain goes on from ours

    def _last_record(self) -> tuple[int, str] | None:
        """The seq and hash of the live file's last record; repairs a torn last line."""
        position = self.size
        data = b""
        while position > 0 and data.count(b"\n", 0, max(len(data) - 1, 0)) == 0:
            step = min(65536, position)
            position -= step
            data = os.pread(self.fd, step, position) + data
        if not data.endswith(b"\n"):
            data = self._repair_tail(data, position)
        last = data.rstrip(b"\n").rpartition(b"\n")[2]
        if not last:
            return None
        state = record_state(last)
        if state is None:
            self._report(
                f"the last line of {self.path} is not a record; the chain goes on from ours"
            )
        return state

    def _repair_tail(self, data: bytes, position: int) -> bytes:
        """``data`` (the end of the live file, from ``position``) with its last line made whole.

        A whole record that only lacks its newline gets it; anything else is
        cut off (a crash mid-write), its text kept in ``audit.err``.
        """
        cut = data.rfind(b"\n") + 1
        torn = data[cut:]
        if record_state(torn) is not None:
            os.write(self.fd, b"\n")
            self.size += 1
            return data + b"\n"
        self._report(
            f"removed a torn last line of {len(torn)} bytes at offset {position + cut} "
            f"of {self.path} (a crash mid-write); its text is kept here",
            error="torn_tail",
            text=torn.decode("utf-8", "backslashreplace"),
        )
        os.ftruncate(self.fd, position + cut)
        self.size = position + cut
        return data[:cut]

    def _saved_tail(self) -> tuple[int, str] | None:
        try:
            with open(os.path.join(self.session_dir, _TAIL_NAME), "rb") as handle:
                saved = json_loads(handle.read())
            return int(saved["seq"]), str(saved["hash"])
        except (OSError, ValueError, KeyError, TypeError):
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
