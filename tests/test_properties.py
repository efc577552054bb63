"""Random programs (tool successes and failures, questions, children, cancellation, expiry).

Every example checks the stream invariants: contiguous ``seq`` per execution,
one ``ExecutionStarted`` first and one ``ExecutionFinished`` last, every
Started closed exactly once; and that the outcome is the one the script implies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import onlooker
from onlooker import (
    Elicitation,
    ExecutionContext,
    ExecutionEngine,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionResult,
    InteractionResponse,
    PausedExecution,
    ToolError,
)
from onlooker.testing import RecordingObserver

Check = Callable[[Sequence[ExecutionEvent]], None]


@dataclass(frozen=True)
class Step:
    """One thing a random program does."""

    kind: str  # ok | fail | bad_args | unknown | elicit | spawn | hang
    arg: str = ""
    caught: bool = True
    children: tuple[Step, ...] = ()


class Oops(Exception):
    pass


LEAF = st.one_of(
    st.builds(Step, kind=st.just("ok")),
    st.builds(
        Step, kind=st.just("fail"), arg=st.sampled_from(["defect", "failure"]), caught=st.booleans()
    ),
    st.builds(Step, kind=st.sampled_from(["bad_args", "unknown"]), caught=st.booleans()),
    st.builds(
        Step, kind=st.just("elicit"), arg=st.sampled_from(["accept", "decline", "cancel", "expire"])
    ),
)
STEP = st.one_of(
    LEAF,
    st.builds(Step, kind=st.just("spawn"), children=st.lists(LEAF, max_size=3).map(tuple)),
    st.just(Step("hang")),
)
SCRIPT = st.lists(STEP, max_size=7).map(tuple)


def expected_status(steps: tuple[Step, ...], mode: str, expired: bool = False) -> tuple[str, bool]:
    """The root's final status the script implies, and whether the run has expired."""
    for step in steps:
        if step.kind == "hang":
            return "cancelled", expired
        if step.kind in ("fail", "bad_args", "unknown") and not step.caught:
            return ("expired" if expired else "failed"), expired
        if step.kind == "elicit" and mode == "paused" and (step.arg == "expire" or expired):
            return "expired", True  # ExecutionExpiredError, uncaught
        if step.kind == "spawn":
            child, expired = expected_status(step.children, mode, expired)
            if child == "cancelled":
                return "cancelled", expired
    return ("expired" if expired else "completed"), expired


def asks_to_expire(steps: tuple[Step, ...]) -> bool:
    """Whether some question in the script (perhaps never asked) is left to expire."""
    return any(
        (step.kind == "elicit" and step.arg == "expire") or asks_to_expire(step.children)
        for step in steps
    )


def response(action: str) -> InteractionResponse:
    if action == "accept":
        return InteractionResponse.accept({"ok": True})
    if action == "cancel":
        return InteractionResponse.cancel()
    return InteractionResponse.decline()


