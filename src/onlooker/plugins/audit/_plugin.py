"""The audit plugin: hands each event to a writer thread that appends it to the trail.

The observer is a synchronous hand-off (one ``deque.append``) rather than a
bus worker: the bus's async workers share the event loop with the execution,
where the blocking ``write`` and ``fsync`` of a file would stall it. The
writer thread batches whatever accumulated (group commit), serializes,
redacts what needs it (``_events.py``) and appends, and keeps a failed batch
to retry later.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, final

import anyio
import anyio.to_thread

import onlooker
from onlooker import ExecutionEvent, Plugin, PluginContext
from onlooker._interrupts import Interruption, join_thread
from onlooker._shared import DISABLE_VARIABLE as DISABLE_VARIABLE  # re-exported by the package
from onlooker._shared import audit_disabled

from .._stall import Stall
from ._events import MAX_RECORD_CHARS as MAX_RECORD_CHARS  # one event's JSON at most
from ._events import EventEncoder
from ._redact import Redactor
from ._types import FsyncMode
from ._writer import AuditWriteError, TrailWriter, new_session_id, validate_session_id

__all__ = ["AuditStatistics", "AuditTrail", "plugin"]

_MAX_BATCH: Final = 4096
_MAX_PENDING: Final = 16384  # events waiting for the thread before emitters wait for it
_MAX_RETRY: Final = 100_000  # records kept for a retry while the disk refuses
_RETRY_SECONDS: Final = 0.5  # first retry after a failure; doubles up to the maximum
_MAX_RETRY_SECONDS: Final = 30.0
_GATHER_SECONDS: Final = 0.001  # woken from idle, the thread waits this long for more events
_STALL_SECONDS: Final = 1.0  # an emitter waits no longer for a thread that writes nothing
_LOCK_SECONDS: Final = 5.0
"""How long a write waits for the session's lock that another writer holds (a hung hook
process, a stopped one): then it fails and is retried as a refused write is, so a lock held
for ever can neither stop the trail for good nor hang the engine's close (the CLI hook's wait)."""
_logger: Final = logging.getLogger("onlooker.plugins.audit")


@final
@dataclass(frozen=True, slots=True)
class AuditStatistics:
    """A snapshot of an audit trail's counters (``trail.statistics()``)."""

    written: int
    """Records appended to the trail."""
    errors: int
    """Failures: write attempts the disk refused, events that could not be serialized."""
    dropped: int
    """Events given up on (the disk refused for too long, or the trail closed first)."""
    pending: int
    """Events handed over and not yet written (including those waiting for a retry)."""
    rotations: int
    """Segments rotated."""
    reopened: int = 0
    """Times the session's files were found removed (a ``WARNING``, a note in the trail)."""


