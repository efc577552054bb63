"""``onlooker.testing``: the helpers users assert with in their own tests."""

from __future__ import annotations

import subprocess
import sys

BROKEN_STREAM = """
from datetime import UTC, datetime
import onlooker
from onlooker.testing import check_invariants

started = onlooker.ExecutionStarted(
    event_id="e0", execution_id="x", seq=0, at=datetime.now(UTC),
    attribution=onlooker.Attribution(), program="p", trigger=onlooker.Trigger(kind="t"),
    owner=None, input=None,
)
try:
    check_invariants([started])  # never finished
except AssertionError as exc:
    print("caught:", exc)
"""


def test_check_invariants_checks_under_python_O() -> None:
    """It raises explicitly, not with ``assert``, which ``-O`` strips."""
    done = subprocess.run(
        [sys.executable, "-O", "-c", BROKEN_STREAM], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "caught: execution x closed 0 times"
