"""Wire ``onlooker hook claude-code`` into a Claude Code settings file, and unwire it.

Our entries are recognised by their command (it runs ``hook claude-code`` of
an ``onlooker`` executable, or ends with :data:`MARKER`); everything else in
the file is left as it was. A change is planned first (:func:`plan_install`,
:func:`plan_uninstall`), so ``--dry-run`` can show it, then applied with a
timestamped backup.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
import os
import shlex
import shutil
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ._claude_session import HOOK_EVENTS

__all__ = [
    "MARKER",
    "Change",
    "SettingsError",
    "apply",
    "hook_command",
    "hooks_disabled",
    "ignore_onlooker",
    "installed_commands",
    "is_assignment",
    "is_ours",
    "plan_install",
    "plan_uninstall",
    "settings_path",
]

MATCHED_EVENTS: Final = frozenset(
    {"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest"}
)
"""Events whose entries take a tool-name ``matcher`` (``*``: every tool)."""
MARKER: Final = "# onlooker hook claude-code"
"""Ends a ``--command`` that does not run the hook itself (a shell comment): how it is recognised."""
_IGNORE: Final = ".onlooker/"


class SettingsError(Exception):
    """The settings file cannot be read, parsed or written."""


def settings_path(scope: str, project: Path | None = None) -> Path:
    """The settings file of ``scope``: ``project``, ``local`` or ``user``."""
    base = project if project is not None else Path()
    if scope == "local":
        return base / ".claude" / "settings.local.json"
    if scope == "user":
        return Path.home() / ".claude" / "settings.json"
    return base / ".claude" / "settings.json"


def hook_command(
    executable: str | None = None,
    audit_dir: str | Path | None = None,
    deny_commands: str | Path | None = None,
    history: bool = False,
    history_db: str | None = None,
    shorten_paths: bool = False,
) -> str:
    """The shell command Claude Code runs for each hook event."""
    parts = [executable] if executable else _this_executable()
    parts += ["hook", "claude-code"]
    if audit_dir is not None:
        parts += ["--audit-dir", str(Path(audit_dir).resolve())]
    if deny_commands is not None:
        parts += ["--deny-commands", str(Path(deny_commands).resolve())]
    if history_db is not None:
        parts += ["--history-db", history_db]
    elif history:
        parts.append("--history")
    if shorten_paths:
        parts.append("--shorten-paths")
    return shlex.join(parts)


def _this_executable() -> list[str]:
    """The absolute path of this ``onlooker``: the hook must run even where no venv is active.

    Where no ``onlooker`` script can be found (run as ``python -m onlooker`` from an
    install without scripts), this interpreter runs the module: a bare ``onlooker``
    would not be found when Claude Code runs the hook.
    """
    running = Path(sys.argv[0])
    if running.name == "onlooker" and running.is_file():
        return [str(running.resolve())]
    beside = Path(sys.executable).parent / "onlooker"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("onlooker")
    if found is not None:
        return [found]
    return [sys.executable, "-m", "onlooker"] if sys.executable else ["onlooker"]


def is_ours(hook: object) -> bool:
    """Whether a hook entry (``{"type": "command", "command": ...}``) is one install writes.

    That is a command running an ``onlooker`` executable's ``hook claude-code``
    (after ``VAR=value`` words, with any options), or one ending with
    :data:`MARKER` as ``hook install --command`` appends it. A command that
    merely mentions these words is someone else's.
    """
    if not isinstance(hook, dict) or not isinstance(hook.get("command"), str):
        return False
    command: str = hook["command"]
    return _runs_the_hook(command) or _is_marked(command)


def _runs_the_hook(command: str) -> bool:
    """Whether ``command`` runs an ``onlooker`` program's ``hook claude-code``: the program
    first (after ``VAR=value`` words and ``env``), or launched by ``uvx``, ``pipx run`` or
    ``python -m``; a path or ``onlooker.exe`` too."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return False
    while words and (is_assignment(words[0]) or words[0] == "env"):
        words.pop(0)
    for launcher in (["uvx"], ["pipx", "run"]):
        if words[: len(launcher)] == launcher:
            words = words[len(launcher) :]
    if len(words) > 2 and words[1:3] == ["-m", "onlooker"]:  # any interpreter: pypy3 too
        words = words[2:]
    return (
        len(words) >= 3
        and Path(words[0]).name.lower().removesuffix(".exe") == "onlooker"
        and words[1:3] == ["hook", "claude-code"]
    )


