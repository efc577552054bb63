"""Where events wait while the database refuses them, and where a poison event goes.

Events the database cannot take go to the first place that takes them: the
spill file (beside the database by default), then a second spill file (under
the temp directory by default), then a bounded buffer in memory. Every one
is drained into the database as soon as it takes writes again, and the files
on the next start. An event the database can never take (a poison event:
one that cannot be encoded, or that the database rejects on its own) goes to
the dead-letter file instead, with the reason, and every other event of its
batch is written.

Every event reaching this module has already been redacted and capped by
the store (see ``_redaction.py``): nothing here writes a secret in clear.

Processes sharing a spill file lock it (``flock``) while appending or
draining, so they never lose each other's lines: a drain that empties the
file removes it while still holding the lock, and an appender that finds it
removed opens the new one.
"""

from __future__ import annotations

import json
import logging
import os
import stat as stat_module
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Final

from onlooker import EventValidationError, ExecutionEvent, parse_event
from onlooker._shared import lock_file

from ._db import describe

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "DeadLetters",
    "Spill",
    "SpillFile",
    "check_private_dir",
    "dead_letter_path",
]

_CHUNK: Final = 500
DEFAULT_MEMORY_LIMIT: Final = 100_000
"""Events kept in memory when no spill file can be written (as the audit plugin keeps)."""

Write = Callable[[Sequence[ExecutionEvent]], int]


def dead_letter_path(spill: Path) -> Path:
    """``history.db.spill.jsonl`` -> ``history.db.spill.dead.jsonl``."""
    stem = spill.name[: -len(".jsonl")] if spill.name.endswith(".jsonl") else spill.name
    return spill.with_name(stem + ".dead.jsonl")


@contextmanager
def _locked(path: Path, mode: str) -> Iterator[IO[str]]:
    while True:
        handle = path.open(mode, encoding="utf-8")
        try:
            lock_file(handle.fileno())  # closing the handle releases it
            if os.fstat(handle.fileno()).st_nlink == 0:  # drained and removed meanwhile
                continue
            yield handle
            return
        finally:
            handle.close()


def _append_synced(path: Path, data: str) -> None:
    # 0o700: a spill or dead-letter file is redacted, but it is still someone's history
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(path, "a") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class DeadLetters:
    """Events (and spill lines) that can never be written, kept with the reason.

    One JSON object per line: ``at``, ``reason``, then ``event_id``,
    ``execution_id``, ``kind`` and ``event`` (the event's JSON form, with
    unencodable characters escaped) or ``line`` (a spill line that is not an
    event). Written to the first of ``paths`` that takes it, else kept in
    memory (at most ``limit`` entries) and tried again with the next one.
    """

    def __init__(
        self,
        paths: Sequence[Path],
        logger: logging.Logger,
        limit: int = DEFAULT_MEMORY_LIMIT,
        *,
        private: Sequence[Path] = (),
        redact: Callable[[str], str] = str,
    ) -> None:
        self.paths: Final = tuple(paths)
        self._private = frozenset(private)  # those in a shared place (see check_private_dir)
        self._redact = redact  # a reason may quote the value a database refused
        self.logger = logger
        self._limit = limit
        self._held: deque[str] = deque()
        self._lock = threading.Lock()
        self.count = 0
        self.dropped = 0

    @property
    def path(self) -> Path:
        """The first location."""
        return self.paths[0]

    def event(self, event: ExecutionEvent, reason: str, *, redacted: bool = True) -> None:
        """Keep ``event`` with ``reason``: whole if ``redacted``, else its envelope alone."""
        reason = self._redact(reason)
        entry: dict[str, Any] = {
            "at": _now(),
            "reason": reason,
            "event_id": event.event_id,
            "execution_id": event.execution_id,
            "kind": event.kind,
            "event": None,
        }
        if redacted:  # never a payload that redaction has not seen
            try:
                entry["event"] = event.model_dump(mode="json")
            except Exception as exc:  # the envelope alone, then: it still names the event
                entry["reason"] = f"{reason}; its payload cannot be converted either: {exc!r}"
        self.logger.error(
            "history: event %s (%s of execution %s) cannot be written and was set aside "
            "in the dead-letter file %s: %s",
            event.event_id,
            event.kind,
            event.execution_id,
            self.path,
            reason,
        )
        self._keep(entry)

    def line(self, text: str, reason: str) -> None:
        """Keep a spill line that is not an event with ``reason`` (both redacted here)."""
        text, reason = self._redact(text), self._redact(reason)
        self.logger.error(
            "history: a spill line is not an event; set aside in %s: %s", self.path, reason
        )
        self._keep({"at": _now(), "reason": reason, "line": text})

    def _keep(self, entry: dict[str, Any]) -> None:
        # ensure_ascii: a lone surrogate is escaped, so the line can always be encoded
        text = json.dumps(entry, ensure_ascii=True, separators=(",", ":"), default=repr) + "\n"
        with self._lock:
            self.count += 1
            self._held.append(text)
            self._write_held()

    def retry(self) -> None:
        """Write what is held in memory, if a location takes it now."""
        if self._held:
            with self._lock:
                self._write_held()

    def _write_held(self) -> None:
        data = "".join(self._held)
        for path in self.paths:
            try:
                if path in self._private:
                    check_private_dir(path.parent)
                _append_synced(path, data)
            except OSError:
                continue
            self._held.clear()
            return
        excess = len(self._held) - self._limit
        if excess > 0:
            for _ in range(excess):
                self._held.popleft()
            self.dropped += excess
            self.logger.critical(
                "history: %d dead letters lost: none of %s can be written",
                excess,
                ", ".join(map(str, self.paths)),
            )


