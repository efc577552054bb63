"""The summary plugin: counts, files, errors, children, partial summaries, XML and JSON."""

from __future__ import annotations

import contextlib
import json
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import onlooker
from onlooker import (
    ErrorInfo,
    ExecutionContext,
    HookAction,
    HookMatcher,
    PreHookResult,
    ToolUseContext,
)
from onlooker.plugins import summary
from onlooker.plugins.summary import ExecutionSummary, SummaryStore, ToolCallError
from running import run

pytestmark = pytest.mark.anyio

_ANY_CHARACTER: Final = st.characters(exclude_categories=())  # lone surrogates too


@onlooker.tool(reads="path")
def read_file(path: str) -> str:
    """Read."""
    if path == "missing.md":
        raise onlooker.ToolError(f"no such file: {path}")
    return "text"


@onlooker.tool(writes="path", mutating=True)
async def write_file(path: str, content: str = "") -> None:
    """Write."""


@onlooker.tool(edits="target", reads="source")
def patch(source: str, target: str) -> None:
    """Read a patch from ``source`` and apply it to ``target``."""


@onlooker.tool
def think(topic: str) -> str:
    """No files."""
    return topic


TOOLS: list[onlooker.Tool[..., Any]] = [read_file, write_file, patch, think]

Program = Callable[[ExecutionContext], Awaitable[Any]]


def get(store: SummaryStore, execution_id: object) -> ExecutionSummary:
    assert isinstance(execution_id, str)
    found = store.get(execution_id)
    assert found is not None, f"no summary for {execution_id}"
    return found


