"""The history store on SQLite and on PostgreSQL: round trips, trees, queries, replay, schema."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

import onlooker
from onlooker import (
    Attribution,
    ErrorInfo,
    ExecutionContext,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionResponse,
    InteractionStarted,
    ToolCallFinished,
    ToolCallStarted,
    Trigger,
)
from onlooker.plugins import history
from onlooker.plugins.history import ExecutionTree, tables
from onlooker.testing import RecordingObserver
from test_history_support import T0, add, backend_url, execution_events, fail

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database on each backend."""
    yield from backend_url(str(request.param), tmp_path)


def every_kind() -> list[ExecutionEvent]:
    """One event of each kind, with awkward values (unicode, NUL, nesting, errors)."""
    attribution = Attribution(task_id="t", phase="p", depth=0, intent_id="i")
    base: dict[str, Any] = {"execution_id": "x1", "attribution": attribution}
    error = ErrorInfo(type="ValueError", message="bad \x00 value ✓", cause="defect")
    return [
        ExecutionStarted(
            event_id="e0", seq=0, at=T0, program="prog ✓", owner="alice",
            trigger=Trigger(kind="api", metadata={"request": {"id": 7}}),
            input={"nested": [1, 2.5, None, True, "s"]}, **base,
        ),
        ToolCallStarted(
            event_id="e1", seq=1, at=T0 + timedelta(microseconds=1), tool_call_id="c1",
            tool="fs.read", args={"path": "a\x00b.md", "n": 10**15}, **base,
        ),
        ToolCallFinished(
            event_id="e2", seq=2, at=T0 + timedelta(seconds=1), tool_call_id="c1",
            tool="fs.read", status="failed", error=error, duration_ms=1.25,
            metadata={"hook": "h"}, **base,
        ),
        InteractionStarted(
            event_id="e3", seq=3, at=T0 + timedelta(seconds=2), interaction_id="q1",
            message="Deploy?", requested_schema={"type": "object"}, mode="paused", **base,
        ),
        InteractionResolved(
            event_id="e4", seq=4, at=T0 + timedelta(seconds=3), interaction_id="q1",
            status="accepted", response={"ok": True}, **base,
        ),
        ExecutionFinished(
            event_id="e5", seq=5, at=T0 + timedelta(seconds=4), status="failed",
            result=None, error=error, duration_ms=4000.5, **base,
        ),
    ]  # fmt: skip


class TestRoundTrip:
    async def test_every_kind_comes_back_equal(self, url: str) -> None:
        events = every_kind()
        async with history.open(url) as store:
            assert await store.write_events(events) == 6
            assert await store.events("x1") == events
            tree = await store.get_execution("x1")
        assert tree is not None
        assert (tree.program, tree.trigger, tree.owner, tree.status) == (
            "prog ✓",
            "api",
            "alice",
            "failed",
        )
        assert tree.trigger_metadata == {"request": {"id": 7}}
        assert tree.input == {"nested": [1, 2.5, None, True, "s"]}
        assert tree.error == events[1 + 4].error  # type: ignore[union-attr]
        assert tree.started_at == T0
        assert (tree.task_id, tree.phase, tree.intent_id) == ("t", "p", "i")
        (call,) = tree.tool_calls
        assert call.status == "failed" and call.duration_ms == 1.25
        assert call.args is not None and call.args["n"] == 10**15
        assert call.metadata == {"hook": "h"}
        assert call.started_at == T0 + timedelta(microseconds=1)
        (question,) = tree.interactions
        assert (question.status, question.mode, question.response) == (
            "accepted",
            "paused",
            {"ok": True},
        )
        assert question.requested_schema == {"type": "object"}

    async def test_engine_events_are_stored_as_emitted(self, url: str) -> None:
        recorder = RecordingObserver()

        async def program(ctx: ExecutionContext) -> int:
            await ctx.call("add", a=1, b=2)
            with contextlib.suppress(onlooker.ToolError):
                await ctx.call("fail")
            answer = await ctx.elicit("Sure?", schema={"type": "object"})
            return 1 if answer.action == "accept" else 0

        async def accept(question: onlooker.Elicitation) -> InteractionResponse:
            return InteractionResponse.accept({"yes": True})

        plugin = history.plugin(url)
        async with onlooker.ExecutionEngine(tools=[add, fail], plugins=[plugin]) as engine:
            engine.bus.subscribe(recorder)
            result = await engine.execute(program, trigger="cli", on_elicitation=accept)
            await engine.bus.flush()
            stored = await engine.extension(plugin).events(result.execution_id)
        assert stored == recorder.events
        assert [e.seq for e in stored] == list(range(8))

    async def test_unknown_ids(self, url: str) -> None:
        async with history.open(url) as store:
            assert await store.get_execution("nope") is None
            assert await store.events("nope") == []


