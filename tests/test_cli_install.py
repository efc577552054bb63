"""``onlooker hook install`` / ``uninstall`` / ``status``: idempotent, other hooks kept, backups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from onlooker._cli._app import app
from onlooker._cli._claude_session import HOOK_EVENTS
from onlooker._cli._settings import MATCHED_EVENTS

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
COMMAND = "onlooker hook claude-code"


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def install(settings: Path, *extra: str) -> str:
    result = invoke("hook", "install", "--settings", str(settings), "--command", COMMAND, *extra)
    assert result.exit_code == 0, result.output
    return str(result.output)


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
        assert data["hooks"]["Stop"][0] == OTHER_HOOKS["Stop"][0]
        for event in HOOK_EVENTS:
            entry: dict[str, Any] = {"hooks": [{"type": "command", "command": COMMAND}]}
            if event in MATCHED_EVENTS:
                entry = {"matcher": "*", **entry}
            assert entry in data["hooks"][event], event

    def test_every_change_keeps_a_timestamped_backup(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(SETTINGS))
        first = install(settings)
        install(settings, "--command", "/opt/onlooker hook claude-code --audit-dir /a")
        backups = sorted(tmp_path.glob("settings.json.*.bak"))
        assert len(backups) == 2  # none overwritten
        assert json.loads(backups[0].read_text()) == SETTINGS
        assert str(backups[0]) in " ".join(first.split())
        assert all(b.name.removeprefix("settings.json.")[:8].isdigit() for b in backups)

    def test_twice_equals_once(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(SETTINGS))
        install(settings)
        once = settings.read_text()
        output = install(settings)
        assert settings.read_text() == once
        assert "nothing changed" in output
        assert len(list(tmp_path.glob("*.bak"))) == 1

    def test_reinstall_with_other_options_replaces_ours(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        install(settings)
        install(settings, "--command", "/opt/bin/onlooker hook claude-code --audit-dir /var/audit")
        commands = {command for _, command in ours(read(settings))}
        assert commands == {"/opt/bin/onlooker hook claude-code --audit-dir /var/audit"}

    def test_creates_a_missing_file_without_a_backup(self, tmp_path: Path) -> None:
        settings = tmp_path / "new" / "settings.json"
        install(settings)
        assert len(ours(read(settings))) == len(HOOK_EVENTS)
        assert not list((tmp_path / "new").glob("*.bak"))

    def test_default_command_is_absolute_and_carries_options(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        rules = tmp_path / "deny.txt"
        rules.write_text("glob:sudo *\n")
        result = invoke(
            "hook", "install", "--settings", str(settings), "--audit-dir", str(tmp_path / "audit"),
            "--deny-commands", str(rules), "--history",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        (command,) = {command for _, command in ours(read(settings))}
        assert f"--audit-dir {tmp_path / 'audit'}" in command
        assert f"--deny-commands {rules}" in command
        assert command.endswith(" --history")
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

    @pytest.mark.parametrize("name", ["python3", "pypy3"])
    def test_without_an_onlooker_script_the_interpreter_runs_the_module(
        self, tmp_path: Path, name: str
    ) -> None:
        """``python -m onlooker hook install`` from an install with no ``onlooker`` script
        beside its interpreter nor on PATH wrote a bare ``onlooker``: not found (127). The
        command is ours whatever the interpreter's name: installed once, uninstalled."""
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        python = bin_dir / name
        base: str = getattr(sys, "_base_executable", sys.executable)  # the venv's own Python
        python.symlink_to(base)  # an interpreter with no script beside it
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),  # onlooker importable
        }
        settings = tmp_path / "settings.json"
        install = [str(python), "-m", "onlooker", "hook", "install", "--settings", str(settings)]
        subprocess.run(install, env=env, check=True, capture_output=True, timeout=60)
        installed = ours(read(settings))
        (command,) = {command for _, command in installed}
        assert command == f"{python} -m onlooker hook claude-code"
        payload = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "hi"}
        ran = subprocess.run(
            f"{command} --audit-dir {tmp_path / 'audit'}",
            shell=True,
            env=env,
            input=json.dumps(payload).encode(),
            capture_output=True,
            timeout=60,
        )
        assert (ran.returncode, ran.stdout) == (0, b"")
        assert '"input":{"prompt":"hi"}' in (tmp_path / "audit" / "s1" / "events.jsonl").read_text()
        subprocess.run(install, env=env, check=True, capture_output=True, timeout=60)
        assert ours(read(settings)) == installed  # recognised as ours: not added twice
        uninstall = [*install[:4], "uninstall", *install[5:]]
        subprocess.run(uninstall, env=env, check=True, capture_output=True, timeout=60)
        assert ours(read(settings)) == []

    @pytest.mark.parametrize(
        ("hooks", "problem"),
        [
            ({"PreToolUse": {"matcher": "*"}}, "hooks.PreToolUse must be a list"),
            ({"Stop": "say done"}, "hooks.Stop must be a list of hook entries, not a string"),
            ({"SessionEnd": None}, "hooks.SessionEnd must be a list of hook entries, not null"),
        ],
    )
    def test_settings_of_the_wrong_shape_are_refused_and_left_alone(
        self, tmp_path: Path, hooks: dict[str, Any], problem: str
    ) -> None:
        settings = tmp_path / "settings.json"
        text = json.dumps({"model": "opus", "hooks": hooks})
        settings.write_text(text)
        result = invoke("hook", "install", "--settings", str(settings))
        assert result.exit_code == 1
        assert problem in " ".join(result.output.split())
        assert "Traceback" not in result.output and result.exception is not None
        assert isinstance(result.exception, SystemExit)
        assert settings.read_text() == text
        assert not list(tmp_path.glob("*.bak"))

    def test_a_custom_command_is_installed_once_and_recognised(self, project: Path) -> None:
        settings = project / ".claude" / "settings.local.json"
        for _ in range(2):
            result = invoke("hook", "install", "--local", "--command", "/opt/wrap.sh --quiet")
            assert result.exit_code == 0, result.output
        data = read(settings)
        groups = [group for event in HOOK_EVENTS for group in data["hooks"][event]]
        assert len(groups) == len(HOOK_EVENTS)  # once per event, however often installed
        commands = {hook["command"] for group in groups for hook in group["hooks"]}
        assert commands == {"/opt/wrap.sh --quiet # onlooker hook claude-code"}
        assert "nothing changed" in result.output
        status = json.loads(invoke("hook", "status", "--json").output)
        (local,) = [s for s in status["settings"] if s["installed"]]
        assert local["scope"] == "local" and local["missing_events"] == []
        assert any("/opt/wrap.sh" in problem for problem in local["problems"])  # not there
        assert invoke("hook", "uninstall", "--local").exit_code == 0
        assert read(settings) == {}

    @pytest.mark.parametrize(
        ("command", "installed"),
        [
            ("echo ran", "echo ran # onlooker hook claude-code"),
            ("echo ran \\", "echo ran \\\n# onlooker hook claude-code"),  # else joined
            ("echo ran\necho twice", "echo ran\necho twice\n# onlooker hook claude-code"),
        ],
    )
    def test_the_marker_of_a_custom_command_is_a_comment(
        self, tmp_path: Path, command: str, installed: str
    ) -> None:
        settings = tmp_path / "settings.json"
        result = invoke("hook", "install", "--settings", str(settings), "--command", command)
        assert result.exit_code == 0, result.output
        assert {hook["command"] for group in read(settings)["hooks"]["Stop"]
                for hook in group["hooks"]} == {installed}  # fmt: skip
        ran = subprocess.run(["sh", "-c", installed], capture_output=True, text=True, check=True)
        assert ran.stdout.split("\n")[0] == "ran"

    def test_invalid_json_is_an_error_and_left_alone(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text("{not json")
        result = invoke("hook", "install", "--settings", str(settings))
        assert result.exit_code == 1
        assert "not valid JSON" in result.output
        assert settings.read_text() == "{not json"

    @pytest.mark.parametrize(
        "text",
        [
            '{"a": 1e999}',  # valid JSON that json.dumps would write back as Infinity
            '{"a": NaN}',  # not JSON at all: Python's json takes it
            '{"a": -Infinity}',
            "[" * 100_000 + "]" * 100_000,  # nested deeper than json.loads recurses
        ],
    )
    @pytest.mark.parametrize("command", ["install", "uninstall", "status"])
    def test_json_python_would_misread_is_refused_and_left_alone(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, command: str
    ) -> None:
        """Installing must never turn a settings file into one Claude Code cannot parse."""
        settings = tmp_path / "settings.json"
        settings.write_text(text)
        args = ["--settings", str(settings)] if command != "status" else []
        monkeypatch.chdir(tmp_path)
        (tmp_path / ".claude").mkdir()
        (tmp_path / ".claude" / "settings.json").write_text(text)
        result = invoke("hook", command, *args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            result.exception
        )
        assert result.exit_code == 1, result.output
        assert "not valid JSON" in result.output
        assert settings.read_text() == text
        assert sorted(path.name for path in tmp_path.iterdir()) == [".claude", "settings.json"]

    def test_a_read_only_file_is_an_error_and_left_alone(self, tmp_path: Path) -> None:
        """A rename replaced a file its owner had made read-only (0444), and kept the mode."""
        settings = tmp_path / "settings.json"
        settings.write_text('{"model": "opus"}\n')
        settings.chmod(0o444)
        result = invoke("hook", "install", "--settings", str(settings))
        assert result.exit_code == 1
        assert "read-only" in result.output
        assert settings.read_text() == '{"model": "opus"}\n'
        assert sorted(path.name for path in tmp_path.iterdir()) == ["settings.json"]  # no backup

    def test_local_writes_the_personal_file_and_ignores_onlooker(self, project: Path) -> None:
        (project / ".gitignore").write_text("node_modules/")
        result = invoke("hook", "install", "--local", "--command", COMMAND)
        assert result.exit_code == 0, result.output
        assert len(ours(read(project / ".claude" / "settings.local.json"))) == len(HOOK_EVENTS)
        assert not (project / ".claude" / "settings.json").exists()
        assert (project / ".gitignore").read_text() == "node_modules/\n.onlooker/\n"
        assert ".gitignore: added .onlooker/" in result.output
        again = invoke("hook", "install", "--local", "--command", COMMAND)
        assert "added" not in again.output
        assert (project / ".gitignore").read_text() == "node_modules/\n.onlooker/\n"

    def test_user_writes_the_home_settings_and_touches_no_gitignore(self, project: Path) -> None:
        result = invoke("hook", "install", "--user", "--command", COMMAND)
        assert result.exit_code == 0, result.output
        assert ours(read(project / "home" / ".claude" / "settings.json"))
        assert not (project / ".gitignore").exists()

    def test_one_settings_option_at_a_time(self, project: Path) -> None:
        assert invoke("hook", "install", "--local", "--user").exit_code == 2

    @pytest.mark.parametrize("given", ["adir/", "existing"])
    @pytest.mark.parametrize("command", ["install", "uninstall"])
    def test_a_directory_given_as_the_settings_file_is_a_usage_error(
        self, project: Path, given: str, command: str
    ) -> None:
        """``adir/`` (which does not exist) became a settings *file* named ``adir``."""
        (project / "existing").mkdir()
        result = invoke("hook", command, "--settings", given)
        assert result.exit_code == 2
        assert "is a directory" in result.output
        assert not (project / "adir").exists()

    def test_dry_run_prints_the_change_and_writes_nothing(self, project: Path) -> None:
        settings = project / ".claude" / "settings.json"
        settings.parent.mkdir()
        settings.write_text(json.dumps(SETTINGS))
        result = invoke("hook", "install", "--dry-run", "--command", COMMAND)
        assert result.exit_code == 0, result.output
        assert '+        "matcher": "*",' in result.output
        assert f'+            "command": "{COMMAND}"' in result.output
        assert ".gitignore: would add .onlooker/" in result.output
        assert read(settings) == SETTINGS
        assert not (project / ".gitignore").exists()
        assert not list(settings.parent.glob("*.bak"))

    def test_json_output(self, project: Path) -> None:
        result = invoke("hook", "install", "--local", "--command", COMMAND, "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report == {
            "settings": ".claude/settings.local.json",
            "changed": True,
            "dry_run": False,
            "command": COMMAND,
            "events": list(HOOK_EVENTS),
            "backup": None,
            "gitignore": str(project / ".gitignore"),
        }
        failed = invoke("hook", "install", "--local", "--deny-commands", "missing.txt", "--json")
        assert failed.exit_code == 1
        assert "missing.txt" in json.loads(failed.output)["error"]


class TestUninstall:
    def test_removes_only_ours(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(SETTINGS))
        install(settings)
        result = invoke("hook", "uninstall", "--settings", str(settings))
        assert result.exit_code == 0, result.output
        assert read(settings) == SETTINGS

    def test_removes_the_hooks_key_it_created(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps({"model": "opus"}))
        install(settings)
        invoke("hook", "uninstall", "--settings", str(settings))
        assert read(settings) == {"model": "opus"}

    def test_nothing_installed_changes_nothing(self, tmp_path: Path) -> None:
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(SETTINGS))
        result = invoke("hook", "uninstall", "--settings", str(settings))
        assert result.exit_code == 0
        assert "nothing changed" in result.output
        assert not list(tmp_path.glob("*.bak"))
        missing = invoke("hook", "uninstall", "--settings", str(tmp_path / "nope.json"))
        assert missing.exit_code == 0
        assert not (tmp_path / "nope.json").exists()

    def test_local_and_dry_run(self, project: Path) -> None:
        invoke("hook", "install", "--local", "--command", COMMAND)
        local = project / ".claude" / "settings.local.json"
        dry = invoke("hook", "uninstall", "--local", "--dry-run")
        assert dry.exit_code == 0 and f'-            "command": "{COMMAND}"' in dry.output
        assert ours(read(local))
        assert invoke("hook", "uninstall", "--local").exit_code == 0
        assert read(local) == {}


