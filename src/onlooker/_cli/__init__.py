"""The ``onlooker`` command line: a thin layer over the library.

Kept tiny on purpose: ``onlooker hook claude-code`` runs on every tool call a
coding agent makes, so it is dispatched here before typer, rich, pydantic or
anyio are imported.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Run the ``onlooker`` command line (the console script's entry point)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:2] == ["hook", "claude-code"] and not {"-h", "--help"} & set(args[2:]):
        from ._claude_hook import run

        sys.exit(run(args[2:]))
    from ._app import app

    app(args=args, prog_name="onlooker")
