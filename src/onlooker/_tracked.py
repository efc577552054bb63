"""Tracked executions: the events, hooks and guarantees of ``ctx.call`` for tools run elsewhere.

A framework (an agent SDK, an MCP server) runs the tools; its adapter tells
onlooker what happens through a :class:`TrackedExecution`, and enforces the
verdicts onlooker's pre-hooks return. Tool calls go through the same
lifecycle as ``ctx.call`` (``_lifecycle``); events through the same emitter.

The execution is here; its tool calls are in ``_tracked_call``, its
questions in ``_tracked_questions``, the checks of what adapters pass in
``_tracked_checks``, and the engine's side (``track``, ids) in ``_tracking``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from time import perf_counter
from types import TracebackType
from typing import Any, Final, Literal, final, get_args

from pydantic import JsonValue

from ._emitter import CANCELLED, Emitter
from ._errors import ExecutionExpiredError, HookAbortError, TrackingError
from ._events import (
    Attribution,
    ErrorInfo,
    ExecutionStatus,
    InteractionMode,
    InteractionStatus,
    Trigger,
    child_attribution,
)
from ._lifecycle import Runtime
from ._results import error_info
from ._scope import _Scoped
from ._tracked_call import TrackedCalls, TrackedToolCall, Validate
from ._tracked_checks import check_status, final_error, given_id, program_name, tool_arguments
from ._tracked_questions import TrackedQuestions
from ._triggers import as_trigger, spawn_trigger

__all__ = ["TrackedExecution", "TrackedToolCall"]

_EXECUTION_STATUSES: Final = frozenset(get_args(ExecutionStatus))
_INTERACTION_STATUSES: Final = frozenset(get_args(InteractionStatus))
_INTERACTION_MODES: Final = frozenset(get_args(InteractionMode))

_State = Literal["new", "running", "finished"]
EngineCallback = Callable[["TrackedExecution"], None]
"""What the engine calls as a tracked execution starts (it may refuse) and once it closed."""


class _Tree:
    """What a tracked root and its children share: an ABORT refuses every later call."""

    __slots__ = ("aborted",)

    def __init__(self) -> None:
        self.aborted: HookAbortError | None = None


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
        "_on_close",
        "_on_start",
        "_owner",
        "_parent",
        "_questions",
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
        input: object,
        owner: str | None,
        execution_id: str,
        attribution: Attribution,
        scope: _Scoped,
        tree: _Tree | None = None,
        parent: TrackedExecution | None = None,
        on_start: EngineCallback | None = None,
        on_close: EngineCallback | None = None,
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
        self._calls = TrackedCalls(execution_id)
        self._questions = TrackedQuestions(self._emitter)
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
        if self._on_start is not None:  # the engine refuses a taken id or a closed engine
            self._on_start(self)  # (then nothing is emitted)
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
        check_status(status, _EXECUTION_STATUSES)
        info = final_error(status, error)  # a completed run given an error: refused here
        if self._state == "finished":
            return
        if self._state == "new":  # a run that ends before it began is still one whole record
            try:
                self._start()
            except TrackingError:  # the engine has closed: there is nothing to record it in
                self._state, self._status = "finished", status
                return
        self._close_open_parts(status)
        aborted = self._tree.aborted
        if aborted is not None and status == "completed":
            status, info = "failed", error_info(aborted)
        self._state = "finished"
        self._status = status
        try:
            self._emitter.execution_finished(
                status=status,
                result=result if status == "completed" else None,
                error=info,
                duration_ms=(perf_counter() - self._began) * 1000.0,
            )
        finally:  # an observer's BaseException on that event: the run is closed all the same
            if self._on_close is not None:
                self._on_close(self)

    def _expire(self, timeout: float) -> None:
        """Nobody resumed this paused run within the engine's ``pause_timeout``: its open
        questions and then the run end ``expired``, as a paused native execution's do."""
        if self._state != "running":
            return
        expired = error_info(
            ExecutionExpiredError(
                f"nobody answered within the pause timeout of {timeout}s",
                execution_id=self.execution_id,
            )
        )
        self._questions.close_all("expired", expired)
        self.finish_nowait("expired", error=expired)

    def _close_open_parts(self, status: ExecutionStatus) -> None:
        """Close what is still open ``cancelled``: children, calls, questions. After an
        ABORT, a run that is not itself cancelled finishes its children ``failed`` with
        the abort, as native children end."""
        aborted = self._tree.aborted
        for child in self._children:
            if child._state != "running":  # a child never started was never open
                continue
            if aborted is None or status == "cancelled":
                child.finish_nowait("cancelled", error=CANCELLED)
            else:
                child.finish_nowait("failed", error=aborted)
        self._calls.cancel_all()
        self._questions.cancel_all()

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
        validate: Validate | None = None,
    ) -> TrackedToolCall:
        """Run the pre-hooks on a call the framework is about to make; record its start.

        Returns the verdict as a :class:`TrackedToolCall`. ``mutating``
        overrides the tool's declaration (``engine.declare_tool``) for
        ``require_intent()``. ``args`` must be a mapping with string keys;
        values that are not JSON are snapshotted as ``ctx.call`` does.
        ``validate`` is the framework's own validator of the tool's
        arguments: each pre-hook's ``modified_input`` goes through it before
        the next hook sees it, so ``ToolCallStarted.args`` and ``input`` are
        what the tool receives. If it raises, the call is refused, recorded
        ``failed`` with a ``ToolInputError`` naming the hook.
        """
        self._require_running("record a tool call", tool_call_id=tool_call_id)
        if not isinstance(tool, str) or not tool:
            raise TypeError(f"tool must be a non-empty string, not {tool!r}")
        arguments = tool_arguments(tool, args)
        tool_call_id = given_id("tool_call_id", tool_call_id)
        self._calls.check_free(tool_call_id)
        if mutating is None:
            mutating = self._runtime.tools.is_mutating(tool)
        elif not isinstance(mutating, bool):
            raise TypeError(f"mutating must be True, False or None, not {mutating!r}")
        if validate is not None and not callable(validate):
            raise TypeError(f"validate must be a callable or None, not {validate!r}")
        call = await self._calls.open(
            self._emitter,
            self._tree,
            self._runtime,
            tool,
            arguments,
            tool_call_id=tool_call_id,
            mutating=mutating,
            validate=validate,
        )
        if self._state == "finished":  # it ended while the pre-hooks ran: nothing more is recorded
            call._cancel(refusal="the execution finished")
        return call

    def call(self, tool_call_id: str) -> TrackedToolCall:
        """The call of this execution with this id (for callbacks that carry only ids)."""
        return self._calls.get(tool_call_id)

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
        mode: InteractionMode = "inline",
    ) -> str:
        """Record a question to a person (a permission prompt, ...); returns its id.

        ``mode`` is ``inline`` when the framework waits for the answer (a callback
        that asks), ``paused`` when the run stops and a later run takes the answer
        (an approval the framework resumes from saved state).
        """
        if not isinstance(mode, str) or mode not in _INTERACTION_MODES:
            raise ValueError(f"mode must be 'inline' or 'paused', not {mode!r}")
        self._require_running("record a question", interaction_id=interaction_id)
        return self._questions.ask(message, schema, interaction_id, mode)

    async def interaction_resolved(
        self,
        interaction_id: str,
        status: InteractionStatus,
        response: object = None,
        *,
        error: BaseException | str | ErrorInfo | None = None,
    ) -> None:
        """Close a question: ``accepted``, ``declined``, ``cancelled``, ``expired`` or ``failed``.

        ``error`` (an exception, a message or an ``ErrorInfo``) says why it
        failed, expired or was cancelled; without one, an ``ErrorInfo``
        naming the status is recorded. An answered question has none.
        """
        check_status(status, _INTERACTION_STATUSES)
        info = final_error(status, error, "interaction")
        if self._state == "finished" and self._questions.knows(interaction_id):
            self._require_running("resolve a question", interaction_id=interaction_id)
        self._questions.resolve(interaction_id, status, response, info)

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
            program_name(program),
            trigger=spawn_trigger(self.execution_id) if trigger is None else as_trigger(trigger),
            input=input,
            owner=owner,
            execution_id=given_id("execution_id", execution_id),
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
