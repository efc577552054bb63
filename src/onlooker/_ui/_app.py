"""The Starlette application: routes, pages, live streams, error pages.

Every page is rendered on the server by Jinja2 with autoescaping, so every
value from the store (tool arguments are untrusted input) reaches the
browser as text. The live streams send the same server-rendered fragments
over server-sent events; the one script (``static/ui.js``) swaps them in and
loads the details panel. Only GET and HEAD are routed: nothing here writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import anyio
import jinja2
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from onlooker import ExecutionEvent, HistoryError, Tool, ToolDeclaration
from onlooker.plugins import history
from onlooker.plugins.history import ExecutionRecord, HistoryStore

from . import _queries
from ._audit import AuditIndex, SessionVerdict
from ._filters import BadRequest, list_filters, time_range
from ._render import environment, fragment_for_stream
from ._timeline import build_timeline, summarize

__all__ = ["LOOPBACK_HOSTS", "create_app"]

LOOPBACK_HOSTS: Final = ("127.0.0.1", "localhost", "::1")
"""The ``Host`` names a loopback server answers to (a defence against DNS rebinding)."""

_HERE: Final = Path(__file__).parent
_GRACE: Final = 1.0  # seconds a live stream gets to end by itself when the server stops
_SECURITY_HEADERS: Final = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
        b"img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
        b"frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


@dataclass(slots=True)
class _State:
    db: str | None
    audit: AuditIndex | None
    declarations: dict[str, ToolDeclaration]
    poll_interval: float
    templates: jinja2.Environment
    stopping: threading.Event = field(default_factory=threading.Event)
    store: HistoryStore | None = None


def _declarations(tools: Iterable[Tool[..., Any] | ToolDeclaration]) -> dict[str, ToolDeclaration]:
    from onlooker.integrations.claude_agent_sdk import BUILTIN_TOOLS

    found = {declared.name: declared for declared in BUILTIN_TOOLS}
    for item in tools:
        declared = item.declaration if isinstance(item, Tool) else item
        found[declared.name] = declared
    return found


def create_app(
    db: str | None = None,
    *,
    audit_dir: str | Path | None = None,
    tools: Iterable[Tool[..., Any] | ToolDeclaration] = (),
    poll_interval: float = 1.0,
    allowed_hosts: Iterable[str] | None = LOOPBACK_HOSTS,
) -> Starlette:
    """The read-only web view of the history database ``db`` (see docs/ui.md).

    ``db`` is a database URL (default: ``.onlooker/history.db`` under the
    current directory), opened with ``history.open(db, read_only=True)``
    when the app starts: a missing or foreign database is then a
    :class:`onlooker.HistoryError`, and nothing is ever created or written.
    ``audit_dir`` (a directory of audit sessions) adds each execution's
    ``audit verify`` verdict. ``tools`` (tools or declarations) tell the
    summary which arguments are files; Claude Code's built-in tools are known
    already. Live views re-read the database every ``poll_interval`` seconds.
    ``allowed_hosts`` are the ``Host`` names answered (``None``: any).
    """
    if not poll_interval > 0:
        raise ValueError(f"poll_interval must be positive, not {poll_interval!r}")
    index = None
    if audit_dir is not None:
        directory = Path(audit_dir)
        if not directory.is_dir():
            raise ValueError(f"no audit directory at {str(directory)!r}")
        index = AuditIndex(directory)
    state = _State(
        db=db,
        audit=index,
        declarations=_declarations(tools),
        poll_interval=poll_interval,
        templates=environment(),
    )
    state.templates.globals.update(audit_enabled=index is not None)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with history.open(db, read_only=True) as store:
            state.store = store
            state.templates.globals.update(db_label=store.url)
            try:
                yield
            finally:
                state.stopping.set()
                state.store = None

    app = Starlette(
        routes=[
            Route("/", executions_page, name="executions"),
            Route("/stream/list", list_stream, name="list_stream"),
            Route("/executions/{execution_id:path}", execution_page, name="execution"),
            Route("/stream/executions/{execution_id:path}", execution_stream),
            Route("/stats", stats_page, name="stats"),
            Route("/audit", audit_page, name="audit"),
            Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
        ],
        exception_handlers={
            HTTPException: _http_error,
            BadRequest: _bad_request,
            HistoryError: _store_error,
            DBAPIError: _store_error,
            Exception: _server_error,
        },
        lifespan=lifespan,
    )
    app.state.ui = state
    app.add_middleware(_Guard, allowed_hosts=allowed_hosts)
    return app


# -- plumbing ------------------------------------------------------------------------------


class _Guard:
    """Refuses unknown ``Host`` headers; adds the security headers and ``Server-Timing``.

    ``Server-Timing: app;dur=<ms>`` is the time from the request's arrival to
    the response's start: the page's whole server-side cost (bench/ui.py reads it).
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] | None) -> None:
        self.app = app
        self.allowed = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.allowed is not None:
            host = _host(dict(scope["headers"]).get(b"host", b"").decode("latin-1"))
            if host not in self.allowed:
                response = Response(
                    f"unknown host {host!r}: this server answers to "
                    f"{', '.join(sorted(self.allowed))}\n",
                    status_code=400,
                    media_type="text/plain",
                )
                await response(scope, receive, send)
                return

        began = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                spent = f"app;dur={(time.perf_counter() - began) * 1000:.2f}".encode()
                message["headers"] = [
                    *message.get("headers", []),
                    *_SECURITY_HEADERS,
                    (b"server-timing", spent),
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _host(header: str) -> str:
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8765
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _state(request: Request) -> _State:
    state: _State = request.app.state.ui
    return state


def _store(request: Request) -> HistoryStore:
    store = _state(request).store
    if store is None:
        raise HistoryError("the history database is not open (the server is starting or stopping)")
    return store


def _page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = _state(request).templates.get_template(template).render(request=request, **context)
    return HTMLResponse(html, status_code=status_code, headers={"cache-control": "no-store"})


def _error(request: Request, status_code: int, title: str, message: str) -> HTMLResponse:
    return _page(request, "error.html", status_code, title=title, message=message, code=status_code)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _error(request, 404, "Not found", exc.detail or f"nothing at {request.url.path}")
    if exc.status_code == 405:
        return _error(request, 405, "Method not allowed", "this server only reads: use GET")
    return _error(request, exc.status_code, "Error", str(exc.detail))


async def _bad_request(request: Request, exc: Exception) -> Response:
    return _error(request, 400, "Bad request", str(exc))


async def _store_error(request: Request, exc: Exception) -> Response:
    message = str(exc.orig) if isinstance(exc, DBAPIError) else str(exc)  # not the SQL
    return _error(request, 503, "The history database cannot be read", message)


async def _server_error(request: Request, exc: Exception) -> Response:
    return _error(request, 500, "Internal error", f"{type(exc).__name__}: {exc}")


async def _next_tick(state: _State, shutdown: anyio.Event) -> bool:
    """Wait one poll interval; ``False`` when the server is stopping (end the stream)."""
    with anyio.move_on_after(state.poll_interval):
        await shutdown.wait()
    return not (shutdown.is_set() or state.stopping.is_set())


def _stream(updates: AsyncIterator[dict[str, str]], shutdown: anyio.Event) -> Response:
    """Server-sent events that end cleanly (the generator returns) when the server stops."""
    return EventSourceResponse(
        updates, ping=15, shutdown_event=shutdown, shutdown_grace_period=_GRACE
    )


def _query(params: Mapping[str, str], **changes: str | None) -> str:
    """The query string ``params`` with ``changes`` (``None`` drops a key), empty values dropped."""
    merged = {**params, **changes}
    return urlencode({key: value for key, value in merged.items() if value})


# -- the executions list -------------------------------------------------------------------


async def _list_context(request: Request) -> dict[str, Any]:
    filters = list_filters(request.query_params)
    page = await _store(request).query(lambda conn: _queries.list_page(conn, filters))
    params = dict(request.query_params)
    return {
        "filters": filters,
        "page": page,
        "raw": params,
        "filtered": any(v for k, v in params.items() if k not in ("cursor", "limit")),
    }


async def executions_page(request: Request) -> Response:
    """``/``: executions newest first, filtered, paged, live."""
    context = await _list_context(request)
    params = context["raw"]
    return _page(
        request,
        "list.html",
        nav="list",
        statuses=_queries.EXECUTION_STATUSES,
        stream_query=_query(params),
        first_query=_query(params, cursor=None),
        next_query=_query(params, cursor=context["page"].next_cursor),
        **context,
    )


async def list_stream(request: Request) -> Response:
    """``/stream/list``: the list's rows again whenever they change (server-sent events)."""
    list_filters(request.query_params)  # a bad filter is a 400 now, not a broken stream
    state = _state(request)
    template = state.templates.get_template("_rows.html")

    shutdown = anyio.Event()

    async def updates() -> AsyncIterator[dict[str, str]]:
        last = None
        while True:
            html = template.render(request=request, **await _list_context(request))
            if html != last:
                yield {"event": "update", "data": fragment_for_stream(html)}
                last = html
            if not await _next_tick(state, shutdown):
                return

    return _stream(updates(), shutdown)


# -- one execution -------------------------------------------------------------------------


def _not_found(execution_id: str) -> HTTPException:
    return HTTPException(404, f"no execution {execution_id!r} in the history")


async def _node(request: Request, execution_id: str) -> _queries.Node:
    node = await _store(request).query(lambda conn: _queries.execution_node(conn, execution_id))
    if node is None:
        raise _not_found(execution_id)
    return node


def _live_context(request: Request, node: _queries.Node) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "tree": node.record,
        "node": node,
        "timeline": build_timeline(node, now),
        "summary": summarize(node, _state(request).declarations, now),
    }


