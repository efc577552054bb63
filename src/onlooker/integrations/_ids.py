"""The tool call ids the adapters record: the framework's own, made unique within one run."""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["suffixed", "unused_id"]


def suffixed(tool_call_id: str, taken: Callable[[str], bool]) -> str:
    """The framework's id, suffixed ``#2``, ``#3`` ... while ``taken`` says it is used."""
    candidate, attempt = tool_call_id, 1
    while taken(candidate):
        attempt += 1
        candidate = f"{tool_call_id}#{attempt}"
    return candidate


def unused_id(used: set[str], tool_call_id: str) -> str:
    """:func:`suffixed` when a model repeats an id in one run.

    ``used`` holds the run's ids so far; the one returned is added to it. An
    empty id (some OpenAI-compatible servers send ``""``) gets a generated one:
    refused by the engine, the call would go unrecorded and ungoverned.
    """
    if not tool_call_id:
        tool_call_id = "call-" + os.urandom(6).hex()
    candidate = suffixed(tool_call_id, used.__contains__)
    used.add(candidate)
    return candidate
