"""``onlooker run``: run a program under the engine with every built-in plugin on."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

import onlooker
from onlooker._shared import json_loads

from ._common import db_url, escape, flag, stderr
from ._stopping import Stopped, stopping

__all__ = ["run"]


Program = Annotated[
    str,
    typer.Argument(
        metavar="PROGRAM",
        help="PROGRAM.py[:function]: the file and its async function (default: main).",
        show_default=False,
    ),
]
Db = Annotated[
    str | None,
    typer.Option(help="History database URL or SQLite file (default: .onlooker/history.db)."),
]
AuditDir = Annotated[Path, typer.Option(help="Directory of the audit trails.")]
Session = Annotated[str | None, typer.Option(help="Audit session id (default: a new one per run).")]
Answer = Annotated[
    str | None, typer.Option(help="Accept every question with this JSON object as the answer.")
]
Interactive = Annotated[
    bool,
    flag(
        "--interactive", "-i", help="Ask the questions in the terminal (declined when stdin ends)."
    ),
]
Quiet = Annotated[bool, flag("--quiet", "-q", help="No progress lines while it runs.")]
AsJson = Annotated[
    bool, flag("--json", help="Print the outcome as one JSON object instead of the tree.")
]


def run(
    program: Program,
    db: Db = None,
    audit_dir: AuditDir = Path(".onlooker/audit"),
    session: Session = None,
    no_audit: Annotated[bool, flag("--no-audit", help="Do not write an audit trail.")] = False,
    answer: Answer = None,
    interactive: Interactive = False,
    quiet: Quiet = False,
    as_json: AsJson = False,
) -> None:
    """Run a program under onlooker and print its execution tree and summary.

    The program is an async function taking the ExecutionContext
    (async def main(ctx) -> ...). Its tools are the file's TOOLS list, or
    else every module-level tool (made with @onlooker.tool). History, audit,
    metrics and summary are on. Questions are answered from --answer, asked
    with --interactive, or else declined. Exits 1 when the execution did not
    complete. With --json, one JSON object: execution_id, status, result,
    error, summary, and where history and audit put it.
    """
    if answer is not None and interactive:
        raise typer.BadParameter("use --answer or --interactive, not both", param_hint="--answer")
    content = _parse_answer(answer) if answer is not None else None
    if session is not None:
        _check_session(session)
    from ._program import LoadError, load_program
    from ._runner import run_program

    try:
        # With --json, stdout holds the one JSON object: what importing prints goes to stderr.
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            loaded = load_program(program)
    except LoadError as exc:
        raise typer.BadParameter(str(exc), param_hint="PROGRAM") from None
    # Ctrl-C and SIGTERM (timeout, docker stop, systemd, CI) cancel the run: recorded
    # cancelled, every event written; the process then exits 130 / 143.
    try:
        with stopping() as stop:
            status = anyio.run(
                run_program,
                loaded,
                db_url(db),
                None if no_audit else audit_dir,
                session,
                content,
                interactive,
                quiet,
                as_json,
                stop,
            )
    except onlooker.OnlookerError as exc:  # the engine could not start: a database, a plugin
        stderr.print(f"[red]error[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except Stopped as stopped:
        raise typer.Exit(128 + stopped.signum) from None
    if stop.received:  # it ended before the stop reached it (a tool that caught it): as asked
        raise typer.Exit(128 + stop.signum)
    raise typer.Exit(0 if status == "completed" else 1)


def _parse_answer(raw: str) -> dict[str, Any]:
    try:
        value = json_loads(raw)  # (nesting too deep is a ValueError too)
    except ValueError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc}", param_hint="--answer") from None
    if not isinstance(value, dict):
        raise typer.BadParameter(
            "must be a JSON object, like '{\"approve\": true}'", param_hint="--answer"
        )
    return value


def _check_session(session: str) -> None:
    import onlooker
    from onlooker.plugins.audit._writer import validate_session_id

    try:
        validate_session_id(session)
    except onlooker.AuditError as exc:
        raise typer.BadParameter(str(exc), param_hint="--session") from None
