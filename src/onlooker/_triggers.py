"""Triggers as the engine makes them: from a plain string, and for a child execution."""

from __future__ import annotations

import functools

from pydantic import JsonValue

from ._events import Trigger

__all__ = ["as_trigger", "spawn_trigger"]


@functools.lru_cache(maxsize=256)
def _trigger_of_kind(kind: str) -> Trigger:
    """One shared ``Trigger`` per plain-string kind, its empty metadata read-only.

    Each costs about 0.5 KB, which a paused execution would keep; shared, a
    program that wrote into ``ctx.trigger.metadata`` would write into every
    execution's, so that metadata refuses writes.
    """
    return Trigger.model_construct(kind=kind, metadata=_NoMetadata())


class _NoMetadata(dict[str, JsonValue]):
    """The empty, read-only metadata of a shared trigger."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "this trigger is shared by every execution started with the same string: "
            "pass onlooker.Trigger(kind=..., metadata=...) for metadata of your own"
        )

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]  # every mutator refuses


def as_trigger(trigger: Trigger | str) -> Trigger:
    """A ``Trigger`` from a ``Trigger`` or its kind as a plain string."""
    if isinstance(trigger, Trigger):
        return trigger
    if isinstance(trigger, str) and trigger:
        return _trigger_of_kind(trigger)
    raise TypeError(f"trigger must be a Trigger or a non-empty string, not {trigger!r}")


def as_owner(owner: str | None) -> str | None:
    """``owner`` if it is a string or ``None``; a ``TypeError`` naming it if not."""
    if owner is not None and not isinstance(owner, str):
        raise TypeError(f"owner must be a string or None, not {owner!r}")
    return owner


def spawn_trigger(parent_execution_id: str) -> Trigger:
    """The trigger of a child execution (``ctx.spawn``, ``run.child``)."""
    return Trigger(kind="spawn", metadata={"parent_execution_id": parent_execution_id})