async def test_three_level_spawn_tree_with_interactions(url: str) -> None:
    async def grandchild(ctx: ExecutionContext) -> str:
        await ctx.call("add", a=3, b=3)
        answer = await ctx.elicit("Grandchild asks")
        return answer.action

    async def child(ctx: ExecutionContext) -> str:
        await ctx.call("add", a=2, b=2)
        result = await ctx.spawn(grandchild, task_id="level2")
        return str(result.value)

    async def root(ctx: ExecutionContext) -> int:
        await ctx.elicit("Root asks")
        await ctx.spawn(child, task_id="first")
        await ctx.spawn(child, task_id="second")
        total: int = await ctx.call("add", a=1, b=1)
        return total

    plugin = history.plugin(url)
    async with onlooker.ExecutionEngine(tools=[add], plugins=[plugin]) as engine:
        result = await engine.execute(root, trigger="cli")
    async with history.open(url) as store:
        tree = await store.get_execution(result.execution_id)
    assert tree is not None and tree.status == "completed" and tree.result == 2

    def shape(node: ExecutionTree) -> object:
        return (
            node.depth,
            node.task_id,
            [call.tool for call in node.tool_calls],
            [(q.message, q.status) for q in node.interactions],
            [shape(c) for c in node.children],
        )

    grand: object = (2, "level2", ["add"], [("Grandchild asks", "declined")], [])
    assert shape(tree) == (
        0,
        None,
        ["add"],
        [("Root asks", "declined")],
        [(1, "first", ["add"], [], [grand]), (1, "second", ["add"], [], [grand])],
    )
    first = tree.children[0]
    assert first.parent_execution_id == tree.execution_id
    assert first.children[0].parent_execution_id == first.execution_id
    assert first.children[0].result == "decline"