async def _verdicts(request: Request, execution_id: str) -> list[SessionVerdict] | None:
    index = _state(request).audit
    if index is None:
        return None

    def read() -> list[SessionVerdict]:
        return [index.verdict(session) for session in index.sessions_of(execution_id)]

    return await anyio.to_thread.run_sync(read)


async def execution_page(request: Request) -> Response:
    """``/executions/ID``: the waterfall, summary and audit verdict; ``?call=`` /
    ``?interaction=`` for one row's details (``&partial=1``: the panel only);
    ``?format=json`` for the raw events."""
    execution_id = request.path_params["execution_id"]
    params = request.query_params
    if params.get("format") not in (None, "json"):
        raise BadRequest(f"format={params['format']!r}: the only other format is json")
    if params.get("format") == "json":
        events = await _store(request).events(execution_id)
        if not events:
            raise _not_found(execution_id)
        return JSONResponse([event.model_dump(mode="json") for event in events])
    for key, column in (("call", "tool_call_id"), ("interaction", "interaction_id")):
        if key in params:
            return await _detail(request, execution_id, column, params[key])
    node = await _node(request, execution_id)
    context = _live_context(request, node)
    verdicts = await _verdicts(request, execution_id)
    return _page(request, "execution.html", nav="list", verdicts=verdicts, **context)


