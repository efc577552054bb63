"""Tool hooks: matching, order, actions, fail-closed pre-hooks, fail-safe post-hooks."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import onlooker
from onlooker import (
    ExecutionContext,
    HookAbortError,
    HookAction,
    HookMatcher,
    PostHookResult,
    PreHookResult,
    ToolBlockedError,
    ToolCallFinished,
    ToolCallStarted,
    ToolInputError,
    ToolUseContext,
)
from onlooker.testing import RecordingObserver
from running import run

pytestmark = pytest.mark.anyio

ran: list[str] = []


@onlooker.tool
def echo(text: str) -> str:
    """Return the text."""
    ran.append(f"echo:{text}")
    return text


@onlooker.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append(f"add:{a}+{b}")
    return a + b


@onlooker.tool(mutating=True, writes="path")
def write(path: str, content: str = "") -> int:
    """Pretend to write a file."""
    ran.append(f"write:{path}")
    return len(content)


TOOLS: list[onlooker.Tool[..., Any]] = [echo, add, write]


@pytest.fixture(autouse=True)
def _reset_ran() -> None:
    ran.clear()


def finished(recorder: RecordingObserver) -> list[ToolCallFinished]:
    return recorder.of(ToolCallFinished)


def pre(action: HookAction, *, is_async: bool, **fields: Any) -> Callable[..., Any]:
    """A pre-hook (sync or async) that always decides ``action``."""
    decision = PreHookResult(action, **fields)

    def sync_hook(use: ToolUseContext) -> PreHookResult:
        return decision

    async def async_hook(use: ToolUseContext) -> PreHookResult:
        await anyio.lowlevel.checkpoint()
        return decision

    return async_hook if is_async else sync_hook


class TestMatching:
    def test_glob_on_tool_name(self) -> None:
        matcher = HookMatcher(pattern="fs.*")
        assert matcher.matches("fs.read", None)
        assert matcher.matches("fs.", "any")
        assert not matcher.matches("fsread", None)
        assert not matcher.matches("net.fs.read", None)
        assert HookMatcher(pattern="*_file").matches("read_file", None)
        assert not HookMatcher(pattern="READ").matches("read", None)  # case-sensitive

    def test_the_plan_cache_is_bounded(self) -> None:
        """A phase made per request (or a tool name a model made up) cached one plan each,
        for the engine's life."""
        from onlooker._hooks import MAX_PLANS, HookPlans

        def check(use: ToolUseContext) -> None:
            return None

        plans = HookPlans([HookMatcher(phases=("deploy",), pre=(check,))])
        for n in range(MAX_PLANS * 2 + 10):
            plans.plan("tool", f"request-{n}")
        assert len(plans._plans) <= MAX_PLANS
        assert plans.plan("tool", "deploy").pre == ((plans.matchers[0], check),)

    def test_phases(self) -> None:
        matcher = HookMatcher(phases=("review", "deploy"))
        assert matcher.matches("any", "review")
        assert not matcher.matches("any", "plan")
        assert not matcher.matches("any", None)
        assert HookMatcher(phases=["x"]).phases == ("x",)
        assert not HookMatcher(phases=()).matches("any", None)

    def test_no_pattern_no_phases_matches_everything(self) -> None:
        assert HookMatcher().matches("anything", None)
        assert HookMatcher().matches("anything", "a phase")

    def test_bad_matchers_are_refused(self) -> None:
        with pytest.raises(TypeError, match="phases"):
            HookMatcher(phases="review")
        with pytest.raises(ValueError, match="timeout"):
            HookMatcher(timeout=0)
        with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
            HookMatcher(timeout=float("nan"))
        with pytest.raises(TypeError, match="timeout must be a number of seconds, not str"):
            HookMatcher(timeout="1")  # type: ignore[arg-type]  # the point of the test
        assert HookMatcher(timeout=float("inf")).timeout == float("inf")  # no limit
        with pytest.raises(TypeError, match="pattern"):
            HookMatcher(pattern=3)  # type: ignore[arg-type]  # the point of the test
        with pytest.raises(TypeError, match="callable"):
            HookMatcher(pre=["not a hook"])  # type: ignore[list-item]  # the point of the test
        with pytest.raises(TypeError, match="HookMatcher"):
            onlooker.ExecutionEngine(hooks=[lambda use: None])  # type: ignore[list-item]

    async def test_engine_applies_glob_and_phase(self) -> None:
        seen: list[tuple[str, str | None]] = []

        def spy(use: ToolUseContext) -> None:
            seen.append((use.tool_name, use.attribution.phase))

        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("echo", text="x")
            await ctx.call("add", a=1, b=2)
            with onlooker.attribution(phase="review"):
                await ctx.call("echo", text="y")
                await ctx.call("add", a=1, b=2)
            await ctx.spawn(child, phase="review")

        async def child(ctx: ExecutionContext) -> None:
            await ctx.call("add", a=3, b=4)

        hooks = [HookMatcher(pattern="a*", phases=("review",), pre=[spy])]
        result, _ = await run(program, tools=TOOLS, hooks=hooks)
        assert result.status == "completed"
        assert seen == [("add", "review"), ("add", "review")]