class TestQueries:
    async def _fill(self, store: history.HistoryStore) -> list[str]:
        ids = []
        batch: list[ExecutionEvent] = []
        for index in range(23):
            execution_id = f"run{index:02d}"
            ids.append(execution_id)
            batch += execution_events(
                execution_id,
                at=T0 + timedelta(minutes=index),
                trigger="api" if index % 3 == 0 else "cli",
                status="failed" if index % 4 == 0 else "completed",
                tools=[("fetch", "completed", 1.0)] if index % 2 == 0 else [],
            )
        # two executions started in the same microsecond: the id breaks the tie
        batch += execution_events("tieA", at=T0 + timedelta(minutes=5))
        batch += execution_events("tieB", at=T0 + timedelta(minutes=5))
        # a running one
        batch += execution_events("live", at=T0 + timedelta(minutes=30))[:1]
        random.Random(4).shuffle(batch)
        await store.write_events(batch)
        return ids

    async def test_filters(self, url: str) -> None:
        async with history.open(url) as store:
            await self._fill(store)
            failed = await store.list_executions(status="failed")
            assert {r.execution_id for r in failed} == {f"run{i:02d}" for i in range(0, 23, 4)}
            running = await store.list_executions(status="running")
            assert [r.execution_id for r in running] == ["live"]
            assert running[0].finished_at is None
            api = await store.list_executions(trigger="api")
            assert {r.execution_id for r in api} == {f"run{i:02d}" for i in range(0, 23, 3)}
            fetching = await store.list_executions(tool="fetch", status="completed")
            expected = {f"run{i:02d}" for i in range(0, 23, 2) if i % 4 != 0}
            assert {r.execution_id for r in fetching} == expected
            window = await store.list_executions(
                since=T0 + timedelta(minutes=10), until=T0 + timedelta(minutes=12)
            )
            assert [r.execution_id for r in window] == ["run11", "run10"]
            assert await store.list_executions(tool="nothing") == []

    async def test_keyset_pagination_newest_first(self, url: str) -> None:
        async with history.open(url) as store:
            await self._fill(store)
            everything = await store.list_executions(limit=1000)
            assert everything.next_cursor is None
            starts = [r.started_at for r in everything]
            assert starts == sorted(starts, reverse=True)  # type: ignore[type-var]
            assert everything[0].execution_id == "live"
            seen: list[str] = []
            cursor = None
            pages = 0
            while True:
                page = await store.list_executions(limit=4, cursor=cursor)
                seen += [r.execution_id for r in page]
                pages += 1
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            assert seen == [r.execution_id for r in everything]
            assert pages == 7  # 26 executions, 4 per page
            assert seen.index("tieB") + 1 == seen.index("tieA")

    async def test_bad_arguments_are_clear_errors(self, url: str) -> None:
        async with history.open(url) as store:
            with pytest.raises(ValueError, match="unknown execution status 'done'"):
                await store.list_executions(status="done")
            with pytest.raises(ValueError, match="limit"):
                await store.list_executions(limit=0)
            with pytest.raises(ValueError, match="since must be a timezone-aware"):
                await store.list_executions(since=T0.replace(tzinfo=None))
            with pytest.raises(onlooker.HistoryError, match="invalid cursor"):
                await store.list_executions(cursor="not-a-cursor")

    async def test_stats(self, url: str) -> None:
        calls = [("slow", "completed", float(ms)) for ms in range(1, 21)]
        calls += [("slow", "failed", 100.0), ("quick", "completed", 0.5)]
        calls += [("quick", "blocked", 0.1)]
        async with history.open(url) as store:
            await store.write_events(execution_events("s1", tools=calls[:12]))
            await store.write_events(execution_events("s2", status="failed", tools=calls[12:]))
            await store.write_events(execution_events("s3")[:1])
            stats = await store.stats()
            later = await store.stats(since=T0 + timedelta(days=1))
            earlier = await store.stats(until=T0)
            whole = await store.stats(since=T0, until=T0 + timedelta(days=1))
            with pytest.raises(ValueError, match="until"):
                await store.stats(until=datetime(2026, 1, 1))  # naive
        assert whole == stats.model_copy(update={"since": T0})
        assert earlier.executions == 0 and earlier.tools == []
        assert stats.executions == 3
        assert stats.executions_by_status == {"completed": 1, "failed": 1, "running": 1}
        assert stats.tool_calls == 23
        slow, quick = stats.tools
        assert (slow.tool, slow.calls, slow.failed) == ("slow", 21, 1)
        assert slow.by_status == {"completed": 20, "failed": 1}
        assert slow.failure_rate == pytest.approx(1 / 21)
        # nearest rank over 1..20 ms and 100 ms: p50 is the 11th value, p95 the 20th
        assert (slow.p50_ms, slow.p95_ms) == (11.0, 20.0)
        assert (quick.calls, quick.failed, quick.failure_rate) == (2, 0, 0.0)
        assert quick.by_status == {"completed": 1, "blocked": 1}
        assert (quick.p50_ms, quick.p95_ms) == (0.1, 0.5)
        assert later.executions == 0 and later.tools == []

    async def test_query_with_the_tables(self, url: str) -> None:
        async with history.open(url) as store:
            await store.write_events(execution_events("q", tools=[("a", "completed", 2.0)]))
            rows = await store.query(
                lambda conn: conn.execute(
                    sa.select(tables.tool_calls.c.tool, tables.tool_calls.c.duration_ms)
                ).all()
            )
        assert [tuple(row) for row in rows] == [("a", 2.0)]


