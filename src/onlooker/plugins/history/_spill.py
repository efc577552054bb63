"""Where events wait while the database refuses them.

Events the database cannot take go to the first place that takes them: the
spill file (beside the database by default), then a second spill file (under
the temp directory by default), then a bounded buffer in memory. Every one
is drained into the database as soon as it takes writes again, and the files
on the next start. An event the database can never take goes to the
dead-letter file instead (``_deadletters.py``).

Every event reaching this module has already been redacted, capped and
serialized by the store (see ``_redaction.py``): a spill line is the
event's stored JSON, and nothing here writes a secret in clear.

Processes sharing a spill file lock it (``flock``) while appending or
draining, so they never lose each other's lines: a drain that empties the
file removes it while still holding the lock, and an appender that finds it
removed opens the new one.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Final, TextIO, cast

from onlooker import EventValidationError, parse_event

from ._db import describe
from ._deadletters import (
    DEFAULT_MEMORY_LIMIT,
    DeadLetters,
    append_synced,
    check_private_dir,
    dead_letter_path,
    locked,
)
from ._rows import Stored, stored

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "DeadLetters",
    "Spill",
    "SpillFile",
    "Write",
    "check_private_dir",
    "dead_letter_path",
]

_CHUNK: Final = 500

Write = Callable[[Sequence[Stored]], int]


class SpillFile:
    """One JSONL file of events waiting for the database.

    ``private``: the file's directory is in a shared place and must be a
    directory of this user's alone (see :func:`check_private_dir`).
    """

    def __init__(self, path: Path, logger: logging.Logger, *, private: bool = False) -> None:
        self.path = path
        self.logger = logger
        self.private = private

    def exists(self) -> bool:
        """Whether there is something to drain."""
        return self.path.exists()

    def append(self, lines: str, wait: float | None = None) -> None:
        """Add serialized events (whole lines), synced to disk before returning; waiting at
        most ``wait`` seconds for the file's lock (``TimeoutError``), else for ever."""
        if self.private:
            check_private_dir(self.path.parent)
        append_synced(self.path, lines, wait)

    def drain(self, write: Write, dead: DeadLetters) -> int:
        """Write the spilled events with ``write``; returns how many were new.

        What ``write`` fails on stays in the file for the next drain; lines
        that are not events go to the dead-letter file (kept, never dropped).
        """
        if not self.path.exists():
            return 0
        try:
            with locked(self.path, "r+") as handle:
                return self._drain(handle, write, dead)
        except FileNotFoundError:
            return 0

    def _drain(self, handle: IO[str], write: Write, dead: DeadLetters) -> int:
        """Write the file's events, ``_CHUNK`` at a time, as they are read: memory holds one
        chunk, however many lines an outage left (a million lines read whole took GBs)."""
        raw = cast("TextIO", handle).buffer  # opened as text: read as bytes, for offsets
        new = 0
        read = 0  # bytes read so far
        kept_from = 0  # where the lines not yet written start
        skip: list[tuple[int, int]] = []  # lines after kept_from already set aside
        chunk: list[Stored] = []
        while True:
            data = raw.readline()
            begins, read = read, read + len(data)
            line = data.decode("utf-8", "surrogateescape").strip()
            if line:
                ready = self._read_line(line, dead)
                if ready is not None:
                    chunk.append(ready)
                elif chunk:  # kept with the chunk should its write fail: not set aside twice
                    skip.append((begins, read))
            if chunk and (len(chunk) >= _CHUNK or not data):
                try:
                    new += write(chunk)
                except Exception as exc:
                    self.logger.warning(
                        "history: spill file %s: the events from byte %d on still cannot be "
                        "written (%s); kept for later",
                        self.path,
                        kept_from,
                        describe(exc),
                    )
                    _keep_from(raw, kept_from, skip)
                    os.fsync(handle.fileno())
                    return new
                chunk = []
            if not chunk:
                kept_from, skip = read, []
            if not data:
                break
        self.path.unlink()
        self.logger.info("history: spill file %s: %d events written, file removed", self.path, new)
        return new

    def _read_line(self, line: str, dead: DeadLetters) -> Stored | None:
        """A spilled line as an event to write, else ``None`` (set aside as dead letter)."""
        try:
            event = parse_event(line)
        except EventValidationError as exc:
            dead.line(line, f"spill file {self.path}: not an event: {exc}")
            return None
        try:  # serialized again: the line may come from another onlooker version
            return stored(event)
        except Exception as exc:
            dead.event(event, describe(exc))
            return None


def _keep_from(raw: IO[bytes], offset: int, skip: Sequence[tuple[int, int]]) -> None:
    """Keep the file's bytes from ``offset`` on, but the ``skip`` ranges, at its start, and cut
    the rest: in place, under the file's lock (appenders wait on the same file)."""
    target = 0
    for begin, end in [*_between(offset, skip), (skip[-1][1] if skip else offset, None)]:
        source = begin
        while end is None or source < end:
            raw.seek(source)
            data = raw.read(_BLOCK if end is None else min(_BLOCK, end - source))
            if not data:
                break
            raw.seek(target)
            raw.write(data)
            source += len(data)
            target += len(data)
    if target:  # a torn last line ends with the file: the next append starts a line
        raw.seek(target - 1)
        if raw.read(1) != b"\n":
            raw.write(b"\n")
            target += 1
    raw.truncate(target)
    raw.flush()