def check_private_dir(directory: Path) -> None:
    """Raise :class:`OSError` unless ``directory`` is absent or a real directory only we can use.

    For locations in a shared place (the temp directory): a symlink or a
    directory someone else made there is not ours to write into.
    """
    try:
        stat = os.lstat(directory)
    except FileNotFoundError:
        return
    getuid = getattr(os, "getuid", None)
    if (
        not stat_module.S_ISDIR(stat.st_mode)
        or (getuid is not None and stat.st_uid != getuid())
        or stat.st_mode & 0o077
    ):
        raise PermissionError(f"{directory} is not a private directory of this user")


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

    def append(self, lines: str) -> None:
        """Add serialized events (whole lines), synced to disk before returning."""
        if self.private:
            check_private_dir(self.path.parent)
        _append_synced(self.path, lines)

    def drain(self, write: Write, dead: DeadLetters) -> int:
        """Write the spilled events with ``write``; returns how many were new.

        What ``write`` fails on stays in the file for the next drain; lines
        that are not events go to the dead-letter file (kept, never dropped).
        """
        if not self.path.exists():
            return 0
        try:
            with _locked(self.path, "r+") as handle:
                return self._drain(handle, write, dead)
        except FileNotFoundError:
            return 0

    def _drain(self, handle: IO[str], write: Write, dead: DeadLetters) -> int:
        lines = [line for line in handle.read().splitlines() if line.strip()]
        parsed: list[tuple[str, ExecutionEvent]] = []
        for line in lines:
            try:
                parsed.append((line, parse_event(line)))
            except EventValidationError as exc:
                dead.line(line, f"spill file {self.path}: not an event: {exc}")
        new = 0
        kept: list[str] = []
        for start in range(0, len(parsed), _CHUNK):
            chunk = parsed[start : start + _CHUNK]
            try:
                new += write([event for _, event in chunk])
            except Exception as exc:
                self.logger.warning(
                    "history: spill file %s: %d events still cannot be written (%s); "
                    "kept for later",
                    self.path,
                    len(parsed) - start,
                    describe(exc),
                )
                kept = [line for line, _ in parsed[start:]]
                break
        if kept:
            handle.seek(0)
            handle.write("".join(line + "\n" for line in kept))
            handle.truncate()
            handle.flush()
            os.fsync(handle.fileno())
        else:
            self.path.unlink()
            self.logger.info(
                "history: spill file %s: %d events written, file removed", self.path, new
            )
        return new


class Spill:
    """The spill files in order of preference, then a bounded buffer in memory.

    ``append`` never raises and never loses an event while the memory buffer
    has room: the first file that takes the batch gets it. An event that
    cannot even be serialized goes to the dead letters.
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
        self._memory: deque[ExecutionEvent] = deque()
        self._lock = threading.Lock()
        self._failing: set[Path] = set()  # files whose last append failed: said once
        self.dropped = 0

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

    def append(self, batch: Sequence[ExecutionEvent]) -> int:
        """Keep ``batch`` for later: in the first spill file that takes it, else in memory.

        Returns how many events were kept (not counting dead letters or drops).
        """
        lines: list[str] = []
        events: list[ExecutionEvent] = []
        for event in batch:
            try:
                lines.append(event.model_dump_json() + "\n")
            except Exception as exc:  # cannot be encoded: the database cannot take it either
                self.dead.event(event, f"cannot be serialized: {exc}")
                continue
            events.append(event)
        if not events:
            return 0
        data = "".join(lines)
        with self._lock:
            for file in self.files:
                try:
                    file.append(data)
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
                return len(events)
            return len(events) - self._hold(events)

    def _hold(self, events: list[ExecutionEvent]) -> int:
        """Keep ``events`` in memory; returns how many (the oldest) were dropped for room."""
        if not self._memory:
            self.logger.error(
                "history: no spill file can be written (%s); holding events in memory "
                "(at most %d) until the database or a spill file takes them",
                ", ".join(str(file.path) for file in self.files),
                self.memory_limit,
            )
        self._memory.extend(events)
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
            with self._lock:
                for _ in chunk:
                    self._memory.popleft()
        for file in self.files:
            new += file.drain(write, self.dead)
        self.dead.retry()
        return new

    def take_memory(self) -> list[ExecutionEvent]:
        """Remove and return the events held in memory (a last attempt at close)."""
        with self._lock:
            held = list(self._memory)
            self._memory.clear()
        return held
