"""Query strings to filters: every bad value is a :class:`BadRequest` naming the parameter."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from onlooker._cli._common import to_time

from ._queries import EXECUTION_STATUSES, BadCursorError, ListFilters, decode_cursor

__all__ = ["MAX_LIMIT", "BadRequest", "list_filters", "parse_time", "time_range"]

MAX_LIMIT: Final = 500


class BadRequest(ValueError):
    """A query parameter the UI cannot use; the message says which and why (a 400 page)."""


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name, "").strip()
    return value or None  # an empty form field means "no filter"


def parse_time(value: str | None, name: str, *, now: datetime | None = None) -> datetime | None:
    """An ISO 8601 time (UTC when it has no zone) or an age such as ``30m``, ``2d``."""
    if value is None:
        return None
    try:
        return to_time(value, now=now)
    except ValueError as exc:
        raise BadRequest(f"{name}={exc}") from None


def time_range(params: Mapping[str, str]) -> tuple[datetime | None, datetime | None]:
    """``since`` and ``until`` from the query string, checked to be in order."""
    now = datetime.now(UTC)
    since = parse_time(_text(params, "since"), "since", now=now)
    until = parse_time(_text(params, "until"), "until", now=now)
    if since is not None and until is not None and since >= until:
        raise BadRequest("since must be before until")
    return since, until


def list_filters(params: Mapping[str, str], *, default_limit: int = 50) -> ListFilters:
    """The executions list's filters from its query string."""
    status = _text(params, "status")
    if status is not None and status not in EXECUTION_STATUSES:
        raise BadRequest(f"status={status!r} is not one of {', '.join(EXECUTION_STATUSES)}")
    limit_text = _text(params, "limit")
    limit = default_limit
    if limit_text is not None:
        if (
            not (limit_text.isascii() and limit_text.isdigit())
            or not 1 <= int(limit_text) <= MAX_LIMIT
        ):
            raise BadRequest(f"limit={limit_text!r} is not a whole number from 1 to {MAX_LIMIT}")
        limit = int(limit_text)
    cursor = _text(params, "cursor")
    if cursor is not None:
        try:
            decode_cursor(cursor)
        except BadCursorError as exc:
            raise BadRequest(str(exc)) from None
    roots = _text(params, "roots")
    if roots not in (None, "1", "on", "true"):
        raise BadRequest(f"roots={roots!r}: use roots=1 (only executions without a parent)")
    since, until = time_range(params)
    return ListFilters(
        status=status,
        program=_text(params, "program"),
        trigger=_text(params, "trigger"),
        tool=_text(params, "tool"),
        since=since,
        until=until,
        roots=roots is not None,
        cursor=cursor,
        limit=limit,
    )
