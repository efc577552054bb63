"""mypy --strict, run as a user would: outside the package, on the installed onlooker.

One mypy run checks two copies of ``tests/typing/observer_exhaustive.py``: the
complete one must pass; the one that forgets ``InteractionResolved`` must be
rejected at its ``assert_never``. The same run checks that assigning to a
frozen model is an error, with no pydantic mypy plugin (the user's config has
none).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent / "typing" / "observer_exhaustive.py"
FORGOTTEN = """\
            case InteractionResolved(status=status):
                self.resolved.append(status)
"""

MUTATIONS = """\
from onlooker import Attribution, ErrorInfo, ToolCallFinished, Trigger
from onlooker.plugins.history import ExecutionRecord, ToolCallRecord
from onlooker.plugins.summary import ExecutionSummary


def mutate(
    event: ToolCallFinished,
    attribution: Attribution,
    error: ErrorInfo,
    trigger: Trigger,
    summary: ExecutionSummary,
    record: ExecutionRecord,
    call: ToolCallRecord,
) -> None:
    event.status = "completed"
    event.seq = 5
    attribution.depth = 3
    error.cause = "defect"
    trigger.kind = "x"
    summary.status = "failed"
    record.status = "failed"
    call.tool = "other"
"""

ATTRIBUTES = """\
import onlooker

history_plugin = onlooker.plugins.history.plugin("sqlite:///h.db")
summaries = onlooker.plugins.summary.plugin()
"""


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Run mypy --strict once on both files; its error lines by file name."""
    where = tmp_path_factory.mktemp("user_project")
    source = EXAMPLE.read_text(encoding="utf-8")
    assert FORGOTTEN in source, "the example no longer has the case this test removes"
    (where / "complete_observer.py").write_text(source, encoding="utf-8")
    (where / "incomplete_observer.py").write_text(source.replace(FORGOTTEN, ""), encoding="utf-8")
    (where / "mutations.py").write_text(MUTATIONS, encoding="utf-8")
    (where / "attributes.py").write_text(ATTRIBUTES, encoding="utf-8")
    (where / "mypy.ini").write_text("[mypy]\nstrict = True\n", encoding="utf-8")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            "mypy.ini",
            "--cache-dir",
            str(where / ".mypy_cache"),
            "--no-error-summary",
            "--show-error-codes",
            "complete_observer.py",
            "incomplete_observer.py",
            "mutations.py",
            "attributes.py",
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode in (0, 1), run.stdout + run.stderr  # 2 would be a mypy crash
    lines: dict[str, list[str]] = {
        "complete_observer.py": [],
        "incomplete_observer.py": [],
        "mutations.py": [],
        "attributes.py": [],
    }
    for line in run.stdout.splitlines():
        name = line.split(":", 1)[0]
        assert name in lines, f"unexpected mypy output: {line}"
        lines[name].append(line)
    return lines


def test_the_exhaustive_observer_passes(mypy_output: dict[str, list[str]]) -> None:
    assert mypy_output["complete_observer.py"] == []


def test_a_forgotten_kind_is_an_error(mypy_output: dict[str, list[str]]) -> None:
    errors = [line for line in mypy_output["incomplete_observer.py"] if ": error:" in line]
    assert len(errors) == 1, mypy_output["incomplete_observer.py"]
    (error,) = errors
    assert "assert_never" in error
    assert re.search(r'"InteractionResolved"', error), error


def test_assigning_to_a_frozen_model_is_an_error(mypy_output: dict[str, list[str]]) -> None:
    assignments = [n for n, line in enumerate(MUTATIONS.splitlines(), 1) if " = " in line]
    flagged = [
        int(line.split(":")[1]) for line in mypy_output["mutations.py"] if "read-only" in line
    ]
    assert flagged == assignments, mypy_output["mutations.py"]


def test_plugins_are_attributes_of_onlooker_plugins(mypy_output: dict[str, list[str]]) -> None:
    assert mypy_output["attributes.py"] == []
