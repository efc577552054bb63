"""``onlooker hook``: the coding-agent hook and its installer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from . import _claude_hook
from ._settings import SettingsError, hook_command, install, uninstall

__all__ = ["hook_app"]

hook_app = typer.Typer(
    help="Record a coding agent's tool calls in an audit trail (Claude Code).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

_SETTINGS_HELP = (
    "The Claude Code settings file (project: .claude/settings.json; user: ~/.claude/settings.json)."
)


@hook_app.command(
    "claude-code",
    epilog=(
        "[b]Examples[/b]\n\n"
        '  echo \'{"hook_event_name": "PreToolUse", "session_id": "s1", '
        '"tool_name": "Bash", "tool_input": {"command": "ls"}, '
        '"tool_use_id": "t1"}\' | onlooker hook claude-code\n\n'
        "  onlooker hook claude-code --deny-commands .onlooker/deny.txt < payload.json"
    ),
)
def claude_code(
    audit_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where session trails go (default: $CLAUDE_PROJECT_DIR or ., then .onlooker/audit)."
        ),
    ] = None,
    deny_commands: Annotated[
        Path | None,
        typer.Option(
            help="A file of deny rules (one glob per line, or re:REGEX); matching commands are denied."
        ),
    ] = None,
) -> None:
    """Read one Claude Code hook payload on stdin and append it to the session's audit trail.

    PreToolUse, PostToolUse, PostToolUseFailure, SessionStart and SessionEnd
    are recorded (redacted, hash-chained) in AUDIT_DIR/SESSION_ID/. Always
    exits 0 and prints nothing, except the JSON that denies a call matched by
    a deny rule; problems go to AUDIT_DIR/audit.err.
    """
    args: list[str] = []
    if audit_dir is not None:
        args += ["--audit-dir", str(audit_dir)]
    if deny_commands is not None:
        args += ["--deny-commands", str(deny_commands)]
    raise typer.Exit(_claude_hook.run(args))


@hook_app.command(
    "install",
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker hook install\n\n"
        "  onlooker hook install --settings ~/.claude/settings.json --deny-commands deny.txt"
    ),
)
def install_cmd(
    settings: Annotated[Path, typer.Option(help=_SETTINGS_HELP)] = Path(".claude/settings.json"),
    audit_dir: Annotated[
        Path | None,
        typer.Option(help="Record into this directory (made absolute in the hook command)."),
    ] = None,
    deny_commands: Annotated[
        Path | None, typer.Option(help="Deny the commands matched by this rule file.")
    ] = None,
    command: Annotated[
        str | None, typer.Option(help="The exact hook command to install (overrides the above).")
    ] = None,
) -> None:
    """Add the onlooker hook to a Claude Code settings file.

    Idempotent: running it twice changes nothing; other hooks are kept; the
    file is backed up to SETTINGS.bak before it is rewritten.
    """
    line = command or hook_command(audit_dir=audit_dir, deny_commands=deny_commands)
    try:
        changed, backup = install(settings, line)
    except SettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if not changed:
        typer.echo(f"{settings}: already installed, nothing changed")
        return
    saved = f" (backup: {backup})" if backup else ""
    typer.echo(f"{settings}: installed `{line}`{saved}")


@hook_app.command(
    "uninstall",
    epilog="[b]Examples[/b]\n\n  onlooker hook uninstall --settings ~/.claude/settings.json",
)
def uninstall_cmd(
    settings: Annotated[Path, typer.Option(help=_SETTINGS_HELP)] = Path(".claude/settings.json"),
) -> None:
    """Remove the onlooker hook from a Claude Code settings file; other hooks are kept."""
    try:
        changed, backup = uninstall(settings)
    except SettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if not changed:
        typer.echo(f"{settings}: not installed, nothing changed")
        return
    saved = f" (backup: {backup})" if backup else ""
    typer.echo(f"{settings}: removed the onlooker hook{saved}")
