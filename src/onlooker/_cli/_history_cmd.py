"""``onlooker history``: list, show and count the recorded executions."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar

import anyio
import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ._common import (
    STYLES,
    escape,
    existing_db,
    flag,
    json_text,
    ms,
    parse_time,
    printable,
    reading,
    stderr,
    stdout,
)

if TYPE_CHECKING:
    from onlooker.plugins.history import (
        ExecutionList,
        ExecutionRecord,
        ExecutionTree,
        HistoryStats,
    )

__all__ = ["history_app"]

T = TypeVar("T")

history_app = typer.Typer(
    help="Read the recorded executions (the history database).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

Db = Annotated[
    str | None,
    typer.Option(help="History database URL or SQLite file (default: .onlooker/history.db)."),
]
_STATUSES = ("running", "completed", "failed", "cancelled", "expired")
Json = Annotated[bool, flag("--json", help="Machine-readable output.")]


@history_app.command(
    "list",
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker history list --status failed --since 1d\n\n"
        "  onlooker history list --tool fetch --json | jq .execution_id"
    ),
)
def list_(
    db: Db = None,
    status: Annotated[
        str | None,
        typer.Option(help="running, completed, failed, cancelled or expired."),
    ] = None,
    tool: Annotated[str | None, typer.Option(help="Only executions that called this tool.")] = None,
    trigger: Annotated[
        str | None, typer.Option(help="Only executions with this trigger kind (cli, api, ...).")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Started at or after: ISO 8601 time or an age (30m, 2d).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Started before: ISO 8601 time or an age (30m, 2d).")
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=10_000, help="At most this many (newest first).")  # MAX_LIMIT
    ] = 50,
    cursor: Annotated[
        str | None, typer.Option(help="Continue after a previous page (its next cursor).")
    ] = None,
    as_json: Json = False,
) -> None:
    """List executions, newest first: a table, or one JSON object per line with --json."""
    if status is not None and status not in _STATUSES:
        raise typer.BadParameter(
            f"{status!r} is not one of {', '.join(_STATUSES)}", param_hint="--status"
        )
    filters: dict[str, Any] = {
        "status": status,
        "tool": tool,
        "trigger": trigger,
        "since": parse_time(since, "--since"),
        "until": parse_time(until, "--until"),
        "limit": limit,
        "cursor": _checked_cursor(cursor),
    }

    url = existing_db(db)

    async def read() -> ExecutionList:
        async with reading(url) as store:
            return await store.list_executions(**filters)

    page = _call(read)
    if as_json:
        for record in page:
            typer.echo(json_text(record))
        if page.next_cursor is not None:
            typer.echo(json.dumps({"next_cursor": page.next_cursor}))
        return
    stdout.print(_table(page) if stdout.width >= _TABLE_WIDTH else _blocks(page))
    if page.next_cursor is not None:  # one line, whatever the width: it is copied whole
        stdout.print(f"more: --cursor {page.next_cursor}", soft_wrap=True)


_TABLE_WIDTH: Final = 78
"""The narrowest terminal the table fits (its columns' least widths); narrower, each
execution is a block of lines, so no column is cut off."""


def _times(record: ExecutionRecord) -> tuple[str, str]:
    """An execution's start (UTC, to the second) and duration, as the list shows them."""
    started = record.started_at.strftime("%m-%d %H:%M:%S") if record.started_at else ""
    return started, ms(record.duration_ms) if record.duration_ms is not None else ""


def _blocks(page: ExecutionList) -> Text:
    """The executions for a narrow terminal: the id and status, then the rest, wrapping."""
    text = Text()
    for record in page:
        started, duration = _times(record)
        details = "  ".join(
            part
            for part in (record.program or "?", record.trigger or "", started, duration)
            if part
        )
        text.append(printable(record.execution_id))  # a Text: no markup, control characters
        text.append(f"  {record.status}\n", style=STYLES.get(record.status, "white"))
        text.append(f"  {printable(details)}\n")
    return text


def _table(page: ExecutionList) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    # Ids fold onto a second line when the terminal is narrow; program and
    # trigger keep room for a name (wrapping, never cut).
    table.add_column("execution", overflow="fold", min_width=14)
    for column in ("program", "trigger"):
        table.add_column(column, overflow="fold", min_width=11)
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("started (UTC)", no_wrap=True, min_width=14)
    table.add_column("duration", justify="right", no_wrap=True, min_width=8)
    for record in page:
        started, duration = _times(record)
        style = STYLES.get(record.status, "white")
        table.add_row(
            escape(record.execution_id),
            escape(record.program or "?"),
            escape(record.trigger or ""),
            f"[{style}]{record.status}[/]",
            started,
            duration,
        )
    return table


@history_app.command(
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker history show 3f2a9c1e04b7-12\n\n"
        "  onlooker history show 3f2a9c1e04b7-12 --json | jq '.tool_calls[].status'"
    ),
)
def show(
    execution_id: Annotated[
        str, typer.Argument(metavar="ID", help="The execution's id.", show_default=False)
    ],
    db: Db = None,
    as_json: Json = False,
) -> None:
    """Show one execution as a tree: tool calls, questions and child executions.

    Exits 1 when no execution has this id.
    """
    url = existing_db(db)

    async def read() -> ExecutionTree | None:
        async with reading(url) as store:
            return await store.get_execution(execution_id)

    tree = _call(read)
    if tree is None:
        stderr.print(f"[red]error[/]: no execution {escape(repr(execution_id))} in the history")
        raise typer.Exit(1)
    if as_json:
        typer.echo(json_text(tree, indent=2))
    else:
        from ._render import execution_tree

        stdout.print(execution_tree(tree))


