"""Writing a batch so that one poison event costs only itself.

A batch the database refuses because of its data (a value the driver cannot
encode, a constraint an event breaks) is split in halves until the bad event
is alone; it goes to the dead-letter file with the reason, and every other
event is written. A batch refused because of the database itself (down,
locked, full) is handed back whole, for the writer to retry or spill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._db import Database, RowError, describe, is_transient
from ._deadletters import DeadLetters
from ._rows import Stored

__all__ = ["Outcome", "isolate"]


@dataclass(slots=True)
class Outcome:
    """What became of a batch written with :func:`isolate`."""

    new: int = 0
    written: int = 0
    dead: int = 0
    refused: list[Stored] | None = None  # a transient failure: spill these
    error: BaseException | None = None


def isolate(db: Database, batch: Sequence[Stored], dead: DeadLetters) -> Outcome:
    """Write ``batch``; if the data is at fault, split it until the poison events are alone.

    A poison event goes to ``dead``; every other event is written. Parts
    that fail because of the database (a transient failure) are returned in
    ``refused`` with the error, for the caller to retry or spill.
    """
    outcome = Outcome()
    refused: list[Stored] = []
    stack: list[Sequence[Stored]] = [batch]
    while stack:
        part = stack.pop()
        try:
            outcome.new += db.write(part)
        except Exception as exc:
            if is_transient(exc):
                refused.extend(part)
                outcome.error = exc
            elif len(part) > 1:
                middle = len(part) // 2
                stack.append(part[middle:])
                stack.append(part[:middle])
            elif not _data_at_fault(db, exc):
                refused.extend(part)  # the database, not the event: e.g. its tables are gone
                outcome.error = exc
            else:
                dead.event(part[0].event, describe(exc))
                outcome.dead += 1
        else:
            outcome.written += len(part)
    if refused:
        outcome.refused = refused
    return outcome


def _data_at_fault(db: Database, exc: BaseException) -> bool:
    """Before a lone event is called poison: does the database take anything at all?"""
    if isinstance(exc, RowError):
        return True  # the event itself cannot be turned into rows
    try:
        db.probe()
    except Exception:
        return False
    return True
