"""``onlooker hook claude-code``: Claude Code hook payloads become audit events.

Recording is fail-safe (always exit 0, nothing on stdout, problems in
audit.err); governance is fail-closed (a matching or unreadable deny rule
denies the call).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import onlooker
from onlooker import ExecutionEvent, ToolCallFinished, ToolCallStarted
from onlooker._cli._app import app
from onlooker._cli._claude_hook import SCHEMA_VERSION, _Events, session_id_of
from onlooker.plugins import audit

runner = CliRunner()
SESSION = "5c0ffee0-1d2b-4c3a-9e8f-0123456789ab"
EXECUTABLE = shutil.which("onlooker", path=str(Path(sys.executable).parent))


def payload(event: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "hook_event_name": event,
        "session_id": SESSION,
        "transcript_path": "/home/dev/.claude/projects/demo/5c0ffee0.jsonl",
        "cwd": "/home/dev/demo",
    }
    return {**base, **fields}


def bash(call: str, command: str, event: str = "PreToolUse", **fields: Any) -> dict[str, Any]:
    return payload(
        event, tool_name="Bash", tool_input={"command": command}, tool_use_id=call, **fields
    )


SESSION_PAYLOADS = [
    payload("SessionStart", source="startup"),
    bash("toolu_1", "ls -la"),
    bash("toolu_1", "ls -la", "PostToolUse", tool_response={"stdout": "a.txt\n", "stderr": ""}),
    payload(
        "PreToolUse",
        tool_name="Read",
        tool_input={"file_path": "/home/dev/demo/a.txt"},
        tool_use_id="toolu_2",
    ),
    payload(
        "PostToolUseFailure",
        tool_name="Read",
        tool_input={"file_path": "/home/dev/demo/a.txt"},
        tool_use_id="toolu_2",
        error="File does not exist.",
    ),
    payload("SessionEnd", reason="prompt_input_exit"),
]


def hook(audit_dir: Path, data: dict[str, Any] | str, *extra: str) -> Any:
    """Run the hook through the typer app (as ``onlooker hook claude-code``)."""
    raw = data if isinstance(data, str) else json.dumps(data)
    return runner.invoke(
        app, ["hook", "claude-code", "--audit-dir", str(audit_dir), *extra], input=raw
    )


def hook_process(
    audit_dir: Path, data: dict[str, Any] | str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the hook as Claude Code does: a fresh process, the payload on stdin."""
    assert EXECUTABLE is not None, "the onlooker console script is not installed in the venv"
    raw = data if isinstance(data, str) else json.dumps(data)
    return subprocess.run(
        [EXECUTABLE, "hook", "claude-code", "--audit-dir", str(audit_dir), *extra],
        input=raw,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=30,
    )


def trail(audit_dir: Path, session: str = SESSION) -> list[ExecutionEvent]:
    return list(audit.tail(audit_dir / session))


