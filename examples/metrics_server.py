"""Serve Prometheus metrics of a running engine, and the same metrics from history.

Run: ``.venv/bin/python examples/metrics_server.py`` (add ``--hold`` to keep
the endpoint up until Ctrl-C and scrape http://127.0.0.1:9464/metrics).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import urllib.request
from pathlib import Path

import anyio

import onlooker
from onlooker import ExecutionContext
from onlooker.plugins import history, metrics


@onlooker.tool
async def fetch(url: str) -> str:
    """Pretend to fetch a page."""
    await anyio.sleep(0.001)
    if "bad" in url:
        raise onlooker.ToolError(f"cannot fetch {url}")
    return f"<html>{url}</html>"


async def crawl(ctx: ExecutionContext) -> int:
    """Fetch a few pages; one of them fails."""
    pages = 0
    for url in ("https://a.example", "https://bad.example", "https://b.example"):
        with contextlib.suppress(onlooker.ToolError):
            await ctx.call("fetch", url=url)
            pages += 1
    return pages


def scrape(url: str) -> str:
    """GET the metrics text, as Prometheus would."""
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def onlooker_lines(text: str) -> str:
    """The samples worth reading here: no histogram buckets, no creation times."""
    return "\n".join(
        line
        for line in text.splitlines()
        if line.startswith("onlooker") and "_bucket" not in line and "_created" not in line
    )


async def main(hold: bool) -> None:
    """Run a few executions with metrics and history, then serve both views."""
    with tempfile.TemporaryDirectory(prefix="onlooker-metrics-") as tmp:
        database = f"sqlite:///{Path(tmp) / 'history.db'}"
        live = metrics.plugin()
        recorder = history.plugin(database)
        async with onlooker.ExecutionEngine(tools=[fetch], plugins=[live, recorder]) as engine:
            for _ in range(3):
                await engine.execute(crawl, trigger="schedule")
            server = engine.extension(live).serve(0 if not hold else 9464)
            print(f"live metrics at {server.url}")
            print(onlooker_lines(await anyio.to_thread.run_sync(scrape, server.url)))
            if hold:
                print("serving until Ctrl-C")
                await anyio.sleep_forever()

        # Later, in any process: the same metric names computed from the history database.
        async with history.open(database) as store:
            from_history = await metrics.metrics_from_history(store)
            with from_history.serve(0) as endpoint:
                print(f"\nmetrics from history at {endpoint.url}")
                print(onlooker_lines(await anyio.to_thread.run_sync(scrape, endpoint.url)))


if __name__ == "__main__":
    anyio.run(main, "--hold" in sys.argv[1:])
