"""Deny and ask rules for the coding-agent hook, read from a file (light: the hook imports it).

A rule file holds one rule per line; blank lines and lines starting with
``#`` are ignored. A rule is one of:

==================  ==========================================================
``REGEX``           a regular expression searched anywhere in a shell command
                    (the input's ``command``: Claude Code's ``Bash``)
``re:REGEX``        the same, spelled out
``glob:PATTERN``    a shell-style glob matched against the whole command
``tool:GLOB``       the tool's name (``WebFetch``, ``mcp__github__delete_*``)
``read:GLOB``       a file a tool reads (``Read``, ``NotebookRead``, ``Grep``,
                    ``Glob``, ``LS``)
``write:GLOB``      a file a tool writes (``Write``)
``edit:GLOB``       a file a tool edits (``Edit``, ``MultiEdit``, ``NotebookEdit``)
``path:GLOB``       any of the three
``@defaults``       the built-in command rules
                    (:data:`onlooker.policies.DEFAULT_DENIED_COMMANDS`)
==================  ==========================================================

A rule denies the call; written ``ask: RULE`` it asks the person instead
(Claude Code's permission prompt); ``deny: RULE`` is the default spelled
out. When both match, deny wins. Command rules match as
:func:`onlooker.policies.deny_commands` does (regular expressions with
``re.search``; ``glob:`` is its ``syntax="glob"``): both compile through
:func:`onlooker._shared.compile_command_rule`.

File globs: ``*`` matches any text, ``/`` included; ``~`` is the home
directory; a glob without ``/`` matches the file's name (``.env``,
``*.pem``); a relative glob with ``/`` matches at any depth
(``config/prod.*``); an absolute one the whole path. A directory matches
everything under it (``read:~/.ssh``). The file is the tool's path made
absolute against the payload's ``cwd``, and its real path (symbolic links
resolved): either one matching is enough.
"""

from __future__ import annotations

import os

from onlooker._shared import DEFAULT_DENIED_COMMANDS, compile_command_rule

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    import re
    from typing import Any, Final

__all__ = ["PATH_FIELDS", "Rule", "RuleError", "RuleSet", "Verdict", "load_rules"]

PATH_FIELDS: Final = {
    "Read": ("read", "file_path"),
    "NotebookRead": ("read", "notebook_path"),
    "Grep": ("read", "path"),
    "Glob": ("read", "path"),
    "LS": ("read", "path"),
    "Write": ("write", "file_path"),
    "Edit": ("edit", "file_path"),
    "MultiEdit": ("edit", "file_path"),
    "NotebookEdit": ("edit", "notebook_path"),
}
"""Claude Code's file tools: tool name -> (what it does to the file, the input field naming it)."""

_KINDS: Final = ("re", "glob", "tool", "read", "write", "edit", "path")
_WHAT: Final = {
    "command": "the command",
    "tool": "the tool",
    "read": "the file it reads",
    "write": "the file it writes",
    "edit": "the file it edits",
}


class RuleError(Exception):
    """The rule file could not be read or holds an invalid rule."""


class Rule:
    """One rule: its decision (``deny`` or ``ask``), kind, pattern, and where it was written."""

    __slots__ = ("_compiled", "decision", "kind", "line", "pattern", "text")

    def __init__(
        self, decision: str, kind: str, pattern: str, text: str, line: int, compiled: Any = None
    ) -> None:
        self.decision: Final = decision
        """``deny`` or ``ask``."""
        self.kind: Final = kind
        """``command`` (regular expression or glob), ``tool``, ``read``, ``write``, ``edit`` or ``path``."""
        self.pattern: Final = pattern
        self.text: Final = text
        """The rule as written (a built-in rule: its name)."""
        self.line: Final = line
        """Its line in the file (0 for a built-in rule)."""
        self._compiled: re.Pattern[str] | None = compiled

    def matches_command(self, command: str) -> bool:
        """Whether this command rule finds ``command``."""
        return self._compiled is not None and self._compiled.search(command) is not None

    def matches_tool(self, tool: str) -> bool:
        """Whether this tool rule matches the tool's name."""
        from fnmatch import fnmatchcase

        return fnmatchcase(tool, self.pattern)

    def matches_path(self, path: str) -> bool:
        """Whether this file rule matches ``path`` (absolute and normalized)."""
        from fnmatch import fnmatchcase

        pattern = os.path.expanduser(self.pattern)
        if "/" not in pattern:
            return fnmatchcase(os.path.basename(path), pattern)
        if not os.path.isabs(pattern):
            pattern = "*/" + pattern
        pattern = pattern.rstrip("/") or "/"
        return fnmatchcase(path, pattern) or fnmatchcase(path, pattern.rstrip("/") + "/*")

    def __repr__(self) -> str:
        return f"Rule({self.decision}, {self.kind}, {self.text!r}, line {self.line})"


