"""What the Claude Code hook keeps of a payload's values: picked fields, ids, fingerprints.

Standard library only: the hook imports it on every tool call.
"""

from __future__ import annotations

from onlooker._shared import json_dumps, safe_session_id, sha256

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["digest", "error_info", "pick", "safe_id"]


def pick(payload: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The fields ``keys`` of a payload that are present (and not null)."""
    return {key: payload[key] for key in keys if payload.get(key) is not None}


def error_info(kind: str, message: str, cause: str = "failure") -> dict[str, str]:
    """The JSON form of an :class:`onlooker.ErrorInfo`."""
    return {"type": kind, "message": message, "cause": cause}


def digest(value: object) -> str:
    """A short fingerprint of a tool input (kept in the state instead of the input itself)."""
    try:
        text = json_dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def safe_id(raw: object, redact: Callable[[str], str]) -> str | None:
    """An id from a payload as recorded: safe characters, and never a secret (then a digest)."""
    if not isinstance(raw, str) or not raw:
        return None
    if redact(raw) != raw:
        return "redacted-" + sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return safe_session_id(raw)
