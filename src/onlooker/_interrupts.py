"""A close that one interruption (Ctrl-C, a native asyncio cancellation) does not cut short.

anyio's shielded scopes keep out the cancellation of anyio's own scopes, but
not a ``Task.cancel()`` on asyncio (``asyncio.run``'s Ctrl-C,
``asyncio.timeout``) nor trio's ``KeyboardInterrupt``. A step of the engine's
close that waits (the observers' flush, a store's writer thread) takes the
first such interruption, goes on to its own bound (``shutdown_timeout``),
then raises it: the program is interrupted all the same, and what healthy
observers and stores had accepted is not lost. A second interruption is not
taken: it ends the step at once.
"""

from __future__ import annotations

import sys
import threading
from typing import final

import anyio
import anyio.to_thread

__all__ = ["Interruption", "join_thread"]


@final
class Interruption:
    """The interruption one step of a close took, to raise once the step is done."""

    __slots__ = ("caught",)

    def __init__(self) -> None:
        self.caught: BaseException | None = None

    def take(self, exc: BaseException) -> bool:
        """Whether ``exc`` is an interruption from outside the close, and the first: then it
        is kept and the step goes on.

        An asyncio task's cancellation request stays counted (``cancelling()``): the
        cancel scopes and ``asyncio.timeout`` blocks around the close read that count to
        tell it from their own cancellation, and let it through when it is raised.
        """
        if self.caught is not None:
            return False
        asyncio = sys.modules.get("asyncio")  # not imported: not running on asyncio
        if asyncio is not None and isinstance(exc, asyncio.CancelledError):
            task = asyncio.current_task()
            if task is None or not task.cancelling():
                return False
        elif not isinstance(exc, KeyboardInterrupt):
            return False
        self.caught = exc
        return True

    def raise_caught(self) -> None:
        """Raise the interruption taken, if any."""
        if self.caught is not None:
            raise self.caught


async def join_thread(
    thread: threading.Thread, grace: float | None, interruption: Interruption
) -> None:
    """Wait for ``thread`` to end, for at most ``grace`` seconds (``None``: however long),
    going on through one interruption (``interruption`` keeps it, for the caller to raise)."""
    deadline = None if grace is None else anyio.current_time() + grace
    while thread.is_alive():
        left = None if deadline is None else max(0.0, deadline - anyio.current_time())
        try:
            await anyio.to_thread.run_sync(thread.join, left)
        except BaseException as exc:
            if not interruption.take(exc):
                raise
            continue
        return
