"""Tracked executions: the events, hooks and guarantees of ``ctx.call`` for tools run elsewhere.

A framework (an agent SDK, an MCP server) runs the tools; its adapter tells
onlooker what happens through a :class:`TrackedExecution`, and enforces the
verdicts onlooker's pre-hooks return. Tool calls go through the same
lifecycle as ``ctx.call`` (``_lifecycle``); events through the same emitter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from time import perf_counter
from types import TracebackType
from typing import Any, Final, Literal, final, get_args

from pydantic import JsonValue

from ._emitter import Emitter
from ._errors import HookAbortError, ToolInputError, TrackingError
from ._events import (
    Attribution,
    ErrorCause,
    ErrorInfo,
    ExecutionStatus,
    InteractionStatus,
    ToolCallStatus,
    Trigger,
    as_trigger,
    child_attribution,
    new_id,
    snapshot,
    snapshot_object,
    spawn_trigger,
)
from ._hooks import HookAction
from ._lifecycle import (
    CANCELLED,
    CallState,
    Runtime,
    fail_call,
    finish_call,
    open_call,
    settle_call,
)
from ._results import error_info
from ._scope import _Scoped

__all__ = ["TrackedExecution", "TrackedToolCall"]

_EXECUTION_STATUSES: Final = frozenset(get_args(ExecutionStatus))
_CAUSES: Final[dict[str, ErrorCause]] = {
    "failed": "failure",
    "cancelled": "interrupt",
    "expired": "interrupt",
}
_INTERACTION_STATUSES: Final = frozenset(get_args(InteractionStatus))

_State = Literal["new", "running", "finished"]
_Hook = Callable[["TrackedExecution"], None]


class _Tree:
    """What a tracked root and its children share: an ABORT refuses every later call."""

    __slots__ = ("aborted",)

    def __init__(self) -> None:
        self.aborted: HookAbortError | None = None


@final
class TrackedToolCall:
    """One tool call of a tracked execution, as ``tool_started`` returned it.

    ``allowed`` says whether onlooker's pre-hooks let it run (``action`` is
    ``CONTINUE``); then the adapter hands ``input`` (after every
    ``modified_input``) to its framework and later reports ``finished`` or
    ``failed``. A refused call (``reason`` says why) is already recorded as
    ``skipped`` or ``blocked``; the adapter refuses it in its framework.
    """

    __slots__ = ("_closing", "_run", "_state")

    def __init__(self, run: TrackedExecution, state: CallState) -> None:
        self._run = run
        self._state = state
        self._closing = False

    def __repr__(self) -> str:
        status = self._state.status or "open"
        return f"<TrackedToolCall {self.tool!r} {self.tool_call_id!r} {status}>"

    @property
    def tool_call_id(self) -> str:
        """The call's id: the framework's own when it gave one."""
        return self._state.tool_call_id

    @property
    def tool(self) -> str:
        """The tool's name."""
        return self._state.tool

    @property
    def execution_id(self) -> str:
        """The tracked execution this call belongs to."""
        return self._run.execution_id

    @property
    def action(self) -> HookAction:
        """The pre-hooks' verdict: ``CONTINUE``, ``SKIP``, ``BLOCK`` or ``ABORT``."""
        return self._state.action

    @property
    def allowed(self) -> bool:
        """Whether the framework may run the call (``action is CONTINUE``)."""
        return self._state.action is HookAction.CONTINUE

    @property
    def input(self) -> dict[str, Any]:
        """The arguments after every pre-hook's ``modified_input`` (hand these to the tool)."""
        return dict(self._state.input)

    @property
    def reason(self) -> str | None:
        """Why the call was refused (``None`` when it is allowed)."""
        return self._state.reason

    @property
    def status(self) -> ToolCallStatus | None:
        """The recorded final status, or ``None`` while the call is open."""
        return self._state.status

    @property
    def done(self) -> bool:
        """Whether the call is closed (finished, failed, refused or cancelled)."""
        return self._state.status is not None

    async def finished(self, output: Any, *, duration_ms: float | None = None) -> Any:
        """Record the call ``completed``; returns the output the post-hooks left.

        Hand the returned output back to the framework: a post-hook may have
        rewritten it. ``duration_ms`` (the framework's own measure) wins over
        onlooker's clock. A post-hook ``ABORT`` records the call ``blocked``
        and raises ``HookAbortError``.
        """
        self._claim(duration_ms)
        return await finish_call(self._state, output, duration_ms=duration_ms)

    async def failed(
        self, error: BaseException | str | ErrorInfo, *, duration_ms: float | None = None
    ) -> None:
        """Record the call ``failed``: an exception, a message, or an ``ErrorInfo``.

        A cancellation (a ``BaseException`` that is not an ``Exception``, or an
        ``ErrorInfo`` with ``cause="interrupt"``) records it ``cancelled``.
        """
        info = _as_error_info(error, "ToolError")
        self._claim(duration_ms)
        fail_call(self._state, info, duration_ms=duration_ms)

    def _claim(self, duration_ms: float | None) -> None:
        if self._closing or self._state.status is not None:
            status = self._state.status or "being finished"
            raise TrackingError(
                f"tool call {self.tool_call_id!r} ({self.tool!r}) of execution "
                f"{self.execution_id!r} is already closed ({status}); nothing was recorded",
                execution_id=self.execution_id,
                tool_call_id=self.tool_call_id,
            )
        if duration_ms is not None and (
            isinstance(duration_ms, bool)
            or not isinstance(duration_ms, int | float)
            or not duration_ms >= 0
        ):
            raise ValueError(f"duration_ms must be a non-negative number, not {duration_ms!r}")
        self._closing = True

    def _cancel(self) -> None:
        if self._state.status is None:
            self._closing = True
            fail_call(self._state, CANCELLED)


