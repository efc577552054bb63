"""``onlooker audit replay DIR``: a damaged session does not stop the others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from onlooker._cli._app import app
from onlooker.plugins import audit

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "research_agent.py"
AUDIT = Path(".onlooker/audit")


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Three recorded sessions: line 3 of the first and of the last damaged."""
    monkeypatch.chdir(tmp_path)
    names = ["a-first", "b-second", "c-third"]
    for name in names:
        result = invoke(
            "run", str(EXAMPLE), "--answer", '{"approve": true}', "--session", name, "--quiet"
        )
        assert result.exit_code == 0, result.output
    first, third = AUDIT / "a-first/events.jsonl", AUDIT / "c-third/events.jsonl"
    lines = first.read_bytes().splitlines(keepends=True)
    lines[2] = b"garbage" + lines[2]  # not JSON
    first.write_bytes(b"".join(lines))
    lines = third.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"seq":2', b'"seq":-2')  # JSON, but the event is invalid
    third.write_bytes(b"".join(lines))
    return [AUDIT / name for name in names]


def test_replay_goes_on_past_a_damaged_session(sessions: list[Path]) -> None:
    result = invoke("audit", "replay", str(AUDIT), "--db", "fresh.db")
    assert result.exit_code == 1, result.output
    assert "a-first/events.jsonl:3: not a JSON audit record" in result.stderr
    assert "c-third/events.jsonl:3: the recorded event is invalid" in result.stderr
    new = 2 + audit.verify(sessions[1]).records + 2  # damaged ones: what came before line 3
    assert result.stdout == f"replayed {new} new events from 3 sessions in {AUDIT} (2 damaged)\n"
    intact = invoke("audit", "replay", str(sessions[1]), "--db", "fresh.db")
    assert intact.exit_code == 0, intact.output
    assert intact.stdout.startswith("replayed 0 new events")  # it was replayed in full


def test_replay_as_json_gives_each_damaged_session_its_error(sessions: list[Path]) -> None:
    result = invoke("audit", "replay", str(AUDIT), "--db", "fresh.db", "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    whole = audit.verify(sessions[1]).records
    assert report["new_events"] == 2 + whole + 2
    first, second, third = report["sessions"]
    assert first == {
        "path": str(sessions[0]),
        "new_events": 2,  # the events before the bad line
        "error": f"{sessions[0]}/events.jsonl:3: not a JSON audit record",
    }
    assert second == {"path": str(sessions[1]), "new_events": whole}
    assert third["new_events"] == 2 and "events.jsonl:3" in third["error"]