@final
class AuditTrail:
    """The audit plugin's extension: where the trail is, its counters, ``flush()``.

    Get it with ``engine.extension(audit_plugin)``.
    """

    def __init__(
        self,
        directory: Path,
        session_id: str,
        *,
        max_bytes: int,
        keep: int,
        fsync: FsyncMode,
        redactor: Redactor | None,
        max_value_chars: int,
        enabled: bool = True,
    ) -> None:
        self.directory: Final = directory
        """The directory holding every session's trail."""
        self.session_id: Final = session_id
        self.session_dir: Final = directory / session_id
        """``<directory>/<session_id>``: the segments and ``audit.err``."""
        self.path: Final = self.session_dir / "events.jsonl"
        """The live file."""
        self.enabled: Final = enabled
        """False when ``ONLOOKER_AUDIT_DISABLE=1``: nothing is written."""
        self._writer = TrailWriter(
            directory,
            session_id,
            max_bytes=max_bytes,
            keep=keep,
            fsync=fsync,
            redactor=redactor,
            max_value_chars=max_value_chars,
            lock_timeout=_LOCK_SECONDS,
        )
        self._encoder = EventEncoder(self._writer.redactor, max_value_chars)
        self._pending: deque[ExecutionEvent] = deque()
        self._cond = threading.Condition()
        self._idle = False
        self._closing = False
        self._stall = Stall()  # the thread wrote nothing for a while: emitters do not wait
        self._reopened_seen = 0  # the writer's reopened count already logged
        self._taken = 0  # events taken by the thread
        self._settled = 0  # taken events written, kept for retry, or given up on
        self._retry: list[bytes] = []
        self._retry_delay = _RETRY_SECONDS
        self._dropped = 0
        self._dropped_unreported = 0  # dropped by emitters while the thread hung
        self._failures = 0  # serialization failures (write failures: the writer counts)
        self._thread: threading.Thread | None = None

    # -- public ------------------------------------------------------------------------

    @property
    def error_path(self) -> Path:
        """``audit.err`` beside the trail: one JSON line per failure."""
        return Path(self._writer.error_path)

    def statistics(self) -> AuditStatistics:
        """The trail's counters."""
        writer = self._writer.statistics()
        return AuditStatistics(
            written=writer.written,
            errors=writer.errors + self._failures,
            dropped=self._dropped,
            pending=len(self._pending) + (self._taken - self._settled) + len(self._retry),
            rotations=writer.rotations,
            reopened=writer.reopened,
        )

    async def flush(self) -> None:
        """Wait until every event handed over so far was written (or failed and was counted)."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        with self._cond:
            target = self._taken + len(self._pending)
            if self._settled >= target:
                return
            self._cond.notify_all()
        await anyio.to_thread.run_sync(self._wait_settled, target, abandon_on_cancel=True)

    def handle(self, event: ExecutionEvent) -> None:
        """Hand ``event`` to the writer thread (the observer; never blocks unless far behind)."""
        pending = self._pending
        pending.append(event)
        if self._idle:
            with self._cond:
                self._idle = False
                self._cond.notify_all()
        elif self._stall.stalled:
            if (
                not self._stall.resumes(self._settled, len(pending) < _MAX_PENDING // 2)
                and len(pending) >= _MAX_RETRY + _MAX_PENDING
            ):
                self._drop_oldest()
        elif len(pending) >= _MAX_PENDING:
            self._wait_for_room()

    async def __aenter__(self) -> AuditTrail:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"onlooker audit {self.session_id}", daemon=True
            )
            self._thread.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Write what is pending, stop the writer thread and close the files."""
        thread = self._thread
        if thread is not None:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            interruption = Interruption(
                "the audit writer is still waited for"
            )  # a Ctrl-C meanwhile: raised once the thread is done
            await join_thread(thread, None, interruption)
            self._writer.close()
            interruption.raise_caught()
            return
        self._writer.close()

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                self._idle = True
                waited = False
                while not self._pending and not self._closing:
                    waited = True
                    if not cond.wait(self._retry_delay if self._retry else None) and self._retry:
                        break  # time to retry
                self._idle = False
                if waited and len(self._pending) < _MAX_BATCH // 16 and not self._closing:
                    # Group commit: let a batch gather. Meanwhile handle() is a bare append
                    # (no notify: the thread is not idle); flush() and aclose() cut it short.
                    cond.wait(_GATHER_SECONDS)
                count = min(len(self._pending), _MAX_BATCH)
                batch = [self._pending.popleft() for _ in range(count)]
                self._taken += count
                closing = self._closing and not self._pending
            try:
                self._write(self._encoder.encode(batch, self._unrecordable))
            except Exception as exc:  # a bug must not kill the thread
                _logger.exception("audit writer failed")
                self._writer.report(f"audit writer failed: {exc!r}", error=type(exc).__name__)
            with cond:
                self._settled += count
                unreported, self._dropped_unreported = self._dropped_unreported, 0
                cond.notify_all()
            if unreported:
                self._writer.report(
                    f"dropped the {unreported} oldest unwritten event(s) while the trail took "
                    "no writes",
                    records=unreported,
                )
            if closing:
                if self._retry:
                    self._give_up(f"{len(self._retry)} record(s) not written: the trail closed")
                return

    def _unrecordable(self, event: ExecutionEvent, exc: Exception) -> None:
        self._failures += 1
        self._writer.report(
            f"event {event.event_id} ({event.kind}) could not be recorded: {exc!r}",
            error=type(exc).__name__,
        )

    def _write(self, texts: list[bytes]) -> None:
        if self._retry:
            texts = self._retry + texts
            self._retry = []
        if not texts:
            return
        writer = self._writer
        failing = writer.failing
        try:
            writer.write_encoded(texts)
        except AuditWriteError as exc:
            self._retry_delay = min(self._retry_delay * 2, _MAX_RETRY_SECONDS)
            self._retry = texts[exc.written :]
            if not failing:  # once per outage: the sidecar may be on the same full disk
                _logger.error(
                    "audit: cannot write the trail %s (%s); %d record(s) kept in memory and "
                    "retried (at most %d)",
                    writer.path,
                    exc.__cause__ or exc,
                    len(self._retry),
                    _MAX_RETRY,
                )
            excess = len(self._retry) - _MAX_RETRY
            if excess > 0:
                del self._retry[:excess]
                self._dropped += excess
                writer.lost(excess)
                _logger.critical(
                    "audit: dropped the %d oldest unwritten record(s) of %s: the trail cannot "
                    "be written",
                    excess,
                    writer.path,
                )
                writer.report(
                    f"dropped the {excess} oldest unwritten record(s): the trail cannot be written"
                )
        else:
            self._retry_delay = _RETRY_SECONDS
            if failing:
                _logger.warning(
                    "audit: the trail %s takes writes again: a gap record, then %d record(s)",
                    writer.path,
                    len(texts),
                )
        reopened = writer.statistics().reopened
        if reopened != self._reopened_seen:
            self._reopened_seen = reopened
            _logger.warning(
                "audit: the session's files were removed from %s; the trail goes on in new "
                "files, chained to the last record written (see %s)",
                writer.session_dir,
                writer.error_path,
            )

    def _give_up(self, message: str) -> None:
        _logger.critical("audit: %s to %s", message, self._writer.path)
        self._dropped += len(self._retry)
        self._writer.report(message, records=len(self._retry))
        self._retry = []

    def _wait_settled(self, target: int) -> None:
        with self._cond:
            while self._settled < target and self._thread is not None and self._thread.is_alive():
                self._cond.wait(0.5)

    def _nudge(self) -> None:
        """Wake the thread, then wait a little for its progress (the caller holds the lock)."""
        self._idle = False
        self._cond.notify_all()
        self._cond.wait(0.1)

    def _drop_oldest(self) -> None:
        """A thread that writes nothing (a disk that hangs) keeps at most the records a disk
        that refuses them keeps (100,000): past that, the oldest waiting events are dropped,
        counted and reported, as records the disk refused too long are."""
        with self._cond:
            excess = len(self._pending) - _MAX_RETRY
            for _ in range(excess):
                self._pending.popleft()
            self._dropped += excess
            self._dropped_unreported += excess  # audit.err is on that disk: the thread says it
        _logger.critical(
            "audit: dropped the %d oldest unwritten event(s) of %s: the trail takes no writes "
            "(a disk that hangs?)",
            excess,
            self._writer.path,
        )

    def _wait_for_room(self) -> None:
        """Backpressure: the thread is far behind; wait until it has caught up halfway, and
        only while it writes (see :mod:`onlooker.plugins._stall`)."""
        with self._cond:
            stalled = self._stall.wait(
                lambda: (
                    len(self._pending) >= _MAX_PENDING // 2
                    and not self._closing
                    and self._thread is not None
                    and self._thread.is_alive()
                ),
                self._nudge,
                lambda: self._settled,
                _STALL_SECONDS,
            )
        if stalled:  # a hung disk: the program goes on, the events wait
            _logger.warning(
                "audit: the writer has written nothing to %s for %g s with %d events waiting; "
                "they wait in memory and the program goes on",
                self._writer.path,
                _STALL_SECONDS,
                len(self._pending),
            )