def is_assignment(word: str) -> bool:
    """Whether a shell word is a ``VAR=value`` that sets the environment of a command."""
    name, eq, _ = word.partition("=")
    return bool(eq) and name.isidentifier()


def _is_marked(command: str) -> bool:
    command = command.rstrip()
    head = command.removesuffix(MARKER)
    return head != command and head[-1:] in (" ", "\n") and bool(head.strip())


@dataclass(frozen=True)
class Change:
    """A planned change of a settings file: its text before and after (None: no file)."""

    path: Path
    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        """Whether applying it writes anything."""
        return self.before != self.after and self.after is not None

    def diff(self) -> str:
        """The change as a unified diff (empty when nothing changes)."""
        if not self.changed:
            return ""
        lines = difflib.unified_diff(
            (self.before or "").splitlines(keepends=True),
            (self.after or "").splitlines(keepends=True),
            fromfile=f"{self.path} (now)" if self.before is not None else "/dev/null",
            tofile=f"{self.path} (after)",
        )
        return "".join(lines)


def plan_install(settings: Path, command: str) -> Change:
    """Our entries for every recorded hook event in ``settings`` (replacing old ones of ours).

    Idempotent: planning on a file that already holds exactly these entries
    plans no change.
    """
    before, data = _load(settings)
    hooks = _remove_ours(data)
    for event in HOOK_EVENTS:
        entry: dict[str, Any] = {"hooks": [{"type": "command", "command": command}]}
        if event in MATCHED_EVENTS:
            entry = {"matcher": "*", **entry}
        hooks.setdefault(event, []).append(entry)
    data["hooks"] = hooks
    return _plan(settings, before, data)


def plan_uninstall(settings: Path) -> Change:
    """``settings`` without our entries (and without ``hooks`` when nothing else is left)."""
    before, data = _load(settings)
    if before is None:
        return Change(settings, None, None)
    hooks = _remove_ours(data)
    if hooks:
        data["hooks"] = hooks
    else:
        data.pop("hooks", None)
    return _plan(settings, before, data)


def _plan(settings: Path, before: str | None, data: dict[str, Any]) -> Change:
    after = json.dumps(data, indent=2, allow_nan=False) + "\n"
    if before is not None:
        try:
            if json.loads(before) == data:
                return Change(settings, before, before)  # same content, maybe other spacing
        except ValueError:  # pragma: no cover - _load parsed it already
            pass
    return Change(settings, before, after)


def apply(change: Change) -> Path | None:
    """Write ``change``; returns the backup of the old file (``<name>.<UTC time>.bak``), if any.

    Every backup is kept: each install or uninstall makes a new one.
    """
    if not change.changed or change.after is None:
        return None
    settings = change.path
    backup = None
    try:
        if change.before is not None and not stat.S_IMODE(settings.stat().st_mode) & 0o222:
            # A rename would replace it all the same: its owner made it read-only on purpose.
            raise SettingsError(f"cannot write {settings}: it is read-only; left as it is")
        settings.parent.mkdir(parents=True, exist_ok=True)
        if change.before is not None:
            backup = _backup_name(settings)
            shutil.copy2(settings, backup)
        _replace(settings, change.after)
    except OSError as exc:
        if backup is not None:  # nothing changed: no backup of it either
            with contextlib.suppress(OSError):
                backup.unlink()
        raise SettingsError(f"cannot write {settings}: {exc.strerror or exc}") from None
    return backup


