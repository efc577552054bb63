"""``onlooker ui`` through Starlette's TestClient: pages, filters, details, errors, read-only.

The stores are made by a real ExecutionEngine with the history plugin
(``test_ui_support``). The live streams run against a real uvicorn server
in a thread; the browser tests are in ``test_ui_browser.py``.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx2
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient
from typer.testing import CliRunner

import onlooker
import postgres
from onlooker import ExecutionContext, HistoryError, ToolDeclaration, Trigger
from onlooker._cli._app import app as cli_app
from onlooker._ui import BackgroundServer, _queries, create_app
from onlooker._ui._audit import AuditIndex
from onlooker._ui._timeline import build_timeline, summarize
from onlooker.plugins import audit, history
from test_history_support import track_with_nuls
from test_ui_support import (
    XSS,
    add,
    digest,
    echo,
    explode,
    mixed,
    read_note,
    record,
    run_recorded,
    sleepy,
    sqlite_url,
    write_note,
)

ROOT = Path(__file__).resolve().parents[1]


def client(app: Any) -> TestClient:
    """A client that presents itself as the loopback host the app answers to."""
    return TestClient(app, base_url="http://127.0.0.1")


def text_of(page: str) -> str:
    """The text of an HTML page as a reader sees it: entities decoded, blanks collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


async def _three(ctx: ExecutionContext) -> int:
    total = 0
    for n in range(3):
        total = await ctx.call(add, a=total, b=n)
    return total


async def _fails(ctx: ExecutionContext) -> None:
    await ctx.call(explode, reason="no luck")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One store: ``mixed`` (every status, a child, a question), a 3-call run, a failing run."""
    folder = tmp_path_factory.mktemp("ui")
    url = sqlite_url(folder / "history.db")
    mixed_id, three_id = run_recorded(url, [mixed, _three])
    [failed_id] = run_recorded(url, [_fails], trigger=Trigger(kind="cron"))

    async def tree() -> tuple[history.ExecutionTree, _queries.Node]:
        async with history.open(url) as store:
            found = await store.get_execution(mixed_id)
            node = await store.query(lambda conn: _queries.execution_node(conn, mixed_id))
            assert found is not None and node is not None
            return found, node

    found, node = anyio.run(tree)
    return {
        "url": url,
        "path": folder / "history.db",
        "mixed": mixed_id,
        "three": three_id,
        "failed": failed_id,
        "tree": found,
        "node": node,
    }


@pytest.fixture(scope="module")
def ui(recorded: dict[str, Any]) -> Iterator[TestClient]:
    with client(create_app(recorded["url"], tools=[read_note, write_note])) as c:
        yield c


def opening_error(url: str | None) -> str:
    """What starting the app over ``url`` fails with."""
    with pytest.raises(HistoryError) as info, client(create_app(url)):
        pass
    return str(info.value)


class TestOpening:
    def test_a_missing_database_is_a_clear_error_and_nothing_is_created(
        self, tmp_path: Path
    ) -> None:
        target = tmp_path / "nowhere" / "history.db"
        assert "no history database at" in opening_error(sqlite_url(target))
        assert not (tmp_path / "nowhere").exists()

    def test_the_default_is_the_current_directorys_store(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        assert str(Path(".onlooker") / "history.db") in opening_error(None)
        assert not (tmp_path / ".onlooker").exists()

    def test_a_foreign_sqlite_file_is_refused_unchanged(self, tmp_path: Path) -> None:
        path = tmp_path / "other.db"
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE things (id INTEGER)")
        conn.close()
        before = digest(path)
        assert "not an onlooker history database" in opening_error(sqlite_url(path))
        assert digest(path) == before

    def test_a_file_that_is_not_sqlite(self, tmp_path: Path) -> None:
        path = tmp_path / "notes.db"
        path.write_text("just some text, long enough to not be a database header" * 4)
        before = digest(path)
        assert "not a database" in opening_error(sqlite_url(path))
        assert digest(path) == before

    def test_an_older_schema_is_not_migrated(self, tmp_path: Path) -> None:
        path = tmp_path / "old.db"
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE schema_version (id INTEGER PRIMARY KEY, version INTEGER)")
            conn.execute("INSERT INTO schema_version VALUES (1, 1)")
            conn.execute(  # version 1: the event log alone
                "CREATE TABLE events (event_id TEXT PRIMARY KEY, execution_id TEXT NOT NULL, "
                "seq INTEGER NOT NULL, kind TEXT NOT NULL, at TEXT NOT NULL, body TEXT NOT NULL)"
            )
        conn.close()
        before = digest(path)
        assert "schema version 1" in opening_error(sqlite_url(path))
        assert digest(path) == before

    def test_a_missing_audit_directory(self, recorded: dict[str, Any], tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="no audit directory"):
            create_app(recorded["url"], audit_dir=tmp_path / "absent")

    def test_serving_never_writes_the_database(self, tmp_path: Path) -> None:
        path = tmp_path / "history.db"
        [execution_id] = run_recorded(sqlite_url(path), [mixed])
        before = digest(path)
        with client(create_app(sqlite_url(path))) as c:
            for url in ("/", f"/executions/{execution_id}", "/stats", "/?status=failed"):
                assert c.get(url).status_code == 200
            # the session is read-only in the database itself, not only by our good manners
            with pytest.raises(sa.exc.OperationalError, match="readonly"):
                _write_through(c)
        assert digest(path) == before
        wal = path.with_name(path.name + "-wal")
        assert not wal.exists() or wal.stat().st_size == 0

    def test_a_database_that_breaks_while_served_is_a_503_page(self, tmp_path: Path) -> None:
        path = tmp_path / "history.db"
        [execution_id] = run_recorded(sqlite_url(path), [_three])
        with client(create_app(sqlite_url(path))) as c:
            assert c.get("/").status_code == 200
            with open(path, "r+b") as handle:  # the same file, now garbage
                handle.write(b"garbage!" * 4096)
            page = c.get(f"/executions/{execution_id}")
            assert page.status_code == 503
            assert "cannot be read" in page.text and "SELECT" not in page.text


def _cursor(text: str) -> str:
    """A cursor that is not one of ours: ``text`` encoded as the list's own are."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


