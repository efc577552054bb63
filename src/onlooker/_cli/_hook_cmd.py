"""``onlooker hook``: the coding-agent hook, its installer and its status."""

from __future__ import annotations

import itertools
import json
import os
import shlex
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from . import _claude_hook
from ._claude_session import HOOK_EVENTS
from ._common import escape, flag, stderr, stdout
from ._settings import (
    MARKER,
    Change,
    SettingsError,
    apply,
    hook_command,
    hooks_disabled,
    ignore_onlooker,
    installed_commands,
    is_assignment,
    is_ours,
    parse_json,
    plan_install,
    plan_uninstall,
    settings_path,
)

__all__ = ["hook_app"]

hook_app = typer.Typer(
    help="Record a coding agent's hook events in an audit trail, and govern its tool calls.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

RULES_HELP = (
    "A rule file: one rule per line, # comments. A line is a regular expression searched in "
    "the Bash command; glob:PATTERN a glob on the whole command; tool:GLOB a tool name "
    "(mcp__github__*); read:GLOB, write:GLOB, edit:GLOB, path:GLOB a file the call reads, "
    "writes, edits or any; @defaults the built-in command rules. Prefix ask: to ask instead "
    "of denying. Unreadable rules deny every call."
)
Settings = Annotated[
    str | None,  # as typed: a Path would drop the "/" that says a directory was meant
    typer.Option(
        help="The settings file (default: .claude/settings.json; see --local and --user).",
        show_default=False,
        metavar="<path>",
    ),
]
Local = Annotated[
    bool, flag("--local", help="Use .claude/settings.local.json (personal, not committed).")
]
User = Annotated[bool, flag("--user", help="Use ~/.claude/settings.json (every project).")]
Json = Annotated[bool, flag("--json", help="Print the result as one JSON object.")]
DryRun = Annotated[bool, flag("--dry-run", help="Print the change; write nothing.")]


@hook_app.command(
    "claude-code",
    epilog=(
        "[b]Examples[/b]\n\n"
        '  echo \'{"hook_event_name": "PreToolUse", "session_id": "s1", '
        '"tool_name": "Bash", "tool_input": {"command": "ls"}, '
        '"tool_use_id": "t1"}\' | onlooker hook claude-code\n\n'
        "  onlooker hook claude-code --deny-commands .onlooker/deny.txt < payload.json\n\n"
        "[b]Rule file[/b]\n\n"
        "  git push .*--force        (a regular expression, searched in the command)\n\n"
        "  glob:rm -rf /*            (a glob, the whole command)\n\n"
        "  write:.env                (a file written: a name, or a path with /)\n\n"
        "  read:~/.ssh               (a directory: everything in it)\n\n"
        "  tool:mcp__github__delete_*\n\n"
        "  ask: tool:WebFetch        (ask the person instead of denying)\n\n"
        "  @defaults                 (sudo, rm -rf /, mkfs, curl | sh, ...)"
    ),
)
def claude_code(
    audit_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where session trails go (default: $CLAUDE_PROJECT_DIR or ., then "
            ".onlooker/audit).",
            show_default=False,
        ),
    ] = None,
    deny_commands: Annotated[Path | None, typer.Option(help=RULES_HELP, show_default=False)] = None,
    history: Annotated[
        bool,
        flag(
            "--history",
            help="Keep history current: after each Stop, StopFailure, SubagentStop and "
            "SessionEnd, replay the session into AUDIT_DIR/../history.db in the background.",
        ),
    ] = False,
    history_db: Annotated[
        str | None,
        typer.Option(
            help="The history database for --history (a URL or a SQLite file).", show_default=False
        ),
    ] = None,
    shorten_paths: Annotated[
        bool,
        flag(
            "--shorten-paths",
            help="Record absolute paths outside the project as ~/... or their base name "
            "(hides where the agent looked: off by default, paths are evidence).",
        ),
    ] = False,
) -> None:
    """Read one Claude Code hook event on stdin; judge it, then append it to the session's trail.

    Every hook event (SessionStart, UserPromptSubmit, PreToolUse,
    PermissionRequest, PostToolUse, PostToolUseFailure, Notification,
    SubagentStart, SubagentStop, Stop, PreCompact, SessionEnd) is recorded,
    redacted and hash-chained, in AUDIT_DIR/SESSION_ID/. With
    --deny-commands, a PreToolUse is judged first, whatever happens to the
    record. Always exits 0 and prints nothing, except the JSON that denies
    (or asks about) a call; problems go to AUDIT_DIR/audit.err.
    """
    args: list[str] = []
    if audit_dir is not None:
        args += ["--audit-dir", str(audit_dir)]
    if deny_commands is not None:
        args += ["--deny-commands", str(deny_commands)]
    if history_db is not None:
        args += ["--history-db", history_db]
    elif history:
        args.append("--history")
    if shorten_paths:
        args.append("--shorten-paths")
    raise typer.Exit(_claude_hook.run(args))


