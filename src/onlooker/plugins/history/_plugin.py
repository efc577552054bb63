"""``history.plugin()``: the store as an engine plugin, fed by a batching async observer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from os import PathLike
from typing import Final

import anyio

from onlooker import Plugin, PluginContext, define_plugin
from onlooker.plugins.audit import Redactor

from ._redaction import DEFAULT_MAX_VALUE_CHARS, Scrubber
from ._store import HistoryStore, new_store
from ._writer import DEFAULT_RETRY_DELAYS, BatchWriter

__all__ = ["plugin"]

PLUGIN_ID = "history"

DEFAULT_BATCH: Final = {"sqlite": 500, "postgresql": 2000}
"""Events per batch by backend: PostgreSQL pays a few round trips per batch (measured
in ``bench/history.py``); on SQLite bigger batches only delay the writer's start."""


def plugin(
    url: str | None = None,
    *,
    batch_size: int | None = None,
    flush_interval: float = 0.05,
    spill_path: str | PathLike[str] | None = None,
    retry_delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
    spill_fallback: str | PathLike[str] | None = None,
    redactor: Redactor | None = None,
    max_value_chars: int = DEFAULT_MAX_VALUE_CHARS,
) -> Plugin[HistoryStore]:
    """Record every execution in a history database.

    ``url`` is as for :func:`open` (default: ``.onlooker/history.db`` under
    the current directory). Events are written off the hot path in batches
    of up to ``batch_size`` events (default: 500 on SQLite, 2,000 on
    PostgreSQL, where each batch pays round trips to the server), or
    whatever arrived within ``flush_interval`` seconds, one transaction per
    batch.

    Every event is redacted first by the audit trail's policy (``redactor``:
    an :class:`onlooker.plugins.audit.Redactor`, default its default policy)
    and strings longer than ``max_value_chars`` are cut with the trail's
    marker, so neither the database nor a spill or dead-letter file holds a
    secret in clear.

    A failed batch is retried after each of ``retry_delays`` seconds; if it
    still fails, it goes to the spill file (``spill_path``; default beside
    the SQLite file, or under ``.onlooker/``), else to ``spill_fallback``
    (default under the temp directory), else to a bounded buffer in memory,
    and is written as soon as the database takes writes again, or on the
    next start. A poison event (one the database can never take) goes to the
    dead-letter file beside the spill file; the rest of its batch is
    written. The extension is the :class:`HistoryStore`; the engine fails to
    start with a ``HistoryError`` (naming the URL, password hidden) when the
    database cannot be reached.
    """
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
    if not flush_interval > 0:
        raise ValueError(f"flush_interval must be positive, not {flush_interval!r}")
    delays = tuple(float(delay) for delay in retry_delays)
    if any(delay < 0 for delay in delays):
        raise ValueError(f"retry_delays must not be negative: {retry_delays!r}")
    Scrubber(redactor, max_value_chars)  # bad settings fail here, not when the engine starts
    settings = _Settings(
        url=url,
        batch_size=batch_size,
        flush_interval=flush_interval,
        spill_path=spill_path,
        retry_delays=delays,
        spill_fallback=spill_fallback,
        redactor=redactor,
        max_value_chars=max_value_chars,
    )
    return define_plugin(id=PLUGIN_ID, extension=partial(_running, settings), observer=_observer)


@dataclass(frozen=True, slots=True)
class _Settings:
    """What :func:`plugin` was given, checked."""

    url: str | None
    batch_size: int | None
    flush_interval: float
    spill_path: str | PathLike[str] | None
    retry_delays: tuple[float, ...]
    spill_fallback: str | PathLike[str] | None
    redactor: Redactor | None
    max_value_chars: int


@asynccontextmanager
async def _running(settings: _Settings, ctx: PluginContext) -> AsyncIterator[HistoryStore]:
    """The plugin's extension: the store, open, with its writer running, for the engine's life."""
    store = new_store(
        settings.url,
        settings.spill_path,
        spill_fallback=settings.spill_fallback,
        redactor=settings.redactor,
        max_value_chars=settings.max_value_chars,
    )
    await store._start()
    store._writer = writer = BatchWriter(
        store._db,
        store._spill,
        store._scrubber,
        ctx.logger,
        batch_size=(
            settings.batch_size
            if settings.batch_size is not None
            else DEFAULT_BATCH[store._db.backend]  # resolve_url refuses other backends
        ),
        flush_interval=settings.flush_interval,
        retry_delays=settings.retry_delays,
    )
    writer.start()
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await writer.aclose(ctx.shutdown_timeout)
            if not writer.left_behind:  # else the writer closes the database when it is done
                await store._aclose()


def _observer(store: HistoryStore) -> BatchWriter:
    """The plugin's observer: the store's writer, whose ``handle`` takes each event."""
    assert store._writer is not None  # set by _running before the engine subscribes it
    return store._writer
