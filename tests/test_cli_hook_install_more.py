"""``hook install|uninstall|status`` and the hook process: faults found by an audit.

Settings keep their permissions and symbolic links, only commands onlooker
writes are its own, ``disableAllHooks`` is a problem, and the hook exits 0
with stdin or stdout closed.
"""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from onlooker import ToolCallFinished
from onlooker._cli._app import app
from onlooker.plugins import audit
from test_cli_hook_support import EXECUTABLE, SESSION, bash

runner = CliRunner()
COMMAND = "/opt/venv/bin/onlooker hook claude-code --audit-dir /var/audit"
SECRETS: dict[str, Any] = {"env": {"GITHUB_TOKEN": "ghp_not_for_others"}, "model": "opus"}


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def ok(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return str(result.output)


def commands(settings: Path) -> set[str]:
    data = json.loads(settings.read_text())
    return {
        hook["command"]
        for groups in data.get("hooks", {}).values()
        for group in groups
        for hook in group["hooks"]
    }


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class TestTheSettingsFile:
    def test_a_private_file_stays_private(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(SECRETS))
        settings.chmod(0o600)
        ok("hook", "install", "--settings", str(settings), "--command", COMMAND)
        assert mode(settings) == 0o600
        assert commands(settings) == {COMMAND}
        ok("hook", "uninstall", "--settings", str(settings))
        assert mode(settings) == 0o600
        assert json.loads(settings.read_text()) == SECRETS
        assert {mode(backup) for backup in tmp_path.glob("*.bak")} == {0o600}
        assert not list(tmp_path.glob("*onlooker-tmp"))

    def test_a_symbolic_link_is_written_through(self, project: Path) -> None:
        dotfile = project / "dotfiles" / "claude-settings.json"
        dotfile.parent.mkdir()
        dotfile.write_text(json.dumps(SECRETS))
        dotfile.chmod(0o600)
        link = project / "home" / ".claude" / "settings.json"
        link.parent.mkdir(parents=True)
        link.symlink_to(dotfile)
        ok("hook", "install", "--user", "--command", COMMAND)
        assert link.is_symlink() and link.readlink() == dotfile
        assert commands(dotfile) == {COMMAND} and mode(dotfile) == 0o600
        assert "nothing changed" in ok("hook", "install", "--user", "--command", COMMAND)
        ok("hook", "uninstall", "--user")
        assert link.is_symlink() and json.loads(dotfile.read_text()) == SECRETS
        assert not list(dotfile.parent.glob("*onlooker-tmp"))


class TestOursOnly:
    @pytest.mark.parametrize(
        ("theirs", "ours"),
        [
            ("notify-send 'Claude finished (see onlooker docs on hook claude-code)'",
             "onlooker hook claude-code"),
            ("echo onlooker hook claude-code >> ~/hooks.log",
             "ONLOOKER_AUDIT_DISABLE=0 /opt/bin/onlooker hook claude-code --history"),
            ("/opt/not-onlooker hook claude-code",
             "'/my venv/bin/onlooker' hook claude-code --shorten-paths"),
            ("onlooker hook claude-code-lint", "/opt/wrap.sh # onlooker hook claude-code"),
            ("grep -c x log # onlooker hook claude-code was here",
             "/opt/wrap.sh \\\n# onlooker hook claude-code"),
        ],
    )  # fmt: skip
    def test_a_command_that_mentions_the_hook_is_not_touched(
        self, tmp_path: Path, theirs: str, ours: str
    ) -> None:
        settings = tmp_path / "settings.json"
        foreign = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": theirs}]}]}}
        settings.write_text(json.dumps(foreign))
        ok("hook", "install", "--settings", str(settings), "--command", ours)
        assert commands(settings) == {theirs, ours}
        ok("hook", "install", "--settings", str(settings), "--command", COMMAND)
        assert commands(settings) == {theirs, COMMAND}  # ours replaced, theirs kept
        ok("hook", "uninstall", "--settings", str(settings))
        assert json.loads(settings.read_text()) == foreign

    def test_a_custom_command_that_only_mentions_the_hook_gets_the_marker(
        self, tmp_path: Path
    ) -> None:
        settings = tmp_path / "settings.json"
        command = "notify-send 'onlooker hook claude-code'"
        ok("hook", "install", "--settings", str(settings), "--command", command)
        assert commands(settings) == {f"{command} # onlooker hook claude-code"}
        ok("hook", "uninstall", "--settings", str(settings))
        assert json.loads(settings.read_text()) == {}


class TestStatusWithHooksDisabled:
    def test_disable_all_hooks_is_a_problem(self, project: Path) -> None:
        ok("hook", "install", "--local", "--command", "onlooker hook claude-code")
        user = project / "home" / ".claude" / "settings.json"
        user.parent.mkdir(parents=True)
        user.write_text(json.dumps({"disableAllHooks": True}))
        result = invoke("hook", "status")
        assert result.exit_code == 1
        output = " ".join(result.output.split())
        assert "installed, problem" in output
        assert f"disableAllHooks is true in {user}" in output
        report = json.loads(invoke("hook", "status", "--json").output)
        assert report["ok"] is False
        # The most specific file decides, as in Claude Code: local turns hooks back on.
        local = project / ".claude" / "settings.local.json"
        local.write_text(json.dumps({**json.loads(local.read_text()), "disableAllHooks": False}))
        assert "installed, ok" in ok("hook", "status")


class TestLaunchersOfTheHook:
    @pytest.mark.parametrize(
        "command",
        [
            "uvx onlooker hook claude-code",
            "python -m onlooker hook claude-code --audit-dir /var/audit",
            "pipx run onlooker hook claude-code",
            "env X=1 onlooker hook claude-code",
        ],
    )
    def test_an_install_launched_another_way_is_ours(self, tmp_path: Path, command: str) -> None:
        """Older installs were recognised by their words: each is still ours (re-installing
        added a second entry, and every event was recorded twice)."""
        settings = tmp_path / "settings.json"
        ok("hook", "install", "--settings", str(settings), "--command", command)
        ok("hook", "install", "--settings", str(settings), "--command", command)
        assert commands(settings) == {command}
        ok("hook", "uninstall", "--settings", str(settings))
        assert commands(settings) == set()


class TestStatusChecksTheExecutable:
    def test_after_environment_words_too(self, project: Path) -> None:
        """``FOO=1 /missing/onlooker hook claude-code`` is ours, and its executable missing."""
        ok("hook", "install", "--local", "--command", "FOO=1 /missing/onlooker hook claude-code")
        result = invoke("hook", "status")
        assert result.exit_code == 1
        assert "/missing/onlooker is missing" in " ".join(result.output.split())


def closed(stream: str, payload: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    """The hook as a real process, started with ``stream`` (``<&-`` or ``>&-``) closed."""
    assert EXECUTABLE is not None
    script = f'"$0" hook claude-code "$@" {stream}'
    return subprocess.run(
        ["sh", "-c", script, EXECUTABLE, *extra],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


class TestClosedStreams:
    def test_stdin_closed_exits_0_and_is_logged(self, tmp_path: Path) -> None:
        audit_dir = tmp_path / "audit"
        result = closed("<&-", bash("toolu_1", "ls"), "--audit-dir", str(audit_dir))
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
        (line,) = (audit_dir / "audit.err").read_text().splitlines()
        assert json.loads(line)["message"] == "cannot read the hook input: stdin is closed"

    def test_stdin_closed_denies_with_rules(self, tmp_path: Path) -> None:
        rules = tmp_path / "deny.txt"
        rules.write_text("@defaults\n")
        result = closed(
            "<&-", bash("toolu_1", "ls"), "--audit-dir", str(tmp_path / "a"),
            "--deny-commands", str(rules),
        )  # fmt: skip
        assert (result.returncode, result.stderr) == (0, "")
        decision = json.loads(result.stdout)["hookSpecificOutput"]
        assert decision["permissionDecision"] == "deny"  # fail-closed: no input to judge
        assert "stdin is closed" in decision["permissionDecisionReason"]

    def test_stdout_closed_still_records(self, tmp_path: Path) -> None:
        rules = tmp_path / "deny.txt"
        rules.write_text("@defaults\n")
        audit_dir = tmp_path / "audit"
        result = closed(
            ">&-", bash("toolu_1", "sudo ls"), "--audit-dir", str(audit_dir),
            "--deny-commands", str(rules),
        )  # fmt: skip
        assert (result.returncode, result.stderr) == (0, "")
        finished = [e for e in audit.tail(audit_dir / SESSION) if isinstance(e, ToolCallFinished)]
        assert [e.status for e in finished] == ["blocked"]  # the decision stands, unseen
        assert not (audit_dir / "audit.err").exists()