def _settings(settings: str | None, local: bool, user: bool) -> Path:
    if sum((settings is not None, local, user)) > 1:
        raise typer.BadParameter("use one of --settings, --local and --user", param_hint="--local")
    if settings is not None:
        if settings.endswith(("/", os.sep)) or Path(settings).is_dir():
            raise typer.BadParameter(
                f"{settings!r} is a directory: give the settings file (.claude/settings.json, say)",
                param_hint="--settings",
            )
        return Path(settings)
    return settings_path("local" if local else "user" if user else "project")


def _project(settings: Path) -> Path | None:
    """The project a settings file belongs to (None for the user's own settings)."""
    folder = settings.resolve().parent
    if folder.name != ".claude" or folder == (Path.home() / ".claude").resolve():
        return None
    return folder.parent


@hook_app.command(
    "install",
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker hook install --local --dry-run\n\n"
        "  onlooker hook install --local --history --deny-commands .onlooker/deny.txt\n\n"
        "  onlooker hook install --user --audit-dir ~/.onlooker/audit"
    ),
)
def install_cmd(
    settings: Settings = None,
    local: Local = False,
    user: User = False,
    audit_dir: Annotated[
        Path | None,
        typer.Option(help="Record into this directory (made absolute).", show_default=False),
    ] = None,
    deny_commands: Annotated[
        Path | None,
        typer.Option(help="Judge tool calls by this rule file (checked now).", show_default=False),
    ] = None,
    history: Annotated[
        bool, flag("--history", help="Keep the history database current (see hook claude-code).")
    ] = False,
    history_db: Annotated[
        str | None, typer.Option(help="The history database for --history.", show_default=False)
    ] = None,
    shorten_paths: Annotated[
        bool, flag("--shorten-paths", help="Shorten recorded paths (see hook claude-code).")
    ] = False,
    command: Annotated[
        str | None,
        typer.Option(
            help="The hook command to install (overrides the above). One that does not run "
            "onlooker hook claude-code itself gets the comment # onlooker hook claude-code, by "
            "which install, uninstall and status recognise it.",
            show_default=False,
        ),
    ] = None,
    dry_run: DryRun = False,
    as_json: Json = False,
) -> None:
    """Add the onlooker hook, for every hook event, to a Claude Code settings file.

    Idempotent: installing twice changes nothing; other hooks and settings
    are kept; the old file is kept as SETTINGS.<UTC time>.bak. In a git
    project, .onlooker/ is added to .gitignore. A rule file that cannot be
    read or holds an invalid rule is refused (exit 1), nothing written.
    """
    path = _settings(settings, local, user)
    if deny_commands is not None:
        from ._rules import RuleError, load_rules

        try:
            load_rules(deny_commands)
        except RuleError as exc:
            _fail(str(exc), as_json)
    line = _recognisable(command) if command else None
    line = line or hook_command(
        audit_dir=audit_dir,
        deny_commands=deny_commands,
        history=history,
        history_db=history_db,
        shorten_paths=shorten_paths,
    )
    try:
        _check_hooks(path)
        change = plan_install(path, line)
        project = _project(path)
        gitignore = ignore_onlooker(project, dry_run=dry_run) if project is not None else None
        backup = None if dry_run else apply(change)
    except SettingsError as exc:
        _fail(str(exc), as_json)
    _print_install(change, line, backup, gitignore, dry_run=dry_run, as_json=as_json)


