"""The six event kinds, their envelope, and ``parse_event``.

Events are frozen pydantic models. The engine builds its own events through
``_build`` (no re-validation of what it already knows, which is most of the
cost of an observed tool call); everything from outside goes through
``parse_event`` and full validation.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from math import isfinite
from pathlib import PurePath
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, TypeAlias, TypeVar, Union, final

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    Field,
    JsonValue,
    PlainSerializer,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ._errors import EventValidationError
from ._shared import SCHEMA_VERSION, int_or_note, json_loads, long_int_note, noting_long_ints

__all__ = [
    "SCHEMA_VERSION",
    "Attribution",
    "ErrorCause",
    "ErrorInfo",
    "ExecutionEvent",
    "ExecutionFinished",
    "ExecutionStarted",
    "ExecutionStatus",
    "InteractionMode",
    "InteractionResolved",
    "InteractionStarted",
    "InteractionStatus",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolCallStatus",
    "Trigger",
    "new_id",
    "parse_event",
    "snapshot",
    "snapshot_object",
]

ToolCallStatus: TypeAlias = Literal["completed", "failed", "skipped", "blocked", "cancelled"]
"""How a tool call ended (``ToolCallFinished.status``)."""
InteractionStatus: TypeAlias = Literal["accepted", "declined", "cancelled", "expired", "failed"]
"""How a question ended (``InteractionResolved.status``)."""
ExecutionStatus: TypeAlias = Literal["completed", "failed", "cancelled", "expired"]
"""How an execution ended (``ExecutionFinished.status``, ``ExecutionResult.status``)."""
InteractionMode: TypeAlias = Literal["inline", "paused"]
"""How a question waits: answered by a handler (``inline``) or by ``engine.resume`` (``paused``)."""
ErrorCause: TypeAlias = Literal["failure", "defect", "interrupt"]
"""What kind of error an ``ErrorInfo`` describes: expected, unexpected, or a cancellation."""

# Models are configured by class keywords (not `model_config`): plain mypy then sees
# `frozen=True` (pydantic's `dataclass_transform`) and flags assignments in users'
# code, without the pydantic mypy plugin.

# Ids: a random per-process prefix and a counter. Unique across processes,
# and ~10x cheaper than uuid4 on the hot path.
_ID_PREFIX: Final = f"{os.urandom(6).hex()}-"
_id_counter = itertools.count()


def new_id() -> str:
    """A new unique id (event, execution, tool call, interaction)."""
    return _ID_PREFIX + str(next(_id_counter))


def _reseed_after_fork() -> None:
    global _ID_PREFIX, _id_counter
    _ID_PREFIX = f"{os.urandom(6).hex()}-"  # type: ignore[misc]  # a forked child needs its own prefix
    _id_counter = itertools.count()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_after_fork)


def _as_given(value: dict[str, Any]) -> dict[str, Any]:
    return value


JsonObject: TypeAlias = Annotated[
    dict[str, JsonValue], PlainSerializer(_as_given, return_type=dict[Any, Any], when_used="json")
]
"""A JSON object. Its JSON is written with keys of any type: the ``dict[str, ...]``
serializer wrote a key holding a lone surrogate as U+FFFD, three of them, without a word,
where this one refuses it (as it refuses one in a value), and :class:`JsonModel` then
writes the escape. (Its schema is still a JSON object's.)"""


@final
class Trigger(BaseModel, frozen=True, extra="forbid", allow_inf_nan=False):
    """What started an execution: ``kind`` ("cli", "api", "schedule", ...) and free metadata."""

    kind: str
    metadata: JsonObject = Field(default_factory=dict)


Milliseconds: TypeAlias = Annotated[float, Field(ge=0, strict=True)]
"""A duration: a number of 0 or more (a string such as ``"1.5"`` is not converted)."""


@final
class Attribution(BaseModel, frozen=True, extra="forbid", allow_inf_nan=False):
    """Who caused an event: the task and phase in scope, the parent execution and call.

    ``depth`` is 0 for a root execution and grows by one per ``ctx.spawn``.
    """

    task_id: str | None = None
    phase: str | None = None
    parent_execution_id: str | None = None
    parent_tool_call_id: str | None = None
    depth: Annotated[int, Field(ge=0, strict=True)] = 0
    intent_id: str | None = None


def child_attribution(
    current: Attribution,
    *,
    parent_execution_id: str,
    parent_tool_call_id: str | None,
    depth: int,
    task_id: str | None,
    phase: str | None,
) -> Attribution:
    """A child execution's attribution: its parents, ``depth``, and the task, phase and
    intent in scope (``task_id`` / ``phase`` when given override the current ones)."""
    return Attribution(
        task_id=task_id if task_id is not None else current.task_id,
        phase=phase if phase is not None else current.phase,
        parent_execution_id=parent_execution_id,
        parent_tool_call_id=parent_tool_call_id,
        depth=depth,
        intent_id=current.intent_id,
    )


@final
class ErrorInfo(BaseModel, frozen=True, extra="forbid", allow_inf_nan=False):
    """An error as data: its type name, message, and cause.

    ``cause`` is ``failure`` (an expected, typed error: a ``ToolError`` or any
    ``OnlookerError``), ``defect`` (any other exception) or ``interrupt``
    (cancellation).
    """

    type: str
    message: str
    cause: ErrorCause


def _in_utc(at: datetime) -> datetime:
    """A timezone-aware time in UTC (the envelope's ``at`` is UTC whatever offset it came in)."""
    return at if at.utcoffset() == _NO_OFFSET else at.astimezone(UTC)


_NO_OFFSET: Final = timedelta(0)


class JsonModel(BaseModel):
    """A model whose ``model_dump_json`` also writes a lone surrogate (as ``\\udXXX``).

    A program's values may hold one (``os.listdir`` on an undecodable file
    name); pydantic's JSON encoder refuses it (and its JSON mode writes a key
    holding one as U+FFFD), so such a model is written by :mod:`json` from its
    Python form instead, other values converted as pydantic converts them, with
    the escape :mod:`json` and the audit trail use: it reads back
    (``parse_event``) as the same string, in a value or a key.
    """

    if not TYPE_CHECKING:  # type checkers keep pydantic's own signature, keywords and all

        def model_dump_json(self, **options):
            try:
                return super().model_dump_json(**options)
            except PydanticSerializationError as exc:
                refused = exc  # a lone surrogate, or what model_dump raises again below
            indent = options.pop("indent", None)
            ensure_ascii = options.pop("ensure_ascii", False)

            def dumps(value):
                return json.dumps(
                    value,
                    indent=indent,
                    ensure_ascii=ensure_ascii,
                    separators=(",", ":") if indent is None else None,
                    default=to_jsonable_python,  # times, enums, ... as the JSON mode writes them
                )

            try:  # Python mode: its JSON mode writes a key holding a surrogate as U+FFFD
                value = self.model_dump(**options)
                try:
                    text = dumps(value)
                except ValueError as exc:  # an int str() refuses: noted, as the stores note it
                    text = noting_long_ints(exc, value, dumps)
            except (PydanticSerializationError, TypeError, ValueError):
                raise refused from None
            return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Envelope(JsonModel, frozen=True, extra="forbid", allow_inf_nan=False):
    event_id: str
    execution_id: str
    seq: Annotated[int, Field(ge=0, strict=True)]
    at: Annotated[AwareDatetime, AfterValidator(_in_utc)]
    attribution: Attribution
    schema_version: Annotated[int, Field(ge=1, le=SCHEMA_VERSION, strict=True)] = SCHEMA_VERSION
    """An event written by a newer onlooker (a higher version) is refused, not misread."""


@final
class ExecutionStarted(_Envelope, frozen=True):
    """An execution begins."""

    kind: Literal["ExecutionStarted"] = "ExecutionStarted"
    program: str
    trigger: Trigger
    owner: str | None = None
    input: JsonValue = None


@final
class ToolCallStarted(_Envelope, frozen=True):
    """A tool is about to run (pre-hooks have decided); ``args`` is what it receives."""

    kind: Literal["ToolCallStarted"] = "ToolCallStarted"
    tool_call_id: str
    tool: str
    args: JsonObject


@final
class ToolCallFinished(_Envelope, frozen=True):
    """A tool call ended, whatever the way."""

    kind: Literal["ToolCallFinished"] = "ToolCallFinished"
    tool_call_id: str
    tool: str
    status: ToolCallStatus
    result: JsonValue = None
    error: ErrorInfo | None = None
    duration_ms: Milliseconds
    metadata: JsonObject = Field(default_factory=dict)


@final
class InteractionStarted(_Envelope, frozen=True):
    """The program asks a person something (``ctx.elicit``)."""

    kind: Literal["InteractionStarted"] = "InteractionStarted"
    interaction_id: str
    message: str
    requested_schema: JsonObject | None = None
    mode: InteractionMode


@final
class InteractionResolved(_Envelope, frozen=True):
    """The question was answered or abandoned."""

    kind: Literal["InteractionResolved"] = "InteractionResolved"
    interaction_id: str
    status: InteractionStatus
    response: JsonValue = None
    error: ErrorInfo | None = None


@final
class ExecutionFinished(_Envelope, frozen=True):
    """The execution ended, whatever the way."""

    kind: Literal["ExecutionFinished"] = "ExecutionFinished"
    status: ExecutionStatus
    result: JsonValue = None
    error: ErrorInfo | None = None
    duration_ms: Milliseconds


ExecutionEvent: TypeAlias = Annotated[
    Union[  # noqa: UP007  # a discriminated union needs the Union form inside Annotated
        ExecutionStarted,
        ToolCallStarted,
        ToolCallFinished,
        InteractionStarted,
        InteractionResolved,
        ExecutionFinished,
    ],
    Field(discriminator="kind"),
]
"""The sealed union of every event; match on it exhaustively."""

_KINDS: Final = frozenset(
    {
        "ExecutionStarted",
        "ToolCallStarted",
        "ToolCallFinished",
        "InteractionStarted",
        "InteractionResolved",
        "ExecutionFinished",
    }
)
_EVENT_ADAPTER: Final[TypeAdapter[ExecutionEvent]] = TypeAdapter(ExecutionEvent)


def parse_event(raw: bytes | str | dict[str, Any]) -> ExecutionEvent:
    """Validate one event from JSON (bytes or str) or a dict.

    Raises :class:`EventValidationError` naming the offending field; never
    returns a half-built event.
    """
    try:
        if isinstance(raw, bytes | bytearray):
            try:
                raw = bytes(raw).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise EventValidationError(f"event is not UTF-8: {exc}") from None
        if isinstance(raw, str):
            if _SUSPECT_NUMBER.search(raw):  # JSON has none; pydantic's parser reads them
                _refuse_non_finite(raw)
            try:
                return _EVENT_ADAPTER.validate_json(raw)
            except ValidationError as exc:
                if exc.errors()[0]["type"] != "json_invalid":
                    raise
                # JSON that pydantic's parser refuses and json reads: a lone surrogate escaped
                # (\udc80: an undecodable file name, as the standard library writes it), or
                # values nested deeper than its 200 levels.
                try:
                    data = json_loads(raw)  # an int too long for int() as a string saying so
                except (ValueError, RecursionError):
                    raise exc from None
                return _EVENT_ADAPTER.validate_python(data)
        if isinstance(raw, dict):
            return _EVENT_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    raise EventValidationError(f"an event must be bytes, str or dict, not {type(raw).__name__}")


def _refuse_non_finite(raw: str) -> None:
    """Raise :class:`EventValidationError` if ``raw`` spells ``NaN``, ``Infinity`` or a number
    too large for a float (``1e999``) as a value: JSON has no such numbers (pydantic's parser
    reads them as floats that no event holds)."""
    import json

    def finite(text: str) -> float:
        value = float(text)
        if value - value != 0:
            raise _NonFinite(text)
        return value

    def constant(name: str) -> float:
        raise _NonFinite(name)

    try:
        json.loads(raw, parse_float=finite, parse_constant=constant, parse_int=int_or_note)
    except _NonFinite as exc:
        raise EventValidationError(
            f"event JSON is invalid: NaN and Infinity are not JSON numbers, nor is one too "
            f"large for a float: {exc}"
        ) from None
    except (ValueError, RecursionError):
        return  # invalid anyway: the parse that follows names the fault


class _NonFinite(Exception):
    pass


_SUSPECT_NUMBER: Final = re.compile(r"NaN|Infinity|\d[eE]\+?\d{3}|\d{309}")
"""What may spell a non-finite number (or sits in a string: then the check finds nothing)."""


def _validation_error(exc: ValidationError) -> EventValidationError:
    first = exc.errors(include_url=False)[0]
    parts = list(first["loc"])
    if parts and parts[0] in _KINDS:  # the union's tag, not a field
        parts = parts[1:]
    loc = ".".join(str(part) for part in parts)
    if first["type"] == "json_invalid":
        return EventValidationError(f"event is not valid JSON: {first['msg']}")
    if first["type"] == "union_tag_invalid":
        return EventValidationError(
            f"unknown event kind {first.get('input', {}).get('kind')!r}"
            if isinstance(first.get("input"), dict)
            else f"unknown event kind: {first['msg']}",
            field="kind",
        )
    if first["type"] == "union_tag_not_found":
        return EventValidationError("event has no 'kind' field", field="kind")
    count = exc.error_count()
    more = f" (and {count - 1} more)" if count > 1 else ""
    return EventValidationError(f"invalid event field {loc!r}: {first['msg']}{more}", field=loc)


_M = TypeVar("_M", bound=BaseModel)
_object_setattr = object.__setattr__
_FIELDS_SET: dict[type[BaseModel], set[str]] = {}


def _build(cls: type[_M], values: dict[str, Any]) -> _M:
    """Build a model from values the engine already knows are valid.

    ``values`` must hold every field. This skips validation on purpose: the
    engine's own events are built from typed data it produced itself.
    """
    model = object.__new__(cls)
    _object_setattr(model, "__dict__", values)
    fields_set = _FIELDS_SET.get(cls)
    if fields_set is None:
        fields_set = _FIELDS_SET[cls] = set(cls.model_fields)
    _object_setattr(model, "__pydantic_fields_set__", fields_set)
    _object_setattr(model, "__pydantic_extra__", None)
    _object_setattr(model, "__pydantic_private__", None)
    return model


def _now() -> datetime:
    return datetime.now(UTC)


_SCALARS: Final = frozenset({str, int, float, bool, type(None)})
"""Types whose values are scalars in JSON, exactly: a subclass (an ``IntEnum``, a
``StrEnum``, numpy's ``float64``) is converted by pydantic-core, as any other value."""
_EXACT: Final = frozenset({str, int, bool, type(None)})  # scalars that are their own snapshot


def _scalar(value: str | int | float | None) -> JsonValue:
    """A scalar's snapshot: itself, but ``None`` for a float JSON cannot hold (inf, NaN),
    and a string saying so for an int with more digits than JSON readers take."""
    if isinstance(value, float):
        return value if isfinite(value) else None
    if type(value) is int and not -_HUGE < value < _HUGE:
        return long_int_note(value)
    return value


_HUGE: Final = 10**4300  # Python's json and pydantic-core read no longer integer


def _jsonable(value: object) -> JsonValue:
    """pydantic-core's JSON form of ``value``; infinity and NaN as ``None``, as JSON writes them."""
    return to_jsonable_python(value, fallback=_fallback, inf_nan_mode="null")  # type: ignore[no-any-return]


def _fallback(value: object) -> str:
    """A value pydantic-core has no JSON form for: a pure path (``PurePosixPath``,
    ``PureWindowsPath``) as its text, as pydantic writes a ``Path``; anything else by its ``repr``."""
    return str(value) if isinstance(value, PurePath) else repr(value)


def snapshot(value: object) -> JsonValue:
    """A JSON-compatible deep copy of ``value``.

    Events hold snapshots: mutating the dict a tool received, or what it
    returned, after the event was emitted never changes the event. The copy
    is pydantic-core's JSON conversion (models, dataclasses, paths, ... as
    pydantic serializes them; a pure path by its text; anything else by its ``repr``). A value it
    cannot convert (a cycle, a failing ``__repr__``, undecodable bytes) is
    copied part by part instead, each part that fails becoming a string
    saying so: a snapshot never fails the event that carries it. JSON has
    no infinity or NaN: such a float becomes ``None``, as the event's JSON
    writes it, so an event equals what its JSON reads back as; an int of
    more than 4,300 digits, which JSON readers refuse, a string saying so.
    An iterator (a generator, a ``map``, an open file) is recorded by its
    ``repr``: copying it would use it up, and the program still gets it
    whole. Both rules hold for the value itself, not for one nested inside
    a container, which pydantic-core copies as it is (:func:`parse_event`
    reads such an int back as a string saying so).
    """
    kind = type(value)
    if kind in _SCALARS:
        return _scalar(value)  # type: ignore[arg-type]
    if kind is not dict and kind is not list and hasattr(kind, "__next__"):
        return _described(value)  # an iterator (a generator, a file): copying would use it up
    try:
        # Wrapped: pydantic-core serializes 254 levels at most, and an event nests its
        # values up to three deep, so a value that converts here fits in its event too.
        return _jsonable([[[value]]])[0][0][0]  # type: ignore[index]
    except Exception:
        pass
    try:
        return _copy(value, set())
    except Exception as exc:  # a cycle: the whole value is marked
        return _unserializable(value, exc)


def _described(value: object) -> str:
    try:
        return repr(value)
    except Exception as exc:
        return _unserializable(value, exc)


def _unserializable(value: object, exc: Exception) -> str:
    return f"<not JSON-serializable {type(value).__name__}: {exc}>"


def snapshot_object(value: Mapping[Any, object]) -> dict[str, JsonValue]:
    """A snapshot of a mapping (tool arguments, hook metadata) that stays a JSON object.

    Each value is snapshotted on its own, so one value that cannot be copied
    becomes a string saying so and the others keep their shape.
    """
    # Exact types only (an IntEnum is converted), and no narrowing for mypy: hence the ignore.
    return {
        k if type(k) is str else _key(k): (
            v  # type: ignore[misc]
            if type(v) in _EXACT and (type(v) is not int or -_HUGE < v < _HUGE)
            else snapshot(v)
        )
        for k, v in value.items()
    }


def _key(key: object) -> str:
    """A mapping's key as a JSON object's: its ``str``, or a string saying it has none."""
    try:
        return str(key)
    except Exception as exc:
        return _unserializable(key, exc)


def _copy(value: object, inside: set[int]) -> JsonValue:
    """``value`` copied part by part; ``inside``: the ids of the containers it is in.

    A model or a dataclass pydantic-core cannot convert whole (a field of
    undecodable bytes) is copied field by field, so only that field is marked.
    """
    kind = type(value)
    if kind in _SCALARS:
        return _scalar(value)  # type: ignore[arg-type]
    if kind is dict or kind is list or kind is tuple:
        if len(inside) == _DEEPEST:
            return f"<{kind.__name__} nested deeper than {_DEEPEST} levels>"
        if id(value) in inside:
            raise ValueError("Circular reference detected")  # the whole value is marked
        inside.add(id(value))
        try:
            if kind is dict:
                return {
                    k if type(k) is str else _key(k): _copy(v, inside)
                    for k, v in value.items()  # type: ignore[attr-defined]
                }
            return [_copy(v, inside) for v in value]  # type: ignore[attr-defined]
        finally:
            inside.discard(id(value))
    try:
        return _jsonable(value)
    except Exception as exc:  # only this value is marked; its neighbours keep their shape
        parts = _parts_of(value)
        if parts is None:
            return _unserializable(value, exc)
    if id(value) in inside:  # a model that holds itself
        raise ValueError("Circular reference detected")  # the whole value is marked
    inside.add(id(value))
    try:
        return _copy(parts, inside)
    finally:
        inside.discard(id(value))


_DEEPEST: Final = 200  # levels of a snapshot's containers; deeper ones are marked


def _parts_of(value: object) -> object:
    """A model's or a dataclass instance's fields, as pydantic serializes them but for their
    values (bytes stay bytes): excluded fields left out, a root model's root. ``None`` when
    ``value`` is neither, or pydantic cannot take it apart either."""
    serializer = getattr(type(value), "__pydantic_serializer__", None)
    if serializer is not None:  # a model or a pydantic dataclass: its own rules
        try:
            return serializer.to_python(value)
        except Exception:
            return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name, None) for field in dataclasses.fields(value)}
    return None