async def scenario(steps: tuple[Step, ...], mode: str, check: Check) -> None:
    recorder = RecordingObserver()
    calls_made = 0
    questions_asked = 0
    root_id: list[str] = []
    cancel_scope = anyio.CancelScope()
    expiring = mode == "paused" and asks_to_expire(steps)
    root_done = anyio.Event()

    async def cancel_me() -> None:
        if mode == "inline":
            cancel_scope.cancel()
        else:
            helpers.start_soon(engine.cancel, root_id[0])
        await anyio.sleep_forever()

    @onlooker.tool
    async def work(n: int) -> int:
        await anyio.lowlevel.checkpoint()
        return n

    @onlooker.tool
    def broken(how: str) -> None:
        if how == "failure":
            raise ToolError("expected failure")
        raise Oops("a defect")

    @onlooker.tool
    async def hang() -> None:
        await cancel_me()

    async def interpret(ctx: ExecutionContext, script: tuple[Step, ...]) -> int:
        nonlocal calls_made, questions_asked
        for step in script:
            try:
                if step.kind == "ok":
                    calls_made += 1
                    await ctx.call(work, n=1)
                elif step.kind == "fail":
                    calls_made += 1
                    await ctx.call("broken", how=step.arg)
                elif step.kind == "bad_args":
                    calls_made += 1
                    await ctx.call(work, n="not a number")
                elif step.kind == "unknown":
                    calls_made += 1
                    await ctx.call("no_such_tool")
                elif step.kind == "elicit":
                    questions_asked += 1
                    await ctx.elicit(step.arg)  # the question says how to answer it
                elif step.kind == "spawn":
                    await ctx.spawn(child_program(step.children), task_id="child")
                else:
                    calls_made += 1
                    await ctx.call(hang)
            except Exception:
                if not step.caught or step.kind == "elicit":
                    raise
        return calls_made

    def child_program(script: tuple[Step, ...]) -> onlooker.Program[int]:
        async def child(ctx: ExecutionContext) -> int:
            return await interpret(ctx, script)

        return child

    program = child_program(steps)

    async def handler(question: Elicitation) -> InteractionResponse:
        return response(question.message)

    def watch(event: ExecutionEvent) -> None:
        recorder.handle(event)
        if event.kind == "ExecutionStarted" and event.attribution.depth == 0:
            root_id.append(event.execution_id)
        if isinstance(event, ExecutionFinished) and event.attribution.depth == 0:
            root_done.set()

    async_seen: list[ExecutionEvent] = []

    async def handle_later(event: ExecutionEvent) -> None:
        await anyio.lowlevel.checkpoint()
        async_seen.append(event)

    lagging = onlooker.define_plugin(id="lagging", observer=lambda _: handle_later, queue_size=2)
    want, _ = expected_status(steps, mode)
    result: ExecutionResult[Any] | None = None
    with anyio.fail_after(20):
        async with (
            ExecutionEngine(
                tools=[work, broken, hang],
                plugins=[lagging],
                pause_timeout=0.05 if expiring else None,
            ) as engine,
            anyio.create_task_group() as helpers,
        ):
            engine.bus.subscribe(watch)
            if mode == "inline":
                with cancel_scope:
                    result = await engine.execute(program, on_elicitation=handler)
            else:
                outcome = await engine.execute_with_pause(program)
                while isinstance(outcome, PausedExecution):
                    action = outcome.message
                    if action == "expire":
                        await root_done.wait()
                    outcome = await engine.resume(outcome.execution_id, response(action))
                result = outcome
    events = recorder.events
    check(events)
    assert async_seen == events, "the async observer got every event, in order, by the close"
    root_finished = [
        e for e in events if isinstance(e, ExecutionFinished) and e.attribution.depth == 0
    ]
    assert len(root_finished) == 1
    assert root_finished[0].status == want, (steps, mode, [e.kind for e in events])
    if result is not None:
        assert result.status == want
        assert result.execution_id == root_id[0]
    assert [e.kind for e in events].count("ToolCallStarted") == calls_made
    assert [e.kind for e in events].count("InteractionStarted") == questions_asked


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("mode", ["inline", "paused"])
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=SCRIPT)
def test_random_programs_keep_the_invariants(
    backend: str, mode: str, steps: tuple[Step, ...], check_stream: Check
) -> None:
    anyio.run(scenario, steps, mode, check_stream, backend=backend)


# -- tracked executions: the same invariants when a framework reports the calls ---------------


@dataclass(frozen=True)
class Op:
    """One thing a random framework reports to a tracked execution."""

    kind: str  # call | finish | fail | ask | answer | child
    arg: str = ""  # call: the pre-hook's verdict; child: how the child ends
    pick: int = 0  # finish / fail / answer: which open call or question
    children: tuple[Op, ...] = ()


VERDICTS = ("continue", "rewrite", "skip", "block", "abort", "broken")
CHILD_ENDS = ("exit", "raise", "finish", "open")
ROOT_ENDS = ("exit", "raise", "finish", "cancel", "engine_close")