class TestOrderAndInput:
    async def test_hooks_run_in_registration_order_and_chain_input(self) -> None:
        log: list[str] = []

        def first(use: ToolUseContext) -> PreHookResult:
            log.append(f"first saw {use.tool_input['text']}")
            return PreHookResult(modified_input={"text": use.tool_input["text"] + "-1"})

        async def second(use: ToolUseContext) -> PreHookResult:
            log.append(f"second saw {use.tool_input['text']}")
            return PreHookResult(
                modified_input={**use.tool_input, "text": use.tool_input["text"] + "-2"}
            )

        def third(use: ToolUseContext) -> None:
            log.append(f"third saw {use.tool_input['text']}")

        def post_a(use: ToolUseContext, output: Any) -> PostHookResult:
            log.append(f"post_a saw {output}")
            return PostHookResult(modified_output=output.upper())

        async def post_b(use: ToolUseContext, output: Any) -> None:
            log.append(f"post_b saw {output}")

        from_plugin = onlooker.define_plugin(
            id="hooks", hooks=lambda _ext: [HookMatcher(pre=[third], post=[post_b])]
        )

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call("echo", text="in")

        hooks = [HookMatcher(pre=[first], post=[post_a]), HookMatcher(pattern="echo", pre=[second])]
        result, recorder = await run(program, tools=TOOLS, hooks=hooks, plugins=[from_plugin])
        assert result.value == "IN-1-2"
        assert log == [
            "first saw in",
            "second saw in-1",
            "third saw in-1-2",
            "post_a saw in-1-2",
            "post_b saw IN-1-2",
        ]
        assert ran == ["echo:in-1-2"]
        (started,) = recorder.of(ToolCallStarted)
        assert started.args == {"text": "in-1-2"}  # what the tool really received
        assert finished(recorder)[0].result == "IN-1-2"

    async def test_modified_input_is_validated_and_coerced(self) -> None:
        def coerce(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={"a": "40", "b": use.tool_input["b"]})

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call("add", a=1, b=2)

        result, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[coerce])])
        assert result.value == 42
        assert recorder.of(ToolCallStarted)[0].args == {"a": 40, "b": 2}

    async def test_invalid_modified_input_fails_the_call_naming_the_hook(self) -> None:
        def breaks_input(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={"a": "not a number", "b": 1})

        caught: list[ToolInputError] = []

        async def program(ctx: ExecutionContext) -> str:
            try:
                await ctx.call("add", a=1, b=2)
            except ToolInputError as exc:
                caught.append(exc)
            return "went on"

        result, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[breaks_input])])
        assert result.status == "completed" and result.value == "went on"
        assert ran == []
        (exc,) = caught
        assert exc.hook is not None and "breaks_input" in exc.hook
        assert "breaks_input" in str(exc) and "a" in str(exc)
        (event,) = finished(recorder)
        assert event.status == "failed"
        assert event.error is not None and event.error.type == "ToolInputError"
        assert "breaks_input" in event.error.message

    async def test_hook_context_describes_the_call(self) -> None:
        seen: list[ToolUseContext] = []

        def spy(use: ToolUseContext) -> None:
            seen.append(use)

        def post_spy(use: ToolUseContext, output: Any) -> None:
            seen.append(use)

        async def program(ctx: ExecutionContext) -> str:
            with onlooker.attribution(task_id="t1", phase="p1"):
                await ctx.call("write", path="a.txt")
            return ctx.execution_id

        result, recorder = await run(
            program, tools=TOOLS, hooks=[HookMatcher(pre=[spy], post=[post_spy])]
        )
        pre_use, post_use = seen
        (event,) = finished(recorder)
        for use in (pre_use, post_use):
            assert use.tool_name == "write"
            assert use.tool_call_id == event.tool_call_id
            assert use.execution_id == result.value
            assert use.mutating is True
            assert use.attribution.task_id == "t1" and use.attribution.phase == "p1"
        assert dict(pre_use.tool_input) == {"path": "a.txt", "content": ""}
        with pytest.raises(TypeError):
            pre_use.tool_input["path"] = "b.txt"  # type: ignore[index]  # read-only view

    async def test_unknown_tool_runs_no_hook(self) -> None:
        calls: list[str] = []

        def spy(use: ToolUseContext) -> None:
            calls.append(use.tool_name)

        async def program(ctx: ExecutionContext) -> None:
            with pytest.raises(onlooker.UnknownToolError):
                await ctx.call("nope")

        result, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[spy])])
        assert result.status == "completed" and calls == []
        assert finished(recorder)[0].status == "failed"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
