"""Emitter: one execution's voice — ``seq``, the envelope, attribution, typed events.

Every event an execution emits, native (``ExecutionContext``) or tracked
(``TrackedExecution``), is built here by one typed method per kind: the
values go into a ``TypedDict`` per kind, so a misspelt or missing field is a
mypy error, and are then assembled without re-validation (``_build``). The
emitter publishes to the engine's bus and to the ``observing()`` scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, Protocol, TypedDict, final

from pydantic import JsonValue

from ._bus import EventBus
from ._events import (
    SCHEMA_VERSION,
    Attribution,
    ErrorInfo,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    ExecutionStatus,
    InteractionMode,
    InteractionResolved,
    InteractionStarted,
    InteractionStatus,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallStatus,
    Trigger,
    _build,
    _now,
    new_id,
    snapshot,
    snapshot_object,
)
from ._scope import _attribution, _observers, _Scoped

__all__ = ["CANCELLED", "Emitter", "OpenCall"]

CANCELLED: Final = ErrorInfo(
    type="Cancelled", message="closed with its execution", cause="interrupt"
)
"""The error a call, interaction or child left open at its execution's end closes with."""


class OpenCall(Protocol):
    """A tool call whose ``ToolCallStarted`` was emitted and ``ToolCallFinished`` not yet."""

    def cut_short(self) -> None:
        """Close it ``cancelled`` (:data:`CANCELLED`): its execution is finishing."""
        ...


class _ExecutionStartedFields(TypedDict):
    kind: Literal["ExecutionStarted"]
    program: str
    trigger: Trigger
    owner: str | None
    input: JsonValue


class _ToolCallStartedFields(TypedDict):
    kind: Literal["ToolCallStarted"]
    tool_call_id: str
    tool: str
    args: dict[str, JsonValue]


class _ToolCallFinishedFields(TypedDict):
    kind: Literal["ToolCallFinished"]
    tool_call_id: str
    tool: str
    status: ToolCallStatus
    result: JsonValue
    error: ErrorInfo | None
    duration_ms: float
    metadata: dict[str, JsonValue]


class _InteractionStartedFields(TypedDict):
    kind: Literal["InteractionStarted"]
    interaction_id: str
    message: str
    requested_schema: dict[str, JsonValue] | None
    mode: InteractionMode


class _InteractionResolvedFields(TypedDict):
    kind: Literal["InteractionResolved"]
    interaction_id: str
    status: InteractionStatus
    response: JsonValue
    error: ErrorInfo | None


class _ExecutionFinishedFields(TypedDict):
    kind: Literal["ExecutionFinished"]
    status: ExecutionStatus
    result: JsonValue
    error: ErrorInfo | None
    duration_ms: float


_Fields = (
    _ExecutionStartedFields
    | _ToolCallStartedFields
    | _ToolCallFinishedFields
    | _InteractionStartedFields
    | _InteractionResolvedFields
    | _ExecutionFinishedFields
)

FIELDS_BY_KIND: Final[dict[type[ExecutionEvent], type[Any]]] = {
    ExecutionStarted: _ExecutionStartedFields,
    ToolCallStarted: _ToolCallStartedFields,
    ToolCallFinished: _ToolCallFinishedFields,
    InteractionStarted: _InteractionStartedFields,
    InteractionResolved: _InteractionResolvedFields,
    ExecutionFinished: _ExecutionFinishedFields,
}
"""Each event class's own fields (``tests/test_events.py`` checks them against the models)."""


