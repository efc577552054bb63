"""What ``onlooker run`` does once its arguments are checked: the engine, the plugins, the output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import typer
from rich.console import Console

import onlooker
from onlooker import Elicitation, ExecutionEvent, InteractionResponse

from ._common import stderr, stdout
from ._program import LoadedProgram
from ._prompt import ask
from ._render import event_line, execution_tree, summary_table

__all__ = ["run_program"]


async def run_program(
    program: LoadedProgram,
    url: str | None,
    audit_dir: Path | None,
    session: str | None,
    content: dict[str, Any] | None,
    interactive: bool,
    quiet: bool,
    as_json: bool = False,
) -> str:
    """Run ``function`` with every built-in plugin, print its tree and summary; its status."""
    from onlooker.plugins import audit, history, metrics, summary

    summaries = summary.plugin()
    plugins: list[onlooker.Plugin[Any]] = [history.plugin(url), metrics.plugin(), summaries]
    trail = None
    if audit_dir is not None:
        trail = audit.plugin(directory=audit_dir, session_id=session)
        plugins.append(trail)
    if not quiet:
        plugins.append(
            onlooker.define_plugin(id="cli-progress", observer=lambda _: _Progress(stderr))
        )

    async def answer(question: Elicitation) -> InteractionResponse:
        if content is not None:
            return InteractionResponse.accept(content)
        if interactive:
            return await anyio.to_thread.run_sync(_ask_or_decline, question)
        return InteractionResponse.decline()

    trigger = onlooker.Trigger(kind="cli", metadata={"program": program.name})
    owner = os.environ.get("USER") or os.environ.get("USERNAME")
    async with onlooker.ExecutionEngine(tools=program.tools, plugins=plugins) as engine:
        result = await engine.execute(
            program.function, on_elicitation=answer, trigger=trigger, owner=owner
        )
        report = engine.extension(summaries).get(result.execution_id)
        trail_path = None
        if trail is not None and engine.extension(trail).enabled:
            trail_path = engine.extension(trail).session_dir
    if as_json:
        _print_json(result, report, url, trail_path)
        return result.status
    await _print_tree(result, report, url, trail_path)
    return result.status


async def _print_tree(
    result: onlooker.ExecutionResult[Any], report: Any, url: str | None, trail_path: Path | None
) -> None:
    """The tree (read back from history), the summary, the result, and where to look next."""
    from onlooker.plugins import history

    async with history.open(url) as store:
        tree = await store.get_execution(result.execution_id)
    stdout.print()
    if tree is not None:
        stdout.print(execution_tree(tree))
    if report is not None:
        stdout.print()
        stdout.print(summary_table(report))
    if result.status == "completed":
        stdout.print(f"\n[green]result[/]: {json.dumps(result.value, default=repr)}")
    stdout.print(
        f"\nhistory: onlooker history show {result.execution_id}"
        + (f" --db '{url}'" if url else "")
    )
    if trail_path is not None:
        stdout.print(f"audit:   onlooker audit verify {trail_path}")


def _ask_or_decline(question: Elicitation) -> InteractionResponse:
    """Ask in the terminal; stdin at its end (a pipe, a closed terminal) declines."""
    try:
        return ask(question, stderr)
    except EOFError:
        stderr.print("[yellow]no answer (end of input): declined[/]")
        return InteractionResponse.decline()


def _print_json(
    result: onlooker.ExecutionResult[Any],
    report: Any,
    url: str | None,
    trail_path: Path | None,
) -> None:
    outcome = {
        "execution_id": result.execution_id,
        "status": result.status,
        "result": result.value,
        "error": None if result.error is None else result.error.model_dump(mode="json"),
        "summary": None if report is None else report.model_dump(mode="json"),
        "history": url or str(Path(".onlooker/history.db").resolve()),
        "audit": None if trail_path is None else str(trail_path),
    }
    typer.echo(json.dumps(outcome, default=repr))


class _Progress:
    """Prints one line per event while the program runs."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def handle(self, event: ExecutionEvent) -> None:
        self.console.print(event_line(event))