class TestActions:
    async def test_continue(self, is_async: bool) -> None:
        hooks = [HookMatcher(pre=[pre(HookAction.CONTINUE, is_async=is_async)])]

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call("add", a=2, b=3)

        result, recorder = await run(program, tools=TOOLS, hooks=hooks)
        assert result.value == 5 and ran == ["add:2+3"]
        assert finished(recorder)[0].status == "completed"

    async def test_skip_returns_none_without_running_the_tool(self, is_async: bool) -> None:
        hooks = [
            HookMatcher(
                pre=[pre(HookAction.SKIP, is_async=is_async, metadata={"cached": True})],
                post=[lambda use, out: PostHookResult(metadata={"post": "never"})],
            )
        ]

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call("add", a=2, b=3)

        result, recorder = await run(program, tools=TOOLS, hooks=hooks)
        assert result.status == "completed" and result.value is None
        assert ran == []
        (event,) = finished(recorder)
        assert event.status == "skipped" and event.result is None and event.error is None
        assert event.metadata == {"cached": True}
        assert len(recorder.of(ToolCallStarted)) == 1

    async def test_caught_block_lets_the_execution_go_on(self, is_async: bool) -> None:
        hooks = [
            HookMatcher(
                pattern="write",
                pre=[pre(HookAction.BLOCK, is_async=is_async, reason="read-only day")],
            )
        ]
        caught: list[ToolBlockedError] = []

        async def program(ctx: ExecutionContext) -> Any:
            try:
                await ctx.call("write", path="x")
            except ToolBlockedError as exc:
                caught.append(exc)
            return await ctx.call("add", a=1, b=1)

        result, recorder = await run(program, tools=TOOLS, hooks=hooks)
        assert result.status == "completed" and result.value == 2
        (exc,) = caught
        assert exc.reason == "read-only day" and "read-only day" in str(exc)
        assert exc.tool == "write"
        assert ran == ["add:1+1"]
        blocked, completed = finished(recorder)
        assert blocked.status == "blocked" and completed.status == "completed"
        assert blocked.error is not None and blocked.error.type == "ToolBlockedError"
        assert blocked.error.cause == "failure"

    async def test_uncaught_block_fails_the_execution(self, is_async: bool) -> None:
        hooks = [HookMatcher(pre=[pre(HookAction.BLOCK, is_async=is_async)])]

        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("echo", text="x")

        result, _ = await run(program, tools=TOOLS, hooks=hooks)
        assert result.status == "failed"
        assert result.error is not None and result.error.type == "ToolBlockedError"

    async def test_caught_pre_abort_still_fails_the_execution(self, is_async: bool) -> None:
        hooks = [HookMatcher(pre=[pre(HookAction.ABORT, is_async=is_async, reason="stop")])]

        async def program(ctx: ExecutionContext) -> str:
            with pytest.raises(HookAbortError, match="stop"):
                await ctx.call("echo", text="x")
            return "caught it"

        result, recorder = await run(program, tools=TOOLS, hooks=hooks)
        assert ran == []
        assert result.status == "failed" and result.value is None
        assert result.error is not None and result.error.type == "HookAbortError"
        assert "stop" in result.error.message
        assert finished(recorder)[0].status == "blocked"
        (end,) = recorder.of(onlooker.ExecutionFinished)
        assert end.status == "failed"

    async def test_post_abort_blocks_after_the_tool_ran(self, is_async: bool) -> None:
        async def async_post(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(HookAction.ABORT, reason="leaked secret", metadata={"x": 1})

        def sync_post(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(HookAction.ABORT, reason="leaked secret", metadata={"x": 1})

        hooks = [HookMatcher(post=[async_post if is_async else sync_post])]

        async def program(ctx: ExecutionContext) -> str:
            try:
                await ctx.call("echo", text="secret")
            except HookAbortError as exc:
                assert exc.reason == "leaked secret"
            return "caught"

        result, recorder = await run(program, tools=TOOLS, hooks=hooks)
        assert ran == ["echo:secret"]
        assert result.status == "failed"
        (event,) = finished(recorder)
        assert event.status == "blocked" and event.result is None
        assert event.metadata == {"x": 1}

    async def test_post_hook_rewrites_output(self, is_async: bool) -> None:
        async def async_post(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(modified_output="[redacted]")

        def sync_post(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(modified_output="[redacted]")

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call("echo", text="password=hunter2")

        result, recorder = await run(
            program, tools=TOOLS, hooks=[HookMatcher(post=[async_post if is_async else sync_post])]
        )
        assert result.value == "[redacted]"
        assert finished(recorder)[0].result == "[redacted]"

    async def test_raising_pre_hook_blocks_naming_it(self, is_async: bool) -> None:
        def broken_sync(use: ToolUseContext) -> None:
            raise RuntimeError("policy store is down")

        async def broken_async(use: ToolUseContext) -> None:
            raise RuntimeError("policy store is down")

        caught: list[ToolBlockedError] = []

        async def program(ctx: ExecutionContext) -> str:
            try:
                await ctx.call("echo", text="x")
            except ToolBlockedError as exc:
                caught.append(exc)
            return "went on"

        hook = broken_async if is_async else broken_sync
        result, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[hook])])
        assert result.status == "completed" and ran == []
        (exc,) = caught
        assert exc.hook is not None and hook.__name__ in exc.hook
        assert hook.__name__ in str(exc) and "policy store is down" in str(exc)
        assert isinstance(exc.__cause__, RuntimeError)
        assert finished(recorder)[0].status == "blocked"

    async def test_slow_pre_hook_blocks_naming_it(self, is_async: bool) -> None:
        def slow_sync(use: ToolUseContext) -> None:
            time.sleep(0.03)

        async def slow_async(use: ToolUseContext) -> None:
            await anyio.sleep(5)

        caught: list[ToolBlockedError] = []

        async def program(ctx: ExecutionContext) -> None:
            try:
                await ctx.call("echo", text="x")
            except ToolBlockedError as exc:
                caught.append(exc)

        hook = slow_async if is_async else slow_sync
        result, recorder = await run(
            program, tools=TOOLS, hooks=[HookMatcher(pre=[hook], timeout=0.01)]
        )
        assert result.status == "completed" and ran == []
        (exc,) = caught
        assert exc.hook is not None and hook.__name__ in exc.hook
        assert "timed out" in str(exc)
        assert finished(recorder)[0].status == "blocked"

    async def test_raising_or_slow_post_hook_is_logged_and_output_passes(
        self, is_async: bool, caplog: pytest.LogCaptureFixture
    ) -> None:
        def broken_sync(use: ToolUseContext, output: Any) -> None:
            raise RuntimeError("metrics backend down")

        async def broken_async(use: ToolUseContext, output: Any) -> None:
            raise RuntimeError("metrics backend down")

        async def slow(use: ToolUseContext, output: Any) -> PostHookResult:
            await anyio.sleep(5)
            return PostHookResult(modified_output="never")

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call("echo", text="intact")

        hook = broken_async if is_async else broken_sync
        with caplog.at_level(logging.ERROR, logger="onlooker"):
            result, recorder = await run(
                program,
                tools=TOOLS,
                hooks=[HookMatcher(post=[hook]), HookMatcher(post=[slow], timeout=0.01)],
            )
        assert result.status == "completed" and result.value == "intact"
        (event,) = finished(recorder)
        assert event.status == "completed" and event.result == "intact"
        messages = [r.getMessage() for r in caplog.records]
        assert any(hook.__name__ in m and "echo" in m for m in messages)
        assert any("slow" in m for m in messages)

    async def test_hook_returning_garbage(self, is_async: bool) -> None:
        def sync_garbage(use: ToolUseContext) -> Any:
            return "yes"

        async def async_garbage(use: ToolUseContext) -> Any:
            return "yes"

        async def program(ctx: ExecutionContext) -> None:
            with pytest.raises(ToolBlockedError, match="PreHookResult"):
                await ctx.call("echo", text="x")

        hook = async_garbage if is_async else sync_garbage
        result, _ = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[hook])])
        assert result.status == "completed" and ran == []


