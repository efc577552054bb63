"""Builders shared by the UI tests (no tests here): tools, programs, recorded stores."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

import onlooker
from onlooker import ExecutionContext, HookAction, HookMatcher, PreHookResult, ToolUseContext
from onlooker.plugins import audit, history

__all__ = [
    "ALL_TOOLS",
    "GOVERNANCE",
    "XSS",
    "digest",
    "mixed",
    "record",
    "run_recorded",
    "sqlite_url",
]

XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
"""Markup that would run if a page let it through unescaped."""


@onlooker.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@onlooker.tool
def explode(reason: str) -> None:
    """Always fails."""
    raise onlooker.ToolError(reason)


@onlooker.tool
def forbidden(target: str) -> str:
    """Blocked by GOVERNANCE before it runs."""
    return target


@onlooker.tool
def skippable(target: str) -> str:
    """Skipped by GOVERNANCE."""
    return target


@onlooker.tool
async def sleepy(seconds: float) -> None:
    """Sleeps (cancelled by the program's timeout in ``mixed``)."""
    await anyio.sleep(seconds)


@onlooker.tool(reads="path")
def read_note(path: str) -> str:
    """Reads a note (a declared file read)."""
    return f"contents of {path}"


@onlooker.tool(mutating=True, writes="path")
def write_note(path: str, text: str) -> int:
    """Writes a note (a declared file write)."""
    return len(text)


@onlooker.tool
def echo(text: str) -> str:
    """Returns its argument."""
    return text


ALL_TOOLS: list[onlooker.Tool[..., Any]] = [
    add,
    explode,
    forbidden,
    skippable,
    sleepy,
    read_note,
    write_note,
    echo,
]


def _govern(context: ToolUseContext) -> PreHookResult:
    if context.tool_name == "forbidden":
        return PreHookResult(HookAction.BLOCK, reason="not on the allow list")
    if context.tool_name == "skippable":
        return PreHookResult(HookAction.SKIP, metadata={"policy": "skip-it"})
    return PreHookResult(metadata={"checked_by": "governance"})


GOVERNANCE = HookMatcher(pre=(_govern,))


async def _child(ctx: ExecutionContext) -> int:
    return await ctx.call(add, a=20, b=22)


async def mixed(ctx: ExecutionContext) -> str:
    """One call of every ending: completed, failed, blocked, skipped, cancelled; a child; a question."""
    await ctx.call(read_note, path="notes/in.md")
    with contextlib.suppress(onlooker.ToolError):
        await ctx.call(explode, reason="the disk is on fire")
    with contextlib.suppress(onlooker.ToolBlockedError):
        await ctx.call(forbidden, target="prod")
    await ctx.call(skippable, target="x")
    with anyio.move_on_after(0.02):
        await ctx.call(sleepy, seconds=30)
    await ctx.spawn(_child, task_id="helper")
    await ctx.elicit("Ship it?")
    await ctx.call(write_note, path="notes/out.md", text="done")
    return "ok"


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of a SQLite file."""
    return f"sqlite:///{path}"


async def record(
    url: str,
    program: onlooker.Program[Any],
    *,
    audit_dir: Path | None = None,
    session: str | None = None,
    **execute: Any,
) -> str:
    """Run ``program`` once under an engine with the history (and audit) plugin; its id."""
    plugins: list[onlooker.Plugin[Any]] = [history.plugin(url)]
    if audit_dir is not None:
        plugins.append(audit.plugin(directory=audit_dir, session_id=session))
    async with onlooker.ExecutionEngine(
        tools=ALL_TOOLS, plugins=plugins, hooks=[GOVERNANCE]
    ) as engine:
        result = await engine.execute(program, **execute)
    return result.execution_id


def run_recorded(
    url: str,
    programs: Sequence[onlooker.Program[Any]],
    **execute: Any,
) -> list[str]:
    """``record`` each program in turn (from synchronous tests); their ids."""

    async def go() -> list[str]:
        return [await record(url, program, **execute) for program in programs]

    return anyio.run(go)


def digest(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
