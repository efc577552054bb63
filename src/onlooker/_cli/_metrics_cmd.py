"""``onlooker metrics``: Prometheus metrics built from the history database."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import escape, existing_db, is_loopback, reading, stderr

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
    interval: Annotated[
        float, typer.Option(min=0.1, help="Seconds between two reads of the database.")
    ] = 15.0,
) -> None:
    """Serve the metrics of the recorded executions at http://HOST:PORT/metrics.

    Counters are totals over the whole database, re-read every --interval
    seconds. Runs until interrupted (Ctrl-C); exits 1 when the database
    cannot be used or the port cannot be bound.
    """
    import anyio

    import onlooker

    url = existing_db(db)
    try:
        anyio.run(_serve, url, port, host, interval)
    except KeyboardInterrupt:
        pass
    except (onlooker.OnlookerError, OSError) as exc:
        stderr.print(f"[red]error[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None


async def _serve(url: str | None, port: int, host: str, interval: float) -> None:
    import anyio

    from onlooker.plugins import metrics
    from onlooker.plugins.history._db import describe

    async with reading(url) as store:
        exposed = await metrics.metrics_from_history(store)
        with exposed.serve(port, host) as server:
            # Whole lines, however narrow the terminal (or none): a URL to copy, a log to grep.
            stderr.print(
                f"serving the metrics of {escape(store.url)} at {server.url}", soft_wrap=True
            )
            if not is_loopback(host):
                stderr.print(
                    "[yellow]warning[/]: listening beyond this machine: anyone who can reach "
                    "it can read the metrics (tool names and counts)"
                )
            failing = False
            while True:
                await anyio.sleep(interval)
                try:
                    await exposed.refresh()
                except Exception as exc:  # the database is down: serve the last figures, retry
                    if not failing:
                        stderr.print(
                            f"[yellow]warning[/]: cannot read {escape(store.url)} "
                            f"({escape(describe(exc))}); serving the last figures, retrying "
                            f"every {interval:g} s",
                            soft_wrap=True,
                        )
                    failing = True
                    continue
                if failing:
                    stderr.print(f"{escape(store.url)} can be read again", soft_wrap=True)
                failing = False
