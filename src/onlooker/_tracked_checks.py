"""What an adapter may hand a tracked execution: each check names the problem it finds.

Adapters pass values straight from another framework, so every argument of
the tracked API is checked before anything is recorded.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from ._errors import ToolInputError
from ._events import ErrorCause, ErrorInfo, ExecutionStatus, InteractionStatus, new_id
from ._results import error_info

__all__ = [
    "as_error_info",
    "check_status",
    "final_error",
    "given_id",
    "program_name",
    "same_arguments",
    "tool_arguments",
]


def tool_arguments(tool: str, args: object, hook: str | None = None) -> dict[str, Any]:
    """``args`` as the dict of a call of ``tool``: a mapping with string keys."""
    source = f" (input modified by hook {hook!r})" if hook else ""
    if not isinstance(args, Mapping):
        raise ToolInputError(
            f"arguments of tool {tool!r}{source} must be a JSON object (a mapping), "
            f"not {type(args).__name__}",
            tool=tool,
            hook=hook,
        )
    for key in args:
        if not isinstance(key, str):
            raise ToolInputError(
                f"arguments of tool {tool!r}{source} must have string keys, not {key!r}",
                tool=tool,
                hook=hook,
            )
    return dict(args)


def same_arguments(args: Mapping[str, Any]) -> dict[str, Any]:
    """The ``Check`` of a tracked call: :func:`tool_arguments` already made ``args`` a dict."""
    return args  # type: ignore[return-value]  # tool_arguments already made it a dict


def as_error_info(error: BaseException | str | ErrorInfo, type_name: str) -> ErrorInfo:
    """An exception, a message or an ``ErrorInfo`` as an ``ErrorInfo``."""
    if isinstance(error, ErrorInfo):
        return error
    if isinstance(error, BaseException):
        return error_info(error)
    if not isinstance(error, str):
        raise TypeError(f"error must be an exception, a message or an ErrorInfo, not {error!r}")
    return ErrorInfo(type=type_name, message=error or "failed", cause="failure")


_CAUSES: Final[dict[str, ErrorCause]] = {
    "failed": "failure",
    "cancelled": "interrupt",
    "expired": "interrupt",
}


def final_error(
    status: ExecutionStatus | InteractionStatus,
    error: BaseException | str | ErrorInfo | None,
    what: str = "execution",
) -> ErrorInfo | None:
    """The error of a tracked execution (or question: ``what``) that ends ``status``: the
    one given, or one naming the status; none for an ending that is not a failure."""
    if status not in _CAUSES:  # completed, accepted, declined
        if error is not None:
            article = "an" if status[0] in "aeiou" else "a"
            raise ValueError(f"{article} {status} {what} has no error")
        return None
    if error is not None:
        return as_error_info(error, "Error")
    return ErrorInfo(type="Error", message=f"the {what} {status}", cause=_CAUSES[status])


def check_status(status: object, statuses: Collection[str]) -> None:
    """Refuse a ``status`` that is not one of ``statuses``."""
    if status not in statuses:
        raise ValueError(f"status must be one of {', '.join(sorted(statuses))}, not {status!r}")


def program_name(program: object) -> str:
    """A tracked program's name: a non-empty string."""
    if not isinstance(program, str) or not program:
        raise TypeError(f"program must be a non-empty string (a name), not {program!r}")
    return program


def given_id(name: str, value: str | None) -> str:
    """``value`` when the adapter gave one (a non-empty string), else a new id."""
    if value is None:
        return new_id()
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty string, not {value!r}")
    return value
