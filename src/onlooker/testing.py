"""Helpers for users' own tests: record what an execution emitted and assert on it.

>>> recorder = RecordingObserver()
>>> with onlooker.observing(recorder):
...     result = await engine.execute(program)
>>> recorder.kinds()
['ExecutionStarted', 'ToolCallStarted', 'ToolCallFinished', 'ExecutionFinished']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar, overload

from ._events import (
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionStarted,
    ToolCallFinished,
    ToolCallStarted,
)

__all__ = ["RecordingObserver", "check_invariants"]

E = TypeVar(
    "E",
    ExecutionStarted,
    ToolCallStarted,
    ToolCallFinished,
    InteractionStarted,
    InteractionResolved,
    ExecutionFinished,
)


class RecordingObserver:
    """A synchronous observer that keeps every event it receives, in order.

    Use it with ``onlooker.observing(recorder)`` or ``engine.bus.subscribe(recorder)``.
    """

    def __init__(self) -> None:
        self.events: list[ExecutionEvent] = []

    def handle(self, event: ExecutionEvent) -> None:
        """Record ``event``."""
        self.events.append(event)

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[ExecutionEvent]:
        return iter(self.events)

    def clear(self) -> None:
        """Forget every recorded event."""
        self.events.clear()

    def kinds(self, execution_id: str | None = None) -> list[str]:
        """The kinds recorded, in order (of one execution when ``execution_id`` is given)."""
        return [
            e.kind for e in self.events if execution_id is None or e.execution_id == execution_id
        ]

    @overload
    def of(self, kind: type[E]) -> list[E]: ...
    @overload
    def of(self, kind: type[E], execution_id: str) -> list[E]: ...

    def of(self, kind: type[E], execution_id: str | None = None) -> list[E]:
        """The recorded events of one class (and one execution), typed."""
        return [
            e
            for e in self.events
            if isinstance(e, kind) and (execution_id is None or e.execution_id == execution_id)
        ]

    def for_execution(self, execution_id: str) -> list[ExecutionEvent]:
        """The events of one execution, in the order they were emitted."""
        return [e for e in self.events if e.execution_id == execution_id]


def check_invariants(events: Iterable[ExecutionEvent]) -> None:
    """Check onlooker's stream invariants; raises ``AssertionError`` naming the broken one.

    It raises explicitly (not with ``assert``), so it checks under ``python -O`` too.

    Per execution: ``seq`` is 0, 1, 2 ... with no gaps; it opens with
    ``ExecutionStarted`` and closes with exactly one ``ExecutionFinished``;
    every ``ToolCallStarted`` and ``InteractionStarted`` is closed exactly once.
    """
    by_execution: dict[str, list[ExecutionEvent]] = {}
    for event in events:
        by_execution.setdefault(event.execution_id, []).append(event)
    for execution_id, stream in by_execution.items():
        seqs = [e.seq for e in stream]
        _check(seqs == list(range(len(stream))), f"execution {execution_id}: seq {seqs} has gaps")
        _check(isinstance(stream[0], ExecutionStarted), f"execution {execution_id} does not open")
        finished = [e for e in stream if isinstance(e, ExecutionFinished)]
        _check(len(finished) == 1, f"execution {execution_id} closed {len(finished)} times")
        _check(stream[-1] is finished[0], f"execution {execution_id}: events after its end")
        _pairs(execution_id, stream, ToolCallStarted, ToolCallFinished, "tool_call_id")
        _pairs(execution_id, stream, InteractionStarted, InteractionResolved, "interaction_id")


def _pairs(
    execution_id: str,
    stream: list[ExecutionEvent],
    opening: type[ExecutionEvent],
    closing: type[ExecutionEvent],
    key: str,
) -> None:
    opened = [getattr(e, key) for e in stream if isinstance(e, opening)]
    closed = [getattr(e, key) for e in stream if isinstance(e, closing)]
    _check(
        sorted(opened) == sorted(closed) and len(set(opened)) == len(opened),
        f"execution {execution_id}: {opening.__name__} {opened} vs {closing.__name__} {closed}",
    )


def _check(holds: bool, message: str) -> None:
    if not holds:
        raise AssertionError(message)
