"""Serving a registry: text exposition and an HTTP endpoint (both metric sources)."""

from __future__ import annotations

import operator
import threading
from types import TracebackType
from typing import Self, final
from wsgiref.simple_server import WSGIServer

import anyio
import anyio.to_thread
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest, start_http_server
from prometheus_client.registry import Collector


@final
class MetricsServer:
    """An HTTP endpoint serving ``/metrics``; close it with :meth:`close` or ``with``."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, host: str) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        """The interface it listens on."""
        self.port: int = server.server_port
        """The TCP port (the real one when ``serve(0)`` picked a free port)."""
        self._closed = False

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Exposed:
    """A registry with text exposition and HTTP serving; servers close with it."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.registry: CollectorRegistry = (
            registry if registry is not None else CollectorRegistry(auto_describe=True)
        )
        """The plugin's own registry (never prometheus-client's global one)."""
        self._shared = registry is not None  # the caller's: it outlives this engine
        self._registered: list[Collector] = []
        self._servers: list[MetricsServer] = []

    def _register(self, collector: Collector) -> None:
        self.registry.register(collector)
        self._registered.append(collector)

    def exposition(self) -> str:
        """The metrics in the Prometheus text format."""
        return generate_latest(self.registry).decode("utf-8")

    def serve(self, port: int, host: str = "127.0.0.1") -> MetricsServer:
        """Serve the metrics over HTTP on ``host:port`` (``port=0``: a free port), in a thread.

        Loopback by default; pass ``host="0.0.0.0"`` to listen on every
        interface. The server is closed when the engine (or this object) is. A port
        outside 0-65535 is a ``ValueError``; one that cannot be bound, an ``OSError``
        naming the address.
        """
        try:
            number = operator.index(port)  # an int, or one that says it is (numpy's)
        except TypeError:
            number = -1
        if isinstance(port, bool) or not 0 <= number <= 65535:
            raise ValueError(f"port must be an int from 0 to 65535, not {port!r}")
        port = number
        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:  # name the address: "Address already in use" says not which
            raise OSError(exc.errno, f"cannot serve on {host}:{port}: {exc.strerror}") from exc
        endpoint = MetricsServer(server, thread, host)
        self._servers.append(endpoint)
        return endpoint

    def close(self) -> None:
        """Close every server :meth:`serve` started; leave a registry given to us as it was
        (the next engine's metrics register there again)."""
        while self._servers:
            self._servers.pop().close()
        if self._shared:
            self._unregister_all()

    def _unregister_all(self) -> None:
        while self._registered:
            self.registry.unregister(self._registered.pop())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._servers:  # a server's shutdown waits for its poll (up to 0.5 s): not on the loop
            await anyio.to_thread.run_sync(self.close)
        else:
            self.close()
