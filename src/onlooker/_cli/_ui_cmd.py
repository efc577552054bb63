"""``onlooker ui``: serve the read-only web view of the history database."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from ._common import db_url, escape, is_loopback, stderr

if TYPE_CHECKING:
    from onlooker import Tool

__all__ = ["EPILOG", "ui"]

EPILOG: Final = (
    "[b]Examples[/b]\n\n"
    "  onlooker ui\n\n"
    "  onlooker ui --db sqlite:///runs.db --audit .onlooker/audit --port 8800\n\n"
    "  onlooker ui --tools examples/research_agent.py   # its files in the summary"
)
"""The examples under ``onlooker ui --help``."""

_EXTRA_MODULES: Final = ("starlette", "uvicorn", "sse_starlette", "jinja2")


def ui(
    db: Annotated[
        str | None,
        typer.Option(help="History database URL or SQLite file (default: .onlooker/history.db)."),
    ] = None,
    audit: Annotated[
        Path | None,
        typer.Option(
            help="Audit directory (.onlooker/audit): show each execution's audit verify verdict.",
            show_default=False,
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Interface to listen on (loopback by default; 0.0.0.0 for all).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free one).")] = 8765,
    tools: Annotated[
        list[Path] | None,
        typer.Option(
            "--tools",
            help="A program file whose tools' reads/writes/edits give the summary its files "
            "(repeatable).",
            show_default=False,
        ),
    ] = None,
    interval: Annotated[
        float, typer.Option(min=0.1, help="Seconds between two reads for the live views.")
    ] = 1.0,
) -> None:
    """Serve a read-only web view of the history at http://HOST:PORT/.

    Executions (filtered, paged, live), each one's timeline with its details,
    child executions and summary, the audit verdict, per-tool stats. It never
    writes to the database and never creates one. Runs until interrupted
    (Ctrl-C); exits 1 when the database cannot be read or the port is taken.
    """
    _require_the_extra()
    if audit is not None and not audit.is_dir():
        raise typer.BadParameter(f"no such directory: {str(audit)!r}", param_hint="--audit")
    host = _listenable(host)

    from onlooker._ui import LOOPBACK_HOSTS, create_app, serve

    url = db_url(db)
    label = _readable(url)
    declared = _load_tools(tools or [])
    loopback = is_loopback(host)
    app = create_app(
        url,
        audit_dir=audit,
        tools=declared,
        poll_interval=interval,
        # The loopback names a browser may use, and the one the server was given (127.0.0.2).
        allowed_hosts=(*LOOPBACK_HOSTS, host.strip("[]")) if loopback else None,
    )

    with contextlib.suppress(KeyboardInterrupt):
        serve(app, host, port, on_start=lambda address: _announce(label, address, loopback))


def _listenable(host: str) -> str:
    """``host`` as the server takes it (``[::1]``, as URLs write it, is ``::1``); a usage
    error naming it when it is no address of this machine's resolver."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        socket.getaddrinfo(bare or None, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise typer.BadParameter(
            f"cannot listen on {host!r}: {reason}", param_hint="--host"
        ) from None
    return bare


def _require_the_extra() -> None:
    missing = [name for name in _EXTRA_MODULES if not _importable(name)]
    if missing:
        stderr.print(
            f"[red]error[/]: onlooker ui needs {', '.join(missing)}, "
            f"which {'is' if len(missing) == 1 else 'are'} not installed: "
            'pip install "onlooker\\[ui]"',
            soft_wrap=True,  # the command stays whole, to copy
        )
        raise typer.Exit(1)


def _announce(label: str, address: str, loopback: bool) -> None:
    stderr.print(
        f"serving {escape(label)} (read-only) at {escape(address)}/ — Ctrl-C stops",
        soft_wrap=True,
    )
    if not loopback:
        stderr.print(
            "[yellow]warning[/]: listening beyond this machine: anyone who can reach "
            "it can read the recorded tool arguments and results"
        )


def _readable(url: str | None) -> str:
    """The database's name (password hidden) once opened read-only, or exit 1 saying why.

    A missing or foreign database is a message now, not a failed server start.
    """
    import anyio

    import onlooker

    try:
        return anyio.run(_check, url)
    except onlooker.OnlookerError as exc:
        stderr.print(f"[red]error[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None


async def _check(url: str | None) -> str:
    """Open the database read-only once; its name (password hidden)."""
    from onlooker.plugins import history

    async with history.open(url, read_only=True) as store:
        return store.url


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _load_tools(paths: list[Path]) -> list[Tool[..., Any]]:
    from ._program import LoadError, _import, _tools_of

    found: list[Tool[..., Any]] = []
    for path in paths:
        if path.suffix != ".py" or not path.is_file():
            raise typer.BadParameter(f"no such Python file: {str(path)!r}", param_hint="--tools")
        try:
            found.extend(_tools_of(_import(path), path))
        except LoadError as exc:
            raise typer.BadParameter(str(exc), param_hint="--tools") from None
    return found
