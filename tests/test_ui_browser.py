"""``onlooker ui`` in a real browser: Debian's chromium driven by Playwright.

Each test records executions with a real ExecutionEngine and the history
plugin, serves them with uvicorn in a thread on a free loopback port, and
looks at the pages the way a person does. Every test leaves a screenshot
in ``artifacts/ui/`` (git-ignored; CI keeps it) and fails on any script
error or console error (a Content-Security-Policy violation is one).

asyncio only: Playwright's async API is built on asyncio and does not run
on trio, so this module pins ``anyio_backend`` to asyncio.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from playwright.async_api import BrowserContext, ConsoleMessage, Page, async_playwright, expect

import onlooker
from onlooker import ExecutionContext, Trigger
from onlooker._ui import BackgroundServer, create_app
from onlooker.plugins import history
from test_ui_support import (
    ALL_TOOLS,
    XSS,
    echo,
    mixed,
    read_note,
    record,
    sqlite_url,
    write_note,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "artifacts" / "ui"
CHROMIUM = os.environ.get("ONLOOKER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Playwright's async API needs asyncio (see the module docstring)."""
    return "asyncio"


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[BrowserContext]:
    """One chromium and one browser context for the module (starting them is the slow part)."""
    if not HAVE_CHROMIUM:
        pytest.fail(
            f"no chromium at {CHROMIUM}: install Debian's chromium package (apt-get install "
            "chromium) or set ONLOOKER_CHROMIUM to a Chromium binary"
        )
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield await launched.new_context(viewport={"width": 1280, "height": 860})
        finally:
            await launched.close()


