"""No secret reaches disk: every secret shape, through every field of every hook event.

The hook records each payload (audit trail, state file, lock, audit.err),
the trail is replayed into a history database, and then every byte under
``.onlooker/`` is searched for every secret, raw and escaped: zero hits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from onlooker import ToolCallStarted
from onlooker._cli._app import app
from onlooker._cli._claude_session import HOOK_EVENTS
from test_cli_hook_support import Hook

VARIABLE = "ACME_SERVICE_TOKEN"
VARIABLE_VALUE = "acme-bare-value-98765"

# (the text a payload carries, the secret in it)
SHAPES: list[tuple[str, str]] = [
    ("key sk-proj-Abcdefghijklmnop1234567890 here", "Abcdefghijklmnop1234567890"),
    ("use sk-ant-api03-Zyxwvutsrq_9876-abc now", "Zyxwvutsrq_9876"),
    ("token ghp_0123456789abcdefghijABCDEFGHIJ012345", "0123456789abcdefghijABCDEF"),
    ("aws AKIAIOSFODNN7EXAMPLE ok", "AKIAIOSFODNN7EXAMPLE"),
    ("slack xoxb-123456789012-abcdefABCDEF", "123456789012-abcdefABCDEF"),
    ("fetched https://maps.example/?key=AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
     "9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    ("session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0",
     "dozjgNryP4J3jVmNHl0w5N_XgL0"),
    ("npm config set //registry.example/:_authToken npm_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6",
     "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"),
    ("curl -H 'Authorization: Bearer tok.en-value_123456'", "tok.en-value_123456"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7secretbody\n-----END RSA PRIVATE KEY-----",
     "MIIEowIBAAKCAQEA7secretbody"),
    ("git clone https://bob:hunter2pw@git.example.com/r.git", "hunter2pw"),
    ("API_TOKEN=tok_live_123 DEBUG=1 python run.py", "tok_live_123"),
    ("mysql --password=hunter3pw -u root", "hunter3pw"),
    ('def connect():\n    password = "Tr0ub4dor&3"\n    return db(password)', "Tr0ub4dor&3"),
    ("database:\n  user: app\n  password: correct-horse-battery\n", "correct-horse-battery"),
    ("DEBUG=1\ndb_password=s3cr3t-env-value\n", "s3cr3t-env-value"),
    ('{"user": "app", "api_token": "tok-json-12345"}', "tok-json-12345"),
    (f"the service answered {VARIABLE_VALUE} alone", VARIABLE_VALUE),
    ("     1\tmachine api.example.com\n     2\t  login bot\n     3\t  password n3trc-Pw-Value\n",
     "n3trc-Pw-Value"),
    ('{"auths": {"registry.example": {"auth": "Ym90OmQwY2tlci1wdw=="}}}', "Ym90OmQwY2tlci1wdw"),
    ("client-key-data: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUtleUJvZHkK",
     "Ck1IY0NBUUVFSUtleUJvZHkK"),
    ("bot.run('MTA1MjM0NTY3ODkwMTIzNDU2Nw.GhJkLm.abcdefghijklmnopqrstuvwxyz0123456789AB')",
     "abcdefghijklmnopqrstuvwxyz0123456789AB"),
    ("git push https://0123456789abcdef0123456789abcdef01234567@github.com/o/r.git",
     "0123456789abcdef0123456789abcdef01234567"),
    ("auth: { user: 'bot@example.com', pass: 'abcd-efgh-ijkl-mnop-9x' }", "abcd-efgh-ijkl-mnop-9x"),
    ('{"username":"alice","key":"7f3a9c1e5b2d8f4a6c0e9b7d3f1a5c8e"}',
     "7f3a9c1e5b2d8f4a6c0e9b7d3f1a5c8e"),
    ("printf 'AKIAZ7Q3EXAMPLE4ABCD\\nq8Rk2LmN7vXw0pZs5TyU3iOa9bE1cF4gH6jK2lM\\n' | aws configure",
     "q8Rk2LmN7vXw0pZs5TyU3iOa9bE1cF4gH6jK2lM"),
]  # fmt: skip


def payloads(text: str, session: str, ids: str = "") -> list[dict[str, Any]]:
    """One payload of every hook event, ``text`` in every field (and ``ids`` in the ids)."""
    call, agent = f"toolu_1{ids}", f"agent-1{ids}"
    tool_input = {"command": text, "file_path": text, "nested": {"note": text}, "password": text}
    base: dict[str, Any] = {"session_id": session, "transcript_path": text, "cwd": text,
            "permission_mode": text, "prompt_id": text, "effort": {"level": text}}  # fmt: skip
    tool = {"tool_name": "Bash", "tool_input": tool_input, "tool_use_id": call}
    in_agent = {"agent_id": agent, "agent_type": text}
    task: dict[str, Any] = {
        "id": text,
        "type": "shell",
        "status": text,
        "description": text,
        "command": text,
    }
    events: list[dict[str, Any]] = [
        {"hook_event_name": "SessionStart", "source": text, "model": text},
        {"hook_event_name": "UserPromptSubmit", "prompt": text},
        {"hook_event_name": "PreToolUse", **tool},
        {"hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": tool_input,
         "permission_suggestions": [{"rules": [text]}]},
        {"hook_event_name": "PostToolUse", **tool, "duration_ms": 5,
         "tool_response": {"stdout": text, "lines": [text], text: text}},
        {"hook_event_name": "PreToolUse", **tool, "tool_use_id": call + "b", **in_agent},
        {"hook_event_name": "PostToolUseFailure", **tool, "tool_use_id": call + "b", "error": text,
         "is_interrupt": False, **in_agent},
        {"hook_event_name": "Notification", "message": text, "title": text,
         "notification_type": text},
        {"hook_event_name": "SubagentStart", "agent_id": agent + "c", "agent_type": text},
        {"hook_event_name": "SubagentStop", "agent_id": agent + "c", "agent_type": text,
         "stop_hook_active": False, "agent_transcript_path": text, "last_assistant_message": text,
         "background_tasks": [task], "session_crons": [{"id": text, "schedule": text,
                                                       "recurring": False, "prompt": text}]},
        {"hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": text,
         "background_tasks": [task]},
        {"hook_event_name": "PreCompact", "trigger": "manual", "custom_instructions": text},
        {"hook_event_name": "SessionEnd", "reason": text},
    ]  # fmt: skip
    assert {e["hook_event_name"] for e in events} == set(HOOK_EVENTS)
    return [{**base, **event} for event in events]


def forms(secret: str) -> list[bytes]:
    """The ways a secret could sit in a file: raw, JSON-escaped, unicode-escaped."""
    return list(
        {
            secret.encode(),
            json.dumps(secret)[1:-1].encode(),
            secret.encode("unicode_escape"),
        }
    )


def test_no_secret_reaches_any_byte_under_onlooker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VARIABLE, VARIABLE_VALUE)
    monkeypatch.chdir(tmp_path)
    hook = Hook(tmp_path / ".onlooker" / "audit")
    rules = tmp_path / "deny.txt"
    rules.write_text("ask: tool:Bash\n")
    for number, (text, _) in enumerate(SHAPES):
        for payload in payloads(text, f"session-{number}"):
            hook(payload, "--deny-commands", str(rules))
    # secrets where ids belong, in a key, under a secret key, and in problems reported
    secret_ids = SHAPES[2][0].split()[-1]
    for payload in payloads("plain text", SHAPES[0][0], ids=secret_ids):
        hook(payload)
    hook({"hook_event_name": f"Unknown {SHAPES[1][0]}", "session_id": "s"})
    hook(f'{{"broken": "{SHAPES[3][0]}"'.encode())
    assert hook.errors()  # the problems were reported, redacted

    replayed = CliRunner().invoke(
        app, ["audit", "replay", ".onlooker/audit", "--db", ".onlooker/history.db"]
    )
    assert replayed.exit_code == 0, replayed.output
    assert "new events" in replayed.output

    files = [path for path in (tmp_path / ".onlooker").rglob("*") if path.is_file()]
    names = {path.name for path in files}
    assert {"events.jsonl", ".claude-hook-state.json", "audit.err", "history.db"} <= names
    everything = b"\n".join(path.read_bytes() for path in files)
    everything += "\n".join(str(path) for path in files).encode()  # file names too
    for _, secret in SHAPES:
        for form in forms(secret):
            assert form not in everything, secret
    assert secret_ids.encode() not in everything
    # and the record is still evidence: the commands are there, redacted where secret
    assert b"npm config set //registry.example/:_authToken [REDACTED:" in everything
    assert b"[REDACTED:environment]" in everything


def test_a_tool_calls_arguments_keep_their_shape(tmp_path: Path) -> None:
    hook = Hook(tmp_path / "audit")
    text = SHAPES[14][0]
    for payload in payloads(text, "shape")[:3]:
        hook(payload)
    (started,) = [e for e in hook.events("shape") if isinstance(e, ToolCallStarted)]
    assert set(started.args) == {"command", "file_path", "nested", "password"}
    assert started.args["password"] == "[REDACTED:secret_field]"
    assert started.args["command"] == (
        'def connect():\n    password = "[REDACTED:secret_assignment]"\n    return db(password)'
    )


def test_the_state_file_keeps_no_tool_input_and_no_secret_tool_name(tmp_path: Path) -> None:
    # The state keeps ids, times and tool names, never a tool's input: a Task's
    # subagent_type and an MCP server's name can hold anything.
    hook = Hook(tmp_path / "audit")
    token = SHAPES[2][0].split()[-1]
    mcp = f"mcp__{token}__run"
    task = {"subagent_type": f"helper-{token}", "description": "d", "prompt": "p"}
    explore = {**task, "subagent_type": "Explore"}
    hook({"hook_event_name": "PreToolUse", "session_id": "st", "tool_name": "Task",
          "tool_input": explore, "tool_use_id": "toolu_e"})  # fmt: skip
    hook({"hook_event_name": "PreToolUse", "session_id": "st", "tool_name": "Task",
          "tool_input": task, "tool_use_id": "toolu_t"})  # fmt: skip
    hook({"hook_event_name": "PreToolUse", "session_id": "st", "tool_name": mcp,
          "tool_input": {}, "tool_use_id": "toolu_m"})  # fmt: skip
    hook({"hook_event_name": "PermissionRequest", "session_id": "st", "tool_name": mcp,
          "tool_input": {}})  # fmt: skip
    state = (tmp_path / "audit" / "st" / ".claude-hook-state.json").read_bytes()
    for form in forms(token):
        assert form not in state
    assert b'"tool":"Task"' in state  # tool names are kept (redacted)
    # and the state still does its work: the prompt gates the MCP call, the
    # sub-agent of that type is linked to the Task call that started it (not the older one)
    hook({"hook_event_name": "PostToolUse", "session_id": "st", "tool_name": mcp,
          "tool_input": {}, "tool_use_id": "toolu_m", "tool_response": "ok"})  # fmt: skip
    hook({"hook_event_name": "SubagentStart", "session_id": "st", "agent_id": "a1",
          "agent_type": f"helper-{token}"})  # fmt: skip
    events = hook.events("st")
    kinds = [(e.kind, getattr(e, "interaction_id", None)) for e in events]
    assert ("InteractionResolved", "permission-toolu_m") in kinds
    (agent,) = [e for e in events if e.kind == "ExecutionStarted" and e.execution_id != "st"]
    assert agent.attribution.parent_tool_call_id == "toolu_t"
    assert all(token not in str(e) for e in events)
    state = (tmp_path / "audit" / "st" / ".claude-hook-state.json").read_bytes()
    for form in forms(token):
        assert form not in state


def test_a_value_under_a_secret_key_of_the_input_is_scrubbed_from_the_result(
    tmp_path: Path,
) -> None:
    """coding-agents.md: the same value is scrubbed wherever else it shows up in that hook
    event. A PostToolUse carries the call's input too, which its recorded event does not."""
    secret = "Zq7-only-known-by-its-key"
    hook = Hook(tmp_path / "audit")
    tool = {"tool_name": "mcp__db__connect", "tool_input": {"host": "db", "password": secret}}
    base = {"session_id": "keyed", "transcript_path": "/t", "cwd": "/w"}
    outcomes: list[dict[str, Any]] = [
        {"hook_event_name": "PostToolUse", "tool_response": {"text": f"with {secret}"}},
        {"hook_event_name": "PostToolUseFailure", "error": f"bad password {secret}"},
    ]
    for number, outcome in enumerate(outcomes):
        call = {**base, **tool, "tool_use_id": f"t{number}"}
        hook({**call, "hook_event_name": "PreToolUse"})
        hook({**call, **outcome})
    everything = b"\n".join(p.read_bytes() for p in (tmp_path / "audit").rglob("*") if p.is_file())
    assert secret.encode() not in everything
    assert b"with [REDACTED:" in everything and b"bad password [REDACTED:" in everything


@pytest.mark.parametrize("before", ["", "echo " + "x" * 3000 + " && "])
def test_a_value_a_rule_redacted_in_the_command_is_scrubbed_from_its_output(
    tmp_path: Path, before: str
) -> None:
    """A Bash command gives a password by its name; the output echoes it bare. Also when
    the name comes after the part of the command a record keeps (2,000 characters)."""
    secret = "Zq8-vault-Pw-4417"
    hook = Hook(tmp_path / "audit")
    command = {"command": f"{before}export DB_PASSWORD={secret} && ./print-config.sh"}
    call = {
        "session_id": "echoed",
        "transcript_path": "/t",
        "cwd": "/w",
        "tool_name": "Bash",
        "tool_input": command,
        "tool_use_id": "t1",
    }
    hook({**call, "hook_event_name": "PreToolUse"})
    output = {"stdout": f"db.user=app\ndb.password_is {secret}\n", "stderr": ""}
    hook({**call, "hook_event_name": "PostToolUse", "tool_response": output})
    everything = b"\n".join(p.read_bytes() for p in (tmp_path / "audit").rglob("*") if p.is_file())
    assert secret.encode() not in everything
    assert b"db.password_is [REDACTED:" in everything
