"""Events: frozen models, JSON round trips, parse_event errors, snapshots, ErrorInfo."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import itertools
import json
import pathlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest

import onlooker
from onlooker import (
    Attribution,
    ErrorInfo,
    EventValidationError,
    ExecutionContext,
    ExecutionEngine,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionResponse,
    InteractionStarted,
    OnlookerError,
    ToolCallFinished,
    ToolCallStarted,
    Trigger,
    parse_event,
)
from onlooker._events import snapshot_object
from onlooker.plugins.audit._events import json_form
from onlooker.testing import RecordingObserver

AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def envelope(seq: int = 0) -> dict[str, Any]:
    return {
        "event_id": f"e{seq}",
        "execution_id": "x1",
        "seq": seq,
        "at": AT,
        "attribution": Attribution(task_id="t", phase="p", depth=2, parent_execution_id="x0"),
    }


def one_of_each() -> list[ExecutionEvent]:
    error = ErrorInfo(type="ValueError", message="bad", cause="defect")
    return [
        ExecutionStarted(
            **envelope(0),
            program="prog",
            trigger=Trigger(kind="cli", metadata={"argv": ["a", 1]}),
            owner="ann",
            input={"q": [1, 2.5, None, True]},
        ),
        ToolCallStarted(**envelope(1), tool_call_id="c1", tool="read", args={"path": "a.md"}),
        ToolCallFinished(
            **envelope(2),
            tool_call_id="c1",
            tool="read",
            status="failed",
            error=error,
            duration_ms=1.25,
            metadata={"hook": {"k": "v"}},
        ),
        InteractionStarted(
            **envelope(3),
            interaction_id="i1",
            message="ok?",
            requested_schema={"type": "object"},
            mode="paused",
        ),
        InteractionResolved(
            **envelope(4), interaction_id="i1", status="accepted", response={"yes": True}
        ),
        ExecutionFinished(**envelope(5), status="completed", result="done", duration_ms=3.0),
    ]


def valid_dict() -> dict[str, Any]:
    return json.loads(one_of_each()[1].model_dump_json())  # type: ignore[no-any-return]


async def tool_program(ctx: ExecutionContext) -> Any:
    await ctx.call("echo", data={"a": [1, 2]})
    answer = await ctx.elicit("sure?", schema={"type": "object"})
    with contextlib.suppress(RuntimeError):
        await ctx.call("boom")
    return {"answer": answer.content}


@onlooker.tool
def echo(data: dict[str, Any]) -> dict[str, Any]:
    """Return its argument."""
    return data


@onlooker.tool
def boom() -> None:
    """Always fails."""
    raise RuntimeError("boom")


class TestModels:
    def test_kind_is_the_class_name(self) -> None:
        for event in one_of_each():
            assert event.kind == type(event).__name__

    def test_every_event_is_frozen(self) -> None:
        for event in one_of_each():
            with pytest.raises(pydantic.ValidationError):
                event.seq = 99  # type: ignore[misc]
            assert event.seq != 99

    def test_nested_models_are_frozen(self) -> None:
        event = one_of_each()[0]
        assert isinstance(event, ExecutionStarted)
        with pytest.raises(pydantic.ValidationError):
            event.attribution.depth = 5  # type: ignore[misc]
        with pytest.raises(pydantic.ValidationError):
            event.trigger.kind = "x"  # type: ignore[misc]

    def test_extra_fields_are_forbidden(self) -> None:
        with pytest.raises(pydantic.ValidationError):
            ToolCallStarted(**envelope(), tool_call_id="c", tool="t", args={}, extra=1)  # type: ignore[call-arg]

    def test_naive_timestamps_are_rejected(self) -> None:
        values = envelope() | {"at": datetime(2026, 1, 1)}  # naive on purpose
        with pytest.raises(pydantic.ValidationError):
            ToolCallStarted(**values, tool_call_id="c", tool="t", args={})

    def test_schema_version_defaults(self) -> None:
        assert all(e.schema_version == onlooker.SCHEMA_VERSION for e in one_of_each())

    def test_attribution_defaults(self) -> None:
        assert Attribution() == Attribution(
            task_id=None,
            phase=None,
            parent_execution_id=None,
            parent_tool_call_id=None,
            depth=0,
            intent_id=None,
        )


class TestRoundTrip:
    @pytest.mark.parametrize("index", range(6))
    def test_json_str_bytes_and_dict(self, index: int) -> None:
        event = one_of_each()[index]
        raw = event.model_dump_json()
        assert parse_event(raw) == event
        assert parse_event(raw.encode()) == event
        assert parse_event(json.loads(raw)) == event
        assert parse_event(event.model_dump()) == event
        assert type(parse_event(raw)) is type(event)
        assert parse_event(raw).model_dump_json() == raw

    @pytest.mark.parametrize("indent", [None, 2])
    def test_a_lone_surrogate_is_written_and_reads_back(self, indent: int | None) -> None:
        """An undecodable file name (``os.listdir`` gives ``caf\\udce9``) in any value or key."""
        raw = one_of_each()[1].model_dump(mode="json")
        two = {"caf" + chr(0xDCE9): 1, "caf" + chr(0xDCE8): 2}  # two keys stay two
        args = {"path": "caf\udce9.txt", **two}
        event = parse_event({**raw, "tool": "st\udce9t", "args": args})
        text = event.model_dump_json(indent=indent)
        assert "\\udce9" in text
        text.encode("utf-8")  # written as an escape, so the text is UTF-8 as any other
        assert parse_event(text) == event
        if indent is None:
            plain_args = {"path": "cafe.txt", "cafe": 1, "cafx": 2}
            plain = parse_event({**raw, "tool": "stet", "args": plain_args})
            written = text.replace("\\udce9", "e").replace("\\udce8", "x")
            assert written == plain.model_dump_json()  # pydantic's form

    def test_a_long_int_beside_a_lone_surrogate_is_written_as_its_note(self) -> None:
        """The surrogate sends the event to json, which refuses an int of more than 4,300
        digits: it is written as the stores write it, not raised."""
        base = one_of_each()[1]
        event = parse_event(base.model_dump(mode="json"))
        odd = event.model_copy(update={"args": {"x": [10**5000, "caf\udce9"]}})
        written = json.loads(odd.model_dump_json())
        assert written["args"] == {
            "x": ["<int of 16610 bits: too long for JSON readers>", "caf\udce9"]
        }

    @pytest.mark.parametrize(
        ("index", "field", "value"),
        [
            (0, "trigger", {"kind": "api", "metadata": {"caf\udce9": 1}}),
            (1, "args", {"caf\udce9": 1}),
            (2, "metadata", {"caf\udce9": 1}),
            (3, "requested_schema", {"caf\udce9": {"type": "string"}}),
        ],
    )
    def test_a_lone_surrogate_only_in_a_top_level_key_is_kept(
        self, index: int, field: str, value: dict[str, Any]
    ) -> None:
        """A key of ``args``, ``metadata``, ``requested_schema`` or a trigger's metadata that
        holds a lone surrogate, with none elsewhere in the event: pydantic wrote it as three
        U+FFFD without raising, so the event did not read back (nor did history or the trail)."""
        base = one_of_each()[index]
        event = parse_event({**base.model_dump(mode="json"), field: value})
        text = event.model_dump_json()
        assert "\\udce9" in text and "\ufffd" not in text
        assert parse_event(text) == event
        assert json_form(event)[field] == value

    def test_a_time_with_another_offset_is_read_in_utc(self) -> None:
        """``at`` is a UTC time: one given with another offset is the same instant, in UTC."""
        raw = one_of_each()[1].model_dump(mode="json")
        event = parse_event({**raw, "at": "2024-01-01T05:30:00+05:30"})
        assert event.at == datetime(2024, 1, 1, tzinfo=UTC)
        assert event.at.utcoffset() == timedelta(0)
        assert '"at":"2024-01-01T00:00:00Z"' in event.model_dump_json()
        assert parse_event(event.model_dump_json()) == event

    @pytest.mark.anyio
    async def test_engine_events_round_trip(self, anyio_backend: str) -> None:
        recorder = RecordingObserver()

        async def child(ctx: ExecutionContext) -> int:
            return 7

        async def program(ctx: ExecutionContext) -> Any:
            value = await tool_program(ctx)
            await ctx.spawn(child, task_id="kid")
            return value

        async def answer(_: onlooker.Elicitation) -> InteractionResponse:
            return InteractionResponse.accept({"n": 1})

        async with ExecutionEngine(tools=[echo, boom]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(
                    program, on_elicitation=answer, trigger="cli", input={"k": [1]}
                )
        assert result.status == "completed"
        assert set(recorder.kinds()) == {
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
            "InteractionStarted",
            "InteractionResolved",
            "ExecutionFinished",
        }
        for event in recorder.events:
            raw = event.model_dump_json()
            again = parse_event(raw)
            assert again == event, event.kind
            assert again.model_dump_json() == raw
            assert event.at.tzinfo is not None
            assert event.at.utcoffset() is not None and event.at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
            with pytest.raises(pydantic.ValidationError):
                event.execution_id = "other"  # type: ignore[misc]

    def test_json_schema_of_the_union(self) -> None:
        schema = pydantic.TypeAdapter(ExecutionEvent).json_schema()
        assert schema["discriminator"]["propertyName"] == "kind"
        assert len(schema["oneOf"]) == 6
        written = pydantic.TypeAdapter(ExecutionEvent).json_schema(mode="serialization")
        assert written["$defs"]["ToolCallStarted"]["properties"]["args"]["type"] == "object"


class TestParseErrors:
    def test_unknown_kind(self) -> None:
        raw = valid_dict() | {"kind": "ToolCallExploded"}
        with pytest.raises(EventValidationError, match="ToolCallExploded") as info:
            parse_event(raw)
        assert info.value.field == "kind"

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("seq", True),
            ("seq", "3"),
            ("seq", 2.0),
            ("seq", -1),
            ("schema_version", onlooker.SCHEMA_VERSION + 1),
            ("schema_version", 0),
            ("schema_version", "1"),
        ],
    )
    def test_mistyped_or_out_of_range_envelope(self, field: str, value: object) -> None:
        """No lax conversion of a number (``True`` is not seq 1), and an event a newer
        onlooker wrote is refused rather than misread."""
        raw = valid_dict() | {field: value}
        for given in (raw, json.dumps(raw)):
            with pytest.raises(EventValidationError, match=field) as info:
                parse_event(given)
            assert info.value.field == field

    @pytest.mark.parametrize("value", [-5, -0.001, "1.5", True])
    @pytest.mark.parametrize("kind", ["ToolCallFinished", "ExecutionFinished"])
    def test_a_duration_is_a_number_of_zero_or_more(self, kind: str, value: object) -> None:
        finished = next(e for e in one_of_each() if e.kind == kind)
        raw = json.loads(finished.model_dump_json()) | {"duration_ms": value}
        for given in (raw, json.dumps(raw)):
            with pytest.raises(EventValidationError, match="duration_ms") as info:
                parse_event(given)
            assert info.value.field == "duration_ms"
        assert parse_event(raw | {"duration_ms": 0}).duration_ms == 0.0  # type: ignore[union-attr]

    def test_a_negative_depth_is_refused(self) -> None:
        raw = valid_dict()
        raw["attribution"] = {"depth": -1}
        with pytest.raises(EventValidationError) as info:
            parse_event(raw)
        assert info.value.field == "attribution.depth"

    def test_no_kind(self) -> None:
        raw = valid_dict()
        del raw["kind"]
        with pytest.raises(EventValidationError, match="kind") as info:
            parse_event(json.dumps(raw))
        assert info.value.field == "kind"

    @pytest.mark.parametrize("missing", ["tool", "tool_call_id", "args", "seq", "execution_id"])
    def test_missing_field(self, missing: str) -> None:
        raw = valid_dict()
        del raw[missing]
        with pytest.raises(EventValidationError, match=missing) as info:
            parse_event(json.dumps(raw))
        assert info.value.field == missing

    def test_missing_nested_field(self) -> None:
        raw = json.loads(one_of_each()[0].model_dump_json())
        del raw["trigger"]["kind"]
        with pytest.raises(EventValidationError, match=r"trigger\.kind") as info:
            parse_event(raw)
        assert info.value.field == "trigger.kind"

    @pytest.mark.parametrize(
        ("field", "value"),
        [("seq", "three"), ("seq", -1), ("args", [1, 2]), ("at", "yesterday"), ("tool", 5)],
    )
    def test_wrong_type(self, field: str, value: object) -> None:
        raw = valid_dict() | {field: value}
        with pytest.raises(EventValidationError, match=field) as info:
            parse_event(json.dumps(raw))
        assert info.value.field == field

    def test_naive_timestamp(self) -> None:
        raw = valid_dict() | {"at": "2026-01-01T00:00:00"}
        with pytest.raises(EventValidationError) as info:
            parse_event(raw)
        assert info.value.field == "at"

    def test_bad_status(self) -> None:
        raw = json.loads(one_of_each()[2].model_dump_json()) | {"status": "exploded"}
        with pytest.raises(EventValidationError, match="status") as info:
            parse_event(raw)
        assert info.value.field == "status"

    def test_extra_field(self) -> None:
        raw = valid_dict() | {"surprise": 1}
        with pytest.raises(EventValidationError, match="surprise") as info:
            parse_event(raw)
        assert info.value.field == "surprise"

    def test_more_than_one_problem_is_counted(self) -> None:
        raw = valid_dict()
        del raw["tool"]
        del raw["args"]
        with pytest.raises(EventValidationError, match="1 more"):
            parse_event(raw)

    @pytest.mark.parametrize("raw", ["{not json", "", '{"kind": "ToolCallStarted",'])
    def test_not_json(self, raw: str) -> None:
        with pytest.raises(EventValidationError, match="JSON"):
            parse_event(raw)

    @pytest.mark.parametrize(
        "spelled", ["NaN", "Infinity", "-Infinity", "1e999", "-2E+400", "1" + "0" * 400 + ".0"]
    )
    def test_nan_and_infinity_are_not_json(self, spelled: str) -> None:
        """pydantic's parser reads them, but no JSON reader need, and no event holds one."""
        text = one_of_each()[5].model_dump_json()
        for bad in (
            text.replace('"duration_ms":3.0', f'"duration_ms":{spelled}'),
            text.replace('"result":"done"', f'"result":[1,{{"a":{spelled}}}]'),
        ):
            assert bad != text
            with pytest.raises(EventValidationError, match="NaN and Infinity are not JSON"):
                parse_event(bad)

    def test_nan_and_infinity_in_a_dict_are_refused_too(self) -> None:
        raw = json.loads(one_of_each()[5].model_dump_json())
        for bad in ({"duration_ms": float("inf")}, {"result": {"a": [float("nan")]}}):
            with pytest.raises(EventValidationError, match="finite"):
                parse_event(raw | bad)

    def test_nan_and_infinity_inside_strings_are_text(self) -> None:
        for text in ("NaN or -Infinity", "a 1e999 in text"):
            finished = one_of_each()[5].model_copy(update={"result": text})
            assert parse_event(finished.model_dump_json()) == finished
        big = one_of_each()[5].model_copy(update={"result": 1e300})  # large, but a float
        assert parse_event(big.model_dump_json()) == big

    def test_not_utf8(self) -> None:
        with pytest.raises(EventValidationError, match="UTF-8"):
            parse_event(b'{"kind": "\xff\xfe"}')

    @pytest.mark.parametrize("raw", ["[1, 2]", "42", '"ToolCallStarted"', "null"])
    def test_json_that_is_not_an_object(self, raw: str) -> None:
        with pytest.raises(EventValidationError):
            parse_event(raw)

    @pytest.mark.parametrize("raw", [42, None, [valid_dict()], 1.5])
    def test_wrong_input_type(self, raw: Any) -> None:
        with pytest.raises(EventValidationError, match="bytes, str or dict"):
            parse_event(raw)

    def test_is_an_onlooker_error_and_a_value_error(self) -> None:
        with pytest.raises(OnlookerError):
            parse_event("{")
        with pytest.raises(ValueError):
            parse_event("{")

    def test_no_pydantic_error_leaks(self) -> None:
        for raw in ("{", b"\xff", {"kind": 1}, {}, "[]", {"kind": "ExecutionFinished"}):
            try:
                parse_event(raw)
            except EventValidationError as exc:
                assert exc.__cause__ is None or not isinstance(
                    exc.__cause__, pydantic.ValidationError
                )
                assert str(exc)
            else:
                pytest.fail(f"{raw!r} parsed")