@history_app.command(
    epilog="[b]Examples[/b]\n\n  onlooker history stats --since 7d\n\n  onlooker history stats --json",
)
def stats(
    db: Db = None,
    since: Annotated[
        str | None, typer.Option(help="Only executions since: ISO 8601 time or an age (30m, 2d).")
    ] = None,
    as_json: Json = False,
) -> None:
    """Count executions by status and tool calls per tool (failure rate, p50 and p95)."""
    moment = parse_time(since, "--since")
    url = existing_db(db)

    async def read() -> HistoryStats:
        async with reading(url) as store:
            return await store.stats(since=moment)

    result = _call(read)
    if as_json:
        typer.echo(json_text(result, indent=2))
        return
    by_status = ", ".join(f"{k} {v}" for k, v in sorted(result.executions_by_status.items()))
    stdout.print(f"executions: {result.executions}" + (f" ({by_status})" if by_status else ""))
    stdout.print(f"tool calls: {result.tool_calls}")
    if result.tools:
        table = Table("tool", "calls", "failed", "failure rate", "p50", "p95", box=box.SIMPLE_HEAD)
        for tool in result.tools:
            table.add_row(
                escape(tool.tool),
                str(tool.calls),
                str(tool.failed),
                f"{tool.failure_rate:.0%}",
                ms(tool.p50_ms) if tool.p50_ms is not None else "",
                ms(tool.p95_ms) if tool.p95_ms is not None else "",
            )
        stdout.print(table)


def _checked_cursor(cursor: str | None) -> str | None:
    """``cursor`` if it is one of the list's own cursors; a usage error (exit 2) if not."""
    if cursor is not None:
        from onlooker import HistoryError
        from onlooker.plugins.history._read import decode_cursor

        try:
            decode_cursor(cursor)
        except HistoryError as exc:
            raise typer.BadParameter(str(exc), param_hint="--cursor") from None
    return cursor


def _call(read: Callable[[], Awaitable[T]]) -> T:
    """Run one read against the store.

    A store error (unreachable database, newer schema) is a message and exit
    1; a bad argument the store rejects is exit 2.
    """
    import sqlalchemy.exc

    import onlooker
    from onlooker.plugins.history._db import describe

    try:
        return anyio.run(read)
    except onlooker.OnlookerError as exc:
        stderr.print(f"[red]error[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except sqlalchemy.exc.SQLAlchemyError as exc:  # the database failed the read itself
        stderr.print(
            f"[red]error[/]: the history database cannot be read: {escape(describe(exc))}",
            soft_wrap=True,
        )
        raise typer.Exit(1) from None
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
