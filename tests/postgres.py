"""A throwaway PostgreSQL cluster for tests.

``cluster_or_skip()`` starts one cluster per test session (``initdb`` in a
temporary directory, ``pg_ctl`` on a free loopback port, its unix socket in
that directory) and stops it at exit. Without PostgreSQL's binaries it skips
the test with the reason, unless ``ONLOOKER_REQUIRE_POSTGRES=1``, which
turns the skip into a failure. PostgreSQL refuses to run as root, so as root
the server runs as the ``postgres`` user (created when missing).
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

import pytest

__all__ = ["PostgresCluster", "cluster_or_skip", "find_bin_dir"]

_USER: Final = "postgres"
_counter = itertools.count()


def find_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or ``None``."""
    on_path = shutil.which("initdb")
    if on_path is not None and shutil.which("pg_ctl") is not None:
        return Path(on_path).resolve().parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", _USER, "--", *argv]


def _ensure_server_user() -> None:
    if os.geteuid() != 0:
        return
    try:
        pwd.getpwnam(_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _USER],
            check=True,
            capture_output=True,
        )


@dataclass
class PostgresCluster:
    """A running cluster; ``create_database()`` gives each test its own database."""

    bin_dir: Path
    data_dir: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql+psycopg://`` URL over TCP on loopback."""
        return f"postgresql+psycopg://{_USER}@127.0.0.1:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres") -> None:
        """Run one statement in autocommit mode."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=_USER, dbname=database, autocommit=True
        ) as conn:
            conn.execute(statement.encode())  # test-controlled SQL

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        name = f"t{os.getpid()}_{next(_counter)}"
        self.sql(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database ``url`` names, disconnecting its sessions."""
        self.sql(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server and delete its files."""
        subprocess.run(
            _as_server_user(
                [str(self.bin_dir / "pg_ctl"), "stop", "-D", str(self.data_dir / "data"),
                 "-m", "immediate", "-w"]
            ),
            capture_output=True,
            check=False,
        )  # fmt: skip
        shutil.rmtree(self.data_dir, ignore_errors=True)


def _start(bin_dir: Path) -> PostgresCluster:
    _ensure_server_user()
    base = Path(tempfile.mkdtemp(prefix="onlooker-pg-"))
    if os.geteuid() == 0:
        entry = pwd.getpwnam(_USER)
        os.chown(base, entry.pw_uid, entry.pw_gid)
    data = base / "data"
    initdb = subprocess.run(
        _as_server_user(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", _USER, "--auth=trust",
             "--no-sync", "--encoding=UTF8", "--locale=C"]
        ),
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    if initdb.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {initdb.stderr or initdb.stdout}")
    last_error = ""
    for _attempt in range(3):
        port = _free_port()
        options = (
            f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        started = subprocess.run(
            _as_server_user(
                [str(bin_dir / "pg_ctl"), "start", "-D", str(data), "-w", "-t", "30",
                 "-l", str(base / "server.log"), "-o", options]
            ),
            capture_output=True,
            text=True,
            check=False,
        )  # fmt: skip
        if started.returncode == 0:
            cluster = PostgresCluster(bin_dir=bin_dir, data_dir=base, port=port)
            atexit.register(cluster.stop)
            return cluster
        log = base / "server.log"
        last_error = (started.stderr or "") + (log.read_text() if log.exists() else "")
    shutil.rmtree(base, ignore_errors=True)
    raise RuntimeError(f"pg_ctl start failed: {last_error[-2000:]}")


_cluster: PostgresCluster | None = None
_failure: str | None = None


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("ONLOOKER_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required (ONLOOKER_REQUIRE_POSTGRES=1): {reason}")
    pytest.skip(f"PostgreSQL not available: {reason}")


def cluster_or_skip() -> PostgresCluster:
    """The session's cluster, started on first use; skips (or fails) when impossible."""
    global _cluster, _failure
    if _cluster is not None:
        return _cluster
    if _failure is not None:
        _unavailable(_failure)
    bin_dir = find_bin_dir()
    if bin_dir is None:
        _failure = "initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin"
        _unavailable(_failure)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _failure = "psycopg is not installed (pip install 'onlooker[postgres]')"
        _unavailable(_failure)
    try:
        _cluster = _start(bin_dir)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        _failure = str(exc)
        _unavailable(_failure)
    return _cluster
