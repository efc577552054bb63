"""Type aliases of the audit package (kept apart so the light writer needs no typing)."""

from typing import Literal, TypeAlias

__all__ = ["FsyncMode"]

FsyncMode: TypeAlias = Literal["never", "batch", "always"]
"""When the writer calls fsync: never, once per batch (group commit), after every record."""
