"""State an integration keeps for one engine, stored on the engine itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from onlooker import ExecutionEngine

__all__ = ["per_engine"]

T = TypeVar("T")


def per_engine(engine: ExecutionEngine, name: str, make: Callable[[], T]) -> T:
    """The ``name`` state of ``engine``, made on first use; it lives and dies with the engine.

    Not a registry keyed weakly by the engine: the state holds tracked runs,
    each of which holds its engine, so such a key would never die and every
    closed engine would stay in memory with the runs it left.
    """
    attribute = f"_onlooker_{name}"
    state: T | None = engine.__dict__.get(attribute)
    if state is None:
        state = make()
        setattr(engine, attribute, state)
    return state
