"""Random programs (tool successes and failures, questions, children, cancellation, expiry).

Every example checks the stream invariants: contiguous ``seq`` per execution,
one ``ExecutionStarted`` first and one ``ExecutionFinished`` last, every
Started closed exactly once; and that the outcome is the one the script implies.
"""

from __future__ import annotations

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
