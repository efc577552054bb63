"""Questions to a person on the wire: ``elicitation/create`` requests, their answers, and the
token in ``requestState`` that ties an ``input_required`` round to the client's retry."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import JsonValue

from onlooker import InteractionStatus

__all__ = ["answer_of", "question_of", "with_token", "without_token"]

_STATUSES: Final[dict[object, InteractionStatus]] = {
    "accept": "accepted",
    "decline": "declined",
    "cancel": "cancelled",
}

_TOKEN: Final = re.compile(r"onlooker:([0-9a-f]{16})(?::(.*))?", re.DOTALL)
"""``requestState`` as the middleware hands it out: its token, then the server's own state."""


def question_of(request: object) -> tuple[str, dict[str, Any] | None] | None:
    """The message and requested schema of an ``elicitation/create`` request (wire form).

    ``None`` for any other request (``sampling/createMessage`` asks the
    client's model, ``roots/list`` its roots: no person is asked). A URL-mode
    elicitation has no schema; its URL is put after the message.
    """
    if not isinstance(request, Mapping) or request.get("method") != "elicitation/create":
        return None
    params = request.get("params")
    if not isinstance(params, Mapping) or not isinstance(params.get("message"), str):
        return None
    message: str = params["message"]
    schema = params.get("requestedSchema")
    if isinstance(params.get("url"), str):
        message = f"{message}\n{params['url']}"
    return message, dict(schema) if isinstance(schema, Mapping) else None


def answer_of(result: object) -> tuple[InteractionStatus, JsonValue]:
    """The status and response of a question from the client's ``ElicitResult`` (wire form)."""
    action = result.get("action") if isinstance(result, Mapping) else None
    status = _STATUSES.get(action)
    if status is None:
        raise ValueError(f"no answer to the question: {result!r}")
    content = result.get("content") if isinstance(result, Mapping) else None
    return status, content if status == "accepted" else None


def with_token(token: str, state: object) -> str:
    """The ``requestState`` the client echoes: ``token``, then the server's own state if any."""
    return f"onlooker:{token}" if not isinstance(state, str) else f"onlooker:{token}:{state}"


def without_token(state: object) -> tuple[str | None, str | None]:
    """The token and the server's own state in an echoed ``requestState`` (no token: as sent)."""
    if not isinstance(state, str):
        return None, None
    match = _TOKEN.fullmatch(state)
    if match is None:
        return None, state
    return match[1], match[2]
