"""The spill file: events that could not be written, kept as JSON lines until they can be.

Appends and drains take an exclusive ``flock`` on the file (where the
platform has one), so processes sharing a spill file never lose each
other's lines: a drain that empties the file removes it while still holding
the lock, and an appender that finds it removed opens the new one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Final

from onlooker import EventValidationError, ExecutionEvent, parse_event

from ._db import describe

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process locking
    fcntl = None  # type: ignore[assignment]

__all__ = ["SpillFile"]

_CHUNK: Final = 500


@contextmanager
def _locked(path: Path, mode: str) -> Iterator[IO[str]]:
    while True:
        handle = path.open(mode, encoding="utf-8")
        try:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            if os.fstat(handle.fileno()).st_nlink == 0:  # drained and removed meanwhile
                continue
            yield handle
            return
        finally:
            handle.close()


class SpillFile:
    """A JSONL file of events waiting for the database."""

    def __init__(self, path: Path, logger: logging.Logger) -> None:
        self.path = path
        self.logger = logger

    def exists(self) -> bool:
        """Whether there is something to drain."""
        return self.path.exists()

    def append(self, batch: Sequence[ExecutionEvent]) -> None:
        """Add events, synced to disk before returning."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(event.model_dump_json() + "\n" for event in batch)
        with _locked(self.path, "a") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    def drain(self, write: Callable[[Sequence[ExecutionEvent]], int]) -> int:
        """Write the spilled events with ``write``; returns how many were new.

        What ``write`` fails on stays in the file for the next drain; lines
        that are not events move to ``<path>.bad`` (kept, never dropped).
        """
        if not self.path.exists():
            return 0
        try:
            with _locked(self.path, "r+") as handle:
                return self._drain(handle, write)
        except FileNotFoundError:
            return 0

    def _drain(self, handle: IO[str], write: Callable[[Sequence[ExecutionEvent]], int]) -> int:
        lines = [line for line in handle.read().splitlines() if line.strip()]
        parsed: list[tuple[str, ExecutionEvent]] = []
        bad: list[str] = []
        for line in lines:
            try:
                parsed.append((line, parse_event(line)))
            except EventValidationError as exc:
                self.logger.error("spill file %s: not an event, kept aside: %s", self.path, exc)
                bad.append(line)
        if bad:
            with open(f"{self.path}.bad", "a", encoding="utf-8") as aside:
                aside.write("".join(line + "\n" for line in bad))
                aside.flush()
                os.fsync(aside.fileno())
        new = 0
        kept: list[str] = []
        for start in range(0, len(parsed), _CHUNK):
            chunk = parsed[start : start + _CHUNK]
            try:
                new += write([event for _, event in chunk])
            except Exception as exc:
                self.logger.warning(
                    "spill file %s: %d events still cannot be written (%s); kept for later",
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
            self.logger.info("spill file %s: %d events written, file removed", self.path, new)
        return new
