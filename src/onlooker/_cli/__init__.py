"""The ``onlooker`` command line: a thin layer over the library.

Kept tiny on purpose: ``onlooker hook claude-code`` runs on every hook event
of a coding agent, so it is dispatched here before typer, rich, pydantic or
anyio are imported.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Run the ``onlooker`` command line (the console script's entry point)."""
    args = [_tilde_expanded(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    if args[:2] == ["hook", "claude-code"] and not {"-h", "--help"} & set(args[2:]):
        try:
            from ._claude_hook import run
        except Exception as exc:  # a broken install must not open the gate: deny, say why
            if any(arg.split("=")[0] == "--deny-commands" for arg in args[2:]):
                problem = f"{type(exc).__name__}: {exc}"
                reason = f"onlooker denied this call: the hook cannot start ({problem})"
                plain = "".join(c if c.isprintable() else " " for c in reason)
                quoted = plain.replace("\\", "\\\\").replace('"', '\\"')
                sys.stdout.write(
                    '{"hookSpecificOutput": {"hookEventName": "PreToolUse", '
                    f'"permissionDecision": "deny", "permissionDecisionReason": "{quoted}"}}}}\n'
                )
                sys.stdout.flush()
                sys.exit(0)
            raise
        sys.exit(run(args[2:]))
    from . import _stopping
    from ._app import app

    _stopping.process_exits_after = True  # the command line is this process: see _stopping
    app(args=args, prog_name="onlooker")


_PATH_OPTIONS = frozenset(
    {"--audit", "--audit-dir", "--db", "--deny-commands", "--history-db", "--settings", "--tools"}
)


def _tilde_expanded(arg: str) -> str:
    """``--audit-dir=~/x`` as ``--audit-dir ~/x`` is: the shell expands no ``~`` after ``=``,
    and a path option's value would be a directory named ``~`` (for every command, the
    hook's too)."""
    name, eq, value = arg.partition("=")
    if eq and value.startswith("~") and name in _PATH_OPTIONS:
        import os.path

        return f"{name}={os.path.expanduser(value)}"
    return arg
