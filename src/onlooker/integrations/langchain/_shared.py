"""What the handler and the wrapper of one engine share: the runs seen, the calls governed, the loop.

Also the rules both apply to LangChain's objects: how a call is opened under
the framework's id, what counts as an interruption, and a result as text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar, final
from uuid import UUID

import anyio.from_thread
import anyio.lowlevel

from onlooker import ErrorInfo, TrackingError

from .._arguments import Validate
from .._ids import suffixed
from .._per_engine import per_engine

if TYPE_CHECKING:
    from anyio.lowlevel import EventLoopToken

    from onlooker import ExecutionEngine, ExecutionStatus, TrackedExecution, TrackedToolCall

__all__ = [
    "Home",
    "Registry",
    "Run",
    "finish_ended",
    "interrupt_info",
    "interrupted",
    "logger",
    "open_call",
    "paused",
    "registry_of",
    "text",
    "tool_message",
]

logger: Final = logging.getLogger("onlooker.integrations.langchain")

T = TypeVar("T")


@final
class Home:
    """The engine's event loop thread; onlooker is called there, whatever thread calls back."""

    __slots__ = ("drain", "lock", "loop", "queue", "thread", "token")

    def __init__(self) -> None:
        self.thread: int | None = None
        self.token: EventLoopToken | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.queue: deque[Callable[[], Awaitable[None]]] = deque()
        """Steps waiting for the engine's loop (see :meth:`record`), in order."""
        self.lock = threading.Lock()
        self.drain: asyncio.Task[None] | None = None

    def bind(self) -> None:
        """Remember the current thread's event loop as the engine's, once."""
        if self.thread is not None:
            return
        try:
            self.token = anyio.lowlevel.current_token()
        except Exception:  # no async library runs here (built at import time, say)
            return
        self.thread = threading.get_ident()
        with contextlib.suppress(RuntimeError):  # trio: no queue (LangChain needs asyncio)
            self.loop = asyncio.get_running_loop()

    async def call(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run ``step`` on the engine's loop: inline there, else through a worker thread."""
        self.bind()
        if self.token is None or self.thread == threading.get_ident():
            await self.caught_up()
            return await step()
        token = self.token

        async def on_engine_loop() -> T:
            return await step()

        # A synchronous ``invoke`` runs async callbacks in a loop of its own on another
        # thread: wait for the engine's loop from a thread, so that loop is not blocked.
        def wait() -> T:
            return anyio.from_thread.run(on_engine_loop, token=token)

        return await asyncio.to_thread(wait)

    async def record(self, step: Callable[[], Awaitable[None]]) -> None:
        """:meth:`call` for a step whose result nobody waits for.

        A synchronous step of an async graph (``create_react_agent``'s prompt, a
        sub-agent's ``invoke`` inside an async tool) runs on the engine's loop
        thread, and LangChain blocks that thread while a helper thread of its own
        runs the handler's callbacks: waiting there for the engine's loop would
        wait for ever. Such a step is queued instead, and the engine's loop runs the
        queue, in order, as soon as it is free, before any later step.
        """
        self.bind()
        loop = self.loop
        if loop is None or self.thread == threading.get_ident():
            await self.call(step)
            return
        # Another thread: queue the step for the engine's loop (in order), then wait for
        # it only while that loop is seen to make progress. The loop may be blocked by
        # something other than LangChain's dispatch (a ToolNode's synchronous executor
        # waiting for this very thread): waiting for ever there would deadlock.
        ran = threading.Event()

        async def queued() -> None:
            try:
                await step()
            finally:
                ran.set()

        with self.lock:
            backlog = bool(self.queue)  # earlier steps still wait: the loop is not free
            self.queue.append(queued)
        loop.call_soon_threadsafe(self._start_drain)
        if backlog or self._blocked():
            return
        await asyncio.to_thread(ran.wait, _PATIENCE)

    async def caught_up(self) -> None:
        """Wait, on the engine's loop, until every queued step ran: they came first."""
        while self.queue:
            self._start_drain()
            drain = self.drain
            if drain is None or drain is asyncio.current_task():
                return
            await asyncio.shield(drain)

    def _start_drain(self) -> None:
        if (self.drain is None or self.drain.done()) and self.queue and self.loop is not None:
            self.drain = self.loop.create_task(self._run_queue())

    async def _run_queue(self) -> None:
        while True:
            with self.lock:
                if not self.queue:
                    return
                step = self.queue.popleft()
            try:
                await step()
            except Exception:
                logger.exception("onlooker's LangChain handler failed; the run goes on")

    def _blocked(self) -> bool:
        """Whether the engine's loop thread is inside LangChain's synchronous dispatch of
        callbacks (``handle_event``), which waits for async handlers' coroutines on a
        thread of its own: that loop runs nothing until they return."""
        frame = sys._current_frames().get(self.thread) if self.thread is not None else None
        while frame is not None:
            code = frame.f_code
            if code.co_name == "handle_event" and code.co_filename.endswith(_DISPATCH):
                return True
            frame = frame.f_back
        return False


_PATIENCE: Final = 1.0
"""Seconds a callback on another thread waits for its step to run on the engine's loop
before it lets the framework go on (the step stays queued, and runs in order)."""

_DISPATCH: Final = (
    os.path.join("langchain_core", "callbacks", "manager.py"),
    "langchain_core/callbacks/manager.py",
)


@final
class Run:
    """One LangChain run the handler saw: where its events go, and what it is."""

    __slots__ = (
        "answered",
        "call",
        "execution",
        "governed",
        "inputs",
        "name",
        "own",
        "parent_run_id",
        "tool_call_id",
    )

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
        self.governed: tuple[UUID, str] | None = None
        """For a tool run a wrapper records: its key in :attr:`Registry.governed`."""
        self.answered: set[str] | None = None
        """For a graph node's run (a ``ToolNode``): the ``tool_call_id``\\ s of the tool calls
        recorded under it, by the handler or a wrapper. A call to a tool the ``ToolNode``
        does not have runs no tool: the handler records it from the node's output."""


@final
class Registry:
    """What the handlers and wrappers of one engine share."""

    __slots__ = ("governed", "held", "home", "parked", "raised", "runs")

    def __init__(self) -> None:
        self.runs: dict[UUID, Run] = {}
        self.governed: dict[tuple[UUID, str], int] = {}
        """(``ToolNode`` run id, ``tool_call_id``) of the calls a wrapper records right now."""
        self.raised: dict[tuple[UUID, str], BaseException] = {}
        """What the tool of a governed call raised, as the handler saw it: a ``ToolNode``
        that handles tool errors hands the wrapper only an error message."""
        self.held: dict[str, int] = {}
        """Execution id -> the calls a wrapper opened in it and has not finished recording."""
        self.parked: dict[str, Callable[[], Awaitable[None]]] = {}
        """Execution id -> how to finish an execution whose run ended while some of its
        tool calls still ran (see :meth:`park`)."""
        self.home = Home()

    def govern(self, key: tuple[UUID, str]) -> None:
        """A wrapper records this call: the handler must not."""
        self.governed[key] = self.governed.get(key, 0) + 1

    def release(self, key: tuple[UUID, str]) -> BaseException | None:
        """The wrapper is done running this call; what its tool raised, if the handler saw it."""
        left = self.governed.pop(key, 1) - 1
        if left:
            self.governed[key] = left
        return self.raised.pop(key, None)

    def answered(self, run_id: UUID | None, tool_call_id: str) -> None:
        """A tool call under ``run_id`` is recorded: the graph nodes that run it, up to its
        execution's own run, will not record it again (see :attr:`Run.answered`)."""
        run = self.runs.get(run_id) if run_id is not None else None
        while run is not None:
            if run.answered is not None:
                run.answered.add(tool_call_id)
            if run.own or run.parent_run_id is None:
                return
            run = self.runs.get(run.parent_run_id)

    def running(self, execution_id: str) -> bool:
        """Whether a tool call of this execution is still running: one the handler
        recorded and saw no end of, or one a wrapper holds."""
        if self.held.get(execution_id):
            return True
        return any(
            run.call is not None
            and not run.call.done
            and run.execution.execution_id == execution_id
            for run in self.runs.values()
        )

    def park(self, execution_id: str, end: Callable[[], Awaitable[None]]) -> None:
        """Finish an execution (``end``) once its last running tool call has ended.

        LangGraph returns from a run that an ``interrupt()`` paused while parallel
        sibling calls of the interrupting one still run (``ToolNode`` gathers its
        calls without cancelling the rest): they run to their end, and the
        execution stays open until they have, so that they are recorded as they end.
        """
        self.parked[execution_id] = end

    async def settle(self, execution_id: str) -> None:
        """A call of this execution ended: finish the execution if it waited for it."""
        end = self.parked.get(execution_id)
        if end is not None and not self.running(execution_id):
            del self.parked[execution_id]
            await end()

    def hold(self, execution_id: str) -> None:
        """A wrapper opened a call in this execution."""
        self.held[execution_id] = self.held.get(execution_id, 0) + 1

    async def unhold(self, execution_id: str) -> None:
        """A wrapper is done recording a call of this execution."""
        left = self.held.pop(execution_id, 1) - 1
        if left:
            self.held[execution_id] = left
        await self.settle(execution_id)


def registry_of(engine: ExecutionEngine) -> Registry:
    """The registry every handler and wrapper of ``engine`` shares (bound to this loop)."""
    registry = per_engine(engine, "langchain", Registry)
    registry.home.bind()
    return registry


async def open_call(
    execution: TrackedExecution,
    tool: str,
    args: Mapping[str, Any],
    tool_call_id: str | None,
    validate: Validate | None = None,
) -> TrackedToolCall:
    """``tool_started`` under the framework's id, suffixed ``#2``, ``#3`` ... when a model
    repeats an id in this execution.

    ``validate`` is the tool's own validator, for the pre-hooks' rewrites.
    """
    if tool_call_id is not None:
        tool_call_id = suffixed(tool_call_id, partial(_used, execution))
    return await execution.tool_started(tool, args, tool_call_id=tool_call_id, validate=validate)


def _used(execution: TrackedExecution, tool_call_id: str) -> bool:
    try:
        execution.call(tool_call_id)
    except TrackingError:
        return False
    return True


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` is LangGraph pausing a run (``interrupt()``), or a graph handing
    over to its parent (``Command(graph=Command.PARENT)``): not a failure."""
    return _is(error, "GraphBubbleUp")


def paused(error: BaseException) -> bool:
    """Whether ``error`` is LangGraph pausing a run for input (``interrupt()``)."""
    return _is(error, "GraphInterrupt")


def interrupt_info(error: BaseException) -> ErrorInfo:
    """How a call or a run an ``interrupt()`` paused is closed: ``cancelled``, cause
    ``interrupt``, the question(s) it asked as the message."""
    interrupts = error.args[0] if error.args else ()
    values = interrupts if isinstance(interrupts, list | tuple) else [interrupts]
    asked = "; ".join(text(getattr(value, "value", value)) for value in values)
    message = "paused by a LangGraph interrupt" + (f": {asked}" if asked else "")
    return ErrorInfo(type=type(error).__name__, message=message, cause="interrupt")


def _is(error: BaseException, name: str) -> bool:
    # By name: the handler runs without LangGraph installed.
    return any(cls.__name__ == name for cls in type(error).__mro__)


async def finish_ended(execution: TrackedExecution, error: BaseException) -> None:
    """Finish an execution that ``error`` ended: ``completed`` when it handed over to its
    parent graph (a ``ParentCommand``: a sub-agent's handoff), with that ``Command`` as its
    result; ``cancelled`` by an interrupt (an ``interrupt()``: :func:`interrupt_info`) or a
    cancellation; else ``failed``."""
    if _is(error, "ParentCommand"):
        await execution.finish("completed", result=error.args[0] if error.args else None)
        return
    if paused(error):
        await execution.finish("cancelled", error=interrupt_info(error))
        return
    status: ExecutionStatus = (
        "cancelled" if interrupted(error) or not isinstance(error, Exception) else "failed"
    )
    await execution.finish(status, error=error)


def text(content: object) -> str:
    """A ``ToolMessage``'s content as text (content blocks as JSON)."""
    return content if isinstance(content, str) else json.dumps(content, default=str)


def tool_message(output: object, tool_call_id: str | None) -> Any:
    """The ``ToolMessage`` a tool run produced: ``output`` itself, or the one answering
    ``tool_call_id`` in a ``Command``'s ``update`` (a tool that also updates the graph's
    state); ``None`` when there is none. Duck-typed: the handler runs without LangGraph."""
    if getattr(output, "type", None) == "tool":
        return output
    update = getattr(output, "update", None)
    messages = update.get("messages") if isinstance(update, Mapping) else None
    for message in messages if isinstance(messages, list) else ():
        if getattr(message, "type", None) == "tool" and (
            getattr(message, "tool_call_id", None) == tool_call_id
        ):
            return message
    return None