class TestList:
    def test_shows_every_execution_newest_first(
        self, ui: TestClient, recorded: dict[str, Any]
    ) -> None:
        page = ui.get("/")
        assert page.status_code == 200
        ids = re.findall(r'<tr class="s-\w+" data-id="([^"]+)"', page.text)
        child = recorded["tree"].children[0].execution_id
        assert ids == [recorded["failed"], recorded["three"], child, recorded["mixed"]]
        row = re.search(rf'data-id="{recorded["three"]}">(.*?)</tr>', page.text, re.S)
        assert row is not None
        cells = text_of(row.group(1)).split()
        assert cells[0] == "_three" and "api" in cells and "completed" in cells
        assert cells[-1] == "3"  # tool calls
        failed = re.search(rf'data-id="{recorded["failed"]}">(.*?)</tr>', page.text, re.S)
        assert failed is not None and "ToolError: no luck" in text_of(failed.group(1))
        assert "↳ child" in page.text

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("status=failed", ["failed"]),
            ("status=completed&roots=1", ["three", "mixed"]),
            ("program=_three", ["three"]),
            ("trigger=cron", ["failed"]),
            ("tool=explode", ["failed", "mixed"]),
            ("status=running", []),
            ("since=1h", ["failed", "three", "child", "mixed"]),
            ("until=2000-01-01", []),
            ("program=&status=", ["failed", "three", "child", "mixed"]),  # empty: no filter
        ],
    )
    def test_filters(
        self, ui: TestClient, recorded: dict[str, Any], query: str, expected: list[str]
    ) -> None:
        names = {recorded[k]: k for k in ("failed", "three", "mixed")}
        names[recorded["tree"].children[0].execution_id] = "child"
        page = ui.get(f"/?{query}")
        assert page.status_code == 200
        ids = re.findall(r'data-id="([^"]+)"', page.text)
        assert [names[i] for i in ids] == expected
        if not expected:
            assert "No executions match these filters" in page.text

    def test_paging_visits_every_execution_once(self, ui: TestClient) -> None:
        seen: list[str] = []
        url = "/?limit=1"
        for _ in range(10):
            page = ui.get(url)
            seen += re.findall(r'data-id="([^"]+)"', page.text)
            more = re.search(r'rel="next" href="([^"]+)"', page.text)
            if more is None:
                break
            url = html.unescape(more.group(1))
        assert len(seen) == 4 and len(set(seen)) == 4
        assert "« newest" in page.text

    @pytest.mark.parametrize(
        ("query", "named"),
        [
            ("status=exploded", "status='exploded' is not one of"),
            ("since=last+tuesday", "since='last tuesday' is neither"),
            ("since=1h&until=2h", "since must be before until"),
            ("limit=0", "limit='0' is not a whole number"),
            ("limit=lots", "limit='lots'"),
            ("cursor=garbage", "invalid cursor"),
            ("roots=maybe", "roots='maybe'"),
            ("limit=%C2%B2", "limit='²' is not a whole number"),  # a digit int() refuses
            ("cursor=" + _cursor("[" * 5000), "invalid cursor"),  # nested past json's limit
            ("cursor=" + _cursor('["0001-01-01T00:00:00+05:00", "x"]'), "invalid cursor"),
            ("cursor=" + _cursor('["9999-12-31T23:59:59-05:00", "x"]'), "invalid cursor"),
        ],
    )
    def test_a_bad_filter_is_a_400_page_naming_it(
        self, ui: TestClient, query: str, named: str
    ) -> None:
        page = ui.get(f"/?{query}")
        assert page.status_code == 400
        assert "Bad request" in page.text and named in html.unescape(page.text)
        assert ui.get(f"/stream/list?{query}").status_code == 400


