"""What the commands share: the consoles, database URLs, times given on the command line."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import typer
from rich.console import Console

__all__ = ["STYLES", "db_url", "ms", "parse_time", "stderr", "stdout"]

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


def ms(value: float) -> str:
    """A duration in milliseconds, with the digits that matter."""
    if value < 1:
        return f"{value:.3f} ms"
    return f"{value:.1f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def db_url(value: str | None) -> str | None:
    """A database URL from ``--db``: a URL as given, a plain path as a SQLite file."""
    if value is None or "://" in value:
        return value
    return f"sqlite:///{Path(value).resolve()}"


def parse_time(value: str | None, option: str) -> datetime | None:
    """``--since`` / ``--until``: an ISO 8601 time (UTC if no zone) or an age like ``90m``, ``2d``."""
    if value is None:
        return None
    match = _RELATIVE.fullmatch(value.strip())
    if match:
        amount, unit = float(match[1]), match[2]
        return datetime.now(UTC) - timedelta(**{_UNITS[unit]: amount})
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is neither an ISO 8601 time nor an age like 30m, 12h, 7d", param_hint=option
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