class TestStatus:
    def test_not_installed_anywhere_exits_1(self, project: Path) -> None:
        result = invoke("hook", "status")
        assert result.exit_code == 1
        assert result.output.count("not installed") == 3

    def test_a_working_installation(self, project: Path) -> None:
        rules = project / "deny.txt"
        rules.write_text("@defaults\n")
        assert invoke("hook", "install", "--local", "--deny-commands", str(rules)).exit_code == 0
        result = invoke("hook", "status")
        assert result.exit_code == 0, result.output
        assert "local" in result.output and "installed, ok" in result.output
        report = json.loads(invoke("hook", "status", "--json").output)
        assert report["ok"] is True
        (local,) = [s for s in report["settings"] if s["installed"]]
        assert local["scope"] == "local" and local["missing_events"] == []

    def test_problems_are_named(self, project: Path) -> None:
        rules = project / "deny.txt"
        rules.write_text("ok\n")
        invoke("hook", "install", "--local", "--deny-commands", str(rules))
        rules.unlink()  # the rules went away after installing
        local = project / ".claude" / "settings.local.json"
        data = read(local)
        del data["hooks"]["Notification"]
        data["hooks"]["Stop"][0]["hooks"][0]["command"] = "/nowhere/onlooker hook claude-code"
        local.write_text(json.dumps(data))
        result = invoke("hook", "status", "--json")
        assert result.exit_code == 1
        (installed,) = [s for s in json.loads(result.output)["settings"] if s["installed"]]
        problems = " ".join(installed["problems"])
        assert "Notification" in problems
        assert "cannot read the rule file" in problems
        assert "/nowhere/onlooker" in problems
