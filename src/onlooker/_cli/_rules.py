"""Deny rules for shell commands, read from a file (light: the hook imports it).

The same matching as :func:`onlooker.policies.deny_commands`: a rule file
holds one rule per line; blank lines and lines starting with ``#`` are
ignored. A rule is a regular expression searched anywhere in the command
(``re.search``); a rule written ``glob:PATTERN`` is a shell-style glob
matched against the whole command (so ``glob:*sudo *`` finds ``sudo``
anywhere). The line ``@defaults`` adds
:data:`onlooker.policies.DEFAULT_DENIED_COMMANDS` (``rm -rf /``, ``sudo``,
``mkfs``, ``curl ... | sh``, ...), at the cost of a slower start.
"""

from __future__ import annotations

import re
from fnmatch import translate
from pathlib import Path

__all__ = ["Rule", "RuleError", "first_match", "load_rules"]

Rule = tuple[str, re.Pattern[str]]
"""A rule's name (the line as written, or a default rule's name) and its compiled pattern."""


class RuleError(Exception):
    """The rule file could not be read or holds an invalid rule."""


def load_rules(path: str | Path) -> list[Rule]:
    """The rules of a rule file; raises :class:`RuleError` naming the file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"cannot read deny rules {str(path)!r}: {exc}") from None
    rules: list[Rule] = []
    for number, line in enumerate(text.splitlines(), start=1):
        rule = line.strip()
        if not rule or rule.startswith("#"):
            continue
        if rule == "@defaults":
            from onlooker.policies import DEFAULT_DENIED_COMMANDS

            rules += [(name, re.compile(p)) for name, p in DEFAULT_DENIED_COMMANDS.items()]
            continue
        if rule.startswith("glob:"):
            rules.append((rule, re.compile(r"\A" + translate(rule[5:].strip()))))
            continue
        try:
            rules.append((rule, re.compile(rule)))
        except re.error as exc:
            raise RuleError(
                f"{path}:{number}: invalid regular expression {rule!r}: {exc}"
            ) from None
    return rules


def first_match(rules: list[Rule], command: str) -> str | None:
    """The name of the first rule that matches ``command``, or None."""
    for name, pattern in rules:
        if pattern.search(command) is not None:
            return name
    return None
