"""ExecutionContext: what a program holds — tool calls, questions, children.

Everything an execution emits is built here. The hot path is ``call``: two
events built without re-validation, one argument validation, no reflection.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from time import perf_counter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeVar, overload

import anyio
from pydantic import JsonValue

from ._errors import (
    ExecutionExpiredError,
    HookAbortError,
    ToolBlockedError,
    UnknownToolError,
)
from ._events import (
    SCHEMA_VERSION,
    Attribution,
    ErrorInfo,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionStarted,
    ToolCallFinished,
    ToolCallStarted,
    Trigger,
    _build,
    _now,
    new_id,
    snapshot,
)
from ._hooks import (
    _NO_HOOKS,
    HookAction,
    PostHookResult,
    PreHookResult,
    ToolUseContext,
    _HookPlan,
    _use_context,
)
from ._results import (
    Elicitation,
    ElicitationHandler,
    ExecutionResult,
    InteractionResponse,
    PausedExecution,
    error_info,
)
from ._scope import _attribution
from ._tools import Tool

if TYPE_CHECKING:
    from ._engine import ExecutionEngine
    from ._plugin import Plugin

__all__ = ["ExecutionContext", "Program", "current_context"]

logger: Final = logging.getLogger("onlooker")

T = TypeVar("T")
R = TypeVar("R")
Ext = TypeVar("Ext")

_current: ContextVar[ExecutionContext | None] = ContextVar("onlooker_execution", default=None)
_tool_call: ContextVar[str | None] = ContextVar("onlooker_tool_call", default=None)


class _Skipped(Exception):
    """A pre-hook said SKIP."""


class _Run:
    """State shared by a root execution and its children: mode, pause, abort."""

    __slots__ = (
        "aborted",
        "done",
        "expired",
        "mode",
        "on_elicitation",
        "outcome",
        "outcome_ready",
        "pause_lock",
        "pause_timeout",
        "pending",
        "result",
        "root_id",
        "scope",
        "state",
    )

    def __init__(
        self,
        root_id: str,
        *,
        mode: str,
        on_elicitation: ElicitationHandler | None = None,
        pause_timeout: float | None = None,
    ) -> None:
        self.root_id = root_id
        self.mode = mode
        self.on_elicitation = on_elicitation
        self.pause_timeout = pause_timeout
        self.aborted: HookAbortError | None = None
        self.expired = False
        # pause/resume (mode == "paused")
        self.state = "running"  # running -> paused -> answering -> ... -> finished
        self.pending: _PendingAnswer | None = None
        self.outcome: PausedExecution | ExecutionResult[Any] | None = None
        self.outcome_ready: anyio.Event | None = None
        self.pause_lock: anyio.Lock | None = None
        self.scope: anyio.CancelScope | None = None
        self.done: anyio.Event | None = None
        self.result: ExecutionResult[Any] | None = None

    def deliver(self, outcome: PausedExecution | ExecutionResult[Any]) -> None:
        self.outcome = outcome
        if self.outcome_ready is not None:
            self.outcome_ready.set()

    async def next_outcome(self) -> PausedExecution | ExecutionResult[Any]:
        assert self.outcome_ready is not None
        await self.outcome_ready.wait()
        assert self.outcome is not None
        return self.outcome

    async def pause(
        self, interaction_id: str, message: str, schema: dict[str, JsonValue] | None, asking: str
    ) -> InteractionResponse:
        if self.pause_lock is None:
            self.pause_lock = anyio.Lock()
        async with self.pause_lock:  # concurrent questions are asked one at a time
            if self.expired:  # a question that waited its turn behind one that expired
                raise ExecutionExpiredError(
                    "this execution has expired; it cannot ask again", execution_id=self.root_id
                )
            pending = _PendingAnswer(interaction_id)
            self.pending = pending
            self.state = "paused"
            self.deliver(PausedExecution(self.root_id, interaction_id, message, schema, asking))
            try:
                with anyio.move_on_after(self.pause_timeout):
                    await pending.answered.wait()
            finally:
                if self.pending is pending:
                    self.pending = None
                if self.state == "paused":
                    self.state = "running"
            if pending.response is None:
                self.expired = True
                raise ExecutionExpiredError(
                    f"nobody answered within the pause timeout of {self.pause_timeout}s",
                    execution_id=self.root_id,
                )
            return pending.response


class _PendingAnswer:
    __slots__ = ("answered", "interaction_id", "response")

    def __init__(self, interaction_id: str) -> None:
        self.interaction_id = interaction_id
        self.answered = anyio.Event()
        self.response: InteractionResponse | None = None


Program = Callable[["ExecutionContext"], Awaitable[T]]
"""``async def program(ctx: ExecutionContext) -> T``."""


class ExecutionContext:
    """A running execution, as its program sees it.

    ``await ctx.call("tool", **args)`` calls a tool, ``await ctx.elicit(...)``
    asks a person, ``await ctx.spawn(child)`` runs a child execution.
    """

    __slots__ = (
        "_engine",
        "_run",
        "_seq",
        "attribution",
        "execution_id",
        "input",
        "program",
        "trigger",
    )

    def __init__(
        self,
        engine: ExecutionEngine,
        run: _Run,
        execution_id: str,
        attribution: Attribution,
        program: str,
        trigger: Trigger,
        input: JsonValue,
    ) -> None:
        self._engine = engine
        self._run = run
        self._seq = 0
        self.execution_id = execution_id
        self.attribution = attribution
        """This execution's attribution at its start (parents, depth)."""
        self.program = program
        self.trigger = trigger
        self.input = input
        """The ``input`` given to ``execute`` (or ``spawn``)."""

    @property
    def depth(self) -> int:
        """0 for a root execution, one more per level of ``spawn``."""
        return self.attribution.depth

    @property
    def intent_id(self) -> str | None:
        """The intent selected with :meth:`select_intent`, if any."""
        return _attribution.get().intent_id

    # -- emitting ---------------------------------------------------------------------

    def _emit(self, cls: type[Any], values: dict[str, Any]) -> None:
        seq = self._seq
        self._seq = seq + 1
        # Envelope first, in the models' field order: pydantic serializes ``__dict__``
        # in its order, and an event must dump to the same JSON as its parsed copy.
        values = {
            "event_id": new_id(),
            "execution_id": self.execution_id,
            "seq": seq,
            "at": _now(),
            "attribution": _attribution.get(),
            "schema_version": SCHEMA_VERSION,
            **values,
        }
        self._engine._publish(_build(cls, values))

    def _emit_tool_finished(
        self,
        call_id: str,
        name: str,
        status: str,
        result: Any,
        error: ErrorInfo | None,
        started: float,
        metadata: dict[str, Any] | None,
    ) -> None:
        self._emit(
            ToolCallFinished,
            {
                "kind": "ToolCallFinished",
                "tool_call_id": call_id,
                "tool": name,
                "status": status,
                "result": result,
                "error": error,
                "duration_ms": (perf_counter() - started) * 1000.0,
                "metadata": snapshot(metadata) if metadata else {},
            },
        )

    # -- tools ------------------------------------------------------------------------

    @overload
    async def call(self, tool: Tool[..., Awaitable[R]], /, **args: Any) -> R: ...
    @overload
    async def call(self, tool: Tool[..., R], /, **args: Any) -> R: ...
    @overload
    async def call(self, tool: str, /, **args: Any) -> Any: ...

    async def call(self, tool: str | Tool[..., Any], /, **args: Any) -> Any:
        """Call a tool by name (or by its ``Tool``) with keyword arguments; returns its result.

        Exactly one ``ToolCallStarted`` and one ``ToolCallFinished`` are
        emitted, whatever happens. Raises ``UnknownToolError``,
        ``ToolInputError``, ``ToolBlockedError`` or ``HookAbortError``; a tool's
        own exception reaches the caller unchanged.
        """
        name = tool if isinstance(tool, str) else tool.name
        engine = self._engine
        call_id = new_id()
        started_at = perf_counter()
        shown: Mapping[str, Any] = args
        metadata: dict[str, Any] = {}
        started = False
        in_tool = False  # a block or abort raised by the tool itself is a failure, not a verdict
        try:
            spec = engine._tools._tools.get(name)
            if spec is None:
                raise UnknownToolError(
                    f"unknown tool {name!r}; known tools: {', '.join(sorted(engine._tools)) or 'none'}",
                    tool=name,
                )
            if self._run.aborted is not None:  # ABORT ended the whole execution
                raise HookAbortError(
                    f"tool {name!r} refused: the execution was aborted ({self._run.aborted})",
                    tool=name,
                    reason=self._run.aborted.reason,
                )
            validated = spec.validate_args(args)
            shown = validated
            plan = engine._hook_plan(name, _attribution.get().phase) if engine._hooks else _NO_HOOKS
            if plan.pre:
                validated, use = await self._run_pre_hooks(plan, spec, call_id, validated, metadata)
                shown = validated
            else:
                use = None
            started = True
            self._emit(
                ToolCallStarted,
                {
                    "kind": "ToolCallStarted",
                    "tool_call_id": call_id,
                    "tool": name,
                    "args": snapshot(validated),
                },
            )
            if engine.bus._full:
                await engine.bus.wait_for_space()
            token = _tool_call.set(call_id)
            in_tool = True
            try:
                if spec.is_async:
                    result = await spec.fn(**validated)
                else:
                    result = await spec.invoke(validated)
            finally:
                _tool_call.reset(token)
            in_tool = False
            if plan.post:
                result = await self._run_post_hooks(
                    plan, spec, call_id, validated, result, metadata, use
                )
        except _Skipped:
            if not started:
                self._emit_started(call_id, name, shown)
            self._emit_tool_finished(call_id, name, "skipped", None, None, started_at, metadata)
            return None
        except BaseException as exc:
            if not started:
                self._emit_started(call_id, name, shown)
            if not isinstance(exc, Exception):
                status = "cancelled"
            elif isinstance(exc, ToolBlockedError | HookAbortError) and not in_tool:
                status = "blocked"
                if isinstance(exc, HookAbortError):
                    self._run.aborted = exc
            else:
                status = "failed"
            self._emit_tool_finished(
                call_id, name, status, None, error_info(exc), started_at, metadata
            )
            raise
        self._emit_tool_finished(
            call_id, name, "completed", snapshot(result), None, started_at, metadata
        )
        return result

    def _emit_started(self, call_id: str, name: str, args: Mapping[str, Any]) -> None:
        self._emit(
            ToolCallStarted,
            {
                "kind": "ToolCallStarted",
                "tool_call_id": call_id,
                "tool": name,
                "args": snapshot(dict(args)),
            },
        )

    async def _run_pre_hooks(
        self,
        plan: _HookPlan,
        spec: Tool[..., Any],
        call_id: str,
        args: dict[str, Any],
        metadata: dict[str, Any],
    ) -> tuple[dict[str, Any], ToolUseContext]:
        """Run the pre-hooks in order; the input they leave, and the context they saw."""
        use = _use_context(
            spec.name,
            MappingProxyType(args),
            call_id,
            _attribution.get(),
            self.execution_id,
            spec.mutating,
        )
        for hook, timeout, name, is_async in plan.pre_steps:
            try:
                if is_async:
                    decision = await _await_within(hook(use), timeout)
                else:
                    began = perf_counter()
                    decision = hook(use)
                    if (
                        decision is not None
                        and type(decision) is not PreHookResult
                        and inspect.isawaitable(decision)
                    ):
                        decision = await _await_within(decision, timeout - (perf_counter() - began))
                    if perf_counter() - began > timeout:
                        raise TimeoutError(f"hook took longer than {timeout}s")
            except Exception as exc:  # fail-closed: a broken governance hook blocks
                problem = "timed out" if isinstance(exc, TimeoutError) else f"failed: {exc!r}"
                raise ToolBlockedError(
                    f"tool {spec.name!r} blocked: pre-hook {name!r} {problem}",
                    tool=spec.name,
                    reason=f"pre-hook {name!r} {problem}",
                    hook=name,
                ) from exc
            if decision is None:
                continue
            if not isinstance(decision, PreHookResult):
                raise ToolBlockedError(
                    f"tool {spec.name!r} blocked: pre-hook {name!r} returned {type(decision).__name__}, "
                    "not PreHookResult",
                    tool=spec.name,
                    hook=name,
                )
            if decision.metadata:
                metadata.update(decision.metadata)
            action = decision.action
            if action is HookAction.CONTINUE:
                if decision.modified_input is not None:
                    args = spec.validate_args(decision.modified_input, hook=name)
                    use = _use_context(
                        spec.name,
                        MappingProxyType(args),
                        call_id,
                        use.attribution,
                        self.execution_id,
                        spec.mutating,
                    )
            elif action is HookAction.SKIP:
                raise _Skipped
            elif action is HookAction.BLOCK:
                reason = decision.reason or "no reason given"
                raise ToolBlockedError(
                    f"tool {spec.name!r} blocked by {name}: {reason}",
                    tool=spec.name,
                    reason=reason,
                    hook=name,
                )
            else:
                reason = decision.reason or "no reason given"
                raise HookAbortError(
                    f"execution aborted by pre-hook {name} on tool {spec.name!r}: {reason}",
                    tool=spec.name,
                    reason=reason,
                )
        return args, use

    async def _run_post_hooks(
        self,
        plan: _HookPlan,
        spec: Tool[..., Any],
        call_id: str,
        args: dict[str, Any],
        output: Any,
        metadata: dict[str, Any],
        use: ToolUseContext | None,
    ) -> Any:
        """Run the post-hooks in order (fail-safe); the output they leave."""
        if use is None:  # no pre-hooks built one
            use = _use_context(
                spec.name,
                MappingProxyType(args),
                call_id,
                _attribution.get(),
                self.execution_id,
                spec.mutating,
            )
        for hook, timeout, name, is_async in plan.post_steps:
            try:
                if is_async:
                    decision = await _await_within(hook(use, output), timeout)
                else:
                    began = perf_counter()
                    decision = hook(use, output)
                    if (
                        decision is not None
                        and type(decision) is not PostHookResult
                        and inspect.isawaitable(decision)
                    ):
                        decision = await _await_within(decision, timeout - (perf_counter() - began))
                    if perf_counter() - began > timeout:
                        raise TimeoutError(f"hook took longer than {timeout}s")
            except Exception as exc:  # fail-safe: observability never breaks the call
                logger.error(
                    "post-hook %r failed on tool %r (execution %s); output passed unchanged",
                    name,
                    spec.name,
                    self.execution_id,
                    exc_info=exc,
                )
                continue
            if decision is None:
                continue
            if not isinstance(decision, PostHookResult):
                logger.error(
                    "post-hook %r returned %r, not PostHookResult; ignored", name, decision
                )
                continue
            if decision.metadata:
                metadata.update(decision.metadata)
            if decision.action is HookAction.ABORT:
                reason = decision.reason or "no reason given"
                raise HookAbortError(
                    f"execution aborted by post-hook {name} on tool {spec.name!r}: {reason}",
                    tool=spec.name,
                    reason=reason,
                )
            if decision.modified_output is not None:
                output = decision.modified_output
        return output

    # -- questions ----------------------------------------------------------------------

    async def elicit(
        self, message: str, schema: dict[str, Any] | None = None
    ) -> InteractionResponse:
        """Ask a person ``message`` (with an optional JSON Schema for the answer).

        During ``execute`` the ``on_elicitation`` handler answers (declined
        when there is none); during ``execute_with_pause`` the execution
        pauses until ``engine.resume`` answers or ``pause_timeout`` passes
        (then ``ExecutionExpiredError`` is raised here and the execution ends
        ``expired``).
        """
        run = self._run
        interaction_id = new_id()
        requested = snapshot(schema) if schema is not None else None
        self._emit(
            InteractionStarted,
            {
                "kind": "InteractionStarted",
                "interaction_id": interaction_id,
                "message": message,
                "requested_schema": requested,
                "mode": run.mode,
            },
        )
        try:
            if run.expired:
                raise ExecutionExpiredError(
                    "this execution has expired; it cannot ask again", execution_id=run.root_id
                )
            if run.mode == "paused":
                response = await run.pause(interaction_id, message, requested, self.execution_id)  # type: ignore[arg-type]
            elif run.on_elicitation is None:
                response = InteractionResponse.decline()
            else:
                response = await run.on_elicitation(
                    Elicitation(self.execution_id, interaction_id, message, requested)  # type: ignore[arg-type]
                )
                if not isinstance(response, InteractionResponse):
                    raise TypeError(
                        f"on_elicitation must return an InteractionResponse, not {type(response).__name__}"
                    )
        except BaseException as exc:
            if isinstance(exc, ExecutionExpiredError):
                status = "expired"
            elif isinstance(exc, Exception):
                status = "failed"
            else:
                status = "cancelled"
            self._emit(
                InteractionResolved,
                {
                    "kind": "InteractionResolved",
                    "interaction_id": interaction_id,
                    "status": status,
                    "response": None,
                    "error": error_info(exc),
                },
            )
            raise
        self._emit(
            InteractionResolved,
            {
                "kind": "InteractionResolved",
                "interaction_id": interaction_id,
                "status": response.status,
                "response": snapshot(response.content),
                "error": None,
            },
        )
        return response

    # -- children and plugins ---------------------------------------------------------

    async def spawn(
        self,
        program: Program[T],
        *,
        task_id: str | None = None,
        phase: str | None = None,
        input: JsonValue = None,
    ) -> ExecutionResult[T]:
        """Run ``program`` as a child execution and return its result.

        The child records this execution as its parent (and the tool call
        in progress, when spawned from inside a tool) at ``depth + 1``.
        A failing child is a result, not an exception; cancellation passes.
        """
        current = _attribution.get()
        attribution = Attribution(
            task_id=task_id if task_id is not None else current.task_id,
            phase=phase if phase is not None else current.phase,
            parent_execution_id=self.execution_id,
            parent_tool_call_id=_tool_call.get(),
            depth=self.attribution.depth + 1,
            intent_id=current.intent_id,
        )
        trigger = Trigger(kind="spawn", metadata={"parent_execution_id": self.execution_id})
        return await self._engine._run_execution(
            program, self._run, new_id(), attribution, trigger, owner=None, input=input
        )

    def extension(self, plugin: Plugin[Ext]) -> Ext:
        """The extension of ``plugin`` in this engine, typed."""
        return self._engine.extension(plugin)

    def select_intent(self, intent_id: str) -> None:
        """Declare the active intent; its id rides every later event's attribution.

        ``policies.require_intent()`` blocks mutating tools until one is selected.
        """
        if not isinstance(intent_id, str) or not intent_id:
            raise ValueError("an intent id must be a non-empty string")
        _attribution.set(_attribution.get().model_copy(update={"intent_id": intent_id}))


async def _await_within(awaitable: Awaitable[Any], timeout: float) -> Any:  # noqa: ASYNC109  # per-matcher timeout
    with anyio.fail_after(max(timeout, 0.0)):
        return await awaitable


def current_context() -> ExecutionContext:
    """The execution running in the current task (for tools that spawn children).

    Raises ``RuntimeError`` outside an execution.
    """
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError("no onlooker execution is running in this context")
    return ctx


def _execution_started(ctx: ExecutionContext, owner: str | None) -> None:
    ctx._emit(
        ExecutionStarted,
        {
            "kind": "ExecutionStarted",
            "program": ctx.program,
            "trigger": ctx.trigger,
            "owner": owner,
            "input": snapshot(ctx.input),
        },
    )


def _execution_finished(ctx: ExecutionContext, result: ExecutionResult[Any]) -> None:
    ctx._emit(
        ExecutionFinished,
        {
            "kind": "ExecutionFinished",
            "status": result.status,
            "result": snapshot(result.value) if result.status == "completed" else None,
            "error": result.error,
            "duration_ms": result.duration_ms,
        },
    )