class TestResults:
    @pytest.mark.parametrize("action", list(HookAction))
    async def test_an_action_by_its_value_is_that_action(self, action: HookAction) -> None:
        """``action="skip"`` is ``HookAction.SKIP`` (a StrEnum), never an ABORT."""
        decision = PreHookResult(action=action.value)  # type: ignore[arg-type]
        assert decision.action is action
        hooks = [HookMatcher(pre=[lambda use: decision])]

        async def program(ctx: ExecutionContext) -> Any:
            with contextlib.suppress(ToolBlockedError, HookAbortError):
                return await ctx.call("add", a=2, b=3)

        result, recorder = await run(program, tools=TOOLS, hooks=hooks)
        status = {"continue": "completed", "skip": "skipped"}.get(action.value, "blocked")
        assert finished(recorder)[0].status == status
        assert result.status == ("failed" if action is HookAction.ABORT else "completed")

    def test_an_unknown_action_is_refused_when_built(self) -> None:
        with pytest.raises(ValueError, match=r"HookAction.CONTINUE.*not 'proceed'"):
            PreHookResult(action="proceed")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"HookAction.CONTINUE, HookAction.ABORT, not"):
            PostHookResult(action=HookAction.SKIP)
        assert PostHookResult(action="abort").action is HookAction.ABORT  # type: ignore[arg-type]


