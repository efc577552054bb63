"""The tracing processor: what only the SDK's trace says (a tool that raised, a run that failed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.tracing import (
    AgentSpanData,
    FunctionSpanData,
    Span,
    Trace,
    TracingProcessor,
    TurnSpanData,
)

from ._shared import (
    CANCELLED,
    Run,
    cancelling,
    logger,
    raised,
    span_error,
    state_of,
    timeout_failure,
)

if TYPE_CHECKING:
    from onlooker import ExecutionEngine, ExecutionStatus

__all__ = ["OnlookerTracingProcessor"]


class OnlookerTracingProcessor(TracingProcessor):
    """A tracing processor that records what only the SDK's trace says.

    The SDK reports a failing tool to ``on_tool_end`` as a normal result; the
    function span carries the error. This processor closes a call whose span
    ends while it is still open (the tool raised past
    ``failure_error_function``; a nested run without the hooks; the SDK
    cancelled it) as the span says: ``cancelled`` when the task ending it is
    being cancelled, ``failed`` with its error, else ``completed`` with its
    output. It finishes a run still open when its agent span ends (no
    ``on_agent_end`` came, or it only noted the output: the output
    guardrails run after it): ``failed`` after a pre-hook's ``ABORT``
    or when the span, or one of its turns, carries an error (``Runner.run``
    raised: a guardrail's tripwire, ...), ``cancelled`` when the run's task
    is being cancelled, else ``completed`` with the output ``on_agent_end``
    saw; at once, so the end is recorded before ``Runner.run`` returns.
    Register it with
    ``add_trace_processor`` (keeps exporting to OpenAI) or
    ``set_trace_processors([...])`` (nothing leaves the machine). It records
    nothing while tracing is disabled.
    """

    def __init__(self, engine: ExecutionEngine) -> None:
        self._engine = engine
        self._state = state_of(engine)

    def on_trace_start(self, trace: Trace) -> None:
        """Nothing to record: runs start in ``on_agent_start``."""

    def on_trace_end(self, trace: Trace) -> None:
        """Nothing to record: runs end with their agent span."""

    def on_span_start(self, span: Span[Any]) -> None:
        """Remember the open span, so hooks can find the agent span above their own."""
        try:
            self._state.spans[span.span_id] = span
            if isinstance(span.span_data, AgentSpanData):
                self._state.follow_handoff(span)
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
                    output = data.output
                    failure = (
                        CANCELLED
                        if cancelling()
                        else span_error(span) or timeout_failure(entry.tool_name, output)
                    )
                    state.schedule(lambda: state.close_call(entry, output, failure))
            elif isinstance(data, AgentSpanData):
                run = state.span_runs.get(span.span_id)
                if run is None:
                    pass
                elif _handed_off(run, span):
                    del state.span_runs[span.span_id]  # the run goes on with the next agent
                    run.agent_span_id = None
                elif _interrupted(run, span) and state.awaited(run):
                    # Interrupted for approvals: the run waits for the Runner.run resuming it.
                    del state.span_runs[span.span_id]
                    run.agent_span_id = None
                    state.schedule(lambda: state.pause(run))
                else:
                    status, error = _run_end(run, span)
                    result = run.output[0] if run.output and status == "completed" else None
                    state.record_now(
                        lambda: state.finish_run(run, status, result=result, error=error)
                    )
            elif isinstance(data, TurnSpanData) and span.parent_id is not None:
                turn_error = span_error(span)  # an input guardrail's tripwire, ...
                parent_run = state.span_runs.get(span.parent_id)
                if parent_run is not None and turn_error is not None:
                    parent_run.turn_error = turn_error
        except Exception:
            logger.exception("could not record a span end")

    def shutdown(self) -> None:
        """Nothing to release: records go through the engine."""

    def force_flush(self) -> None:
        """Nothing buffered here: the engine's plugins flush their own records."""


def _handed_off(run: Run, span: Span[Any]) -> bool:
    """Whether ``span`` is the agent's that handed ``run`` off, ending well: the run goes on
    (a handoff whose input filter raised ends the span with the error, and the run)."""
    return (
        run.handoff
        and span.span_id == run.handing_off
        and span_error(span) is None
        and not cancelling()
    )


def _interrupted(run: Run, span: Span[Any]) -> bool:
    """Whether ``run`` ended without output, error or cancellation: its ``Runner.run`` returned
    with interruptions (calls awaiting approval) if it has calls no hook saw run."""
    return _run_end(run, span) == ("completed", None) and not run.aborted and run.output is None


def _run_end(run: Run, span: Span[Any]) -> tuple[ExecutionStatus, str | None]:
    """How a run finishes when its agent span ends, and with what error."""
    if run.aborted:  # the core finishes an aborted run failed, with the abort as its error
        return "completed", None
    if cancelling():  # the SDK sets no error on a cancelled run's span
        return "cancelled", None
    error = span_error(span) or run.turn_error or raised()
    return ("completed" if error is None else "failed"), error
