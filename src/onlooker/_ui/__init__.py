"""``onlooker ui``: a read-only web view of the history database.

``create_app(db, audit_dir=..., tools=...)`` builds the Starlette app;
``serve(app, host, port)`` runs it under uvicorn; ``BackgroundServer``
runs it in a thread (tests, benchmarks). Needs the ``ui`` extra
(starlette, uvicorn, sse-starlette, jinja2). See docs/ui.md.

The database is opened with ``history.open(url, read_only=True)``. Modules:
``_queries`` holds the UI's own SQL (over the public ``tables``);
``_filters`` parses query strings; ``_timeline`` draws the waterfall and
rebuilds the summary; ``_audit`` finds and verifies trails; ``_render`` is
the Jinja2 environment; ``_app`` builds the app (routes, lifespan, guard
middleware); ``_pages`` holds the pages and error pages, ``_streams`` the
live streams, ``_state`` what they share; ``_server`` runs uvicorn.
"""

from __future__ import annotations

from ._app import LOOPBACK_HOSTS, create_app
from ._server import BackgroundServer, serve

__all__ = ["LOOPBACK_HOSTS", "BackgroundServer", "create_app", "serve"]