class TestMetadata:
    async def test_pre_and_post_metadata_merge_onto_the_finished_event(self) -> None:
        def tag(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(metadata={"checked_by": "tag", "risk": "low"})

        def retag(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(metadata={"risk": "medium"})

        def post(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(metadata={"output_len": len(output)})

        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("echo", text="abc")
            await ctx.call("add", a=1, b=1)

        hooks = [HookMatcher(pre=[tag, retag]), HookMatcher(pattern="echo", post=[post])]
        _, recorder = await run(program, tools=TOOLS, hooks=hooks)
        echo_event, add_event = finished(recorder)
        assert echo_event.metadata == {"checked_by": "tag", "risk": "medium", "output_len": 3}
        assert add_event.metadata == {"checked_by": "tag", "risk": "medium"}

    async def test_blocked_call_keeps_metadata_and_no_hooks_means_empty(self) -> None:
        def deny(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(HookAction.BLOCK, reason="no", metadata={"rule": "r1"})

        async def program(ctx: ExecutionContext) -> None:
            with pytest.raises(ToolBlockedError):
                await ctx.call("write", path="x")
            await ctx.call("echo", text="x")

        _, recorder = await run(
            program, tools=TOOLS, hooks=[HookMatcher(pattern="write", pre=[deny])]
        )
        blocked, plain = finished(recorder)
        assert blocked.metadata == {"rule": "r1"}
        assert plain.metadata == {}

    async def test_metadata_is_a_snapshot(self) -> None:
        shared: dict[str, Any] = {"items": [1]}

        def tag(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(metadata=shared)

        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("echo", text="x")
            shared["items"].append(2)

        _, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[tag])])
        metadata: Mapping[str, Any] = finished(recorder)[0].metadata
        assert metadata == {"items": [1]}


async def test_stream_stays_well_formed_under_every_action(
    check_stream: Callable[[list[onlooker.ExecutionEvent]], None],
) -> None:
    actions = {"a": HookAction.SKIP, "b": HookAction.BLOCK, "c": HookAction.ABORT}

    def decide(use: ToolUseContext) -> PreHookResult:
        return PreHookResult(actions.get(str(use.tool_input["text"]), HookAction.CONTINUE))

    async def program(ctx: ExecutionContext) -> None:
        for text in ("a", "b", "c", "d"):
            with contextlib.suppress(onlooker.ToolError):
                await ctx.call("echo", text=text)

    result, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[decide])])
    check_stream(recorder.events)
    assert [e.status for e in finished(recorder)] == [
        "skipped",
        "blocked",
        "blocked",
        "blocked",
    ]  # no call runs after ABORT
    assert result.status == "failed"


class AsyncCallable:
    """A hook object whose ``__call__`` is async."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, use: ToolUseContext) -> PreHookResult:
        self.seen.append(use.tool_name)
        return PreHookResult(modified_input={"text": "from object"})


async def test_hook_shapes_async_objects_and_sync_functions_returning_awaitables() -> None:
    obj = AsyncCallable()

    async def later(use: ToolUseContext, output: Any) -> PostHookResult:
        return PostHookResult(modified_output=f"{output}!")

    def returns_awaitable(use: ToolUseContext, output: Any) -> Awaitable[PostHookResult]:
        return later(use, output)

    async def program(ctx: ExecutionContext) -> Any:
        return await ctx.call("echo", text="x")

    result, _ = await run(
        program, tools=TOOLS, hooks=[HookMatcher(pre=[obj], post=[returns_awaitable])]
    )
    assert result.value == "from object!"
    assert obj.seen == ["echo"]


async def test_abort_in_a_child_fails_the_child_and_its_parent() -> None:
    def abort_writes(use: ToolUseContext) -> PreHookResult | None:
        return PreHookResult(HookAction.ABORT, reason="no writes today") if use.mutating else None

    async def child(ctx: ExecutionContext) -> None:
        with contextlib.suppress(HookAbortError):
            await ctx.call("write", path="x")

    async def parent(ctx: ExecutionContext) -> str:
        result = await ctx.spawn(child)
        assert result.status == "failed"
        assert result.error is not None and "no writes today" in result.error.message
        with contextlib.suppress(HookAbortError):
            await ctx.call("echo", text="refused: the run was aborted")
        return "parent done"

    result, recorder = await run(parent, tools=TOOLS, hooks=[HookMatcher(pre=[abort_writes])])
    assert ran == []  # ABORT ends the whole run: no tool runs after it, in any execution
    assert result.status == "failed"
    assert result.error is not None and result.error.type == "HookAbortError"
    assert [e.status for e in recorder.of(onlooker.ExecutionFinished)] == ["failed", "failed"]


async def test_a_block_raised_inside_a_tool_fails_that_tool_it_does_not_block_it() -> None:
    """Only a hook's verdict makes a call `blocked`; a tool that lets a nested
    call's ToolBlockedError escape has failed."""

    def block_echo(use: ToolUseContext) -> PreHookResult | None:
        return (
            PreHookResult(HookAction.BLOCK, reason="no echo") if use.tool_name == "echo" else None
        )

    @onlooker.tool
    async def relay(text: str) -> str:
        result: str = await onlooker.current_context().call("echo", text=text)
        return result

    async def program(ctx: ExecutionContext) -> str:
        with contextlib.suppress(onlooker.ToolBlockedError):
            await ctx.call("relay", text="hi")
        return "went on"

    recorder = RecordingObserver()
    async with onlooker.ExecutionEngine(
        tools=[*TOOLS, relay], hooks=[HookMatcher(pre=[block_echo])]
    ) as engine:
        with onlooker.observing(recorder):
            result = await engine.execute(program)
    assert result.status == "completed"
    assert [(e.tool, e.status) for e in finished(recorder)] == [
        ("echo", "blocked"),
        ("relay", "failed"),
    ]


