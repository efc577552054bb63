"""Shared fixtures: every async test runs on asyncio and on trio."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from onlooker import (
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionStarted,
    ToolCallFinished,
    ToolCallStarted,
)

# No per-example deadline: a loaded CI machine (2 cores, PostgreSQL and Chromium beside the
# tests) can take 200 ms for one example, and Hypothesis then fails the test as flaky.
settings.register_profile("onlooker", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("onlooker")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``pytest.mark.anyio`` test on both backends."""
    return str(request.param)


def well_formed(events: Sequence[ExecutionEvent]) -> None:
    """Assert the stream invariants of DESIGN §2, independently of ``onlooker.testing``.

    Per execution: ``seq`` is 0, 1, 2 ... in delivery order; the first event is
    the one ``ExecutionStarted`` and the last the one ``ExecutionFinished``;
    every ``ToolCallStarted`` / ``InteractionStarted`` is closed exactly once,
    after it opened, by an event of the same execution.
    """
    by_execution: dict[str, list[ExecutionEvent]] = {}
    for event in events:
        by_execution.setdefault(event.execution_id, []).append(event)
    for execution_id, stream in by_execution.items():
        assert [e.seq for e in stream] == list(range(len(stream))), (
            f"{execution_id}: seq {[e.seq for e in stream]}"
        )
        assert isinstance(stream[0], ExecutionStarted), f"{execution_id} opens with {stream[0]}"
        assert isinstance(stream[-1], ExecutionFinished), f"{execution_id} ends with {stream[-1]}"
        assert sum(isinstance(e, ExecutionStarted) for e in stream) == 1
        assert sum(isinstance(e, ExecutionFinished) for e in stream) == 1
        open_calls: set[str] = set()
        closed_calls: set[str] = set()
        open_questions: set[str] = set()
        closed_questions: set[str] = set()
        for event in stream:
            if isinstance(event, ToolCallStarted):
                assert event.tool_call_id not in open_calls | closed_calls
                open_calls.add(event.tool_call_id)
            elif isinstance(event, ToolCallFinished):
                assert event.tool_call_id in open_calls, f"unopened call {event.tool_call_id}"
                open_calls.remove(event.tool_call_id)
                closed_calls.add(event.tool_call_id)
            elif isinstance(event, InteractionStarted):
                assert event.interaction_id not in open_questions | closed_questions
                open_questions.add(event.interaction_id)
            elif isinstance(event, InteractionResolved):
                assert event.interaction_id in open_questions
                open_questions.remove(event.interaction_id)
                closed_questions.add(event.interaction_id)
        assert not open_calls, f"{execution_id}: tool calls never closed: {open_calls}"
        assert not open_questions, f"{execution_id}: questions never resolved: {open_questions}"


@pytest.fixture
def check_stream() -> Callable[[Sequence[ExecutionEvent]], None]:
    """The stream-invariant checker (:func:`well_formed`)."""
    return well_formed


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git project as the current directory, with a home of its own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / ".git").mkdir()
    return tmp_path