OP_LEAF = st.one_of(
    st.builds(Op, kind=st.just("call"), arg=st.sampled_from(VERDICTS)),
    st.builds(Op, kind=st.sampled_from(["finish", "fail", "answer"]), pick=st.integers(0, 3)),
    st.just(Op("ask")),
)
OP_CHILD = st.builds(
    Op,
    kind=st.just("child"),
    arg=st.sampled_from(CHILD_ENDS),
    children=st.lists(OP_LEAF, max_size=4).map(tuple),
)
OP = st.one_of(
    OP_LEAF,
    st.builds(
        Op,
        kind=st.just("child"),
        arg=st.sampled_from(CHILD_ENDS),
        children=st.lists(st.one_of(OP_LEAF, OP_CHILD), max_size=5).map(tuple),
    ),
)
TRACKED_SCRIPT = st.lists(OP, max_size=10).map(tuple)


def decide(use: onlooker.ToolUseContext) -> onlooker.PreHookResult | None:
    """The pre-hook: the call's ``verdict`` argument says what to decide."""
    how = use.tool_input["verdict"]
    if how == "broken":
        raise RuntimeError("a broken governance hook")
    actions = {
        "skip": onlooker.HookAction.SKIP,
        "block": onlooker.HookAction.BLOCK,
        "abort": onlooker.HookAction.ABORT,
    }
    return onlooker.PreHookResult(actions[how]) if how in actions else None


def rewrite(use: onlooker.ToolUseContext, output: Any) -> onlooker.PostHookResult | None:
    if use.tool_input["verdict"] == "rewrite":
        return onlooker.PostHookResult(modified_output="REWRITTEN")
    return None