def _between(offset: int, skip: Sequence[tuple[int, int]]) -> list[tuple[int, int | None]]:
    """The byte ranges from ``offset`` up to the last ``skip`` range, without them."""
    ranges: list[tuple[int, int | None]] = []
    for begin, end in skip:
        if begin > offset:
            ranges.append((offset, begin))
        offset = end
    return ranges


_BLOCK: Final = 1 << 20


class Spill:
    """The spill files in order of preference, then a bounded buffer in memory.

    ``append`` (without ``wait``) never raises and never loses an event while the memory buffer
    has room: the first file that takes the batch gets it.
    """

    def __init__(
        self,
        files: Sequence[SpillFile],
        dead: DeadLetters,
        logger: logging.Logger,
        *,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
    ) -> None:
        self.files: Final = tuple(files)
        self.dead = dead
        self.logger = logger
        self.memory_limit = memory_limit
        self._memory: deque[Stored] = deque()
        self._lock = threading.Lock()
        self._failing: set[Path] = set()  # files whose last append failed: said once
        self.dropped = 0
        self.place = str(self.path)
        """Where the last batch went: a spill file's path, or memory."""

    @property
    def path(self) -> Path:
        """The first spill file."""
        return self.files[0].path

    @property
    def in_memory(self) -> int:
        """Events held in memory because no spill file could be written."""
        return len(self._memory)

    def pending(self) -> bool:
        """Whether anything waits in a file or in memory."""
        return bool(self._memory) or any(file.exists() for file in self.files)

    def append(self, batch: Sequence[Stored], wait: float | None = None) -> int:
        """Keep ``batch`` for later: in the first spill file that takes it, else in memory.

        ``wait``: seconds a file's lock is waited for at most (one held by a drain that
        hangs), before the next place is tried. Returns how many events were kept (not
        counting drops).
        """
        if not batch:
            return 0
        data = "".join([ready.body + "\n" for ready in batch])
        with _within(self._lock, wait):
            for file in self.files:
                try:
                    file.append(data, wait)
                except OSError as exc:
                    if file.path not in self._failing:
                        self._failing.add(file.path)
                        self.logger.error(
                            "history: spill file %s cannot be written (%s); trying the next "
                            "location",
                            file.path,
                            describe(exc),
                        )
                    continue
                if file.path in self._failing:
                    self._failing.discard(file.path)
                    self.logger.warning("history: spill file %s takes writes again", file.path)
                self.place = str(file.path)
                return len(batch)
            self.place = "memory (no spill file can be written)"
            return len(batch) - self._hold(batch)

    def _hold(self, batch: Sequence[Stored]) -> int:
        """Keep ``batch`` in memory; returns how many (the oldest) were dropped for room."""
        if not self._memory:
            self.logger.error(
                "history: no spill file can be written (%s); holding events in memory "
                "(at most %d) until the database or a spill file takes them",
                ", ".join(str(file.path) for file in self.files),
                self.memory_limit,
            )
        self._memory.extend(batch)
        excess = len(self._memory) - self.memory_limit
        if excess <= 0:
            return 0
        for _ in range(excess):
            self._memory.popleft()
        self.dropped += excess
        self.logger.critical(
            "history: %d events lost: the database, every spill file and the memory "
            "buffer (%d events) are full",
            excess,
            self.memory_limit,
        )
        return excess

    def drain(self, write: Write) -> int:
        """Write the held events, then every spill file; returns how many were new.

        Raises what ``write`` raises for the events in memory (they stay
        held); a spill file that cannot be drained stays for the next time.
        """
        new = 0
        while True:
            with self._lock:
                chunk = [self._memory[i] for i in range(min(_CHUNK, len(self._memory)))]
            if not chunk:
                break
            new += write(chunk)
            with self._lock:  # those still first (a shed may have dropped some meanwhile)
                for ready in chunk:
                    if self._memory and self._memory[0] is ready:
                        self._memory.popleft()
        for file in self.files:
            new += file.drain(write, self.dead)
        self.dead.retry()
        return new

    def take_memory(self, wait: float | None = None) -> list[Stored]:
        """Remove and return the events held in memory (a last attempt at close); waiting
        at most ``wait`` seconds for the spill (``TimeoutError``), else for ever."""
        with _within(self._lock, wait):
            held = list(self._memory)
            self._memory.clear()
        return held


@contextmanager
def _within(lock: threading.Lock, wait: float | None) -> Iterator[None]:
    """Hold ``lock`` for the block, waiting at most ``wait`` seconds for it (else for
    ever), then ``TimeoutError``."""
    if not lock.acquire(timeout=-1 if wait is None else wait):
        raise TimeoutError(f"the spill files stayed busy for {wait:g} s")
    try:
        yield
    finally:
        lock.release()
