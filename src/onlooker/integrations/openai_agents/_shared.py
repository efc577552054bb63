"""What the run hooks, the guardrail and the tracing processor built on one engine share.

The runs and calls each knows of, found again from the SDK's own objects
(its usage object, its ``ToolContext``, its spans), and the tasks the
processor defers onto the engine's loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final
from weakref import ref

from agents import Agent, RunContextWrapper
from agents.exceptions import AgentsException
from agents.tool import default_tool_timeout_error_message
from agents.tool_context import ToolContext
from agents.tracing import (
    AgentSpanData,
    FunctionSpanData,
    Span,
    get_current_span,
    get_current_trace,
)
from agents.tracing.traces import NoOpTrace, Trace

from onlooker import ErrorInfo, HookAbortError

from .._json import json_copy
from .._per_engine import per_engine

if TYPE_CHECKING:
    from onlooker import ExecutionEngine, ExecutionStatus, TrackedExecution, TrackedToolCall

__all__ = [
    "CANCELLED",
    "CURRENT",
    "Approval",
    "Call",
    "Run",
    "State",
    "arguments",
    "awaiting_approval",
    "cancelling",
    "guarded",
    "logger",
    "raised",
    "span_error",
    "span_failure",
    "state_of",
]

logger: Final = logging.getLogger("onlooker.integrations.openai_agents")

_TRIGGER: Final = "openai-agents"
_NO_OP_SPAN: Final = "no-op"  # the id the SDK gives every span while tracing is disabled

CANCELLED: Final = ErrorInfo(
    type="Cancelled", message="the OpenAI Agents SDK cancelled the call", cause="interrupt"
)
"""What a call the SDK cancelled closes with (``call.failed`` records it ``cancelled``)."""

REJECTED: Final = ErrorInfo(
    type="ToolApprovalRejected", message="a person rejected the call", cause="failure"
)
"""What a call the pre-hooks allowed before the SDK asked for approval closes with when the
person rejects it (the SDK then never runs the tool, its guardrails or its hooks)."""


class Call:
    """One tool call onlooker tracks, and what ties it to the SDK's objects."""

    __slots__ = ("awaiting", "call", "context", "run", "span_id", "tool_name")

    def __init__(
        self,
        run: Run,
        call: TrackedToolCall,
        context: RunContextWrapper[Any] | None,
        tool_name: str,
        span: Span[Any] | None,
    ) -> None:
        self.run = run
        self.call = call
        self.context = context  # the ToolContext the guardrail and the tool hooks both get
        self.tool_name = tool_name
        self.span_id = _span_id(span) if span is not None else None
        self.awaiting = False  # allowed by the pre-hooks, waiting for a person's approval


class Approval:
    """A call the SDK asks a person to approve (``needs_approval``): the interaction that
    records the question, and the call if the guardrail opened it before the SDK asked."""

    __slots__ = ("entry", "interaction_id", "tool_name")

    def __init__(self, tool_name: str, interaction_id: str, entry: Call | None) -> None:
        self.tool_name = tool_name
        self.interaction_id = interaction_id
        self.entry = entry


class Run:
    """One ``Runner.run``: its tracked execution and its open calls."""

    __slots__ = (
        "aborted",
        "agent",
        "agent_span_id",
        "asked",
        "calls",
        "handing_off",
        "handoff",
        "key",
        "local",
        "opened",
        "output",
        "parent",
        "requested",
        "state",
        "trace",
        "trace_id",
        "track",
        "turn_error",
    )

    def __init__(
        self,
        state: State,
        key: tuple[int, int],
        track: TrackedExecution,
        agent: Agent[Any],
        parent: Call | None,
    ) -> None:
        self.state = state
        self.key = key
        self.track = track
        self.parent = parent  # the tool call this run runs in (an agent used as a tool)
        self.agent = agent  # the agent whose `on_agent_end` finishes the run
        self.agent_span_id: str | None = None
        self.trace_id: str | None = None  # the agent span's: the next agent's span shares it
        self.trace: Trace | None = None  # the trace it began in: a resume of its state runs in it
        self.handoff = False
        self.handing_off: str | None = None  # the span of the agent that handed off
        self.aborted = False  # a pre-hook's ABORT: every later call of the run is refused
        self.calls: dict[str, Call] = {}  # open function-tool calls by the SDK's call id
        self.local: dict[int, list[Call]] = {}  # open calls of id-less local tools, by tool
        # The final output on_agent_end saw, held until the agent span ends: the SDK runs
        # the output guardrails after that hook, and a tripwire is only on the span.
        self.output: tuple[object] | None = None
        # A turn span's error (an input guardrail's tripwire): its agent span carries none.
        self.turn_error: str | None = None
        # The function calls of the model's last response (call id -> tool name), and those
        # onlooker saw: one neither the guardrail nor the hooks saw is awaiting approval.
        self.requested: dict[str, str] = {}
        self.opened: set[str] = set()
        self.asked: dict[str, Approval] = {}  # the approvals recorded as interactions


