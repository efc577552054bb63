"""The tool call ids the adapters record: the framework's own, made unique within one run."""

from __future__ import annotations

__all__ = ["unused_id"]


def unused_id(used: set[str], tool_call_id: str) -> str:
    """The framework's id, suffixed ``#2``, ``#3`` ... when a model repeats an id in one run.

    ``used`` holds the run's ids so far; the one returned is added to it.
    """
    candidate, attempt = tool_call_id, 1
    while candidate in used:
        attempt += 1
        candidate = f"{tool_call_id}#{attempt}"
    used.add(candidate)
    return candidate
