"""Built-in plugins: history, metrics, audit, summary.

Each is loaded on first use, so ``import onlooker`` then
``onlooker.plugins.history.plugin()`` works without importing the others.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the coding-agent hook imports this package
if TYPE_CHECKING:
    from typing import Any

    from . import audit as audit
    from . import history as history
    from . import metrics as metrics
    from . import summary as summary

__all__ = ["audit", "history", "metrics", "summary"]

_SUBMODULES = frozenset(__all__)


# Hidden from type checkers, so that a misspelt name is an error, not `Any`.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        from onlooker._shared import lazy_attribute

        return lazy_attribute(__name__, {}, name, _SUBMODULES)
