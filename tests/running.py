"""``run()``: execute one program in a fresh engine, for the tests to assert on.

tests/ is not a package: pytest puts this directory on ``sys.path`` (as it does
for ``postgres.py``), so a test module writes ``from running import run``.

``run(program, tools=TOOLS)`` returns ``(result, recorder)``, the recorder
holding every event the execution emitted (it observes through
``onlooker.observing``). Given ``extension=plugin``, it installs that plugin
too and returns ``(result, extension)`` instead, the extension being what the
plugin built in the engine; pass ``recorder=`` to keep the events as well.
The other keywords go to ``ExecutionEngine(...)`` (``tools``, ``hooks``,
``plugins``) or to ``engine.execute(...)`` (the rest).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypedDict, TypeVar, Unpack, overload

import anyio
from pydantic import JsonValue

import onlooker
from onlooker import (
    ElicitationHandler,
    ExecutionEngine,
    ExecutionResult,
    HookMatcher,
    Plugin,
    Program,
    Tool,
    Trigger,
)
from onlooker.testing import RecordingObserver

__all__ = ["ExecuteOptions", "run"]

T = TypeVar("T")
Ext = TypeVar("Ext")


class ExecuteOptions(TypedDict, total=False):
    """The keywords ``run()`` passes on to ``engine.execute(...)``."""

    on_elicitation: ElicitationHandler | None
    trigger: Trigger | str
    owner: str | None
    input: JsonValue


@overload
async def run(
    program: Program[T],
    *,
    tools: Iterable[Tool[..., Any]] = (),
    hooks: Sequence[HookMatcher] = (),
    plugins: Sequence[Plugin[Any]] = (),
    recorder: RecordingObserver | None = None,
    **execute: Unpack[ExecuteOptions],
) -> tuple[ExecutionResult[T], RecordingObserver]: ...


@overload
async def run(
    program: Program[T],
    *,
    extension: Plugin[Ext],
    tools: Iterable[Tool[..., Any]] = (),
    hooks: Sequence[HookMatcher] = (),
    plugins: Sequence[Plugin[Any]] = (),
    recorder: RecordingObserver | None = None,
    **execute: Unpack[ExecuteOptions],
) -> tuple[ExecutionResult[T], Ext]: ...


async def run(
    program: Program[T],
    *,
    extension: Plugin[Any] | None = None,
    tools: Iterable[Tool[..., Any]] = (),
    hooks: Sequence[HookMatcher] = (),
    plugins: Sequence[Plugin[Any]] = (),
    recorder: RecordingObserver | None = None,
    **execute: Unpack[ExecuteOptions],
) -> tuple[ExecutionResult[T], Any]:
    """Execute ``program`` once in an engine of its own (see the module docstring)."""
    if recorder is None:
        recorder = RecordingObserver()
    installed = [*plugins] if extension is None else [*plugins, extension]
    async with ExecutionEngine(tools=tools, hooks=hooks, plugins=installed) as engine:
        with onlooker.observing(recorder):
            result = await engine.execute(program, **execute)
        kept = recorder if extension is None else engine.extension(extension)
    return result, kept


async def stray_cancellation() -> BaseException:
    """The backend's cancellation exception, caught in a scope of its own that is closed
    since: raised again, nothing is cancelling the task that raises it (a stray)."""
    caught: BaseException | None = None
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(1)
        except anyio.get_cancelled_exc_class() as exc:
            caught = exc
    assert caught is not None
    return caught