class TestRecording:
    def test_a_whole_session_is_a_well_formed_verified_execution(
        self, tmp_path: Path, check_stream: Callable[[Sequence[ExecutionEvent]], None]
    ) -> None:
        for data in SESSION_PAYLOADS:
            result = hook(tmp_path, data)
            assert result.exit_code == 0
            assert result.stdout == ""
        events = trail(tmp_path)
        assert [e.kind for e in events] == [
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
            "ToolCallStarted",
            "ToolCallFinished",
            "ExecutionFinished",
        ]
        check_stream(events)
        assert {e.execution_id for e in events} == {SESSION}
        finished = [e for e in events if isinstance(e, ToolCallFinished)]
        assert [(f.tool, f.status) for f in finished] == [("Bash", "completed"), ("Read", "failed")]
        assert finished[0].result == {"stdout": "a.txt\n", "stderr": ""}
        assert finished[1].error is not None
        assert finished[1].error.message == "File does not exist."
        report = audit.verify(tmp_path / SESSION)
        assert report.ok, report
        assert report.records == len(events)
        assert not (tmp_path / "audit.err").exists()

    def test_events_match_the_schema_exactly(self) -> None:
        state: dict[str, Any] = {"seq": 0, "calls": {}, "started": None}
        built: list[dict[str, Any]] = []
        for data in SESSION_PAYLOADS[:-1]:
            built += _Events(SESSION, state).build(data, None)
        built += _Events(SESSION, state).build(bash("toolu_9", "rm -rf /"), ("rm", "denied"))
        built += _Events(SESSION, state).build(SESSION_PAYLOADS[-1], None)
        assert len(built) == 8
        for raw in built:
            event = onlooker.parse_event(raw)
            assert json.loads(event.model_dump_json()) == json.loads(json.dumps(raw))

    def test_a_hook_installed_mid_session_still_closes_every_pair(
        self, tmp_path: Path, check_stream: Callable[[Sequence[ExecutionEvent]], None]
    ) -> None:
        hook(tmp_path, bash("toolu_7", "pwd", "PostToolUse", tool_response={"stdout": "/"}))
        hook(tmp_path, bash("toolu_8", "sleep 100"))  # never finishes: closed at session end
        hook(tmp_path, payload("SessionEnd", reason="other"))
        events = trail(tmp_path)
        assert [e.kind for e in events][:3] == [
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
        ]
        check_stream(events)
        cancelled = [
            e for e in events if isinstance(e, ToolCallFinished) and e.status == "cancelled"
        ]
        assert [e.tool_call_id for e in cancelled] == ["toolu_8"]

    def test_secrets_are_redacted_before_they_reach_disk(self, tmp_path: Path) -> None:
        secret = "sk-ant-api03-" + "Q" * 40
        hook(tmp_path, bash("toolu_1", f"curl -H 'x-api-key: {secret}' https://api.example.com"))
        on_disk = "".join(p.read_text() for p in (tmp_path / SESSION).rglob("*.jsonl"))
        assert "curl" in on_disk
        assert secret not in on_disk

    def test_path_like_session_ids_stay_inside_the_audit_directory(self, tmp_path: Path) -> None:
        audit_dir = tmp_path / "audit"
        hook(audit_dir, {**payload("SessionStart"), "session_id": "../../etc/passwd"})
        assert not (tmp_path / "etc").exists()
        (session_dir,) = [p for p in audit_dir.iterdir() if p.is_dir()]
        assert session_dir.name == session_id_of("../../etc/passwd")
        assert trail(audit_dir, session_dir.name)[0].execution_id == session_dir.name

    def test_concurrent_invocations_number_events_without_gaps(self, tmp_path: Path) -> None:
        hook(tmp_path, payload("SessionStart", source="startup"))
        calls = [bash(f"toolu_{i}", f"echo {i}") for i in range(12)]
        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(lambda data: hook_process(tmp_path, data), calls))
        assert all(r.returncode == 0 and r.stdout == "" for r in results), results
        events = trail(tmp_path)
        assert [e.seq for e in events] == list(range(13))
        assert len({e.tool_call_id for e in events if isinstance(e, ToolCallStarted)}) == 12
        assert audit.verify(tmp_path / SESSION).ok

    def test_disabled_by_environment(self, tmp_path: Path) -> None:
        result = hook_process(tmp_path, bash("toolu_1", "ls"), env={"ONLOOKER_AUDIT_DISABLE": "1"})
        assert (result.returncode, result.stdout) == (0, "")
        assert not tmp_path.joinpath(SESSION).exists()

    def test_schema_version_is_the_librarys(self) -> None:
        assert onlooker.SCHEMA_VERSION == SCHEMA_VERSION


class TestFailSafe:
    @pytest.mark.parametrize(
        ("raw", "problem"),
        [
            ("{not json", "not JSON"),
            ("[1, 2]", "not a JSON object"),
            (
                json.dumps(payload("Notification", message="hi")),
                "unknown hook event 'Notification'",
            ),
            (json.dumps({"hook_event_name": "PreToolUse"}), "no session_id"),
        ],
    )
    def test_bad_input_exits_0_silently_and_is_logged(
        self, tmp_path: Path, raw: str, problem: str
    ) -> None:
        result = hook_process(tmp_path, raw)
        assert (result.returncode, result.stdout) == (0, "")
        assert problem in (tmp_path / "audit.err").read_text()

    @pytest.mark.parametrize(
        "raw",
        [
            '{"hook_event_name": "PreToolUse", "tool_input": {"command": '
            "\"curl -H 'Authorization: Bearer sk-abcdefghijklmnopqrstuvwx1234'",
            '\udcff{"password": "hunter2hunter2"}',
            '{"hook_event_name": "Notification sk-ant-api03-abcdefghijklmnopqrstuvwxyz"}',
        ],
    )
    def test_malformed_input_never_puts_its_secrets_in_audit_err(
        self, tmp_path: Path, raw: str
    ) -> None:
        result = hook_process(tmp_path, raw.encode("utf-8", "surrogateescape").decode("latin-1"))
        assert (result.returncode, result.stdout) == (0, "")
        logged = (tmp_path / "audit.err").read_bytes()
        for secret in (
            b"abcdefghijklmnopqrstuvwx1234",
            b"hunter2hunter2",
            b"abcdefghijklmnopqrstuvwxyz",
        ):
            assert secret not in logged

    def test_an_unwritable_audit_directory_exits_0(self, tmp_path: Path) -> None:
        blocker = tmp_path / "audit"
        blocker.write_text("a file where the directory should be")  # root ignores chmod; this not
        result = hook_process(blocker, bash("toolu_1", "ls"))
        assert (result.returncode, result.stdout) == (0, "")
        assert "onlooker hook claude-code" in result.stderr  # nowhere else to report it
        assert blocker.read_text() == "a file where the directory should be"

    def test_an_unwritable_session_directory_is_logged_in_audit_err(self, tmp_path: Path) -> None:
        (tmp_path / SESSION).write_text("not a directory")
        result = hook_process(tmp_path, bash("toolu_1", "ls"))
        assert (result.returncode, result.stdout) == (0, "")
        assert SESSION in (tmp_path / "audit.err").read_text()

    def test_an_unknown_option_exits_0(self, tmp_path: Path) -> None:
        result = hook_process(tmp_path, bash("toolu_1", "ls"), "--bogus")
        assert (result.returncode, result.stdout) == (0, "")
        assert "--bogus" in (tmp_path / "audit.err").read_text()