class TestCounts:
    async def test_files_usage_errors_and_success_rate(self) -> None:
        def block_secrets(use: ToolUseContext) -> PreHookResult | None:
            if use.tool_input.get("path") == "secret.txt":
                return PreHookResult(HookAction.BLOCK, reason="secret")
            return None

        async def program(ctx: ExecutionContext) -> str:
            await ctx.call("read_file", path="b.md")
            await ctx.call("read_file", path="a.md")
            await ctx.call("read_file", path="b.md")  # de-duplicated
            with contextlib.suppress(onlooker.ToolError):
                await ctx.call("read_file", path="missing.md")  # failed: not counted as read
            with contextlib.suppress(onlooker.ToolBlockedError):
                await ctx.call("write_file", path="secret.txt")  # blocked: not written
            await ctx.call("write_file", path="out/z.txt")
            await ctx.call("patch", source="fix.diff", target="a.md")
            await ctx.call("think", topic="x")
            return ctx.execution_id

        result, store = await run(
            program,
            tools=TOOLS,
            extension=summary.plugin(),
            hooks=[HookMatcher(pre=[block_secrets])],
        )
        report = get(store, result.value)
        assert report.execution_id == result.value
        assert report.status == "completed" and report.error is None
        assert report.duration_ms == pytest.approx(result.duration_ms)
        assert report.files_read == ["a.md", "b.md", "fix.diff"]
        assert report.files_written == ["out/z.txt"]
        assert report.files_edited == ["a.md"]
        assert report.files_modified == ["a.md", "out/z.txt"]
        assert report.tool_usage == {"patch": 1, "read_file": 4, "think": 1, "write_file": 2}
        assert list(report.tool_usage) == sorted(report.tool_usage)
        assert report.tool_calls == 8
        assert report.success_rate == pytest.approx(6 / 8)
        assert report.errors == [
            ToolCallError(
                tool="read_file",
                status="failed",
                type="ToolError",
                message="no such file: missing.md",
            ),
            ToolCallError(
                tool="write_file",
                status="blocked",
                type="ToolBlockedError",
                message=report.errors[1].message,
            ),
        ]
        assert "secret" in report.errors[1].message
        assert report.children == []

    async def test_only_strings_are_paths(self) -> None:
        store_plugin = summary.plugin()
        async with onlooker.ExecutionEngine(plugins=[store_plugin]) as engine:
            engine.declare_tool(onlooker.ToolDeclaration("Read", reads="file_path"))
            async with engine.track("agent") as run_:  # a foreign tool: arguments unchecked
                for value in ["a.md", ["b.md", 3, None, "c.md"], True, 5, 1.5, {"p": 1}, "", None]:
                    call = await run_.tool_started("Read", {"file_path": value})
                    await call.finished("ok")
            report = get(engine.extension(store_plugin), run_.execution_id)
        assert report.files_read == ["a.md", "b.md", "c.md"]
        assert report.tool_usage == {"Read": 8}

    async def test_no_calls_and_skips(self) -> None:
        async def empty(ctx: ExecutionContext) -> str:
            return ctx.execution_id

        result, store = await run(empty, tools=TOOLS, extension=summary.plugin())
        report = get(store, result.value)
        assert (report.tool_calls, report.success_rate, report.tool_usage) == (0, 1.0, {})
        assert report.files_read == report.files_modified == []

        def skip(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(HookAction.SKIP)

        async def skipped(ctx: ExecutionContext) -> str:
            await ctx.call("write_file", path="never.txt")
            return ctx.execution_id

        result, store = await run(
            skipped, tools=TOOLS, extension=summary.plugin(), hooks=[HookMatcher(pre=[skip])]
        )
        report = get(store, result.value)
        assert report.tool_calls == 1 and report.success_rate == 1.0 and report.errors == []
        assert report.files_written == []  # the tool never ran

    async def test_unknown_execution(self) -> None:
        async def empty(ctx: ExecutionContext) -> None:
            pass

        _, store = await run(empty, tools=TOOLS, extension=summary.plugin())
        assert store.get("no-such-id") is None
        assert "no-such-id" not in store

    async def test_failed_execution_and_keep_bound(self) -> None:
        ids: list[str] = []

        async def failing(ctx: ExecutionContext) -> None:
            ids.append(ctx.execution_id)
            await ctx.call("think", topic="x")
            raise RuntimeError("gave up")

        plugin = summary.plugin(keep=2)
        async with onlooker.ExecutionEngine(tools=TOOLS, plugins=[plugin]) as engine:
            for _ in range(3):
                await engine.execute(failing)
            store = engine.extension(plugin)
        assert store.get(ids[0]) is None  # the oldest root was forgotten
        report = get(store, ids[2])
        assert report.status == "failed" and report.tool_calls == 1
        assert report.error is not None and report.error.message == "gave up"
        assert len(store) == 2
        with pytest.raises(ValueError, match="keep"):
            summary.plugin(keep=0)

    async def test_long_error_messages_are_kept_cut(self) -> None:
        """A summary is read whole and the store keeps thousands: a megabyte of error message
        (a tool echoing its input, a traceback) is kept to its first characters."""
        long = "x" * 1_000_000

        @onlooker.tool
        def echo_error(text: str) -> None:
            """Fail with ``text`` as the message."""
            raise onlooker.ToolError(f"bad input: {text}")

        async def failing(ctx: ExecutionContext) -> None:
            with contextlib.suppress(onlooker.ToolError):
                await ctx.call("echo_error", text=long)
            raise RuntimeError(long)

        tools = [*TOOLS, echo_error]
        result, store = await run(failing, tools=tools, extension=summary.plugin())
        report = get(store, result.execution_id)
        cut = f"…[truncated {1_000_000 - summary.MAX_MESSAGE_CHARS} chars]"
        assert report.error is not None and report.error.cause == "defect"
        assert report.error.message == "x" * summary.MAX_MESSAGE_CHARS + cut
        (call,) = report.errors
        assert call.message.startswith("bad input: xxx") and call.message.endswith(" chars]")
        assert len(call.message) < summary.MAX_MESSAGE_CHARS + 40
        assert len(report.to_xml()) < 3 * summary.MAX_MESSAGE_CHARS

    async def test_an_id_used_again_is_a_new_execution_kept_while_it_runs(self) -> None:
        """A tracked run may reuse a framework's id once the engine forgot it: the new run
        replaces the old summary (and its children) and is kept while it runs."""
        plugin = summary.plugin(keep=2)
        async with onlooker.ExecutionEngine(plugins=[plugin], keep_results=0) as engine:
            store = engine.extension(plugin)
            async with (
                engine.track("agent", execution_id="conv-A") as old,
                old.child("helper", execution_id="old-child"),
            ):
                pass
            again = engine.track("agent", execution_id="conv-A")
            await again.start()
            for other in ("b", "c"):
                async with engine.track("agent", execution_id=other):
                    pass
            assert get(store, "conv-A").status == "running"
            assert "old-child" not in store and get(store, "conv-A").children == []
            await again.finish()
        assert get(store, "conv-A").status == "completed"


class TestChildren:
    async def test_children_nest_and_a_failing_child_is_partial(self) -> None:
        async def grandchild(ctx: ExecutionContext) -> None:
            await ctx.call("write_file", path="deep.txt")

        async def good_child(ctx: ExecutionContext) -> None:
            await ctx.call("read_file", path="in.md")
            await ctx.spawn(grandchild)

        async def failing_child(ctx: ExecutionContext) -> None:
            await ctx.call("write_file", path="half.txt")
            await ctx.call("read_file", path="missing.md")

        async def parent(ctx: ExecutionContext) -> list[str]:
            good = await ctx.spawn(good_child, task_id="good")
            bad = await ctx.spawn(failing_child, task_id="bad")
            assert bad.status == "failed"
            store = ctx.extension(plugin)
            partial = get(store, bad.execution_id)  # what the failed child completed
            assert partial.status == "failed"
            assert partial.files_written == ["half.txt"]
            assert partial.tool_calls == 2 and partial.success_rate == 0.5
            assert partial.errors[0].message == "no such file: missing.md"
            return [ctx.execution_id, good.execution_id, bad.execution_id]

        plugin = summary.plugin()
        async with onlooker.ExecutionEngine(tools=TOOLS, plugins=[plugin]) as engine:
            result = await engine.execute(parent)
            store = engine.extension(plugin)
        assert result.status == "completed", result.error
        assert result.value is not None
        parent_id, good_id, bad_id = result.value
        report = get(store, parent_id)
        assert report.tool_calls == 0  # a parent's own counts do not include its children's
        assert [c.execution_id for c in report.children] == [good_id, bad_id]
        good, bad = report.children
        assert good == get(store, good_id) and bad == get(store, bad_id)
        assert good.files_read == ["in.md"]
        (deep,) = good.children
        assert deep.files_written == ["deep.txt"] and deep.status == "completed"
        assert bad.status == "failed" and bad.error is not None
        as_json = json.loads(report.model_dump_json())
        assert as_json["children"][0]["children"][0]["files_written"] == ["deep.txt"]

    async def test_partial_while_running(self) -> None:
        snapshots: list[ExecutionSummary] = []
        plugin = summary.plugin()

        async def child(ctx: ExecutionContext) -> None:
            await ctx.call("read_file", path="a.md")
            await anyio.sleep(0.002)
            snapshots.append(get(ctx.extension(plugin), ctx.execution_id))
            await ctx.call("read_file", path="b.md")

        async def parent(ctx: ExecutionContext) -> str:
            await ctx.spawn(child)
            return ctx.execution_id

        async with onlooker.ExecutionEngine(tools=TOOLS, plugins=[plugin]) as engine:
            result = await engine.execute(parent)
            store = engine.extension(plugin)
        (running,) = snapshots
        assert running.status == "running" and running.error is None
        assert running.files_read == ["a.md"] and running.tool_calls == 1
        assert running.duration_ms > 0
        final = get(store, result.value).children[0]
        assert final.status == "completed" and final.files_read == ["a.md", "b.md"]

    async def test_summary_of_a_child_spawned_from_a_tool(self) -> None:
        plugin = summary.plugin()

        async def child(ctx: ExecutionContext) -> None:
            await ctx.call("patch", source="p.diff", target="t.py")

        @onlooker.tool
        async def delegate() -> int:
            """Spawn a child and report how many files it modified."""
            ctx = onlooker.current_context()
            result = await ctx.spawn(child)
            return len(get(ctx.extension(plugin), result.execution_id).files_modified)

        async def parent(ctx: ExecutionContext) -> Any:
            return await ctx.call("delegate")

        async with onlooker.ExecutionEngine(tools=[*TOOLS, delegate], plugins=[plugin]) as engine:
            result = await engine.execute(parent)
        assert result.value == 1


HOSTILE = [
    "<script>&amp;\"quoted\" 'single'</script>.txt",
    "naïve/résumé — 日本語/😀.md",
    " leading and trailing ",
    "new\nline\r\nand\ttab.txt",
    "]]>.txt",
    "a&b;c<d>e",
]


def sample(**changes: Any) -> ExecutionSummary:
    base: dict[str, Any] = {
        "execution_id": "e1",
        "program": "prog<&>",
        "status": "failed",
        "duration_ms": 1.5,
        "error": ErrorInfo(type="ValueError", message='bad <thing> & "stuff"', cause="defect"),
        "files_read": tuple(sorted(HOSTILE)),
        "files_written": ("w&.txt",),
        "files_modified": ("w&.txt",),
        "tool_usage": {"read<&>": 2},
        "tool_calls": 2,
        "success_rate": 0.5,
        "errors": (
            ToolCallError(tool="read<&>", status="failed", type="OSError", message="<&'\">"),
        ),
        "children": (
            ExecutionSummary(
                execution_id="e2",
                program="child",
                status="completed",
                duration_ms=0.1,
                files_edited=["ü&<>.py"],
                files_modified=["ü&<>.py"],
            ),
        ),
    }
    base.update(changes)
    return ExecutionSummary(**base)


def files_of(element: ET.Element, tag: str) -> list[str]:
    group = element.find(tag)
    assert group is not None
    return [str(f.get("path")) for f in group.findall("file")]


class TestXml:
    def test_hostile_names_round_trip(self) -> None:
        report = sample()
        root = ET.fromstring(report.to_xml())
        assert root.tag == "execution"
        assert root.get("id") == "e1" and root.get("program") == "prog<&>"
        assert root.get("status") == "failed" and root.get("tool_calls") == "2"
        assert float(str(root.get("success_rate"))) == 0.5
        assert files_of(root, "files_read") == list(report.files_read)
        assert files_of(root, "files_written") == ["w&.txt"]
        error = root.find("error")
        assert error is not None and error.get("message") == 'bad <thing> & "stuff"'
        usage = root.find("tool_usage/tool")
        assert usage is not None and usage.get("name") == "read<&>" and usage.get("count") == "2"
        tool_error = root.find("tool_errors/tool_error")
        assert tool_error is not None and tool_error.get("message") == "<&'\">"
        pretty = ET.fromstring(report.to_xml(indent=True))
        assert [(e.tag, e.attrib) for e in pretty.iter()] == [
            (e.tag, e.attrib) for e in root.iter()
        ]
        (child,) = root.findall("children/execution")
        assert child.get("id") == "e2"
        assert files_of(child, "files_edited") == ["ü&<>.py"]

    def test_characters_xml_cannot_carry_are_replaced(self) -> None:
        report = sample(files_read=["nul\x00byte", "bell\x07", "surrogate\udcff"])
        root = ET.fromstring(report.to_xml())
        assert files_of(root, "files_read") == ["nul\ufffdbyte", "bell\ufffd", "surrogate\ufffd"]

    @given(st.lists(st.text(), max_size=5), st.text())
    def test_any_text_gives_well_formed_xml(self, names: list[str], message: str) -> None:
        report = sample(files_read=tuple(names), errors=[], program=message)
        root = ET.fromstring(report.to_xml())
        expected = [n if _xml_safe(n) else None for n in names]
        for got, want in zip(files_of(root, "files_read"), expected, strict=True):
            if want is not None:
                assert got == want
        if _xml_safe(message):
            assert root.get("program") == message

    @given(st.lists(st.text(_ANY_CHARACTER), max_size=5), st.text(_ANY_CHARACTER))
    @example(["caf\udce9.txt"], "bad \ud800")
    def test_any_text_gives_json(self, names: list[str], message: str) -> None:
        """JSON text must be valid Unicode: a lone surrogate (an undecodable file name)
        becomes U+FFFD, as in XML; everything else reads back unchanged."""
        report = sample(files_read=tuple(names), errors=[], program=message)
        parsed = json.loads(report.model_dump_json())
        for got, name in zip(parsed["files_read"], report.files_read, strict=True):
            assert got == "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in name)
        assert report.model_dump()["files_read"] == report.files_read  # Python keeps them

    def test_json_round_trip(self) -> None:
        report = sample()
        assert ExecutionSummary.model_validate_json(report.model_dump_json()) == report
        with pytest.raises(Exception, match="frozen"):
            report.status = "completed"  # type: ignore[misc]  # frozen: that is the point


def _xml_safe(text: str) -> bool:
    return all(
        c in "\t\n\r"
        or "\x20" <= c <= "\ud7ff"
        or "\ue000" <= c <= "\ufffd"
        or "\U00010000" <= c <= "\U0010ffff"
        for c in text
    )
