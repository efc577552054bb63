"""Where a poison event goes: the dead-letter file, with the reason.

An event the database can never take (one that cannot be encoded, or that
the database rejects on its own) is set aside here, and every other event
of its batch is written. So is a spill line that is not an event. The
file helpers here are shared with the spill files (``_spill.py``): appends
are locked (``flock``) and synced, and a location in a shared place (the
temp directory) must be a private directory of this user's.
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

from onlooker import ExecutionEvent
from onlooker._shared import json_loads, lock_file, lock_file_within, noting_long_ints
from onlooker.plugins.audit._events import json_form  # keys with lone surrogates kept

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "DeadLetters",
    "append_synced",
    "check_private_dir",
    "dead_letter_path",
    "locked",
]

DEFAULT_MEMORY_LIMIT: Final = 100_000
"""Entries kept in memory when no file can be written (as the audit plugin keeps)."""


def dead_letter_path(spill: Path) -> Path:
    """``history.db.spill.jsonl`` -> ``history.db.spill.dead.jsonl``."""
    stem = spill.name[: -len(".jsonl")] if spill.name.endswith(".jsonl") else spill.name
    return spill.with_name(stem + ".dead.jsonl")


@contextmanager
def locked(path: Path, mode: str, wait: float | None = None) -> Iterator[IO[str]]:
    """``path`` open and locked (``flock``); opened again if it was removed meanwhile.

    ``wait``: seconds to wait for the lock at most (else for ever), then ``TimeoutError``.
    """
    while True:
        handle = path.open(mode, encoding="utf-8")
        try:
            if wait is None:
                lock_file(handle.fileno())  # closing the handle releases it
            elif not lock_file_within(handle.fileno(), wait):
                raise TimeoutError(f"{path} stayed locked for {wait:g} s")
            if os.fstat(handle.fileno()).st_nlink == 0:  # drained and removed meanwhile
                continue
            yield handle
            return
        finally:
            handle.close()


def append_synced(path: Path, data: str, wait: float | None = None) -> None:
    """Append ``data`` under the lock (waiting at most ``wait`` seconds for it) and sync it
    to disk (directories made ``0o700``)."""
    # 0o700: a spill or dead-letter file is redacted, but it is still someone's history
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with locked(path, "a", wait) as handle:
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
        self._ids: set[str] | None = None  # the event ids set aside so far, read on first use
        self.count = 0
        self.dropped = 0

    @property
    def path(self) -> Path:
        """The first location."""
        return self.paths[0]

    def event(self, event: ExecutionEvent, reason: str, *, redacted: bool = True) -> None:
        """Keep ``event`` with ``reason``: whole if ``redacted``, else its envelope alone.

        An event set aside before (a trail replayed twice) is not kept again.
        """
        with self._lock:
            known = self._known_ids()
            if event.event_id in known:
                self.logger.info(
                    "history: event %s is in the dead-letter file %s already",
                    event.event_id,
                    self.path,
                )
                return
            known.add(event.event_id)
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
                entry["event"] = json_form(event)
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

    def _known_ids(self) -> set[str]:
        """The event ids in the dead-letter files (read once; the caller holds the lock)."""
        if self._ids is None:
            self._ids = set()
            for path in self.paths:
                try:
                    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
                except OSError:
                    continue
                for line in lines:
                    try:
                        event_id = json_loads(line).get("event_id")
                    except (ValueError, AttributeError):
                        continue
                    if isinstance(event_id, str):
                        self._ids.add(event_id)
        return self._ids

    def line(self, text: str, reason: str) -> None:
        """Keep a spill line that is not an event with ``reason`` (both redacted here)."""
        text, reason = self._redact(text), self._redact(reason)
        self.logger.error(
            "history: a spill line is not an event; set aside in %s: %s", self.path, reason
        )
        self._keep({"at": _now(), "reason": reason, "line": text})

    def _keep(self, entry: dict[str, Any]) -> None:
        # ensure_ascii: a lone surrogate is escaped, so the line can always be encoded
        text = _ascii_json(entry) + "\n"
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
                append_synced(path, data)
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


def _ascii_json(value: Any) -> str:
    """``value``'s JSON, escaped to ASCII (a lone surrogate can always be encoded), any
    other object by its ``repr``, an int too long for ``str()`` as a string saying so."""
    try:
        return _ascii_json_once(value)
    except ValueError as exc:
        return noting_long_ints(exc, value, _ascii_json_once)


def _ascii_json_once(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=repr)
