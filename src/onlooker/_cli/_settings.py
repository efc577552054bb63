"""Wire ``onlooker hook claude-code`` into a Claude Code settings file, and unwire it.

Our entries are recognised by their command (it runs ``hook claude-code`` of
an ``onlooker`` executable); everything else in the file is left as it was.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, Final

from ._claude_hook import HOOK_EVENTS

__all__ = ["SettingsError", "hook_command", "install", "is_ours", "uninstall"]

_TOOL_EVENTS: Final = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
_MARK: Final = "hook claude-code"


class SettingsError(Exception):
    """The settings file cannot be read, parsed or written."""


def hook_command(
    executable: str | None = None,
    audit_dir: str | Path | None = None,
    deny_commands: str | Path | None = None,
) -> str:
    """The shell command Claude Code runs for each hook event."""
    exe = executable or _this_executable()
    parts = [exe, "hook", "claude-code"]
    if audit_dir is not None:
        parts += ["--audit-dir", str(Path(audit_dir).resolve())]
    if deny_commands is not None:
        parts += ["--deny-commands", str(Path(deny_commands).resolve())]
    return shlex.join(parts)


def _this_executable() -> str:
    """The absolute path of this ``onlooker``: the hook must run even where no venv is active."""
    running = Path(sys.argv[0])
    if running.name == "onlooker" and running.is_file():
        return str(running.resolve())
    beside = Path(sys.executable).parent / "onlooker"
    if beside.is_file():
        return str(beside)
    return shutil.which("onlooker") or "onlooker"


def is_ours(hook: object) -> bool:
    """Whether a hook entry (``{"type": "command", "command": ...}``) runs this hook."""
    if not isinstance(hook, dict) or not isinstance(hook.get("command"), str):
        return False
    command: str = hook["command"]
    return _MARK in command and "onlooker" in command


def install(settings: Path, command: str) -> tuple[bool, Path | None]:
    """Add our hook entries to ``settings``; returns (changed, backup path).

    Idempotent: our old entries are replaced, so installing twice leaves the
    file as installing once did. The file is backed up (``.bak``) before it
    is rewritten; nothing is written when nothing changes.
    """
    data = _load(settings)
    before = json.dumps(data, sort_keys=True)
    hooks = _remove_ours(data)
    for event in HOOK_EVENTS:
        entry: dict[str, Any] = {"hooks": [{"type": "command", "command": command}]}
        if event in _TOOL_EVENTS:
            entry = {"matcher": "*", **entry}
        hooks.setdefault(event, []).append(entry)
    data["hooks"] = hooks
    if json.dumps(data, sort_keys=True) == before:
        return False, None
    return True, _save(settings, data)


def uninstall(settings: Path) -> tuple[bool, Path | None]:
    """Remove only our entries from ``settings``; returns (changed, backup path)."""
    if not settings.exists():
        return False, None
    data = _load(settings)
    before = json.dumps(data, sort_keys=True)
    hooks = _remove_ours(data)
    if hooks:
        data["hooks"] = hooks
    else:
        data.pop("hooks", None)
    if json.dumps(data, sort_keys=True) == before:
        return False, None
    return True, _save(settings, data)


def _load(settings: Path) -> dict[str, Any]:
    try:
        text = settings.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read {str(settings)!r}: {exc}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"{settings} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{settings} must hold a JSON object")
    if not isinstance(data.get("hooks", {}), dict):
        raise SettingsError(f"{settings}: 'hooks' must be a JSON object")
    return data


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


def _save(settings: Path, data: dict[str, Any]) -> Path | None:
    backup = None
    try:
        settings.parent.mkdir(parents=True, exist_ok=True)
        if settings.exists():
            backup = settings.with_name(settings.name + ".bak")
            shutil.copy2(settings, backup)
        tmp = settings.with_name(settings.name + ".onlooker-tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, settings)
    except OSError as exc:
        raise SettingsError(f"cannot write {str(settings)!r}: {exc}") from None
    return backup
