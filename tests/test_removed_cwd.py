"""A process whose working directory was removed still records where it was told to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import onlooker
from onlooker.plugins import audit, history
from onlooker.plugins.audit import Redactor


@onlooker.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def program(ctx: onlooker.ExecutionContext) -> int:
    return int(await ctx.call("add", a=1, b=2))


@pytest.fixture
def removed_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The working directory is removed under the process (a daemon, a test's temp dir)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(FileNotFoundError):
        os.getcwd()


@pytest.mark.usefixtures("removed_cwd")
def test_a_redactor_needs_no_working_directory() -> None:
    plain = Redactor(environ={})
    assert plain.redact({"password": "hunter22"}) == {"password": "[REDACTED:secret_field]"}
    # shortening paths: every absolute path is outside a working directory that is gone
    shorten = Redactor(shorten_paths=True, home="/home/alice", environ={})
    assert (
        shorten.redact_text("cat /etc/ssl/key.pem /home/alice/.ssh/id") == "cat key.pem ~/.ssh/id"
    )


@pytest.mark.anyio
@pytest.mark.usefixtures("removed_cwd")
async def test_history_and_audit_record_with_absolute_paths(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    recorder = history.plugin(url)
    trail_plugin = audit.plugin(directory=tmp_path / "audit", session_id="s1")
    async with onlooker.ExecutionEngine(tools=[add], plugins=[recorder, trail_plugin]) as engine:
        result = await engine.execute(program)
        trail = engine.extension(trail_plugin)
    assert result.status == "completed" and result.value == 3
    report = audit.verify(trail.path)
    assert report.ok and report.records == 4
    async with history.open(url, read_only=True) as store:
        assert len(await store.events(result.execution_id)) == 4


@pytest.mark.anyio
@pytest.mark.usefixtures("removed_cwd")
@pytest.mark.parametrize(
    ("url", "needed"),
    [(None, "the default history database"), ("postgresql+psycopg://u@db/x", "the default spill")],
)
async def test_a_default_under_the_removed_directory_is_named(url: str | None, needed: str) -> None:
    recorder = history.plugin() if url is None else history.plugin(url)
    with pytest.raises(onlooker.HistoryError, match=f"{needed}.*working directory, which is gone"):
        async with onlooker.ExecutionEngine(tools=[add], plugins=[recorder]):
            pass
