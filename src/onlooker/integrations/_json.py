"""The JSON copy the adapters record of a framework's objects (messages, models, inputs)."""

from __future__ import annotations

from typing import Literal

from pydantic import JsonValue
from pydantic_core import to_jsonable_python

from onlooker._events import snapshot

__all__ = ["json_copy"]


def json_copy(value: object, *, bytes_mode: Literal["utf8", "base64"] = "utf8") -> JsonValue:
    """A JSON copy of ``value``: models and dataclasses as their fields, the rest as its ``repr``.

    A key holding a lone surrogate (an undecodable file name), which pydantic-core
    refuses, is copied as the engine snapshots a tool's own values.
    """
    try:
        converted: JsonValue = to_jsonable_python(value, fallback=repr, bytes_mode=bytes_mode)
    except UnicodeEncodeError:
        return snapshot(value)
    return converted
