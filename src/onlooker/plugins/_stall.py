"""Backpressure that stops waiting for a writer thread that has stopped moving.

The history and audit plugins hand their events to a thread of their own.
When it falls far behind, the emitting task waits for it, and with it the
event loop, so it waits only while the thread makes progress. A thread that
makes none for a while (a locked database, a hung disk) is *stalled*: the
events wait in memory and the program goes on, until the thread moves again
or has caught up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import final

__all__ = ["Stall"]


@final
class Stall:
    """Whether a writer thread is stalled, and how far it had got when it stalled."""

    __slots__ = ("mark", "stalled")

    def __init__(self) -> None:
        self.stalled = False
        self.mark = 0

    def wait(
        self,
        behind: Callable[[], bool],
        wait_a_little: Callable[[], None],
        progress: Callable[[], int],
        seconds: float,
    ) -> bool:
        """Wait while ``behind()``, ``wait_a_little()`` at a time, as long as ``progress()``
        moves; whether the thread stalled (no progress for ``seconds``). The caller holds
        the lock its waits release."""
        mark, since = progress(), time.monotonic()
        while behind():
            wait_a_little()
            now = progress()
            if now != mark:
                mark, since = now, time.monotonic()
            elif time.monotonic() - since >= seconds:
                self.stalled, self.mark = True, mark
                return True
        return False

    def resumes(self, progress: int, caught_up: bool) -> bool:
        """Whether a stalled thread moved (or caught up): then emitters wait for it again."""
        if progress != self.mark or caught_up:
            self.stalled = False
            return True
        return False
