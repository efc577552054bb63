"""``onlooker audit``: verify, follow and replay audit trails."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.markup import escape

from ._common import db_url, stderr, stdout

__all__ = ["audit_app"]

audit_app = typer.Typer(
    help="Check and read the hash-chained audit trails.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

TrailPath = Annotated[
    Path,
    typer.Argument(
        metavar="PATH",
        help="A session directory (.onlooker/audit/SESSION) or one of its events*.jsonl files.",
        show_default=False,
    ),
]


@audit_app.command(
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker audit verify .onlooker/audit/run-20250101-120000-3f2a\n\n"
        "  onlooker audit verify .onlooker/audit/SESSION/events.jsonl && echo intact"
    ),
)
def verify(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="PATH",
            help="A session directory, one of its events*.jsonl files, or the audit directory "
            "itself (every session in it is verified).",
            show_default=False,
        ),
    ],
) -> None:
    """Prove a trail whole: every line parses and is chained to the one before.

    Exits 1 on tampering, a broken chain or a torn last line, naming the
    file and the line.
    """
    from onlooker import AuditError
    from onlooker.plugins import audit

    _exists(path)
    targets = _sessions(path) or [path]
    damaged = 0
    for target in targets:
        try:
            report = audit.verify(target)
        except AuditError as exc:
            raise typer.BadParameter(str(exc), param_hint="PATH") from None
        label = f"{escape(str(target))}: " if len(targets) > 1 else ""
        if report.ok:
            stdout.print(
                f"{label}[green]ok[/]: {report.records} records in {report.segments} segment(s), "
                "chain intact"
            )
            continue
        damaged += 1
        verdict = "TORN TAIL" if report.reason == "torn_tail" else "TAMPERED"
        where = f" at {report.first_bad}" if report.first_bad is not None else ""
        detail = f": {report.detail}" if report.detail else ""
        stdout.print(
            f"{label}[red]{verdict}[/]{escape(where)} ({report.reason}){escape(detail)}",
            soft_wrap=True,
        )
        stdout.print(f"{report.records} intact record(s) before it")
    if damaged:
        raise typer.Exit(1)


def _sessions(path: Path) -> list[Path]:
    """The session directories under an audit directory ([] when ``path`` is a trail itself)."""
    if not path.is_dir() or any(path.glob("events*.jsonl")):
        return []
    return sorted(p for p in path.iterdir() if p.is_dir() and any(p.glob("events*.jsonl")))


@audit_app.command(
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker audit tail .onlooker/audit/SESSION -f\n\n"
        "  onlooker audit tail .onlooker/audit/SESSION --json | jq .kind"
    ),
)
def tail(
    path: TrailPath,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing events as they are appended.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One event as JSON per line.")] = False,
) -> None:
    """Print the events of a trail, one per line (Ctrl-C stops --follow)."""
    import onlooker
    from onlooker.plugins import audit

    from ._render import event_line

    _exists(path)
    try:
        for event in audit.tail(path, follow=follow):
            if as_json:
                typer.echo(event.model_dump_json())
            else:
                stdout.print(event_line(event))
    except KeyboardInterrupt:
        pass
    except onlooker.OnlookerError as exc:
        stderr.print(f"[red]error[/]: {escape(str(exc))}")
        raise typer.Exit(1) from None


@audit_app.command(
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker audit replay .onlooker/audit/SESSION --db sqlite:///rebuilt.db\n\n"
        "  onlooker audit replay .onlooker/audit/SESSION   # into .onlooker/history.db"
    ),
)
def replay(
    path: TrailPath,
    db: Annotated[
        str | None,
        typer.Option(help="History database URL or SQLite file (default: .onlooker/history.db)."),
    ] = None,
) -> None:
    """Rebuild history from a trail. Idempotent: replaying twice changes nothing."""
    import onlooker
    from onlooker.plugins import audit, history

    _exists(path)

    async def go() -> int:
        async with history.open(db_url(db)) as store:
            return await audit.replay(path, store)

    try:
        count = anyio.run(go)
    except onlooker.OnlookerError as exc:
        stderr.print(f"[red]error[/]: {escape(str(exc))}")
        raise typer.Exit(1) from None
    stdout.print(f"replayed {count} events from {escape(str(path))}")


def _exists(path: Path) -> None:
    if not path.exists():
        raise typer.BadParameter(f"no such file or directory: {str(path)!r}", param_hint="PATH")
