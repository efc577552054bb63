"""ExecutionEngine: runs programs, owns the bus, the plugins and detached executions.

The engine is the front door; its parts live beside it: running one
execution in ``_execution``, detached (pausable) executions in ``_pauses``,
starting the plugins in ``_install``, tracked executions' ids in ``_tracking``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Sequence
from contextlib import suppress
from time import perf_counter
from types import TracebackType
from typing import Any, Final, TypeVar

import anyio
from anyio.abc import TaskGroup
from pydantic import JsonValue

from ._bus import DEFAULT_SHUTDOWN_TIMEOUT, EventBus, check_timeout
from ._context import Program, _current
from ._deadlines import PauseDeadlines
from ._errors import NotRunningTrackingError, PluginError, TrackingError
from ._events import ErrorInfo, Trigger, new_id
from ._execution import child_runner, root_attribution, run_execution
from ._hooks import HookMatcher, HookPlans
from ._install import Teardowns, install_plugins
from ._interrupts import Interruption
from ._lifecycle import Runtime
from ._pauses import DetachedRuns
from ._plugin import Plugin
from ._results import (
    ElicitationHandler,
    ExecutionResult,
    InteractionResponse,
    PausedExecution,
    error_info,
)
from ._run import RunState
from ._scope import _observers
from ._tools import Tool, ToolDeclaration, ToolRegistry
from ._tracked import TrackedExecution
from ._tracking import ExecutionIds, TrackedRuns, track
from ._triggers import as_owner, as_trigger

__all__ = ["ExecutionEngine"]

logger: Final = logging.getLogger("onlooker")

T = TypeVar("T")
Ext = TypeVar("Ext")

DEFAULT_PAUSE_TIMEOUT: Final = 3600.0
DEFAULT_KEEP_RESULTS: Final = 1024


class EnginePhase(enum.Enum):
    """Where an engine stands: ``NEW`` → ``STARTING`` → ``RUNNING`` → ``CLOSING`` → ``CLOSED``.

    An engine runs once: it never goes back. A failed start goes straight
    to ``CLOSED``.
    """

    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


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
        if pause_timeout is not None:
            pause_timeout = check_timeout("pause_timeout", pause_timeout, unbounded=True)
        if isinstance(keep_results, bool) or not isinstance(keep_results, int):
            raise TypeError(f"keep_results must be an int, not {type(keep_results).__name__}")
        if keep_results < 0:
            raise ValueError(f"keep_results must be 0 or more, not {keep_results}")
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
        self._extensions: dict[str, Any] = {}
        # The ids of inline roots and of every child: detached and tracked runs keep their own.
        self._native = ExecutionIds(keep_closed=keep_results)
        self._spawn = child_runner(self._runtime, self._native)
        # One timer for the pauses of both: detached questions, and tracked runs an adapter paused
        deadlines = PauseDeadlines()
        self._detached = DetachedRuns(
            self._runtime, self._spawn, keep_results=keep_results, deadlines=deadlines
        )
        self._tracked = TrackedRuns(keep_closed=keep_results, deadlines=deadlines)
        # inline executions running: closing cancels them
        self._inline: set[anyio.CancelScope] = set()
        self._inline_gone: anyio.Event | None = None  # set when the last one ends, for the close
        self._task_group: TaskGroup | None = None
        self._owner: int | None = None  # the task that entered: only it can leave the task group
        self._left = False  # the task group was left
        self._closed: anyio.Event | None = None  # set once closed, for a second closer to wait on
        self._stack: Teardowns | None = None
        self._phase = EnginePhase.NEW

    # -- lifecycle ----------------------------------------------------------------

    async def __aenter__(self) -> ExecutionEngine:
        if self._phase is not EnginePhase.NEW:
            raise RuntimeError(f"this engine is {self._phase.value}; an engine runs once")
        self._phase = EnginePhase.STARTING
        self._owner = anyio.get_current_task().id
        self._closed = anyio.Event()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            self._stack = Teardowns()
            extra_hooks = await install_plugins(
                self._plugins,
                self._extensions,
                tools=self._tools,
                bus=self.bus,
                stack=self._stack,
                shutdown_timeout=self.shutdown_timeout,
            )
            self._runtime.hooks.replace(self._own_hooks + tuple(extra_hooks))
            self.bus._start(task_group)
            self._detached.open(task_group)
        except BaseException as exc:
            self._phase = EnginePhase.CLOSED
            self._left = True  # a later aclose() has nothing to close or leave
            self._closed.set()
            with anyio.CancelScope(shield=True):
                if self._stack is not None:
                    await self._stack.aclose()
            task_group.cancel_scope.cancel()
            with suppress(BaseExceptionGroup):
                await task_group.__aexit__(None, None, None)
            raise exc  # not `from None`, which would drop a PluginError's cause
        self._phase = EnginePhase.RUNNING
        return self

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
        """Close the engine, unless another task is closing it or did; then, in the task
        that entered the engine, leave its task group (only that task can)."""
        task_group, closed = self._task_group, self._closed
        assert task_group is not None and closed is not None, "__aexit__ without __aenter__"
        close_error: BaseException | None = None
        if self._phase is EnginePhase.RUNNING:
            self._phase = EnginePhase.CLOSING
            try:
                await self._shut_down(grace)
            except BaseException as error:
                close_error = error
            self._phase = EnginePhase.CLOSED
            closed.set()
        elif self._phase is EnginePhase.CLOSING:  # another task is closing it: wait for its end
            with anyio.CancelScope(shield=True):
                await closed.wait()
        if self._left or anyio.get_current_task().id != self._owner:
            if close_error is not None:
                raise close_error
            return False  # the task that entered leaves the task group when it leaves `async with`
        self._left = True
        cancelled = exc is not None and isinstance(exc, anyio.get_cancelled_exc_class())
        crashed = close_error is not None and close_error is self.bus._crashed
        if cancelled and close_error is not None and not crashed:  # the cancellation goes on
            logger.error(
                "closing the engine failed while its block was cancelled", exc_info=close_error
            )
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

        Any task may close it: a task other than the one that entered the
        engine closes it (detached executions cancelled, observers flushed,
        plugins closed) and returns, and the engine's task group is left
        when that task leaves ``async with``. Closing from inside one of the
        engine's own executions, which closing waits for, is a
        ``RuntimeError``. ``shutdown_timeout`` replaces the engine's own for
        this close: the task that entered the engine leaves its task group
        here, so it bounds its close with that, never inside a cancel scope
        opened since it entered (reliability.md).
        """
        if self._phase is EnginePhase.NEW:
            return
        grace = (
            self.shutdown_timeout
            if shutdown_timeout is None
            else check_timeout("shutdown_timeout", shutdown_timeout)
        )
        if self._phase is EnginePhase.RUNNING and self._runs_here():
            raise RuntimeError(
                "engine.aclose() was called from inside one of the engine's own "
                "executions, which closing the engine waits for: close it from another task"
            )
        await self._exit(None, None, None, grace)

    async def _shut_down(self, grace: float) -> None:
        """Cancel detached executions and flush the observers within ``grace`` seconds; close plugins.

        Shielded, so that a cancelled caller still gets the closing events
        out; bounded, so that a hung observer or program cannot hold it.
        """
        with anyio.CancelScope(shield=True):
            deadline = anyio.current_time() + grace
            # A sync observer's BaseException on a closing event goes to the caller, but
            # only once the close is done: left half-way, the close would never end.
            interrupted: BaseException | None = None
            try:
                self._tracked.close_all()
            except BaseException as exc:
                interrupted = exc
            try:
                await self._close_steps(grace, deadline)
            except BaseException as exc:
                if interrupted is not None:  # not lost without a word
                    logger.error(
                        "closing the engine: an observer raised %r on a closing event; "
                        "the close raises %r instead",
                        interrupted,
                        exc,
                        exc_info=interrupted,
                    )
                raise
            if interrupted is not None:
                raise interrupted

    async def _close_steps(self, grace: float, deadline: float) -> None:
        """Cancel the executions, flush the observers, close the plugins (see _shut_down)."""
        # A Ctrl-C meanwhile: raised once the close is done.
        interruption = Interruption("the executions it cancels are still waited for")
        try:
            with anyio.move_on_after(grace) as waited:
                ended = await interruption.through(self._cancel_executions, waited)
            if waited.cancelled_caught or not ended:
                logger.error(
                    "closing the engine: detached executions still running after %g s "
                    "(shutdown_timeout); they are cancelled, observers may miss their end",
                    grace,
                )
        finally:  # interrupted twice: the observers and plugins are closed all the same
            try:
                await self.bus._aclose(max(0.0, deadline - anyio.current_time()))
            except BaseException as exc:
                if not interruption.take(exc):  # one the flush took: it too wins below
                    raise
            finally:
                try:
                    if self._stack is not None:
                        await self._stack.aclose()
                finally:
                    interruption.raise_caught()  # it wins over a plugin's failing close

    async def _cancel_executions(self) -> None:
        await self._detached.cancel_all()
        await self._cancel_inline()

    def _runs_here(self) -> bool:
        """Whether the calling task is inside one of this engine's executions."""
        current = _current.get()
        return current is not None and current._runtime is self._runtime

    async def _cancel_inline(self) -> None:
        """Cancel the inline executions other tasks still run, and wait for their end."""
        if not self._inline:
            return
        self._inline_gone = anyio.Event()
        for scope in self._inline:
            scope.cancel()
        await self._inline_gone.wait()

    def _require_running(self) -> TaskGroup:
        if self._phase is not EnginePhase.RUNNING or self._task_group is None:
            raise RuntimeError(
                "the engine is not running: use `async with ExecutionEngine(...) as engine:`"
                if self._phase is EnginePhase.NEW
                else f"the engine is {self._phase.value}"
            )
        return self._task_group

    # -- plugins -----------------------------------------------------------------

    def extension(self, plugin: Plugin[Ext]) -> Ext:
        """The extension that ``plugin`` built in this engine, typed as the plugin's ``Ext``."""
        given: object = plugin  # typed as a Plugin; checked, for untyped callers
        if not isinstance(given, Plugin):
            hint = f": for an id, use engine.plugin({given!r})" if isinstance(given, str) else ""
            raise TypeError(f"extension() takes a Plugin, not {type(given).__name__}{hint}")
        if plugin not in self._plugins:
            raise PluginError(
                f"plugin {plugin.id!r} is not installed in this engine", plugin_id=plugin.id
            )
        if plugin.id not in self._extensions:
            raise PluginError(
                f"plugin {plugin.id!r} has no extension yet: the engine is {self._phase.value}"
                " (use it inside `async with engine:`)",
                plugin_id=plugin.id,
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
        began = perf_counter()
        interrupted: ErrorInfo | None = None
        with anyio.CancelScope() as closing:  # cancelled only by the engine's close
            self._inline.add(closing)
            self._native.opened(run.root_id)
            try:
                return await run_execution(
                    self._runtime,
                    self._spawn,
                    program,
                    run,
                    run.root_id,
                    root_attribution(),
                    as_trigger(trigger),
                    owner=as_owner(owner),
                    input=input,
                )
            except anyio.get_cancelled_exc_class() as exc:
                interrupted = error_info(exc)
                raise
            finally:
                self._native.closed(run.root_id)
                self._inline.discard(closing)
                if not self._inline and self._inline_gone is not None:
                    self._inline_gone.set()
        # The engine closed under it (from another task): recorded ``cancelled``, and so is the result.
        return ExecutionResult(
            run.root_id, "cancelled", None, interrupted, (perf_counter() - began) * 1000
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
        return await self._detached.start(
            task_group,
            program,
            pause_timeout=self.pause_timeout,
            attribution=root_attribution(),
            trigger=as_trigger(trigger),
            owner=as_owner(owner),
            input=input,
        )

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
        return await self._detached.resume(execution_id, response)

    async def cancel(self, execution_id: str) -> ExecutionResult[Any]:
        """Cancel a paused or running detached execution; return its final result."""
        return await self._detached.cancel(execution_id)

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
        try:
            self._require_running()
        except RuntimeError as exc:  # no run can start: misuse of tracking (tracked.md)
            raise NotRunningTrackingError(str(exc), execution_id=execution_id or "") from None
        if execution_id is not None:
            self._check_free(execution_id)
        return track(
            self._runtime,
            program,
            trigger=trigger,
            input=input,
            owner=owner,
            execution_id=execution_id,
            attribution=root_attribution(),
            scope=_observers.get(),
            on_start=self._tracked_started,
            on_close=self._tracked.closed,
        )

    def _tracked_paused(self, run: TrackedExecution) -> None:
        """An adapter's tracked run now waits for a person's answers (its framework paused
        it): unless :meth:`_tracked_resumed` comes first, it expires after ``pause_timeout``."""
        self._tracked.paused(run, self.pause_timeout)

    def _tracked_resumed(self, run: TrackedExecution) -> None:
        """The paused tracked ``run`` goes on: it no longer expires."""
        self._tracked.resumed(run)

    def _tracked_started(self, run: TrackedExecution) -> None:
        """Before a tracked run (root or child) emits its start: its id must be free."""
        execution_id = run.execution_id
        if self._phase is not EnginePhase.RUNNING:
            raise TrackingError(
                f"cannot start tracked execution {execution_id!r}: "
                f"the engine is {self._phase.value}",
                execution_id=execution_id,
            )
        self._check_free(execution_id)
        self._tracked.opened(run)

    def _check_free(self, execution_id: str) -> None:
        """An execution id names one execution: not one running, nor one recently finished."""
        runs = (self._tracked, self._detached, self._native)
        if any(ids.is_open(execution_id) for ids in runs):
            problem = "is already used by a running execution"
        elif any(ids.has_finished(execution_id) for ids in runs):
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


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for item in group.exceptions:
        if isinstance(item, BaseExceptionGroup):
            leaves.extend(_leaves(item))
        elif not isinstance(item, anyio.get_cancelled_exc_class()):
            leaves.append(item)
    return leaves or list(group.exceptions)
