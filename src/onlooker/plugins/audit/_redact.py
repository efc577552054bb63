"""Redaction: secrets and private paths out of event values before they reach disk.

Standard library only: the coding-agent hook imports this in a fresh
interpreter on every tool call.

Three kinds of rule, applied to every string (and dict key) of an event's
payload:

* a value under a key that names a secret (``password``, ``api_key``,
  ``authorization``, ...) is replaced whole: ``[REDACTED:secret_field]``;
* a secret *shape* anywhere in a string (an OpenAI or Anthropic key, a
  GitHub token, an AWS access key id, a Slack token, a bearer token, a PEM
  private key, ``user:pass@`` in a URL, ``X=Y`` before a shell command, a
  ``--password=...`` flag) is replaced by ``[REDACTED:<rule>]``;
* an absolute path outside the working directory is shortened: ``~/...``
  under the home directory, else its base name.

Redaction runs before truncation, so a cut never leaves half a secret.
"""

from __future__ import annotations

import itertools
import os
import re

TYPE_CHECKING = False  # not typing's: see _writer.py (the hook imports this module)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any, Final, final
else:

    def final(cls: type) -> type:
        return cls


__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_SECRET_KEYS",
    "Redactor",
    "Rule",
    "marker",
    "truncate",
]


def marker(rule: str) -> str:
    """The text that replaces a secret: ``[REDACTED:<rule>]``."""
    return f"[REDACTED:{rule}]"


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters plus ``…[truncated N chars]``, if longer."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}…[truncated {len(text) - max_chars} chars]"


if TYPE_CHECKING:
    Replacement = Callable[[re.Match[str]], str]


@final
class Rule:
    """One redaction rule: a name (used in the marker) and a regular expression.

    Whatever the pattern matches is replaced by ``[REDACTED:<name>]``; if the
    pattern has a group named ``secret``, only that group is replaced and the
    rest of the match is kept (``Bearer [REDACTED:bearer]``). ``replace``, a
    function of the match, overrides both.

    ``hints``, optional, are literal substrings at least one of which occurs
    in any text the pattern matches; with them the rule's regular expression
    only runs on texts that contain one (most texts contain none).
    """

    __slots__ = ("_compiled", "_replace", "_source", "hints", "name")

    def __init__(
        self,
        name: str,
        pattern: str | re.Pattern[str],
        replace: Replacement | None = None,
        *,
        hints: Iterable[str] | None = None,
    ) -> None:
        if (
            not isinstance(name, str)
            or not name
            or not all(c.isalnum() or c in "_.:-" for c in name)
        ):
            raise ValueError(f"a rule name must be letters, digits, '_', '.', ':' or '-': {name!r}")
        if not isinstance(pattern, str | re.Pattern):
            raise TypeError(f"rule {name!r}: the pattern must be a str or re.Pattern")
        self.name: Final = name
        self.hints: Final[tuple[str, ...] | None] = None if hints is None else tuple(hints)
        if self.hints is not None and not all(isinstance(h, str) and h for h in self.hints):
            raise ValueError(f"rule {name!r}: hints must be non-empty strings")
        self._source = pattern
        # Compiled on first use: the hook pays only for the rules a text needs.
        self._compiled: re.Pattern[str] | None = (
            pattern if isinstance(pattern, re.Pattern) else None
        )
        self._replace = replace

    @property
    def pattern(self) -> re.Pattern[str]:
        """The compiled regular expression."""
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._source)
        return compiled

    @property
    def replace(self) -> Replacement:
        """The function of a match that gives its replacement."""
        replace = self._replace
        if replace is None:
            replace = self._replace = self._default_replace()
        return replace

    def _default_replace(self) -> Replacement:
        text = marker(self.name)
        if "secret" not in self.pattern.groupindex:
            return lambda _match: text

        def keep_around(match: re.Match[str]) -> str:
            whole = match.group(0)
            start, end = match.start("secret") - match.start(), match.end("secret") - match.start()
            return whole[:start] + text + whole[end:]

        return keep_around

    def apply(self, text: str) -> str:
        """``text`` with every match of this rule replaced."""
        return self.pattern.sub(self.replace, text)

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, {self.pattern.pattern!r})"


_ENV_ASSIGNMENT = r"""([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|'[^']*'|[^\s;&|]*)"""


def _redact_env_run(match: re.Match[str]) -> str:
    text = marker("env")
    return re.sub(_ENV_ASSIGNMENT, lambda m: f"{m.group(1)}={text}", match.group(0))


