"""Attribution scopes, intents, and spawn trees (from the program and from inside tools)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import onlooker
from onlooker import (
    Attribution,
    ExecutionContext,
    ExecutionEvent,
    ExecutionStarted,
    ToolCallStarted,
)
from running import run

pytestmark = pytest.mark.anyio


@onlooker.tool
def ping() -> str:
    """Do nothing much."""
    return "pong"


async def leaf(ctx: ExecutionContext) -> str:
    await ctx.call("ping")
    return "leaf"


async def middle(ctx: ExecutionContext) -> str:
    await ctx.call("ping")
    result = await ctx.spawn(leaf, task_id="leaf-task")
    assert result.status == "completed"
    return "middle"


@onlooker.tool
async def delegate(task: str) -> str:
    """Spawn a child execution from inside the tool (the subagent pattern)."""
    result = await onlooker.current_context().spawn(delegated_child, task_id=task)
    return f"{task}:{result.status}:{result.value}"


async def delegated_child(ctx: ExecutionContext) -> str:
    if ctx.depth < 2:
        return str(await ctx.call("delegate", task=f"deeper-{ctx.depth}"))
    await ctx.call("ping")
    return "bottom"


TOOLS: list[onlooker.Tool[..., Any]] = [ping, delegate]


class TestScopes:
    def test_nesting_inherits_unset_fields(self) -> None:
        assert onlooker.current_attribution() == Attribution()
        with onlooker.attribution(task_id="t1", phase="plan") as outer:
            assert outer == onlooker.current_attribution()
            assert (outer.task_id, outer.phase) == ("t1", "plan")
            with onlooker.attribution(phase="build") as inner:
                assert (inner.task_id, inner.phase) == ("t1", "build")
                with onlooker.attribution(task_id="t2"):
                    now = onlooker.current_attribution()
                    assert (now.task_id, now.phase) == ("t2", "build")
            assert onlooker.current_attribution() == outer
        assert onlooker.current_attribution() == Attribution()

    async def test_async_with_and_exceptions_restore(self) -> None:
        with pytest.raises(KeyError):
            async with onlooker.attribution(task_id="t"):
                assert onlooker.current_attribution().task_id == "t"
                raise KeyError("x")
        assert onlooker.current_attribution().task_id is None

    async def test_every_event_reflects_its_scope(
        self, check_stream: Callable[[list[ExecutionEvent]], None]
    ) -> None:
        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("ping")
            async with onlooker.attribution(phase="plan"):
                await ctx.call("ping")
                with onlooker.attribution(task_id="sub"):
                    await ctx.call("ping")
                await ctx.elicit("ok?")
            await ctx.call("ping")

        with onlooker.attribution(task_id="root-task"):
            result, recorder = await run(program, tools=TOOLS)
        assert result.status == "completed"
        check_stream(recorder.events)
        seen = [(e.kind, e.attribution.task_id, e.attribution.phase) for e in recorder]
        assert seen == [
            ("ExecutionStarted", "root-task", None),
            ("ToolCallStarted", "root-task", None),
            ("ToolCallFinished", "root-task", None),
            ("ToolCallStarted", "root-task", "plan"),
            ("ToolCallFinished", "root-task", "plan"),
            ("ToolCallStarted", "sub", "plan"),
            ("ToolCallFinished", "sub", "plan"),
            ("InteractionStarted", "root-task", "plan"),
            ("InteractionResolved", "root-task", "plan"),
            ("ToolCallStarted", "root-task", None),
            ("ToolCallFinished", "root-task", None),
            ("ExecutionFinished", "root-task", None),
        ]
        assert all(e.attribution.depth == 0 for e in recorder)
        assert all(e.attribution.parent_execution_id is None for e in recorder)


class TestSpawnTree:
    async def test_three_levels_from_the_program(
        self, check_stream: Callable[[list[ExecutionEvent]], None]
    ) -> None:
        async def root(ctx: ExecutionContext) -> str:
            with onlooker.attribution(phase="work"):
                result = await ctx.spawn(middle, task_id="middle-task")
            assert result.status == "completed" and result.value == "middle"
            return ctx.execution_id

        result, recorder = await run(root, tools=TOOLS)
        check_stream(recorder.events)
        starts = recorder.of(ExecutionStarted)
        assert [s.program.rsplit(".", 1)[-1] for s in starts] == ["root", "middle", "leaf"]
        root_start, middle_start, leaf_start = starts
        assert root_start.execution_id == result.value
        assert root_start.attribution == Attribution()
        assert middle_start.attribution == Attribution(
            task_id="middle-task",
            phase="work",  # inherited from the scope around spawn
            parent_execution_id=root_start.execution_id,
            depth=1,
        )
        assert leaf_start.attribution == Attribution(
            task_id="leaf-task",
            phase="work",
            parent_execution_id=middle_start.execution_id,
            depth=2,
        )
        for start in starts:  # every event of an execution carries its place in the tree
            for event in recorder.for_execution(start.execution_id):
                assert event.attribution.depth == start.attribution.depth
                assert event.attribution.parent_execution_id == (
                    start.attribution.parent_execution_id
                )
        assert middle_start.trigger.kind == "spawn"

    async def test_three_levels_from_inside_tools(
        self, check_stream: Callable[[list[ExecutionEvent]], None]
    ) -> None:
        async def root(ctx: ExecutionContext) -> Any:
            return await ctx.call("delegate", task="top")

        result, recorder = await run(root, tools=TOOLS)
        assert result.status == "completed"
        assert result.value == "top:completed:deeper-1:completed:bottom"
        check_stream(recorder.events)
        root_start, child_start, grandchild_start = recorder.of(ExecutionStarted)
        root_call = recorder.of(ToolCallStarted, root_start.execution_id)[0]
        child_call = recorder.of(ToolCallStarted, child_start.execution_id)[0]
        assert root_call.tool == child_call.tool == "delegate"
        assert child_start.attribution.parent_execution_id == root_start.execution_id
        assert child_start.attribution.parent_tool_call_id == root_call.tool_call_id
        assert child_start.attribution.depth == 1
        assert child_start.attribution.task_id == "top"
        assert grandchild_start.attribution.parent_execution_id == child_start.execution_id
        assert grandchild_start.attribution.parent_tool_call_id == child_call.tool_call_id
        assert grandchild_start.attribution.depth == 2
        assert grandchild_start.attribution.task_id == "deeper-1"
        # a spawn from the program itself (not from a tool) has no parent call
        assert root_start.attribution.parent_tool_call_id is None

    async def test_spawn_from_program_after_a_tool_has_no_parent_call(self) -> None:
        async def root(ctx: ExecutionContext) -> None:
            await ctx.call("ping")
            await ctx.spawn(leaf)

        _, recorder = await run(root, tools=TOOLS)
        child = recorder.of(ExecutionStarted)[1]
        assert child.attribution.parent_tool_call_id is None
        assert child.attribution.depth == 1

    async def test_failing_child_is_a_result_and_parent_goes_on(self) -> None:
        async def failing(ctx: ExecutionContext) -> None:
            raise ValueError("child broke")

        async def root(ctx: ExecutionContext) -> str:
            result = await ctx.spawn(failing)
            assert result.status == "failed"
            assert result.error is not None and result.error.message == "child broke"
            return "parent fine"

        result, _ = await run(root, tools=TOOLS)
        assert result.status == "completed" and result.value == "parent fine"

    async def test_current_context(self) -> None:
        with pytest.raises(RuntimeError, match="no onlooker execution"):
            onlooker.current_context()
        seen: list[str] = []

        async def child(ctx: ExecutionContext) -> None:
            assert onlooker.current_context() is ctx
            seen.append(ctx.execution_id)

        async def root(ctx: ExecutionContext) -> None:
            assert onlooker.current_context() is ctx
            await ctx.spawn(child)
            assert onlooker.current_context() is ctx  # restored after the child

        result, _ = await run(root, tools=TOOLS)
        assert result.status == "completed" and len(seen) == 1
        with pytest.raises(RuntimeError):
            onlooker.current_context()


class TestIntent:
    async def test_selected_intent_rides_every_later_event(self) -> None:
        async def child(ctx: ExecutionContext) -> None:
            assert ctx.intent_id == "fix-bug-42"
            await ctx.call("ping")

        async def root(ctx: ExecutionContext) -> None:
            await ctx.call("ping")
            assert onlooker.current_attribution().intent_id is None
            with onlooker.attribution(phase="plan"):
                ctx.select_intent("fix-bug-42")
                await ctx.call("ping")
            # selecting an intent is per execution, not per scope: it outlives the scope
            assert ctx.intent_id == "fix-bug-42"
            await ctx.call("ping")
            await ctx.spawn(child)

        result, recorder = await run(root, tools=TOOLS)
        assert result.status == "completed"
        root_id = recorder.events[0].execution_id
        intents = [e.attribution.intent_id for e in recorder.for_execution(root_id)]
        assert intents == [None, None, None] + ["fix-bug-42"] * 5
        child_start = recorder.of(ExecutionStarted)[1]
        assert all(
            e.attribution.intent_id == "fix-bug-42"
            for e in recorder.for_execution(child_start.execution_id)
        )
        assert onlooker.current_attribution().intent_id is None  # did not leak out

    async def test_child_intent_stays_in_the_child(self) -> None:
        async def child(ctx: ExecutionContext) -> None:
            ctx.select_intent("child-intent")

        async def root(ctx: ExecutionContext) -> str | None:
            await ctx.spawn(child)
            return ctx.intent_id

        result, recorder = await run(root, tools=TOOLS)
        assert result.value is None
        assert recorder.events[-1].attribution.intent_id is None

    async def test_bad_intent_id(self) -> None:
        async def root(ctx: ExecutionContext) -> None:
            with pytest.raises(ValueError, match="non-empty"):
                ctx.select_intent("")

        result, _ = await run(root, tools=TOOLS)
        assert result.status == "completed"