# The call whose tool is running: the guardrail sets it in the task the SDK runs
# that tool in, so the tool's own hooks, and any `Runner.run` inside the tool
# (an agent used as a tool), see it; sibling calls and the run loop do not.
CURRENT: ContextVar[Call | None] = ContextVar("onlooker_openai_agents_call", default=None)


class State:
    """What the hooks, the guardrail and the processor built on one engine share."""

    def __init__(self, engine: ExecutionEngine) -> None:
        # Weak: the entry points hold the engine strongly; this state is stored on it.
        self._engine = ref(engine)
        self.runs: dict[tuple[int, int], Run] = {}
        self.pinned: dict[int, object] = {}  # keeps each keyed usage alive, so ids stay unique
        self.span_calls: dict[str, Call] = {}
        self.span_runs: dict[str, Run] = {}
        self.spans: dict[str, Span[Any]] = {}  # open spans the processor saw, to walk parents
        self.tasks: set[asyncio.Task[None]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def engine(self) -> ExecutionEngine:
        engine = self._engine()
        if engine is None:
            raise RuntimeError("the engine these hooks were built on is gone")
        return engine

    # -- finding runs and calls -------------------------------------------------------

    def parent(self) -> Call | None:
        current = CURRENT.get()
        return current if current is not None and current.run.state is self else None

    def key(self, usage: object) -> tuple[int, int]:
        parent = self.parent()
        # A run nested in a tool call shares its parent's usage object: the call tells them apart.
        return (id(usage), 0 if parent is None else id(parent))

    def run_for(self, context: RunContextWrapper[Any]) -> Run | None:
        return self.runs.get(self.key(context.usage))

    def call_for(self, context: RunContextWrapper[Any]) -> Call | None:
        current = self.parent()
        if isinstance(context, ToolContext):
            if current is not None and (
                current.context is context or self._same_call(current, context)
            ):
                return current
            run = self.run_for(context)
            return None if run is None else run.calls.get(context.tool_call_id)
        return None

    def _same_call(self, current: Call, context: ToolContext[Any]) -> bool:
        """Whether ``context`` (another object for it) is the running call's own.

        A run nested in the call (an agent used as a tool, a ``Runner.run`` in
        the tool) sees the call as current too, and its model may reuse the
        call's id and tool name (ids numbered per response): its calls are its own.
        """
        if (current.call.tool_call_id, current.tool_name) != (
            context.tool_call_id,
            context.tool_name,
        ):
            return False
        if id(context.usage) != current.run.key[0]:  # a nested run's own usage
            return False
        nested = self.runs.get(self.key(context.usage))  # one that shares the call's usage
        return nested is None or nested.parent is not current

    # -- runs -------------------------------------------------------------------------

    async def open_run(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        *,
        program: str | None,
        owner: str | None,
    ) -> Run:
        self.loop = asyncio.get_running_loop()
        for stale in [run for run in self.runs.values() if run.track.finished]:
            self.forget(stale)  # closed without on_agent_end (the engine closed it, ...)
        parent = self.parent()
        key = self.key(context.usage)
        paused = None if parent is not None else await self.paused_run(context)
        if paused is not None:
            return await self.resume(paused, context, agent, key)
        turn_input = json_copy(list(context.turn_input))
        if parent is not None:
            track = parent.run.track.child(
                agent.name,
                parent_tool_call_id=parent.call.tool_call_id,
                trigger=_TRIGGER,
                input=turn_input,
                owner=owner,
            )
        else:
            track = self.engine.track(
                program or agent.name, trigger=_TRIGGER, input=turn_input, owner=owner
            )
        run = Run(self, key, track, agent, parent)
        run.trace = _current_trace()
        self.runs[key] = run
        self.pinned[key[0]] = context.usage
        try:
            await track.start()
        except BaseException:
            self.forget(run)
            raise
        self.watch_agent_span(run)
        return run

    async def paused_run(self, context: RunContextWrapper[Any]) -> Run | None:
        """The run that ``Runner.run(agent, state)`` resumes: the one whose calls awaiting
        approval this run's context (the state's) has decisions for."""
        await self.drain()  # the processor's record of the interruption comes first
        decided = [
            run
            for run in self.runs.values()
            if run.parent is None
            and any(
                context.is_tool_approved(tool_name, call_id) is not None
                for call_id, tool_name in self.awaited(run).items()
            )
        ]
        if len(decided) > 1:
            # A sticky decision (approve(item, always_approve=True)) answers every call of
            # its tool, in any paused run: the one resumed is the one whose calls the state
            # holds (the SDK's record of the calls it made; SDK 0.24 internals).
            held = getattr(context, "_tool_invocations", {})
            ours = [run for run in decided if self.awaited(run).keys() <= held.keys()]
            if len(ours) > 1:
                # Runs whose models number their call ids (call_1 in each) have the same
                # calls: the SDK resumes a state in the trace of the run it interrupted (the
                # RunState keeps its trace id, serialized too), which tells them apart.
                same = [run for run in ours if _resumes_in_its_trace(run)]
                if len(same) == 1:
                    ours = same
            if len(ours) != 1:
                logger.warning(
                    "Runner.run resumes one of %d paused runs onlooker cannot tell apart; "
                    "recorded as a new execution",
                    len(decided),
                )
                return None
            decided = ours
        return decided[0] if decided else None

    async def resume(
        self, run: Run, context: RunContextWrapper[Any], agent: Agent[Any], key: tuple[int, int]
    ) -> Run:
        """Go on with the interrupted ``run`` in the ``Runner.run`` that resumes it, and
        record each decision the person took as the answer to its interaction."""
        if self.runs.get(run.key) is run:
            del self.runs[run.key]
            if not any(k[0] == run.key[0] for k in self.runs):
                self.pinned.pop(run.key[0], None)
        run.key, run.agent, run.handoff = key, agent, False
        self.engine._tracked_resumed(run.track)
        self.runs[key] = run
        self.pinned[key[0]] = context.usage
        for call_id, tool_name in self.awaited(run).items():
            approved = context.is_tool_approved(tool_name, call_id)
            if approved is None:
                continue  # not decided yet: the SDK asks again
            run.requested.pop(call_id, None)
            approval = run.asked.pop(call_id, None) or Approval(
                tool_name,
                await run.track.interaction_started(asks(tool_name, call_id), mode="paused"),
                None,
            )
            await run.track.interaction_resolved(
                approval.interaction_id,
                "accepted" if approved else "declined",
                None if approved else _rejection(context, tool_name, call_id),
            )
            if approval.entry is not None and not approved:
                self.forget_call(approval.entry)
                await approval.entry.call.failed(REJECTED)
        self.watch_agent_span(run)
        return run

    def awaited(self, run: Run) -> dict[str, str]:
        """The calls of ``run`` the SDK asks a person to approve (call id -> tool name): those
        the guardrail held, and those of the model's last response no hook saw."""
        unseen = {c: name for c, name in run.requested.items() if c not in run.opened}
        return unseen | {call_id: approval.tool_name for call_id, approval in run.asked.items()}

    async def pause(self, run: Run) -> None:
        """Record the questions of a run the SDK interrupted for approvals; it stays open
        until the ``Runner.run`` that resumes it ends, the engine's ``pause_timeout``
        expires it, or the engine closes."""
        for call_id, tool_name in self.awaited(run).items():
            if call_id not in run.asked:
                interaction_id = await run.track.interaction_started(
                    asks(tool_name, call_id), mode="paused"
                )
                run.asked[call_id] = Approval(tool_name, interaction_id, None)
        self.engine._tracked_paused(run.track)

    def forget(self, run: Run) -> None:
        if self.runs.get(run.key) is run:
            del self.runs[run.key]
            if not any(key[0] == run.key[0] for key in self.runs):
                self.pinned.pop(run.key[0], None)
        if run.agent_span_id is not None and self.span_runs.get(run.agent_span_id) is run:
            del self.span_runs[run.agent_span_id]
        for entry in [*run.calls.values(), *(e for q in run.local.values() for e in q)]:
            self.forget_call(entry)
        for child in [c for c in self.runs.values() if c.parent and c.parent.run is run]:
            self.forget(child)  # finishing a run closes its children

    def watch_agent_span(self, run: Run) -> None:
        span = get_current_span()
        # on_agent_start runs under the turn span; the processor's table leads up to the agent's.
        while span is not None and not isinstance(span.span_data, AgentSpanData):
            span = self.spans.get(span.parent_id) if span.parent_id else None
        if span is None or span.span_id == _NO_OP_SPAN:
            return
        if run.agent_span_id is not None and self.span_runs.get(run.agent_span_id) is run:
            del self.span_runs[run.agent_span_id]
        run.agent_span_id, run.trace_id = span.span_id, span.trace_id
        self.span_runs[span.span_id] = run

    def sees_current_span(self) -> bool:
        """Whether this engine's processor saw the current span start: it is still among
        the SDK's processors (``set_trace_processors`` may have replaced it since the run
        began), so it will see the spans around this one end."""
        span = get_current_span()
        return span is not None and span.span_id in self.spans

    def follow_handoff(self, span: Span[Any]) -> None:
        """Watch the span of the agent a run handed off to, from its start.

        The SDK may end the run (``MaxTurnsExceeded``) after that span starts
        and before ``on_agent_start`` of its agent: the span's end then ends
        the run.
        """
        name = getattr(span.span_data, "name", None)
        for run in self.runs.values():
            if (
                run.handoff
                and run.agent_span_id is None
                and run.trace_id == span.trace_id
                and run.agent.name == name
            ):
                run.agent_span_id = span.span_id
                self.span_runs[span.span_id] = run
                return

    def finish_run(
        self,
        run: Run,
        status: ExecutionStatus,
        *,
        result: object = None,
        error: str | None = None,
    ) -> None:
        self.forget(run)
        if status == "completed":
            run.track.finish_nowait("completed", result=json_copy(result))
        else:
            run.track.finish_nowait(status, error=error)

    # -- calls ------------------------------------------------------------------------

    async def open_call(
        self,
        run: Run,
        context: RunContextWrapper[Any],
        tool: str,
        args: dict[str, Any],
        tool_call_id: str | None,
    ) -> tuple[TrackedToolCall, Call]:
        span = _function_span()
        if tool_call_id is not None:
            run.opened.add(tool_call_id)
        call = await run.track.tool_started(tool, args, tool_call_id=tool_call_id)
        entry = Call(run, call, context, tool, span)
        return call, entry

    async def hold(self, entry: Call, call_id: str) -> None:
        """Hold a call the pre-hooks allowed before the SDK asks a person to approve it
        (``pre_approval_tool_input_guardrails``): no span closes it, the decision does."""
        run = entry.run
        entry.awaiting, entry.context = True, None
        run.calls[entry.call.tool_call_id] = entry
        interaction_id = await run.track.interaction_started(
            asks(entry.tool_name, call_id), mode="paused"
        )
        run.asked[call_id] = Approval(entry.tool_name, interaction_id, entry)

    def approved(self, entry: Call, context: ToolContext[Any]) -> None:
        """The held call runs now that the person approved it: its span and hooks close it."""
        entry.awaiting, entry.context = False, context
        entry.span_id = _span_id(span) if (span := _function_span()) is not None else None
        self.remember(entry)

    def remember(self, entry: Call) -> None:
        entry.run.calls[entry.call.tool_call_id] = entry
        if entry.span_id is not None:
            self.span_calls[entry.span_id] = entry

    def forget_call(self, entry: Call) -> None:
        run = entry.run
        if run.calls.get(entry.call.tool_call_id) is entry:
            del run.calls[entry.call.tool_call_id]
        for queue in run.local.values():
            if entry in queue:
                queue.remove(entry)
        if entry.span_id is not None and self.span_calls.get(entry.span_id) is entry:
            del self.span_calls[entry.span_id]
        entry.context = None

    async def close_call(
        self, entry: Call, result: object, failure: str | ErrorInfo | None
    ) -> None:
        self.forget_call(entry)
        if entry.call.done:
            return
        if failure is not None:
            await entry.call.failed(failure)
            return
        try:
            # A post-hook's rewrite cannot reach the model: on_tool_end's return is ignored.
            await entry.call.finished(json_copy(result))
        except HookAbortError:
            # Recorded (the call blocked, the run to finish failed); the SDK cannot be
            # stopped from on_tool_end: the run's next guarded call halts it.
            entry.run.aborted = True

    # -- what the processor defers ----------------------------------------------------

    def schedule(self, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        if self._on_loop():
            self.spawn(make)
        else:  # a span ended on another thread: the engine's records belong to its loop
            loop.call_soon_threadsafe(self.spawn, make)

    def record_now(self, record: Callable[[], None]) -> None:
        """Record at once when on the engine's loop with nothing deferred still to land;
        else after what was deferred before it.

        A run's end is recorded before ``Runner.run`` returns (the SDK ends the agent
        span in it), so a caller that closes the engine next finds it finished.
        """
        if not self.tasks and self._on_loop():
            record()
            return

        async def after_the_rest() -> None:
            await self.drain()
            record()

        self.schedule(after_the_rest)

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def spawn(self, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        task = asyncio.get_running_loop().create_task(guarded(make(), "a deferred record"))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self) -> None:
        current = asyncio.current_task()
        while pending := [task for task in self.tasks if task is not current]:
            await asyncio.wait(pending)


def state_of(engine: ExecutionEngine) -> State:
    """What the entry points built on ``engine`` share (made on first use)."""
    return per_engine(engine, "openai_agents", lambda: State(engine))


async def guarded(work: Coroutine[Any, Any, None], what: str) -> None:
    """Await ``work``; the adapter's own error is logged ("could not record ``what``"), not raised."""
    try:
        await work
    except Exception:
        logger.exception("could not record %s", what)


def asks(tool_name: str, call_id: str) -> str:
    """The question a call awaiting approval records."""
    return f"tool {tool_name!r} (call {call_id}) awaits approval"


def awaiting_approval(context: ToolContext[Any]) -> bool:
    """Whether the guardrail runs before the SDK asks a person to approve the call
    (``ToolExecutionConfig(pre_approval_tool_input_guardrails=True)``), not before the
    tool runs: no decision yet, and the SDK has not marked the call executed, which it
    does right before the guardrails of a call it is about to run (SDK 0.24 internals)."""
    if context.is_tool_approved(context.tool_name, context.tool_call_id) is not None:
        return False
    record = getattr(context, "_tool_invocations", {}).get(context.tool_call_id)
    return record is not None and getattr(record, "executed", True) is False


def arguments(raw: str) -> dict[str, Any]:
    """The model's JSON arguments as a mapping (``{"arguments": raw}`` when they are not one)."""
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def cancelling() -> bool:
    """Whether the task running this callback is being cancelled.

    A cancelled ``Runner.run`` (``task.cancel()``, a timeout, a streamed run's
    ``cancel()``) leaves no error on its spans: the task ending them is all
    that tells it from a run that ended well.
    """
    try:
        task = asyncio.current_task()
    except RuntimeError:  # a span ended on a thread with no event loop
        return False
    return task is not None and task.cancelling() > 0


def _current_trace() -> Trace | None:
    """The current trace; ``None`` outside a trace or with tracing off (no-op)."""
    trace = get_current_trace()
    return None if trace is None or isinstance(trace, NoOpTrace) else trace


def _resumes_in_its_trace(run: Run) -> bool:
    """Whether the current trace is the one ``run`` began in, reattached by the SDK from the
    state it resumes (another object with its id). The trace object itself is still
    current when the resume runs inside a trace that was already open (the SDK then keeps
    it): that trace may hold other paused runs and tells nothing."""
    current = _current_trace()
    return (
        current is not None
        and run.trace is not None
        and current is not run.trace
        and current.trace_id == run.trace.trace_id
    )


def _span_id(span: Span[Any]) -> str | None:
    return None if span.span_id == _NO_OP_SPAN else span.span_id


def _function_span() -> Span[Any] | None:
    span = get_current_span()
    return span if span is not None and isinstance(span.span_data, FunctionSpanData) else None


def span_failure(span: Span[Any] | None, entry: Call) -> str | None:
    """The error the tool's function span carries (set before ``on_tool_end`` runs)."""
    if span is None or entry.span_id is None or span.span_id != entry.span_id:
        return None  # not this call's span, or tracing is off: nothing says it failed
    return span_error(span)


def timeout_failure(tool_name: str, output: object) -> str | None:
    """The SDK's own message when it stopped the tool at its ``timeout`` and, as it does
    by default (``timeout_behavior="error_as_result"``), gave the model that message as
    the tool's result (no span carries an error then); else ``None``."""
    found = _TIMED_OUT.fullmatch(output) if isinstance(output, str) else None
    if found is None or found["name"] != tool_name:
        return None
    try:
        seconds = float(found["seconds"])
    except ValueError:
        return None
    said = default_tool_timeout_error_message(tool_name=tool_name, timeout_seconds=seconds)
    return f"ToolTimeoutError: {said}" if output == said else None


_TIMED_OUT: Final = re.compile(r"Tool '(?P<name>.*)' timed out after (?P<seconds>\S+) seconds\.")


def _rejection(context: RunContextWrapper[Any], tool_name: str, call_id: str) -> object:
    """A rejected call's answer: the message given with it (``state.reject(item,
    rejection_message=...)``), as PydanticAI's denial records its own; else none."""
    try:
        message = context.get_rejection_message(tool_name, call_id)
    except Exception:  # the SDK's bookkeeping of approvals: the decision is what matters
        logger.exception("could not read the rejection message of call %s", call_id)
        return None
    return {"tool_call_approved": False, "message": message} if message else None


def raised() -> str | None:
    """The exception the SDK's ``Runner.run`` is raising as the span ending now ends, if any.

    The SDK ends a run's agent span in a ``finally`` clause while the run's exception is
    in flight, and puts no error on any span for a ``ModelBehaviorError`` (a reused or
    empty tool call id, ...). Only the SDK's own error (an ``AgentsException``) whose
    innermost handler so far is the SDK's own frame counts: not one the caller is
    handling around ``Runner.run`` (a retry in an ``except`` block), not a tool's error
    the SDK is handling while a run inside it ends (a ``failure_error_function`` that
    runs an agent), and not a cancellation (see :func:`cancelling`).
    """
    exc = sys.exc_info()[1]
    if not isinstance(exc, AgentsException) or exc.__traceback__ is None:
        return None
    module = exc.__traceback__.tb_frame.f_globals.get("__name__", "")
    if not isinstance(module, str) or not (module == "agents" or module.startswith("agents.")):
        return None
    return f"{type(exc).__name__}: {exc}"


def span_error(span: Span[Any]) -> str | None:
    """The error a span carries (``message: detail``), else ``None``."""
    error = span.error
    if error is None:
        return None
    message = str(error.get("message") or "the tool failed")
    data = error.get("data")
    detail = data.get("error") if isinstance(data, dict) else None
    return f"{message}: {detail}" if isinstance(detail, str) and detail else message