DEFAULT_RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)",
        hints=["-----BEGIN"],
    ),
    Rule("anthropic_key", r"sk-ant-[A-Za-z0-9_-]{8,}", hints=["sk-ant-"]),
    Rule("openai_key", r"sk-(?<![A-Za-z0-9]sk-)[A-Za-z0-9_-]{16,}", hints=["sk-"]),
    Rule(
        "github_token",
        r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}",
        hints=["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
    ),
    Rule("aws_access_key", r"(?:AKIA|ASIA)[0-9A-Z]{16}", hints=["AKIA", "ASIA"]),
    Rule("slack_token", r"xox[a-z]-[A-Za-z0-9-]{6,}", hints=["xox"]),
    Rule(
        "authorization",
        r"(?i:authorization)\"?\s*[:=]\s*\"?(?P<secret>(?:[A-Za-z]+\s+)?[^\s,;\"']+)",
        hints=["uthorization", "UTHORIZATION"],
    ),
    # A bearer token: 6+ token characters with a digit or symbol among them,
    # or 20+ letters (so "the bearer shall" stays prose).
    Rule(
        "bearer",
        r"(?:[Bb]earer|BEARER)\s+(?P<secret>(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{6,}"
        r"|[A-Za-z]{20,})",
        hints=["Bearer", "bearer", "BEARER"],
    ),
    Rule(
        "url_credentials",
        r"[A-Za-z][A-Za-z0-9+.-]*://(?P<secret>[^/\s:@\"']+:[^/\s@\"']+)@",
        hints=["@"],
    ),
    Rule(
        "secret_flag",
        r"-(?i:-?(?:password|passwd|passphrase|token|secret|api[-_]?key|access[-_]?key))"
        r"(?:=|\s+)(?P<secret>\"[^\"]*\"|'[^']*'|[^\s\"']+)",
        hints=["-p", "-P", "-t", "-T", "-s", "-S", "-a", "-A"],
    ),
    # X=Y before a shell command, at the start of the text or of a command
    # after ; && || | ( $( or a backtick, optionally after `export`/`env`.
    Rule(
        "env",
        r"""(?:^|[;|(`\n]|&&)[ \t]*(?:(?:export|env)[ \t]+)?"""
        r"""(?:[A-Za-z_][A-Za-z0-9_]*=(?:"(?:[^"\\]|\\.)*"|'[^']*'|[^\s;&|]*)(?:[ \t]+|$))+""",
        _redact_env_run,
        hints=["="],
    ),
    # An environment-style assignment (upper-case name) anywhere, as when a
    # command is quoted inside a message or a result.
    Rule(
        "env",
        r"""(?<![A-Za-z0-9_$])[A-Z][A-Z0-9_]*=(?!\[REDACTED:)"""
        r"""(?P<secret>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s;&|"']+)""",
        hints=["="],
    ),
)
"""The secret shapes redacted by default, in the order they are applied."""

DEFAULT_SECRET_KEYS: Final = (
    r"password|passwd|passphrase|secret|api_?key|apikey|access_?key|private_?key"
    r"|authori[sz]ation|cookie|credential|session_?token|(?:^|_)auth(?:$|_)"
    r"|token(?![a-z]|_(?:count|usage|limit|budget|type))"
)
"""Key names whose values are secrets, searched in the key lower-cased with ``-`` as ``_``."""

# An absolute path token: a "/" not preceded by a word character, a dot, a
# colon, a slash or "~" (so URLs, "and/or" and relative paths are left alone).
_PATH: Final = Rule("path", r"""/(?<![\w.:/~$@\\-]/)[^\s"'`;|&<>()\[\]{},=]+""")

_SCALARS: Final = frozenset({int, float, bool})
_SECRET_FIELD: Final = marker("secret_field")
_PLAIN_KEY: Final = (False, "")  # the cached verdict of a key that is neither secret nor changed

ENVELOPE_FIELDS: Final = frozenset(
    {
        "kind",
        "event_id",
        "execution_id",
        "seq",
        "at",
        "schema_version",
        "status",
        "duration_ms",
        "mode",
        "tool_call_id",
        "interaction_id",
    }
)
"""Event fields onlooker itself produces (ids, timestamps, enums, numbers): never redacted."""


