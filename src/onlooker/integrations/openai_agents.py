"""The OpenAI Agents SDK under onlooker: every run a tracked execution, every tool call governed.

Three pieces, built on one engine, share what they know (so each call is
recorded once, correlated by the SDK's own ``ToolContext.tool_call_id``)::

    hooks = OnlookerRunHooks(engine)                  # the run and its tool calls
    guard = tool_guardrail(engine)                    # onlooker's pre-hooks, enforced
    set_trace_processors([OnlookerTracingProcessor(engine)])   # or add_trace_processor(...)
    agent = Agent(name="support", tools=[function_tool(lookup, tool_input_guardrails=[guard])])
    await Runner.run(agent, "Where is my refund?", hooks=hooks)

How the SDK's callbacks map onto :meth:`onlooker.ExecutionEngine.track`:

=========================================  ==================================================
SDK callback                               onlooker
=========================================  ==================================================
``on_agent_start`` (first agent of a run)  ``engine.track(program, trigger="openai-agents")``
                                           and ``run.start()``; inside a guarded tool call (an
                                           agent used as a tool): ``run.child(agent.name,
                                           parent_tool_call_id=...)``
``on_handoff``                             the same execution goes on with the new agent
``on_agent_end``                           ``run.finish("completed", result=output)``
tool input guardrail (``tool_guardrail``)  ``run.tool_started(tool_name, arguments,
                                           tool_call_id=ToolContext.tool_call_id)``; a refusal
                                           becomes ``reject_content(reason)`` (``SKIP`` /
                                           ``BLOCK``) or ``raise_exception`` (``ABORT``)
``on_tool_start``                          ``run.tool_started(...)`` only for a call the
                                           guardrail did not open (watch only)
``on_tool_end``                            ``call.failed(...)`` when the tool's trace span
                                           carries an error (the SDK hands a failing tool's
                                           message to ``on_tool_end`` as a normal result),
                                           else ``call.finished(result)``
function span ends, call still open        ``call.failed(span error)`` (the tool raised past
(``OnlookerTracingProcessor``)             ``failure_error_function``), else
                                           ``call.finished(span output)``
agent span ends, run still open            ``run.finish("failed", error=span error)``; with
(``OnlookerTracingProcessor``)             no error ``run.finish("completed")``
=========================================  ==================================================

What cannot be governed: the SDK hands a function tool the arguments the
model sent, so a pre-hook's ``modified_input`` cannot reach the tool; such a
call is refused (``reject_content``) and recorded ``failed``, never run with
arguments onlooker did not approve. ``on_tool_end`` cannot change the result
the model sees: a post-hook's ``modified_output`` is recorded but does not
reach the model. Hosted tools (web search, file search, code interpreter,
hosted MCP) run on OpenAI's side and reach no hook; local non-function tools
(computer, shell, apply-patch) are recorded from ``on_tool_start`` /
``on_tool_end`` without arguments or call id, and cannot be refused.
Failures are told apart only while tracing is enabled (the function span is
what says a tool failed). The SDK runs on asyncio only; run it on the
engine's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final
from weakref import WeakKeyDictionary, ref

from pydantic import JsonValue
from pydantic_core import to_jsonable_python

from onlooker import HookAction
from onlooker.integrations import require

require("agents", extra="openai-agents", framework="OpenAI Agents SDK")

# The SDK's classes are subclassed below, so it is imported with this module
# (never with `import onlooker`); `require` above names the extra when it is missing.
from agents import (  # noqa: E402
    Agent,
    RunContextWrapper,
    RunHooks,
    Tool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)
from agents.run_context import AgentHookContext  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402
from agents.tracing import (  # noqa: E402
    AgentSpanData,
    FunctionSpanData,
    Span,
    Trace,
    TracingProcessor,
    get_current_span,
)

if TYPE_CHECKING:
    from onlooker import ExecutionEngine, TrackedExecution, TrackedToolCall

__all__ = ["OnlookerRunHooks", "OnlookerTracingProcessor", "tool_guardrail"]

logger = logging.getLogger("onlooker.integrations.openai_agents")

_TRIGGER: Final = "openai-agents"
_NO_OP_SPAN: Final = "no-op"  # the id the SDK gives every span while tracing is disabled


class _Call:
    """One tool call onlooker tracks, and what ties it to the SDK's objects."""

    __slots__ = ("call", "context", "run", "span_id", "tool_name")

    def __init__(
        self,
        run: _Run,
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


class _Run:
    """One ``Runner.run``: its tracked execution and its open calls."""

    __slots__ = (
        "agent",
        "agent_span_id",
        "calls",
        "handoff",
        "key",
        "local",
        "parent",
        "state",
        "track",
    )

    def __init__(
        self,
        state: _State,
        key: tuple[int, int],
        track: TrackedExecution,
        agent: Agent[Any],
        parent: _Call | None,
    ) -> None:
        self.state = state
        self.key = key
        self.track = track
        self.parent = parent  # the tool call this run runs in (an agent used as a tool)
        self.agent = agent  # the agent whose `on_agent_end` finishes the run
        self.agent_span_id: str | None = None
        self.handoff = False
        self.calls: dict[str, _Call] = {}  # open function-tool calls by the SDK's call id
        self.local: dict[int, list[_Call]] = {}  # open calls of id-less local tools, by tool


# The call whose tool is running: the guardrail sets it in the task the SDK runs
# that tool in, so the tool's own hooks, and any `Runner.run` inside the tool
# (an agent used as a tool), see it; sibling calls and the run loop do not.
_CURRENT: ContextVar[_Call | None] = ContextVar("onlooker_openai_agents_call", default=None)


class _State:
    """What the hooks, the guardrail and the processor built on one engine share."""

    def __init__(self, engine: ExecutionEngine) -> None:
        # Weak: the engine is this state's key in _STATES; the entry points hold it strongly.
        self._engine = ref(engine)
        self.runs: dict[tuple[int, int], _Run] = {}
        self.pinned: dict[int, object] = {}  # keeps each keyed usage alive, so ids stay unique
        self.span_calls: dict[str, _Call] = {}
        self.span_runs: dict[str, _Run] = {}
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

    def parent(self) -> _Call | None:
        current = _CURRENT.get()
        return current if current is not None and current.run.state is self else None

    def key(self, usage: object) -> tuple[int, int]:
        parent = self.parent()
        # A run nested in a tool call shares its parent's usage object: the call tells them apart.
        return (id(usage), 0 if parent is None else id(parent))

    def run_for(self, context: RunContextWrapper[Any]) -> _Run | None:
        return self.runs.get(self.key(context.usage))

    def call_for(self, context: RunContextWrapper[Any]) -> _Call | None:
        current = self.parent()
        if isinstance(context, ToolContext):
            if current is not None and (
                current.context is context
                or (
                    current.call.tool_call_id == context.tool_call_id
                    and current.tool_name == context.tool_name
                )
            ):
                return current
            run = self.run_for(context)
            return None if run is None else run.calls.get(context.tool_call_id)
        return None

    # -- runs -------------------------------------------------------------------------

    async def open_run(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        *,
        program: str | None,
        owner: str | None,
    ) -> _Run:
        self.loop = asyncio.get_running_loop()
        for stale in [run for run in self.runs.values() if run.track.finished]:
            self.forget(stale)  # closed without on_agent_end (the engine closed it, ...)
        parent = self.parent()
        key = self.key(context.usage)
        turn_input = _json(list(context.turn_input))
        if parent is not None:
            track = parent.run.track.child(
                agent.name, parent_tool_call_id=parent.call.tool_call_id, input=turn_input
            )
        else:
            track = self.engine.track(
                program or agent.name, trigger=_TRIGGER, input=turn_input, owner=owner
            )
        run = _Run(self, key, track, agent, parent)
        self.runs[key] = run
        self.pinned[key[0]] = context.usage
        try:
            await track.start()
        except BaseException:
            self.forget(run)
            raise
        self.watch_agent_span(run)
        return run

    def forget(self, run: _Run) -> None:
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

    def watch_agent_span(self, run: _Run) -> None:
        span = get_current_span()
        # on_agent_start runs under the turn span; the processor's table leads up to the agent's.
        while span is not None and not isinstance(span.span_data, AgentSpanData):
            span = self.spans.get(span.parent_id) if span.parent_id else None
        if span is None or span.span_id == _NO_OP_SPAN:
            return
        if run.agent_span_id is not None:
            self.span_runs.pop(run.agent_span_id, None)
        run.agent_span_id = span.span_id
        self.span_runs[span.span_id] = run

    async def finish_run(
        self, run: _Run, status: str, *, result: object = None, error: str | None = None
    ) -> None:
        self.forget(run)
        if status == "failed":
            await run.track.finish("failed", error=error)
        else:
            await run.track.finish("completed", result=_json(result))

    # -- calls ------------------------------------------------------------------------

    async def open_call(
        self,
        run: _Run,
        context: RunContextWrapper[Any],
        tool: str,
        args: dict[str, Any],
        tool_call_id: str | None,
    ) -> tuple[TrackedToolCall, _Call]:
        span = _function_span()
        call = await run.track.tool_started(tool, args, tool_call_id=tool_call_id)
        entry = _Call(run, call, context, tool, span)
        return call, entry

    def remember(self, entry: _Call) -> None:
        entry.run.calls[entry.call.tool_call_id] = entry
        if entry.span_id is not None:
            self.span_calls[entry.span_id] = entry

    def forget_call(self, entry: _Call) -> None:
        run = entry.run
        if run.calls.get(entry.call.tool_call_id) is entry:
            del run.calls[entry.call.tool_call_id]
        for queue in run.local.values():
            if entry in queue:
                queue.remove(entry)
        if entry.span_id is not None and self.span_calls.get(entry.span_id) is entry:
            del self.span_calls[entry.span_id]
        entry.context = None

    async def close_call(self, entry: _Call, result: object, failure: str | None) -> None:
        self.forget_call(entry)
        if entry.call.done:
            return
        if failure is not None:
            await entry.call.failed(failure)
        else:
            # A post-hook's rewrite cannot reach the model: on_tool_end's return is ignored.
            await entry.call.finished(_json(result))

    # -- what the processor defers ----------------------------------------------------

    def schedule(self, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.spawn(make)
        else:  # a span ended on another thread: the engine's records belong to its loop
            loop.call_soon_threadsafe(self.spawn, make)

    def spawn(self, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        task = asyncio.get_running_loop().create_task(_guarded(make(), "a deferred record"))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self) -> None:
        current = asyncio.current_task()
        while pending := [task for task in self.tasks if task is not current]:
            await asyncio.wait(pending)


_STATES: WeakKeyDictionary[ExecutionEngine, _State] = WeakKeyDictionary()


def _state(engine: ExecutionEngine) -> _State:
    state = _STATES.get(engine)
    if state is None:
        state = _STATES[engine] = _State(engine)
    return state


class OnlookerRunHooks(RunHooks[Any]):
    """Run hooks that turn each ``Runner.run`` into a tracked execution of ``engine``.

    Pass it as ``Runner.run(agent, input, hooks=...)``, and to every agent used
    as a tool (``agent.as_tool(..., hooks=...)``), whose run becomes a child
    execution linked to the calling tool call. ``program`` names the
    execution (default: the starting agent's name); ``owner`` is recorded on
    it. The hooks close the tool calls :func:`tool_guardrail` opened, and
    open (watch only) those it did not see. Give every tool the guardrail to
    govern its calls, and register :class:`OnlookerTracingProcessor` so that a
    run that raises is recorded ``failed``.
    """

    def __init__(
        self, engine: ExecutionEngine, *, program: str | None = None, owner: str | None = None
    ) -> None:
        self._engine = engine
        self._state = _state(engine)
        self._program = program
        self._owner = owner

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        """Start the run's tracked execution (or follow a handoff to ``agent``)."""
        try:
            state = self._state
            run = state.run_for(context)
            if run is None:
                await state.open_run(context, agent, program=self._program, owner=self._owner)
                return
            if run.handoff:
                run.handoff, run.agent = False, agent
            elif agent is not run.agent:
                logger.warning(
                    "agent %r started inside run %s without a link to a tool call: give the "
                    "agent tool that runs it onlooker's tool_guardrail; it is not recorded",
                    agent.name,
                    run.track.execution_id,
                )
                return
            state.watch_agent_span(run)
        except Exception:
            logger.exception("could not record the start of agent %r", agent.name)

    async def on_agent_end(
        self, context: AgentHookContext[Any], agent: Agent[Any], output: Any
    ) -> None:
        """Finish the run's tracked execution ``completed`` with the final output."""
        try:
            state = self._state
            run = state.run_for(context)
            if run is None or agent is not run.agent:
                return
            await state.drain()
            await state.finish_run(run, "completed", result=output)
        except Exception:
            logger.exception("could not record the end of agent %r", agent.name)

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        """Note the handoff: the same execution goes on with ``to_agent``."""
        try:
            run = self._state.run_for(context)
            if run is not None:
                run.handoff, run.agent = True, to_agent
        except Exception:
            logger.exception("could not record the handoff to %r", to_agent.name)

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """Open the call if the guardrail did not (it is then recorded, not governed)."""
        try:
            state = self._state
            if state.call_for(context) is not None:
                return  # the guardrail opened (and governed) it
            run = state.run_for(context) or await state.open_run(
                context, agent, program=self._program, owner=self._owner
            )
            if isinstance(context, ToolContext):
                tool_name, tool_call_id = context.tool_name, context.tool_call_id
                args = _arguments(context.tool_arguments)
            else:  # computer, shell, apply-patch: no call id or arguments reach the hooks
                tool_name, tool_call_id, args = tool.name, None, {}
            call, entry = await state.open_call(run, context, tool_name, args, tool_call_id)
            if not call.allowed:
                logger.warning(
                    "onlooker refused tool call %r (%s: %s) but cannot stop it: give the tool "
                    "onlooker's tool_guardrail (tool_input_guardrails) to enforce refusals",
                    call.tool_call_id,
                    tool_name,
                    call.reason,
                )
                return
            if isinstance(context, ToolContext):
                state.remember(entry)
            else:
                run.local.setdefault(id(tool), []).append(entry)
        except Exception:
            logger.exception("could not record the start of tool %r", tool.name)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        """Close the call: ``failed`` if its trace span carries an error, else ``completed``."""
        try:
            state = self._state
            entry = state.call_for(context)
            if entry is None and not isinstance(context, ToolContext):
                run = state.run_for(context)
                queue = None if run is None else run.local.get(id(tool))
                entry = queue[0] if queue else None
            if entry is None:
                return
            await state.drain()  # a child run the processor is finishing comes first
            await state.close_call(entry, result, _span_failure(get_current_span(), entry))
        except Exception:
            logger.exception("could not record the end of tool %r", tool.name)


def tool_guardrail(engine: ExecutionEngine) -> ToolInputGuardrail[Any]:
    """One tool input guardrail that runs onlooker's pre-hooks on every call of the tools it guards.

    Put it in each ``FunctionTool``'s ``tool_input_guardrails`` (last, after
    guardrails of your own), also on agents used as tools. It opens the
    tracked call with the SDK's ``tool_call_id``; a ``SKIP`` or ``BLOCK``
    verdict refuses the call with ``reject_content`` (the model reads the
    reason, the tool never runs), an ``ABORT`` halts the run
    (``raise_exception``). A ``modified_input`` cannot reach the tool, so such
    a call is refused too. If onlooker cannot record the call (an adapter
    error, a closed engine), the call runs unrecorded and the error is logged,
    as in every other adapter: an adapter's failure never breaks the agent.
    """
    return ToolInputGuardrail(guardrail_function=_Guardrail(engine), name="onlooker")


class _Guardrail:
    """The function behind :func:`tool_guardrail` (holds the engine, as the hooks do)."""

    def __init__(self, engine: ExecutionEngine) -> None:
        self._engine = engine
        self._state = _state(engine)

    async def __call__(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Decide one call: allow it, refuse it with a message, or halt the run."""
        state = self._state
        context = data.context
        try:
            if state.call_for(context) is not None:  # guarded twice: the first one decided
                return ToolGuardrailFunctionOutput.allow()
            run = state.run_for(context) or await state.open_run(
                context, data.agent, program=None, owner=None
            )
            args = _arguments(context.tool_arguments)
            call, entry = await state.open_call(
                run, context, context.tool_name, args, context.tool_call_id
            )
        except Exception:
            logger.exception(
                "could not record tool call %r; it runs unrecorded", context.tool_call_id
            )
            return ToolGuardrailFunctionOutput.allow(output_info={"onlooker": "error"})
        info = {"onlooker": call.action.value, "tool_call_id": call.tool_call_id}
        if call.action is HookAction.ABORT:
            # The SDK raises and the run stops: finish it now, as a native execution would.
            await _guarded(state.finish_run(run, "completed"), "an aborted run")
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info | _why(call))
        if not call.allowed:
            verdict = "skipped" if call.action is HookAction.SKIP else "blocked"
            return ToolGuardrailFunctionOutput.reject_content(
                f"Tool call {verdict} by onlooker: {call.reason or 'refused by a pre-hook'}",
                output_info=info | _why(call),
            )
        if call.input != args:
            reason = (
                "a pre-hook rewrote the arguments, and the OpenAI Agents SDK runs a tool "
                "with the model's own arguments; refused instead"
            )
            await _guarded(entry.call.failed(reason), "a refused rewrite")
            return ToolGuardrailFunctionOutput.reject_content(
                f"Tool call refused by onlooker: {reason}.", output_info=info
            )
        state.remember(entry)
        _CURRENT.set(entry)
        return ToolGuardrailFunctionOutput.allow(output_info=info)


class OnlookerTracingProcessor(TracingProcessor):
    """A tracing processor that records what only the SDK's trace says.

    The SDK reports a failing tool to ``on_tool_end`` as a normal result; the
    function span carries the error. This processor closes a call whose span
    ends while it is still open (the tool raised past
    ``failure_error_function``; a nested run without the hooks) as the span
    says: ``failed`` with its error, else ``completed`` with its output. It
    finishes a run whose agent span ends before ``on_agent_end``: ``failed``
    when the span carries an error (``Runner.run`` raised), else
    ``completed``. Register it with
    ``add_trace_processor`` (keeps exporting to OpenAI) or
    ``set_trace_processors([...])`` (nothing leaves the machine). It records
    nothing while tracing is disabled.
    """

    def __init__(self, engine: ExecutionEngine) -> None:
        self._engine = engine
        self._state = _state(engine)

    def on_trace_start(self, trace: Trace) -> None:
        """Nothing to record: runs start in ``on_agent_start``."""

    def on_trace_end(self, trace: Trace) -> None:
        """Nothing to record: runs end with their agent span."""

    def on_span_start(self, span: Span[Any]) -> None:
        """Remember the open span, so hooks can find the agent span above their own."""
        try:
            self._state.spans[span.span_id] = span
        except Exception:
            logger.exception("could not note a span start")

    def on_span_end(self, span: Span[Any]) -> None:
        """Close what the span's end says is over: a tool call or a run left open."""
        try:
            state = self._state
            state.spans.pop(span.span_id, None)
            data = span.span_data
            if isinstance(data, FunctionSpanData):
                entry = state.span_calls.get(span.span_id)
                if entry is not None:  # no on_tool_end came: the span is all there is to go by
                    failure, output = _error_text(span), data.output
                    state.schedule(lambda: state.close_call(entry, output, failure))
            elif isinstance(data, AgentSpanData):
                run = state.span_runs.get(span.span_id)
                if run is not None and not run.handoff:
                    error = _error_text(span)
                    status = "completed" if error is None else "failed"
                    state.schedule(lambda: state.finish_run(run, status, error=error))
        except Exception:
            logger.exception("could not record a span end")

    def shutdown(self) -> None:
        """Nothing to release: records go through the engine."""

    def force_flush(self) -> None:
        """Nothing buffered here: the engine's plugins flush their own records."""


# -- helpers ---------------------------------------------------------------------------


async def _guarded(work: Coroutine[Any, Any, None], what: str) -> None:
    try:
        await work
    except Exception:
        logger.exception("could not record %s", what)


def _why(call: TrackedToolCall) -> dict[str, str]:
    return {} if call.reason is None else {"reason": call.reason}


def _arguments(raw: str) -> dict[str, Any]:
    """The model's JSON arguments as a mapping (``{"arguments": raw}`` when they are not one)."""
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def _json(value: object) -> JsonValue:
    return to_jsonable_python(value, fallback=repr)  # type: ignore[no-any-return]  # JSON by construction


def _span_id(span: Span[Any]) -> str | None:
    return None if span.span_id == _NO_OP_SPAN else span.span_id


def _function_span() -> Span[Any] | None:
    span = get_current_span()
    return span if span is not None and isinstance(span.span_data, FunctionSpanData) else None


def _span_failure(span: Span[Any] | None, entry: _Call) -> str | None:
    """The error the tool's function span carries (set before ``on_tool_end`` runs)."""
    if span is None or entry.span_id is None or span.span_id != entry.span_id:
        return None  # not this call's span, or tracing is off: nothing says it failed
    return _error_text(span)


def _error_text(span: Span[Any]) -> str | None:
    error = span.error
    if error is None:
        return None
    message = str(error.get("message") or "the tool failed")
    data = error.get("data")
    detail = data.get("error") if isinstance(data, dict) else None
    return f"{message}: {detail}" if isinstance(detail, str) and detail else message
