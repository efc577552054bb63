"""``onlooker ui`` response times on a big SQLite history.

Builds a store with 100,000 executions (one or two tool calls each, spread
over 30 days, with several programs, triggers and statuses) written through
``store.write_events``, plus one execution of 1,000 tool calls recorded by a
real engine with the history plugin. Then serves it with uvicorn on a
loopback port (as ``onlooker ui`` does) and sends ``--requests`` requests
per page after a warm-up. The server time is the app's own
``Server-Timing`` (request in to response out: query, render, everything);
the round trip adds uvicorn, the socket and the client reading the page.
Target: a median server time of at most 100 ms for the list page and the
1,000-call execution page.

Run: ``.venv/bin/python bench/ui.py [--executions N] [--calls N] [--requests N]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2

import onlooker
from onlooker import (
    Attribution,
    ErrorInfo,
    ExecutionContext,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    ToolCallFinished,
    ToolCallStarted,
    Trigger,
)
from onlooker._ui import BackgroundServer, create_app
from onlooker.plugins import history

TARGET_MS = 100.0
PROGRAMS = [f"agent_{n}" for n in range(20)]
TRIGGERS = ["cli", "api", "cron", "claude-code"]
TOOLS = ["read_file", "search", "fetch", "write_file", "bash"]


def synthetic(index: int, start: datetime, rng: random.Random) -> list[ExecutionEvent]:
    """One closed execution with one or two tool calls."""
    execution_id = f"bench-{index:06d}"
    roll = rng.random()
    status = "completed" if roll < 0.9 else "failed" if roll < 0.97 else "cancelled"
    attribution = Attribution()
    at = start
    seq = 0

    def envelope() -> dict[str, Any]:
        nonlocal seq, at
        fields = {
            "event_id": f"{execution_id}/{seq}",
            "execution_id": execution_id,
            "seq": seq,
            "at": at,
            "attribution": attribution,
        }
        seq += 1
        at += timedelta(milliseconds=rng.uniform(1, 40))
        return fields

    events: list[ExecutionEvent] = [
        ExecutionStarted(
            **envelope(),
            program=rng.choice(PROGRAMS),
            trigger=Trigger(kind=rng.choice(TRIGGERS)),
            input={"task": f"task {index}"},
        )
    ]
    for call in range(rng.choice((1, 1, 2))):
        call_id = f"{execution_id}/c{call}"
        tool = rng.choice(TOOLS)
        events.append(
            ToolCallStarted(**envelope(), tool_call_id=call_id, tool=tool, args={"path": "a.md"})
        )
        failed = status == "failed" and call == 0
        events.append(
            ToolCallFinished(
                **envelope(),
                tool_call_id=call_id,
                tool=tool,
                status="failed" if failed else "completed",
                result=None if failed else "ok",
                error=ErrorInfo(type="ToolError", message="boom", cause="failure")
                if failed
                else None,
                duration_ms=rng.uniform(0.1, 30),
            )
        )
    events.append(
        ExecutionFinished(
            **envelope(),
            status=status,  # type: ignore[arg-type]  # one of the three literals above
            result="done" if status == "completed" else None,
            error=ErrorInfo(type="ToolError", message="boom", cause="failure")
            if status == "failed"
            else None,
            duration_ms=(at - start).total_seconds() * 1000,
        )
    )
    return events


@onlooker.tool
def step(n: int) -> int:
    """The 1,000-call execution's tool."""
    return n * 2


async def thousand_calls(ctx: ExecutionContext) -> int:
    total = 0
    for n in range(ctx.input if isinstance(ctx.input, int) else 0):
        total += await ctx.call(step, n=n)
    return total


async def build(url: str, executions: int, calls: int) -> str:
    rng = random.Random(7)
    began = datetime.now(UTC) - timedelta(days=30)
    spacing = timedelta(days=30) / max(executions, 1)
    async with history.open(url) as store:
        batch: list[ExecutionEvent] = []
        for index in range(executions):
            batch += synthetic(index, began + spacing * index, rng)
            if len(batch) >= 20_000:
                await store.write_events(batch)
                batch = []
        if batch:
            await store.write_events(batch)
    async with onlooker.ExecutionEngine(tools=[step], plugins=[history.plugin(url)]) as engine:
        result = await engine.execute(thousand_calls, input=calls)
    return result.execution_id


def timed(client: httpx2.Client, url: str, requests: int) -> tuple[float, float, float, int]:
    """Median server time, its p95, median round trip (ms), and the page's size."""
    for _ in range(3):  # warm-up: templates compiled, caches filled
        client.get(url).raise_for_status()
    server: list[float] = []
    trips: list[float] = []
    size = 0
    for _ in range(requests):
        began = time.perf_counter()
        response = client.get(url)
        trips.append((time.perf_counter() - began) * 1000)
        response.raise_for_status()
        server.append(float(response.headers["server-timing"].split("dur=")[1]))
        size = len(response.content)
    server.sort()
    p95 = server[int(0.95 * (len(server) - 1))]
    return statistics.median(server), p95, statistics.median(trips), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'history.db'}"
        began = time.perf_counter()
        big = anyio.run(build, url, args.executions, args.calls)
        size_mb = (Path(folder) / "history.db").stat().st_size / 1e6
        print(
            f"store: {args.executions:,} executions + one of {args.calls:,} tool calls, "
            f"{size_mb:.0f} MB SQLite, built in {time.perf_counter() - began:.0f} s"
        )
        with (
            BackgroundServer(create_app(url)) as server,
            httpx2.Client(base_url=server.url, timeout=30) as client,
        ):
            second_page = client.get("/").text.split('rel="next" href="/?')[1].split('"')[0]
            pages = [
                ("list, newest first (50 rows)", "/", True),
                ("list, page 2 (cursor)", f"/?{second_page.replace('&amp;', '&')}", False),
                ("list, status=failed", "/?status=failed", False),
                ("list, program=agent_7, since=7d", "/?program=agent_7&since=7d", False),
                (f"execution of {args.calls:,} tool calls", f"/executions/{big}", True),
                ("one tool call's details", f"/executions/{big}?call=", False),
                ("stats, last 7 days", "/stats?since=7d", False),
            ]
            first_call = client.get(f"/executions/{big}?format=json").json()[1]["tool_call_id"]
            print(f"{'':40} {'server time':>19} {'round trip':>11}")
            print(f"{'page':40} {'median':>9} {'p95':>9} {'median':>11} {'bytes':>9}  target")
            for label, path, benchmarked in pages:
                if path.endswith("?call="):
                    path += first_call
                median, p95, trip, size = timed(client, path, args.requests)
                verdict = ""
                if benchmarked:
                    verdict = f"≤ {TARGET_MS:.0f} ms: {'yes' if median <= TARGET_MS else 'NO'}"
                print(f"{label:40} {median:7.1f}ms {p95:7.1f}ms {trip:9.1f}ms {size:9,}  {verdict}")


if __name__ == "__main__":
    main()