@final
class Redactor:
    """Removes secrets and private paths from JSON values.

    ``rules`` replaces the default secret shapes (:data:`DEFAULT_RULES`);
    ``extra_rules`` adds to them. ``secret_keys`` (a pattern searched in each
    key, lower-cased, ``-`` read as ``_``) replaces :data:`DEFAULT_SECRET_KEYS`.
    ``shorten_paths`` turns absolute paths outside ``cwd`` (default: the
    working directory when the redactor is made) into ``~/...`` under
    ``home`` or their base name. With ``learn_secrets``, a string of six or
    more characters seen under a secret key is remembered (the most recent
    256) and scrubbed wherever it shows up later, as a tool that echoes its
    password in a result or an error message.

    >>> Redactor(extra_rules=[Rule("ticket", r"TICKET-\\d+")]).redact({"q": "see TICKET-42"})
    {'q': 'see [REDACTED:ticket]'}
    """

    def __init__(
        self,
        rules: Iterable[Rule] | None = None,
        *,
        extra_rules: Iterable[Rule] = (),
        secret_keys: str | re.Pattern[str] | None = None,
        shorten_paths: bool = True,
        cwd: str | os.PathLike[str] | None = None,
        home: str | os.PathLike[str] | None = None,
        learn_secrets: bool = True,
    ) -> None:
        self.rules: Final[tuple[Rule, ...]] = (
            *(DEFAULT_RULES if rules is None else rules),
            *extra_rules,
        )
        for rule in self.rules:
            if not isinstance(rule, Rule):
                raise TypeError(f"rules must be onlooker.plugins.audit.Rule objects, not {rule!r}")
        self._secret_keys = DEFAULT_SECRET_KEYS if secret_keys is None else secret_keys
        if not isinstance(self._secret_keys, str | re.Pattern):
            raise TypeError("secret_keys must be a str or re.Pattern")
        if secret_keys is not None:
            self.secret_keys  # noqa: B018  # a bad pattern fails here, not on the first event
        for rule in (*(rules or ()), *extra_rules):
            rule.pattern  # noqa: B018  # likewise
        self.shorten_paths: Final = shorten_paths
        self.cwd: Final = _clean_dir(cwd if cwd is not None else os.getcwd())
        self.home: Final = _clean_dir(home if home is not None else os.path.expanduser("~"))
        # One search for every rule's hints finds the (rare) texts that need
        # work; rules without hints run on every text.
        hints = {hint for rule in self.rules for hint in rule.hints or ()}
        self._trigger: Final = (
            re.compile("|".join(re.escape(h) for h in sorted(hints))) if hints else None
        )
        self._always: Final = tuple(rule for rule in self.rules if rule.hints is None)
        self._keys: dict[str, tuple[bool, str]] = {}
        self.learn_secrets: Final = learn_secrets
        self._known: dict[str, None] = {}  # recent values seen under secret keys, oldest first
        self._known_pattern: re.Pattern[str] | None = None
        self._learned = 0

    # -- public ------------------------------------------------------------------

    def redact(self, value: Any, *, max_chars: int | None = None) -> Any:
        """``value`` (a JSON value) with secrets and private paths removed.

        Strings longer than ``max_chars`` (after redaction) are cut with
        ``…[truncated N chars]``. Returns ``value`` itself when nothing
        changed; never mutates it.
        """
        learned = self._learned
        out = self._value(value, max_chars)
        if self._learned != learned:  # a secret found late in the value may sit earlier in it
            out = self._value(out, max_chars)
        return out

    def redact_event(
        self, event: dict[str, Any], *, max_chars: int | None = None
    ) -> dict[str, Any]:
        """An event's JSON form redacted, skipping the envelope fields onlooker generates."""
        learned = self._learned
        out = self._event(event, max_chars)
        if self._learned != learned:
            out = self._event(out, max_chars)
        return out

    @property
    def learned(self) -> int:
        """How many secrets were learned so far (changes when a value teaches a new one)."""
        return self._learned

    def _event(self, event: dict[str, Any], max_chars: int | None) -> dict[str, Any]:
        out: dict[str, Any] | None = None
        value_of = self._value
        for key, value in event.items():
            if key in ENVELOPE_FIELDS or value is None:
                continue
            new = value_of(value, max_chars)
            if new is not value:
                if out is None:
                    out = dict(event)
                out[key] = new
        return event if out is None else out

    def redact_text(self, text: str) -> str:
        """One string with every rule applied and private paths shortened."""
        trigger = self._trigger
        if self._always or (trigger is not None and trigger.search(text) is not None):
            for rule in self.rules:
                hints = rule.hints
                if hints is None or any(hint in text for hint in hints):
                    text = rule.apply(text)
        known = self._known_pattern
        if known is not None and known.search(text) is not None:
            text = known.sub(_SECRET_FIELD, text)
        if self.shorten_paths and "/" in text:
            path = _PATH.pattern
            if path.search(text) is not None:
                text = path.sub(self._shorten, text)
        return text

    @property
    def secret_keys(self) -> re.Pattern[str]:
        """The pattern that names secret keys (searched in the key lower-cased, ``-`` as ``_``)."""
        keys = self._secret_keys
        if isinstance(keys, str):
            keys = self._secret_keys = re.compile(keys)
        return keys

    def is_secret_key(self, key: str) -> bool:
        """Whether values under ``key`` are secrets."""
        return self.secret_keys.search(key.lower().replace("-", "_")) is not None

    def shorten_path(self, path: str) -> str:
        """An absolute path outside the working directory as ``~/...`` or its base name."""
        normal = os.path.normpath(path)
        if _inside(normal, self.cwd):
            return path
        if _inside(normal, self.home):
            return "~" if normal == self.home else "~/" + os.path.relpath(normal, self.home)
        return os.path.basename(normal) or path

    # -- walk --------------------------------------------------------------------

    def _value(self, value: Any, max_chars: int | None) -> Any:
        kind = type(value)
        if kind is str:
            text = self.redact_text(value)
            if max_chars is not None and len(text) > max_chars:
                return truncate(text, max_chars)
            return value if text == value else text
        if kind is dict:
            return self._dict(value, max_chars)
        if kind is list:
            out: list[Any] | None = None
            for index, item in enumerate(value):
                if item is None or type(item) in _SCALARS:
                    continue
                new = self._value(item, max_chars)
                if new is not item:
                    if out is None:
                        out = list(value)
                    out[index] = new
            return value if out is None else out
        return value

    def _dict(self, value: dict[Any, Any], max_chars: int | None) -> dict[Any, Any]:
        keys = self._keys
        # Fast scan: most dicts hold plain keys and values that need nothing.
        for key, item in value.items():
            if keys.get(key) is not _PLAIN_KEY:
                break
            if item is None or type(item) in _SCALARS:
                continue
            if type(item) is str and self._untouched(item, max_chars):
                continue
            break
        else:
            return value
        out: dict[Any, Any] | None = None
        for index, (key, item) in enumerate(value.items()):
            found = keys.get(key) if type(key) is str else (False, key)
            if found is None:
                found = self._key(key)
            secret, new_key = (False, key) if found is _PLAIN_KEY else found
            if secret:
                new: Any = _SECRET_FIELD
                if self.learn_secrets and item is not None:
                    self._learn(item)
            elif item is None or type(item) in _SCALARS:
                new = item
            else:
                new = self._value(item, max_chars)
            if out is None and (new is not item or new_key is not key):
                out = dict(itertools.islice(value.items(), index))
            if out is not None:
                out[new_key] = new
        return value if out is None else out

    def _untouched(self, text: str, max_chars: int | None) -> bool:
        """Whether redaction and truncation certainly leave ``text`` as it is (a quick test)."""
        trigger = self._trigger
        return (
            (max_chars is None or len(text) <= max_chars)
            and not self._always
            and (trigger is None or trigger.search(text) is None)
            and self._known_pattern is None
            and (not self.shorten_paths or "/" not in text)
        )

    def _learn(self, value: Any) -> None:
        if type(value) is dict:
            for item in value.values():
                self._learn(item)
        elif type(value) is list:
            for item in value:
                self._learn(item)
        elif type(value) is str and len(value) >= 6 and value not in self._known:
            self._known[value] = None
            if len(self._known) > 256:
                del self._known[next(iter(self._known))]
            longest_first = sorted(self._known, key=len, reverse=True)
            self._known_pattern = re.compile("|".join(map(re.escape, longest_first)))
            self._learned += 1

    def _key(self, key: str) -> tuple[bool, str]:
        redacted = self.redact_text(key)
        found = (self.is_secret_key(key), key if redacted == key else redacted)
        if found == (False, key):
            found = _PLAIN_KEY
        if len(self._keys) < 4096:
            self._keys[key] = found
        return found

    def _shorten(self, match: re.Match[str]) -> str:
        return self.shorten_path(match.group(0))


def _clean_dir(path: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def _inside(path: str, directory: str) -> bool:
    if directory == "/":
        return True
    return path == directory or path.startswith(directory + "/")
