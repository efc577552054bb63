"""``onlooker run``: run a program under the engine with every built-in plugin on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console

import onlooker
from onlooker import Elicitation, ExecutionEvent, InteractionResponse

from ._common import db_url, stderr, stdout
from ._program import LoadError, load_program
from ._prompt import ask
from ._render import event_line, execution_tree, summary_table

__all__ = ["run"]


def run(
    program: Annotated[
        str,
        typer.Argument(
            help="PROGRAM.py[:function]: the file and its async function (default: main).",
            show_default=False,
        ),
    ],
    db: Annotated[
        str | None,
        typer.Option(help="History database URL or SQLite file (default: .onlooker/history.db)."),
    ] = None,
    audit_dir: Annotated[Path, typer.Option(help="Directory of the audit trails.")] = Path(
        ".onlooker/audit"
    ),
    session: Annotated[
        str | None,
        typer.Option(help="Audit session id (default: a new one per run)."),
    ] = None,
    no_audit: Annotated[
        bool, typer.Option("--no-audit", help="Do not write an audit trail.")
    ] = False,
    answer: Annotated[
        str | None,
        typer.Option(help="Accept every question with this JSON object as the answer."),
    ] = None,
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="Ask the questions in the terminal.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress lines while it runs.")
    ] = False,
) -> None:
    """Run a program under onlooker and print its execution tree and summary.

    The program is an async function taking the ExecutionContext
    (async def main(ctx) -> ...). Its tools are the file's TOOLS list, or
    else every module-level tool (made with @onlooker.tool). History, audit,
    metrics and summary are on. Questions are answered from --answer, asked
    with --interactive, or else declined. Exits 1 when the execution did not
    complete.
    """
    if answer is not None and interactive:
        raise typer.BadParameter("use --answer or --interactive, not both", param_hint="--answer")
    content = _parse_answer(answer) if answer is not None else None
    try:
        loaded = load_program(program)
    except LoadError as exc:
        raise typer.BadParameter(str(exc), param_hint="PROGRAM") from None
    status = anyio.run(
        _run,
        loaded.function,
        loaded.tools,
        db_url(db),
        None if no_audit else audit_dir,
        session,
        content,
        interactive,
        quiet,
    )
    raise typer.Exit(0 if status == "completed" else 1)


def _parse_answer(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc}", param_hint="--answer") from None
    if not isinstance(value, dict):
        raise typer.BadParameter(
            "must be a JSON object, like '{\"approve\": true}'", param_hint="--answer"
        )
    return value


async def _run(
    function: onlooker.Program[Any],
    tools: list[onlooker.Tool[..., Any]],
    url: str | None,
    audit_dir: Path | None,
    session: str | None,
    content: dict[str, Any] | None,
    interactive: bool,
    quiet: bool,
) -> str:
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
            return await anyio.to_thread.run_sync(ask, question, stderr)
        return InteractionResponse.decline()

    async with onlooker.ExecutionEngine(tools=tools, plugins=plugins) as engine:
        result = await engine.execute(function, on_elicitation=answer, trigger="cli")
        report = engine.extension(summaries).get(result.execution_id)
        trail_path = _trail_path(engine.extension(trail)) if trail is not None else None
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
    return result.status


def _trail_path(extension: object) -> str | None:
    path = getattr(extension, "path", None)
    return None if path is None else str(path)


class _Progress:
    """Prints one line per event while the program runs."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def handle(self, event: ExecutionEvent) -> None:
        self.console.print(event_line(event))
