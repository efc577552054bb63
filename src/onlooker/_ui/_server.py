"""Running the app: in the foreground for ``onlooker ui``, in a thread for tests and benchmarks."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Final

import uvicorn
from starlette.applications import Starlette

__all__ = ["BackgroundServer", "serve"]

_GRACE: Final = 2  # seconds open streams get to end when the server stops


def _config(app: Starlette, host: str, port: int, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        ws="none",  # no websockets here; also keeps uvicorn's websockets imports away
        timeout_graceful_shutdown=_GRACE,
    )


def _url(server: uvicorn.Server) -> str:
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    app: Starlette,
    host: str = "127.0.0.1",
    port: int = 8765,
    on_start: Callable[[str], None] | None = None,
) -> None:
    """Serve ``app`` until interrupted (Ctrl-C); ``on_start(url)`` once it listens.

    Raises ``SystemExit(1)`` when it cannot start (the port is taken).
    """

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and on_start is not None:
                on_start(_url(self))

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            app.state.ui.stopping.set()  # live streams end at their next poll
            super().handle_exit(sig, frame)

    server = Server(_config(app, host, port, "warning"))
    try:
        server.run()
    except SystemExit:  # uvicorn's own exit (3) when it cannot bind: ours is 1
        if server.started:
            raise
    if not server.started:
        raise SystemExit(1)


class BackgroundServer:
    """``app`` served by uvicorn in a daemon thread, on a free port of ``host``.

    >>> with BackgroundServer(app) as server:
    ...     httpx.get(server.url + "/")
    """

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self._server = uvicorn.Server(_config(app, host, port, "warning"))
        self._thread = threading.Thread(target=self._server.run, name="onlooker-ui", daemon=True)
        self.url = ""

    def start(self, timeout: float = 10.0) -> None:
        """Start serving; returns once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the UI server did not start (see its log)")
            time.sleep(0.01)
        self.url = _url(self._server)

    def stop(self) -> None:
        """Stop serving: live streams end at their next poll, then the thread exits."""
        self.app.state.ui.stopping.set()
        self._server.should_exit = True
        self._thread.join(timeout=_GRACE + 5)

    def __enter__(self) -> BackgroundServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
