"""The metrics plugin: counts after a run, bounded labels, observer health, HTTP, history."""

from __future__ import annotations

import contextlib
import errno
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import onlooker
from onlooker import ExecutionContext, ExecutionEvent
from onlooker.plugins import history, metrics
from test_history_support import add, backend_url, execution_events, fail

pytestmark = pytest.mark.anyio


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def program(ctx: ExecutionContext) -> None:
    await ctx.call("add", a=1, b=2)
    await ctx.call("add", a=2, b=3)
    for name in ("fail", "evil-tool-1", "evil-tool-2"):
        with contextlib.suppress(onlooker.ToolError):
            await ctx.call(name)
    await ctx.elicit("Anyone?")


async def failing(ctx: ExecutionContext) -> None:
    raise RuntimeError("boom")


def broken_plugin() -> onlooker.Plugin[None]:
    def observer(_: None) -> onlooker.ObserverLike:
        def handle(event: ExecutionEvent) -> None:
            if event.kind == "ExecutionFinished":
                raise ValueError("observer bug")

        return handle

    return onlooker.define_plugin(id="broken", observer=observer)


def check_counts(text: str, *, live: bool) -> None:
    values = samples(text)
    assert values["onlooker_executions_total", (("status", "completed"), ("trigger", "cli"))] == 2
    assert values["onlooker_executions_total", (("status", "failed"), ("trigger", "api"))] == 1
    calls = "onlooker_tool_calls_total"
    assert values[calls, (("status", "completed"), ("tool", "add"))] == 4
    if live:  # names that are not registered tools share one label
        assert values[calls, (("status", "failed"), ("tool", "fail"))] == 2
        assert values[calls, (("status", "failed"), ("tool", "other"))] == 4
        assert not any("evil" in str(key) for key in values)
    histogram = "onlooker_tool_call_duration_seconds_count"
    assert values[histogram, (("tool", "add"),)] == 4
    assert values["onlooker_execution_duration_seconds_count", ()] == 3
    assert values["onlooker_interactions_open", ()] == 0


async def test_counts_after_a_run() -> None:
    plugin = metrics.plugin()
    async with onlooker.ExecutionEngine(
        tools=[add, fail], plugins=[plugin, broken_plugin()]
    ) as engine:
        await engine.execute(program, trigger="cli")
        await engine.execute(program, trigger="cli")
        await engine.execute(failing, trigger="api")
        text = engine.extension(plugin).exposition()
    check_counts(text, live=True)
    values = samples(text)
    assert values["onlooker_observer_errors_total", (("plugin", "broken"),)] == 3
    assert "onlooker_executions_total" not in {m.name for m in REGISTRY.collect()}


async def test_an_undecodable_trigger_or_tool_name_keeps_the_exposition_whole() -> None:
    """A lone surrogate (an undecodable name) in a label: the exposition is UTF-8."""
    name = "caf\udce9"
    plugin = metrics.plugin()

    def fails(event: ExecutionEvent) -> None:
        raise ValueError("an observer's bug")

    async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
        engine.bus.subscribe(fails, name=name)  # observers' names label their errors
        engine.declare_tool(onlooker.ToolDeclaration(name=name))
        for trigger in ("webhook-caf\udce9", "cli"):
            async with engine.track("agent", trigger=trigger) as run:
                call = await run.tool_started(name, {})
                await call.finished("ok")
        values = samples(engine.extension(plugin).exposition())
    executions = "onlooker_executions_total"
    assert values[executions, (("status", "completed"), ("trigger", "webhook-caf\ufffd"))] == 1
    assert values[executions, (("status", "completed"), ("trigger", "cli"))] == 1
    calls = "onlooker_tool_calls_total"
    assert values[calls, (("status", "completed"), ("tool", "caf\ufffd"))] == 2
    assert values["onlooker_observer_errors_total", (("plugin", "caf\ufffd"),)] == 8


