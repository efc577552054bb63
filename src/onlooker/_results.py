"""Values at the edge of an execution: results, pauses, and answers to questions."""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import CodeType
from typing import Any, Final, Generic, Literal, TypeAlias, TypeVar, final
from weakref import WeakSet

from anyio.lowlevel import checkpoint_if_cancelled
from pydantic import JsonValue

from ._errors import OnlookerError
from ._events import ErrorInfo, ExecutionStatus, InteractionStatus, _build

__all__ = [
    "Elicitation",
    "ElicitationHandler",
    "ExecutionResult",
    "InteractionResponse",
    "PausedExecution",
    "cancel_requests",
    "cancelled_meanwhile",
    "error_info",
    "stray_cancel",
    "undo_task_group_cancels",
]

T = TypeVar("T")


@final
@dataclass(frozen=True, slots=True)
class ExecutionResult(Generic[T]):
    """How an execution ended: errors are values here, not exceptions."""

    execution_id: str
    status: ExecutionStatus
    value: T | None = None
    error: ErrorInfo | None = None
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the execution completed."""
        return self.status == "completed"


@final
@dataclass(frozen=True, slots=True)
class PausedExecution:
    """An execution waiting for an answer; pass its id to ``engine.resume``."""

    execution_id: str
    """The root execution's id (what ``resume`` and ``cancel`` take)."""
    interaction_id: str
    message: str
    requested_schema: dict[str, JsonValue] | None = None
    asking_execution_id: str = ""
    """The execution that asked: the root's id, or a child's."""


_ACTION_STATUS: dict[str, InteractionStatus] = {
    "accept": "accepted",
    "decline": "declined",
    "cancel": "cancelled",
}