def _recognisable(command: str) -> str:
    """``command`` as installed: with :data:`MARKER` (a shell comment) unless it is ours already.

    Our entries are found by their command (to replace them on the next
    install, to remove them, to report them); without the marker, a wrapper
    script would be installed again on every install, and never uninstalled.
    """
    if is_ours({"type": "command", "command": command}):
        return command
    command = command.rstrip()
    # A comment on a line of its own: the end of a here-document or a trailing
    # backslash would otherwise swallow it.
    joint = "\n" if "\n" in command or command.endswith("\\") else " "
    return command + joint + MARKER


def _check_hooks(path: Path) -> None:
    """Refuse settings whose entry for a hook event is not a list: installing cannot add to it.

    A file that cannot be read or parsed is left to :func:`plan_install`, which names that.
    """
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    hooks = data.get("hooks") if isinstance(data, dict) else None
    if not isinstance(hooks, dict):
        return
    for event in HOOK_EVENTS:
        if event in hooks and not isinstance(hooks[event], list):
            kind = _JSON_KINDS.get(type(hooks[event]), "a value")
            raise SettingsError(
                f"{path}: hooks.{event} must be a list of hook entries, not {kind}; "
                "fix the file by hand (nothing was changed)"
            )


_JSON_KINDS = {
    dict: "an object",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


def _print_install(
    change: Change,
    line: str,
    backup: Path | None,
    gitignore: Path | None,
    *,
    dry_run: bool,
    as_json: bool,
) -> None:
    path = change.path
    if as_json:
        result = {
            "settings": str(path),
            "changed": change.changed,
            "dry_run": dry_run,
            "command": line,
            "events": list(HOOK_EVENTS),
            "backup": str(backup) if backup else None,
            "gitignore": str(gitignore) if gitignore else None,
        }
        typer.echo(json.dumps(result))
        return
    if dry_run:
        diff = change.diff()
        typer.echo(diff.rstrip("\n") if diff else f"{path}: already installed, nothing to change")
        if gitignore is not None:
            stdout.print(f"{escape(_shown(gitignore))}: would add .onlooker/")
        return
    if not change.changed:
        stdout.print(f"{escape(str(path))}: already installed, nothing changed")
    else:
        saved = f" (backup: {escape(str(backup))})" if backup else ""
        stdout.print(f"{escape(str(path))}: installed `{escape(line)}`{saved}", soft_wrap=True)
    if gitignore is not None:
        stdout.print(f"{escape(_shown(gitignore))}: added .onlooker/")


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it is below it."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@hook_app.command(
    "uninstall",
    epilog=(
        "[b]Examples[/b]\n\n  onlooker hook uninstall --local\n\n"
        "  onlooker hook uninstall --settings ~/.claude/settings.json"
    ),
)
def uninstall_cmd(
    settings: Settings = None,
    local: Local = False,
    user: User = False,
    dry_run: DryRun = False,
    as_json: Json = False,
) -> None:
    """Remove the onlooker hook from a Claude Code settings file; other hooks are kept."""
    path = _settings(settings, local, user)
    try:
        change = plan_uninstall(path)
        backup = None if dry_run else apply(change)
    except SettingsError as exc:
        _fail(str(exc), as_json)
    if as_json:
        result = {
            "settings": str(path),
            "changed": change.changed,
            "dry_run": dry_run,
            "backup": str(backup) if backup else None,
        }
        typer.echo(json.dumps(result))
    elif not change.changed:
        stdout.print(f"{escape(str(path))}: not installed, nothing changed")
    elif dry_run:
        typer.echo(change.diff().rstrip("\n"))
    else:
        saved = f" (backup: {escape(str(backup))})" if backup else ""
        stdout.print(f"{escape(str(path))}: removed the onlooker hook{saved}")