class TestExecution:
    def test_every_tool_call_with_its_status_in_order(
        self, ui: TestClient, recorded: dict[str, Any]
    ) -> None:
        page = ui.get(f"/executions/{recorded['mixed']}")
        assert page.status_code == 200
        rows = re.findall(
            r'<li class="k-call s-(\w+)" data-key="call-[^"]+"><a .*?<span class="name">(\w+)</span>'
            r'.*?<span class="status">(\w+)</span>',
            page.text,
            re.S,
        )
        top = [(name, status) for cls, name, status in rows if cls == status]
        assert top == [
            ("read_note", "completed"),
            ("explode", "failed"),
            ("forbidden", "blocked"),
            ("skippable", "skipped"),
            ("sleepy", "cancelled"),
            ("add", "completed"),  # in the child, nested
            ("write_note", "completed"),
        ]
        assert 'class="k-child s-completed"' in page.text and "<details open" in page.text
        assert "? question" in page.text and "declined" in page.text

    def test_bars_sit_on_the_time_axis(self, recorded: dict[str, Any]) -> None:
        timeline = build_timeline(recorded["node"])
        assert not timeline.running
        items = timeline.lane.items
        for item in items:
            assert item.left >= 0 and item.left + item.width <= 100.0001
        lefts = [item.left for item in items]
        assert lefts == sorted(lefts)  # in start order, later calls further right
        assert lefts[-1] > lefts[0]

    def test_calls_that_overlap_are_marked_parallel(self, tmp_path: Path) -> None:
        async def together(ctx: ExecutionContext) -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(partial(ctx.call, sleepy, seconds=0.05))
                group.start_soon(partial(ctx.call, sleepy, seconds=0.05))
            await ctx.call(echo, text="after")

        url = sqlite_url(tmp_path / "h.db")

        async def go() -> _queries.Node | None:
            async with onlooker.ExecutionEngine(
                tools=[echo, sleepy], plugins=[history.plugin(url)]
            ) as engine:
                result = await engine.execute(together)
            async with history.open(url) as store:
                return await store.query(
                    lambda conn: _queries.execution_node(conn, result.execution_id)
                )

        node = anyio.run(go)
        assert node is not None
        items = build_timeline(node).lane.items
        assert [(i.name, i.parallel) for i in items] == [
            ("sleepy", True),
            ("sleepy", True),
            ("echo", False),
        ]
        assert items[1].left < items[0].left + items[0].width  # side by side in time

    def test_the_summary(self, ui: TestClient, recorded: dict[str, Any]) -> None:
        summary = summarize(
            recorded["node"],
            {"read_note": read_note.declaration, "write_note": write_note.declaration},
        )
        assert summary.tool_calls == 6
        assert summary.files_read == ["notes/in.md"] and summary.files_written == ["notes/out.md"]
        assert summary.success_rate == pytest.approx(3 / 6)  # completed x2 + skipped
        assert [e.status for e in summary.errors] == ["failed", "blocked", "cancelled"]
        assert summary.children[0].tool_usage == {"add": 1}
        page = text_of(ui.get(f"/executions/{recorded['mixed']}").text)
        assert "6 tool calls" in page and "50% success rate" in page
        assert "notes/in.md" in page and "notes/out.md" in page
        assert "explode failed: ToolError: the disk is on fire" in page

    def test_files_need_declarations(self, recorded: dict[str, Any]) -> None:
        assert summarize(recorded["node"], {}).files_read == []
        declared = {"read_note": ToolDeclaration("read_note", reads="path")}
        assert summarize(recorded["node"], declared).files_read == ["notes/in.md"]

    def test_a_child_links_to_its_parent(self, ui: TestClient, recorded: dict[str, Any]) -> None:
        child = recorded["tree"].children[0].execution_id
        page = ui.get(f"/executions/{child}")
        assert page.status_code == 200
        assert f'class="parent" href="/executions/{recorded["mixed"]}"' in page.text
        assert "helper" in page.text  # its task id

    def test_call_details(self, ui: TestClient, recorded: dict[str, Any]) -> None:
        call = next(c for c in recorded["tree"].tool_calls if c.tool == "explode")
        page = ui.get(f"/executions/{recorded['mixed']}?call={call.tool_call_id}")
        assert page.status_code == 200 and "<html" in page.text
        shown = text_of(page.text)
        for expected in (
            '"reason": "the disk is on fire"',  # arguments
            "ToolError",
            "failure",  # the error's cause
            '"checked_by": "governance"',  # hook metadata
            "ToolCallStarted",
            "ToolCallFinished",  # raw events
            f'"tool_call_id": "{call.tool_call_id}"',
        ):
            assert expected in shown, expected
        fragment = ui.get(f"/executions/{recorded['mixed']}?call={call.tool_call_id}&partial=1")
        assert fragment.text.lstrip().startswith("<article") and "<html" not in fragment.text

    def test_a_child_call_and_a_question_have_details(
        self, ui: TestClient, recorded: dict[str, Any]
    ) -> None:
        child = recorded["tree"].children[0]
        page = ui.get(f"/executions/{child.execution_id}?call={child.tool_calls[0].tool_call_id}")
        shown = text_of(page.text)
        assert "helper" in shown and recorded["mixed"] in shown  # attribution: task, parent
        ask = recorded["tree"].interactions[0]
        page = ui.get(f"/executions/{recorded['mixed']}?interaction={ask.interaction_id}")
        shown = text_of(page.text)
        assert "Ship it?" in shown and "declined" in shown and "InteractionResolved" in shown

    def test_raw_events_as_json(self, ui: TestClient, recorded: dict[str, Any]) -> None:
        page = ui.get(f"/executions/{recorded['three']}?format=json")
        assert page.headers["content-type"] == "application/json"
        events = [onlooker.parse_event(e) for e in page.json()]
        assert [e.seq for e in events] == list(range(8))
        assert ui.get(f"/executions/{recorded['three']}?format=xml").status_code == 400

    @pytest.mark.parametrize(
        "path",
        [
            "/executions/no-such-id",
            "/executions/no-such-id?format=json",
            "/stream/executions/no-such-id",
            "/nowhere",
        ],
    )
    def test_an_unknown_id_is_a_404_page(self, ui: TestClient, path: str) -> None:
        page = ui.get(path)
        assert page.status_code == 404
        assert "Not found" in page.text and "<html" in page.text

    def test_an_unknown_page_is_a_404_naming_it(self, ui: TestClient) -> None:
        page = ui.get("/nowhere/at-all")
        assert page.status_code == 404
        assert "nothing at /nowhere/at-all" in page.text

    def test_an_unknown_call_is_a_404_naming_it(
        self, ui: TestClient, recorded: dict[str, Any]
    ) -> None:
        page = ui.get(f"/executions/{recorded['mixed']}?call=nope")
        assert page.status_code == 404
        assert "has no tool call &#39;nope&#39;" in page.text

    def test_only_reading_methods(self, ui: TestClient, recorded: dict[str, Any]) -> None:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            assert ui.request(method, f"/executions/{recorded['mixed']}").status_code == 405


