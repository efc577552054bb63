"""The ``ToolNode`` wrapper: onlooker's verdict enforced on each LangGraph tool call.

The mapping is in the package docstring. LangGraph is imported when
:func:`wrap_tool_call` is first called, not with this module.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, final
from uuid import UUID

import anyio

from onlooker import HookAbortError, HookAction, ToolError, UnknownToolError

from .. import require
from .._arguments import validated
from .._json import json_copy
from ._arguments import validator
from ._shared import (
    Home,
    finish_ended,
    interrupt_info,
    interrupted,
    logger,
    open_call,
    paused,
    registry_of,
    text,
    tool_message,
)

if TYPE_CHECKING:
    from langchain_core.callbacks import BaseCallbackManager
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import AsyncToolCallWrapper, ToolCallRequest
    from langgraph.types import Command

    from onlooker import ExecutionEngine, TrackedExecution, TrackedToolCall

__all__ = ["wrap_tool_call"]


def wrap_tool_call(engine: ExecutionEngine, *, program: str = "langgraph") -> AsyncToolCallWrapper:
    """An ``awrap_tool_call`` for LangGraph's ``ToolNode`` that governs each call with onlooker.

    ``ToolNode(tools, awrap_tool_call=wrap_tool_call(engine))``: before a
    tool runs, onlooker's pre-hooks decide. A ``BLOCK`` (or ``SKIP``) returns
    a ``ToolMessage`` carrying the reason (``status="error"`` for a block)
    instead of running the tool; an ``ABORT`` raises ``HookAbortError``
    into the graph; a ``modified_input`` replaces the call's ``args``, once
    the tool's ``args_schema`` validated it (an invalid one is refused like a
    block, and recorded ``failed``). The arguments are recorded, and handed
    to the tool, as that schema validated them. After
    the tool, the call is recorded ``completed`` (``failed`` for an error
    ``ToolMessage`` or an exception) and a post-hook's ``modified_output``
    replaces the ``ToolMessage`` content.

    The calls land in the execution an :class:`OnlookerCallbackHandler` of the
    same engine opened for the graph (pass it in the run's ``callbacks``);
    without one, each call is an execution of its own named ``program``.
    """
    require("langgraph.prebuilt", extra="langchain", framework="LangGraph")
    return _ToolNodeGovernor(engine, program).awrap_tool_call


@final
class _ToolNodeGovernor:
    """What one :func:`wrap_tool_call` wrapper does, one step a method."""

    __slots__ = (
        "_engine",
        "_home",
        "_manager_type",
        "_message_type",
        "_program",
        "_registry",
    )

    def __init__(self, engine: ExecutionEngine, program: str) -> None:
        from langchain_core.callbacks import BaseCallbackManager
        from langchain_core.messages import ToolMessage

        self._engine = engine
        self._program = program
        self._registry = registry_of(engine)
        self._home = self._registry.home
        self._manager_type: type[BaseCallbackManager] = BaseCallbackManager
        self._message_type: type[ToolMessage] = ToolMessage

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Govern one call: open it, enforce the verdict, run the tool, record the result."""
        tool_call = request.tool_call
        tool_call_id = tool_call.get("id") or ""
        node_run_id = _node_run_id(request, self._manager_type)
        try:
            call, standalone, given = await self._home.call(
                lambda: self._open(request, node_run_id)
            )
        except Exception:
            logger.exception("onlooker could not record LangGraph tool call %r", tool_call_id)
            return await execute(request)
        try:
            return await self._govern(request, execute, call, standalone, given, node_run_id)
        finally:  # the graph's execution may wait for this call to end (see Registry.park)
            with anyio.CancelScope(shield=True):
                await _quietly(self._home, partial(self._registry.unhold, call.execution_id))

    async def _govern(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
        call: TrackedToolCall,
        standalone: TrackedExecution | None,
        given: Mapping[str, Any],
        node_run_id: UUID | None,
    ) -> ToolMessage | Command[Any]:
        """Enforce the verdict on an opened call, run the tool, record the result."""
        tool_call = request.tool_call
        tool_call_id = tool_call.get("id") or ""
        if not call.allowed:
            return await self._refuse(call, standalone, tool_call["name"], tool_call_id)
        if call.input != given:  # rewritten; else LangChain validates the model's own args once
            request = request.override(tool_call={**tool_call, "args": call.input})
        key = (node_run_id, tool_call_id) if node_run_id is not None else None
        result, raised = await self._execute(execute, request, key, call, standalone)
        unknown = request.tool is None  # the ToolNode has no such tool: its error message
        try:
            return await self._home.call(
                lambda: self._record(call, standalone, tool_call_id, result, raised, unknown)
            )
        except HookAbortError:
            raise  # a post-hook ABORT ends the run, as in onlooker's own executions
        except Exception:
            logger.exception("onlooker could not record LangGraph tool call %r", tool_call_id)
            return result

    async def _open(
        self, request: ToolCallRequest, node_run_id: UUID | None
    ) -> tuple[TrackedToolCall, TrackedExecution | None, Mapping[str, Any]]:
        """``tool_started`` in the graph's execution, else in one of its own (``standalone``);
        also the arguments it was given (the model's, as the tool's schema validates them)."""
        tool_call = request.tool_call
        run = self._registry.runs.get(node_run_id) if node_run_id is not None else None
        standalone: TrackedExecution | None = None
        if run is None:
            standalone = self._engine.track(
                self._program, trigger="langgraph", input=json_copy(tool_call)
            )
            await standalone.start()
            execution = standalone
        else:
            execution = run.execution
            self._registry.answered(node_run_id, tool_call.get("id") or "")
        validate = validator(request.tool)
        given, _ = validated(validate, dict(tool_call["args"]))
        call = await open_call(
            execution, tool_call["name"], given, tool_call.get("id") or None, validate
        )
        self._registry.hold(call.execution_id)
        return call, standalone, given

    async def _refuse(
        self,
        call: TrackedToolCall,
        standalone: TrackedExecution | None,
        name: str,
        tool_call_id: str,
    ) -> ToolMessage:
        """Enforce a refusing pre-hook: the tool never runs; an ``ABORT`` raises.

        A rewrite the tool's schema refused is refused like a block (an error
        message), and its execution of its own, if any, fails with it.
        """
        if standalone is not None:
            if call.status == "failed":
                error = call.reason or f"invalid arguments for tool {name!r}"
                await _quietly(self._home, lambda: standalone.finish("failed", error=error))
            else:
                await _quietly(self._home, lambda: standalone.finish("completed"))
        if call.action is HookAction.ABORT:
            raise HookAbortError(
                f"onlooker's hooks aborted the run at tool {name!r}: {call.reason}",
                tool=name,
                reason=call.reason,
            )
        return self._message_type(
            content=call.reason or f"onlooker refused the call to {name!r}",
            tool_call_id=tool_call_id,
            name=name,
            status="success" if call.action is HookAction.SKIP else "error",
        )

    async def _execute(
        self,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
        request: ToolCallRequest,
        key: tuple[UUID, str] | None,
        call: TrackedToolCall,
        standalone: TrackedExecution | None,
    ) -> tuple[ToolMessage | Command[Any], BaseException | None]:
        """Run the tool, the handler told (by ``key``) to leave the call to this wrapper.

        Also returns what the tool raised when the ``ToolNode`` turned that into
        an error message (the handler saw it, if one is attached).
        """
        if key is not None:
            self._registry.govern(key)
        try:
            result = await execute(request)
        except BaseException as exc:  # recorded failed (cancelled for a cancellation)
            with anyio.CancelScope(shield=True):
                await _quietly(self._home, partial(_failed, call, standalone, exc))
            raise
        finally:
            raised = self._registry.release(key) if key is not None else None
        return result, raised

    async def _record(
        self,
        call: TrackedToolCall,
        standalone: TrackedExecution | None,
        request_id: str,
        result: ToolMessage | Command[Any],
        raised: BaseException | None,
        unknown: bool,
    ) -> ToolMessage | Command[Any]:
        """Record the tool's result; what the graph gets (the post-hooks' rewrite, if any).

        An error message is recorded as what the tool raised, when known; the
        ``ToolNode``'s answer to a tool it does not have as ``UnknownToolError``.
        """
        found = tool_message(result, request_id)
        message = found if isinstance(found, self._message_type) else None
        if call.done:  # its execution ended first (a sibling failed or aborted the run)
            _ended_late(call)
            return result
        if message is not None and message.status == "error":
            # A message alone (a tool that handled its own error) is the tool's failure,
            # for the call and for a call's own execution alike.
            error: Exception = (
                raised
                if isinstance(raised, Exception)
                else ToolError(text(message.content), tool=call.tool)
            )
            if unknown:  # recorded as ctx.call records a tool it does not know
                error = UnknownToolError(text(message.content), tool=call.tool)
            await call.failed(error)
            if standalone is not None:
                await standalone.finish("failed", error=error)
            return result
        output: object = message.content if message is not None else result
        rewritten = output
        try:
            rewritten = await call.finished(output)
        finally:
            if standalone is not None:  # its result: what the graph gets
                await standalone.finish("completed", result=rewritten)
        if message is result and rewritten is not output:
            return message.model_copy(update={"content": _as_content(rewritten)})
        return result


async def _failed(
    call: TrackedToolCall, standalone: TrackedExecution | None, error: BaseException
) -> None:
    if call.done:
        _ended_late(call)
    elif paused(error):  # closed now: its siblings may run on (see Registry.park)
        await call.failed(interrupt_info(error))
    elif not interrupted(error):  # a handoff to the parent graph closes with its execution
        await call.failed(error)
    if standalone is not None:
        await finish_ended(standalone, error)


def _ended_late(call: TrackedToolCall) -> None:
    logger.warning(
        "LangGraph tool call %r (%r) ended after its execution %r had finished; "
        "it stays recorded %s",
        call.tool_call_id,
        call.tool,
        call.execution_id,
        call.status,
    )


async def _quietly(home: Home, step: Callable[[], Awaitable[None]]) -> None:
    try:
        await home.call(step)
    except Exception:
        logger.exception("onlooker's LangGraph wrapper failed; the run goes on")


def _as_content(output: object) -> str | list[str | dict[Any, Any]]:
    """A post-hook's output as ``ToolMessage`` content (a string, or content blocks)."""
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(item, str | dict) for item in output):
        return output
    return json.dumps(output, default=str)


def _node_run_id(request: ToolCallRequest, manager_type: type[Any]) -> UUID | None:
    """The run id of the graph node running the ``ToolNode`` (the tool runs' parent)."""
    runtime = getattr(request, "runtime", None)
    config = getattr(runtime, "config", None)
    callbacks = config.get("callbacks") if isinstance(config, Mapping) else None
    if isinstance(callbacks, manager_type):
        parent = getattr(callbacks, "parent_run_id", None)
        return parent if isinstance(parent, UUID) else None
    return None