class TestErrorInfo:
    @pytest.mark.parametrize(
        ("exc", "cause"),
        [
            (onlooker.ToolError("expected"), "failure"),
            (onlooker.ToolInputError("bad args", tool="t"), "failure"),
            (onlooker.PluginError("plugin"), "failure"),
            (ValueError("oops"), "defect"),
            (KeyError("k"), "defect"),
            (KeyboardInterrupt(), "interrupt"),
        ],
    )
    def test_cause(self, exc: BaseException, cause: str) -> None:
        from onlooker._results import error_info

        info = error_info(exc)
        assert info.cause == cause
        assert info.type == type(exc).__name__
        assert info.message
        assert parse_event(
            ToolCallFinished(
                **envelope(), tool_call_id="c", tool="t", status="failed", error=info, duration_ms=0
            ).model_dump_json()
        ) == ToolCallFinished(
            **envelope(), tool_call_id="c", tool="t", status="failed", error=info, duration_ms=0
        )

    def test_a_cancellation_inside_a_group_keeps_its_reason_only(self) -> None:
        import asyncio

        from onlooker._results import error_info

        cancelled = asyncio.CancelledError(
            "Cancelled via cancel scope 7f1ea2c494e0 by <Task pending name='main' coro=<main() "
            "running at /usr/lib/python3.11/x.py:1>>; reason: deadline exceeded"
        )
        info = error_info(BaseExceptionGroup("group", [cancelled, ValueError("v")]))
        assert info.message == (
            "group (2 sub-exceptions): CancelledError: cancelled: deadline exceeded; ValueError: v"
        )

    def test_bad_cause_is_rejected(self) -> None:
        with pytest.raises(pydantic.ValidationError):
            ErrorInfo(type="X", message="m", cause="oops")  # type: ignore[arg-type]