async def test_a_registry_of_ones_own_serves_one_engine_after_another() -> None:
    """An app that builds an engine per job hands each the registry it serves: the metrics
    leave it when their engine closes (a second one failed to start: duplicated series)."""
    from prometheus_client import CollectorRegistry, generate_latest

    served = CollectorRegistry()
    plugin = metrics.plugin(registry=served)
    for _ in range(2):
        async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
            await engine.execute(program)
            values = samples(generate_latest(served).decode())
            assert values["onlooker_tool_calls_total", (("status", "completed"), ("tool", "add"))]
        assert b"onlooker_" not in generate_latest(served)


async def test_a_second_engine_on_a_shared_registry_leaves_it_as_it_was() -> None:
    """Two engines at once on one registry: the second one's metrics fail to start (the
    names are taken) and leave nothing behind, so the first one's exposition stays whole."""
    from prometheus_client import CollectorRegistry, generate_latest

    served = CollectorRegistry()  # auto_describe off, as prometheus-client makes one
    first, second = metrics.plugin(registry=served), metrics.plugin(registry=served)
    async with onlooker.ExecutionEngine(tools=[add], plugins=[first]) as engine:
        await engine.execute(program)
        with pytest.raises(onlooker.PluginError, match="Duplicated timeseries"):
            async with onlooker.ExecutionEngine(tools=[add], plugins=[second]):
                pass
        text = generate_latest(served).decode()
        assert text.count("# TYPE onlooker_executions_total counter") == 1
        assert text.count("# TYPE onlooker_tool_calls_total counter") == 1
        assert text.count("# TYPE onlooker_observer_errors_total counter") == 1
    assert b"onlooker_" not in generate_latest(served)


async def test_history_metrics_refuse_a_registry_the_live_ones_hold(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    url = f"sqlite:///{tmp_path / 'history.db'}"
    served = CollectorRegistry()
    async with onlooker.ExecutionEngine(
        tools=[add], plugins=[metrics.plugin(registry=served), history.plugin(url)]
    ) as engine:
        await engine.execute(program)
        async with history.open(url) as store:
            with pytest.raises(ValueError, match="Duplicated timeseries"):
                await metrics.metrics_from_history(store, registry=served)
        assert generate_latest(served).decode().count("# TYPE onlooker_executions_total") == 1


async def test_open_interactions_and_dropped_events() -> None:
    plugin = metrics.plugin()
    asked = anyio.Event()
    release = anyio.Event()

    class Slow:
        async def handle(self, event: ExecutionEvent) -> None:
            await release.wait()

    slow = onlooker.define_plugin(
        id="slow", extension=lambda _: Slow(), observer=lambda s: s, overflow="drop", queue_size=1
    )

    async def answer(question: onlooker.Elicitation) -> onlooker.InteractionResponse:
        asked.set()
        await release.wait()
        return onlooker.InteractionResponse.decline()

    async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin, slow]) as engine:
        ext = engine.extension(plugin)
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: engine.execute(program, on_elicitation=answer))
            await asked.wait()
            values = samples(ext.exposition())
            assert values["onlooker_interactions_open", ()] == 1
            assert values["onlooker_events_dropped_total", (("plugin", "slow"),)] >= 1
            release.set()
        assert samples(ext.exposition())["onlooker_interactions_open", ()] == 0


async def test_two_runs_asking_with_the_same_interaction_id_are_two_open_questions() -> None:
    """Tracked runs take their framework's ids, unique only within a run."""
    plugin = metrics.plugin()
    async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
        ext = engine.extension(plugin)
        first, second = engine.track("one"), engine.track("two")
        for run in (first, second):
            await run.start()
            await run.interaction_started("allow?", interaction_id="ask_1")
        assert samples(ext.exposition())["onlooker_interactions_open", ()] == 2
        await first.interaction_resolved("ask_1", "accepted")
        assert samples(ext.exposition())["onlooker_interactions_open", ()] == 1
        await second.finish()
        assert samples(ext.exposition())["onlooker_interactions_open", ()] == 0


async def test_http_endpoint_on_loopback() -> None:
    plugin = metrics.plugin()
    async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
        await engine.execute(program, trigger="cli")
        server = engine.extension(plugin).serve(0)
        assert server.host == "127.0.0.1" and server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"

        def scrape() -> str:
            with urllib.request.urlopen(server.url, timeout=5) as response:
                body: bytes = response.read()
                return body.decode()

        text = await anyio.to_thread.run_sync(scrape)
        assert (
            samples(text)["onlooker_tool_calls_total", (("status", "completed"), ("tool", "add"))]
            == 2
        )
    # closed with the engine: the port no longer answers
    with pytest.raises(OSError):
        await anyio.to_thread.run_sync(scrape)


