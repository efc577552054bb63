"""Running one native execution: its context, its events, its result.

``engine.execute``, a detached run of ``execute_with_pause`` and
``ctx.spawn`` all end in :func:`run_execution`: it emits
``ExecutionStarted``, awaits the program, and emits ``ExecutionFinished``
with the result it returns, whatever happens.
"""

from __future__ import annotations

from contextvars import Token
from time import perf_counter
from typing import Any, TypeVar

import anyio
from pydantic import JsonValue

from ._context import ExecutionContext, Program, Spawn, _current, _tool_call
from ._emitter import Emitter
from ._errors import ExecutionExpiredError, HookAbortError
from ._events import Attribution, ErrorInfo, ExecutionStatus, Trigger, new_id
from ._lifecycle import Runtime
from ._results import (
    ExecutionResult,
    cancel_requests,
    cancelled_meanwhile,
    error_info,
    stray_cancel,
    undo_task_group_cancels,
)
from ._run import RunState
from ._scope import _attribution
from ._tracking import ExecutionIds

__all__ = ["child_runner", "root_attribution", "run_execution"]

T = TypeVar("T")


async def run_execution(
    runtime: Runtime,
    spawn: Spawn,
    program: Program[T],
    run: RunState,
    execution_id: str,
    attribution: Attribution,
    trigger: Trigger,
    *,
    owner: str | None,
    input: JsonValue,
    own_task: bool = False,
) -> ExecutionResult[T]:
    """Run ``program`` as execution ``execution_id`` of ``run``; return its result.

    ``own_task``: this runs alone in a task of its own (a detached root),
    whose context ends with it.

    A failing program is a ``failed`` result (``expired`` after its pause
    timed out); a cancellation is emitted ``cancelled`` and propagates. A
    hook's ``ABORT`` decides the outcome even if the program caught it.
    ``spawn`` is how the execution's context runs its children.
    """
    name = _name_of(program)
    emitter = Emitter(runtime.bus, execution_id)
    ctx = ExecutionContext(runtime, run, emitter, spawn, attribution, name, trigger, input)
    tokens = _enter(ctx, attribution, own_task=own_task)
    began = perf_counter()
    cancel_requests_before = cancel_requests()
    try:
        try:
            emitter.execution_started(program=name, trigger=trigger, owner=owner, input=input)
            if runtime.bus.congested:
                await runtime.bus.wait_for_space()
            value = await program(ctx)
        except BaseException as exc:
            undo_task_group_cancels(exc)
            stray = stray_cancel(exc)
            cancelled, failure = _cancelled_and_failure(exc)
            if failure is not None:
                exc = failure  # the program's own error, while it was being cancelled
            result: ExecutionResult[T] = ExecutionResult(
                execution_id,
                "failed" if stray else _failure_status(exc, run),
                None,
                _stray_cancel(exc) if stray else _error_of(exc, run),
                _ms(began),
            )
            _finish(emitter, run, result)
            if cancelled is not None:
                raise cancelled from None  # the cancellation goes on, without the error
            if not isinstance(exc, Exception) and not stray:
                raise
            # On asyncio a task group raising the program's own error leaves out the
            # caller's cancellation that came with it (trio's keeps it: above): it goes on.
            await cancelled_meanwhile(cancel_requests_before, "cancelled while the program failed")
            return result
        result = _returned(execution_id, value, run, began)
        _finish(emitter, run, result)
        return result
    finally:
        if tokens is not None:
            attribution_token, context_token, call_token = tokens
            _tool_call.reset(call_token)
            _current.reset(context_token)
            _attribution.reset(attribution_token)


_Tokens = tuple[Token[Attribution], Token[ExecutionContext | None], Token[str | None]]


def _enter(ctx: ExecutionContext, attribution: Attribution, *, own_task: bool) -> _Tokens | None:
    """Make ``ctx`` the current execution; the tokens that undo it, if anything must be undone.

    A detached root execution runs in a task of its own, whose context ends
    with it: it sets only what differs and keeps no tokens (10,000 paused
    executions would keep 30,000). Anywhere else the caller's context is
    restored afterwards, ``ctx.select_intent`` included.
    """
    if not own_task:
        return (_attribution.set(attribution), _current.set(ctx), _tool_call.set(None))
    if _attribution.get() is not attribution:
        _attribution.set(attribution)
    _current.set(ctx)
    if _tool_call.get() is not None:
        _tool_call.set(None)
    return None