def _replace(settings: Path, text: str) -> None:
    """Write ``text`` atomically in place of ``settings``, which keeps its permissions.

    Settings may hold secrets (``env``, ``apiKeyHelper``): a private file stays
    private. A symbolic link (to a dotfiles repository, say) stays a link, and
    its target gets the new text.
    """
    target = settings.resolve()
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0o077)  # reading the umask means setting it: put it back at once
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".onlooker-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _backup_name(settings: Path) -> Path:
    now = time.time()  # to the microsecond, so names sort in the order the backups were made
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    backup = settings.with_name(f"{settings.name}.{stamp}.bak")
    count = 1
    while backup.exists():
        count += 1
        backup = settings.with_name(f"{settings.name}.{stamp}-{count}.bak")
    return backup


def installed_commands(settings: Path) -> dict[str, list[str]]:
    """Our commands in ``settings``, by hook event ({} when the file has none or is missing)."""
    _, data = _load(settings)
    found: dict[str, list[str]] = {}
    for event, groups in dict(data.get("hooks", {})).items():
        for group in groups if isinstance(groups, list) else []:
            inner = group.get("hooks") if isinstance(group, dict) else None
            for hook in inner if isinstance(inner, list) else []:
                if is_ours(hook):
                    found.setdefault(event, []).append(hook["command"])
    return found


def hooks_disabled(settings: Path) -> bool | None:
    """The ``disableAllHooks`` of ``settings`` (None: not set, or the file cannot be read)."""
    try:
        _, data = _load(settings)
    except SettingsError:
        return None
    value = data.get("disableAllHooks")
    return value if isinstance(value, bool) else None


def ignore_onlooker(project: Path, dry_run: bool = False) -> Path | None:
    """Add ``.onlooker/`` to ``project``'s ``.gitignore``; the file when it changed.

    Only in a git work tree (``.git`` or a ``.gitignore`` there) and only
    when no line already ignores it.
    """
    gitignore = project / ".gitignore"
    if not (project / ".git").exists() and not gitignore.exists():
        return None
    try:
        text = gitignore.read_text(encoding="utf-8") if gitignore.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read {gitignore}: {exc}") from None
    patterns = {line.strip() for line in text.splitlines()}
    if patterns & {".onlooker", ".onlooker/", "/.onlooker", "/.onlooker/"}:
        return None
    if not dry_run:
        addition = ("" if not text or text.endswith("\n") else "\n") + _IGNORE + "\n"
        try:
            with gitignore.open("a", encoding="utf-8") as handle:
                handle.write(addition)
        except OSError as exc:
            raise SettingsError(f"cannot write {gitignore}: {exc.strerror or exc}") from None
    return gitignore


def parse_json(text: str) -> Any:
    """``text`` as strict JSON: Python's ``NaN`` and ``Infinity``, and a number too large
    for a float (``1e999``, which would be written back as ``Infinity``), are not JSON
    Claude Code can read; a document nested too deeply is a ``ValueError`` like any other."""

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON value")

    def finite(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise ValueError(f"the number {number[:40]} is too large to keep")
        return value

    try:
        return json.loads(text, parse_constant=no_constant, parse_float=finite)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _load(settings: Path) -> tuple[str | None, dict[str, Any]]:
    try:
        text = settings.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read {settings}: {exc}") from None
    if not text.strip():
        return text, {}
    try:
        data = parse_json(text)
    except ValueError as exc:
        raise SettingsError(f"{settings} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{settings} must hold a JSON object")
    if not isinstance(data.get("hooks", {}), dict):
        raise SettingsError(f"{settings}: 'hooks' must be a JSON object")
    return text, data


def _remove_ours(data: dict[str, Any]) -> dict[str, Any]:
    """The ``hooks`` mapping without our entries (emptied groups and events dropped)."""
    kept: dict[str, Any] = {}
    for event, groups in dict(data.get("hooks", {})).items():
        if not isinstance(groups, list):
            kept[event] = groups
            continue
        new_groups = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                inner = [hook for hook in group["hooks"] if not is_ours(hook)]
                if not inner and group["hooks"]:
                    continue
                group = {**group, "hooks": inner}
            new_groups.append(group)
        if new_groups:
            kept[event] = new_groups
    return kept
