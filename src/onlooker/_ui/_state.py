"""What every route reads: the app's state, the open store, and the page renderer."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from onlooker import HistoryError, ToolDeclaration
from onlooker.plugins.history import HistoryStore

from ._audit import AuditIndex

__all__ = ["UiState", "page", "rendered", "state_of", "store_of"]


@dataclass(slots=True)
class UiState:
    """The app's state (``app.state.ui``); ``store`` is open while the app runs."""

    db: str | None
    audit: AuditIndex | None
    declarations: dict[str, ToolDeclaration]
    poll_interval: float
    templates: jinja2.Environment
    stopping: threading.Event = field(default_factory=threading.Event)
    store: HistoryStore | None = None


def state_of(request: Request) -> UiState:
    """The state of the app serving ``request``."""
    state: UiState = request.app.state.ui
    return state


def store_of(request: Request) -> HistoryStore:
    """The open history store; a 503 page (``HistoryError``) while the app starts or stops."""
    store = state_of(request).store
    if store is None:
        raise HistoryError("the history database is not open (the server is starting or stopping)")
    return store


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """``template`` rendered with ``context``, never cached."""
    html = rendered(state_of(request).templates.get_template(template), request, **context)
    return HTMLResponse(html, status_code=status_code, headers={"cache-control": "no-store"})


def rendered(template: jinja2.Template, request: Request, **context: Any) -> str:
    """``template`` rendered; a lone surrogate (an undecodable file name in a recorded
    value), which no response can encode, shown escaped as the trail writes it (``\\udce9``)."""
    html = template.render(request=request, **context)
    if html.isascii():
        return html
    return html.encode("utf-8", "backslashreplace").decode("utf-8")
