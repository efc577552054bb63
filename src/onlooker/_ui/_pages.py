"""The pages: the executions list, one execution, a row's details, stats, audit, errors.

``list_context``, ``execution_node`` and ``live_context`` are also what the
live streams (``_streams``) render again on every change.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlencode

import anyio
import anyio.to_thread
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, StatementError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from onlooker import ExecutionEvent, HistoryError
from onlooker.plugins.audit._encode import json_bytes
from onlooker.plugins.audit._events import json_form
from onlooker.plugins.history import ExecutionRecord

from . import _queries
from ._audit import SessionVerdict
from ._filters import BadRequest, list_filters, time_range
from ._state import page, state_of, store_of
from ._timeline import build_timeline, summarize

__all__ = [
    "ERROR_PAGES",
    "audit_page",
    "execution_node",
    "execution_page",
    "executions_page",
    "list_context",
    "live_context",
    "stats_page",
]


# -- the executions list -------------------------------------------------------------------


async def list_context(request: Request) -> dict[str, Any]:
    """The list's filters, its page of rows, and the raw query (for the links)."""
    filters = list_filters(request.query_params)
    one_page = await store_of(request).query(lambda conn: _queries.list_page(conn, filters))
    params = dict(request.query_params)
    return {
        "filters": filters,
        "page": one_page,
        "raw": params,
        "filtered": any(v for k, v in params.items() if k not in ("cursor", "limit")),
        # The page links live with the rows: a live update that pushes rows off the first
        # page moves "older »" to start after the last row it shows.
        "first_query": _query(params, cursor=None),
        "next_query": _query(params, cursor=one_page.next_cursor),
    }


def _query(params: Mapping[str, str], **changes: str | None) -> str:
    """The query string ``params`` with ``changes`` (``None`` drops a key), empty values dropped."""
    merged = {**params, **changes}
    return urlencode({key: value for key, value in merged.items() if value})


async def executions_page(request: Request) -> Response:
    """``/``: executions newest first, filtered, paged, live."""
    context = await list_context(request)
    params = context["raw"]
    return page(
        request,
        "list.html",
        nav="list",
        statuses=_queries.EXECUTION_STATUSES,
        stream_query=_query(params),
        **context,
    )


# -- one execution -------------------------------------------------------------------------


def _not_found(execution_id: str) -> HTTPException:
    return HTTPException(404, f"no execution {execution_id!r} in the history")


async def execution_node(request: Request, execution_id: str) -> _queries.Node:
    """The execution and its children, read in one query; a 404 when there is none."""
    node = await store_of(request).query(lambda conn: _queries.execution_node(conn, execution_id))
    if node is None:
        raise _not_found(execution_id)
    return node


def live_context(request: Request, node: _queries.Node) -> dict[str, Any]:
    """What the execution page shows and its stream re-renders: waterfall and summary."""
    now = datetime.now(UTC)
    return {
        "tree": node.record,
        "node": node,
        "timeline": build_timeline(node, now),
        "summary": summarize(node, state_of(request).declarations, now),
    }


async def _verdicts(request: Request, execution_id: str) -> list[SessionVerdict] | None:
    index = state_of(request).audit
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
        events = await store_of(request).events(execution_id)
        if not events:
            raise _not_found(execution_id)
        # The trail's JSON: a lone surrogate (in a value or a key) escaped, not refused.
        body = json_bytes([json_form(event) for event in events])
        return Response(body, media_type="application/json")
    for key, column in (("call", "tool_call_id"), ("interaction", "interaction_id")):
        if key in params:
            return await _detail(request, execution_id, column, params[key])
    node = await execution_node(request, execution_id)
    context = live_context(request, node)
    verdicts = await _verdicts(request, execution_id)
    return page(request, "execution.html", nav="list", verdicts=verdicts, **context)


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

    record, item, events = await store_of(request).query(read)
    if record is None:
        raise _not_found(execution_id)
    if item is None:
        what = "tool call" if column == "tool_call_id" else "interaction"
        raise HTTPException(404, f"execution {execution_id!r} has no {what} {item_id!r}")
    template = "_call.html" if column == "tool_call_id" else "_interaction.html"
    context = {"tree": record, "item": item, "events": events, "fragment": template}
    if request.query_params.get("partial"):
        return page(request, template, **context)
    return page(request, "detail.html", nav="list", **context)


# -- stats and audit -----------------------------------------------------------------------


async def stats_page(request: Request) -> Response:
    """``/stats``: calls, failures and p50/p95 durations per tool for a time range."""
    since, until = time_range(request.query_params)
    stats = await store_of(request).stats(since, until)
    return page(request, "stats.html", nav="stats", stats=stats, raw=dict(request.query_params))


async def audit_page(request: Request) -> Response:
    """``/audit``: every session's verdict and the executions its trail mentions."""
    index = state_of(request).audit
    if index is None:
        raise HTTPException(
            404, "no audit directory was given: start the UI with --audit DIR to see trails"
        )

    def read() -> list[tuple[SessionVerdict, list[str]]]:
        return [
            (index.verdict(session), index.executions_of(session)) for session in index.sessions()
        ]

    sessions = await anyio.to_thread.run_sync(read)
    return page(request, "audit.html", nav="audit", sessions=sessions)


# -- error pages ---------------------------------------------------------------------------


def _error(request: Request, status_code: int, title: str, message: str) -> HTMLResponse:
    return page(request, "error.html", status_code, title=title, message=message, code=status_code)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        # Starlette's router says only "Not Found" for a path no route takes: name it.
        named = exc.detail if exc.detail and exc.detail != "Not Found" else None
        return _error(request, 404, "Not found", named or f"nothing at {request.url.path}")
    if exc.status_code == 405:
        return _error(request, 405, "Method not allowed", "this server only reads: use GET")
    return _error(request, exc.status_code, "Error", str(exc.detail))


async def _bad_request(request: Request, exc: Exception) -> Response:
    return _error(request, 400, "Bad request", str(exc))


async def _store_error(request: Request, exc: Exception) -> Response:
    message = str(exc.orig) if isinstance(exc, DBAPIError) else str(exc)  # not the SQL
    return _error(request, 503, "The history database cannot be read", message)


async def _server_error(request: Request, exc: Exception) -> Response:
    cause = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    return _error(request, 500, "Internal error", f"{type(cause).__name__}: {cause}")  # no SQL


ERROR_PAGES: Final[
    Mapping[type[Exception], Callable[[Request, Exception], Coroutine[Any, Any, Response]]]
] = {
    HTTPException: _http_error,
    BadRequest: _bad_request,
    HistoryError: _store_error,
    DBAPIError: _store_error,
    Exception: _server_error,
}
"""The app's exception handlers: every failure is an HTML page that names it."""
