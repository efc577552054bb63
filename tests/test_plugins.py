"""Plugins: extensions (plain and async context managers), observers, hooks, ids."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

import onlooker
from onlooker import (
    ExecutionContext,
    ExecutionEngine,
    ExecutionEvent,
    HookAction,
    HookMatcher,
    PluginContext,
    PluginError,
    PreHookResult,
    ToolCallFinished,
    ToolUseContext,
    define_plugin,
)

pytestmark = pytest.mark.anyio


@dataclass
class Counter:
    """A plugin's state: counts events by kind."""

    context: PluginContext | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def handle(self, event: ExecutionEvent) -> None:
        self.counts[event.kind] = self.counts.get(event.kind, 0) + 1


@onlooker.tool(description="Write text to a file.", mutating=True, writes="path")
def write_file(path: str, text: str) -> int:
    return len(text)


@onlooker.tool(reads="path")
def read_file(path: str) -> str:
    """Read a file."""
    return "content"


@onlooker.tool(edits="target")
async def edit_file(target: str) -> None:
    """Edit a file in place."""


async def uses_tools(ctx: ExecutionContext) -> int:
    await ctx.call(read_file, path="a.md")
    return await ctx.call(write_file, path="b.md", text="hello")


def async_appender(target: list[str]) -> onlooker.ObserverLike:
    """An asynchronous observer that appends each event's kind to ``target``."""

    async def handle(event: ExecutionEvent) -> None:
        target.append(event.kind)

    return handle


def counter_plugin(id: str = "counter") -> onlooker.Plugin[Counter]:
    return define_plugin(id=id, extension=lambda ctx: Counter(ctx), observer=lambda ext: ext)


