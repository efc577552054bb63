"""Ingest: an SDK span processor that turns GenAI spans into tracked executions (watch only).

The mapping and the threading model are in the package docstring. Two
halves: ``on_start`` / ``on_end`` (any thread) copy what they need from a
span into an ordered queue under a lock (the ops of ``_ops``); one drain
task on the engine's event loop applies the queue to ``engine.track(...)``
runs, in order.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from onlooker import ErrorInfo, ExecutionEngine, OnlookerError, Trigger

from ._conventions import SCOPE_NAME, SpanProcessor, logger
from ._ops import (
    AgentStart,
    End,
    Op,
    OpenSpan,
    RunKey,
    Shutdown,
    ToolStart,
    TraceEnd,
    agent_start,
    complete,
    end_of,
    opened,
    role_of,
    tool_start,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, Span

    from onlooker import TrackedExecution, TrackedToolCall

__all__ = ["OnlookerSpanProcessor"]


class OnlookerSpanProcessor(SpanProcessor):
    """An OpenTelemetry SDK span processor that records GenAI tool spans as tracked executions.

    >>> async with onlooker.ExecutionEngine(plugins=[history.plugin()]) as engine:
    ...     processor = OnlookerSpanProcessor(engine)
    ...     provider.add_span_processor(processor)   # the framework's TracerProvider
    ...     await agent.run("...")                    # any GenAI-instrumented framework
    ...     await processor.flush()

    Build it on the engine's event loop (inside ``async with engine``); its
    runs report to the ``onlooker.observing()`` scope in effect there.
    ``trigger`` is the trigger kind of the runs it tracks. **Watch only**:
    onlooker's pre-hooks are consulted and their verdict recorded, but the
    framework runs the call regardless — nothing is enforced.
    """

    def __init__(self, engine: ExecutionEngine, *, trigger: str = "opentelemetry") -> None:
        self._engine = engine
        self._trigger = trigger
        # Raises NoEventLoopError when built outside the engine's event loop.
        self._token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        self._context = contextvars.copy_context()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # Under the lock, from any thread:
        self._spans: dict[int, OpenSpan] = {}
        self._open_in_trace: dict[int, int] = {}
        self._call_ids: dict[RunKey, set[str]] = {}
        self._ops: deque[Op] = deque()
        self._pending = 0
        self._draining = False
        self._wake_scheduled = False
        self._closed = False
        # On the loop thread only:
        self._runs: dict[RunKey, TrackedExecution] = {}
        self._calls: dict[int, TrackedToolCall] = {}
        self._call_runs: dict[int, RunKey] = {}
        """The run of each open call (by its span id)."""
        self._busy: dict[RunKey, int] = {}
        """Per run, its open calls and its child runs not yet finished: a run whose agent
        span ended waits for them (a count: searching the open calls was linear a span)."""
        self._parents: dict[RunKey, RunKey] = {}
        """The parent of each child run not yet finished."""
        self._closing: dict[RunKey, tuple[TrackedExecution, End, bool]] = {}
        """Runs whose agent span ended before some of their tool spans: the span's end,
        and whether a call that ended since was cut short (a cancellation)."""
        self._idle_events: list[anyio.Event] = []
        self._task: asyncio.Task[None] | None = None

    # -- SpanProcessor: any thread, never blocks the app, never raises into it ---------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Remember the span; queue an execution's or a tool call's start."""
        try:
            self._on_start(span)
        except Exception:
            logger.exception("OnlookerSpanProcessor.on_start failed on span %r", span.name)

    def on_end(self, span: ReadableSpan) -> None:
        """Queue the tool call's or the execution's end."""
        try:
            self._on_end(span)
        except Exception:
            logger.exception("OnlookerSpanProcessor.on_end failed on span %r", span.name)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until every queued span reached the engine; ``False`` on timeout.

        On the engine's own thread it cannot wait (the loop does that work):
        it says whether the queue is empty; ``await processor.flush()`` there.
        """
        with self._idle:
            if threading.get_ident() == self._loop_thread:
                return self._pending == 0
            return self._idle.wait_for(lambda: self._pending == 0, timeout_millis / 1000)

    def shutdown(self) -> None:
        """Stop taking spans; every run still open finishes ``cancelled``.

        From another thread it waits (up to 30 s) until the engine has that.
        """
        try:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                busy = bool(self._spans or self._pending)
                wake = False
                for span in self._spans.values():  # open calls are recorded, then cancelled
                    wake = self._start_waiting(span) or wake
                self._call_ids.clear()
                wake = (self._enqueue(Shutdown()) or wake) if busy else wake
            self._wake_from_any_thread(wake)
            if busy and threading.get_ident() != self._loop_thread:
                self.force_flush()
        except Exception:
            logger.exception("OnlookerSpanProcessor.shutdown failed")

    async def flush(self) -> None:
        """Wait, on the engine's loop, until every span queued so far reached the engine."""
        while True:
            with self._lock:
                if self._pending == 0:
                    return
            event = anyio.Event()
            self._idle_events.append(event)
            await event.wait()

    # -- span -> op, under the lock ------------------------------------------------------

    def _on_start(self, span: Span) -> None:
        scope = span.instrumentation_scope
        if self._closed or (scope is not None and scope.name == SCOPE_NAME):
            return  # onlooker's own exported spans are not tool calls to track again
        context = span.get_span_context()
        span_id, trace_id = context.span_id, context.trace_id
        attributes = span.attributes or {}
        role = role_of(span.name, attributes)
        parent = span.parent
        with self._lock:
            above = self._spans.get(parent.span_id) if parent is not None else None
            if above is not None and above.trace_id != trace_id:
                above = None
            this = opened(role, span.name, (span_id, trace_id), above)
            self._spans[span_id] = this
            self._open_in_trace[trace_id] = self._open_in_trace.get(trace_id, 0) + 1
            wake = False
            if role == "agent":
                call = above.call if above is not None else None
                if call is not None:  # the child names its parent call: it must have started
                    wake = self._start_waiting(call)
                wake = self._enqueue(agent_start(this, span.name, attributes, above)) or wake
            elif role == "tool":
                if complete(attributes):
                    wake = self._start_call(this, span.name, attributes)
                else:  # recorded when it ends, or when an agent starts inside it
                    this.waiting = span
        self._wake_from_any_thread(wake)

    def _on_end(self, span: ReadableSpan) -> None:
        context = span.get_span_context()
        if context is None:
            return
        with self._lock:
            known = self._spans.pop(context.span_id, None)
            if known is None:  # started before this processor was added, or one of ours
                return
            wake = False
            if not self._closed:
                wake = self._end_span(known, span)
            left = self._open_in_trace.get(known.trace_id, 1) - 1
            if left > 0:
                self._open_in_trace[known.trace_id] = left
            else:
                self._open_in_trace.pop(known.trace_id, None)
                self._call_ids.pop(("trace", known.trace_id), None)
                if not self._closed:
                    wake = self._enqueue(TraceEnd(known.trace_id)) or wake
        self._wake_from_any_thread(wake)

    def _end_span(self, known: OpenSpan, span: ReadableSpan) -> bool:
        """Queue a span's end (the lock held), read from its final attributes; whether to wake."""
        attributes = span.attributes or {}
        if known.role is None and role_of(span.name, attributes) == "tool":
            known.role = "tool"  # a tool only from its final attributes: recorded whole, now
        if known.role is None:
            return False
        wake = False
        if known.role == "tool" and known.tool_call_id is None:
            wake = self._start_call(known, span.name, attributes)
        elif known.role == "agent":
            self._call_ids.pop(("agent", known.span_id), None)
        return self._enqueue(end_of(known.role, known.span_id, span)) or wake

    def _start_call(self, call: OpenSpan, name: str, attributes: Mapping[str, object]) -> bool:
        """Queue a tool span's start (the lock held); whether a drain task must be started."""
        run = call.run = call.run or ("trace", call.trace_id)
        used = self._call_ids.setdefault(run, set())
        return self._enqueue(tool_start(call, run, name, attributes, used))

    def _start_waiting(self, call: OpenSpan) -> bool:
        """Queue the start of a tool span still waiting for its attributes, with those it has now."""
        waiting = call.waiting
        if waiting is None:
            return False
        return self._start_call(call, waiting.name, waiting.attributes or {})

    def _enqueue(self, op: Op) -> bool:
        """Queue ``op`` (the lock held); whether a drain task must be started."""
        self._ops.append(op)
        self._pending += 1
        if self._draining or self._wake_scheduled:
            return False
        self._wake_scheduled = True
        return True

    # -- onto the loop -------------------------------------------------------------------

    def _wake_from_any_thread(self, wake: bool) -> None:
        if not wake:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake()
            return
        try:  # loop.call_soon_threadsafe on asyncio, TrioToken.run_sync_soon on trio
            self._token.backend_class.run_sync_soon(self._wake, (), self._token.native_token)
        except Exception:
            self._drop_all("the engine's event loop is closed")

    def _wake(self) -> None:
        """On the loop thread: start the drain task unless one is running."""
        with self._lock:
            self._wake_scheduled = False
            if self._draining or not self._ops:
                return
            self._draining = True
        try:
            self._spawn(self._drain)
        except Exception as exc:  # no running loop any more (interpreter exit)
            with self._lock:
                self._draining = False
            self._drop_all(f"its drain task could not start ({exc})")

    def _spawn(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        # A task of its own, in the context the processor was built in: anyio has
        # no detached spawn, so each backend's own (the engine's task group is private).
        native = self._token.native_token
        context = self._context.copy()
        if isinstance(native, asyncio.AbstractEventLoop):
            coroutine = fn()
            try:
                self._task = native.create_task(coroutine, context=context)
            except BaseException:
                coroutine.close()  # a closed loop: never started, not "never awaited"
                raise
        else:
            import trio

            trio.lowlevel.spawn_system_task(fn, context=context)

    def _drop_all(self, why: str) -> None:
        with self._idle:
            dropped = len(self._ops)
            self._pending -= dropped
            self._ops.clear()
            self._wake_scheduled = False
            self._idle.notify_all()
        if dropped:
            logger.warning("OnlookerSpanProcessor dropped %d span(s): %s", dropped, why)

    async def _drain(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._ops:
                        # In the section that finds the queue empty: a span queued
                        # after it sees no drain task, so it schedules a new one.
                        self._draining = False
                        break
                    op = self._ops.popleft()
                try:
                    await self._apply(op)
                except OnlookerError as exc:  # the engine refused it (closed, finished run)
                    logger.warning("OnlookerSpanProcessor could not record %r: %s", op, exc)
                except Exception:
                    logger.exception("OnlookerSpanProcessor could not record %r", op)
                finally:
                    with self._idle:
                        self._pending -= 1
                        if self._pending == 0:
                            self._idle.notify_all()
        except BaseException:  # cancelled: the next span starts a new drain task
            with self._lock:
                self._draining = False
            raise
        finally:
            events, self._idle_events = self._idle_events, []
            for event in events:
                event.set()

    # -- op -> tracked execution, on the loop ---------------------------------------------

    async def _apply(self, op: Op) -> None:
        if isinstance(op, ToolStart):
            await self._tool_start(op)
        elif isinstance(op, End):
            await self._end(op)
        elif isinstance(op, AgentStart):
            await self._agent_start(op)
        elif isinstance(op, TraceEnd):
            run = self._runs.pop(("trace", op.trace_id), None)
            if run is not None:
                await run.finish(status="completed")
        else:
            runs = [*self._runs.values(), *(run for run, _, _ in self._closing.values())]
            self._runs.clear()
            self._closing.clear()
            self._calls.clear()
            self._call_runs.clear()
            self._busy.clear()
            self._parents.clear()
            for run in reversed(runs):  # children before their parents
                await run.finish(status="cancelled", error="the span processor was shut down")

    def _trigger_of(self, trace_id: int, span_id: int) -> Trigger:
        return Trigger(
            kind=self._trigger,
            metadata={"trace_id": f"{trace_id:032x}", "span_id": f"{span_id:016x}"},
        )

    def _track(self, program: str, trigger: Trigger) -> TrackedExecution | None:
        try:
            return self._engine.track(program, trigger=trigger)
        except RuntimeError as exc:  # the engine has closed: stop taking spans, say so once
            with self._lock:
                already, self._closed = self._closed, True
            if not already:
                logger.warning("OnlookerSpanProcessor stops recording: %s", exc)
            return None

    async def _agent_start(self, op: AgentStart) -> None:
        trigger = self._trigger_of(op.trace_id, op.span_id)
        parent = self._runs.get(op.parent_run) if op.parent_run is not None else None
        if parent is None:
            run = self._track(op.program, trigger)
            if run is None:
                return
        else:
            run = parent.child(
                op.program, parent_tool_call_id=op.parent_tool_call_id, trigger=trigger
            )
            assert op.parent_run is not None
            self._parents[("agent", op.span_id)] = op.parent_run
            self._busy[op.parent_run] = self._busy.get(op.parent_run, 0) + 1
        self._runs[("agent", op.span_id)] = run
        await run.start()

    async def _tool_start(self, op: ToolStart) -> None:
        run = self._runs.get(op.run)
        if run is None:
            if op.run[0] == "agent":  # not recorded (see the log), or ended before this start
                logger.warning(
                    "OpenTelemetry ingest: tool call %s (%r) is not recorded: its agent span's "
                    "run was not recorded, or had ended before the call's span said its name "
                    "and id",
                    op.tool_call_id,
                    op.tool,
                )
                return
            run = self._track(op.root_name, self._trigger_of(op.trace_id, op.span_id))
            if run is None:
                return
            self._runs[op.run] = run
            await run.start()
        call = await run.tool_started(op.tool, op.args, tool_call_id=op.tool_call_id)
        if call.allowed:
            self._calls[op.span_id] = call
            self._call_runs[op.span_id] = op.run
            self._busy[op.run] = self._busy.get(op.run, 0) + 1
            return
        logger.warning(
            "onlooker refused tool %r (call %s: %s) but OpenTelemetry ingest is watch-only: "
            "the framework runs it anyway; govern it with the framework's own adapter",
            op.tool,
            op.tool_call_id,
            call.reason,
        )

    async def _end(self, op: End) -> None:
        if op.role == "tool":
            call = self._calls.pop(op.span_id, None)
            key = self._call_runs.pop(op.span_id, None)
            if call is not None and not call.done and not op.deferred:
                if op.error is not None:
                    await call.failed(_error(op), duration_ms=op.duration_ms)
                else:
                    await call.finished(op.result, duration_ms=op.duration_ms)
            # (a deferred call did not run: the run's end closes it cancelled)
            if key is not None:
                if key in self._closing and op.interrupt is not None:
                    waiting, agent_end, _ = self._closing[key]
                    self._closing[key] = (waiting, agent_end, True)
                await self._done_with(key)
            return
        agent: RunKey = ("agent", op.span_id)
        run = self._runs.pop(agent, None)
        if run is None:
            return
        if self._busy.get(agent, 0):
            # Its span ended before some of its tool spans (PydanticAI ends an agent span
            # it cancels before the tool span the cancellation cuts short): the run ends
            # when they have, with their real outcomes.
            # A child run still open (an agent inside one of its calls) is waited for too.
            self._closing[agent] = (run, op, False)
            return
        await self._finish(run, op, cut=False)
        await self._child_finished(agent)

    async def _done_with(self, key: RunKey) -> None:
        """One open call or child of ``key`` is done: a run whose agent span ended and
        that waits for nothing more finishes, and tells its parent."""
        left = self._busy.get(key, 0) - 1
        if left > 0:
            self._busy[key] = left
            return
        self._busy.pop(key, None)
        closing = self._closing.pop(key, None)
        if closing is not None:
            waiting, agent_end, cut = closing
            await self._finish(waiting, agent_end, cut=cut)
            await self._child_finished(key)

    async def _child_finished(self, key: RunKey) -> None:
        parent = self._parents.pop(key, None)
        if parent is not None:
            await self._done_with(parent)

    async def _finish(self, run: TrackedExecution, op: End, *, cut: bool) -> None:
        """Finish an agent's run from its span's end; ``cut``: a call in it was cancelled
        after the span ended (the run was cut short, though its span says nothing)."""
        if op.error is None and cut:
            await run.finish(
                status="cancelled",
                error=ErrorInfo(
                    type="Cancelled",
                    message="a tool call was cancelled after its agent span ended",
                    cause="interrupt",
                ),
            )
        elif op.error is not None and op.interrupt is not None:
            await run.finish(status="cancelled", error=_error(op))
        elif op.error is not None:
            await run.finish(status="failed", error=_error(op))
        else:
            await run.finish(status="completed")


def _error(op: End) -> str | ErrorInfo:
    """A span's error as a call or run records it, typed by the span's ``error.type`` (or its
    exception event's type); a cancellation as one (``cancelled``)."""
    message = op.error or "error"
    if op.interrupt is not None:
        return ErrorInfo(type=op.interrupt, message=message, cause="interrupt")
    if op.error_type:
        return ErrorInfo(type=op.error_type, message=message, cause="failure")
    return message