class TestEscaping:
    def test_untrusted_values_are_text_everywhere(self, tmp_path: Path) -> None:
        async def hostile(ctx: ExecutionContext) -> None:
            await ctx.call(echo, text=XSS)
            await ctx.elicit(XSS)
            await ctx.call(explode, reason=XSS)

        url = sqlite_url(tmp_path / "h.db")

        async def go() -> tuple[str, history.ExecutionTree | None]:
            execution_id = await record(url, hostile, trigger=Trigger(kind=XSS), owner=XSS)
            async with history.open(url) as store:
                return execution_id, await store.get_execution(execution_id)

        execution_id, tree = anyio.run(go)
        assert tree is not None
        stored = tree.tool_calls[0].args
        assert stored is not None
        shown_value = str(stored["text"])  # what the store kept (its redaction may alter it)
        assert "<script>" in shown_value and "onerror" in shown_value
        with client(create_app(url)) as c:
            pages = [
                c.get("/").text,
                c.get(f"/executions/{execution_id}").text,
                c.get(f"/executions/{execution_id}?call={tree.tool_calls[0].tool_call_id}").text,
                c.get(
                    f"/executions/{execution_id}?interaction={tree.interactions[0].interaction_id}"
                ).text,
                c.get("/stats").text,
            ]
        for page in pages:
            assert "<script>window" not in page and "<img src=x" not in page
            assert page.count("<script") == 1  # ours: <script src="/static/ui.js">
        assert html.escape(shown_value, quote=False).split("\n")[0][:40] in pages[1]
        assert json.dumps(shown_value, ensure_ascii=False) in text_of(pages[2])  # the JSON args

    def test_hostile_names_and_ids_from_a_tracked_execution(self, tmp_path: Path) -> None:
        """Programs, tools and ids a foreign framework chose: any text at all."""
        url = sqlite_url(tmp_path / "h.db")
        hostile_id = "run/../<b>1</b>?x=1#top"

        async def go() -> None:
            async with (
                onlooker.ExecutionEngine(plugins=[history.plugin(url)]) as engine,
                engine.track(XSS, execution_id=hostile_id) as run,
            ):
                call = await run.tool_started(XSS, {"q": 1}, tool_call_id="call/<i>1</i>")
                await call.finished("ok")
                async with run.child(XSS, parent_tool_call_id=call.tool_call_id):
                    pass

        anyio.run(go)
        with client(create_app(url)) as c:
            listing = c.get("/").text
            page = c.get(f"/executions/{quote(hostile_id, safe='')}")
            assert page.status_code == 200
            detail = c.get(
                f"/executions/{quote(hostile_id, safe='')}?call={quote('call/<i>1</i>', safe='')}"
            )
            assert detail.status_code == 200
        for html_text in (listing, page.text, detail.text):
            assert "<script>window" not in html_text and "<img src=x" not in html_text
            assert "<b>1</b>" not in html_text and "<i>1</i>" not in html_text
        assert hostile_id in text_of(page.text)
        assert "call/<i>1</i>" in text_of(detail.text)

    def test_an_id_ending_in_a_newline_opens_its_own_execution(self, tmp_path: Path) -> None:
        """The route took ``victim\\n`` as ``victim``: another execution's page and events."""
        url = sqlite_url(tmp_path / "h.db")

        async def go() -> None:
            async with onlooker.ExecutionEngine(plugins=[history.plugin(url)]) as engine:
                for execution_id, tool in (("victim", "secret_tool"), ("victim\n", "own_tool")):
                    async with engine.track("agent", execution_id=execution_id) as run:
                        call = await run.tool_started(tool, {})
                        await call.finished("ok")

        anyio.run(go)
        with client(create_app(url)) as c:
            page = c.get(f"/executions/{quote('victim' + chr(10), safe='')}")
            events = c.get(f"/executions/{quote('victim' + chr(10), safe='')}?format=json")
            unknown = c.get(f"/executions/{quote('nobody' + chr(10), safe='')}")
        assert page.status_code == 200
        assert "own_tool" in page.text and "secret_tool" not in page.text
        assert {e["execution_id"] for e in events.json()} == {"victim\n"}
        assert unknown.status_code == 404

    def test_undecodable_file_names_are_shown_escaped(self, tmp_path: Path) -> None:
        """A lone surrogate (an undecodable file name) in a value, a key or a program's name:
        no response can encode one; each page shows it escaped, as the trail writes it."""
        name = f"caf{chr(0xDCE9)}.txt"
        url = sqlite_url(tmp_path / "h.db")

        async def go() -> None:
            async with (
                onlooker.ExecutionEngine(plugins=[history.plugin(url)]) as engine,
                engine.track(f"ls {name}", execution_id="r1") as run,
            ):
                call = await run.tool_started("ls", {name: 1, "path": name}, tool_call_id="c1")
                await call.finished({name: 12})

        anyio.run(go)
        with client(create_app(url)) as c:
            pages = [
                c.get("/"),
                c.get("/executions/r1"),
                c.get("/executions/r1?call=c1"),
                c.get("/executions/r1?format=json"),
            ]
        assert [page.status_code for page in pages] == [200] * 4
        assert "ls caf\ufffd.txt" in pages[0].text  # the program column (U+FFFD, see history.md)
        assert all("caf\\udce9.txt" in page.text for page in pages[1:3])  # the recorded values
        events = [onlooker.parse_event(e) for e in pages[3].json()]
        assert isinstance(events[1], onlooker.ToolCallStarted)
        assert events[1].args == {name: 1, "path": name}
        assert isinstance(events[2], onlooker.ToolCallFinished) and events[2].result == {name: 12}

    def test_control_characters_are_written_out(self, tmp_path: Path) -> None:
        """A right-to-left override would show invoice_\\u202egpj.exe as invoice_exe.jpg."""
        spoof = "invoice_\u202egpj.exe"
        url = sqlite_url(tmp_path / "h.db")

        async def go() -> None:
            async with (
                onlooker.ExecutionEngine(plugins=[history.plugin(url)]) as engine,
                engine.track(f"mail {spoof}", execution_id="r1") as run,
            ):
                call = await run.tool_started("open", {"name": spoof}, tool_call_id="c1")
                await call.failed("cannot open \x1b[2J\x9b" + spoof)

        anyio.run(go)
        with client(create_app(url)) as c:
            pages = [c.get("/"), c.get("/executions/r1"), c.get("/executions/r1?call=c1")]
        assert [page.status_code for page in pages] == [200] * 3
        for page in pages:
            assert not any(char in page.text for char in "\u202e\x1b\x9b"), page.url
            assert "invoice_\\u202egpj.exe" in page.text
        assert "cannot open \\x1b[2J\\x9b" in pages[2].text

    def test_security_headers_and_host_check(self, ui: TestClient) -> None:
        page = ui.get("/")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        assert ui.get("/", headers={"host": "evil.example"}).status_code == 400
        assert ui.get("/", headers={"host": "localhost:8765"}).status_code == 200
        assert ui.get("/", headers={"host": "[::1]:8765"}).status_code == 200


