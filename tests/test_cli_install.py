"""``onlooker hook install`` / ``uninstall``: idempotent, other hooks kept, a backup first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from onlooker._cli._app import app
from onlooker._cli._claude_hook import HOOK_EVENTS

runner = CliRunner()

OTHER_HOOKS: dict[str, Any] = {
    "PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": "./check-bash.sh"}]},
    ],
    "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
}
SETTINGS: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls)"]},
    "hooks": OTHER_HOOKS,
}


def install(settings: Path, *extra: str) -> str:
    result = runner.invoke(
        app,
        [
            "hook",
            "install",
            "--settings",
            str(settings),
            "--command",
            "onlooker hook claude-code",
            *extra,
        ],
    )
    assert result.exit_code == 0, result.output
    return result.output


def read(settings: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(settings.read_text())
    return data


def ours(data: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (event, hook["command"])
        for event, groups in data.get("hooks", {}).items()
        for group in groups
        for hook in group["hooks"]
        if "claude-code" in hook["command"]
    ]


class TestInstall:
    def test_adds_every_event_and_keeps_other_settings(self, tmp_path: Path) -> None:
        settings = tmp_path / ".claude" / "settings.json"
        settings.parent.mkdir()
        settings.write_text(json.dumps(SETTINGS))
        install(settings)
        data = read(settings)
        assert sorted(event for event, _ in ours(data)) == sorted(HOOK_EVENTS)
        assert data["model"] == "opus"
        assert data["permissions"] == SETTINGS["permissions"]
        assert data["hooks"]["PreToolUse"][0] == OTHER_HOOKS["PreToolUse"][0]
        assert data["hooks"]["Stop"] == OTHER_HOOKS["Stop"]
        assert {
            "matcher": "*",
            "hooks": [{"type": "command", "command": "onlooker hook claude-code"}],
        } in data["hooks"]["PostToolUse"]

    def test_makes_a_backup_before_rewriting(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(SETTINGS))
        output = install(settings)
        backup = tmp_path / "settings.json.bak"
        assert json.loads(backup.read_text()) == SETTINGS
        assert str(backup) in output

    def test_twice_equals_once(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(SETTINGS))
        install(settings)
        once = settings.read_text()
        output = install(settings)
        assert settings.read_text() == once
        assert "nothing changed" in output

    def test_reinstall_with_other_options_replaces_ours(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        install(settings)
        install(settings, "--command", "/opt/bin/onlooker hook claude-code --audit-dir /var/audit")
        commands = {command for _, command in ours(read(settings))}
        assert commands == {"/opt/bin/onlooker hook claude-code --audit-dir /var/audit"}

    def test_creates_a_missing_file(self, tmp_path: Path) -> None:
        settings = tmp_path / "new" / "settings.json"
        install(settings)
        assert len(ours(read(settings))) == len(HOOK_EVENTS)
        assert not (tmp_path / "new" / "settings.json.bak").exists()

    def test_default_command_is_absolute_and_carries_options(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        result = runner.invoke(
            app,
            [
                "hook", "install", "--settings", str(settings),
                "--audit-dir", str(tmp_path / "audit"), "--deny-commands", str(tmp_path / "deny.txt"),
            ],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        commands = {command for _, command in ours(read(settings))}
        assert len(commands) == 1
        command = commands.pop()
        assert f"--audit-dir {tmp_path / 'audit'}" in command
        assert f"--deny-commands {tmp_path / 'deny.txt'}" in command
        executable = Path(command.split()[0])
        assert executable.is_absolute() and executable.name == "onlooker"

    def test_command_is_absolute_without_an_active_venv(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        script = Path(sys.executable).parent / "onlooker"
        subprocess.run(
            [str(script), "hook", "install", "--settings", str(settings)],
            env={**os.environ, "PATH": "/usr/bin:/bin"},
            check=True,
            capture_output=True,
            timeout=60,
        )
        commands = {command for _, command in ours(read(settings))}
        assert commands == {f"{script} hook claude-code"}

    def test_invalid_json_is_an_error_and_left_alone(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text("{not json")
        result = runner.invoke(app, ["hook", "install", "--settings", str(settings)])
        assert result.exit_code == 1
        assert "not valid JSON" in result.output
        assert settings.read_text() == "{not json"


class TestUninstall:
    def test_removes_only_ours(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(SETTINGS))
        install(settings)
        result = runner.invoke(app, ["hook", "uninstall", "--settings", str(settings)])
        assert result.exit_code == 0, result.output
        assert read(settings) == SETTINGS

    def test_removes_the_hooks_key_it_created(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps({"model": "opus"}))
        install(settings)
        runner.invoke(app, ["hook", "uninstall", "--settings", str(settings)])
        assert read(settings) == {"model": "opus"}

    def test_nothing_installed_changes_nothing(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(SETTINGS))
        result = runner.invoke(app, ["hook", "uninstall", "--settings", str(settings)])
        assert result.exit_code == 0
        assert "nothing changed" in result.output
        assert not (tmp_path / "settings.json.bak").exists()
        missing = runner.invoke(
            app, ["hook", "uninstall", "--settings", str(tmp_path / "nope.json")]
        )
        assert missing.exit_code == 0
