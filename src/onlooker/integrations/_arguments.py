"""A framework's own validation of a tool's arguments, done first so the record matches the tool."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onlooker._tracked_call import Validate  # tool_started(validate=...)'s own type

__all__ = ["Validate", "validated"]


def validated(
    validate: Validate | None, arguments: dict[str, Any]
) -> tuple[Mapping[str, Any], bool]:
    """The model's (or client's) own ``arguments`` as the tool would receive them, and
    whether they are valid; as given if invalid: the framework refuses them with its own
    error, as without onlooker."""
    if validate is None:
        return arguments, True
    try:
        return validate(arguments), True
    except Exception:  # the framework's own validator: it reports the error itself
        return arguments, False