class TestStats:
    def test_shows_the_stores_figures(self, ui: TestClient, recorded: dict[str, Any]) -> None:
        page = ui.get("/stats")
        assert page.status_code == 200
        row = re.search(r'<td class="name">explode</td>(.*?)</tr>', page.text, re.S)
        assert row is not None and "100%" in row.group(1)
        assert 'class="hbar"' in page.text and 'class="hbar dur"' in page.text

    def test_a_time_range(self, ui: TestClient) -> None:
        empty = ui.get("/stats?until=2000-01-01T00:00")
        assert "<strong>0</strong> executions" in empty.text
        assert "No tool call finished in this range" in empty.text
        future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        assert (
            "<strong>4</strong> executions"
            in ui.get("/stats", params={"since": "1d", "until": future}).text
        )
        assert ui.get("/stats?since=tomorrow").status_code == 400


class TestAudit:
    @pytest.fixture
    def trail(self, tmp_path: Path) -> dict[str, Any]:
        url = sqlite_url(tmp_path / "h.db")
        audit_dir = tmp_path / "audit"
        first = anyio.run(lambda: record(url, _three, audit_dir=audit_dir, session="s-one"))
        second = anyio.run(lambda: record(url, mixed, audit_dir=audit_dir, session="s-two"))
        return {"url": url, "dir": audit_dir, "intact": first, "tampered": second}

    def test_verdicts_beside_the_execution(self, trail: dict[str, Any]) -> None:
        live = trail["dir"] / "s-two" / "events.jsonl"
        lines = live.read_text().splitlines(keepends=True)
        lines[2] = lines[2].replace('"seq":2', '"seq":2,"x":1', 1)
        live.write_text("".join(lines))
        with client(create_app(trail["url"], audit_dir=trail["dir"])) as c:
            intact = text_of(c.get(f"/executions/{trail['intact']}").text)
            assert "intact session s-one" in intact and "chain intact" in intact
            tampered = c.get(f"/executions/{trail['tampered']}").text
            shown = text_of(tampered)
            assert "tampered session s-two" in shown
            assert "s-two/events.jsonl:3 (hash_mismatch)" in shown
            assert "2 intact record(s) before it" in shown
            assert '"x":1' in shown  # the bad line itself
            sessions = text_of(c.get("/audit").text)
            assert "s-one" in sessions and "s-two" in sessions and trail["intact"] in sessions

    def test_no_trail_mentions_it(self, trail: dict[str, Any], tmp_path: Path) -> None:
        empty = tmp_path / "empty-audit"
        empty.mkdir()
        with client(create_app(trail["url"], audit_dir=empty)) as c:
            page = c.get(f"/executions/{trail['intact']}").text
            assert "No trail in the audit directory mentions this execution" in page

    def test_without_an_audit_directory(self, ui: TestClient) -> None:
        assert ui.get("/audit").status_code == 404

    def test_the_index_reads_only_what_was_appended(self, trail: dict[str, Any]) -> None:
        index = AuditIndex(trail["dir"])
        assert index.sessions_of(trail["intact"]) == ["s-one"]
        assert index.sessions_of(trail["tampered"]) == ["s-two"]
        child = trail["tampered"].rsplit("-", 1)[0]
        assert index.sessions_of(child) == []  # "parent_execution_id" is not the envelope's id
        anyio.run(lambda: record(trail["url"], _three, audit_dir=trail["dir"], session="s-one"))
        index._scanned_at = None  # skip the once-a-second throttle
        assert len(index.executions_of("s-one")) == 2
        assert index.verdict("s-one").verdict == "intact"

    def test_an_id_with_a_nul_is_found_by_either_spelling(self, tmp_path: Path) -> None:
        """History on PostgreSQL names the execution with U+FFFD where the trail has a NUL:
        its page, opened by that spelling, said no trail mentioned it."""
        audit_dir = tmp_path / "audit"

        async def tracked() -> None:
            plugin = audit.plugin(audit_dir, session_id="s-nul")
            async with (
                onlooker.ExecutionEngine(plugins=[plugin]) as engine,
                engine.track("p", execution_id="run\x00x"),
            ):
                pass

        anyio.run(tracked)
        index = AuditIndex(audit_dir)
        assert index.sessions_of("run\x00x") == ["s-nul"]
        assert index.sessions_of("run\ufffdx") == ["s-nul"]
        assert index.executions_of("s-nul") == ["run\x00x"]  # linked as the trail spells it

    def test_an_execution_id_inside_a_tool_argument_names_no_execution(
        self, tmp_path: Path
    ) -> None:
        """Only the recorded event's own id ties a trail to an execution: a tool that looks
        another run up by its id does not put its trail on that run's page."""

        async def looks_up(ctx: ExecutionContext) -> None:
            await ctx.call("echo", text='{"execution_id": "victim"}')
            await ctx.call("add", a=1, b=2)

        url, audit_dir = sqlite_url(tmp_path / "h.db"), tmp_path / "audit"
        anyio.run(lambda: record(url, looks_up, audit_dir=audit_dir, session="s-other"))
        index = AuditIndex(audit_dir)
        assert index.sessions_of("victim") == []
        assert len(index.executions_of("s-other")) == 1

    def test_an_undecodable_execution_id_in_a_trail(self, tmp_path: Path) -> None:
        """A lone surrogate (an undecodable name a framework gave as the id) is named as
        history stores it (U+FFFD): the audit page links it, and the call shows its events."""
        url, audit_dir = sqlite_url(tmp_path / "h.db"), tmp_path / "audit"

        async def tracked() -> None:
            plugins: list[onlooker.Plugin[Any]] = [
                history.plugin(url),
                audit.plugin(directory=audit_dir, session_id="s1"),
            ]
            async with (
                onlooker.ExecutionEngine(plugins=plugins) as engine,
                engine.track("p", execution_id="run-caf\udce9") as run,
            ):
                call = await run.tool_started("ls", {"p": 1}, tool_call_id="c-caf\udce9")
                await call.finished("ok")

        anyio.run(tracked)
        with client(create_app(url, audit_dir=audit_dir)) as c:
            page = c.get("/audit")
            assert page.status_code == 200
            assert "/executions/run-caf%EF%BF%BD" in page.text
            details = c.get("/executions/run-caf%EF%BF%BD?call=c-caf%EF%BF%BD")
            assert details.status_code == 200
            assert "No stored event carries it" not in details.text
            assert "ToolCallStarted" in details.text


