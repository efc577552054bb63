"""Installing an engine's plugins: their extensions, observers and hooks, in order."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

from ._bus import EventBus
from ._errors import OnlookerError, PluginError
from ._hooks import HookMatcher
from ._plugin import Plugin, PluginContext
from ._tools import ToolRegistry

__all__ = ["Teardowns", "install_plugins"]

logger = logging.getLogger("onlooker")


async def install_plugins(
    plugins: Sequence[Plugin[Any]],
    extensions: dict[str, Any],
    *,
    tools: ToolRegistry,
    bus: EventBus,
    stack: Teardowns,
    shutdown_timeout: float,
) -> list[HookMatcher]:
    """Start each plugin in order; return the hooks they add.

    Each plugin's extension goes into ``extensions`` (an async context
    manager is entered on ``stack``, which closes them in reverse order)
    and its observer is subscribed to ``bus``. A plugin that fails to start
    is a ``PluginError`` naming it; nothing after it starts.
    """
    _check_ids(plugins)
    hooks: list[HookMatcher] = []
    for plugin in plugins:
        try:
            ext = await _extension(plugin, tools, bus, stack, shutdown_timeout)
            extensions[plugin.id] = ext
            if plugin.observer is not None:
                bus.subscribe(
                    plugin.observer(ext),
                    name=plugin.id,
                    overflow=plugin.overflow,
                    queue_size=plugin.queue_size,
                    stall_timeout=plugin.stall_timeout,
                )
            if plugin.hooks is not None:
                added = list(plugin.hooks(ext))
                for matcher in added:
                    if not isinstance(matcher, HookMatcher):
                        raise TypeError(
                            f"hooks(ext) must give HookMatcher instances, not "
                            f"{type(matcher).__name__}"
                        )
                hooks.extend(added)
        except OnlookerError:
            raise  # already a clear, typed error (HistoryError naming the URL, ...)
        except Exception as exc:
            raise PluginError(
                f"plugin {plugin.id!r} failed to start: {exc}", plugin_id=plugin.id
            ) from exc
    return hooks


def _check_ids(plugins: Sequence[Plugin[Any]]) -> None:
    seen: set[str] = set()
    for plugin in plugins:
        if not isinstance(plugin, Plugin):
            raise PluginError(f"not a plugin (use define_plugin): {plugin!r}")
        if plugin.id in seen:
            raise PluginError(f"two plugins have the id {plugin.id!r}", plugin_id=plugin.id)
        seen.add(plugin.id)


async def _extension(
    plugin: Plugin[Any],
    tools: ToolRegistry,
    bus: EventBus,
    stack: Teardowns,
    shutdown_timeout: float,
) -> Any:
    if plugin.extension is None:
        return None
    context = PluginContext(
        plugin_id=plugin.id,
        logger=logging.getLogger(f"onlooker.plugins.{plugin.id}"),
        tools=tools,
        bus=bus,
        shutdown_timeout=shutdown_timeout,
    )
    ext = plugin.extension(context)
    if hasattr(ext, "__aenter__") and hasattr(ext, "__aexit__"):  # awaitable too, maybe
        return await stack.enter(_Named(plugin.id, ext))
    if inspect.isawaitable(ext):  # an async def extension: its coroutine would never run
        if inspect.iscoroutine(ext):
            ext.close()  # never awaited: no "was never awaited" warning on top
        raise TypeError(
            "its extension returned an awaitable: give an async context manager "
            "(contextlib.asynccontextmanager) for setup and teardown, or a plain function"
        )
    return ext


class _Named:
    """A plugin's async context manager, whose failure to close names the plugin."""

    def __init__(self, plugin_id: str, manager: Any) -> None:
        self._id = plugin_id
        self._manager = manager

    async def __aenter__(self) -> Any:
        return await self._manager.__aenter__()

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self._manager.__aexit__(*exc_info)
        except Exception as exc:
            if exc is exc_info[1] or isinstance(exc, OnlookerError):
                raise
            raise PluginError(
                f"plugin {self._id!r} failed to close: {exc}", plugin_id=self._id
            ) from exc


class Teardowns:
    """The plugins' async context managers, closed in reverse order, each as if it were alone.

    Unlike an ``AsyncExitStack``, one plugin's failing teardown is not thrown
    into the others': an extension written ``yield store; await store.close()``
    (no ``try``/``finally``) still closes after another plugin's close failed.
    The first failure is raised once all are closed; later ones are logged.
    """

    def __init__(self) -> None:
        self._entered: list[_Named] = []

    async def enter(self, manager: _Named) -> Any:
        value = await manager.__aenter__()
        self._entered.append(manager)
        return value

    async def aclose(self) -> None:
        first: BaseException | None = None
        while self._entered:
            manager = self._entered.pop()
            try:
                await manager.__aexit__(None, None, None)
            except BaseException as exc:
                if first is None:
                    first = exc
                elif isinstance(exc, Exception):
                    logger.error("closing the engine: %s", exc, exc_info=exc)
                elif isinstance(first, Exception):  # a cancellation or Ctrl-C wins over it
                    logger.error("closing the engine: %s", first, exc_info=first)
                    first = exc
                else:
                    logger.error("closing the engine: %r", exc, exc_info=exc)
        if first is not None:
            raise first