@onlooker.tool
def keep(data: dict[str, Any], items: list[Any]) -> dict[str, Any]:
    """Mutate what it received, then return a structure the program will mutate too."""
    data["added_by_tool"] = True
    items.append("added by tool")
    return {"nested": {"list": [1, 2]}, "data": data}


@onlooker.tool
def keep_any(thing: Any) -> Any:
    """Take anything, return it as it is."""
    return thing


class TestSnapshots:
    @pytest.mark.anyio
    async def test_mutation_after_emission_never_shows(self, anyio_backend: str) -> None:
        recorder = RecordingObserver()
        shared: dict[str, Any] = {"x": [1]}
        given: dict[str, Any] = {"k": "v", "inner": {"deep": [1]}}

        async def program(ctx: ExecutionContext) -> Any:
            result = await ctx.call(keep, data=given, items=[0])
            result["nested"]["list"].append(3)
            result["data"]["later"] = 1
            out = await ctx.call(keep_any, thing=shared)
            out["x"].append(2)  # the same object the program passed in
            shared["y"] = "late"
            final = {"value": [1]}
            ctx_final.append(final)
            return final

        ctx_final: list[dict[str, Any]] = []
        start_input: dict[str, Any] = {"in": [1]}
        async with ExecutionEngine(tools=[keep, keep_any]) as engine:
            with onlooker.observing(recorder):
                await engine.execute(program, input=start_input)
        start_input["in"].append(2)
        ctx_final[0]["value"].append(2)
        given["inner"]["deep"].append(2)

        started = recorder.of(ToolCallStarted)
        finished = recorder.of(ToolCallFinished)
        assert started[0].args == {"data": {"k": "v", "inner": {"deep": [1]}}, "items": [0]}
        assert finished[0].result == {
            "nested": {"list": [1, 2]},
            "data": {"k": "v", "inner": {"deep": [1]}, "added_by_tool": True},
        }
        assert started[1].args == {"thing": {"x": [1]}}
        assert finished[1].result == {"x": [1]}
        assert recorder.of(ExecutionStarted)[0].input == {"in": [1]}
        assert recorder.of(ExecutionFinished)[0].result == {"value": [1]}

    @pytest.mark.anyio
    async def test_odd_values_become_json(self, anyio_backend: str) -> None:
        recorder = RecordingObserver()

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call(keep_any, thing=(1, {2: "two"}, {3}))

        async with ExecutionEngine(tools=[keep_any]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(program)
        assert result.value == (1, {2: "two"}, {3})  # the program gets the real object
        finished = recorder.of(ToolCallFinished)[0]
        assert finished.result == [1, {"2": "two"}, [3]]
        for event in recorder.events:
            assert parse_event(event.model_dump_json()) == event

    @pytest.mark.anyio
    async def test_infinity_and_nan_become_null_as_in_the_json(self, anyio_backend: str) -> None:
        """JSON has no infinity or NaN: the event holds what its JSON says, ``None``, so
        ``model_dump_json()`` still round-trips exactly."""
        recorder = RecordingObserver()
        inf, nan = float("inf"), float("nan")

        async def program(ctx: ExecutionContext) -> Any:
            await ctx.call(keep_any, thing=inf)
            await ctx.call(keep_any, thing={"scores": [1.5, nan, -inf], "ok": 2.0})
            return -inf

        async with ExecutionEngine(tools=[keep_any]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(program, input={"limit": inf})
        assert result.value == -inf  # the program gets the real value
        started, finished = recorder.of(ToolCallStarted), recorder.of(ToolCallFinished)
        assert recorder.of(ExecutionStarted)[0].input == {"limit": None}
        assert started[0].args == {"thing": None}
        assert finished[0].result is None
        assert started[1].args == {"thing": {"scores": [1.5, None, None], "ok": 2.0}}
        assert recorder.of(ExecutionFinished)[0].result is None
        for event in recorder.events:
            assert parse_event(event.model_dump_json()) == event

    @pytest.mark.anyio
    async def test_an_iterator_is_recorded_by_its_repr_not_used_up(
        self, anyio_backend: str
    ) -> None:
        """Copying a generator (or a ``map``, a file) would read it: the program would
        get it empty, and an endless one would never be copied."""
        recorder = RecordingObserver()

        async def program(ctx: ExecutionContext) -> Any:
            first = await ctx.call(keep_any, thing=iter([10, 20]))
            numbers = await ctx.call(keep_any, thing=(n for n in range(3)))
            endless = await ctx.call(keep_any, thing=itertools.count())
            return [next(first), list(numbers), next(endless)]

        async with ExecutionEngine(tools=[keep_any]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(program)
        assert result.value == [10, [0, 1, 2], 0]
        results = [event.result for event in recorder.of(ToolCallFinished)]
        assert [str(value).split(" ")[0] for value in results] == [
            "<list_iterator",
            "<generator",
            "count(0)",
        ]
        assert recorder.of(ToolCallStarted)[1].args["thing"] == results[1]

    @pytest.mark.anyio
    async def test_an_int_too_long_for_json_readers_becomes_a_string(
        self, anyio_backend: str
    ) -> None:
        recorder = RecordingObserver()
        huge = 10**5000

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call(keep_any, thing=huge)

        async with ExecutionEngine(tools=[keep_any]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(program)
        assert result.value == huge  # the program gets the real value
        said = "<int of 16610 bits: too long for JSON readers>"
        assert recorder.of(ToolCallStarted)[0].args == {"thing": said}
        assert recorder.of(ToolCallFinished)[0].result == said
        assert recorder.of(ExecutionFinished)[0].result == said
        for event in recorder.events:
            assert parse_event(event.model_dump_json()) == event
        assert snapshot_object({"n": -(10**4299)})["n"] == -(10**4299)  # 4,300 digits: kept

    def test_a_nested_int_too_long_for_json_readers_reads_as_a_string(self) -> None:
        """pydantic-core copies an int nested in a value as it is, and writes it whole; its
        JSON reads back with the int as a string saying so, and NaN is still refused."""
        event = ToolCallStarted(
            event_id="e",
            execution_id="x",
            seq=0,
            at=datetime(2025, 1, 1, tzinfo=UTC),
            attribution=Attribution(),
            tool_call_id="c",
            tool="keep",
            args={"n": [10**5000, 1]},
        )
        read = parse_event(event.model_dump_json())
        assert read.args == {"n": ["<int of 5001 digits: too long for JSON readers>", 1]}  # type: ignore[union-attr]
        with_nan = event.model_dump_json().replace(",1]", ",NaN]")
        assert "NaN" in with_nan
        with pytest.raises(EventValidationError, match="NaN"):
            parse_event(with_nan)

    @pytest.mark.anyio
    @pytest.mark.parametrize("depth", [199, 253, 300, 5000])
    async def test_deeply_nested_values_round_trip(self, anyio_backend: str, depth: int) -> None:
        """pydantic-core writes 254 levels and reads 201: a snapshot keeps what both take
        through the event, and marks deeper containers."""
        recorder = RecordingObserver()
        value: list[Any] = []
        for _ in range(depth):
            value = [value]

        async def program(ctx: ExecutionContext) -> Any:
            return await ctx.call(keep_any, thing=value)

        async with ExecutionEngine(tools=[keep_any]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(program)
        assert result.value is value
        for event in recorder.events:
            assert parse_event(event.model_dump_json()) == event
        text = recorder.of(ToolCallFinished)[0].model_dump_json()
        assert ("<list nested deeper than 200 levels>" in text) is (depth > 251)

    def test_json_nested_past_every_reader_is_an_error_not_a_crash(self) -> None:
        with pytest.raises(EventValidationError, match="not valid JSON"):
            parse_event('{"kind": "ToolCallStarted", "args": ' + "[" * 5000 + "]" * 5000 + "}")

    def test_a_float_subclass_holding_infinity_is_caught_too(self) -> None:
        class Reading(float):  # numpy's float64 is such a subclass
            pass

        assert snapshot_object({"x": Reading("inf"), "y": Reading("1.5")}) == {
            "x": None,
            "y": 1.5,
        }

    def test_enum_members_become_their_json_values(self) -> None:
        class Level(enum.IntEnum):
            HIGH = 3

        class Mode(enum.StrEnum):
            FAST = "fast"

        copied = snapshot_object({"level": Level.HIGH, "mode": Mode.FAST, "nested": [Level.HIGH]})
        assert copied == {"level": 3, "mode": "fast", "nested": [3]}
        assert [type(v) for v in copied.values()] == [int, str, list]  # as its JSON reads back

    def test_pure_paths_are_their_text_as_paths_are(self) -> None:
        copied = snapshot_object(
            {
                "posix": pathlib.PurePosixPath("/srv/data/a.csv"),
                "windows": pathlib.PureWindowsPath(r"C:\data\a.csv"),
                "nested": [pathlib.PurePosixPath("b.txt"), pathlib.Path("c.txt")],
            }
        )
        assert copied == {
            "posix": "/srv/data/a.csv",
            "windows": r"C:\data\a.csv",
            "nested": ["b.txt", "c.txt"],
        }

    def test_a_model_with_an_undecodable_field_keeps_its_other_fields(self) -> None:
        @dataclasses.dataclass
        class Upload:
            filename: str
            size: int
            content: bytes

        class Frame(pydantic.BaseModel):
            seq: int
            payload: bytes

        copied = snapshot_object(
            {"doc": Upload("logo.png", 8, b"\x89PNG\r\n"), "frame": Frame(seq=7, payload=b"\xff")}
        )
        doc, frame = copied["doc"], copied["frame"]
        assert isinstance(doc, dict) and isinstance(frame, dict)
        assert (doc["filename"], doc["size"], frame["seq"]) == ("logo.png", 8, 7)
        assert "not JSON-serializable bytes" in str(doc["content"])
        assert "not JSON-serializable bytes" in str(frame["payload"])

    def test_the_field_by_field_copy_keeps_pydantics_rules_and_sees_cycles(self) -> None:
        class Login(pydantic.BaseModel):
            user: str
            password: str = pydantic.Field(exclude=True)
            avatar: bytes

        @dataclasses.dataclass
        class Node:
            name: str
            blob: bytes
            parent: Node | None = None
            children: list[Node] = dataclasses.field(default_factory=list)

        root = Node("root", b"\xff")
        root.children = [Node("a", b"\xff", root), Node("b", b"\xff", root)]
        copied = snapshot_object({"login": Login(user="ann", password="hunter2", avatar=b"\xff")})
        assert isinstance(copied["login"], dict)
        assert set(copied["login"]) == {"user", "avatar"}  # an excluded field stays out
        tree = snapshot_object({"tree": root})["tree"]  # two ways back to the root: no blow-up
        assert isinstance(tree, str) and "Circular reference" in tree

    def test_a_key_without_a_str_is_marked_not_raised(self) -> None:
        class Key:
            def __str__(self) -> str:
                raise RuntimeError("no str")

            __repr__ = __str__

        copied = snapshot_object({Key(): 1, "ok": {Key(): 2}})
        ((key, value), (ok_key, nested)) = copied.items()
        assert key.startswith("<not JSON-serializable Key") and value == 1
        assert ok_key == "ok" and isinstance(nested, dict)


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


@onlooker.tool
def cyclic() -> dict[str, Any]:
    """Return a dict that contains itself."""
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = loop
    return loop


@onlooker.tool
def unprintable() -> Unprintable:
    """Return an object that cannot even be repr()'d."""
    return Unprintable()


class TestUnserializableValues:
    @pytest.mark.anyio
    async def test_a_value_that_cannot_be_copied_never_breaks_a_pair(
        self, anyio_backend: str, check_stream: Callable[[Sequence[ExecutionEvent]], None]
    ) -> None:
        recorder = RecordingObserver()

        async def program(ctx: ExecutionContext) -> Any:
            loop = await ctx.call(cyclic)
            assert loop["self"] is loop, "the program gets the real object"
            await ctx.call(unprintable)
            back: list[Any] = []
            back.append(back)
            return back

        async with ExecutionEngine(tools=[cyclic, unprintable]) as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(program)
        assert result.status == "completed"
        check_stream(recorder.events)
        results = [f.result for f in recorder.of(ToolCallFinished)]
        assert [f.status for f in recorder.of(ToolCallFinished)] == ["completed", "completed"]
        assert all(isinstance(r, str) and "not JSON-serializable" in r for r in results)
        final = recorder.of(ExecutionFinished)[0].result
        assert isinstance(final, str) and "not JSON-serializable list" in final
        for event in recorder.events:
            assert parse_event(event.model_dump_json()) == event

    @pytest.mark.anyio
    async def test_an_answer_keeps_its_shape_around_a_value_that_cannot_be_copied(
        self, anyio_backend: str
    ) -> None:
        recorder = RecordingObserver()
        loop: dict[str, Any] = {"name": "loop"}
        loop["self"] = loop

        async def asking(ctx: ExecutionContext) -> None:
            await ctx.elicit("Go on?")

        async def answer(question: onlooker.Elicitation) -> onlooker.InteractionResponse:
            return onlooker.InteractionResponse.accept({"approve": True, "context": loop})

        async with ExecutionEngine() as engine:
            with onlooker.observing(recorder):
                result = await engine.execute(asking, on_elicitation=answer)
        assert result.status == "completed"
        [resolved] = recorder.of(InteractionResolved)
        assert isinstance(resolved.response, dict)
        assert resolved.response["approve"] is True  # the rest of the answer is kept
        assert str(resolved.response["context"]).startswith("<not JSON-serializable dict")
        assert parse_event(resolved.model_dump_json()) == resolved


def test_the_emitters_typed_fields_are_the_models_own() -> None:
    """Events are built without validation: each kind's TypedDict must match its model."""
    from typing import get_type_hints

    from onlooker._emitter import FIELDS_BY_KIND
    from onlooker._events import _Envelope

    envelope = set(_Envelope.model_fields)
    assert set(FIELDS_BY_KIND) == set(onlooker.ExecutionEvent.__args__[0].__args__)  # type: ignore[attr-defined]  # the union behind the Annotated alias
    for event_class, fields in FIELDS_BY_KIND.items():
        assert set(get_type_hints(fields)) == set(event_class.model_fields) - envelope


def test_a_value_that_cannot_be_copied_is_marked_alone() -> None:
    class Unprintable:
        def __repr__(self) -> str:
            raise ValueError("no repr")

    copied = onlooker._events.snapshot({"nested": {"bad": Unprintable(), "ok": 1}, "n": [2]})
    assert copied == {
        "nested": {"bad": "<not JSON-serializable Unprintable: no repr>", "ok": 1},
        "n": [2],
    }