class TestLiveStreams:
    def test_the_list_stream_sends_the_rows(self, recorded: dict[str, Any]) -> None:
        app = create_app(recorded["url"], poll_interval=0.05)
        with BackgroundServer(app) as server:
            event = _first_event(f"{server.url}/stream/list?status=failed")
        assert event["event"] == "update"
        assert f'data-id="{recorded["failed"]}"' in event["data"]
        assert recorded["three"] not in event["data"]

    def test_the_list_stream_moves_older_to_after_the_rows_it_shows(
        self, recorded: dict[str, Any]
    ) -> None:
        """Rows a live update pushes off the first page are on the next one: the update
        carries the page links, "older »" starting after the last row it shows."""
        app = create_app(recorded["url"], poll_interval=0.05)
        with BackgroundServer(app) as server:
            event = _first_event(f"{server.url}/stream/list?limit=1")
            shown = re.findall(r'data-id="([^"]+)"', event["data"])
            older = re.search(r'rel="next" href="/\?([^"]+)"', event["data"])
            assert len(shown) == 1 and older is not None
            second = httpx2.get(f"{server.url}/?{html.unescape(older.group(1))}", timeout=10)
        assert shown[0] not in second.text  # the next page starts after it
        assert 'data-id="' in second.text

    def test_a_finished_execution_streams_once_then_done(self, recorded: dict[str, Any]) -> None:
        app = create_app(recorded["url"], poll_interval=0.05)
        with (
            BackgroundServer(app) as server,
            httpx2.stream(
                "GET", f"{server.url}/stream/executions/{recorded['three']}", timeout=10
            ) as response,
        ):
            body = "".join(response.iter_text())  # the stream ends by itself
        events = _parse_events(body)
        assert [e["event"] for e in events] == ["update", "done"]
        assert events[1]["data"] == "completed"
        assert 'class="lane"' in events[0]["data"]


