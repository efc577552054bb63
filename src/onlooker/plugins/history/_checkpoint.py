"""Checkpoints of an SQLite file database, run beside the writer rather than inside its commits.

In WAL mode every committed page is written twice: into the write-ahead log
when the batch commits, and into the database file at a checkpoint. SQLite
runs the checkpoint inside the commit that takes the log past 1,000 pages,
syncing both files, so with large values (a 20,000-character argument is
stored in its event and in its tool call's row) the writer spends more time
checkpointing than writing. Here a thread of its own checkpoints, on its own
connection, as often as SQLite would (about every 1,000 log pages, counted
from the JSON committed), while the writer prepares the next batch; both
release the GIL while SQLite works. The checkpoint is
``PASSIVE``: it never blocks a writer and never waits for a reader. The
writer's own automatic checkpoint stays on as a backstop, at a longer log
(:data:`BACKSTOP_PAGES`), should this thread fall behind or fail.

Nothing is lost when a checkpoint fails: the pages stay in the log, where
readers find them, until a later checkpoint (or the last connection, at
close) copies them. The connection opens the file read-write without ever
creating it, so a database file removed while open is recreated by the
store alone (``_db.py``).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Final

__all__ = ["BACKSTOP_PAGES", "Checkpointer"]

BACKSTOP_PAGES: Final = 10_000
"""Log pages past which a committing writer checkpoints by itself (SQLite's default: 1,000)."""

CHECKPOINT_CHARS: Final = 2 * 1024 * 1024
"""Characters of event JSON committed between two checkpoints: a log of about 1,000 pages.

(A tool call's arguments are stored twice, in its event and its row.)
"""


class Checkpointer:
    """Checkpoints the SQLite file at ``path`` in a thread of its own, when enough was committed."""

    def __init__(self, path: Path, logger: logging.Logger) -> None:
        self.path = path
        self.logger = logger
        self._lock = threading.Lock()
        self._wanted = threading.Condition(self._lock)
        self._pending = False
        self._stopping = False
        self._reconnect = False
        self._thread: threading.Thread | None = None
        self._committed = 0  # characters committed since the last nudge

    def committed(self, chars: int) -> None:
        """A batch of ``chars`` characters of event JSON was committed: checkpoint once enough were.

        As often as SQLite's own automatic checkpoint would: a checkpoint
        syncs both files, too costly after every small batch.
        """
        self._committed += chars
        if self._committed >= CHECKPOINT_CHARS:
            self._committed = 0
            self.nudge()

    def nudge(self) -> None:
        """Ask for a checkpoint soon; starts the thread the first time."""
        with self._lock:
            if self._stopping:
                return
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"onlooker history checkpoint ({self.path})", daemon=True
                )
                self._thread.start()
            self._wanted.notify()

    def reconnect(self) -> None:
        """The file was replaced: let go of the old one now; the next checkpoint opens the new."""
        with self._lock:
            self._reconnect = True
            self._wanted.notify()

    def close(self) -> None:
        """Stop the thread (after the checkpoint under way, if any) and close its connection."""
        with self._lock:
            self._stopping = True
            self._wanted.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        try:
            while True:
                with self._lock:
                    while not (self._pending or self._stopping or self._reconnect):
                        self._wanted.wait()
                    if self._stopping:
                        return
                    if self._reconnect and connection is not None:
                        connection.close()  # it holds the removed file open
                        connection = None
                    self._reconnect = False
                    wanted, self._pending = self._pending, False
                if wanted:
                    connection = self._checkpoint(connection)
        finally:
            if connection is not None:
                connection.close()

    def _checkpoint(self, connection: sqlite3.Connection | None) -> sqlite3.Connection | None:
        """One passive checkpoint; the connection to use next time (``None``: open one)."""
        try:
            if connection is None:
                uri = f"{self.path.resolve().as_uri()}?mode=rw"  # never creates the file
                connection = sqlite3.connect(uri, uri=True, timeout=0)
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:  # nothing lost: the log keeps the pages
            self.logger.debug("history: checkpoint of %s not done: %s", self.path, exc)
            if connection is not None:
                connection.close()
            return None
        return connection