class TestExtensions:
    async def test_plain_extension_typed_access(self) -> None:
        plugin = counter_plugin()
        seen_by_program: list[Counter] = []

        async def program(ctx: ExecutionContext) -> None:
            seen_by_program.append(ctx.extension(plugin))

        async with ExecutionEngine(plugins=[plugin]) as engine:
            counter = engine.extension(plugin)
            assert isinstance(counter, Counter)
            assert engine.plugin("counter") is counter
            await engine.execute(program)
        assert seen_by_program == [counter]
        assert counter.counts == {"ExecutionStarted": 1, "ExecutionFinished": 1}

    async def test_plugin_context(self) -> None:
        plugin = counter_plugin("ctx-check")
        async with ExecutionEngine(
            tools=[write_file, read_file, edit_file], plugins=[plugin], shutdown_timeout=7.5
        ) as e:
            context = e.extension(plugin).context
            assert context is not None
            assert context.plugin_id == context.id == "ctx-check"
            assert context.shutdown_timeout == 7.5  # what a teardown waiting on I/O is bounded by
            assert isinstance(context.logger, logging.Logger)
            assert context.logger.name == "onlooker.plugins.ctx-check"
            assert context.bus is e.bus
            tools = context.tools
            assert sorted(tools) == ["edit_file", "read_file", "write_file"]
            write = tools["write_file"]
            assert (write.name, write.description, write.mutating) == (
                "write_file",
                "Write text to a file.",
                True,
            )
            assert (write.reads, write.writes, write.edits) == (None, "path", None)
            read = tools["read_file"]
            assert (read.description, read.mutating, read.reads) == ("Read a file.", False, "path")
            assert tools["edit_file"].edits == "target"
            assert tools is e.tools
            with pytest.raises(TypeError):
                tools["x"] = write  # type: ignore[index]

    async def test_async_context_managers_enter_and_exit_in_reverse(self) -> None:
        log: list[str] = []

        def managed(name: str) -> onlooker.Plugin[dict[str, Any]]:
            @asynccontextmanager
            async def extension(ctx: PluginContext) -> AsyncIterator[dict[str, Any]]:
                log.append(f"enter {name}")
                state: dict[str, Any] = {"name": name, "events": []}
                yield state
                log.append(f"exit {name} after {len(state['events'])} events")

            return define_plugin(
                id=name,
                extension=extension,
                observer=lambda state: async_appender(state["events"]),
            )

        plugins = [managed("a"), managed("b"), managed("c")]
        async with ExecutionEngine(tools=[write_file, read_file], plugins=plugins) as engine:
            assert log == ["enter a", "enter b", "enter c"]
            state = engine.extension(plugins[1])
            assert state["name"] == "b", "the extension is what __aenter__ returned"
            await engine.execute(uses_tools)
            log.append("body done")
        assert log == [
            "enter a",
            "enter b",
            "enter c",
            "body done",
            "exit c after 6 events",
            "exit b after 6 events",
            "exit a after 6 events",
        ], "async observers are flushed before extensions exit"

    async def test_failing_setup_is_a_plugin_error_and_unwinds(self) -> None:
        log: list[str] = []

        @asynccontextmanager
        async def ok(ctx: PluginContext) -> AsyncIterator[str]:
            log.append("enter ok")
            yield "ok"
            log.append("exit ok")

        def broken(ctx: PluginContext) -> str:
            raise OSError("database unreachable")

        plugins: list[onlooker.Plugin[Any]] = [
            define_plugin(id="ok", extension=ok),
            define_plugin(id="broken", extension=broken),
        ]
        with pytest.raises(PluginError, match="broken") as info:
            async with ExecutionEngine(plugins=plugins):
                pytest.fail("the body must not run")
        assert info.value.plugin_id == "broken"
        assert isinstance(info.value.__cause__, OSError)
        assert "database unreachable" in str(info.value)
        assert log == ["enter ok", "exit ok"]

    async def test_duplicate_ids_fail_at_engine_start(self) -> None:
        log: list[str] = []

        @asynccontextmanager
        async def first(ctx: PluginContext) -> AsyncIterator[None]:
            log.append("entered")
            yield

        plugins: list[onlooker.Plugin[Any]] = [
            define_plugin(id="same", extension=first),
            counter_plugin("same"),
        ]
        engine = ExecutionEngine(plugins=plugins)  # not at construction
        with pytest.raises(PluginError, match="same") as info:
            async with engine:
                pytest.fail("the body must not run")
        assert info.value.plugin_id == "same"
        assert log == [], "nothing is set up before the ids are checked"

    async def test_extension_of_a_plugin_not_installed(self) -> None:
        installed = counter_plugin("here")
        impostor = counter_plugin("here")
        async with ExecutionEngine(plugins=[installed]) as engine:
            with pytest.raises(PluginError, match="not installed"):
                engine.extension(counter_plugin("elsewhere"))
            with pytest.raises(PluginError):
                engine.extension(impostor)
            with pytest.raises(PluginError, match="nope"):
                engine.plugin("nope")

    async def test_not_a_plugin(self) -> None:
        with pytest.raises(PluginError, match="define_plugin"):
            async with ExecutionEngine(plugins=[object()]):  # type: ignore[list-item]
                pass

    def test_define_plugin_validates(self) -> None:
        with pytest.raises(ValueError, match="id"):
            define_plugin(id="")
        with pytest.raises(TypeError, match="id must be a str, not int"):
            define_plugin(id=5)  # type: ignore[call-overload]
        with pytest.raises(ValueError, match="overflow"):
            define_plugin(id="x", overflow="sometimes")  # type: ignore[call-overload]
        for bad, error in ((0, ValueError), ("big", TypeError), (2.5, TypeError)):
            with pytest.raises(error, match="queue_size"):
                define_plugin(id="x", queue_size=bad)  # type: ignore[arg-type]

    async def test_extension_before_start_and_by_id(self) -> None:
        plugin = counter_plugin("early")
        engine = ExecutionEngine(plugins=[plugin])
        with pytest.raises(PluginError, match="no extension yet: the engine is new"):
            engine.extension(plugin)
        async with engine:
            with pytest.raises(TypeError, match=r"for an id, use engine.plugin\('early'\)"):
                engine.extension("early")  # type: ignore[arg-type]

    async def test_an_async_def_extension_is_a_clear_error(self) -> None:
        async def extension(ctx: onlooker.PluginContext) -> str:
            return "never awaited"

        plugin = define_plugin(id="coro", extension=extension)
        with pytest.raises(PluginError, match=r"coro.*returned an awaitable.*asynccontextmanager"):
            async with ExecutionEngine(plugins=[plugin]):
                pass

    async def test_an_awaitable_async_context_manager_is_entered(self) -> None:
        """Shaped like SQLAlchemy's ``AsyncConnection`` or asyncpg's pool: entered, not refused."""
        log: list[str] = []

        class Both:
            def __await__(self) -> Any:
                log.append("awaited")
                return iter(())

            async def __aenter__(self) -> str:
                log.append("entered")
                return "pool"

            async def __aexit__(self, *exc_info: object) -> None:
                log.append("exited")

        plugin = define_plugin(id="both", extension=lambda ctx: Both())
        async with ExecutionEngine(plugins=[plugin]) as engine:
            assert engine.extension(plugin) == "pool"
        assert log == ["entered", "exited"]

    async def test_a_failing_teardown_is_a_plugin_error_naming_it(self) -> None:
        closed: list[str] = []

        def closing(name: str, fails: bool) -> onlooker.Plugin[str]:
            @asynccontextmanager
            async def extension(ctx: onlooker.PluginContext) -> AsyncIterator[str]:
                try:
                    yield name
                finally:
                    closed.append(name)
                if fails:
                    raise RuntimeError("disk gone")

            return define_plugin(id=name, extension=extension)

        with pytest.raises(PluginError, match="plugin 'b' failed to close: disk gone") as info:
            async with ExecutionEngine(plugins=[closing("a", False), closing("b", True)]):
                pass
        assert info.value.plugin_id == "b"
        assert closed == ["b", "a"]  # the others still close, in reverse order

    async def test_a_failing_teardown_is_not_thrown_into_the_others(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        closed: list[str] = []

        def closing(name: str, fails: bool) -> onlooker.Plugin[str]:
            @asynccontextmanager
            async def extension(ctx: onlooker.PluginContext) -> AsyncIterator[str]:
                yield name  # no try/finally: a teardown written the simple way
                closed.append(name)
                if fails:
                    raise RuntimeError(f"{name}'s disk gone")

            return define_plugin(id=name, extension=extension)

        plugins = [closing("a", False), closing("b", True), closing("c", True)]
        with (
            caplog.at_level(logging.ERROR, logger="onlooker"),
            pytest.raises(PluginError, match="plugin 'c' failed to close") as info,
        ):
            async with ExecutionEngine(plugins=plugins):
                pass
        assert info.value.plugin_id == "c"  # the first to fail; the next is logged
        assert closed == ["c", "b", "a"]
        assert "plugin 'b' failed to close: b's disk gone" in caplog.text


class TestObserversAndHooks:
    async def test_observer_without_extension(self) -> None:
        seen: list[str] = []
        received: list[object] = []

        def observer(ext: None) -> Any:
            received.append(ext)
            return lambda event: seen.append(event.kind)

        plugin = define_plugin(id="bare", observer=observer)

        async def nothing(ctx: ExecutionContext) -> None:
            pass

        async with ExecutionEngine(plugins=[plugin]) as engine:
            assert engine.extension(plugin) is None
            await engine.execute(nothing)
        assert received == [None]
        assert seen == ["ExecutionStarted", "ExecutionFinished"]

    async def test_plugins_observe_in_the_order_given(self) -> None:
        order: list[str] = []
        plugins = [
            define_plugin(id=name, observer=lambda _, n=name: lambda e: order.append(n))
            for name in ("first", "second", "third")
        ]

        async def nothing(ctx: ExecutionContext) -> None:
            pass

        async with ExecutionEngine(plugins=plugins) as engine:
            await engine.execute(nothing)
        assert order == ["first", "second", "third"] * 2

    async def test_failing_plugin_observer_is_logged_with_its_id(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        good = counter_plugin("good")

        class Bad:
            def handle(self, event: ExecutionEvent) -> None:
                if isinstance(event, ToolCallFinished):
                    raise RuntimeError("plugin bug")

        bad = define_plugin(id="bad-plugin", observer=lambda _: Bad())
        with caplog.at_level(logging.ERROR, logger="onlooker"):
            async with ExecutionEngine(tools=[write_file, read_file], plugins=[bad, good]) as e:
                result = await e.execute(uses_tools)
        assert result.status == "completed"
        assert e.extension(good).counts == {
            "ExecutionStarted": 1,
            "ToolCallStarted": 2,
            "ToolCallFinished": 2,
            "ExecutionFinished": 1,
        }
        records = [r for r in caplog.records if r.name == "onlooker"]
        assert len(records) == 2
        for record in records:
            message = record.getMessage()
            assert "bad-plugin" in message
            assert "ToolCallFinished" in message
            assert result.execution_id in message
        stats = e.bus.statistics()
        assert stats.errors_by_observer == {"bad-plugin": 2}
        assert stats.delivered == 6 * 2 - 2

    async def test_plugin_hooks(self) -> None:
        seen_inputs: list[dict[str, Any]] = []

        @dataclass
        class Policy:
            denied: str

            def pre(self, use: ToolUseContext) -> PreHookResult | None:
                seen_inputs.append(dict(use.tool_input))
                if use.tool_name == self.denied:
                    return PreHookResult(action=HookAction.SKIP, metadata={"by": "policy"})
                return None

        plugin = define_plugin(
            id="policy",
            extension=lambda ctx: Policy(denied="write_file"),
            hooks=lambda ext: [HookMatcher(pre=[ext.pre])],
        )
        finished: list[ToolCallFinished] = []

        def record(event: ExecutionEvent) -> None:
            if isinstance(event, ToolCallFinished):
                finished.append(event)

        async with ExecutionEngine(tools=[write_file, read_file], plugins=[plugin]) as engine:
            engine.bus.subscribe(record)
            result = await engine.execute(uses_tools)
        assert result.status == "completed"
        assert result.value is None, "a skipped call returns None"
        assert [(f.tool, f.status) for f in finished] == [
            ("read_file", "completed"),
            ("write_file", "skipped"),
        ]
        assert finished[1].metadata == {"by": "policy"}
        assert seen_inputs == [{"path": "a.md"}, {"path": "b.md", "text": "hello"}]

    async def test_hooks_that_are_not_matchers_fail_the_start(self) -> None:
        """They started, and every tool call then failed with an AttributeError."""
        plugin = define_plugin(id="loose", hooks=lambda ext: [5])  # type: ignore[list-item]
        with pytest.raises(PluginError, match=r"'loose'.*HookMatcher instances, not int") as info:
            async with ExecutionEngine(tools=[write_file, read_file], plugins=[plugin]):
                pass
        assert info.value.plugin_id == "loose"

    async def test_async_plugin_observer_options(self) -> None:
        events: list[str] = []
        plugin = define_plugin(
            id="queued",
            observer=lambda _: async_appender(events),
            overflow="drop",
            queue_size=4,
        )
        assert (plugin.overflow, plugin.queue_size) == ("drop", 4)
        async with ExecutionEngine(tools=[write_file, read_file], plugins=[plugin]) as engine:
            await engine.execute(uses_tools)
            await engine.bus.flush()
            assert len(events) + engine.bus.statistics().dropped == 6