class TestIdempotence:
    async def test_replay_changes_nothing(self, url: str) -> None:
        events = execution_events("r", tools=[("a", "completed", 1.0), ("b", "failed", 2.0)])
        child = execution_events("rc", parent="r", depth=1, at=T0 + timedelta(seconds=1))
        async with history.open(url) as store:
            assert await store.write_events(events + child) == len(events) + len(child)
            before = await store.get_execution("r")
            assert await store.write_events(events + child) == 0
            shuffled = (events + child) * 2
            random.Random(1).shuffle(shuffled)
            assert await store.write_events(shuffled) == 0
            assert await store.get_execution("r") == before
            assert await store.events("r") == events
            counts = await store.query(
                lambda conn: [
                    conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()
                    for table in (tables.events, tables.executions, tables.tool_calls)
                ]
            )
        assert counts == [len(events) + len(child), 2, 2]
        assert before is not None and len(before.children) == 1

    @pytest.mark.parametrize("same_batch", [True, False])
    async def test_a_second_end_with_another_id_does_not_rewrite_the_execution(
        self, url: str, same_batch: bool
    ) -> None:
        """A forged (or merged) ``ExecutionFinished`` / ``ToolCallFinished`` under a new
        event id changed the recorded status: the later end won the merge."""
        events = execution_events("f", tools=[("a", "completed", 1.0)])
        ends = [e for e in events if isinstance(e, ExecutionFinished | ToolCallFinished)]
        forged: list[ExecutionEvent] = [
            end.model_copy(update={"event_id": f"forged-{end.event_id}", "status": "cancelled"})
            for end in ends
        ]
        async with history.open(url) as store:
            if same_batch:
                await store.write_events(events + forged)
            else:
                await store.write_events(events)
                assert await store.write_events(forged) == 2  # the log keeps what it is given
            tree = await store.get_execution("f")
        assert tree is not None
        assert tree.status == "completed"
        assert [call.status for call in tree.tool_calls] == ["completed"]

    @pytest.mark.parametrize("same_batch", [True, False])
    @pytest.mark.parametrize("end_first", [False, True])
    async def test_the_end_attribution_wins_in_any_order(
        self, url: str, same_batch: bool, end_first: bool
    ) -> None:
        """A run started under one phase and finished under another read as whichever of
        its events was written last (an end written before its start, as a spill drained
        after the next batch does, read as the start)."""
        events = execution_events("p")
        started, finished = events[0], events[-1]
        assert isinstance(started, ExecutionStarted)
        started = started.model_copy(
            update={"attribution": started.attribution.model_copy(update={"phase": "plan"})}
        )
        finished = finished.model_copy(
            update={"attribution": finished.attribution.model_copy(update={"phase": "report"})}
        )
        order: list[ExecutionEvent] = [finished, started] if end_first else [started, finished]
        async with history.open(url) as store:
            if same_batch:
                await store.write_events(order)
            else:
                for event in order:
                    await store.write_events([event])
            phase, program = await store.query(
                lambda conn: conn.execute(
                    sa.select(tables.executions.c.phase, tables.executions.c.program)
                ).one()
            )
        assert (phase, program) == ("report", started.program)

    async def test_any_order_gives_the_same_rows(self, url: str) -> None:
        events = execution_events("o", tools=[("a", "completed", 1.0)] * 3)
        async with history.open(url) as store:
            for event in reversed(events):  # finished before started, one at a time
                await store.write_events([event])
            tree = await store.get_execution("o")
        assert tree is not None
        assert tree.status == "completed" and tree.started_at == T0
        assert [c.seq for c in tree.tool_calls] == [1, 3, 5]
        assert all(c.status == "completed" and c.args is not None for c in tree.tool_calls)


