"""One timer for every paused question of an engine: those nobody answers in time expire.

A cancel scope and a timer per paused execution cost about a kilobyte each.
Every pause of an engine waits for the same ``pause_timeout``, so deadlines
arrive in the order the pauses began: one task, sleeping until the earliest,
serves them all, and a pause costs one entry in an ordered table.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol, final

import anyio
from anyio.abc import TaskGroup

__all__ = ["PauseDeadlines", "Waiter"]


class Waiter(Protocol):
    """A paused question, as the timer sees it."""

    def expire(self) -> None:
        """Wake the question with no answer: its pause has timed out."""


@final
class PauseDeadlines:
    """The deadlines of paused questions that share one ``timeout``, and the task that keeps them.

    The task starts at the first pause, in the engine's task group, and ends
    with :meth:`stop` (the engine's close) or the group's cancellation.
    """

    __slots__ = ("_scope", "_task_group", "_waiting", "_wake", "timeout")

    def __init__(self, timeout: float, task_group: TaskGroup) -> None:
        self.timeout = timeout
        self._task_group = task_group
        self._waiting: OrderedDict[Waiter, float] = OrderedDict()
        self._wake: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None

    def add(self, waiter: Waiter) -> None:
        """Expire ``waiter`` ``timeout`` seconds from now unless :meth:`discard` comes first."""
        self._waiting[waiter] = anyio.current_time() + self.timeout
        if self._scope is None:
            self._scope = anyio.CancelScope()
            self._task_group.start_soon(self._keep, name="onlooker pause deadlines")
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()

    def discard(self, waiter: Waiter) -> None:
        """``waiter`` was answered (or gave up): it no longer has a deadline."""
        self._waiting.pop(waiter, None)

    def stop(self) -> None:
        """End the task (the engine is closing); pauses still waiting no longer expire."""
        if self._scope is not None:
            self._scope.cancel()

    async def _keep(self) -> None:
        assert self._scope is not None
        with self._scope:
            while True:
                if not self._waiting:
                    self._wake = anyio.Event()
                    await self._wake.wait()
                    continue
                waiter, deadline = next(iter(self._waiting.items()))
                if anyio.current_time() < deadline:
                    # If the head is answered meanwhile, this wakes early: no harm.
                    await anyio.sleep_until(deadline)
                elif self._waiting.pop(waiter, None) is not None:
                    waiter.expire()
