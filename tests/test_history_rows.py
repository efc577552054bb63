"""Events to rows: named after the tables' columns, merged per entity, redacted first."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import pytest
import sqlalchemy as sa
from pydantic import JsonValue
from pydantic_core import to_json

from onlooker import (
    Attribution,
    ErrorInfo,
    ExecutionEvent,
    ToolCallFinished,
    ToolCallStarted,
)
from onlooker.plugins import history
from onlooker.plugins.history import _bulk, _rows, tables
from onlooker.plugins.history._deadletters import DeadLetters
from onlooker.plugins.history._redaction import Scrubber
from test_history import every_kind
from test_history_support import T0, backend_url, execution_events

PROJECTIONS = {
    table.name: table for table in (tables.executions, tables.tool_calls, tables.interactions)
}


def rows_of(events: list[ExecutionEvent], backend: str = "sqlite") -> _rows.Rows:
    return _rows.build_rows([_rows.stored(event) for event in events], backend)


def call(seq: int, **fields: object) -> ToolCallFinished:
    base: dict[str, object] = {
        "event_id": f"f{seq}",
        "execution_id": "x",
        "seq": seq,
        "at": T0 + timedelta(seconds=seq),
        "attribution": Attribution(),
        "tool_call_id": "c",
        "tool": "t",
        "status": "completed",
        "duration_ms": 1.5,
    }
    return ToolCallFinished.model_validate({**base, **fields})


class TestRowsAreNamedByTheSchema:
    def test_every_row_names_only_columns_of_its_table(self) -> None:
        rows = rows_of(every_kind())
        for name, table in PROJECTIONS.items():
            entities = getattr(rows, name)
            assert entities, f"no {name} row"
            for row in entities.values():
                assert set(row) <= {column.name for column in table.c}
        assert all(len(row) == len(tables.events.c) for row in rows.events)

    def test_values_land_in_their_columns(self) -> None:
        events = every_kind()
        rows = rows_of(events)
        (call_row,) = _bulk._tuples(rows.tool_calls.values(), _bulk._columns(tables.tool_calls))
        by_name = dict(zip((c.name for c in tables.tool_calls.c), call_row, strict=True))
        assert by_name["tool_call_id"] == "c1" and by_name["tool"] == "fs.read"
        assert by_name["status"] == "failed" and by_name["duration_ms"] == 1.25
        assert by_name["seq"] == 1  # the smaller of its two events'
        assert by_name["started_at"] == "2025-01-01 12:00:00.123457"
        assert by_name["finished_at"] == "2025-01-01 12:00:01.123456"
        logged = dict(zip((c.name for c in tables.events.c), rows.events[0], strict=True))
        assert (logged["event_id"], logged["kind"], logged["seq"]) == ("e0", "ExecutionStarted", 0)

    def test_a_column_no_event_of_the_batch_named_is_null(self) -> None:
        rows = rows_of([call(5)])  # only the end of the call is in this batch
        (values,) = _bulk._tuples(rows.tool_calls.values(), _bulk._columns(tables.tool_calls))
        by_name = dict(zip((c.name for c in tables.tool_calls.c), values, strict=True))
        assert by_name["args"] is None and by_name["started_at"] is None
        assert by_name["status"] == "completed"

    def test_statements_follow_the_table(self) -> None:
        statement = _bulk.SqliteBulk()._projections[1][2]
        columns = ", ".join(column.name for column in tables.tool_calls.c)
        assert statement.startswith(f"INSERT INTO tool_calls ({columns}) VALUES")
        assert "seq = CASE WHEN excluded.seq < tool_calls.seq" in statement
        assert "status = CASE WHEN tool_calls.status IS NULL" in statement
        assert (
            "tool = CASE WHEN tool_calls.status IS NULL THEN COALESCE(excluded.tool, tool_calls.tool) "
            "ELSE COALESCE(tool_calls.tool, excluded.tool) END"
        ) in statement


class TestMergeWithinABatch:
    def test_a_known_value_is_never_replaced_by_none(self) -> None:
        started = ToolCallStarted(
            event_id="s",
            execution_id="x",
            seq=1,
            at=T0,
            attribution=Attribution(phase="build"),
            tool_call_id="c",
            tool="t",
            args={},
        )
        row = rows_of([started, call(2)]).tool_calls["x", "c"]
        assert row["phase"] == "build" and row["seq"] == 1
        reversed_row = rows_of([call(2), started]).tool_calls["x", "c"]
        assert reversed_row == row

    def test_postgresql_rows_hold_no_nul_in_text(self) -> None:
        error = ErrorInfo(type="E", message="bad \x00", cause="failure")
        rows = rows_of([call(3, tool="a\x00b", error=error)], backend="postgresql")
        row = rows.tool_calls["x", "c"]
        assert row["tool"] == "a\ufffdb"
        assert row["error"] is not None and "\\u0000" in row["error"]  # JSON keeps it escaped


class TestRedactionBeforeRows:
    def test_a_secret_learned_late_in_a_batch_is_scrubbed_from_earlier_events(
        self, tmp_path: Path
    ) -> None:
        secret = "hunter2hunter2"
        echoed = call(1, result={"echo": f"the password is {secret}"})
        teaching = ToolCallStarted(
            event_id="s2",
            execution_id="x",
            seq=2,
            at=T0,
            attribution=Attribution(),
            tool_call_id="d",
            tool="login",
            args={"password": secret},
        )
        dead = DeadLetters([tmp_path / "dead.jsonl"], logging.getLogger("test"))
        ready = Scrubber(None, 1000).prepare([echoed, teaching], dead)
        assert [item.event.event_id for item in ready] == ["f1", "s2"]
        assert all(secret not in item.body for item in ready)
        assert dead.count == 0

    def test_a_value_a_rule_redacted_is_scrubbed_from_the_batchs_other_events(
        self, tmp_path: Path
    ) -> None:
        """The screen passed the echo (no hint of a secret in it); the command taught it."""
        secret = "Zq8-vault-Pw-4417"
        echoed = call(1, result={"stdout": f"db.password_is {secret}"})
        teaching = started(2, {"command": f"export DB_PASSWORD={secret} && ./run"})
        dead = DeadLetters([tmp_path / "dead.jsonl"], logging.getLogger("test"))
        ready = Scrubber(None, 1000).prepare([echoed, teaching], dead)
        assert [secret in item.body for item in ready] == [False, False]

    def test_a_secret_learned_later_reaches_events_the_screen_had_passed(
        self, tmp_path: Path
    ) -> None:
        secret = "q8Zr7731xyzzy"
        echoed = call(1, result={"echo": f"got {secret} back"})  # no hint of a secret
        dead = DeadLetters([tmp_path / "dead.jsonl"], logging.getLogger("test"))
        scrubber = Scrubber(None, 1000)
        assert scrubber.prepare([echoed], dead)[0].event is echoed  # passed as it came
        ready = scrubber.prepare(
            [call(2, result={"echo": secret}), started(3, {"token": secret})], dead
        )
        assert [secret in item.body for item in ready] == [False, False]
        echoed_again = ready[0].event
        assert isinstance(echoed_again, ToolCallFinished)
        assert echoed_again.result == {"echo": "[REDACTED:secret_field]"}

    def test_a_huge_value_is_cut_and_redacted_in_what_is_kept(self, tmp_path: Path) -> None:
        learned = "hunter2hunter2"  # learned from the first event, echoed in the huge value
        near, beyond = "AKIAIOSFODNN7EXAMPLE", "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
        text = f"key {near} then {learned} " + "y" * 100_000 + f" {beyond} {learned}"
        teaching = started(1, {"password": learned})
        huge = started(2, {"text": text, "n": 7})
        dead = DeadLetters([tmp_path / "dead.jsonl"], logging.getLogger("test"))
        ready = Scrubber(None, 1000).prepare([teaching, huge], dead)
        assert [item.event.event_id for item in ready] == ["s1", "s2"] and dead.count == 0
        kept = ready[1].event
        assert isinstance(kept, ToolCallStarted) and kept.args["n"] == 7
        cut = kept.args["text"]
        assert isinstance(cut, str) and len(cut) < 1100
        assert cut.startswith("key [REDACTED:aws_access_key] then [REDACTED:")
        assert "…[truncated " in cut and cut.endswith(" chars]")
        for item in ready:
            assert [word for word in (near, beyond, learned) if word in item.body] == []
            assert item.body == item.event.model_dump_json()  # serialized once, as parsed back
        (row,) = _rows.build_rows(ready[1:], "sqlite").tool_calls.values()
        assert json.loads(row["args"]) == kept.args

    def test_events_the_screen_passes_are_stored_as_they_came(self, tmp_path: Path) -> None:
        events = every_kind()
        dead = DeadLetters([tmp_path / "dead.jsonl"], logging.getLogger("test"))
        ready = Scrubber(None, 20_000).prepare(events, dead)
        assert [item.event for item in ready] == events
        assert [item.body for item in ready] == [event.model_dump_json() for event in events]


def started(seq: int, args: dict[str, JsonValue]) -> ToolCallStarted:
    return ToolCallStarted(
        event_id=f"s{seq}",
        execution_id="x",
        seq=seq,
        at=T0,
        attribution=Attribution(),
        tool_call_id=f"c{seq}",
        tool="t",
        args=args,
    )


class TestArgumentsColumn:
    ARGS: ClassVar[list[dict[str, JsonValue]]] = [
        {},
        {"text": 'quote " back \\ slash \n nul \x00 é 漢 😀'},
        {"nested": {"args": [1, 2.5, 1e-05, -0.0, None, True]}, ',"args":': "x"},
        {"big": 12345678901234567890, "small": 1e-7, "list": [{"a": []}]},
    ]

    @pytest.mark.parametrize("args", ARGS)
    @pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
    def test_it_holds_the_arguments_json(self, args: dict[str, JsonValue], backend: str) -> None:
        event = started(1, args)
        event = event.model_copy(update={"tool": 'a ,"args": b'})  # the key, quoted in a value
        (row,) = rows_of([event], backend).tool_calls.values()
        expected = to_json(event.args).decode()
        assert row["args"] == expected  # a NUL stays escaped: \u0000
        assert json.loads(row["args"]) == event.args


@pytest.mark.anyio
async def test_rows_written_and_read_back_by_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    async with history.open(url) as store:
        await store.write_events(every_kind())
        count = await store.query(
            lambda conn: conn.execute(
                sa.select(sa.func.count()).select_from(tables.tool_calls)
            ).scalar_one()
        )
        tree = await store.get_execution("x1")
    assert count == 1
    assert tree is not None and tree.tool_calls[0].metadata == {"hook": "h"}


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database on each backend."""
    yield from backend_url(str(request.param), tmp_path)


@pytest.mark.anyio
async def test_a_batch_of_stored_and_new_events_writes_the_new_ones(url: str) -> None:
    first = execution_events("a", tools=[("t", "completed", 1.0)])
    second = execution_events("b", tools=[("t", "failed", 2.0)])
    async with history.open(url) as store:
        assert await store.write_events(first) == len(first)
        mixed = [*first[:2], *second, *first[2:]]
        assert await store.write_events(mixed) == len(second)  # PostgreSQL: the copy undone
        assert await store.events("b") == second
        tree = await store.get_execution("b")
    assert tree is not None and [c.status for c in tree.tool_calls] == ["failed"]
