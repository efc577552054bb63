"""ExecutionContext: what a program holds — tool calls, questions, children.

``call`` is a thin front door over the one tool-call lifecycle
(``_lifecycle``): look the tool up, open the call (checks, pre-hooks,
``ToolCallStarted``), run the tool, finish or fail the call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

from pydantic import JsonValue

from ._emitter import Emitter
from ._errors import ExecutionError, ExecutionExpiredError, UnknownToolError
from ._events import (
    Attribution,
    InteractionStatus,
    Trigger,
    child_attribution,
    new_id,
    snapshot_object,
)
from ._lifecycle import Runtime, fail_call, finish_call, open_call, settle_call
from ._results import (
    Elicitation,
    ExecutionResult,
    InteractionResponse,
    error_info,
    undo_task_group_cancels,
)
from ._run import RunState
from ._scope import _attribution
from ._tools import Tool
from ._triggers import spawn_trigger

if TYPE_CHECKING:
    from ._plugin import Plugin

__all__ = ["ExecutionContext", "Program", "Spawn", "current_context"]

T = TypeVar("T")
R = TypeVar("R")
Ext = TypeVar("Ext")

_current: ContextVar[ExecutionContext | None] = ContextVar("onlooker_execution", default=None)
_tool_call: ContextVar[str | None] = ContextVar("onlooker_tool_call", default=None)


Program = Callable[["ExecutionContext"], Awaitable[T]]
"""``async def program(ctx: ExecutionContext) -> T``."""

Spawn = Callable[
    [Program[Any], RunState, Attribution, Trigger, JsonValue], Awaitable[ExecutionResult[Any]]
]
"""How a context runs a child execution (the engine's, handed in at creation)."""


class ExecutionContext:
    """A running execution, as its program sees it.

    ``await ctx.call("tool", **args)`` calls a tool, ``await ctx.elicit(...)``
    asks a person, ``await ctx.spawn(child)`` runs a child execution.
    """

    __slots__ = (
        "_emitter",
        "_run",
        "_runtime",
        "_spawn",
        "attribution",
        "execution_id",
        "input",
        "program",
        "trigger",
    )

    def __init__(
        self,
        runtime: Runtime,
        run: RunState,
        emitter: Emitter,
        spawn: Spawn,
        attribution: Attribution,
        program: str,
        trigger: Trigger,
        input: JsonValue,
    ) -> None:
        self._runtime = runtime
        self._run = run
        self._emitter = emitter
        self._spawn = spawn
        self.execution_id = emitter.execution_id
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
        name = tool if isinstance(tool, str) else _name_of(tool)
        emitter = self._emitter
        if emitter.finished:
            self._finished(f"call tool {name!r}")
        runtime = self._runtime
        spec = runtime.tools.runnable(name)
        call = open_call(
            emitter,
            self._run,
            runtime,
            name,
            args,
            tool_call_id=new_id(),
            mutating=runtime.tools.is_mutating(name) if spec is None else spec.mutating,
            check=_unknown_tool(name, list(runtime.tools)) if spec is None else spec.validate_args,
        )
        if call.pending:  # pre-hooks to run (an unknown tool never gets this far)
            assert spec is not None
            await settle_call(call, runtime, spec.validate_modified)
        if call.status is not None:  # refused: closed already
            if runtime.bus.congested:  # a loop of refused calls is held back too
                await runtime.bus.wait_for_space()
            if call.refusal is not None:
                raise call.refusal
            return None  # skipped
        assert spec is not None
        token = _tool_call.set(call.tool_call_id)
        try:
            if spec.is_async:
                result = await spec.fn(**call.input)
            else:
                result = await spec.invoke(dict(call.input))
        except BaseException as exc:  # the tool's own error (even a ToolBlockedError) fails it
            undo_task_group_cancels(exc)
            fail_call(call, exc)
            raise
        finally:
            _tool_call.reset(token)
        if call.post_steps:
            return await finish_call(call, result)
        call.close("completed", result, None)
        return result

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
        if not isinstance(message, str):
            raise TypeError(f"the message must be a str, not {type(message).__name__}")
        if schema is not None and not isinstance(schema, dict):
            raise TypeError(f"schema must be a JSON Schema (a dict) or None, not {schema!r}")
        if self._emitter.finished:
            self._finished("ask a question")
        run = self._run
        interaction_id = new_id()
        requested = snapshot_object(schema) if schema is not None else None
        try:
            self._emitter.interaction_started(
                interaction_id=interaction_id,
                message=message,
                requested_schema=schema,
                mode=run.mode,
            )
        except BaseException as exc:  # an observer's KeyboardInterrupt: still close the pair
            self._emitter.interaction_resolved(
                interaction_id=interaction_id,
                status="cancelled",
                response=None,
                error=error_info(exc),
            )
            raise
        try:
            if run.expired:
                raise ExecutionExpiredError(
                    "this execution has expired; it cannot ask again", execution_id=run.root_id
                )
            if run.mode == "paused":
                response = await run.pause(interaction_id, message, requested, self.execution_id)
            elif run.on_elicitation is None:
                response = InteractionResponse.decline()
            else:
                response = await run.on_elicitation(
                    Elicitation(self.execution_id, interaction_id, message, requested)
                )
                if not isinstance(response, InteractionResponse):
                    raise TypeError(
                        f"on_elicitation must return an InteractionResponse, not {type(response).__name__}"
                    )
        except BaseException as exc:
            undo_task_group_cancels(exc)
            status: InteractionStatus
            if isinstance(exc, ExecutionExpiredError):
                status = "expired"
            elif isinstance(exc, Exception):
                status = "failed"
            else:
                status = "cancelled"
            self._emitter.interaction_resolved(
                interaction_id=interaction_id, status=status, response=None, error=error_info(exc)
            )
            raise
        self._emitter.interaction_resolved(
            interaction_id=interaction_id,
            status=response.status,
            response=response.content,
            error=None,
        )
        if self._runtime.bus.congested:  # a loop of questions is held back too
            await self._runtime.bus.wait_for_space()
        return response

    def _finished(self, doing: str) -> NoReturn:
        raise ExecutionError(
            f"execution {self.execution_id!r} has finished: its context cannot {doing} any more",
            execution_id=self.execution_id,
        )

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
        if self._emitter.finished:
            self._finished("spawn a child execution")
        attribution = child_attribution(
            _attribution.get(),
            parent_execution_id=self.execution_id,
            parent_tool_call_id=_tool_call.get(),
            depth=self.attribution.depth + 1,
            task_id=task_id,
            phase=phase,
        )
        trigger = spawn_trigger(self.execution_id)
        return await self._spawn(program, self._run, attribution, trigger, input)

    def extension(self, plugin: Plugin[Ext]) -> Ext:
        """The extension of ``plugin`` in this engine, typed."""
        return self._runtime.extension(plugin)  # type: ignore[no-any-return]  # typed by Plugin[Ext]

    def select_intent(self, intent_id: str) -> None:
        """Declare the active intent; its id rides every later event's attribution.

        ``policies.require_intent()`` blocks mutating tools until one is selected.
        """
        if not isinstance(intent_id, str) or not intent_id:
            raise ValueError("an intent id must be a non-empty string")
        _attribution.set(_attribution.get().model_copy(update={"intent_id": intent_id}))


def _name_of(tool: object) -> str:
    if isinstance(tool, Tool):
        return tool.name
    raise TypeError(f"ctx.call takes a tool's name or its Tool, not {tool!r}")


def _unknown_tool(name: str, known: list[str]) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    def check(args: Mapping[str, Any]) -> dict[str, Any]:
        raise UnknownToolError(
            f"unknown tool {name!r}; known tools: {', '.join(sorted(known)) or 'none'}", tool=name
        )

    return check


def current_context() -> ExecutionContext:
    """The execution running in the current task (for tools that spawn children).

    Raises ``RuntimeError`` outside an execution.
    """
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError("no onlooker execution is running in this context")
    return ctx
