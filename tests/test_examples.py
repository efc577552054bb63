"""Smoke tests: the examples run as a newcomer runs them, in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import onlooker

ROOT = Path(__file__).resolve().parents[1]


def run_example(relative: str, tmp_path: Path) -> str:
    """Run an example; what it keeps in a temporary directory lands under ``tmp_path``."""
    done = subprocess.run(
        [sys.executable, str(ROOT / relative)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_tracked_agent(tmp_path: Path) -> None:
    out = run_example("examples/tracked_agent.py", tmp_path).splitlines()
    assert out[0] == "support-bot  completed"
    assert [line.split() for line in out[1:5]] == [
        ["call_1", "read_file", "completed"],
        ["call_2", "read_file", "failed"],
        ["call_3", "delete_file", "blocked"],
        ["call_4", "summarize", "completed"],
    ]
    assert out[5].split() == ["child", "summarizer", "completed"]
    assert "the sub-agent wrote: ['draft.md']" in out
    assert "audit trail: intact, 16 records" in out
    assert "files now: ['draft.md', 'notes.md']" in out  # the refused delete never ran


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("delegation.py", "parent completed: {'delegate': 2}, 2 children"),
        ("metrics_server.py", 'onlooker_tool_calls_total{status="failed",tool="fetch"} 3.0'),
        ("quickstart.py", "result: completed, '9 words'"),
        ("security_hook.py", "completed - files now: ['config.env', 'sandbox/etc/motd']"),
    ],
)
def test_examples_run(example: str, expected: str, tmp_path: Path) -> None:
    """Each example the docs point to runs as shown."""
    assert expected in run_example(f"examples/{example}", tmp_path).splitlines()


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("claude_agent_sdk_agent.py", "files in the work directory: ['notes.md']"),
        ("langchain_agent.py", "c3 refund: blocked"),
        ("mcp_server.py", "audit trail: intact, 8 records"),
        ("openai_agents_agent.py", "refund [call_refund]: blocked"),
        ("opentelemetry_export.py", "execute_tool delete_account  [blocked"),
        ("pydantic_ai_agent.py", "refund [call_refund]: blocked"),
    ],
)
def test_integration_examples(example: str, expected: str, tmp_path: Path) -> None:
    """Each framework's example runs offline and shows the refused call."""
    assert expected in run_example(f"examples/integrations/{example}", tmp_path)


def _block_after(text: str, heading: str, fence: str) -> str:
    """The first fenced block opening with ``fence`` after ``heading``."""
    rest = text[text.index(heading) :]
    start = rest.index(fence + "\n") + len(fence) + 1
    return rest[start : rest.index("\n```", start) + 1]


def test_readme_quick_start_prints_what_the_readme_shows(tmp_path: Path) -> None:
    """The README's quick start runs, warning-free, and prints its shown output, from any directory."""
    readme = (ROOT / "README.md").read_text()
    code = _block_after(readme, "## Quick start", "```python")
    after_code = readme[readme.index(code) + len(code) + len("```") :]
    shown = _block_after(after_code, "```", "```")
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # a new user's empty directory, not the checkout
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")  # no warning either
    assert done.stdout == shown


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "onlooker", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"onlooker {onlooker.__version__}\n"