@hook_app.command(
    "status",
    epilog="[b]Examples[/b]\n\n  onlooker hook status\n\n  onlooker hook status --json",
)
def status_cmd(as_json: Json = False) -> None:
    """Show where the hook is installed, what it runs, and whether it can work.

    Looks at the project, local and user settings. For each installation:
    the events it covers (and those missing), whether its executable and
    rule file can be used, and its audit directory. Exits 1 when the hook is
    installed nowhere or an installation cannot work (disableAllHooks
    included).
    """
    reports = [_status(scope) for scope in ("project", "local", "user")]
    installed = [r for r in reports if r["installed"]]
    disabled_by = _hooks_disabled_by()
    for report in installed if disabled_by is not None else []:
        report["problems"].append(
            f"Claude Code runs no hooks: disableAllHooks is true in {disabled_by}"
        )
    healthy = bool(installed) and all(not r["problems"] for r in installed)
    if as_json:
        typer.echo(json.dumps({"ok": healthy, "settings": reports}))
    else:
        for report in reports:
            _print_status(report)
    if not healthy:
        raise typer.Exit(1)


def _hooks_disabled_by() -> Path | None:
    """The settings file whose ``disableAllHooks: true`` turns every hook off, if one does.

    As in Claude Code, the most specific file that sets it decides: local,
    then project, then user.
    """
    for scope in ("local", "project", "user"):
        path = settings_path(scope)
        disabled = hooks_disabled(path)
        if disabled is not None:
            return path if disabled else None
    return None


def _status(scope: str) -> dict[str, Any]:
    path = settings_path(scope)
    report: dict[str, Any] = {"scope": scope, "settings": str(path), "installed": False}
    try:
        commands = installed_commands(path)
    except SettingsError as exc:
        return {**report, "problems": [str(exc)]}
    if not commands:
        return {**report, "problems": []}
    lines = sorted({line for found in commands.values() for line in found})
    problems: list[str] = []
    missing = [event for event in HOOK_EVENTS if event not in commands]
    if missing:
        problems.append(f"not installed for {', '.join(missing)}: run onlooker hook install")
    audit_dir = None
    for line in lines:
        found = _parse_command(line, problems)
        audit_dir = found.get("--audit-dir") or audit_dir
        rules = found.get("--deny-commands")
        if rules is not None:
            from ._rules import RuleError, load_rules

            try:
                load_rules(rules)
            except RuleError as exc:
                problems.append(f"{exc} (every tool call is denied)")
    return {
        **report,
        "installed": True,
        "commands": lines,
        "missing_events": missing,
        "audit_dir": audit_dir or os.path.join(".onlooker", "audit"),
        "problems": problems,
    }


def _parse_command(line: str, problems: list[str]) -> dict[str, str]:
    try:
        parts = shlex.split(line)
    except ValueError as exc:
        problems.append(f"the hook command cannot be parsed: {exc}")
        return {}
    words = list(itertools.dropwhile(is_assignment, parts))  # VAR=value words come first
    if words and "/" in words[0] and not os.access(words[0], os.X_OK):
        problems.append(f"the hook's executable {words[0]} is missing or not executable")
    return {
        name: value
        for name, value in zip(parts, [*parts[1:], ""], strict=True)
        if name in ("--audit-dir", "--deny-commands", "--history-db")
    }


def _print_status(report: dict[str, Any]) -> None:
    where = escape(report["settings"])
    if not report["installed"]:
        detail = f": {escape('; '.join(report['problems']))}" if report["problems"] else ""
        stdout.print(f"{report['scope']:8} {where}: not installed{detail}")
        return
    verdict = "[green]ok[/]" if not report["problems"] else "[red]problem[/]"
    stdout.print(f"{report['scope']:8} {where}: installed, {verdict}", soft_wrap=True)
    for line in report["commands"]:
        stdout.print(f"         runs {escape(line)}", soft_wrap=True)
    stdout.print(f"         audit directory {escape(report['audit_dir'])}", soft_wrap=True)
    for problem in report["problems"]:
        stdout.print(f"         [red]{escape(problem)}[/]", soft_wrap=True)


def _fail(message: str, as_json: bool) -> NoReturn:
    if as_json:
        typer.echo(json.dumps({"error": message}))
    else:
        stderr.print(f"[red]error[/]: {escape(message)}", soft_wrap=True)
    raise typer.Exit(1)
