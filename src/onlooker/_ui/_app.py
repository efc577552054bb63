"""The Starlette application: the route table, the lifespan, the guard middleware.

Every page is rendered on the server by Jinja2 with autoescaping, so every
value from the store (tool arguments are untrusted input) reaches the
browser as text. The live streams send the same server-rendered fragments
over server-sent events; the one script (``static/ui.js``) swaps them in and
loads the details panel. Only GET and HEAD are routed: nothing here writes.
The pages are in ``_pages``, the live streams in ``_streams``, what they
share (the state, the open store, the renderer) in ``_state``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from onlooker import Tool, ToolDeclaration
from onlooker.plugins import history

from ._audit import AuditIndex
from ._pages import ERROR_PAGES, audit_page, execution_page, executions_page, stats_page
from ._render import environment
from ._state import UiState
from ._streams import execution_stream, list_stream

__all__ = ["LOOPBACK_HOSTS", "create_app"]

LOOPBACK_HOSTS: Final = ("127.0.0.1", "localhost", "::1")
"""The ``Host`` names a loopback server answers to (a defence against DNS rebinding)."""

_HERE: Final = Path(__file__).parent
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
    state = UiState(
        db=db,
        audit=_audit_index(audit_dir),
        declarations=_declarations(tools),
        poll_interval=poll_interval,
        templates=environment(),
    )
    state.templates.globals.update(audit_enabled=state.audit is not None)
    app = Starlette(routes=_routes(), exception_handlers=ERROR_PAGES, lifespan=_lifespan(state))
    app.state.ui = state
    app.add_middleware(_Guard, allowed_hosts=allowed_hosts)
    return app


def _audit_index(audit_dir: str | Path | None) -> AuditIndex | None:
    if audit_dir is None:
        return None
    directory = Path(audit_dir)
    if not directory.is_dir():
        raise ValueError(f"no audit directory at {str(directory)!r}")
    return AuditIndex(directory)


def _declarations(tools: Iterable[Tool[..., Any] | ToolDeclaration]) -> dict[str, ToolDeclaration]:
    from onlooker.integrations._claude_declarations import BUILTIN_TOOLS

    found = {declared.name: declared for declared in BUILTIN_TOOLS}
    for item in tools:
        declared = item.declaration if isinstance(item, Tool) else item
        found[declared.name] = declared
    return found


class _AnyId(PathConvertor):
    """An execution id, whatever it holds: a framework's own ids may end in a newline, which
    the ``path`` convertor's ``.*`` leaves out (its route then opened another execution)."""

    regex = "(?s:.*)"


register_url_convertor("onlooker_id", _AnyId())


def _routes() -> list[BaseRoute]:
    return [
        Route("/", executions_page, name="executions"),
        Route("/stream/list", list_stream, name="list_stream"),
        Route("/executions/{execution_id:onlooker_id}", execution_page, name="execution"),
        Route("/stream/executions/{execution_id:onlooker_id}", execution_stream),
        Route("/stats", stats_page, name="stats"),
        Route("/audit", audit_page, name="audit"),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]


def _lifespan(state: UiState) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """The store is open while the app runs; stopping ends the live streams."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with history.open(state.db, read_only=True) as store:
            state.store = store
            state.templates.globals.update(db_label=store.url)
            try:
                yield
            finally:
                state.stopping.set()
                state.store = None

    return lifespan


# -- the guard -----------------------------------------------------------------------------


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
