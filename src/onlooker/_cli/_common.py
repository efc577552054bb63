"""What the commands share: consoles, database URLs, times, flags as the help shows them."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import typer
from rich.console import Console
from rich.markup import escape as markup_escape
from typer.core import TyperCommand, TyperGroup, TyperOption

if TYPE_CHECKING:
    from pydantic import BaseModel

    from onlooker.plugins.history import HistoryStore

__all__ = [
    "STYLES",
    "FlagCommand",
    "FlagGroup",
    "db_url",
    "escape",
    "existing_db",
    "flag",
    "is_loopback",
    "json_text",
    "ms",
    "parse_time",
    "printable",
    "stderr",
    "stdout",
    "to_time",
]

stdout: Final = Console(highlight=False)
"""Results: trees, tables, JSON."""
stderr: Final = Console(stderr=True, highlight=False)
"""Progress and problems."""

STYLES: Final = {
    "completed": "green",
    "accepted": "green",
    "failed": "red",
    "blocked": "red",
    "expired": "yellow",
    "cancelled": "yellow",
    "declined": "yellow",
    "skipped": "dim",
    "running": "cyan",
    "open": "cyan",
}
"""The colour of each status, wherever one is shown."""

_RELATIVE: Final = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


# Control characters but newline and tab, and the bidirectional overrides that reorder text.
_CONTROL: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)  # and lone surrogates (an undecodable name), which no terminal encoding takes


def printable(text: str) -> str:
    """``text`` with its control characters written out (``\\x1b``), for the terminal."""
    return _CONTROL.sub(_written_out, text)


def escape(text: str) -> str:
    """``text`` as rich markup that prints it as it is: its tags escaped, and its control
    characters written out (``\\x1b``). Recorded values are untrusted: an ESC would start
    a terminal escape sequence, and one can move the cursor and erase the lines above it."""
    return markup_escape(printable(text))


def json_text(record: BaseModel, *, indent: int | None = None) -> str:
    """``record`` as every ``--json`` output writes it: ASCII JSON, its other characters
    escaped (``\\u2028``), so that no line separator splits a line (``str.splitlines``
    breaks at U+2028) and no bidirectional override reorders it; one line unless ``indent``."""
    # The model's own JSON (a key holding a lone surrogate written as its escape, NaN as
    # null, a long int noted: JsonModel), then each character outside ASCII escaped as JSON
    # escapes it: outside a string JSON text holds none, so the document reads back the same.
    text = record.model_dump_json(indent=indent)
    return _NOT_ASCII.sub(lambda match: json.dumps(match[0])[1:-1], text)


_NOT_ASCII = re.compile(r"[^\x00-\x7f]")


def _written_out(match: re.Match[str]) -> str:
    return match[0].encode("unicode_escape").decode("ascii")


def ms(value: float) -> str:
    """A duration in milliseconds, with the digits that matter."""
    if value < 1:
        return f"{value:.3f} ms"
    return f"{value:.1f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def flag(*names: str, help: str, **options: Any) -> Any:
    """A boolean option shown in ``--help`` as a flag (no ``<bool>`` value after it)."""
    return typer.Option(*names, help=help, metavar="", **options)


class _FlagHelp:
    """``--help`` shown as the flag it is (typer shows ``<bool>`` after it)."""

    def get_help_option(self, ctx: Any) -> TyperOption | None:  # ctx: typer's own click's
        option: TyperOption | None = super().get_help_option(ctx)  # type: ignore[misc]  # a mixin of typer's classes
        if option is not None:
            option.metavar = ""
        return option


class FlagCommand(_FlagHelp, TyperCommand):
    """A command whose ``--help`` option is shown as the flag it is."""


class FlagGroup(_FlagHelp, TyperGroup):
    """A command group whose ``--help`` option is shown as the flag it is."""


def existing_db(value: str | None) -> str | None:
    """``--db`` for a command that only reads: a SQLite file must already exist.

    Reading never creates a database or a directory: a missing file (a
    mistyped path, a directory where nothing ran yet) is a message and exit 1.
    """
    url = db_url(value)
    target = url if url is not None else "sqlite:///" + str(Path(".onlooker/history.db").resolve())
    if not target.startswith("sqlite"):
        return url
    from sqlalchemy.engine import make_url

    try:
        database = make_url(target).database or ""
    except ValueError:  # not a URL SQLAlchemy reads: opening it says why
        return url
    if not database or database == ":memory:" or database.startswith("file:"):
        return url
    if not Path(database).is_file():
        hint = "" if value is not None else " (run something first, or pass --db)"
        stderr.print(
            f"[red]error[/]: no history database at {escape(database)}{hint}", soft_wrap=True
        )
        raise typer.Exit(1)
    return url


def db_url(value: str | None) -> str | None:
    """A database URL from ``--db``: a URL as given, a plain path as a SQLite file."""
    if value is None or "://" in value:
        return value
    path = str(Path(value).resolve())
    if any(mark in path for mark in "?#%"):  # a URL's marks: quoted, or read as a query
        from sqlalchemy.engine import URL

        return URL.create("sqlite", database=path).render_as_string(hide_password=False)
    return f"sqlite:///{path}"


def to_time(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (UTC if no zone) or an age like ``90m``, ``2d`` before ``now``.

    The one parser of ``--since`` / ``--until`` and the UI's filters: a
    :class:`ValueError` says why ``text`` is not a time the history can compare.
    """
    match = _RELATIVE.fullmatch(text.strip())
    try:
        if match:
            moment = now if now is not None else datetime.now(UTC)
            return moment - timedelta(**{_UNITS[match[2]]: float(match[1])})
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        moment.astimezone(UTC)  # times are stored in UTC: this one must have a UTC time
        return moment
    except OverflowError:
        raise ValueError(
            f"{text!r} is out of range: in UTC it falls outside years 1 to 9999"
        ) from None
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO 8601 time (2025-06-01T12:00) nor an age (30m, 12h, 7d)"
        ) from None


def parse_time(value: str | None, option: str) -> datetime | None:
    """``--since`` / ``--until`` (see :func:`to_time`); a usage error naming ``option`` if bad."""
    if value is None:
        return None
    try:
        return to_time(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


@asynccontextmanager
async def reading(url: str | None) -> AsyncIterator[HistoryStore]:
    """The history store for a read command: opened read-only, so nothing is created or
    changed, except that an older onlooker's database is migrated first (as any open
    for writing would: the file exists and is onlooker's)."""
    from onlooker import SchemaVersionError
    from onlooker.plugins import history

    async with AsyncExitStack() as stack:
        try:
            store = await stack.enter_async_context(history.open(url, read_only=True))
        except SchemaVersionError as exc:
            if exc.found > exc.supported:
                raise
            store = await stack.enter_async_context(history.open(url))
        yield store


def is_loopback(host: str) -> bool:
    """Whether a server listening on ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