class TestLateAsyncHooks:
    """An async hook is cancelled at its timeout; one that outlives the cancellation is late."""

    async def test_async_pre_hook_that_outlives_its_cancellation_still_blocks(self) -> None:
        """A hook shielded from the timeout's cancellation, or one that catches it and
        returns, is late all the same: the call is blocked, the tool never runs."""

        async def shielded(use: ToolUseContext) -> None:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.1)

        async def swallowing(use: ToolUseContext) -> PreHookResult:
            try:
                await anyio.sleep(5)
            except anyio.get_cancelled_exc_class():
                pass  # a hook that must not do this, and does
            return PreHookResult()

        caught: list[ToolBlockedError] = []

        async def program(ctx: ExecutionContext) -> None:
            for _ in range(2):
                try:
                    await ctx.call("echo", text="x")
                except ToolBlockedError as exc:
                    caught.append(exc)

        for hook in (shielded, swallowing):
            caught.clear()
            result, recorder = await run(
                program, tools=TOOLS, hooks=[HookMatcher(pre=[hook], timeout=0.01)]
            )
            assert result.status == "completed" and ran == []
            assert len(caught) == 2 and all("timed out" in str(exc) for exc in caught)
            assert [event.status for event in finished(recorder)] == ["blocked", "blocked"]

    async def test_late_async_post_hook_leaves_the_output(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        async def shielded(use: ToolUseContext, output: Any) -> PostHookResult:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.1)
            return PostHookResult(modified_output="rewritten", metadata={"late": True})

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call("echo", text="intact")

        with caplog.at_level(logging.ERROR, logger="onlooker"):
            result, recorder = await run(
                program, tools=TOOLS, hooks=[HookMatcher(post=[shielded], timeout=0.01)]
            )
        assert result.value == "intact"
        (event,) = finished(recorder)
        assert event.result == "intact" and event.metadata == {}
        assert any("shielded" in record.getMessage() for record in caplog.records)