class Problems:
    """Script errors, console errors and dialogs a page produced."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.allowed: list[str] = []
        """Console errors a test provokes on purpose (a 400 page)."""
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        page.on("console", self._console)
        page.on("dialog", self._dialog)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not any(text in message.text for text in self.allowed):
            self.errors.append(f"console: {message.text}")

    async def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        await dialog.dismiss()


@pytest.fixture
async def page(browser: BrowserContext, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    """A fresh page; afterwards, a screenshot and a check that nothing went wrong in it."""
    opened = await browser.new_page()
    problems = request.node.stash[PROBLEMS] = Problems(opened)
    try:
        yield opened
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await opened.screenshot(path=SCREENSHOTS / f"{request.node.name}.png", full_page=True)
    finally:
        await opened.close()  # ends its live streams
    assert not problems.dialogs, problems.dialogs
    assert not problems.errors, problems.errors


PROBLEMS = pytest.StashKey[Problems]()


@asynccontextmanager
async def serving(url: str, **options: Any) -> AsyncIterator[str]:
    """The UI over ``url`` on a free loopback port, in a thread; its base URL."""
    options.setdefault("poll_interval", 0.1)
    server = BackgroundServer(create_app(url, **options))
    await anyio.to_thread.run_sync(server.start)
    try:
        yield server.url
    finally:
        await anyio.to_thread.run_sync(server.stop)


async def test_the_list_shows_a_run_made_by_the_engine(page: Page, tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "history.db")
    execution_id = await record(url, mixed, trigger=Trigger(kind="nightly"))
    async with serving(url) as base:
        await page.goto(f"{base}/")
        row = page.locator(f'tr[data-id="{execution_id}"]')
        await expect(row).to_contain_text("mixed")
        await expect(row).to_contain_text("nightly")
        await expect(row.locator(".badge")).to_have_text("✓ completed")
        await expect(row.locator("td.num").nth(1)).to_have_text("6")  # tool calls
        await page.select_option("select[name=status]", "failed")
        await page.click("button[type=submit]")
        await expect(page.locator("tbody#rows")).to_contain_text("No executions match")
        await page.go_back()
        await row.locator("a").click()
        await expect(page.locator(".exec-head h1")).to_contain_text("mixed")


async def _gated(gate: anyio.Event) -> Callable[[ExecutionContext], Awaitable[str]]:
    async def program(ctx: ExecutionContext) -> str:
        await ctx.call(echo, text="before the gate")
        await gate.wait()
        await ctx.call(echo, text="after the gate")
        return "through"

    return program


async def test_a_run_in_flight_appears_and_finishes_without_a_reload(
    page: Page, tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path / "history.db")
    await record(url, mixed)  # the database exists before the UI starts
    gate = anyio.Event()
    program = await _gated(gate)
    async with (
        serving(url) as base,
        onlooker.ExecutionEngine(
            tools=ALL_TOOLS, plugins=[history.plugin(url, flush_interval=0.01)]
        ) as engine,
        anyio.create_task_group() as group,
    ):
        await page.goto(f"{base}/")
        await page.evaluate("window.__stamp = 'no reload'")
        await expect(page.locator("#live-state")).to_have_text("● live")
        group.start_soon(engine.execute, program)
        row = page.locator("tbody#rows tr").first
        await expect(row).to_contain_text("program")
        await expect(row.locator(".badge")).to_have_text("▶ running")
        execution_id = await row.get_attribute("data-id")
        assert execution_id is not None

        # the same run, opened while in flight: it grows live too
        watcher = await page.context.new_page()
        await watcher.goto(f"{base}/executions/{execution_id}")
        rows = watcher.locator("li.k-call")
        await expect(rows).to_have_count(1)
        await expect(watcher.locator("#live-state")).to_have_text("● live")

        gate.set()
        await expect(row.locator(".badge")).to_have_text("✓ completed")
        await expect(row.locator("td.num").nth(1)).to_have_text("2")
        assert await page.evaluate("window.__stamp") == "no reload"
        await expect(rows).to_have_count(2)
        await expect(watcher.locator(".exec-head .badge")).to_have_text("✓ completed")
        await expect(watcher.locator("#live-state")).to_have_text("finished")
        await watcher.screenshot(path=_shot("in_flight_execution_page"), full_page=True)
        await watcher.close()


def _shot(name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{name}.png"


async def test_the_timeline_shows_every_tool_call_with_its_status(
    page: Page, tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path / "history.db")
    execution_id = await record(url, mixed)
    async with serving(url, tools=[read_note, write_note]) as base:
        await page.goto(f"{base}/executions/{execution_id}")
        calls = page.locator("li.k-call")
        expected = [
            ("read_note", "completed", "✓"),
            ("explode", "failed", "✗"),
            ("forbidden", "blocked", "⊘"),
            ("skippable", "skipped", "↷"),
            ("sleepy", "cancelled", "⊗"),
            ("add", "completed", "✓"),  # inside the child execution
            ("write_note", "completed", "✓"),
        ]
        await expect(calls).to_have_count(len(expected))
        for index, (name, status, icon) in enumerate(expected):
            call = calls.nth(index)
            await expect(call.locator(".name")).to_have_text(name)
            await expect(call.locator(".status")).to_have_text(status)  # readable without colour
            await expect(call.locator(".icon")).to_have_text(icon)
            box = await call.locator(".bar").bounding_box()
            assert box is not None and box["width"] >= 1
        await expect(page.locator("li.k-interaction .status")).to_have_text("declined")
        child = page.locator("li.k-child")
        await expect(child.locator("summary .name")).to_have_text("_child")
        await expect(page.locator(".summary")).to_contain_text("notes/out.md")
        await expect(page.locator(".summary")).to_contain_text("50% success rate")
        # a child execution folds away, and opens again
        await child.locator("summary").click()
        await expect(child.locator("li.k-call")).to_be_hidden()
        await child.locator("summary").click()
        await expect(child.locator("li.k-call")).to_be_visible()


async def test_clicking_a_row_opens_its_details(page: Page, tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "history.db")
    execution_id = await record(url, mixed)
    async with serving(url) as base:
        await page.goto(f"{base}/executions/{execution_id}")
        address = page.url
        explode_row = page.locator("li.k-call", has_text="explode")
        await explode_row.locator("a.row").click()
        detail = page.locator("#detail .detail-card")
        await expect(detail.locator("h2")).to_contain_text("explode")
        await expect(detail.locator("pre.args")).to_contain_text('"reason": "the disk is on fire"')
        await expect(detail.locator("pre.error-message")).to_have_text("the disk is on fire")
        await expect(detail.locator(".error-facts")).to_contain_text("ToolError")
        await expect(detail.locator("pre.metadata")).to_contain_text('"checked_by": "governance"')
        await expect(detail.locator("details.raw summary")).to_have_text(
            ["3 ToolCallStarted", "4 ToolCallFinished"]
        )
        await expect(explode_row.locator("a.row")).to_have_class("row selected")
        assert page.url == address  # the panel opened in place

        await page.locator("li.k-interaction a.row").click()
        await expect(detail.locator(".question")).to_have_text("Ship it?")
        await expect(detail).to_contain_text("InteractionResolved")


async def test_untrusted_markup_renders_as_text(page: Page, tmp_path: Path) -> None:
    async def hostile(ctx: ExecutionContext) -> None:
        await ctx.call(echo, text=XSS)
        await ctx.call(echo, text="harmless")

    url = sqlite_url(tmp_path / "history.db")
    execution_id = await record(url, hostile, trigger=Trigger(kind=XSS), owner=XSS)
    async with history.open(url) as store:
        tree = await store.get_execution(execution_id)
    assert tree is not None
    async with serving(url) as base:
        await page.goto(f"{base}/")
        trigger = page.locator(f'tr[data-id="{execution_id}"] td').nth(2)
        await expect(trigger).to_have_text(tree.trigger or "")
        await page.goto(f"{base}/executions/{execution_id}")
        await expect(page.locator(".facts")).to_contain_text(tree.owner or "")
        await page.locator("li.k-call a.row").first.click()
        await expect(page.locator("#detail pre.args")).to_contain_text("<script>window.__xss = 1")
        assert await page.evaluate("typeof window.__xss") == "undefined"
        assert await page.locator("img[src=x]").count() == 0
        assert await page.locator("script").count() == 1  # ours


async def test_a_tampered_audit_trail_shows_the_bad_line(page: Page, tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "history.db")
    audit_dir = tmp_path / "audit"
    execution_id = await record(url, mixed, audit_dir=audit_dir, session="session-1")
    trail = audit_dir / "session-1" / "events.jsonl"
    lines = trail.read_text().splitlines(keepends=True)
    lines[4] = lines[4].replace('"seq":4', '"seq":4,"edited":true', 1)
    trail.write_text("".join(lines))
    async with serving(url, audit_dir=audit_dir) as base:
        await page.goto(f"{base}/executions/{execution_id}")
        verdict = page.locator(".audit .verdict")
        await expect(verdict.locator(".badge")).to_have_text("✗ tampered")
        await expect(verdict.locator(".bad-where")).to_have_text("session-1/events.jsonl:5")
        await expect(verdict).to_contain_text("hash_mismatch")
        await expect(verdict).to_contain_text("4 intact record(s) before it")
        await expect(verdict.locator("pre.bad-line")).to_contain_text('"edited":true')


async def test_the_stats_chart(page: Page, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = sqlite_url(tmp_path / "history.db")
    await record(url, mixed)
    async with serving(url) as base:
        await page.goto(f"{base}/stats")
        explode_row = page.locator("table.stats tr", has_text="explode")
        await expect(explode_row.locator("td.num").nth(2)).to_have_text("100%")
        failed = await explode_row.locator(".seg.bad").bounding_box()
        completed = await explode_row.locator(".seg.ok").bounding_box()
        assert failed is not None and failed["width"] > 10
        assert completed is not None and completed["width"] == 0
        request.node.stash[PROBLEMS].allowed.append("status of 400 (Bad Request)")
        await page.fill("input[name=since]", "not a time")
        await page.click("button[type=submit]")
        await expect(page.locator(".error-page")).to_contain_text("neither an ISO 8601 time")
