"""The JSON copy the adapters record of a framework's objects (messages, models, inputs)."""

from __future__ import annotations

from typing import Literal

from pydantic import JsonValue
from pydantic_core import to_jsonable_python

__all__ = ["json_copy"]


def json_copy(value: object, *, bytes_mode: Literal["utf8", "base64"] = "utf8") -> JsonValue:
    """A JSON copy of ``value``: models and dataclasses as their fields, the rest as its ``repr``."""
    converted: JsonValue = to_jsonable_python(value, fallback=repr, bytes_mode=bytes_mode)
    return converted