async def tracked_scenario(ops: tuple[Op, ...], end: str, check: Check) -> None:
    recorder = RecordingObserver()
    expected_calls: dict[tuple[str, str], str] = {}  # (execution, call) -> final status
    expected_runs: dict[str, str] = {}  # execution -> final status
    expected_questions: dict[str, str] = {}  # question -> final status
    handles: list[onlooker.TrackedToolCall] = []
    aborted = False
    counter = 0
    left_open: dict[str, list[str]] = {}  # execution -> its children left open

    def closed(execution_id: str, status: str) -> None:
        """``execution_id`` closed ``status``: the children it left open close with it,
        ``failed`` after an abort unless it was cancelled, else ``cancelled``."""
        expected_runs[execution_id] = status
        for child in left_open.get(execution_id, []):
            closed(child, "failed" if aborted and status != "cancelled" else "cancelled")

    async def drive(run: onlooker.TrackedExecution, script: tuple[Op, ...]) -> None:
        nonlocal aborted, counter
        open_calls: list[onlooker.TrackedToolCall] = []
        open_questions: list[str] = []
        for op in script:
            if op.kind == "call":
                counter += 1
                call = await run.tool_started(
                    "tool", {"verdict": op.arg}, tool_call_id=f"call-{counter}"
                )
                handles.append(call)
                key = (run.execution_id, call.tool_call_id)
                if aborted or op.arg == "abort":
                    aborted = True
                    assert call.action is onlooker.HookAction.ABORT and not call.allowed
                    expected_calls[key] = "blocked"
                elif op.arg == "skip":
                    assert call.action is onlooker.HookAction.SKIP
                    expected_calls[key] = "skipped"
                elif op.arg in ("block", "broken"):
                    assert call.action is onlooker.HookAction.BLOCK and call.reason
                    expected_calls[key] = "blocked"
                else:
                    assert call.allowed and not call.done
                    open_calls.append(call)
                    expected_calls[key] = "cancelled"  # unless the script closes it
            elif op.kind in ("finish", "fail") and open_calls:
                call = open_calls.pop(op.pick % len(open_calls))
                key = (run.execution_id, call.tool_call_id)
                if op.kind == "finish":
                    output = await call.finished("output")
                    assert output == (
                        "REWRITTEN" if call.input["verdict"] == "rewrite" else "output"
                    )
                    expected_calls[key] = "completed"
                else:
                    await call.failed(Oops("the framework's tool failed"))
                    expected_calls[key] = "failed"
            elif op.kind == "ask":
                question = await run.interaction_started("?")
                open_questions.append(question)
                expected_questions[question] = "cancelled"  # unless answered
            elif op.kind == "answer" and open_questions:
                question = open_questions.pop(op.pick % len(open_questions))
                await run.interaction_resolved(question, "accepted", {"ok": True})
                expected_questions[question] = "accepted"
            elif op.kind == "child":
                parent_call = f"call-{counter}" if counter else None
                child = run.child("child", parent_tool_call_id=parent_call)
                if op.arg == "exit":
                    async with child:
                        await drive(child, op.children)
                    closed(child.execution_id, "failed" if aborted else "completed")
                elif op.arg == "raise":
                    with contextlib.suppress(Oops):
                        async with child:
                            await drive(child, op.children)
                            raise Oops("the sub-agent crashed")
                    closed(child.execution_id, "failed")
                elif op.arg == "finish":
                    await child.start()
                    await drive(child, op.children)
                    await child.finish()
                    closed(child.execution_id, "failed" if aborted else "completed")
                else:  # left open: closed with its parent
                    await child.start()
                    await drive(child, op.children)
                    left_open.setdefault(run.execution_id, []).append(child.execution_id)
                assert child.finished or op.arg == "open"

    with anyio.fail_after(20):
        async with contextlib.AsyncExitStack() as stack:
            engine = await stack.enter_async_context(
                ExecutionEngine(hooks=[onlooker.HookMatcher(pre=[decide], post=[rewrite])])
            )
            engine.bus.subscribe(recorder)
            run = engine.track("framework-agent", trigger="property")
            if end == "exit":
                async with run:
                    await drive(run, ops)
            elif end == "raise":
                with contextlib.suppress(Oops):
                    async with run:
                        await drive(run, ops)
                        raise Oops("the agent crashed")
            elif end == "finish":
                await run.start()
                await drive(run, ops)
                await run.finish()
                await run.finish()  # harmless
            elif end == "cancel":
                with anyio.CancelScope() as scope:
                    async with run:
                        await drive(run, ops)
                        scope.cancel()
                        await anyio.sleep_forever()
            else:  # left open: the engine's close ends it
                await run.start()
                await drive(run, ops)
                await stack.aclose()
            assert run.finished
    if end in ("cancel", "engine_close"):
        closed(run.execution_id, "cancelled")
    elif end == "raise" or aborted:
        closed(run.execution_id, "failed")
    else:
        closed(run.execution_id, "completed")

    events = recorder.events
    check(events)
    by_call = {
        (e.execution_id, e.tool_call_id): e.status
        for e in events
        if isinstance(e, onlooker.ToolCallFinished)
    }
    assert by_call == expected_calls, (ops, end)
    assert sum(isinstance(e, onlooker.ToolCallStarted) for e in events) == len(expected_calls)
    assert all(call.status == by_call[call.execution_id, call.tool_call_id] for call in handles)
    by_run = {e.execution_id: e.status for e in events if isinstance(e, ExecutionFinished)}
    assert by_run == expected_runs, (ops, end)
    by_question = {
        e.interaction_id: e.status for e in events if isinstance(e, onlooker.InteractionResolved)
    }
    assert by_question == expected_questions, (ops, end)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=TRACKED_SCRIPT, end=st.sampled_from(ROOT_ENDS))
def test_random_tracked_runs_keep_the_invariants(
    backend: str, ops: tuple[Op, ...], end: str, check_stream: Check
) -> None:
    anyio.run(tracked_scenario, ops, end, check_stream, backend=backend)