class TestArgsOfRefusedCalls:
    async def test_a_refused_call_records_the_validated_input_the_hooks_were_given(
        self,
    ) -> None:
        """events.md: defaults filled in, values converted, an earlier hook's rewrite not
        applied (the call never ran with it)."""

        def rewrite(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={**use.tool_input, "path": "/elsewhere"})

        def refuse(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(action=HookAction.BLOCK)

        async def program(ctx: ExecutionContext) -> None:
            with contextlib.suppress(ToolBlockedError):
                await ctx.call("write", path="a.md")
            await ctx.call("add", a="1", b=2)

        hooks = [
            HookMatcher(pattern="write", pre=[rewrite, refuse]),
            HookMatcher(pattern="add", pre=[pre(HookAction.SKIP, is_async=False)]),
        ]
        _, recorder = await run(program, tools=TOOLS, hooks=hooks)
        started = recorder.of(ToolCallStarted)
        assert [event.args for event in started] == [
            {"path": "a.md", "content": ""},
            {"a": 1, "b": 2},
        ]
        assert [event.status for event in finished(recorder)] == ["blocked", "skipped"]
        assert ran == []


class Deciding:
    """An ``echo`` pre-hook that decides only once released: the abort comes while it is
    pending, however slow the machine (a 0.2 s sleep raced a 0.05 s one: flaky)."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, use: ToolUseContext) -> None:
        if use.tool_name == "echo":
            self.entered.set()
            with anyio.fail_after(10):
                await self.release.wait()


def abort_writes(use: ToolUseContext) -> PreHookResult | None:
    return PreHookResult(HookAction.ABORT, reason="stop") if use.mutating else None


def echo_while_a_write_aborts(
    outcomes: list[str], deciding: Deciding
) -> Callable[[ExecutionContext], Any]:
    """A program calling ``echo`` in a task, and ``write`` (which aborts) while echo's hooks
    decide; ``outcomes`` gets what the echo call returned, or the refusal it raised."""

    async def program(ctx: ExecutionContext) -> None:
        async def in_flight() -> None:
            try:
                outcomes.append(repr(await ctx.call("echo", text="in flight")))
            except HookAbortError as exc:
                outcomes.append(str(exc))

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_flight)
            await deciding.entered.wait()  # echo's hooks are deciding
            try:
                with contextlib.suppress(HookAbortError):
                    await ctx.call("write", path="x")
            finally:
                deciding.release.set()  # and decide only after the abort

    return program


class TestAbortWhileHooksDecide:
    """An ABORT refuses every later call, also one whose pre-hooks were still deciding."""

    async def test_a_call_pending_its_pre_hooks_is_refused_by_an_abort_meanwhile(self) -> None:
        refusals: list[str] = []
        deciding = Deciding()
        hooks = [HookMatcher(pre=[abort_writes, deciding])]
        program = echo_while_a_write_aborts(refusals, deciding)
        result, recorder = await run(program, tools=TOOLS, hooks=hooks)
        assert ran == [] and result.status == "failed"
        assert [(e.tool, e.status) for e in finished(recorder)] == [
            ("write", "blocked"),
            ("echo", "blocked"),
        ]
        assert len(refusals) == 1 and "the execution was aborted" in refusals[0]

    async def test_hooks_after_the_abort_do_not_run_and_their_skip_does_not_win(self) -> None:
        later: list[str] = []

        def skip_echo(use: ToolUseContext) -> PreHookResult | None:
            later.append(use.tool_name)
            return PreHookResult(HookAction.SKIP) if use.tool_name == "echo" else None

        outcomes: list[str] = []
        deciding = Deciding()
        hooks = [HookMatcher(pre=[abort_writes, deciding, skip_echo])]
        program = echo_while_a_write_aborts(outcomes, deciding)
        _, recorder = await run(program, tools=TOOLS, hooks=hooks)
        assert later == [] and len(outcomes) == 1
        assert "the execution was aborted" in outcomes[0]  # a HookAbortError, not a skip's None
        assert [(e.tool, e.status) for e in finished(recorder)] == [
            ("write", "blocked"),
            ("echo", "blocked"),
        ]

    async def test_a_tracked_call_pending_its_pre_hooks_is_not_allowed_after_an_abort(
        self,
    ) -> None:
        entered, release = anyio.Event(), anyio.Event()

        async def slow_for_search(use: ToolUseContext) -> None:
            if use.tool_name == "search":
                entered.set()
                with anyio.fail_after(10):
                    await release.wait()  # decides only after the abort below

        def abort_deletes(use: ToolUseContext) -> PreHookResult | None:
            return PreHookResult(HookAction.ABORT) if use.tool_name == "delete" else None

        verdicts: dict[str, HookAction] = {}
        recorder = RecordingObserver()
        hooks = [HookMatcher(pre=[abort_deletes, slow_for_search])]
        async with onlooker.ExecutionEngine(hooks=hooks) as engine:
            with onlooker.observing(recorder):
                async with engine.track("agent") as tracked:

                    async def start(tool: str) -> None:
                        verdicts[tool] = (await tracked.tool_started(tool, {})).action

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(start, "search")
                        await entered.wait()  # search's hooks are deciding
                        try:
                            await start("delete")
                        finally:
                            release.set()
        assert verdicts == {"delete": HookAction.ABORT, "search": HookAction.ABORT}
        assert [e.status for e in finished(recorder)] == ["blocked", "blocked"]
        assert recorder.of(onlooker.ExecutionFinished)[0].status == "failed"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_pre_hook_swallowing_a_native_asyncio_cancellation_stops_the_call() -> None:
    """``asyncio.timeout`` cancels the task itself, not through an anyio scope."""
    import asyncio

    async def swallowing(use: ToolUseContext) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(5)

    async def program(ctx: ExecutionContext) -> str:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                await ctx.call("echo", text="after the cancel")
        return "went on"

    result, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[swallowing])])
    assert ran == [] and result.value == "went on"
    assert [e.status for e in finished(recorder)] == ["cancelled"]


async def test_a_hooked_call_in_shielded_clean_up_code_still_runs() -> None:
    """A cancellation pending from before the hook ran is no swallowed one."""

    async def slow(use: ToolUseContext) -> None:
        await anyio.sleep(0.05)

    async def program(ctx: ExecutionContext) -> str:
        done = "not run"
        with anyio.move_on_after(0.01):
            try:
                await anyio.sleep(5)
            finally:
                with anyio.CancelScope(shield=True):
                    done = await ctx.call("echo", text="cleaned up")
        return done

    result, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[slow])])
    assert result.value == "cleaned up" and ran == ["echo:cleaned up"]
    assert [e.status for e in finished(recorder)] == ["completed"]


async def test_a_pre_hook_that_swallows_a_cancellation_does_not_let_the_tool_run() -> None:
    async def swallowing(use: ToolUseContext) -> None:
        with contextlib.suppress(anyio.get_cancelled_exc_class()):
            await anyio.sleep(5)

    async def program(ctx: ExecutionContext) -> str:
        with anyio.move_on_after(0.05):
            await ctx.call("echo", text="after the cancel")
        return "went on"

    result, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[swallowing])])
    assert ran == [] and result.value == "went on"
    assert [e.status for e in finished(recorder)] == ["cancelled"]


class TestMalformedResults:
    """A result's fields of the wrong shape are refused when it is built, inside the hook:
    a pre-hook then blocks (fail-closed), a post-hook is logged and the output passes."""

    def test_fields_of_the_wrong_shape_are_refused_when_built(self) -> None:
        with pytest.raises(TypeError, match=r"modified_input must be a mapping.*not list"):
            PreHookResult(modified_input=["x"])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"metadata must be a mapping.*not list"):
            PreHookResult(HookAction.BLOCK, metadata=["a"])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"metadata must be a mapping.*not int"):
            PostHookResult(metadata=5)  # type: ignore[arg-type]

    async def test_a_pre_hook_building_a_malformed_result_blocks_naming_itself(self) -> None:
        def bad_input(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input=["x"])  # type: ignore[arg-type]

        def bad_metadata(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(HookAction.BLOCK, reason="no", metadata=["a"])  # type: ignore[arg-type]

        caught: list[ToolBlockedError] = []

        async def program(ctx: ExecutionContext) -> None:
            try:
                await ctx.call("echo", text="x")
            except ToolBlockedError as exc:
                caught.append(exc)

        for hook in (bad_input, bad_metadata):
            caught.clear()
            result, recorder = await run(program, tools=TOOLS, hooks=[HookMatcher(pre=[hook])])
            assert result.status == "completed" and ran == []
            assert len(caught) == 1 and caught[0].hook is not None
            assert hook.__name__ in caught[0].hook and "TypeError" in str(caught[0])
            assert [e.status for e in finished(recorder)] == ["blocked"]

    async def test_a_post_hook_building_malformed_metadata_leaves_the_output(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        def bad_metadata(use: ToolUseContext, output: Any) -> PostHookResult:
            return PostHookResult(modified_output="rewritten", metadata=["a"])  # type: ignore[arg-type]

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call("echo", text="intact")

        with caplog.at_level(logging.ERROR, logger="onlooker"):
            result, recorder = await run(
                program, tools=TOOLS, hooks=[HookMatcher(post=[bad_metadata])]
            )
        assert result.status == "completed" and result.value == "intact"
        assert [(e.status, e.result) for e in finished(recorder)] == [("completed", "intact")]
        assert any("bad_metadata" in record.getMessage() for record in caplog.records)


class TestHooksSeeDetachedInput:
    """``tool_input``'s nested lists and dicts are the hooks' own copies: changing one in
    place changes neither what the tool receives nor the caller's values."""

    async def test_a_nested_change_in_place_reaches_neither_the_tool_nor_the_record(
        self,
    ) -> None:
        received: list[list[str]] = []

        @onlooker.tool
        def tag(items: list[str], options: dict[str, list[str]]) -> int:
            received.append(items + options["extra"])
            return len(items)

        def meddle(use: ToolUseContext) -> None:
            use.tool_input["items"].append(42)
            use.tool_input["options"]["extra"].append("/etc/shadow")

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call("tag", items=["a"], options={"extra": ["b"]})

        result, recorder = await run(program, tools=[tag], hooks=[HookMatcher(pre=[meddle])])
        assert result.value == 1 and received == [["a", "b"]]
        assert recorder.of(ToolCallStarted)[0].args == {"items": ["a"], "options": {"extra": ["b"]}}

    async def test_a_tracked_calls_framework_values_are_not_changed_by_a_hook(self) -> None:
        def meddle(use: ToolUseContext) -> None:
            use.tool_input["paths"].append("/etc/shadow")

        args: dict[str, Any] = {"paths": ["a.txt"]}
        recorder = RecordingObserver()
        async with onlooker.ExecutionEngine(hooks=[HookMatcher(pre=[meddle])]) as engine:
            with onlooker.observing(recorder):
                async with engine.track("agent") as tracked:
                    call = await tracked.tool_started("Read", args)
                    assert call.allowed and call.input == {"paths": ["a.txt"]}
                    await call.finished("ok")
        assert args == {"paths": ["a.txt"]}
        assert recorder.of(ToolCallStarted)[0].args == {"paths": ["a.txt"]}

    async def test_a_value_holding_itself_is_copied_once(self) -> None:
        @onlooker.tool
        def take(data: Any) -> str:
            return "ran"

        shared: dict[str, Any] = {}
        shared["a"] = shared["b"] = shared  # a cycle, reached twice per level

        def look(use: ToolUseContext) -> None:
            copy = use.tool_input["data"]
            assert copy is not shared and copy["a"] is copy and copy["b"] is copy

        async def program(ctx: ExecutionContext) -> Any:
            with anyio.fail_after(5):
                return await ctx.call("take", data=shared)

        result, _ = await run(program, tools=[take], hooks=[HookMatcher(pre=[look])])
        assert result.value == "ran"

    async def test_the_input_a_hook_rewrote_is_detached_from_the_next_hooks(self) -> None:
        received: list[list[str]] = []

        @onlooker.tool
        def tag(items: list[str]) -> None:
            received.append(items)

        def rewrite(use: ToolUseContext) -> PreHookResult:
            return PreHookResult(modified_input={"items": [*use.tool_input["items"], "b"]})

        def meddle(use: ToolUseContext) -> None:
            use.tool_input["items"].append(42)

        async def program(ctx: ExecutionContext) -> None:
            await ctx.call("tag", items=["a"])

        result, _ = await run(program, tools=[tag], hooks=[HookMatcher(pre=[rewrite, meddle])])
        assert result.status == "completed" and received == [["a", "b"]]

    async def test_a_rewrite_still_goes_through_modified_input(self) -> None:
        def rewrite(use: ToolUseContext) -> PreHookResult:
            paths = [*use.tool_input["paths"], "b.txt"]
            return PreHookResult(modified_input={**use.tool_input, "paths": paths})

        async with onlooker.ExecutionEngine(hooks=[HookMatcher(pre=[rewrite])]) as engine:
            tracked = engine.track("agent")
            async with tracked:
                call = await tracked.tool_started("Read", {"paths": ["a.txt"]})
                assert call.input == {"paths": ["a.txt", "b.txt"]}
                await call.finished("ok")