@final
class Emitter:
    """Builds and publishes one execution's events, numbering them 0, 1, 2 ...

    ``attribution`` and ``scope`` fix what every event carries and who in
    ``observing()`` receives it; left ``None`` (a native execution, which runs
    in its own task) they are read from the context at each emit.
    ``base_attribution`` is then merged under the context's task, phase and
    intent: a tracked execution is driven from callbacks in any context, but
    ``onlooker.attribution(...)`` around a call still counts.
    """

    __slots__ = (
        "_base",
        "_bus",
        "_open_others",
        "_scope",
        "_seq",
        "execution_id",
        "finished",
        "open_call",
        "tracked",
    )

    def __init__(
        self,
        bus: EventBus,
        execution_id: str,
        *,
        base_attribution: Attribution | None = None,
        scope: _Scoped | None = None,
    ) -> None:
        self._bus = bus
        self.execution_id = execution_id
        self._seq = 0
        self._base = base_attribution
        self._scope = scope
        self.finished = False
        """Whether ``ExecutionFinished`` was emitted (nothing is emitted after it)."""
        self.tracked = base_attribution is not None
        """A tracked execution's emitter (driven from any context), not a native one's."""
        # What is open, closed with the execution if it still is. No container unless
        # several are open at once (10,000 paused executions would hold 10,000 of them).
        self.open_call: OpenCall | None = None
        """A call started and not finished (the caller keeps it: ``_lifecycle``)."""
        self._open_others: str | dict[str, OpenCall | None] | None = None
        """The open question's id; or, when more is open, calls and questions by id (a
        question's value is ``None``)."""

    @property
    def scope(self) -> _Scoped:
        """The ``observing()`` observers this emitter delivers to (fixed, or the context's)."""
        return _observers.get() if self._scope is None else self._scope

    def attribution(self) -> Attribution:
        """The attribution an event emitted now carries."""
        current = _attribution.get()
        base = self._base
        if base is None:
            return current
        task_id = current.task_id if current.task_id is not None else base.task_id
        phase = current.phase if current.phase is not None else base.phase
        intent_id = current.intent_id if current.intent_id is not None else base.intent_id
        if task_id == base.task_id and phase == base.phase and intent_id == base.intent_id:
            return base
        return base.model_copy(update={"task_id": task_id, "phase": phase, "intent_id": intent_id})

    def select_intent(self, intent_id: str) -> None:
        """Fix the intent of a tracked execution's later events."""
        assert self._base is not None, "a native execution selects its intent in its context"
        self._base = self._base.model_copy(update={"intent_id": intent_id})

    def also_open(self, part_id: str, call: OpenCall | None = None) -> None:
        """A call starts while :attr:`open_call` holds another, or a question is asked."""
        others = self._open_others
        if others is None and call is None:
            self._open_others = part_id
            return
        if not isinstance(others, dict):
            others = self._open_others = {} if others is None else {others: None}
        others[part_id] = call

    def closed(self, part_id: str) -> None:
        """A call other than :attr:`open_call` finished, or a question was resolved."""
        others = self._open_others
        if others == part_id:
            self._open_others = None
        elif isinstance(others, dict):
            others.pop(part_id, None)

    def _close_open_parts(self) -> None:
        others = self._open_others
        parts = {others: None} if isinstance(others, str) else dict(others or {})
        calls = [call for call in parts.values() if call is not None]
        for call in calls if self.open_call is None else [self.open_call, *calls]:
            call.cut_short()
        for interaction_id in [part_id for part_id, part in parts.items() if part is None]:
            self.interaction_resolved(
                interaction_id=interaction_id, status="cancelled", response=None, error=CANCELLED
            )

    def _audience(self) -> _Scoped | None:
        """Number the next event; who gets it, or ``None`` when nothing would.

        An event nobody observes is never built (nor its values snapshotted),
        but it still takes its ``seq``: an observer that subscribes later
        sees no gap. Nothing follows ``ExecutionFinished`` (a straggler's
        events are dropped).
        """
        if self.finished:
            return None
        self._seq += 1
        scope = _observers.get() if self._scope is None else self._scope
        return scope if scope or self._bus.observed else None

    def _publish(
        self,
        cls: type[ExecutionEvent],
        fields: _Fields,
        scope: _Scoped,
        attribution: Attribution | None = None,
    ) -> None:
        if attribution is None:
            attribution = _attribution.get() if self._base is None else self.attribution()
        # Envelope first, in the models' field order: pydantic serializes ``__dict__``
        # in its order, and an event must dump to the same JSON as its parsed copy.
        values: dict[str, Any] = {
            "event_id": new_id(),
            "execution_id": self.execution_id,
            "seq": self._seq - 1,
            "at": _now(),
            "attribution": attribution,
            "schema_version": SCHEMA_VERSION,
            **fields,
        }
        self._bus.emit(_build(cls, values), scope)

    # -- one typed method per kind ---------------------------------------------------

    def execution_started(
        self, *, program: str, trigger: Trigger, owner: str | None, input: object
    ) -> None:
        """``ExecutionStarted``; ``input`` is snapshotted only if someone observes."""
        scope = self._audience()
        if scope is None:
            return
        self._publish(
            ExecutionStarted,
            {
                "kind": "ExecutionStarted",
                "program": program,
                "trigger": trigger,
                "owner": owner,
                "input": snapshot(input),
            },
            scope,
        )

    def tool_call_started(
        self,
        *,
        tool_call_id: str,
        tool: str,
        args: Mapping[str, Any],
        attribution: Attribution | None = None,
    ) -> None:
        """``ToolCallStarted``; ``args`` are snapshotted only if someone observes."""
        scope = self._audience()
        if scope is None:
            return
        self._publish(
            ToolCallStarted,
            {
                "kind": "ToolCallStarted",
                "tool_call_id": tool_call_id,
                "tool": tool,
                "args": snapshot_object(args),
            },
            scope,
            attribution,
        )

    def tool_call_finished(
        self,
        *,
        tool_call_id: str,
        tool: str,
        status: ToolCallStatus,
        result: object,
        error: ErrorInfo | None,
        duration_ms: float,
        metadata: Mapping[str, Any] | None,
        attribution: Attribution | None = None,
    ) -> None:
        """``ToolCallFinished``; ``result`` and ``metadata`` are snapshotted only if observed."""
        scope = self._audience()
        if scope is None:
            return
        self._publish(
            ToolCallFinished,
            {
                "kind": "ToolCallFinished",
                "tool_call_id": tool_call_id,
                "tool": tool,
                "status": status,
                "result": snapshot(result),
                "error": error,
                "duration_ms": duration_ms,
                "metadata": snapshot_object(metadata) if metadata else {},
            },
            scope,
            attribution,
        )

    def interaction_started(
        self,
        *,
        interaction_id: str,
        message: str,
        requested_schema: Mapping[str, Any] | None,
        mode: InteractionMode,
    ) -> None:
        """``InteractionStarted``; the schema is snapshotted only if someone observes."""
        scope = self._audience()
        if not self.finished:
            self.also_open(interaction_id)
        if scope is None:
            return
        self._publish(
            InteractionStarted,
            {
                "kind": "InteractionStarted",
                "interaction_id": interaction_id,
                "message": message,
                "requested_schema": (
                    None if requested_schema is None else snapshot_object(requested_schema)
                ),
                "mode": mode,
            },
            scope,
        )

    def interaction_resolved(
        self,
        *,
        interaction_id: str,
        status: InteractionStatus,
        response: object,
        error: ErrorInfo | None,
    ) -> None:
        """``InteractionResolved``; ``response`` is snapshotted only if someone observes."""
        scope = self._audience()
        self.closed(interaction_id)
        if scope is None:
            return
        self._publish(
            InteractionResolved,
            {
                "kind": "InteractionResolved",
                "interaction_id": interaction_id,
                "status": status,
                # (an answer's object keeps its shape, as a call's arguments do: one value
                # that cannot be copied becomes a string saying so, not the whole answer)
                "response": snapshot_object(response)
                if type(response) is dict
                else snapshot(response),
                "error": error,
            },
            scope,
        )

    def execution_finished(
        self,
        *,
        status: ExecutionStatus,
        result: object,
        error: ErrorInfo | None,
        duration_ms: float,
    ) -> None:
        """``ExecutionFinished``; ``result`` is snapshotted only if someone observes.

        What is still open closes first, ``cancelled`` (:data:`CANCELLED`): a call
        or a question the program left running (in a task it did not wait for, or
        shielded from its cancellation) would otherwise never close, for nothing is
        emitted after it (its own end, when it comes, is dropped).
        """
        if not self.finished:
            self._close_open_parts()
        scope = self._audience()
        if scope is not None:
            self._publish(
                ExecutionFinished,
                {
                    "kind": "ExecutionFinished",
                    "status": status,
                    "result": snapshot(result),
                    "error": error,
                    "duration_ms": duration_ms,
                },
                scope,
            )
        self.finished = True
