"""Plugins: an extension (the plugin's own state), an observer, and hooks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, final, overload

from ._bus import (
    DEFAULT_QUEUE_SIZE,
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_STALL_TIMEOUT,
    EventBus,
    Overflow,
    check_queue_size,
    check_timeout,
)
from ._hooks import HookMatcher
from ._observer import ObserverLike
from ._tools import ToolRegistry

__all__ = ["Plugin", "PluginContext", "define_plugin"]

Ext = TypeVar("Ext")


@final
@dataclass(frozen=True, slots=True)
class PluginContext:
    """What a plugin's ``extension`` factory is given."""

    plugin_id: str
    """The plugin's ``id`` (as given to :func:`define_plugin`; also :attr:`id`)."""
    logger: logging.Logger
    """``onlooker.plugins.<id>``."""
    tools: ToolRegistry
    """The engine's tools: name, description, ``mutating``, ``reads`` / ``writes`` / ``edits``."""
    bus: EventBus
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    """The engine's ``shutdown_timeout``: a teardown that can wait on I/O (a store's drain)
    bounds its wait by it, so that a hung disk or server cannot hold the engine's close."""

    @property
    def id(self) -> str:
        """The plugin's ``id``, spelled as :func:`define_plugin` and :class:`Plugin` spell it."""
        return self.plugin_id


@final
@dataclass(frozen=True, slots=True)
class Plugin(Generic[Ext]):
    """A plugin made by :func:`define_plugin`; pass it to ``ExecutionEngine(plugins=[...])``."""

    id: str
    extension: Callable[[PluginContext], Ext | AbstractAsyncContextManager[Ext]] | None = None
    observer: Callable[[Ext], ObserverLike] | None = None
    hooks: Callable[[Ext], Sequence[HookMatcher]] | None = None
    overflow: Overflow = "block"
    queue_size: int = DEFAULT_QUEUE_SIZE
    stall_timeout: float = DEFAULT_STALL_TIMEOUT


@overload
def define_plugin(
    *,
    id: str,
    extension: Callable[[PluginContext], AbstractAsyncContextManager[Ext]],
    observer: Callable[[Ext], ObserverLike] | None = None,
    hooks: Callable[[Ext], Sequence[HookMatcher]] | None = None,
    overflow: Overflow = "block",
    queue_size: int = DEFAULT_QUEUE_SIZE,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
) -> Plugin[Ext]: ...


@overload
def define_plugin(
    *,
    id: str,
    extension: Callable[[PluginContext], Ext],
    observer: Callable[[Ext], ObserverLike] | None = None,
    hooks: Callable[[Ext], Sequence[HookMatcher]] | None = None,
    overflow: Overflow = "block",
    queue_size: int = DEFAULT_QUEUE_SIZE,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
) -> Plugin[Ext]: ...


@overload
def define_plugin(
    *,
    id: str,
    extension: None = None,
    observer: Callable[[None], ObserverLike] | None = None,
    hooks: Callable[[None], Sequence[HookMatcher]] | None = None,
    overflow: Overflow = "block",
    queue_size: int = DEFAULT_QUEUE_SIZE,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
) -> Plugin[None]: ...


def define_plugin(
    *,
    id: str,
    extension: Callable[[PluginContext], Any] | None = None,
    observer: Callable[[Any], ObserverLike] | None = None,
    hooks: Callable[[Any], Sequence[HookMatcher]] | None = None,
    overflow: Overflow = "block",
    queue_size: int = DEFAULT_QUEUE_SIZE,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
) -> Plugin[Any]:
    """Define a plugin.

    ``extension(ctx)`` builds the plugin's state; if it returns an async
    context manager, the engine enters it on start and exits it (in reverse
    plugin order) on close, and the extension is what ``__aenter__`` returned.
    ``observer(ext)`` is subscribed to the bus, isolated and logged under
    ``id``; ``overflow``, ``queue_size`` and ``stall_timeout`` apply when it
    is asynchronous (see ``EventBus.subscribe``).
    ``hooks(ext)`` adds tool hooks after the engine's own.
    """
    if not isinstance(id, str):
        raise TypeError(f"a plugin's id must be a str, not {type(id).__name__}")
    if not id:
        raise ValueError("a plugin needs a non-empty id")
    if overflow not in ("block", "drop"):
        raise ValueError(f"overflow must be 'block' or 'drop', not {overflow!r}")
    return Plugin(
        id=id,
        extension=extension,
        observer=observer,
        hooks=hooks,
        overflow=overflow,
        queue_size=check_queue_size(queue_size),
        stall_timeout=check_timeout("stall_timeout", stall_timeout),
    )
