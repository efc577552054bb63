"""LangChain and LangGraph: any run becomes a tracked execution; ``ToolNode`` calls are governed.

Two entry points, used alone or together:

- :class:`OnlookerCallbackHandler` (``config={"callbacks": [handler]}``) records
  any LangChain or LangGraph run. Callbacks only observe: they cannot refuse
  a call nor rewrite its arguments or result.
- :func:`wrap_tool_call` (``ToolNode(tools, awrap_tool_call=...)``) runs
  onlooker's pre-hooks before each tool call of a LangGraph ``ToolNode`` and
  enforces their verdict, and hands the post-hooks' output back to the graph.

Used together they record each call once: the wrapper owns the calls it
governs (keyed by the ``ToolNode``'s run and the ``tool_call_id``, in a
registry shared through the engine) and the handler skips them; the wrapper
finds the execution the handler opened for the graph through the run ids
LangChain hands both.

=================================================  ================================================
LangChain / LangGraph                              onlooker
=================================================  ================================================
``on_chain_start``, no (known) parent run          ``engine.track(run name, execution_id=run_id)``
                                                   + ``start()``
``on_chain_start`` of a graph node whose graph is  ``parent.child(graph name, parent_tool_call_id=``
nested (a subgraph, or a graph run by a tool)      the enclosing tool call) + ``start()``
``on_chain_end`` of a root / subgraph run          ``finish("completed", result=outputs)``
``on_chain_error`` of a root / subgraph run        ``finish("failed", error=...)`` (``cancelled``
                                                   for a cancellation or a graph interrupt)
``on_tool_start``                                  ``tool_started(name, inputs, tool_call_id=``
                                                   LangChain's ``tool_call_id``, else the run id)
``on_tool_end`` (a ``ToolMessage``)                ``finished(content)``
``on_tool_end`` (``ToolMessage(status="error")``,  ``failed(content)``
a handled ``ToolException``)
``on_tool_error``                                  ``failed(error)``
``awrap_tool_call(request, execute)``              ``tool_started``; refused: a ``ToolMessage``
                                                   (``status="error"``, the reason) and the tool
                                                   never runs; ``modified_input`` rewrites
                                                   ``tool_call["args"]``; then ``finished`` /
                                                   ``failed``, ``modified_output`` rewrites the
                                                   ``ToolMessage`` content
=================================================  ================================================

Run the graph with ``ainvoke`` / ``astream`` on the engine's event loop. A
synchronous ``invoke`` runs the callbacks on another thread: the handler hops
back to the engine's loop (so call it from a worker thread, never from the
loop itself), and LangGraph does not call ``awrap_tool_call`` at all then.
The adapter's own failures are logged on ``onlooker.integrations.langchain``
and never reach the agent; a hook's ``ABORT`` does, as ``HookAbortError``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar, final
from uuid import UUID

import anyio.from_thread
import anyio.lowlevel
from pydantic import JsonValue
from pydantic_core import to_jsonable_python

from onlooker import HookAbortError, HookAction, TrackingError

from . import require

if TYPE_CHECKING:
    from anyio.lowlevel import EventLoopToken
    from langchain_core.callbacks import AsyncCallbackHandler
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import AsyncToolCallWrapper, ToolCallRequest
    from langgraph.types import Command

    from onlooker import ExecutionEngine, ExecutionStatus, TrackedExecution, TrackedToolCall
else:
    AsyncCallbackHandler = require(
        "langchain_core.callbacks", extra="langchain", framework="LangChain"
    ).AsyncCallbackHandler

__all__ = ["OnlookerCallbackHandler", "wrap_tool_call"]

logger: Final = logging.getLogger("onlooker.integrations.langchain")

T = TypeVar("T")

_CANNOT_REFUSE: Final = (
    "onlooker's hooks refused tool call %r (%s: %s), but a LangChain callback cannot stop "
    "a call: it ran anyway. Govern LangGraph tools with "
    "ToolNode(awrap_tool_call=onlooker.integrations.langchain.wrap_tool_call(engine))."
)


# -- state shared by the handler and the wrapper of one engine --------------------------


@final
class _Home:
    """The engine's event loop thread; onlooker is called there, whatever thread calls back."""

    __slots__ = ("thread", "token")

    def __init__(self) -> None:
        self.thread: int | None = None
        self.token: EventLoopToken | None = None

    def bind(self) -> None:
        """Remember the current thread's event loop as the engine's, once."""
        if self.thread is not None:
            return
        try:
            self.token = anyio.lowlevel.current_token()
        except Exception:  # no async library runs here (built at import time, say)
            return
        self.thread = threading.get_ident()

    async def call(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run ``step`` on the engine's loop: inline there, else through a worker thread."""
        self.bind()
        if self.token is None or self.thread == threading.get_ident():
            return await step()
        token = self.token

        async def on_engine_loop() -> T:
            return await step()

        # A synchronous ``invoke`` runs async callbacks in a loop of its own on another
        # thread: wait for the engine's loop from a thread, so that loop is not blocked.
        def wait() -> T:
            return anyio.from_thread.run(on_engine_loop, token=token)

        return await asyncio.to_thread(wait)


@final
class _Run:
    """One LangChain run the handler saw: where its events go, and what it is."""

    __slots__ = ("call", "execution", "inputs", "name", "own", "parent_run_id", "tool_call_id")

    def __init__(
        self,
        execution: TrackedExecution,
        name: str,
        parent_run_id: UUID | None,
        *,
        own: bool = False,
        inputs: object = None,
        tool_call_id: str | None = None,
    ) -> None:
        self.execution = execution
        """The execution this run's events belong to (its own when ``own``)."""
        self.name = name
        self.parent_run_id = parent_run_id
        self.own = own
        """Whether the run *is* an execution (a root run, a subgraph): it finishes it."""
        self.inputs = inputs
        self.tool_call_id = tool_call_id
        """For a tool run: the id its call is recorded under."""
        self.call: TrackedToolCall | None = None
        """For a tool run the handler records (not one the wrapper owns)."""


@final
class _Registry:
    """What the handlers and wrappers of one engine share."""

    __slots__ = ("governed", "home", "runs")

    def __init__(self) -> None:
        self.runs: dict[UUID, _Run] = {}
        self.governed: dict[tuple[UUID, str], int] = {}
        """(``ToolNode`` run id, ``tool_call_id``) of the calls a wrapper records right now."""
        self.home = _Home()

    def govern(self, key: tuple[UUID, str]) -> None:
        """A wrapper records this call: the handler must not."""
        self.governed[key] = self.governed.get(key, 0) + 1

    def release(self, key: tuple[UUID, str]) -> None:
        """The wrapper is done with this call."""
        left = self.governed.pop(key, 1) - 1
        if left:
            self.governed[key] = left


_REGISTRIES: Final[weakref.WeakKeyDictionary[ExecutionEngine, _Registry]] = (
    weakref.WeakKeyDictionary()
)


def _registry(engine: ExecutionEngine) -> _Registry:
    registry = _REGISTRIES.get(engine)
    if registry is None:
        registry = _REGISTRIES[engine] = _Registry()
    registry.home.bind()
    return registry


# -- the callback handler ---------------------------------------------------------------


class OnlookerCallbackHandler(AsyncCallbackHandler):
    """A LangChain callback handler that records runs as onlooker tracked executions.

    ``await graph.ainvoke(inputs, config={"callbacks": [OnlookerCallbackHandler(engine)]})``
    records the run as an execution whose id is LangChain's root ``run_id``
    (named ``program``, else the run's name), each tool call under LangChain's
    ``tool_call_id``, a failed call (an exception, or a handled
    ``ToolException`` returned as ``ToolMessage(status="error")``) as
    ``failed``, and each nested LangGraph graph (a subgraph node, a graph a
    tool runs) as a child execution.

    Callbacks only observe: onlooker's pre-hooks run on every call, but a
    refusal or a rewrite cannot be enforced from a callback (it is logged as
    a warning; the recorded verdict stands while the tool runs anyway). Pass
    :func:`wrap_tool_call` to the ``ToolNode`` as well to govern calls.
    """

    run_inline: bool = True  # awaited in order, not gathered in a task of its own

    def __init__(
        self,
        engine: ExecutionEngine,
        *,
        program: str | None = None,
        trigger: str | None = None,
        owner: str | None = None,
    ) -> None:
        """Record runs on ``engine``.

        ``program`` names root executions (default: the root run's name);
        ``trigger`` their trigger kind (default ``"langgraph"`` for a graph,
        else ``"langchain"``); ``owner`` their owner.
        """
        self._engine = engine
        self._registry = _registry(engine)
        self._program = program
        self._trigger = trigger
        self._owner = owner

    # LLM, retriever and custom events carry no tool calls and nest none.
    @property
    def ignore_llm(self) -> bool:
        """LLM runs are not recorded."""
        return True

    @property
    def ignore_chat_model(self) -> bool:
        """Chat model runs are not recorded."""
        return True

    @property
    def ignore_retriever(self) -> bool:
        """Retriever runs are not recorded."""
        return True

    @property
    def ignore_retry(self) -> bool:
        """Retries are not recorded."""
        return True

    @property
    def ignore_custom_event(self) -> bool:
        """Custom events are not recorded."""
        return True

    # -- chains ---------------------------------------------------------------------

    async def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain or graph run starts: a root run opens an execution, a subgraph a child."""
        name = _run_name(serialized, kwargs)
        await self._guard(
            "on_chain_start",
            lambda: self._chain_started(run_id, parent_run_id, name, inputs, tags, metadata),
        )

    async def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain or graph run ends: its execution, if it is one, finishes ``completed``."""
        await self._guard("on_chain_end", lambda: self._chain_ended(run_id, outputs, None))

    async def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain or graph run fails: its execution, if it is one, finishes ``failed``."""
        await self._guard("on_chain_error", lambda: self._chain_ended(run_id, None, error))

    # -- tools ----------------------------------------------------------------------

    async def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool starts: a tracked call under LangChain's ``tool_call_id`` (observed only)."""
        name = _run_name(serialized, {}) if serialized else _run_name(None, kwargs)
        tool_call_id = kwargs.get("tool_call_id") or (metadata or {}).get("tool_call_id")
        args: Mapping[str, Any] = inputs if isinstance(inputs, dict) else {"input": input_str}
        await self._guard(
            "on_tool_start",
            lambda: self._tool_started(
                run_id, parent_run_id, name, args, tool_call_id if tool_call_id else None
            ),
        )

    async def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool returns: ``completed``, or ``failed`` for an error ``ToolMessage``."""
        await self._guard("on_tool_end", lambda: self._tool_ended(run_id, output, None))

    async def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool raises: ``failed``."""
        await self._guard("on_tool_error", lambda: self._tool_ended(run_id, None, error))

    # -- the mapping ----------------------------------------------------------------

    async def _guard(self, callback: str, step: Callable[[], Awaitable[None]]) -> None:
        try:
            await self._registry.home.call(step)
        except Exception:
            logger.exception("onlooker's LangChain handler failed in %s; the run goes on", callback)

    async def _chain_started(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        inputs: object,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        runs = self._registry.runs
        if run_id in runs:
            return  # another handler of this engine records this run already
        parent = runs.get(parent_run_id) if parent_run_id is not None else None
        if parent is None:  # a root run, or the first run this handler was attached to
            graph = (metadata or {}).get("ls_integration") == "langgraph"
            execution = self._engine.track(
                self._program or name,
                trigger=self._trigger or ("langgraph" if graph else "langchain"),
                input=_json(inputs),
                owner=self._owner,
                execution_id=str(run_id),
            )
            await execution.start()
            runs[run_id] = _Run(execution, name, parent_run_id, own=True)
            return
        if not parent.own and parent_run_id is not None and _is_graph_node(name, tags, metadata):
            await self._graph_found(parent_run_id, parent)
        runs[run_id] = _Run(parent.execution, name, parent_run_id, inputs=inputs)

    async def _graph_found(self, run_id: UUID, run: _Run) -> None:
        """``run`` runs graph nodes: a nested graph, so a child execution from now on."""
        child = run.execution.child(
            run.name,
            parent_tool_call_id=self._calling_tool(run.parent_run_id),
            input=_json(run.inputs),
            execution_id=str(run_id),
        )
        await child.start()
        run.execution, run.own, run.inputs = child, True, None

    def _calling_tool(self, run_id: UUID | None) -> str | None:
        """The tool call, within the same execution, that a run is nested in."""
        runs = self._registry.runs
        while run_id is not None and (run := runs.get(run_id)) is not None:
            if run.tool_call_id is not None:
                return run.tool_call_id
            if run.own:
                return None
            run_id = run.parent_run_id
        return None

    async def _chain_ended(
        self, run_id: UUID, outputs: object, error: BaseException | None
    ) -> None:
        run = self._registry.runs.pop(run_id, None)
        if run is None or not run.own:
            return
        if error is None:
            await run.execution.finish("completed", result=outputs)
        else:
            await run.execution.finish(_ended_status(error), error=error)

    async def _tool_started(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        args: Mapping[str, Any],
        tool_call_id: str | None,
    ) -> None:
        registry = self._registry
        if run_id in registry.runs:
            return
        governed = (
            parent_run_id is not None and (parent_run_id, tool_call_id or "") in registry.governed
        )
        tool_call_id = tool_call_id or str(run_id)
        parent = registry.runs.get(parent_run_id) if parent_run_id is not None else None
        if parent is None:  # a tool run on its own: an execution of one call
            execution = self._engine.track(
                self._program or name,
                trigger=self._trigger or "langchain",
                input=_json(args),
                owner=self._owner,
                execution_id=str(run_id),
            )
            await execution.start()
            run = _Run(execution, name, parent_run_id, own=True, tool_call_id=tool_call_id)
        else:
            run = _Run(parent.execution, name, parent_run_id, tool_call_id=tool_call_id)
        registry.runs[run_id] = run
        if governed:
            return  # wrap_tool_call records this call
        call = await _open_call(run.execution, name, args, tool_call_id)
        run.call = call
        if not call.allowed:
            logger.warning(_CANNOT_REFUSE, tool_call_id, call.action.value, call.reason)

    async def _tool_ended(self, run_id: UUID, output: object, error: BaseException | None) -> None:
        run = self._registry.runs.pop(run_id, None)
        if run is None:
            return
        call = run.call
        failure: BaseException | str | None = error
        if failure is None:
            failure = _error_text(output)
        if call is not None and not call.done and not (error is not None and _interrupted(error)):
            if failure is not None:
                await call.failed(failure)
            else:
                await call.finished(_tool_output(output))
        if run.own:
            if failure is None:
                await run.execution.finish("completed", result=_tool_output(output))
            elif isinstance(failure, BaseException):
                await run.execution.finish(_ended_status(failure), error=failure)
            else:
                await run.execution.finish("failed", error=failure)


# -- the ToolNode wrapper ---------------------------------------------------------------


def wrap_tool_call(engine: ExecutionEngine, *, program: str = "langgraph") -> AsyncToolCallWrapper:
    """An ``awrap_tool_call`` for LangGraph's ``ToolNode`` that governs each call with onlooker.

    ``ToolNode(tools, awrap_tool_call=wrap_tool_call(engine))``: before a
    tool runs, onlooker's pre-hooks decide. A ``BLOCK`` (or ``SKIP``) returns
    a ``ToolMessage`` carrying the reason (``status="error"`` for a block)
    instead of running the tool; an ``ABORT`` raises ``HookAbortError``
    into the graph; a ``modified_input`` replaces the call's ``args``. After
    the tool, the call is recorded ``completed`` (``failed`` for an error
    ``ToolMessage`` or an exception) and a post-hook's ``modified_output``
    replaces the ``ToolMessage`` content.

    The calls land in the execution an :class:`OnlookerCallbackHandler` of the
    same engine opened for the graph (pass it in the run's ``callbacks``);
    without one, each call is an execution of its own named ``program``.
    """
    require("langgraph.prebuilt", extra="langchain", framework="LangGraph")
    from langchain_core.callbacks import BaseCallbackManager
    from langchain_core.messages import ToolMessage
    from langgraph.types import Command

    registry = _registry(engine)
    home = registry.home

    async def open_call(
        request: ToolCallRequest, node_run_id: UUID | None
    ) -> tuple[TrackedToolCall, TrackedExecution | None]:
        tool_call = request.tool_call
        run = registry.runs.get(node_run_id) if node_run_id is not None else None
        standalone: TrackedExecution | None = None
        if run is None:
            standalone = engine.track(program, trigger="langgraph", input=_json(tool_call))
            await standalone.start()
            execution = standalone
        else:
            execution = run.execution
        call = await _open_call(
            execution, tool_call["name"], tool_call["args"], tool_call.get("id") or None
        )
        return call, standalone

    async def record(
        call: TrackedToolCall,
        standalone: TrackedExecution | None,
        request_id: str,
        result: ToolMessage | Command[Any],
    ) -> ToolMessage | Command[Any]:
        message = _tool_message(result, request_id, ToolMessage, Command)
        if message is not None and message.status == "error":
            await call.failed(_text(message.content))
            if standalone is not None:
                await standalone.finish("failed", error=_text(message.content))
            return result
        output: object = message.content if message is not None else result
        try:
            rewritten = await call.finished(output)
        finally:
            if standalone is not None:
                await standalone.finish("completed", result=output)
        if message is result and rewritten is not output:
            return message.model_copy(update={"content": _as_content(rewritten)})
        return result

    async def awrap_tool_call(
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        tool_call = request.tool_call
        name, tool_call_id = tool_call["name"], tool_call.get("id") or ""
        node_run_id = _node_run_id(request, BaseCallbackManager)
        try:
            call, standalone = await home.call(lambda: open_call(request, node_run_id))
        except Exception:
            logger.exception("onlooker could not record LangGraph tool call %r", tool_call_id)
            return await execute(request)
        if not call.allowed:
            if standalone is not None:
                await _quietly(home, lambda: standalone.finish("completed"))
            if call.action is HookAction.ABORT:
                raise HookAbortError(
                    f"onlooker's hooks aborted the run at tool {name!r}: {call.reason}",
                    tool=name,
                    reason=call.reason,
                )
            return ToolMessage(
                content=call.reason or f"onlooker refused the call to {name!r}",
                tool_call_id=tool_call_id,
                name=name,
                status="success" if call.action is HookAction.SKIP else "error",
            )
        if call.input != tool_call["args"]:
            request = request.override(tool_call={**tool_call, "args": call.input})
        key = (node_run_id, tool_call_id) if node_run_id is not None else None
        if key is not None:
            registry.govern(key)
        try:
            result = await execute(request)
        except BaseException as exc:  # recorded failed (cancelled for a cancellation)
            with anyio.CancelScope(shield=True):
                await _quietly(home, partial(_failed, call, standalone, exc))
            raise
        finally:
            if key is not None:
                registry.release(key)
        try:
            return await home.call(lambda: record(call, standalone, tool_call_id, result))
        except HookAbortError:
            raise  # a post-hook ABORT ends the run, as in onlooker's own executions
        except Exception:
            logger.exception("onlooker could not record LangGraph tool call %r", tool_call_id)
            return result

    return awrap_tool_call


async def _failed(
    call: TrackedToolCall, standalone: TrackedExecution | None, error: BaseException
) -> None:
    if not _interrupted(error):  # an interrupted call closes, cancelled, with its execution
        await call.failed(error)
    if standalone is not None:
        await standalone.finish(_ended_status(error), error=error)


async def _quietly(home: _Home, step: Callable[[], Awaitable[None]]) -> None:
    try:
        await home.call(step)
    except Exception:
        logger.exception("onlooker's LangGraph wrapper failed; the run goes on")


# -- helpers ----------------------------------------------------------------------------


async def _open_call(
    execution: TrackedExecution, tool: str, args: Mapping[str, Any], tool_call_id: str | None
) -> TrackedToolCall:
    """``tool_started``, under the framework's id unless this execution already used it."""
    if tool_call_id is not None:
        try:
            execution.call(tool_call_id)
        except TrackingError:
            pass  # unused: record the call under the framework's own id
        else:
            tool_call_id = None  # a model that repeats ids: onlooker picks a fresh one
    return await execution.tool_started(tool, args, tool_call_id=tool_call_id)


def _run_name(
    serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any], default: str = ""
) -> str:
    name = kwargs.get("name")
    if isinstance(name, str) and name:
        return name
    if serialized:
        name = serialized.get("name")
        if isinstance(name, str) and name:
            return name
        ids = serialized.get("id")
        if isinstance(ids, list) and ids and isinstance(ids[-1], str):
            return ids[-1]
    return default or "langchain"


def _is_graph_node(name: str, tags: list[str] | None, metadata: Mapping[str, Any] | None) -> bool:
    """Whether a run is a LangGraph node's run (its parent run is then a graph)."""
    return (
        metadata is not None
        and metadata.get("langgraph_node") == name
        and tags is not None
        and any(tag.startswith("graph:step:") for tag in tags)
    )


def _interrupted(error: BaseException) -> bool:
    """Whether ``error`` is LangGraph pausing a run (``interrupt()``), not a failure."""
    return any(cls.__name__ == "GraphBubbleUp" for cls in type(error).__mro__)


def _ended_status(error: BaseException) -> ExecutionStatus:
    return "cancelled" if _interrupted(error) or not isinstance(error, Exception) else "failed"


def _json(value: object) -> JsonValue:
    """A JSON copy of LangChain inputs (messages and other models included)."""
    return to_jsonable_python(value, fallback=repr)  # type: ignore[no-any-return]  # JSON by contract


def _error_text(output: object) -> str | None:
    """The message of a handled failure (``ToolMessage(status="error")``), else ``None``."""
    if getattr(output, "type", None) == "tool" and getattr(output, "status", None) == "error":
        return _text(getattr(output, "content", ""))
    return None


def _tool_output(output: object) -> object:
    if getattr(output, "type", None) == "tool":
        return getattr(output, "content", output)
    return output


def _text(content: object) -> str:
    return content if isinstance(content, str) else json.dumps(content, default=str)


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


def _tool_message(
    result: object, tool_call_id: str, message_type: type[ToolMessage], command_type: type[Any]
) -> ToolMessage | None:
    """The ``ToolMessage`` a tool call produced, also inside a ``Command``'s update."""
    if isinstance(result, message_type):
        return result
    if isinstance(result, command_type):
        update = getattr(result, "update", None)
        messages = update.get("messages") if isinstance(update, Mapping) else None
        for message in messages if isinstance(messages, list) else ():
            if isinstance(message, message_type) and message.tool_call_id == tool_call_id:
                return message
    return None
