"""The callback handler: any LangChain or LangGraph run recorded as a tracked execution (observed only).

The mapping is in the package docstring. Importing this module imports
``langchain_core`` (the handler subclasses its ``AsyncCallbackHandler``):
``require`` names the extra when it is missing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

from onlooker import HookAbortError, TrackingError, UnknownToolError

from .. import require
from .._json import json_copy
from ._shared import (
    Run,
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
    from langchain_core.callbacks import AsyncCallbackHandler
    from pydantic import JsonValue

    from onlooker import ExecutionEngine, TrackedExecution
else:
    AsyncCallbackHandler = require(
        "langchain_core.callbacks", extra="langchain", framework="LangChain"
    ).AsyncCallbackHandler

__all__ = ["OnlookerCallbackHandler"]

_MAX_REUSES: Final = 1000  # the ids a root run's execution may take: <run_id>, #2 ... #1000

_UNKNOWN_TOOL: Final = "Error: {} is not a valid tool"
"""How LangGraph's ``ToolNode`` answers a call to a tool it does not have (its
``INVALID_TOOL_NAME_ERROR_TEMPLATE``), without running any tool."""

_CANNOT_REFUSE: Final = (
    "onlooker's hooks refused tool call %r (%s: %s), but a LangChain callback cannot stop "
    "a call: it ran anyway. Govern LangGraph tools with "
    "ToolNode(awrap_tool_call=onlooker.integrations.langchain.wrap_tool_call(engine))."
)


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
        self._registry = registry_of(engine)
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
            await self._registry.home.record(step)
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
            execution = self._track_root(
                run_id,
                self._program or name,
                trigger=self._trigger or ("langgraph" if graph else "langchain"),
                input=json_copy(inputs),
            )
            await execution.start()
            runs[run_id] = Run(execution, name, parent_run_id, own=True)
            return
        node = _is_graph_node(name, tags, metadata)
        if not parent.own and parent_run_id is not None and node:
            await self._graph_found(parent_run_id, parent)
        run = runs[run_id] = Run(parent.execution, name, parent_run_id, inputs=inputs)
        if node:
            run.answered = set()

    def _track_root(
        self, run_id: UUID, program: str, *, trigger: str, input: JsonValue
    ) -> TrackedExecution:
        """The execution of a root run, under its ``run_id``; ``<run_id>#2``, ``#3`` ... when
        an earlier run had it (a resume given the same config, ``run_id`` and all)."""
        number = 1
        while True:
            execution_id = str(run_id) if number == 1 else f"{run_id}#{number}"
            try:
                return self._engine.track(
                    program, trigger=trigger, input=input, owner=self._owner,
                    execution_id=execution_id,
                )  # fmt: skip
            except TrackingError as exc:
                # A RuntimeError too: the engine is not running, whatever the id.
                if isinstance(exc, RuntimeError) or number == _MAX_REUSES:
                    raise
            number += 1

    async def _graph_found(self, run_id: UUID, run: Run) -> None:
        """``run`` runs graph nodes: a nested graph, so a child execution from now on."""
        child = run.execution.child(
            run.name,
            parent_tool_call_id=self._calling_tool(run.parent_run_id),
            trigger=self._trigger or "langgraph",
            input=json_copy(run.inputs),
            owner=self._owner,
            execution_id=str(run_id),
        )
        await child.start()
        run.execution, run.own, run.inputs = child, True, None

    def _calling_tool(self, run_id: UUID | None) -> str | None:
        """The tool call, within the same execution, that a run is nested in."""
        runs = self._registry.runs
        while run_id is not None and (run := runs.get(run_id)) is not None:
            if run.call is not None:  # recorded here: its id, suffixed if the model repeated one
                return run.call.tool_call_id
            if run.tool_call_id is not None:
                return run.tool_call_id
            if run.own:
                return None
            run_id = run.parent_run_id
        return None

    async def _chain_ended(
        self, run_id: UUID, outputs: object, error: BaseException | None
    ) -> None:
        registry = self._registry
        runs = registry.runs
        run = runs.pop(run_id, None)
        if run is not None and run.answered is not None and not run.own and error is None:
            await self._unknown_tools(run, outputs)
        if run is None or not run.own:
            return
        execution = run.execution

        async def end() -> None:
            if error is None:
                await execution.finish("completed", result=outputs)
            else:
                await finish_ended(execution, error)
            if run.parent_run_id is None:
                # LangChain reports no end for the runs a cancellation cut short (a node;
                # a tool too before langchain-core 1.7.5): once their root has ended,
                # nothing will, and they would stay for ever.
                for stale in [key for key, entry in runs.items() if entry.execution.finished]:
                    del runs[stale]

        if error is None and registry.running(execution.execution_id):
            # LangGraph returned at an interrupt() while parallel siblings of the
            # interrupting call still run: they end (and are recorded) first.
            registry.park(execution.execution_id, end)
            return
        await end()

    async def _unknown_tools(self, node: Run, outputs: object) -> None:
        """Record the calls a ``ToolNode`` answered with its error for a tool it does not have
        (it runs no tool, so no callback tells of them): ``failed``, ``UnknownToolError``."""
        answered = node.answered if node.answered is not None else set()
        for message in _messages(outputs):
            tool_call_id = getattr(message, "tool_call_id", None)
            name = getattr(message, "name", None)
            content = getattr(message, "content", None)
            if (
                getattr(message, "type", None) != "tool"
                or getattr(message, "status", None) != "error"
                or not isinstance(tool_call_id, str)
                or tool_call_id in answered
                or not isinstance(name, str)
                or not isinstance(content, str)
                or not content.startswith(_UNKNOWN_TOOL.format(name))
            ):
                continue
            args = _asked(node.inputs, tool_call_id)
            if args is None:
                continue
            answered.add(tool_call_id)
            call = await open_call(node.execution, name, args, tool_call_id or None)
            if call.allowed:
                await call.failed(UnknownToolError(content, tool=name))

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
        key = (parent_run_id, tool_call_id or "") if parent_run_id is not None else None
        governed = key is not None and key in registry.governed
        parent = registry.runs.get(parent_run_id) if parent_run_id is not None else None
        registry.answered(parent_run_id, tool_call_id or "")
        tool_call_id = tool_call_id or str(run_id)
        if parent is None:  # a tool run on its own: an execution of one call
            execution = self._engine.track(
                self._program or name,
                trigger=self._trigger or "langchain",
                input=json_copy(args),
                owner=self._owner,
                execution_id=str(run_id),
            )
            await execution.start()
            run = Run(execution, name, parent_run_id, own=True, tool_call_id=tool_call_id)
        else:
            run = Run(parent.execution, name, parent_run_id, tool_call_id=tool_call_id)
        registry.runs[run_id] = run
        if governed:
            run.governed = key
            return  # wrap_tool_call records this call
        call = await open_call(run.execution, name, args, tool_call_id)
        run.call = call
        if not call.allowed:
            logger.warning(_CANNOT_REFUSE, tool_call_id, call.action.value, call.reason)

    async def _tool_ended(self, run_id: UUID, output: object, error: BaseException | None) -> None:
        run = self._registry.runs.pop(run_id, None)
        if run is None:
            return
        governed = run.governed
        if governed is not None and error is not None and governed in self._registry.governed:
            self._registry.raised[governed] = error  # for the wrapper, which records it
        call = run.call
        message = tool_message(output, run.tool_call_id)  # also inside a Command
        if message is not None:
            output = getattr(message, "content", output)
        failure: BaseException | str | None = error
        if failure is None and getattr(message, "status", None) == "error":
            failure = text(output)  # a handled failure
        if call is not None and not call.done:
            if error is not None and paused(error):  # closed now: its siblings may run on
                await call.failed(interrupt_info(error))
            elif error is not None and interrupted(error):
                pass  # a handoff to the parent graph: closes, cancelled, with its execution
            elif failure is not None:
                await call.failed(failure)
            else:
                # A post-hook's ABORT is recorded (the call blocked, the execution to finish
                # failed); a callback cannot stop a tool that has already run.
                with contextlib.suppress(HookAbortError):
                    await call.finished(output)
        if run.own:
            if failure is None:
                await run.execution.finish("completed", result=output)
            elif isinstance(failure, BaseException):
                await finish_ended(run.execution, failure)
            else:
                await run.execution.finish("failed", error=failure)
        else:
            await self._registry.settle(run.execution.execution_id)


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


def _messages(outputs: object) -> list[Any]:
    """The messages a graph node returned: its ``messages`` update, or its list of them
    (``Command``\\ s among them contribute their own ``messages`` update)."""
    found = outputs.get("messages") if isinstance(outputs, Mapping) else outputs
    messages: list[Any] = []
    for item in found if isinstance(found, list) else ():
        update = getattr(item, "update", None)
        inner = update.get("messages") if isinstance(update, Mapping) else None
        messages.extend(inner if isinstance(inner, list) else [item])
    return messages


def _asked(inputs: object, tool_call_id: str) -> dict[str, Any] | None:
    """The arguments of the call ``tool_call_id`` if a node was asked it: in the last
    ``AIMessage`` of its input with no answer there yet (or as the call ``Send`` hands a
    ``ToolNode``); ``None`` if not (a node passing on earlier messages)."""
    if not isinstance(inputs, Mapping):
        return None
    messages = inputs.get("messages")
    messages = messages if isinstance(messages, list) else []
    if any(getattr(m, "tool_call_id", None) == tool_call_id for m in messages):
        return None
    asked = [inputs.get("tool_call")]
    for message in reversed(messages):
        if getattr(message, "type", None) == "ai":
            calls = getattr(message, "tool_calls", None)
            asked.extend(calls if isinstance(calls, list) else ())
            break
    for call in asked:
        if isinstance(call, Mapping) and call.get("id") == tool_call_id:
            args = call.get("args")
            return dict(args) if isinstance(args, Mapping) else {}
    return None


def _is_graph_node(name: str, tags: list[str] | None, metadata: Mapping[str, Any] | None) -> bool:
    """Whether a run is a LangGraph node's run (its parent run is then a graph)."""
    return (
        metadata is not None
        and metadata.get("langgraph_node") == name
        and tags is not None
        and any(tag.startswith("graph:step:") for tag in tags)
    )