def _disabled() -> bool:
    """The switch the coding-agent hook reads too: ``1``, ``true``, ``yes`` or ``on``."""
    return audit_disabled()


def plugin(
    directory: str | os.PathLike[str] = ".onlooker/audit",
    session_id: str | None = None,
    max_bytes: int = 4 * 1024 * 1024,
    keep: int = 10,
    fsync: FsyncMode = "batch",
    redactor: Redactor | None = None,
    max_value_chars: int = 2000,
) -> Plugin[AuditTrail]:
    """The audit trail plugin: every event, redacted, hash-chained, in a JSONL file.

    Writes ``<directory>/<session_id>/events.jsonl`` (a new time-sortable
    session id when none is given), rotating it into ``events.1.jsonl`` ...
    ``events.<keep>.jsonl`` past ``max_bytes``. ``fsync`` is ``"never"``,
    ``"batch"`` (one per batch: group commit) or ``"always"`` (per record).
    ``redactor`` replaces the default :class:`Redactor`; strings longer than
    ``max_value_chars`` are truncated. A session id that is not a safe
    directory name raises :class:`onlooker.AuditError` here. With
    ``ONLOOKER_AUDIT_DISABLE=1`` in the environment the plugin writes
    nothing (``trail.enabled`` is false).
    """
    session = validate_session_id(session_id) if session_id is not None else new_session_id()
    root = Path(directory)
    enabled = not _disabled()
    # Validate the other settings now, not when the engine starts.
    TrailWriter(
        root,
        session,
        max_bytes=max_bytes,
        keep=keep,
        fsync=fsync,
        redactor=redactor,
        max_value_chars=max_value_chars,
    )

    def extension(_ctx: PluginContext) -> AuditTrail:
        return AuditTrail(
            root,
            session,
            max_bytes=max_bytes,
            keep=keep,
            fsync=fsync,
            redactor=redactor,
            max_value_chars=max_value_chars,
            enabled=enabled,
        )

    if not enabled:
        return onlooker.define_plugin(id="audit", extension=extension)
    return onlooker.define_plugin(id="audit", extension=extension, observer=lambda trail: trail)