async def test_a_port_in_use_is_named_in_the_error() -> None:
    plugin = metrics.plugin()
    async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
        first = engine.extension(plugin).serve(0)
        with pytest.raises(OSError, match=rf"cannot serve on 127.0.0.1:{first.port}: ") as raised:
            engine.extension(plugin).serve(first.port)
        assert raised.value.errno == errno.EADDRINUSE


@pytest.mark.parametrize("port", [70000, -1, True, "8000"])
async def test_a_port_out_of_range_is_named(port: object) -> None:
    """``serve(70000)`` raised ``OverflowError: bind(): port must be 0-65535``."""
    plugin = metrics.plugin()
    async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
        with pytest.raises(ValueError, match="port must be an int from 0 to 65535"):
            engine.extension(plugin).serve(port)  # type: ignore[arg-type]


async def test_a_port_that_is_an_int_by_index_is_taken() -> None:
    class Port:  # as numpy's integers are
        def __index__(self) -> int:
            return 0

    plugin = metrics.plugin()
    async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
        with engine.extension(plugin).serve(Port()) as server:  # type: ignore[arg-type]
            assert server.port > 0


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from backend_url(str(request.param), tmp_path)


async def test_metrics_from_history(url: str) -> None:
    plugin = history.plugin(url)
    async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
        await engine.execute(program, trigger="cli")
        await engine.execute(program, trigger="cli")
        await engine.execute(failing, trigger="api")
    async with history.open(url) as store:
        served = await metrics.metrics_from_history(store, max_tools=1)
        check_counts(served.exposition(), live=False)
        values = samples(served.exposition())
        # beyond the most called tool, every name joins "other"
        assert values["onlooker_tool_calls_total", (("status", "failed"), ("tool", "other"))] == 6
        bucket = "onlooker_tool_call_duration_seconds_bucket"
        assert values[bucket, (("le", "+Inf"), ("tool", "add"))] == 4
        assert values[bucket, (("le", "60.0"), ("tool", "add"))] == 4
        with served.serve(0) as server:
            text = await anyio.to_thread.run_sync(
                lambda: urllib.request.urlopen(server.url, timeout=5).read().decode()
            )
        assert samples(text) == values
        await store.write_events(execution_events("more", tools=[("add", "completed", 1.0)]))
        await served.refresh()
        again = samples(served.exposition())
        assert again["onlooker_tool_calls_total", (("status", "completed"), ("tool", "add"))] == 5


async def test_history_bounds_labels_as_the_live_plugin_does(url: str) -> None:
    """Calls to unknown tools are "other"; only the 32 most common trigger kinds keep a label."""
    plugin = history.plugin(url)
    async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
        await engine.execute(program, trigger="cli")
        await engine.execute(program, trigger="cli")
        for _ in range(2):  # "cli": 4 runs over two statuses
            await engine.execute(failing, trigger="cli")
        for kind in range(40):  # three each: more than "cli" has in either status alone
            for _ in range(3):
                await engine.execute(failing, trigger=f"kind-{kind:02}")
    async with history.open(url) as store:
        values = samples((await metrics.metrics_from_history(store)).exposition())
    calls = "onlooker_tool_calls_total"
    assert values[calls, (("status", "failed"), ("tool", "other"))] == 4  # evil-tool-1, -2
    assert values[calls, (("status", "failed"), ("tool", "fail"))] == 2
    assert not any("evil" in str(key) for key in values)
    triggers = {
        dict(labels)["trigger"] for name, labels in values if name == "onlooker_executions_total"
    }
    assert len(triggers) == 33 and "cli" in triggers and "other" in triggers
    executions = "onlooker_executions_total"
    assert values[executions, (("status", "completed"), ("trigger", "cli"))] == 2
    assert values[executions, (("status", "failed"), ("trigger", "cli"))] == 2
    assert values[executions, (("status", "failed"), ("trigger", "other"))] == 9 * 3
