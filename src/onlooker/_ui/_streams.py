"""The live streams: server-sent events carrying a page's live part again when it changes.

Each stream re-reads the database every ``poll_interval`` seconds, renders
the same fragment its page holds, and sends it only when it differs from the
last one sent. The execution's stream ends with a ``done`` event (its final
status) once nothing in it runs; every stream ends cleanly (the generator
returns) when the server stops.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import anyio
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response

from onlooker import HistoryError

from ._filters import list_filters
from ._pages import execution_node, list_context, live_context
from ._render import fragment_for_stream
from ._state import UiState, rendered, state_of

__all__ = ["execution_stream", "list_stream"]

logger: Final = logging.getLogger("onlooker.ui")

_GRACE: Final = 1.0  # seconds a live stream gets to end by itself when the server stops


async def _next_tick(state: UiState, shutdown: anyio.Event) -> bool:
    """Wait one poll interval; ``False`` when the server is stopping (end the stream)."""
    with anyio.move_on_after(state.poll_interval):
        await shutdown.wait()
    return not (shutdown.is_set() or state.stopping.is_set())


Render = Callable[[], Awaitable[tuple[str, str | None]]]
"""A stream's fragment rendered now, and the final status once nothing is left to watch."""


async def _updates(
    state: UiState, shutdown: anyio.Event, render: Render
) -> AsyncIterator[dict[str, str]]:
    """An ``update`` event with each new rendering; a ``done`` event with the final status.

    A database that stops answering pauses the stream (one warning, no event): the
    page keeps what it shows and goes on once the database answers again.
    """
    last = None
    unavailable = False
    while True:
        try:
            html, final_status = await render()
        except HistoryError as exc:
            if not unavailable:
                logger.warning("live view paused: the history database cannot be read: %s", exc)
            unavailable = True
            if not await _next_tick(state, shutdown):
                return
            continue
        unavailable = False
        if html != last:
            yield {"event": "update", "data": fragment_for_stream(html)}
            last = html
        if final_status is not None:
            yield {"event": "done", "data": final_status}
            return
        if not await _next_tick(state, shutdown):
            return


def _stream(request: Request, render: Render) -> Response:
    """Server-sent events that end cleanly (the generator returns) when the server stops."""
    shutdown = anyio.Event()
    return EventSourceResponse(
        _updates(state_of(request), shutdown, render),
        ping=15,
        shutdown_event=shutdown,
        shutdown_grace_period=_GRACE,
    )


async def list_stream(request: Request) -> Response:
    """``/stream/list``: the list's rows and page links again whenever they change (SSE)."""
    list_filters(request.query_params)  # a bad filter is a 400 now, not a broken stream
    template = state_of(request).templates.get_template("_list.html")

    async def render() -> tuple[str, None]:
        return rendered(template, request, **await list_context(request)), None

    return _stream(request, render)


async def execution_stream(request: Request) -> Response:
    """``/stream/executions/ID``: the live part of the page while anything in it runs."""
    execution_id = request.path_params["execution_id"]
    await execution_node(request, execution_id)  # an unknown id is a 404 now, not a broken stream
    template = state_of(request).templates.get_template("_live.html")

    async def render() -> tuple[str, str | None]:
        context = live_context(request, await execution_node(request, execution_id))
        html = rendered(template, request, **context)
        return html, None if context["timeline"].running else context["tree"].status

    return _stream(request, render)