@pytest.mark.anyio
async def test_a_stream_pauses_while_the_database_does_not_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It raised out of the stream (a traceback in the server's log at each reconnect)."""
    from types import SimpleNamespace

    from onlooker._ui._streams import _updates

    answers: list[tuple[str, str | None] | HistoryError] = [
        HistoryError("the server is down"),
        HistoryError("the server is down"),
        ("<p>back</p>", "completed"),
    ]

    async def render() -> tuple[str, str | None]:
        answer = answers.pop(0)
        if isinstance(answer, HistoryError):
            raise answer
        return answer

    state = SimpleNamespace(poll_interval=0.01, stopping=anyio.Event())
    with caplog.at_level(logging.WARNING, logger="onlooker.ui"):
        events = [e async for e in _updates(state, anyio.Event(), render)]  # type: ignore[arg-type]
    assert [e["event"] for e in events] == ["update", "done"]
    assert [r.getMessage() for r in caplog.records] == [
        "live view paused: the history database cannot be read: the server is down"
    ]


def _parse_events(body: str) -> list[dict[str, str]]:
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            name, _, value = line.partition(": ")
            fields[name] = f"{fields[name]}\n{value}" if name in fields else value
        if fields:
            events.append(fields)
    return events


def _first_event(url: str) -> dict[str, str]:
    buffer = ""
    with httpx2.stream("GET", url, timeout=10) as response:
        assert response.status_code == 200
        for chunk in response.iter_text():
            buffer += chunk
            if "\r\n\r\n" in buffer or "\n\n" in buffer:
                return _parse_events(buffer)[0]
    raise AssertionError(f"no event in {buffer!r}")


def _write_through(c: TestClient) -> None:
    """Try to write with the app's own database session (it must refuse)."""
    store = c.app.state.ui.store  # type: ignore[attr-defined]
    assert c.portal is not None
    c.portal.call(store.query, lambda conn: conn.execute(sa.text("CREATE TABLE x (id integer)")))


class TestPostgres:
    def test_reads_postgresql_read_only(self) -> None:
        cluster = postgres.cluster_or_skip()
        url = cluster.create_database()
        try:
            [execution_id] = run_recorded(url, [_three])
            with client(create_app(url)) as c:
                assert execution_id in c.get("/").text
                assert c.get(f"/executions/{execution_id}").status_code == 200
                with pytest.raises(sa.exc.DBAPIError, match="read-only transaction"):
                    _write_through(c)
        finally:
            cluster.drop_database(url)

    def test_a_nul_in_an_id_or_filter_is_looked_up_as_stored(self) -> None:
        """PostgreSQL stores a NUL as U+FFFD: a URL holding one raised the driver's
        DataError, shown as a 503 "the history database cannot be read"."""
        cluster = postgres.cluster_or_skip()
        url = cluster.create_database()
        try:
            anyio.run(track_with_nuls, url)
            with client(create_app(url)) as c:
                for path in (
                    "/executions/run%00x",
                    "/executions/run%00x?call=c%001",
                    "/executions/run%00x?format=json",
                    "/?trigger=t%00rig",
                    "/?tool=to%00ol",
                ):
                    response = c.get(path)
                    assert response.status_code == 200, (path, response.status_code)
                    assert "run\ufffdx" in response.text or "run\\u0000x" in response.text
                assert c.get("/?program=p%00").status_code == 200
                assert c.get("/executions/other%00").status_code == 404
        finally:
            cluster.drop_database(url)

    def test_a_postgresql_database_without_tables(self) -> None:
        cluster = postgres.cluster_or_skip()
        url = cluster.create_database()
        try:
            assert "not an onlooker history database" in opening_error(url)
        finally:
            cluster.drop_database(url)


class TestCommand:
    @pytest.mark.parametrize(
        ("absent", "said"),
        [
            (["uvicorn"], "needs uvicorn, which is not installed"),
            (["uvicorn", "jinja2"], "needs uvicorn, jinja2, which are not installed"),
        ],
    )
    def test_without_the_extra_it_names_what_to_install(
        self, absent: list[str], said: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        for name in absent:
            monkeypatch.setitem(sys.modules, name, None)  # find_spec: None, as if not installed
        result = CliRunner().invoke(cli_app, ["ui", "--db", str(tmp_path / "h.db")])
        assert result.exit_code == 1
        assert said in result.output and 'pip install "onlooker[ui]"' in result.output

    def test_a_missing_database_exits_1_and_creates_nothing(self, tmp_path: Path) -> None:
        result = CliRunner().invoke(cli_app, ["ui", "--db", str(tmp_path / "none" / "h.db")])
        assert result.exit_code == 1
        assert "no history database" in result.output
        assert not (tmp_path / "none").exists()

    def test_a_missing_audit_directory_is_a_usage_error(
        self, recorded: dict[str, Any], tmp_path: Path
    ) -> None:
        result = CliRunner().invoke(
            cli_app, ["ui", "--db", str(recorded["path"]), "--audit", str(tmp_path / "x")]
        )
        assert result.exit_code == 2

    def test_a_taken_port_exits_1(self, recorded: dict[str, Any]) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = str(taken.getsockname()[1])
            command = str(Path(sys.executable).with_name("onlooker"))
            done = subprocess.run(
                [command, "ui", "--db", str(recorded["path"]), "--port", port],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT,
            )
        assert done.returncode == 1, done.stderr
        assert "address already in use" in done.stderr

    @pytest.mark.parametrize("host", ["127.0.0.2", "::1", "[::1]"])
    def test_the_loopback_address_it_was_given_is_answered(
        self, recorded: dict[str, Any], monkeypatch: pytest.MonkeyPatch, host: str
    ) -> None:
        """``--host 127.0.0.2`` (any loopback address) answers the URL it announces."""
        import onlooker._ui

        served: list[Any] = []
        monkeypatch.setattr(onlooker._ui, "serve", lambda app, *args, **kwargs: served.append(app))
        result = CliRunner().invoke(
            cli_app, ["ui", "--db", str(recorded["path"]), "--host", host, "--port", "0"]
        )
        assert result.exit_code == 0, result.output
        named = f"[{host.strip('[]')}]" if ":" in host else host  # [::1], as URLs write it
        with TestClient(served[0], base_url=f"http://{named}:8080") as c:
            assert c.get("/").status_code == 200
        with TestClient(served[0], base_url="http://rebinding.example:8080") as c:
            assert c.get("/").status_code == 400

    @pytest.mark.parametrize("host", ["256.1.1.1", "nowhere.invalid"])
    def test_a_host_it_cannot_listen_on_is_named(self, recorded: dict[str, Any], host: str) -> None:
        """uvicorn said only "[Errno -2] Name or service not known"."""
        result = CliRunner().invoke(
            cli_app, ["ui", "--db", str(recorded["path"]), "--host", host, "--port", "0"]
        )
        assert result.exit_code == 2
        assert f"cannot listen on '{host}'" in " ".join(result.output.replace("│", " ").split())

    def test_help_has_examples(self) -> None:
        result = CliRunner().invoke(cli_app, ["ui", "--help"])
        assert result.exit_code == 0 and "Examples" in result.output

    def test_serves_in_a_real_process(self, recorded: dict[str, Any]) -> None:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("onlooker")),
                "ui",
                "--db",
                str(recorded["path"]),
                "--port",
                "0",
                "--tools",
                str(ROOT / "tests" / "test_ui_support.py"),
            ],
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            assert process.stderr is not None
            line = process.stderr.readline()
            match = re.search(r"at (http://127\.0\.0\.1:\d+)/", line)
            assert match is not None, line
            page = httpx2.get(f"{match.group(1)}/executions/{recorded['mixed']}", timeout=10)
            assert page.status_code == 200
            assert "notes/out.md" in page.text  # --tools: write_note's declared file
        finally:
            process.send_signal(signal.SIGINT)  # Ctrl-C
            process.wait(timeout=10)
            assert process.stderr is not None
            rest = process.stderr.read()
            process.stderr.close()
        assert process.returncode == 0, rest