@final
class TrackedExecution:
    """An execution whose tools another framework runs; onlooker records and governs it.

    ``async with run:`` emits ``ExecutionStarted`` and, on leaving,
    ``ExecutionFinished`` (``completed``; ``failed`` when the block raises;
    ``cancelled`` on cancellation). Callback-style adapters call
    :meth:`start` and :meth:`finish` instead. Finishing closes whatever is
    still open (calls, questions, children) as ``cancelled``.
    """

    __slots__ = (
        "_began",
        "_calls",
        "_children",
        "_emitter",
        "_input",
        "_interactions",
        "_on_close",
        "_on_start",
        "_opening",
        "_owner",
        "_parent",
        "_runtime",
        "_state",
        "_status",
        "_tree",
        "_trigger",
        "program",
    )

    def __init__(
        self,
        runtime: Runtime,
        program: str,
        *,
        trigger: Trigger,
        input: JsonValue,
        owner: str | None,
        execution_id: str,
        attribution: Attribution,
        scope: _Scoped,
        tree: _Tree | None = None,
        parent: TrackedExecution | None = None,
        on_start: _Hook | None = None,
        on_close: _Hook | None = None,
    ) -> None:
        self._runtime = runtime
        self.program = program
        self._trigger = trigger
        self._input = input
        self._owner = owner
        self._emitter = Emitter(
            runtime.bus, execution_id, base_attribution=attribution, scope=scope
        )
        self._tree = tree if tree is not None else _Tree()
        self._parent = parent
        self._on_start = on_start
        self._on_close = on_close
        self._state: _State = "new"
        self._status: ExecutionStatus | None = None
        self._began = 0.0
        self._calls: dict[str, TrackedToolCall] = {}
        self._opening: set[str] = set()
        self._interactions: dict[str, bool] = {}  # id -> still open
        self._children: list[TrackedExecution] = []

    def __repr__(self) -> str:
        return f"<TrackedExecution {self.program!r} {self.execution_id!r} {self._state}>"

    @property
    def execution_id(self) -> str:
        """This execution's id (known before it starts)."""
        return self._emitter.execution_id

    @property
    def parent(self) -> TrackedExecution | None:
        """The execution this one is a child of (``None`` for a root)."""
        return self._parent

    @property
    def attribution(self) -> Attribution:
        """The attribution its events carry now (parents, depth, task, phase, intent)."""
        return self._emitter.attribution()

    @property
    def started(self) -> bool:
        """Whether ``ExecutionStarted`` was emitted."""
        return self._state != "new"

    @property
    def finished(self) -> bool:
        """Whether ``ExecutionFinished`` was emitted."""
        return self._state == "finished"

    @property
    def status(self) -> ExecutionStatus | None:
        """The final status, once finished."""
        return self._status

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Emit ``ExecutionStarted`` (for callback-style frameworks; ``async with`` does it)."""
        self._start()

    def _start(self) -> None:
        if self._state != "new":
            raise TrackingError(
                f"tracked execution {self.execution_id!r} is already {self._state}",
                execution_id=self.execution_id,
            )
        parent = self._parent
        if parent is not None and parent._state != "running":
            raise TrackingError(
                f"cannot start child {self.execution_id!r}: its parent "
                f"{parent.execution_id!r} is {parent._state}",
                execution_id=self.execution_id,
            )
        if self._on_start is not None:
            self._on_start(
                self
            )  # the engine refuses a taken id or a closed engine: nothing emitted
        self._state = "running"
        self._began = perf_counter()
        self._emitter.execution_started(
            program=self.program, trigger=self._trigger, owner=self._owner, input=self._input
        )

    async def finish(
        self,
        status: ExecutionStatus = "completed",
        *,
        result: object = None,
        error: BaseException | str | ErrorInfo | None = None,
    ) -> None:
        """Emit ``ExecutionFinished``; finishing twice is harmless.

        Calls, questions and children still open are closed ``cancelled``
        first. After a hook's ``ABORT`` a ``completed`` run finishes
        ``failed`` with the abort as its error, as a native one does.
        """
        self.finish_nowait(status, result=result, error=error)

    def finish_nowait(
        self,
        status: ExecutionStatus = "completed",
        *,
        result: object = None,
        error: BaseException | str | ErrorInfo | None = None,
    ) -> None:
        """:meth:`finish` for synchronous callbacks (it never waits for anything)."""
        if status not in _EXECUTION_STATUSES:
            raise ValueError(
                f"status must be one of {', '.join(sorted(_EXECUTION_STATUSES))}, not {status!r}"
            )
        if status == "completed" and error is not None:
            raise ValueError("a completed execution has no error: finish it 'failed' instead")
        if self._state == "finished":
            return
        if self._state == "new":  # a run that ends before it began is still one whole record
            try:
                self._start()
            except TrackingError:  # the engine has closed: there is nothing to record it in
                self._state, self._status = "finished", status
                return
        for child in self._children:
            if child._state == "running":  # a child never started was never open
                child.finish_nowait("cancelled", error=CANCELLED)
        for call in self._calls.values():
            call._cancel()
        for interaction_id, still_open in self._interactions.items():
            if still_open:
                self._interactions[interaction_id] = False
                self._emitter.interaction_resolved(
                    interaction_id=interaction_id,
                    status="cancelled",
                    response=None,
                    error=CANCELLED,
                )
        info = None if error is None else _as_error_info(error, "Error")
        if info is None and status != "completed":
            info = ErrorInfo(type="Error", message=f"the execution {status}", cause=_CAUSES[status])
        aborted = self._tree.aborted
        if aborted is not None and status == "completed":
            status, info = "failed", error_info(aborted)
        self._state = "finished"
        self._status = status
        self._emitter.execution_finished(
            status=status,
            result=snapshot(result) if status == "completed" else None,
            error=info,
            duration_ms=(perf_counter() - self._began) * 1000.0,
        )
        if self._on_close is not None:
            self._on_close(self)

    async def __aenter__(self) -> TrackedExecution:
        self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.finish_nowait("completed")
        elif isinstance(exc, Exception):
            self.finish_nowait("failed", error=exc)
        else:
            self.finish_nowait("cancelled", error=exc)

    # -- tool calls -------------------------------------------------------------------

    async def tool_started(
        self,
        tool: str,
        args: Mapping[str, Any],
        *,
        tool_call_id: str | None = None,
        mutating: bool | None = None,
    ) -> TrackedToolCall:
        """Run the pre-hooks on a call the framework is about to make; record its start.

        Returns the verdict as a :class:`TrackedToolCall`. ``mutating``
        overrides the tool's declaration (``engine.declare_tool``) for
        ``require_intent()``. ``args`` must be a mapping with string keys;
        values that are not JSON are snapshotted as ``ctx.call`` does.
        """
        self._require_running("record a tool call", tool_call_id=tool_call_id)
        if not isinstance(tool, str) or not tool:
            raise TypeError(f"tool must be a non-empty string, not {tool!r}")
        arguments = _arguments(tool, args)
        if tool_call_id is None:
            tool_call_id = new_id()
        elif not isinstance(tool_call_id, str) or not tool_call_id:
            raise TypeError(f"tool_call_id must be a non-empty string, not {tool_call_id!r}")
        elif tool_call_id in self._calls or tool_call_id in self._opening:
            raise TrackingError(
                f"tool call id {tool_call_id!r} is already used in execution "
                f"{self.execution_id!r}; nothing was recorded",
                execution_id=self.execution_id,
                tool_call_id=tool_call_id,
            )
        if mutating is None:
            mutating = self._runtime.tools.is_mutating(tool)
        elif not isinstance(mutating, bool):
            raise TypeError(f"mutating must be True, False or None, not {mutating!r}")
        self._opening.add(tool_call_id)  # reserves the id while the pre-hooks run
        state: CallState | None = None
        try:
            state = open_call(
                self._emitter,
                self._tree,
                self._runtime,
                tool,
                arguments,
                tool_call_id=tool_call_id,
                mutating=mutating,
                check=_same,
            )
            call = TrackedToolCall(self, state)
            if state.pending:
                await settle_call(
                    state, self._runtime, lambda changed, hook: _arguments(tool, changed, hook)
                )
        except BaseException:
            if state is not None and state.started:  # recorded (and closed): its id stays taken
                self._calls[tool_call_id] = TrackedToolCall(self, state)
            raise
        finally:
            self._opening.discard(tool_call_id)
        self._calls[tool_call_id] = call
        if self._state == "finished" and state.status is None:
            # The run ended while the pre-hooks ran: nothing more is recorded for it.
            state.action, state.reason = HookAction.BLOCK, "the execution finished"
            call._cancel()
        return call

    def call(self, tool_call_id: str) -> TrackedToolCall:
        """The call of this execution with this id (for callbacks that carry only ids)."""
        call = self._calls.get(tool_call_id)
        if call is None:
            raise TrackingError(
                f"execution {self.execution_id!r} has no tool call {tool_call_id!r}",
                execution_id=self.execution_id,
                tool_call_id=tool_call_id,
            )
        return call

    def select_intent(self, intent_id: str) -> None:
        """Declare the active intent; it rides every later event (as ``ctx.select_intent``)."""
        if not isinstance(intent_id, str) or not intent_id:
            raise ValueError("an intent id must be a non-empty string")
        self._emitter.select_intent(intent_id)

    # -- questions --------------------------------------------------------------------

    async def interaction_started(
        self,
        message: str,
        *,
        schema: Mapping[str, Any] | None = None,
        interaction_id: str | None = None,
    ) -> str:
        """Record a question to a person (a permission prompt, ...); returns its id."""
        self._require_running("record a question", interaction_id=interaction_id)
        if not isinstance(message, str):
            raise TypeError(f"message must be a string, not {message!r}")
        if schema is not None and not isinstance(schema, Mapping):
            raise TypeError(f"schema must be a JSON Schema object, not {schema!r}")
        if interaction_id is None:
            interaction_id = new_id()
        elif not isinstance(interaction_id, str) or not interaction_id:
            raise TypeError(f"interaction_id must be a non-empty string, not {interaction_id!r}")
        elif interaction_id in self._interactions:
            raise TrackingError(
                f"interaction id {interaction_id!r} is already used in execution "
                f"{self.execution_id!r}",
                execution_id=self.execution_id,
                interaction_id=interaction_id,
            )
        self._interactions[interaction_id] = True
        self._emitter.interaction_started(
            interaction_id=interaction_id,
            message=message,
            requested_schema=None if schema is None else snapshot_object(schema),
            mode="inline",
        )
        return interaction_id

    async def interaction_resolved(
        self,
        interaction_id: str,
        status: InteractionStatus,
        response: object = None,
    ) -> None:
        """Close a question: ``accepted``, ``declined``, ``cancelled``, ``expired`` or ``failed``."""
        if status not in _INTERACTION_STATUSES:
            raise ValueError(
                f"status must be one of {', '.join(sorted(_INTERACTION_STATUSES))}, not {status!r}"
            )
        still_open = self._interactions.get(interaction_id)
        if still_open is not None and self._state == "finished":
            self._require_running("resolve a question", interaction_id=interaction_id)
        if still_open is None:
            raise TrackingError(
                f"execution {self.execution_id!r} has no interaction {interaction_id!r}",
                execution_id=self.execution_id,
                interaction_id=interaction_id,
            )
        if not still_open:
            raise TrackingError(
                f"interaction {interaction_id!r} of execution {self.execution_id!r} "
                "is already resolved",
                execution_id=self.execution_id,
                interaction_id=interaction_id,
            )
        self._interactions[interaction_id] = False
        self._emitter.interaction_resolved(
            interaction_id=interaction_id, status=status, response=snapshot(response), error=None
        )

    # -- children ---------------------------------------------------------------------

    def child(
        self,
        program: str,
        *,
        parent_tool_call_id: str | None = None,
        trigger: Trigger | str | None = None,
        input: JsonValue = None,
        owner: str | None = None,
        execution_id: str | None = None,
        task_id: str | None = None,
        phase: str | None = None,
    ) -> TrackedExecution:
        """Track a child execution (a sub-agent): this one's child, at ``depth + 1``.

        ``parent_tool_call_id`` links it to the call that started it (an
        agent used as a tool, Claude's Task tool). Start it (or ``async
        with`` it) while this execution runs; finishing this execution
        finishes the child ``cancelled`` if it is still open.
        """
        if parent_tool_call_id is not None and (
            not isinstance(parent_tool_call_id, str) or not parent_tool_call_id
        ):
            raise TypeError(
                f"parent_tool_call_id must be a non-empty string, not {parent_tool_call_id!r}"
            )
        current = self._emitter.attribution()
        attribution = child_attribution(
            current,
            parent_execution_id=self.execution_id,
            parent_tool_call_id=parent_tool_call_id,
            depth=current.depth + 1,
            task_id=task_id,
            phase=phase,
        )
        child = TrackedExecution(
            self._runtime,
            _program_name(program),
            trigger=spawn_trigger(self.execution_id) if trigger is None else as_trigger(trigger),
            input=snapshot(input),
            owner=owner,
            execution_id=_execution_id(execution_id),
            attribution=attribution,
            scope=self._emitter.scope,
            tree=self._tree,
            parent=self,
            on_start=self._on_start,
            on_close=self._on_close,
        )
        self._children.append(child)
        return child

    def _require_running(
        self,
        what: str,
        *,
        tool_call_id: str | None = None,
        interaction_id: str | None = None,
    ) -> None:
        if self._state != "running":
            problem = "has not started" if self._state == "new" else "has finished"
            raise TrackingError(
                f"cannot {what}: tracked execution {self.execution_id!r} {problem}",
                execution_id=self.execution_id,
                tool_call_id=tool_call_id,
                interaction_id=interaction_id,
            )


def _same(args: Mapping[str, Any]) -> dict[str, Any]:
    return args  # type: ignore[return-value]  # _arguments already made it a dict


def _arguments(tool: str, args: object, hook: str | None = None) -> dict[str, Any]:
    if not isinstance(args, Mapping):
        source = f" (input modified by hook {hook!r})" if hook else ""
        raise ToolInputError(
            f"arguments of tool {tool!r}{source} must be a JSON object (a mapping), "
            f"not {type(args).__name__}",
            tool=tool,
            hook=hook,
        )
    for key in args:
        if not isinstance(key, str):
            raise ToolInputError(
                f"arguments of tool {tool!r} must have string keys, not {key!r}", tool=tool
            )
    return dict(args)


def _as_error_info(error: BaseException | str | ErrorInfo, type_name: str) -> ErrorInfo:
    if isinstance(error, ErrorInfo):
        return error
    if isinstance(error, BaseException):
        return error_info(error)
    if not isinstance(error, str):
        raise TypeError(f"error must be an exception, a message or an ErrorInfo, not {error!r}")
    return ErrorInfo(type=type_name, message=error or "failed", cause="failure")


def _program_name(program: object) -> str:
    if not isinstance(program, str) or not program:
        raise TypeError(f"program must be a non-empty string (a name), not {program!r}")
    return program


def _execution_id(execution_id: str | None) -> str:
    if execution_id is None:
        return new_id()
    if not isinstance(execution_id, str) or not execution_id:
        raise TypeError(f"execution_id must be a non-empty string, not {execution_id!r}")
    return execution_id


def track(
    runtime: Runtime,
    program: str,
    *,
    trigger: Trigger | str,
    input: JsonValue,
    owner: str | None,
    execution_id: str | None,
    attribution: Attribution,
    scope: _Scoped,
    on_start: _Hook,
    on_close: _Hook,
) -> TrackedExecution:
    """A root tracked execution (``engine.track`` checks the engine and hands in its parts)."""
    if owner is not None and not isinstance(owner, str):
        raise TypeError(f"owner must be a string or None, not {owner!r}")
    return TrackedExecution(
        runtime,
        _program_name(program),
        trigger=as_trigger(trigger),
        input=snapshot(input),
        owner=owner,
        execution_id=_execution_id(execution_id),
        attribution=attribution,
        scope=scope,
        on_start=on_start,
        on_close=on_close,
    )