class TestSchemaVersion:
    async def test_newer_schema_is_refused(self, url: str) -> None:
        async with history.open(url) as store:
            await store.write_events(execution_events("kept"))
            await store.query(lambda conn: None)
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.update(tables.schema_version).values(version=99))
        engine.dispose()
        with pytest.raises(onlooker.SchemaVersionError, match="schema version 99") as info:
            async with history.open(url):
                pass
        assert (info.value.found, info.value.supported) == (99, history.HISTORY_SCHEMA_VERSION)

    async def test_a_numeric_version_column_is_read_as_its_integer(self, tmp_path: Path) -> None:
        """As a migration tool may have altered it on PostgreSQL (``numeric``)."""
        for url in backend_url("postgres", tmp_path):
            async with history.open(url) as store:
                await store.write_events(execution_events("kept"))
            engine = sa.create_engine(url)
            with engine.begin() as conn:
                conn.exec_driver_sql("ALTER TABLE schema_version ALTER COLUMN version TYPE numeric")
            engine.dispose()
            for read_only in (True, False):
                async with history.open(url, read_only=read_only) as store:
                    assert (await store.get_execution("kept")) is not None

    async def test_older_schema_is_migrated(self, url: str) -> None:
        events = execution_events("old", tools=[("a", "completed", 1.0)])
        async with history.open(url) as store:
            await store.write_events(events)
        engine = sa.create_engine(url)
        with engine.begin() as conn:  # make it a version 1 database: the event log alone
            for table in (tables.interactions, tables.tool_calls, tables.executions):
                table.drop(conn)
            conn.execute(sa.update(tables.schema_version).values(version=1))
        engine.dispose()
        with pytest.raises(onlooker.SchemaVersionError, match="needs a migration") as info:
            async with history.open(url, read_only=True):  # cannot migrate it
                pass
        assert (info.value.found, info.value.supported) == (1, history.HISTORY_SCHEMA_VERSION)
        async with history.open(url) as store:
            tree = await store.get_execution("old")
            version = await store.query(
                lambda conn: conn.execute(sa.select(tables.schema_version.c.version)).scalar()
            )
        assert version == history.HISTORY_SCHEMA_VERSION
        assert tree is not None and tree.status == "completed"
        assert [c.tool for c in tree.tool_calls] == ["a"]

    async def test_an_event_an_older_onlooker_took_does_not_stop_the_migration(
        self, url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An older onlooker read a negative depth; this one refuses it. The rest of the
        database migrates (it failed whole: every read refused it), the event is kept."""
        async with history.open(url) as store:
            await store.write_events(execution_events("good", tools=[("a", "completed", 1.0)]))
            await store.write_events(execution_events("odd", tools=[("b", "completed", 1.0)]))
        engine = sa.create_engine(url)
        with engine.begin() as conn:  # version 1, with one body no longer valid
            for table in (tables.interactions, tables.tool_calls, tables.executions):
                table.drop(conn)
            conn.execute(sa.update(tables.schema_version).values(version=1))
            body = conn.execute(
                sa.select(sa.cast(tables.events.c.body, sa.Text)).where(
                    tables.events.c.execution_id == "odd", tables.events.c.seq == 1
                )
            ).scalar_one()
            odd = body.replace('"depth":0', '"depth":-1')
            assert odd != body
            conn.execute(
                sa.update(tables.events)
                .where(tables.events.c.execution_id == "odd", tables.events.c.seq == 1)
                .values(body=json.loads(odd))
            )
        engine.dispose()
        with caplog.at_level(logging.WARNING, logger="onlooker.plugins.history"):
            async with history.open(url) as store:
                good = await store.get_execution("good")
                odd_tree = await store.get_execution("odd")
                kept = await store.query(
                    lambda conn: conn.execute(
                        sa.select(sa.func.count()).select_from(tables.events)
                    ).scalar_one()
                )
        assert good is not None and [c.tool for c in good.tool_calls] == ["a"]
        assert odd_tree is not None and odd_tree.tool_calls[0].status == "completed"
        assert kept == 2 * len(execution_events("good", tools=[("a", "completed", 1.0)]))
        assert "does not read as an event any more" in caplog.text


async def two_runs_reusing_ids(url: str) -> None:
    """Two tracked runs whose framework gave both a call ``call_1`` and a question ``ask_1``."""
    async with onlooker.ExecutionEngine(plugins=[history.plugin(url)]) as engine:
        for name in ("one", "two"):
            async with engine.track(name, execution_id=name) as run:
                call = await run.tool_started("search", {"q": name}, tool_call_id="call_1")
                await call.finished(f"found by {name}")
                await run.interaction_started(f"{name}?", interaction_id="ask_1")
                await run.interaction_resolved("ask_1", "accepted", {"by": name})


class TestIdsPerExecution:
    """A tracked run takes its framework's ids, unique only within the run: two runs may
    both have a ``call_1``. Keyed by the id alone, the second took the first's row."""

    async def test_each_execution_keeps_its_own_calls_and_questions(self, url: str) -> None:
        await two_runs_reusing_ids(url)
        async with history.open(url) as store:
            trees = [await store.get_execution(name) for name in ("one", "two")]
            stats = await store.stats()
        for name, tree in zip(("one", "two"), trees, strict=True):
            assert tree is not None
            assert [(c.tool_call_id, c.args, c.result) for c in tree.tool_calls] == [
                ("call_1", {"q": name}, f"found by {name}")
            ]
            assert [(i.interaction_id, i.response) for i in tree.interactions] == [
                ("ask_1", {"by": name})
            ]
        assert stats.tool_calls == 2

    async def test_a_version_2_database_is_rebuilt_with_the_new_keys(self, url: str) -> None:
        await two_runs_reusing_ids(url)
        engine = sa.create_engine(url)
        with engine.begin() as conn:  # version 2: calls and questions keyed by their id alone
            for table in (tables.tool_calls, tables.interactions):
                table.drop(conn)
                key = table.c[0].name
                old = sa.Table(
                    table.name,
                    sa.MetaData(),
                    *(
                        sa.Column(c.name, c.type, primary_key=c.name == key, nullable=c.nullable)
                        for c in table.c
                    ),
                )
                old.create(conn)
            conn.execute(sa.update(tables.schema_version).values(version=2))
        engine.dispose()
        async with history.open(url) as store:
            trees = [await store.get_execution(name) for name in ("one", "two")]
            version = await store.query(
                lambda conn: conn.execute(sa.select(tables.schema_version.c.version)).scalar()
            )
        assert version == history.HISTORY_SCHEMA_VERSION == 3
        assert [[c.result for c in t.tool_calls] for t in trees if t is not None] == [
            ["found by one"],
            ["found by two"],
        ]


class TestUnreachable:
    async def test_error_names_the_url_without_password(self) -> None:
        url = "postgresql+psycopg://alice:s3cret-pw@127.0.0.1:1/nodb"
        with pytest.raises(onlooker.HistoryError) as info:
            async with history.open(url):
                pass
        message = str(info.value)
        assert "s3cret-pw" not in message
        assert "alice:***@127.0.0.1:1/nodb" in message

    @pytest.mark.parametrize("key", ["password", "sslpassword", "PASSWORD"])
    async def test_a_password_in_the_query_is_hidden_too(self, key: str) -> None:
        """libpq takes ``?password=``: a URL that logs in that way must not show it."""
        url = f"postgresql+psycopg://alice@127.0.0.1:1/nodb?{key}=s3cret-pw&connect_timeout=5"
        with pytest.raises(onlooker.HistoryError) as info:
            async with history.open(url):
                pass
        message = str(info.value)
        assert "s3cret-pw" not in message
        assert "alice@127.0.0.1:1/nodb?" in message and f"{key}=***" in message

    def test_a_password_holding_a_slash_is_hidden(self) -> None:
        """Generated passwords are often base64: "/" and "+" in them."""
        from onlooker.plugins.history._db import mask_url

        assert mask_url("postgresql://u:a+b/c==@h:5432/db") == "postgresql://u:***@h:5432/db"
        assert mask_url("sqlite:////tmp/a:b@c/h.db") == "sqlite:////tmp/a:b@c/h.db"

    async def test_a_short_password_does_not_garble_the_message(self) -> None:
        """Hidden where it stands alone, not inside the driver's words ("refu***ed")."""
        url = "postgresql+psycopg://alice:s@127.0.0.1:1/nodb"
        with pytest.raises(onlooker.HistoryError) as info:
            async with history.open(url):
                pass
        message = str(info.value)
        assert "alice:***@127.0.0.1:1/nodb" in message
        assert "Connection refused" in message and "***erver" not in message

    async def test_a_server_that_never_answers_is_an_error_not_a_hang(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A stopped or hung PostgreSQL (here a socket that accepts and never answers):
        opening the store waited for ever, the engine's start too, deaf to cancellation."""
        import socket

        from onlooker.plugins.history import _db

        monkeypatch.setattr(_db, "_CONNECT_TIMEOUT", 2)  # libpq's smallest
        monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
        with socket.create_server(("127.0.0.1", 0), backlog=8) as deaf:
            port = deaf.getsockname()[1]
            url = f"postgresql+psycopg://alice@127.0.0.1:{port}/nodb"
            with anyio.fail_after(20), pytest.raises(onlooker.HistoryError) as info:
                async with history.open(url):
                    pass
        assert "timeout" in str(info.value).lower()

    def test_a_password_is_hidden_wherever_it_stands_alone(self) -> None:
        from onlooker.plugins.history._db import _alone

        for password in ("s", "-x-", "p@ss word", "a.b"):
            text = f"pw {password} ({password}) x{password}y"
            hidden = re.sub(_alone(password), "***", text)
            assert hidden.startswith("pw *** (***)"), (password, hidden)
        assert re.sub(_alone("-x-"), "***", "a-x-b") == "a***b"  # its own ends bound it

    async def test_engine_start_fails_with_a_history_error(self) -> None:
        plugin = history.plugin("postgresql://bob:hunter2@127.0.0.1:1/x")
        with pytest.raises(onlooker.HistoryError) as info:
            async with onlooker.ExecutionEngine(plugins=[plugin]):
                pass
        assert "bob:***@127.0.0.1:1/x" in str(info.value)
        assert "hunter2" not in str(info.value)

    async def test_sqlite_file_that_cannot_be_created(self, tmp_path: Path) -> None:
        (tmp_path / "file").write_text("")
        with pytest.raises(onlooker.HistoryError, match="cannot use history database"):
            async with history.open(f"sqlite:///{tmp_path / 'file' / 'sub' / 'h.db'}"):
                pass

    async def test_postgresql_without_its_driver_names_the_extra(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
        with pytest.raises(
            onlooker.HistoryError, match=re.escape('pip install "onlooker[postgres]"')
        ):
            async with history.open("postgresql+psycopg://u:pw@127.0.0.1:1/x"):
                pass

    async def test_not_a_database_url(self) -> None:
        with pytest.raises(onlooker.HistoryError, match="unsupported history database"):
            async with history.open("mysql://u:pw@h/db"):
                pass


async def test_default_url_is_under_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with history.open() as store:
        await store.write_events(execution_events("d"))
    assert (tmp_path / ".onlooker" / "history.db").is_file()
    assert store.url.endswith(".onlooker/history.db")


async def test_the_default_batch_follows_the_backend(url: str) -> None:
    """PostgreSQL pays round trips per batch: bigger batches (bench/history.py); on
    SQLite they only delay the writer's start."""
    expected = 2000 if url.startswith("postgresql") else 500
    for given, size in ((None, expected), (7, 7)):
        plugin = history.plugin(url, batch_size=given)
        async with onlooker.ExecutionEngine(plugins=[plugin]) as engine:
            writer = engine.extension(plugin)._writer
            assert writer is not None and writer._batch_size == size


def test_plugin_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        history.plugin(batch_size=0)
    with pytest.raises(ValueError, match="batch_size"):
        history.plugin(batch_size=True)
    with pytest.raises(ValueError, match="flush_interval"):
        history.plugin(flush_interval=0)
