"""One timer for every paused question of an engine: those nobody answers in time expire.

A cancel scope and a timer per paused execution cost about a kilobyte each.
Pauses that share a ``pause_timeout`` reach their deadlines in the order
they began, so each timeout keeps its waiters in an ordered table, and one
task, sleeping until the earliest head, serves them all: a pause costs one
entry in a table.
"""

from __future__ import annotations

import math
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
    """The deadlines of an engine's paused questions, and the task that keeps them.

    :meth:`start` runs the task in the engine's task group (in the engine's
    context, not a run's); after :meth:`stop` it ends once no question waits,
    so a question shielded from the close still expires in time.
    """

    __slots__ = ("_stopping", "_waiting", "_wake")

    def __init__(self) -> None:
        self._waiting: dict[float, OrderedDict[Waiter, float]] = {}
        """By timeout: waiters in the order they began, with their deadlines."""
        self._wake: anyio.Event | None = None
        self._stopping = False

    def start(self, task_group: TaskGroup) -> None:
        task_group.start_soon(self._keep, name="onlooker pause deadlines")

    def add(self, waiter: Waiter, timeout: float) -> None:
        """Expire ``waiter`` ``timeout`` seconds from now unless :meth:`discard` comes first."""
        queue = self._waiting.get(timeout)
        if queue is None:
            queue = self._waiting[timeout] = OrderedDict()
        queue[waiter] = anyio.current_time() + timeout
        if len(queue) == 1:  # a new head: it may come before what the task sleeps until
            self._wake_up()

    def discard(self, waiter: Waiter, timeout: float) -> None:
        """``waiter`` was answered (or gave up): it no longer has a deadline."""
        queue = self._waiting.get(timeout)
        if queue is not None and queue.pop(waiter, None) is not None and not queue:
            del self._waiting[timeout]
            if self._stopping and not self._waiting:
                self._wake_up()

    def stop(self) -> None:
        """The engine is closing: end the task once no question waits."""
        self._stopping = True
        self._wake_up()

    def _wake_up(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()

    async def _keep(self) -> None:
        while not (self._stopping and not self._waiting):
            wake = self._wake = anyio.Event()
            heads = [next(iter(queue.values())) for queue in self._waiting.values()]
            with anyio.move_on_at(min(heads, default=math.inf)):
                await wake.wait()
            self._expire_due()

    def _expire_due(self) -> None:
        now = anyio.current_time()
        for timeout, queue in list(self._waiting.items()):
            while queue:
                waiter, deadline = next(iter(queue.items()))
                if deadline > now:
                    break
                del queue[waiter]
                waiter.expire()
            if not queue:
                del self._waiting[timeout]