class Verdict:
    """What the rules decided for one tool call."""

    __slots__ = ("decision", "reason", "rule", "subject")

    def __init__(self, decision: str, rule: Rule | None, subject: str, reason: str) -> None:
        self.decision: Final = decision
        """``deny`` or ``ask``."""
        self.rule: Final = rule
        """The rule that matched (None when the rules themselves failed: fail-closed)."""
        self.subject: Final = subject
        """What matched: the command, the file or the tool name."""
        self.reason: Final = reason
        """Plain text for the agent and the person: which rule, where, what it matched."""

    @property
    def label(self) -> str:
        """The rule as recorded in the event's metadata (``denied_by`` / ``asked_by``)."""
        return self.rule.text if self.rule is not None else "unreadable-rules"


class RuleSet:
    """The rules of one file, in order; :meth:`decide` applies them to a tool call."""

    def __init__(self, path: str, rules: list[Rule]) -> None:
        self.path: Final = path
        self.rules: Final = rules

    def match_command(self, command: str) -> Rule | None:
        """The first deny (else ask) command rule that finds ``command``."""
        for decision in ("deny", "ask"):
            for rule in self.rules:
                if rule.decision == decision and rule.matches_command(command):
                    return rule
        return None

    def decide(
        self, tool: str, tool_input: dict[str, Any], cwd: str | None = None
    ) -> Verdict | None:
        """The verdict on one call of ``tool`` with ``tool_input``: deny, ask, or None (run it)."""
        subjects: list[tuple[str, str]] = [("tool", tool)]
        command = tool_input.get("command")
        if isinstance(command, list):
            command = " ".join(str(part) for part in command)
        if isinstance(command, str):
            subjects.append(("command", command))
        target = PATH_FIELDS.get(tool)
        if target is not None:
            raw = tool_input.get(target[1])
            if isinstance(raw, str) and raw:
                subjects += [(target[0], path) for path in _paths(raw, cwd)]
        for decision in ("deny", "ask"):
            for rule in self.rules:
                if rule.decision != decision:
                    continue
                for what, subject in subjects:
                    if _applies(rule, what, subject):
                        return Verdict(decision, rule, subject, self._reason(rule, tool, what))
        return None

    def _reason(self, rule: Rule, tool: str, what: str) -> str:
        where = f"{self.path}, line {rule.line}" if rule.line else f"@defaults in {self.path}"
        verb = "denied this" if rule.decision == "deny" else "asks before this"
        return f"onlooker {verb} {tool} call: {_WHAT[what]} matches the rule {rule.text} ({where})"


def _applies(rule: Rule, what: str, subject: str) -> bool:
    if what == "command":
        return rule.kind == "command" and rule.matches_command(subject)
    if what == "tool":
        return rule.kind == "tool" and rule.matches_tool(subject)
    return rule.kind in (what, "path") and rule.matches_path(subject)


def _paths(raw: str, cwd: str | None) -> list[str]:
    """``raw`` absolute and normalized, then its real path when that differs."""
    path = os.path.expanduser(raw)
    if not os.path.isabs(path):
        base = cwd if cwd and os.path.isabs(cwd) else os.getcwd()
        path = os.path.join(base, path)
    path = os.path.normpath(path)
    paths = [path]
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return paths
    if real != path:
        paths.append(real)
    return paths


def load_rules(path: str | os.PathLike[str]) -> RuleSet:
    """The rules of a rule file; :class:`RuleError` naming the file and line when it is bad."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8-sig") as handle:  # a BOM is not part of the first rule
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RuleError(f"cannot read the rule file {name}: {reason}") from None
    rules: list[Rule] = []
    for number, line in enumerate(text.splitlines(), start=1):
        rules += _parse(name, number, line.strip())
    return RuleSet(name, rules)


def _parse(path: str, number: int, line: str) -> list[Rule]:
    if not line or line.startswith("#"):
        return []
    decision = "deny"
    for prefix in ("ask:", "deny:"):
        if line.startswith(prefix):
            decision, line = prefix[:-1], line[len(prefix) :].strip()
            break
    if line == "@defaults":
        return [
            Rule(
                decision, "command", pattern, rule_name, 0, compile_command_rule(rule_name, pattern)
            )
            for rule_name, pattern in DEFAULT_DENIED_COMMANDS.items()
        ]
    kind, colon, rest = line.partition(":")
    if colon and kind not in _KINDS and kind.lower() in (*_KINDS, "ask", "deny"):
        raise RuleError(  # a typo that would otherwise be a regex matching no command
            f"{path}, line {number}: unknown kind {kind}: in the rule {line} "
            f"(kinds are lower case: {kind.lower()}:; write re:{line} for a regular expression)"
        )
    if not colon or kind not in _KINDS:
        kind, rest = "re", line  # a regular expression (which may hold a colon)
    pattern = rest.strip()
    if not pattern:
        raise RuleError(f"{path}, line {number}: the rule {line} has an empty pattern")
    if kind in ("re", "glob"):
        try:
            compiled = compile_command_rule(line, pattern, "glob" if kind == "glob" else "regex")
        except ValueError as exc:
            detail = str(exc).partition(": ")[2]
            raise RuleError(f"{path}, line {number}: {detail} in the rule {line}") from None
        return [Rule(decision, "command", pattern, line, number, compiled)]
    return [Rule(decision, kind, pattern, line, number)]