class TestDenyRules:
    @pytest.fixture
    def rules(self, tmp_path: Path) -> Path:
        path = tmp_path / "deny.txt"
        path.write_text(
            "# no force pushes, no deleting from the root\ngit push .*--force\nglob:rm -rf /*\n"
        )
        return path

    def deny_reason(self, stdout: str) -> str:
        answer = json.loads(stdout)
        output = answer["hookSpecificOutput"]
        assert output["hookEventName"] == "PreToolUse"
        assert output["permissionDecision"] == "deny"
        reason: str = output["permissionDecisionReason"]
        return reason

    def test_a_matching_command_is_denied_with_its_rule(self, tmp_path: Path, rules: Path) -> None:
        result = hook_process(
            tmp_path, bash("toolu_1", "git push origin main --force"), "--deny-commands", str(rules)
        )
        assert result.returncode == 0
        assert "git push .*--force" in self.deny_reason(result.stdout)
        *_, started, finished = trail(tmp_path)
        assert isinstance(started, ToolCallStarted)
        assert isinstance(finished, ToolCallFinished)
        assert finished.status == "blocked"
        assert finished.metadata == {"denied_by": "git push .*--force"}

    def test_globs_match_the_whole_command(self, tmp_path: Path, rules: Path) -> None:
        denied = hook(tmp_path, bash("toolu_1", "rm -rf /home"), "--deny-commands", str(rules))
        assert "rm -rf /*" in self.deny_reason(denied.stdout)
        allowed = hook(
            tmp_path, bash("toolu_2", "echo rm -rf /home"), "--deny-commands", str(rules)
        )
        assert allowed.stdout == ""

    def test_other_commands_and_other_events_pass(self, tmp_path: Path, rules: Path) -> None:
        for data in [
            bash("toolu_1", "git push origin main"),
            bash("toolu_1", "git push --force", "PostToolUse", tool_response={}),
            payload(
                "PreToolUse", tool_name="Read", tool_input={"file_path": "x"}, tool_use_id="t2"
            ),
        ]:
            result = hook(tmp_path, data, "--deny-commands", str(rules))
            assert (result.exit_code, result.stdout) == (0, "")

    @pytest.mark.parametrize("content", [None, "valid\n(unclosed\n"])
    def test_a_broken_rule_file_denies_every_call(
        self, tmp_path: Path, content: str | None
    ) -> None:
        rules = tmp_path / "deny.txt"
        if content is not None:
            rules.write_text(content)
        result = hook_process(tmp_path, bash("toolu_1", "ls"), "--deny-commands", str(rules))
        assert result.returncode == 0
        assert "deny.txt" in self.deny_reason(result.stdout)

    def test_denies_even_when_recording_fails(self, tmp_path: Path, rules: Path) -> None:
        blocker = tmp_path / "audit"
        blocker.write_text("")
        result = hook_process(
            blocker, bash("toolu_1", "git push -f --force"), "--deny-commands", str(rules)
        )
        assert result.returncode == 0
        assert "git push" in self.deny_reason(result.stdout)

    def test_same_decisions_as_the_library_policy(self, tmp_path: Path) -> None:
        from onlooker import ToolUseContext
        from onlooker._cli._rules import first_match, load_rules
        from onlooker.policies import deny_commands

        patterns = [r"\bsudo\b", r"git push .*--force", r"curl[^|]*\|\s*sh"]
        policy = deny_commands(patterns).pre[0]
        path = tmp_path / "rules.txt"
        path.write_text("\n".join(patterns))
        rules = load_rules(path)
        commands = ["sudo ls", "ls", "git push x --force", "curl a | sh", "echo curl", "pseudo x"]
        for command in commands:
            use = ToolUseContext(
                "Bash", {"command": command}, "c1", onlooker.Attribution(), "e1", False
            )
            assert (first_match(rules, command) is not None) == (policy(use) is not None), command


class TestFastStart:
    def test_the_hook_imports_no_heavy_module(self, tmp_path: Path) -> None:
        result = hook_process(tmp_path, bash("toolu_1", "ls"), env={"PYTHONPROFILEIMPORTTIME": "1"})
        assert result.returncode == 0
        imported = {
            line.split("|")[-1].strip().split(".")[0]
            for line in result.stderr.splitlines()
            if line.startswith("import time:")
        }
        assert "onlooker" in imported
        assert not imported & {"typer", "rich", "pydantic", "pydantic_core", "anyio", "click"}
