"""How ``onlooker run`` stops on Ctrl-C and SIGTERM (``timeout``, ``docker stop``, systemd, CI).

The first signal raises :class:`Stopped`, a ``KeyboardInterrupt``, where the
main thread is (a synchronous tool's call too), and cancels the run from the
event loop, so that a program catching ``KeyboardInterrupt`` cannot keep it
going: the run is recorded ``cancelled`` and the process exits 130 or 143.
A second signal must not cut the close short, which writes what the record
still holds (an interrupted close could hang, and lose it): it is told so.
``timeout`` sends its SIGTERM twice (to the process and to its group), an
impatient user presses Ctrl-C twice. A third one exits at once, record or not.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["Stop", "Stopped", "process_exits_after", "stopping"]

SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

process_exits_after = False
"""Whether the process ends when the command does (the ``onlooker`` script, ``python -m``);
not when the typer app is called in another program's process (a test's ``CliRunner``)."""


class Stopped(KeyboardInterrupt):
    """Ctrl-C or SIGTERM; ``signum`` gives the exit code (128 + it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)  # what the record says: "SIGINT"
        self.signum = signum


class Stop:
    """The signal handler; :meth:`arm` gives it the run's cancellation (thread-safe)."""

    def __init__(self) -> None:
        self.received = 0
        self.signum = signal.SIGINT.value
        self._cancel: Callable[[], object] | None = None

    def arm(self, cancel: Callable[[], object] | None) -> None:
        self._cancel = cancel

    def __call__(self, signum: int, frame: object) -> None:
        self.received += 1
        if self.received == 1:
            self.signum = signum
            if self._cancel is not None:
                self._cancel()
            raise Stopped(signum)
        if self.received == 2:
            os.write(2, b"onlooker: stopping; writing the record (a third signal stops at once)\n")
            return
        os.write(2, b"onlooker: stopped at once; the record may lack the run's last events\n")
        os._exit(128 + signum)


@contextmanager
def stopping() -> Iterator[Stop]:
    """:class:`Stop` handles both signals inside the block; the previous handlers after it.

    After a signal stopped the run, a process that exits next ignores a
    late one instead of Python's own handling (which would raise, or end the
    process with the signal's status, mid-exit); another program calling the
    app gets its handlers back.
    """
    stop = Stop()
    previous = {number: signal.signal(number, stop) for number in SIGNALS}
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            late = stop.received and process_exits_after
            signal.signal(number, signal.SIG_IGN if late else handler)