@final
@dataclass(frozen=True, slots=True)
class InteractionResponse:
    """A person's answer: ``accept`` with content, ``decline`` or ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.action not in _ACTION_STATUS:
            raise ValueError(f"action must be 'accept', 'decline' or 'cancel', not {self.action!r}")
        if self.content is not None and not isinstance(self.content, dict):
            raise TypeError(f"content must be a dict or None, not {type(self.content).__name__}")

    @classmethod
    def accept(cls, content: dict[str, Any] | None = None) -> InteractionResponse:
        """The person answered; ``content`` is the answer."""
        if content is not None and not isinstance(content, Mapping):
            raise TypeError(f"content must be a dict or None, not {type(content).__name__}")
        return cls("accept", dict(content) if content is not None else {})

    @classmethod
    def decline(cls) -> InteractionResponse:
        """The person said no."""
        return cls("decline")

    @classmethod
    def cancel(cls) -> InteractionResponse:
        """The person dismissed the question."""
        return cls("cancel")

    @property
    def status(self) -> InteractionStatus:
        """The ``InteractionResolved.status`` this answer records."""
        return _ACTION_STATUS[self.action]


@final
@dataclass(frozen=True, slots=True)
class Elicitation:
    """A question a program asks (what ``on_elicitation`` receives)."""

    execution_id: str
    interaction_id: str
    message: str
    requested_schema: dict[str, JsonValue] | None = None


ElicitationHandler: TypeAlias = Callable[[Elicitation], Awaitable[InteractionResponse]]
"""``async (Elicitation) -> InteractionResponse``: answers questions during ``execute``."""


def error_info(exc: BaseException) -> ErrorInfo:
    """Describe an exception as data: ``failure``, ``defect`` or ``interrupt``."""
    if not isinstance(exc, Exception):
        cause = "interrupt"
    elif isinstance(exc, OnlookerError):
        cause = "failure"
    else:
        cause = "defect"
    message = _message(exc) if cause != "interrupt" else _cancel_message(exc)
    if isinstance(exc, BaseExceptionGroup):  # what went wrong is inside: name it
        leaves = list(_leaves(exc))
        inner = "; ".join(
            f"{type(e).__name__}: {_message(e) if isinstance(e, Exception) else _cancel_message(e)}"
            for e in leaves[:_LEAVES_SHOWN]
        )
        more = len(leaves) - _LEAVES_SHOWN
        message += f": {inner}" + (f"; and {more} more" if more > 0 else "")
    return _build(ErrorInfo, {"type": type(exc).__name__, "message": message, "cause": cause})


def _message(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # a broken __str__ must not cost the closing event
        return type(exc).__name__


def _cancel_message(exc: BaseException) -> str:
    """A cancellation's message without the runtime's cancel scope ids and task reprs.

    anyio on asyncio says ``Cancelled via cancel scope 7f1e… by <Task … coro=<…
    running at /path/…>>; reason: deadline exceeded``, trio ``cancelled due to
    deadline from task <Task '…' at 0x7f…>``: memory addresses and the paths of
    the Python install, in every stored record. What is kept: the reason (``cancelled:
    deadline exceeded``; trio's ``cancelled due to deadline``), or a message the
    program gave its own cancellation.
    """
    message = _message(exc)
    if isinstance(exc, asyncio.CancelledError) and message.startswith(_ANYIO_CANCEL):
        _, _, reason = message.partition("; reason: ")
        return f"cancelled: {reason}" if reason else "cancelled"
    if type(exc).__module__.startswith("trio") and message.startswith("cancelled due to "):
        return message.partition(" from task ")[0]
    return message


_ANYIO_CANCEL: Final = "Cancelled via cancel scope "


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    """The exceptions a group holds, nested groups opened, in order (however deep: a loop)."""
    pending: list[BaseException] = list(reversed(group.exceptions))
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(reversed(exc.exceptions))
        else:
            yield exc


_LEAVES_SHOWN: Final = 3


def asyncio_task() -> asyncio.Task[object] | None:
    """The asyncio task running this code, if an asyncio task runs it (as ``sniffio`` asks)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no asyncio loop in this thread: trio
        return None


def undo_task_group_cancels(exc: BaseException) -> None:
    """Take back the cancellation an ``asyncio.TaskGroup`` requested of this task and never
    took back, for each such group ``exc`` came through (Python 3.11 and 3.12).

    A group whose child fails after the group's body has ended cancels its task
    to stop the body, but takes the request back only before it waits for its
    children, not after: the task's ``cancelling()`` stays one higher, which
    :func:`cancelled_meanwhile` would read as a caller's cancellation hidden by
    the program's error (an ``execute`` whose program's task group failed
    raised ``CancelledError``). Python 3.13 takes it back after the wait; so
    does this, for the groups in ``exc``'s tracebacks, its causes and, in an
    exception group, its members. A group whose body ended by an exception, or
    that another task ran, is left alone. (A group whose body swallowed the
    cancellation it sent, and ended well, took its request back already: the
    one taken back here may then be a caller's, arriving in the same moment.
    Swallowing a cancellation is the program's bug; the window is that narrow.)
    """
    task = asyncio_task()
    if _TASK_GROUP_EXIT is None or task is None:
        return
    for group in _groups_left_cancelling(exc):
        owner: object = getattr(group, "_parent_task", None)
        if owner is task and group not in _TAKEN_BACK:
            _TAKEN_BACK.add(group)
            task.uncancel()


def _groups_left_cancelling(exc: BaseException) -> Iterator[asyncio.TaskGroup]:
    """The task groups ``exc`` came through whose body ended well and that cancelled their task."""
    pending, seen = [exc], set()
    while pending:
        error = pending.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        trace = error.__traceback__
        while trace is not None:
            frame = trace.tb_frame
            if frame.f_code is _TASK_GROUP_EXIT:
                group, body_error = frame.f_locals["self"], frame.f_locals["et"]
                if body_error is None and getattr(group, "_parent_cancel_requested", False):
                    yield group
            trace = trace.tb_next
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        pending.extend(e for e in (error.__cause__, error.__context__) if e is not None)


def _leaky_task_group_exit() -> CodeType | None:
    """``asyncio.TaskGroup.__aexit__``'s code where it leaves a cancellation behind.

    The fixed ``__aexit__`` (3.13) reads ``cancelling()``; the leaky one does not.
    """
    code = asyncio.TaskGroup.__aexit__.__code__
    return None if "cancelling" in code.co_names else code


_TASK_GROUP_EXIT: Final = _leaky_task_group_exit()
_TAKEN_BACK: Final[WeakSet[asyncio.TaskGroup]] = WeakSet()


def cancel_requests() -> int:
    """How many cancellations of the running asyncio task are pending (0 on trio)."""
    task = asyncio_task()
    return 0 if task is None else task.cancelling()


async def cancelled_meanwhile(requests_before: int, message: str) -> None:
    """Raise a cancellation that code under us swallowed (it returned or failed as if none
    came): a hook that caught it, a task group that left it out of the group it raised.

    An anyio cancel scope still cancelled raises at this checkpoint; a native
    asyncio cancellation (``task.cancel()``, ``asyncio.timeout``) requested
    meanwhile is still counted by the task, and is raised again here (one
    pending from before, as in shielded clean-up code, is not).
    """
    await checkpoint_if_cancelled()
    if cancel_requests() > requests_before:
        raise asyncio.CancelledError(message)


def stray_cancel(exc: BaseException) -> bool:
    """A cancellation exception while nothing cancels this task: the raiser's own fault (a
    program or an observer awaited a task it had cancelled, or re-raised trio's ``Cancelled``
    outside the scope it came from), not a cancellation."""
    if isinstance(exc, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # raised by hand under trio, where there is no asyncio task
            return False
        return task is not None and task.cancelling() == 0
    trio = sys.modules.get("trio")  # only trio raises trio's Cancelled: never imported here
    if trio is not None and isinstance(exc, trio.Cancelled):
        try:
            return bool(trio.current_effective_deadline() != -math.inf)  # -inf: cancelled
        except RuntimeError:  # outside trio.run
            return False
    return False
