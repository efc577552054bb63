"""ExecutionEngine: runs programs, owns the bus, the plugins and detached executions."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack, suppress
from time import perf_counter
from types import TracebackType
from typing import Any, Final, TypeVar

import anyio
from anyio.abc import TaskGroup
from pydantic import JsonValue

from ._bus import DEFAULT_SHUTDOWN_TIMEOUT, EventBus, check_timeout
from ._context import ExecutionContext, Program, _current, _tool_call
from ._emitter import Emitter
from ._errors import (
    ExecutionExpiredError,
    ExecutionNotPausedError,
    HookAbortError,
    OnlookerError,
    PluginError,
    TrackingError,
    UnknownExecutionError,
)
from ._events import Attribution, ErrorInfo, Trigger, as_trigger, new_id, snapshot
from ._hooks import HookMatcher, HookPlans
from ._lifecycle import Runtime
from ._plugin import Plugin, PluginContext
from ._results import (
    ElicitationHandler,
    ExecutionResult,
    InteractionResponse,
    PausedExecution,
    error_info,
)
from ._run import DetachedRun, RunPhase, RunState
from ._scope import _attribution, _observers
from ._tools import Tool, ToolDeclaration, ToolRegistry
from ._tracked import TrackedExecution, track

__all__ = ["ExecutionEngine"]

logger: Final = logging.getLogger("onlooker")

T = TypeVar("T")
Ext = TypeVar("Ext")

DEFAULT_PAUSE_TIMEOUT: Final = 3600.0
DEFAULT_KEEP_RESULTS: Final = 1024
ENGINE_CLOSED: Final = ErrorInfo(
    type="EngineClosed", message="the engine closed while the execution was open", cause="interrupt"
)


class ExecutionEngine:
    """Runs programs that call tools and ask questions, and reports every step.

    Use it as an async context manager: entering starts the plugins and the
    async observers' workers; leaving cancels detached executions (with their
    closing events), flushes every observer, and closes the plugins in
    reverse order. An engine runs once.

    ``shutdown_timeout`` (seconds) bounds the cancelling and the flushing on
    close, as OpenTelemetry's ``shutdown(timeout)`` does: what an async
    observer has not handled by then is dropped, counted
    (``bus.statistics().dropped_by_reason["shutdown"]``) and logged.
    """

    def __init__(
        self,
        *,
        tools: Iterable[Tool[..., Any]] = (),
        plugins: Sequence[Plugin[Any]] = (),
        hooks: Sequence[HookMatcher] = (),
        pause_timeout: float | None = DEFAULT_PAUSE_TIMEOUT,
        keep_results: int = DEFAULT_KEEP_RESULTS,
        bus: EventBus | None = None,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    ) -> None:
        if pause_timeout is not None and pause_timeout <= 0:
            raise ValueError(f"pause_timeout must be positive or None, not {pause_timeout}")
        self.shutdown_timeout = check_timeout("shutdown_timeout", shutdown_timeout)
        """Seconds closing the engine waits for detached executions and observers."""
        for matcher in hooks:
            if not isinstance(matcher, HookMatcher):
                raise TypeError(
                    f"hooks must be HookMatcher instances, not {type(matcher).__name__}"
                )
        self._tools = ToolRegistry(list(tools))
        self._plugins = tuple(plugins)
        self._own_hooks = tuple(hooks)
        self.pause_timeout = pause_timeout
        self.bus: EventBus = bus if bus is not None else EventBus()
        """The engine's event bus: subscribe observers, or use ``bus.events`` with Rx."""
        self._runtime = Runtime(self.bus, self._tools, HookPlans(self._own_hooks), self.extension)
        self._keep_results = keep_results
        self._extensions: dict[str, Any] = {}
        self._runs: dict[str, DetachedRun] = {}
        self._tracked: dict[str, TrackedExecution] = {}  # open tracked roots (closed with us)
        self._open_ids: set[str] = set()  # every open tracked execution, children too
        self._closed_ids: OrderedDict[str, None] = OrderedDict()  # recent ones, not to reuse
        self._finished: OrderedDict[str, ExecutionResult[Any]] = OrderedDict()
        self._task_group: TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self._state = "new"

    # -- lifecycle ----------------------------------------------------------------

    async def __aenter__(self) -> ExecutionEngine:
        if self._state != "new":
            raise RuntimeError(f"this engine is {self._state}; an engine runs once")
        self._state = "starting"
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            self._stack = AsyncExitStack()
            await self._start_plugins(self._stack)
            self.bus._start(task_group)
        except BaseException as exc:
            self._state = "closed"
            with anyio.CancelScope(shield=True):
                if self._stack is not None:
                    await self._stack.aclose()
            task_group.cancel_scope.cancel()
            with suppress(BaseExceptionGroup):
                await task_group.__aexit__(None, None, None)
            raise exc  # not `from None`, which would drop a PluginError's cause
        self._state = "running"
        return self

    async def _start_plugins(self, stack: AsyncExitStack) -> None:
        seen: set[str] = set()
        for plugin in self._plugins:
            if not isinstance(plugin, Plugin):
                raise PluginError(f"not a plugin (use define_plugin): {plugin!r}")
            if plugin.id in seen:
                raise PluginError(f"two plugins have the id {plugin.id!r}", plugin_id=plugin.id)
            seen.add(plugin.id)
        extra_hooks: list[HookMatcher] = []
        for plugin in self._plugins:
            ext: Any = None
            try:
                if plugin.extension is not None:
                    context = PluginContext(
                        plugin_id=plugin.id,
                        logger=logging.getLogger(f"onlooker.plugins.{plugin.id}"),
                        tools=self._tools,
                        bus=self.bus,
                    )
                    ext = plugin.extension(context)
                    if hasattr(ext, "__aenter__") and hasattr(ext, "__aexit__"):
                        ext = await stack.enter_async_context(ext)
                self._extensions[plugin.id] = ext
                if plugin.observer is not None:
                    self.bus.subscribe(
                        plugin.observer(ext),
                        name=plugin.id,
                        overflow=plugin.overflow,
                        queue_size=plugin.queue_size,
                        stall_timeout=plugin.stall_timeout,
                    )
                if plugin.hooks is not None:
                    extra_hooks.extend(plugin.hooks(ext))
            except OnlookerError:
                raise  # already a clear, typed error (HistoryError naming the URL, ...)
            except Exception as exc:
                raise PluginError(
                    f"plugin {plugin.id!r} failed to start: {exc}", plugin_id=plugin.id
                ) from exc
        self._runtime.hooks.replace(self._own_hooks + tuple(extra_hooks))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return await self._exit(exc_type, exc, tb, self.shutdown_timeout)

    async def _exit(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        grace: float,
    ) -> bool:
        task_group = self._task_group
        assert task_group is not None, "__aexit__ without __aenter__"
        if self._state == "closed":  # aclose() inside the block closed it already
            return False
        self._state = "closing"
        close_error: BaseException | None = None
        try:
            await self._shut_down(grace)
        except BaseException as error:
            close_error = error
        self._state = "closed"
        cancelled = exc is not None and isinstance(exc, anyio.get_cancelled_exc_class())
        try:
            if exc is None or cancelled:
                await task_group.__aexit__(exc_type, exc, tb)
            else:
                await task_group.__aexit__(None, None, None)
        except BaseExceptionGroup as group:
            leaves = _leaves(group)
            if exc is not None and not cancelled:
                logger.error("engine task failed while the block raised %r", exc, exc_info=group)
                return False  # the body's own exception, unwrapped
            if len(leaves) == 1:
                raise leaves[0] from None
            raise
        if close_error is not None:
            if exc is not None and not cancelled:  # the block's own exception wins
                logger.error("closing the engine failed", exc_info=close_error)
                return False
            raise close_error
        return False

    async def aclose(self, *, shutdown_timeout: float | None = None) -> None:
        """Close the engine (as leaving ``async with`` does); closing twice is harmless.

        ``shutdown_timeout`` replaces the engine's own for this close.
        """
        if self._state in ("new", "closing", "closed"):
            return
        grace = (
            self.shutdown_timeout
            if shutdown_timeout is None
            else check_timeout("shutdown_timeout", shutdown_timeout)
        )
        await self._exit(None, None, None, grace)

    async def _shut_down(self, grace: float) -> None:
        """Cancel detached executions and flush the observers within ``grace`` seconds; close plugins.

        Shielded, so that a cancelled caller still gets the closing events
        out; bounded, so that a hung observer or program cannot hold it.
        """
        with anyio.CancelScope(shield=True):
            deadline = anyio.current_time() + grace
            with anyio.move_on_after(grace) as waited:
                self._finish_tracked()
                await self._cancel_detached()
            if waited.cancelled_caught:
                logger.error(
                    "closing the engine: detached executions still running after %g s "
                    "(shutdown_timeout); they are cancelled, observers may miss their end",
                    grace,
                )
            await self.bus._aclose(max(0.0, deadline - anyio.current_time()))
            if self._stack is not None:
                await self._stack.aclose()

    def _finish_tracked(self) -> None:
        for run in list(self._tracked.values()):
            run.finish_nowait("cancelled", error=ENGINE_CLOSED)

    async def _cancel_detached(self) -> None:
        for run in list(self._runs.values()):
            run.scope.cancel()
        for run in list(self._runs.values()):
            await run.wait_ended()

    def _require_running(self) -> TaskGroup:
        if self._state != "running" or self._task_group is None:
            raise RuntimeError(
                "the engine is not running: use `async with ExecutionEngine(...) as engine:`"
                if self._state == "new"
                else f"the engine is {self._state}"
            )
        return self._task_group

    # -- plugins -----------------------------------------------------------------

    def extension(self, plugin: Plugin[Ext]) -> Ext:
        """The extension that ``plugin`` built in this engine, typed as the plugin's ``Ext``."""
        if plugin.id not in self._extensions or plugin not in self._plugins:
            raise PluginError(
                f"plugin {plugin.id!r} is not installed in this engine", plugin_id=plugin.id
            )
        return self._extensions[plugin.id]  # type: ignore[no-any-return]

    def plugin(self, id: str) -> Any:
        """The extension of the plugin with this id (untyped; prefer :meth:`extension`)."""
        if id not in self._extensions:
            raise PluginError(f"no plugin with id {id!r} is installed", plugin_id=id)
        return self._extensions[id]

    @property
    def tools(self) -> ToolRegistry:
        """The engine's tools by name."""
        return self._tools

    # -- executing ---------------------------------------------------------------

    async def execute(
        self,
        program: Program[T],
        *,
        on_elicitation: ElicitationHandler | None = None,
        trigger: Trigger | str = "api",
        owner: str | None = None,
        input: JsonValue = None,
    ) -> ExecutionResult[T]:
        """Run ``program`` inline and return its result.

        Questions go to ``on_elicitation`` (declined without one). A failing
        program is a ``failed`` result; cancellation of the caller propagates
        after the closing events are emitted.
        """
        self._require_running()
        run = RunState(new_id(), mode="inline", on_elicitation=on_elicitation)
        return await self._run_execution(
            program,
            run,
            run.root_id,
            self._root_attribution(),
            as_trigger(trigger),
            owner=owner,
            input=input,
        )

    async def execute_with_pause(
        self,
        program: Program[T],
        *,
        trigger: Trigger | str = "api",
        owner: str | None = None,
        input: JsonValue = None,
    ) -> ExecutionResult[T] | PausedExecution:
        """Start ``program`` as a detached task; return at its first question or its end.

        The detached task keeps the observers in scope here, whoever resumes it.
        """
        task_group = self._require_running()
        run = DetachedRun(new_id(), pause_timeout=self.pause_timeout)
        self._runs[run.root_id] = run
        scoped = _observers.get()
        attribution = self._root_attribution()
        task_group.start_soon(
            self._run_detached,
            program,
            run,
            scoped,
            attribution,
            as_trigger(trigger),
            owner,
            input,
            name=f"onlooker execution {run.root_id}",
        )
        return await run.next_outcome()

    async def resume(
        self, execution_id: str, response: InteractionResponse
    ) -> ExecutionResult[Any] | PausedExecution:
        """Answer a paused execution; return at its next question or its end.

        An unknown id raises ``UnknownExecutionError``; a running one (or one
        another ``resume`` is answering) ``ExecutionNotPausedError``; a
        finished one returns its final result again.
        """
        if not isinstance(response, InteractionResponse):
            raise TypeError(
                f"response must be an InteractionResponse, not {type(response).__name__}"
            )
        run = self._runs.get(execution_id)
        if run is None:
            return self._finished_result(execution_id)
        if run.phase is not RunPhase.PAUSED or run.pending is None:
            raise ExecutionNotPausedError(
                f"execution {execution_id!r} is not paused (it is {run.phase.value})",
                execution_id=execution_id,
            )
        run.answering(response)
        return await run.next_outcome()

    async def cancel(self, execution_id: str) -> ExecutionResult[Any]:
        """Cancel a paused or running detached execution; return its final result."""
        run = self._runs.get(execution_id)
        if run is None:
            return self._finished_result(execution_id)
        run.scope.cancel()
        await run.wait_ended()
        assert run.result is not None  # _run_detached sets it before the end
        return run.result

    async def _spawn(
        self,
        program: Program[Any],
        run: RunState,
        attribution: Attribution,
        trigger: Trigger,
        input: JsonValue,
    ) -> ExecutionResult[Any]:
        return await self._run_execution(
            program, run, new_id(), attribution, trigger, owner=None, input=input
        )

    # -- tracked executions ------------------------------------------------------

    def track(
        self,
        program: str,
        *,
        trigger: Trigger | str = "external",
        input: JsonValue = None,
        owner: str | None = None,
        execution_id: str | None = None,
    ) -> TrackedExecution:
        """Track an execution whose tools another framework runs (an agent SDK, an MCP server).

        Returns a :class:`TrackedExecution`: ``async with run:`` (or
        ``await run.start()`` / ``await run.finish(...)``) brackets it, and
        ``await run.tool_started(...)`` runs onlooker's pre-hooks on each call
        and records it. Its events reach the observers in scope here.
        """
        self._require_running()
        if execution_id is not None:
            self._check_free(execution_id)
        return track(
            self._runtime,
            program,
            trigger=trigger,
            input=input,
            owner=owner,
            execution_id=execution_id,
            attribution=self._root_attribution(),
            scope=_observers.get(),
            on_start=self._tracked_started,
            on_close=self._tracked_closed,
        )

    def _tracked_started(self, run: TrackedExecution) -> None:
        """Before a tracked run (root or child) emits its start: its id must be free."""
        execution_id = run.execution_id
        if self._state != "running":
            raise TrackingError(
                f"cannot start tracked execution {execution_id!r}: the engine is {self._state}",
                execution_id=execution_id,
            )
        self._check_free(execution_id)
        self._open_ids.add(execution_id)
        if run.parent is None:
            self._tracked[execution_id] = run

    def _tracked_closed(self, run: TrackedExecution) -> None:
        self._open_ids.discard(run.execution_id)
        self._tracked.pop(run.execution_id, None)
        self._closed_ids[run.execution_id] = None
        while len(self._closed_ids) > self._keep_results:
            self._closed_ids.popitem(last=False)

    def _check_free(self, execution_id: str) -> None:
        """An execution id names one execution: not one running, nor one recently finished."""
        if execution_id in self._open_ids or execution_id in self._runs:
            problem = "is already used by a running execution"
        elif execution_id in self._closed_ids or execution_id in self._finished:
            problem = "was used by an execution that has finished"
        else:
            return
        raise TrackingError(f"execution id {execution_id!r} {problem}", execution_id=execution_id)

    def declare_tool(self, declaration: ToolDeclaration) -> None:
        """Tell onlooker what a tool it does not run does (``mutating``, file arguments).

        ``policies.require_intent()`` and the summary then interpret tracked
        calls of it like calls of an ``@tool``. Declaring the same thing twice
        is harmless; a conflicting declaration is a ``ValueError``.
        """
        self._tools.declare(declaration)

    def _finished_result(self, execution_id: str) -> ExecutionResult[Any]:
        result = self._finished.get(execution_id)
        if result is None:
            raise UnknownExecutionError(
                f"no execution with id {execution_id!r}", execution_id=execution_id
            )
        return result

    def _root_attribution(self) -> Attribution:
        current = _attribution.get()
        if (
            current.depth == 0
            and current.parent_execution_id is None
            and current.parent_tool_call_id is None
        ):
            return current
        return Attribution(
            task_id=current.task_id, phase=current.phase, intent_id=current.intent_id
        )

    async def _run_detached(
        self,
        program: Program[Any],
        run: DetachedRun,
        scoped: Any,
        attribution: Attribution,
        trigger: Trigger,
        owner: str | None,
        input: JsonValue,
    ) -> None:
        # The scope captured at execute_with_pause, whichever task resumes us.
        _observers.set(scoped)
        try:
            with run.scope:
                await self._run_execution(
                    program, run, run.root_id, attribution, trigger, owner=owner, input=input
                )
        finally:
            run.phase = RunPhase.FINISHED
            self._runs.pop(run.root_id, None)
            result = run.result or ExecutionResult(run.root_id, "cancelled")
            run.result = result
            self._finished[run.root_id] = result
            while len(self._finished) > self._keep_results:
                self._finished.popitem(last=False)
            run.deliver(result)
            run.end()

    async def _run_execution(
        self,
        program: Program[T],
        run: RunState,
        execution_id: str,
        attribution: Attribution,
        trigger: Trigger,
        *,
        owner: str | None,
        input: JsonValue,
    ) -> ExecutionResult[T]:
        name = (
            getattr(program, "__qualname__", None)
            or getattr(program, "__name__", None)
            or repr(program)
        )
        emitter = Emitter(self.bus, execution_id)
        ctx = ExecutionContext(
            self._runtime, run, emitter, self._spawn, attribution, name, trigger, input
        )
        attribution_token = _attribution.set(attribution)
        context_token = _current.set(ctx)
        call_token = _tool_call.set(None)
        began = perf_counter()
        try:
            try:
                emitter.execution_started(
                    program=name, trigger=trigger, owner=owner, input=snapshot(input)
                )
                if self.bus.congested:
                    await self.bus.wait_for_space()
                value = await program(ctx)
            except BaseException as exc:
                result: ExecutionResult[T] = ExecutionResult(
                    execution_id, _failure_status(exc, run), None, _error_of(exc, run), _ms(began)
                )
                if execution_id == run.root_id:
                    run.result = result
                _execution_finished(emitter, result)
                if not isinstance(exc, Exception):
                    raise
                return result
            if run.aborted is not None or run.expired:
                reason = run.aborted or ExecutionExpiredError(
                    "the execution expired", execution_id=run.root_id
                )
                result = ExecutionResult(
                    execution_id,
                    _failure_status(reason, run),
                    None,
                    _error_of(reason, run),
                    _ms(began),
                )
            else:
                result = ExecutionResult(execution_id, "completed", value, None, _ms(began))
            if execution_id == run.root_id:
                run.result = result
            _execution_finished(emitter, result)
            return result
        finally:
            _tool_call.reset(call_token)
            _current.reset(context_token)
            _attribution.reset(attribution_token)


def _execution_finished(emitter: Emitter, result: ExecutionResult[Any]) -> None:
    emitter.execution_finished(
        status=result.status,
        result=snapshot(result.value) if result.status == "completed" else None,
        error=result.error,
        duration_ms=result.duration_ms,
    )


def _failure_status(exc: BaseException, run: RunState) -> Any:
    if not isinstance(exc, Exception):
        return "cancelled"
    if run.expired and run.aborted is None:
        return "expired"
    return "failed"


def _error_of(exc: BaseException, run: RunState) -> Any:
    if (
        isinstance(exc, Exception)
        and run.aborted is not None
        and not isinstance(exc, HookAbortError)
    ):
        return error_info(run.aborted)  # a caught abort still decides the outcome
    return error_info(exc)


def _ms(began: float) -> float:
    return (perf_counter() - began) * 1000.0


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for item in group.exceptions:
        if isinstance(item, BaseExceptionGroup):
            leaves.extend(_leaves(item))
        elif not isinstance(item, anyio.get_cancelled_exc_class()):
            leaves.append(item)
    return leaves or list(group.exceptions)
