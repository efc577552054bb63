"""History's SQLite checkpoints, run beside the writer (``_checkpoint.py``)."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from onlooker.plugins import history
from onlooker.plugins.history._checkpoint import BACKSTOP_PAGES, CHECKPOINT_CHARS, Checkpointer
from test_history_support import execution_events

LOGGER = logging.getLogger("test")


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """A WAL database whose log holds 100 rows of 10 KB the file does not hold yet."""
    path = tmp_path / "h.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (v TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("y" * 10_000,)] * 100)
    yield path, conn
    conn.close()


def test_a_checkpoint_copies_the_log_into_the_file(
    logged: tuple[Path, sqlite3.Connection],
) -> None:
    path, conn = logged
    before = path.stat().st_size
    checkpointer = Checkpointer(path, LOGGER)
    connection = checkpointer._checkpoint(None)
    assert connection is not None
    connection.close()
    assert before < 100_000 < path.stat().st_size  # the rows are in the file now
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (100,)


def test_it_never_creates_a_removed_file(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    assert Checkpointer(path, LOGGER)._checkpoint(None) is None
    assert not path.exists()


def test_close_stops_the_thread_and_later_nudges_do_nothing(
    logged: tuple[Path, sqlite3.Connection],
) -> None:
    path, _ = logged
    checkpointer = Checkpointer(path, LOGGER)
    checkpointer.nudge()
    thread = checkpointer._thread
    assert thread is not None and thread.is_alive()
    checkpointer.close()
    assert not thread.is_alive()
    checkpointer.nudge()
    assert checkpointer._thread is thread
    assert not thread.is_alive()


def test_a_reconnect_lets_go_of_the_removed_file_at_once(
    logged: tuple[Path, sqlite3.Connection],
) -> None:
    path, conn = logged
    conn.close()  # SQLite keeps a closed descriptor open while another connection locks the file
    before = _open_on(path)
    checkpointer = Checkpointer(path, LOGGER)
    checkpointer.nudge()
    for _ in range(500):  # the thread opens its connection with its first checkpoint
        if _open_on(path) > before:
            break
        time.sleep(0.01)
    assert _open_on(path) > before
    checkpointer.reconnect()
    for _ in range(500):
        if _open_on(path) == before:
            break
        time.sleep(0.01)
    assert _open_on(path) == before  # closed without waiting for the next checkpoint
    checkpointer.close()


def _open_on(path: Path) -> int:
    """How many of this process's descriptors are open on ``path`` (Linux's /proc)."""
    opened = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            if Path(os.readlink(fd)) == path.resolve():
                opened += 1
        except OSError:
            continue
    return opened


def test_it_checkpoints_once_enough_was_committed(
    logged: tuple[Path, sqlite3.Connection],
) -> None:
    path, _ = logged
    checkpointer = Checkpointer(path, LOGGER)
    started = []
    for chars in (CHECKPOINT_CHARS - 1, 1):
        checkpointer.committed(chars)
        started.append(checkpointer._thread is not None)
    checkpointer.close()
    assert started == [False, True]  # none after a small batch; one once enough was committed


@pytest.mark.anyio
async def test_the_writer_checkpoints_only_past_the_backstop(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    events = execution_events("a", tools=[("t", "completed", 1.0)])
    async with history.open(f"sqlite:///{path}") as store:
        assert await store.write_events(events) == len(events)
        pages = await store.query(
            lambda conn: conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one()
        )
    assert pages == BACKSTOP_PAGES
    async with history.open(f"sqlite:///{path}") as store:  # closing checkpointed everything
        assert await store.events("a") == events
    assert not path.with_name("h.db-wal").exists()
