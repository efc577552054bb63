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

import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Final, final

import anyio
import anyio.to_thread

__all__ = ["Interruption", "join_thread"]

_logger: Final = logging.getLogger("onlooker")


@final
class Interruption:
    """The interruption one step of a close took, to raise once the step is done.

    ``goes_on`` says, in the warning logged when one is taken, what the close still does.
    """

    __slots__ = ("caught", "goes_on", "refused")

    def __init__(self, goes_on: str) -> None:
        self.goes_on = goes_on
        self.caught: BaseException | None = None
        self.refused: BaseException | None = None
        """A second interruption, which ended the step."""

    async def through(
        self, step: Callable[[], Awaitable[object]], scope: anyio.CancelScope | None = None
    ) -> bool:
        """Await ``step()`` again until it completes, going on through one interruption;
        the cancellation of ``scope`` (the step's own deadline) and any other error end it.

        Returns whether the step completed. Once an interruption is taken, the
        deadline ends the step quietly (``False``): the interruption raised
        afterwards would otherwise carry that cancellation as its context, and
        anyio's scopes around the close, reading the context, take it for their
        own cancellation and swallow it (the Ctrl-C lost).
        """
        while True:
            try:
                await step()
                return True
            except BaseException as exc:
                if scope is not None and scope.cancel_called:
                    if self.caught is not None and isinstance(exc, anyio.get_cancelled_exc_class()):
                        return False
                    raise
                if not self.take(exc):
                    if self.caught is not None and _is_interruption(exc):
                        self.refused = exc
                    raise
                _logger.warning(
                    "closing the engine was interrupted (%s); %s", type(exc).__name__, self.goes_on
                )

    def take(self, exc: BaseException) -> bool:
        """Whether ``exc`` is an interruption from outside the close, and the first: then it
        is kept and the step goes on.

        An asyncio task's cancellation request stays counted (``cancelling()``): the
        cancel scopes and ``asyncio.timeout`` blocks around the close read that count to
        tell it from their own cancellation, and let it through when it is raised.
        """
        if self.caught is not None or not _is_interruption(exc):
            return False
        self.caught = exc
        return True

    def raise_caught(self) -> None:
        """Raise the interruption taken, if any."""
        if self.caught is not None:
            raise self.caught


def _is_interruption(exc: BaseException) -> bool:
    """A ``KeyboardInterrupt``, or a native cancellation of the current asyncio task."""
    asyncio = sys.modules.get("asyncio")  # not imported: not running on asyncio
    if asyncio is not None and isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0
    return isinstance(exc, KeyboardInterrupt)


async def join_thread(
    thread: threading.Thread, grace: float | None, interruption: Interruption
) -> None:
    """Wait for ``thread`` to end, for at most ``grace`` seconds (``None``: however long),
    going on through one interruption (``interruption`` keeps it, for the caller to raise)."""
    deadline = None if grace is None else anyio.current_time() + grace

    async def join() -> None:
        left = None if deadline is None else max(0.0, deadline - anyio.current_time())
        await anyio.to_thread.run_sync(thread.join, left)

    await interruption.through(join)
