"""The questions of a tracked execution (permission prompts, ...): asked, then resolved once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

from ._emitter import CANCELLED, Emitter
from ._errors import TrackingError
from ._events import ErrorInfo, InteractionMode, InteractionStatus
from ._tracked_checks import given_id

__all__ = ["TrackedQuestions"]


@final
class TrackedQuestions:
    """A tracked execution's questions by id, and whether each is still open."""

    __slots__ = ("_emitter", "_open")

    def __init__(self, emitter: Emitter) -> None:
        self._emitter = emitter
        self._open: dict[str, bool] = {}  # id -> still open

    def knows(self, interaction_id: str) -> bool:
        """Whether a question with this id was asked."""
        return interaction_id in self._open

    def ask(
        self,
        message: str,
        schema: Mapping[str, Any] | None,
        interaction_id: str | None,
        mode: InteractionMode = "inline",
    ) -> str:
        """Check and record a question (``InteractionStarted``); returns its id."""
        if not isinstance(message, str):
            raise TypeError(f"message must be a string, not {message!r}")
        if schema is not None and not isinstance(schema, Mapping):
            raise TypeError(f"schema must be a JSON Schema object, not {schema!r}")
        interaction_id = given_id("interaction_id", interaction_id)
        if interaction_id in self._open:
            raise TrackingError(
                f"interaction id {interaction_id!r} is already used in execution "
                f"{self._emitter.execution_id!r}",
                execution_id=self._emitter.execution_id,
                interaction_id=interaction_id,
            )
        self._open[interaction_id] = True
        self._emitter.interaction_started(
            interaction_id=interaction_id, message=message, requested_schema=schema, mode=mode
        )
        return interaction_id

    def resolve(
        self,
        interaction_id: str,
        status: InteractionStatus,
        response: object,
        error: ErrorInfo | None,
    ) -> None:
        """Close an open question (``InteractionResolved``); the caller checked ``status``."""
        still_open = self._open.get(interaction_id)
        execution_id = self._emitter.execution_id
        if still_open is None:
            raise TrackingError(
                f"execution {execution_id!r} has no interaction {interaction_id!r}",
                execution_id=execution_id,
                interaction_id=interaction_id,
            )
        if not still_open:
            raise TrackingError(
                f"interaction {interaction_id!r} of execution {execution_id!r} is already resolved",
                execution_id=execution_id,
                interaction_id=interaction_id,
            )
        self._open[interaction_id] = False
        self._emitter.interaction_resolved(
            interaction_id=interaction_id, status=status, response=response, error=error
        )

    def cancel_all(self) -> None:
        """Resolve every open question ``cancelled`` (the execution is finishing)."""
        self.close_all("cancelled", CANCELLED)

    def close_all(self, status: InteractionStatus, error: ErrorInfo) -> None:
        """Resolve every open question ``status`` (``cancelled``, ``expired``), with ``error``."""
        for interaction_id, still_open in self._open.items():
            if still_open:
                self._open[interaction_id] = False
                self._emitter.interaction_resolved(
                    interaction_id=interaction_id, status=status, response=None, error=error
                )