def child_runner(runtime: Runtime, ids: ExecutionIds) -> Spawn:
    """The ``Spawn`` with which the executions of ``runtime`` run children (``ctx.spawn``);
    ``ids`` holds the children's ids while they run, and a while after."""

    async def spawn(
        program: Program[Any],
        run: RunState,
        attribution: Attribution,
        trigger: Trigger,
        input: JsonValue,
    ) -> ExecutionResult[Any]:
        execution_id = new_id()
        ids.opened(execution_id)
        try:
            return await run_execution(
                runtime,
                spawn,
                program,
                run,
                execution_id,
                attribution,
                trigger,
                owner=None,
                input=input,
            )
        finally:
            ids.closed(execution_id)

    return spawn


def root_attribution() -> Attribution:
    """The attribution of a root execution started here: the context's task, phase, intent."""
    current = _attribution.get()
    if (
        current.depth == 0
        and current.parent_execution_id is None
        and current.parent_tool_call_id is None
    ):
        return current
    return Attribution(task_id=current.task_id, phase=current.phase, intent_id=current.intent_id)


def _name_of(program: object) -> str:
    return (
        getattr(program, "__qualname__", None)
        or getattr(program, "__name__", None)
        or repr(program)
    )


def _returned(execution_id: str, value: T, run: RunState, began: float) -> ExecutionResult[T]:
    """The result of a program that returned: ``completed``, unless aborted or expired."""
    if run.aborted is None and not run.expired:
        return ExecutionResult(execution_id, "completed", value, None, _ms(began))
    reason = run.aborted or ExecutionExpiredError("the execution expired", execution_id=run.root_id)
    return ExecutionResult(
        execution_id, _failure_status(reason, run), None, _error_of(reason, run), _ms(began)
    )


def _finish(emitter: Emitter, run: RunState, result: ExecutionResult[Any]) -> None:
    """Record a root's result on its run, then emit ``ExecutionFinished``."""
    if result.execution_id == run.root_id:
        run.result = result
    emitter.execution_finished(
        status=result.status,
        result=result.value if result.status == "completed" else None,
        error=result.error,
        duration_ms=result.duration_ms,
    )


def _failure_status(exc: BaseException, run: RunState) -> ExecutionStatus:
    if not isinstance(exc, Exception):
        return "cancelled"
    if run.expired and run.aborted is None:
        return "expired"
    return "failed"


def _cancelled_and_failure(
    exc: BaseException,
) -> tuple[BaseExceptionGroup[BaseException] | None, Exception | None]:
    """A group holding both a cancellation and the program's own errors (on trio, a task
    of the program's whose clean-up raised while it was cancelled): the two apart, so the
    error is recorded and the cancellation alone goes on to its scope. Else ``None, None``.
    """
    if not isinstance(exc, BaseExceptionGroup) or isinstance(exc, Exception):
        return None, None
    cancelled, rest = exc.split(anyio.get_cancelled_exc_class())
    failure: BaseException | None = rest  # an ExceptionGroup when every error is an Exception
    if cancelled is None or not isinstance(failure, Exception):
        return None, None  # no cancellation, or something else that must pass (KeyboardInterrupt)
    return cancelled, failure


def _stray_cancel(exc: BaseException) -> ErrorInfo:
    return ErrorInfo(
        type=type(exc).__name__,
        message=f"the program raised {type(exc).__name__}, but nothing cancelled it "
        "(did it await a task it had cancelled, or raise a cancellation outside its scope?)",
        cause="defect",
    )


def _error_of(exc: BaseException, run: RunState) -> ErrorInfo:
    if (
        isinstance(exc, Exception)
        and run.aborted is not None
        and not isinstance(exc, HookAbortError)
    ):
        return error_info(run.aborted)  # a caught abort still decides the outcome
    return error_info(exc)


def _ms(began: float) -> float:
    return (perf_counter() - began) * 1000.0
