"""``onlooker audit``: verify, follow and replay audit trails."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from ._common import db_url, escape, flag, json_text, stderr, stdout

if TYPE_CHECKING:
    from onlooker import ExecutionEvent
    from onlooker.plugins.audit import EventSink

__all__ = ["audit_app"]

audit_app = typer.Typer(
    help="Check and read the hash-chained audit trails.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

Json = Annotated[bool, flag("--json", help="Print the result as one JSON object.")]

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
    as_json: Json = False,
) -> None:
    """Prove a trail whole: every line parses and is chained to the one before.

    Exits 1 on tampering, a broken chain or a torn last line, naming the
    file and the line.
    """
    from onlooker import AuditError
    from onlooker.plugins import audit

    _exists(path)
    targets = _sessions(path) or [path]
    results: list[dict[str, Any]] = []
    for target in targets:
        try:
            report = audit.verify(target)
        except AuditError as exc:
            if target is path:  # PATH itself, not a session of the audit directory it names
                raise typer.BadParameter(str(exc), param_hint="PATH") from None
            # a session of the audit directory that cannot be read: not verified, so not ok
            results.append({"path": str(target), "ok": False, "reason": "unreadable",
                            "records": 0, "segments": 0, "first_bad": None,
                            "detail": str(exc)})  # fmt: skip
            if not as_json:
                stdout.print(
                    f"{escape(str(target))}: [red]UNREADABLE[/] {escape(str(exc))}", soft_wrap=True
                )
            continue
        results.append(
            {
                "path": str(target),
                "ok": report.ok,
                "records": report.records,
                "segments": report.segments,
                "reason": report.reason,
                "first_bad": None if report.first_bad is None else str(report.first_bad),
                "detail": report.detail or None,
            }
        )
        if not as_json:
            _print_verdict(report, f"{escape(str(target))}: " if len(targets) > 1 else "")
    damaged = sum(1 for result in results if not result["ok"])
    if as_json:
        typer.echo(json.dumps({"ok": not damaged, "sessions": results}))
    if damaged:
        raise typer.Exit(1)


def _print_verdict(report: Any, label: str) -> None:
    if report.ok:
        stdout.print(
            f"{label}[green]ok[/]: {report.records} records in {report.segments} segment(s), "
            "chain intact"
        )
        return
    verdict = "TORN TAIL" if report.reason == "torn_tail" else "TAMPERED"
    where = f" at {report.first_bad}" if report.first_bad is not None else ""
    detail = f": {report.detail}" if report.detail else ""
    stdout.print(
        f"{label}[red]{verdict}[/]{escape(where)} ({report.reason}){escape(detail)}",
        soft_wrap=True,
    )
    stdout.print(f"{report.records} intact record(s) before it")


def _sessions(path: Path) -> list[Path]:
    """The session directories under an audit directory ([] when ``path`` is a trail itself).

    A directory that cannot be listed is one too: verify and replay say they could not
    read it, rather than skip evidence (``Path.glob`` finds nothing there, silently).
    """
    if not path.is_dir() or any(path.glob("events*.jsonl")):
        return []
    sessions: list[Path] = []
    for entry in sorted(path.iterdir()):
        if not entry.is_dir():
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            sessions.append(entry)
            continue
        if any(fnmatch(name, "events*.jsonl") for name in names):
            sessions.append(entry)
    return sessions


def _last_written(session: Path) -> float:
    """When a session's trail was last written (its live file, or a rotated segment)."""
    times = []
    for file in session.glob("events*.jsonl"):
        with contextlib.suppress(OSError):
            times.append(file.stat().st_mtime)
    return max(times, default=0.0)


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
        bool, flag("--follow", "-f", help="Keep printing events as they are appended.")
    ] = False,
    as_json: Annotated[bool, flag("--json", help="One event as JSON per line.")] = False,
) -> None:
    """Print the events of a trail, one per line (Ctrl-C stops --follow)."""
    import onlooker
    from onlooker.plugins import audit

    from ._render import event_line

    _exists(path)
    _holds_a_trail(path)
    if path.is_dir() and not any(path.glob("events*.jsonl")):  # the audit directory
        sessions = _sessions(path)
        newest = max(sessions, key=_last_written)  # session ids may be random (Claude Code's)
        raise typer.BadParameter(
            f"{str(path)!r} holds the trails of {len(sessions)} session(s); tail the newest: "
            f"onlooker audit tail {shlex.quote(str(newest))}",
            param_hint="PATH",
        )
    try:
        for event in audit.tail(path, follow=follow):
            if as_json:
                typer.echo(json_text(event))
            else:
                stdout.print(event_line(event), soft_wrap=True)  # one line, however long
    except KeyboardInterrupt:
        pass
    except onlooker.OnlookerError as exc:
        stderr.print(f"[red]error[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None


@audit_app.command(
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker audit replay .onlooker/audit   # every session, into .onlooker/history.db\n\n"
        "  onlooker audit replay .onlooker/audit/SESSION --db sqlite:///rebuilt.db"
    ),
)
def replay(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="PATH",
            help="A session directory, one of its events*.jsonl files, or the audit directory "
            "itself (every session in it is replayed).",
            show_default=False,
        ),
    ],
    db: Annotated[
        str | None,
        typer.Option(help="History database URL or SQLite file (default: .onlooker/history.db)."),
    ] = None,
    as_json: Json = False,
) -> None:
    """Rebuild history from trails. Idempotent: replaying twice changes nothing.

    Events already in the database (by event id) are skipped, so replaying a
    growing trail again adds only what is new. A damaged session is replayed
    up to its bad line, which is named; the other sessions are replayed, and
    the exit code is 1.
    """
    import onlooker
    from onlooker.plugins import audit, history

    _exists(path)
    _holds_a_trail(path)
    targets = _sessions(path) or [path]

    async def go() -> list[dict[str, Any]]:
        sessions: list[dict[str, Any]] = []
        async with history.open(db_url(db)) as store:
            for target in targets:
                counted = _Counted(store)
                session: dict[str, Any] = {"path": str(target), "new_events": 0}
                try:
                    await audit.replay(target, counted)
                except onlooker.AuditError as exc:
                    session["error"] = str(exc)
                session["new_events"] = counted.new
                sessions.append(session)
        return sessions

    try:
        sessions = anyio.run(go)
    except onlooker.OnlookerError as exc:
        stderr.print(f"[red]error[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    damaged = [session for session in sessions if "error" in session]
    for session in damaged:
        stderr.print(f"[red]error[/]: {escape(session['error'])}", soft_wrap=True)
    new_events = sum(session["new_events"] for session in sessions)
    if as_json:
        typer.echo(json.dumps({"new_events": new_events, "sessions": sessions}))
    elif targets == [path]:
        stdout.print(f"replayed {new_events} new events from {escape(str(path))}")
    else:
        many = f"{len(targets)} session" + ("s" if len(targets) > 1 else "")
        bad = f" ({len(damaged)} damaged)" if damaged else ""
        stdout.print(f"replayed {new_events} new events from {many} in {escape(str(path))}{bad}")
    if damaged:
        raise typer.Exit(1)


class _Counted:
    """A store that counts the new events written through it: when a bad line stops
    ``audit.replay``, the events it wrote before it are still counted."""

    def __init__(self, store: EventSink) -> None:
        self.store = store
        self.new = 0

    async def write_events(self, events: Sequence[ExecutionEvent], /) -> int:
        new = await self.store.write_events(events)
        self.new += new
        return new


def _exists(path: Path) -> None:
    """A usage error (exit 2) unless ``path`` is there and may hold a trail: a directory, or
    an ``events*.jsonl`` file (anything else holds no trail; ``replay`` must not create a
    database for it)."""
    if not path.exists():
        raise typer.BadParameter(f"no such file or directory: {str(path)!r}", param_hint="PATH")
    if not path.is_dir() and not fnmatch(path.name, "events*.jsonl"):
        raise typer.BadParameter(
            f"{str(path)!r} is not an audit trail file (events*.jsonl) or directory",
            param_hint="PATH",
        )


def _holds_a_trail(path: Path) -> None:
    """A usage error (exit 2) for a directory with no trail in it, nor sessions."""
    if path.is_dir() and not _sessions(path) and not any(path.glob("events*.jsonl")):
        raise typer.BadParameter(f"no audit trail in {str(path)!r}", param_hint="PATH")
