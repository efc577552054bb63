"""``onlooker metrics``: Prometheus metrics built from the history database."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import db_url, stderr

__all__ = ["metrics_app"]

metrics_app = typer.Typer(
    help="Prometheus metrics from the history database.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


@metrics_app.command(
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker metrics serve --port 9464\n\n"
        "  curl -s localhost:9464/metrics | grep onlooker_tool_calls"
    ),
)
def serve(
    db: Annotated[
        str | None,
        typer.Option(help="History database URL or SQLite file (default: .onlooker/history.db)."),
    ] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = 9464,
    host: Annotated[
        str, typer.Option(help="Interface to listen on (loopback by default; 0.0.0.0 for all).")
    ] = "127.0.0.1",
) -> None:
    """Serve the metrics of the recorded executions at http://HOST:PORT/metrics.

    Runs until interrupted (Ctrl-C).
    """
    stderr.print(
        f"serving metrics from {db or '.onlooker/history.db'} on http://{host}:{port}/metrics"
    )
    raise NotImplementedError(db_url(db))
