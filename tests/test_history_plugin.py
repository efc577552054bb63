"""The history plugin under load and failure: many processes, a database that goes away."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import onlooker
import postgres
from onlooker.plugins import history
from onlooker.plugins.history._writer import MAX_COOLDOWN
from test_history_support import (
    ManualClock,
    Outage,
    add,
    backend_url,
    count_rows,
    execution_events,
    one_call,
)

pytestmark = pytest.mark.anyio

FAST_RETRIES = (0.01, 0.02)


@pytest.fixture(params=["sqlite", "postgres"])
def outage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    backend = str(request.param)
    for url in backend_url(backend, tmp_path):
        if backend == "sqlite":
            url += "?timeout=0.05"
        failure = Outage(backend, url)
        try:
            yield failure
        finally:
            failure.end()


async def test_failure_mid_run_loses_nothing(outage: Outage, tmp_path: Path) -> None:
    spill = tmp_path / "spill.jsonl"
    plugin = history.plugin(outage.url, spill_path=spill, retry_delays=FAST_RETRIES)
    async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
        store = engine.extension(plugin)
        for _ in range(3):
            await engine.execute(one_call)
        await engine.bus.flush()
        await store.flush()
        outage.begin()
        during = [await engine.execute(one_call) for _ in range(5)]
        await engine.bus.flush()
        await store.flush()
        statistics = store.statistics()
        assert statistics is not None and statistics.spilled == 20 and statistics.retries >= 2
        assert all(result.status == "completed" for result in during)  # the run went on
        assert spill.is_file()
    outage.end()
    # the next start loads the spill file
    assert await count_rows(outage.url, spill) == (8, 8, 32)
    assert not spill.exists()


async def test_recovery_in_the_same_run_drains_the_spill(outage: Outage, tmp_path: Path) -> None:
    spill = tmp_path / "spill.jsonl"
    plugin = history.plugin(outage.url, spill_path=spill, retry_delays=FAST_RETRIES)
    async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
        store = engine.extension(plugin)
        clock = ManualClock.install(store)
        outage.begin()
        await engine.execute(one_call)
        await engine.bus.flush()
        await store.flush()
        assert spill.is_file()
        outage.end()
        await engine.execute(one_call)  # still cooling down, no reader waits: to the spill
        await engine.bus.flush()
        with anyio.fail_after(10):
            while (statistics := store.statistics()) is None or statistics.pending:  # noqa: ASYNC110  # a thread's counter
                await anyio.sleep(0.01)
        assert statistics.spilled == 8 and spill.is_file()
        clock.advance(MAX_COOLDOWN)  # the cool-down is over: the next batch probes
        await engine.execute(one_call)
        await engine.bus.flush()
        await store.flush()
        assert not spill.exists()
        assert len(await store.list_executions()) == 3


async def test_a_read_probes_a_database_back_before_the_cool_down_ends(
    outage: Outage, tmp_path: Path
) -> None:
    """Read-your-writes: a read waiting for the writer does not get a history the cool-down
    after an outage left partial (the writer spilled for up to 30 s more)."""
    spill = tmp_path / "spill.jsonl"
    plugin = history.plugin(outage.url, spill_path=spill, retry_delays=FAST_RETRIES)
    async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
        store = engine.extension(plugin)
        ManualClock.install(store)  # the cool-down never ends by itself
        outage.begin()
        await engine.execute(one_call)
        await engine.bus.flush()
        await store.flush()  # the reader's probe finds the database still down
        assert spill.is_file()
        outage.end()
        result = await engine.execute(one_call)
        assert len(await store.events(result.execution_id)) == 4  # probed, written, drained
        assert len(await store.list_executions()) == 2
        assert not spill.exists()


async def test_spill_file_from_an_earlier_run_is_loaded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    spill = tmp_path / "h.db.spill.jsonl"
    events = execution_events("spilled", tools=[("a", "completed", 1.0)])
    spill.write_text("".join(e.model_dump_json() + "\n" for e in events) + "not json\n")
    async with history.open(url) as store:
        assert store.spill_path == spill
        assert await store.events("spilled") == events
    assert not spill.exists()
    (dead,) = map(json.loads, (tmp_path / "h.db.spill.dead.jsonl").read_text().splitlines())
    assert dead["line"] == "not json" and "not an event" in dead["reason"]


WORKER = textwrap.dedent(
    """
    import sys
    import anyio
    import onlooker
    from onlooker.plugins import history

    @onlooker.tool
    async def add(a: int, b: int) -> int:
        return a + b

    async def program(ctx: onlooker.ExecutionContext) -> int:
        return await ctx.call("add", a=1, b=2)

    async def main() -> None:
        plugin = history.plugin(sys.argv[1], batch_size=100)
        async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
            for _ in range(250):
                result = await engine.execute(program, trigger=f"worker{sys.argv[2]}")
                assert result.status == "completed"

    anyio.run(main)
    """
)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_four_processes_write_one_postgres_database(tmp_path: Path) -> None:
    cluster = postgres.cluster_or_skip()
    url = cluster.create_database()
    try:
        workers = [
            subprocess.Popen(  # noqa: ASYNC220  # waited for in a worker thread below
                [sys.executable, "-c", WORKER, url, str(index)],
                cwd=tmp_path,
                stderr=subprocess.PIPE,
                text=True,
            )
            for index in range(4)
        ]
        for worker in workers:
            _, stderr = await anyio.to_thread.run_sync(worker.communicate, None, 120)
            assert worker.returncode == 0, stderr
        assert await count_rows(url) == (1000, 1000, 4000)
        async with history.open(url) as store:
            stats = await store.stats()
            for index in range(4):
                page = await store.list_executions(trigger=f"worker{index}", limit=1000)
                assert len(page) == 250 and len({r.execution_id for r in page}) == 250
        assert stats.executions_by_status == {"completed": 1000}
        assert stats.tools[0].by_status == {"completed": 1000}
    finally:
        cluster.drop_database(url)


OPENER = textwrap.dedent(
    """
    import sys, time
    import anyio
    from onlooker.plugins import history

    async def main(url, start):
        time.sleep(max(0.0, start - time.time()))  # all at once
        async with history.open(url) as store:
            await store.list_executions()

    anyio.run(main, sys.argv[1], float(sys.argv[2]))
    """
)


async def test_processes_opening_a_new_sqlite_database_at_once_all_succeed(
    tmp_path: Path,
) -> None:
    """Each CREATE TABLE committed alone: another process could find half a schema and call
    the database foreign. One sets it up at a time now; the others find it whole."""
    import time

    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    start = str(time.time() + 1.5)
    openers = [
        subprocess.Popen(  # noqa: ASYNC220  # waited for in a worker thread below
            [sys.executable, "-c", OPENER, url, start], stderr=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    for opener in openers:
        _, stderr = await anyio.to_thread.run_sync(opener.communicate, None, 60)
        assert opener.returncode == 0, stderr


async def test_reads_right_after_execute_see_the_execution_whole(tmp_path: Path) -> None:
    recorder = onlooker.testing.RecordingObserver()
    plugin = history.plugin(f"sqlite:///{tmp_path / 'h.db'}")
    async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
        engine.bus.subscribe(recorder)
        store = engine.extension(plugin)
        for _ in range(3):
            result = await engine.execute(one_call)
            emitted = recorder.for_execution(result.execution_id)
            assert await store.events(result.execution_id) == emitted
            tree = await store.get_execution(result.execution_id)
            assert tree is not None and tree.status == "completed"
            assert [call.tool for call in tree.tool_calls] == ["add"]


async def test_a_hung_async_observer_never_hangs_a_read(tmp_path: Path) -> None:
    """Reads wait for the history writer only, not for the bus's asynchronous observers:
    inside a program, and after it, while another observer hangs."""
    plugin = history.plugin(f"sqlite:///{tmp_path / 'h.db'}")
    seen: list[int] = []

    async def hung(event: onlooker.ExecutionEvent) -> None:
        await anyio.sleep_forever()

    async def reads_itself(ctx: onlooker.ExecutionContext) -> int:
        await ctx.call("add", a=1, b=2)
        events = await ctx.extension(plugin).events(ctx.execution_id)
        seen.append(len(events))
        return len(events)

    async with onlooker.ExecutionEngine(
        tools=[add], plugins=[plugin], shutdown_timeout=0.5
    ) as engine:
        engine.bus.subscribe(hung, stall_timeout=0.2)
        with anyio.fail_after(10):
            result = await engine.execute(reads_itself)
            after = await engine.extension(plugin).events(result.execution_id)
    assert result.status == "completed" and seen == [3]  # started, call started, finished
    assert [event.kind for event in after][-1] == "ExecutionFinished"