async def _detail(request: Request, execution_id: str, column: str, item_id: str) -> Response:
    def read(conn: Connection) -> tuple[ExecutionRecord | None, Any, list[ExecutionEvent]]:
        record = _queries.execution_record(conn, execution_id)
        if record is None:
            return None, None, []
        if column == "tool_call_id":
            item: Any = _queries.call_record(conn, execution_id, item_id)
        else:
            item = _queries.interaction_record(conn, execution_id, item_id)
        found = [] if item is None else _queries.item_events(conn, execution_id, column, item_id)
        return record, item, found

    record, item, events = await _store(request).query(read)
    if record is None:
        raise _not_found(execution_id)
    if item is None:
        what = "tool call" if column == "tool_call_id" else "interaction"
        raise HTTPException(404, f"execution {execution_id!r} has no {what} {item_id!r}")
    template = "_call.html" if column == "tool_call_id" else "_interaction.html"
    context = {"tree": record, "item": item, "events": events, "fragment": template}
    if request.query_params.get("partial"):
        return _page(request, template, **context)
    return _page(request, "detail.html", nav="list", **context)


async def execution_stream(request: Request) -> Response:
    """``/stream/executions/ID``: the live part of the page while anything in it runs."""
    execution_id = request.path_params["execution_id"]
    await _node(request, execution_id)  # an unknown id is a 404 now, not a broken stream
    state = _state(request)
    template = state.templates.get_template("_live.html")

    shutdown = anyio.Event()

    async def updates() -> AsyncIterator[dict[str, str]]:
        last = None
        while True:
            context = _live_context(request, await _node(request, execution_id))
            html = template.render(request=request, **context)
            if html != last:
                yield {"event": "update", "data": fragment_for_stream(html)}
                last = html
            if not context["timeline"].running:
                yield {"event": "done", "data": context["tree"].status}
                return
            if not await _next_tick(state, shutdown):
                return

    return _stream(updates(), shutdown)


# -- stats and audit -----------------------------------------------------------------------


async def stats_page(request: Request) -> Response:
    """``/stats``: calls, failures and p50/p95 durations per tool for a time range."""
    since, until = time_range(request.query_params)
    stats = await _store(request).stats(since, until)
    return _page(request, "stats.html", nav="stats", stats=stats, raw=dict(request.query_params))


async def audit_page(request: Request) -> Response:
    """``/audit``: every session's verdict and the executions its trail mentions."""
    index = _state(request).audit
    if index is None:
        raise HTTPException(
            404, "no audit directory was given: start the UI with --audit DIR to see trails"
        )

    def read() -> list[tuple[SessionVerdict, list[str]]]:
        return [
            (index.verdict(session), index.executions_of(session)) for session in index.sessions()
        ]

    sessions = await anyio.to_thread.run_sync(read)
    return _page(request, "audit.html", nav="audit", sessions=sessions)
