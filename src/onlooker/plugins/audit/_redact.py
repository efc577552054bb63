"""Redaction: secrets out of event values before they reach disk, and records capped.

Standard library only: the coding-agent hook imports this in a fresh
interpreter on every tool call. It is the one redaction policy of every
store: the audit trail, the coding-agent hook, history, spill and
dead-letter files.

What a :class:`Redactor` does to every string (and dict key) of an event's
payload:

* a value under a key that names a secret (``password``, ``api_key``,
  ``authorization``, ...) is replaced whole: ``[REDACTED:secret_field]``; so is
  one under a key no secret alone that the keys beside it make one (a ``pass``
  beside a ``user``, Kaggle's ``key`` beside its ``username``, a ``Key`` under
  ``Jwt``: :func:`_paired`);
* a secret *shape* anywhere in a string (the rules of
  :data:`DEFAULT_RULES`: cloud and API keys, tokens, JWTs, PEM private keys,
  ``user:pass@`` in a URL, ``X=Y`` before a shell command, ``--password=``
  flags, ``password = "..."`` in code, ``.env``, YAML and JSON) is replaced
  by ``[REDACTED:<rule>]``;
* the value of a secret-named environment variable (``GITHUB_TOKEN``,
  ``*_SECRET``, ``*_KEY``, ...) is replaced wherever it shows up, bare:
  ``[REDACTED:environment]``;
* paths and commands are kept as given: an audit trail is evidence
  (shortening absolute paths is an opt-in, ``shorten_paths=True``).

Redaction runs before truncation, so a cut never leaves half a secret; a
very long string is cut before the rules run (:meth:`Redactor._cut`), so
its cost follows what is kept. :meth:`Redactor.screen` tells which
serialized events need none of this (``_screen.py``).
"""

from __future__ import annotations

import itertools
import os

from ._cap import cap_record
from ._known import LEARNED_MARKER, KnownSecrets
from ._paths import PathShortener, clean_dir, working_dir
from ._secrets import (
    _PLACEHOLDER_WORDS,
    DEFAULT_RULES,
    DEFAULT_SECRET_KEYS,
    ENVELOPE_FIELDS,
    KEY_WORDS,
    Rule,
    holds_hint,
    is_secret_flag,
    marker,
    truncate,
)

TYPE_CHECKING = False  # not typing's: see _writer.py (the hook imports this module)
if TYPE_CHECKING:
    import re
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any, Final, final

    from ._screen import RuleHints, Screen
    from ._secrets import Replacement
else:

    def final(cls: type) -> type:
        return cls


__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_SECRET_KEYS",
    "ENVELOPE_FIELDS",
    "Redactor",
    "Rule",
    "cap_record",
    "marker",
    "truncate",
]

_SCALARS: Final = frozenset({int, float, bool})
_FLAG_VALUE: Final = marker("secret_flag")
_OPENSSL_PASS: Final = frozenset({"-passin", "-passout"})
_PLAIN_KEY: Final = (False, "")  # the cached verdict of a key that is neither secret nor changed
_PAIRED_KEY: Final = (False, "pass|key")  # ... of one secret only beside another (_paired)
_PHRASE_NAMES: Final = frozenset(
    {"mnemonic", *(f"{kind}{sep}phrase" for kind in ("seed", "recovery") for sep in ("", "_", "-"))}
)
_PAIRED_NAMES: Final = frozenset({"pass", "key", "accountkey", "account_key", *_PHRASE_NAMES})
_USERS: Final = frozenset({"user", "username", "login"})
_ACCOUNT_NAMES: Final = frozenset({"accountname", "account_name"})
_HEX: Final = frozenset("0123456789abcdef")
_KAGGLE: Final = frozenset({"username", "key"})
_NOT_PASSWORDS: Final = frozenset(  # the placeholders the rules know, and a test's verdicts
    {*(word.lower() for word in _PLACEHOLDER_WORDS), "pass", "passed", "fail"}
)
_KEY_KIND_NAMES: Final = frozenset({"jwt", "signing", "encryption", "hmac"})
_MARGIN: Final = 256  # characters scanned past max_chars in a string that is cut
_RESERVE: Final = 128  # ... of which at least this many, after redaction, are dropped
_LONG: Final = 256  # texts longer than this find the rules they need by a squeezed copy
_SHORT: Final = 40  # texts up to this long are searched for hints by one compiled alternation ...
_COMPILE_AFTER: Final = 256  # ... once the redactor has seen this many of them


@final
class Redactor:
    """Removes secrets from JSON values; the one redaction policy of every store.

    ``rules`` replaces the default secret shapes (:data:`DEFAULT_RULES`);
    ``extra_rules`` adds to them. ``secret_keys`` (a pattern searched in each
    key, lower-cased, ``-`` read as ``_``) replaces :data:`DEFAULT_SECRET_KEYS`.
    ``environ`` (default: ``os.environ`` when the redactor is made) gives the
    variables whose values are scrubbed wherever they appear, when their
    name says they hold a secret (``GITHUB_TOKEN``, ``DB_PASSWORD``,
    ``OPENAI_API_KEY``; see ``is_secret_variable``); pass ``{}`` for none.
    ``shorten_paths`` (off by default: paths are evidence) turns absolute
    paths outside ``cwd`` (default: the working directory when the redactor
    is made) into ``~/...`` under ``home`` or their base name. With
    ``learn_secrets``, a string of six or more characters seen under a
    secret key is remembered (the most recent 256) and scrubbed wherever it
    shows up later, as a tool that echoes its password in a result or an
    error message; so is a value a rule replaced because of the secret name
    before it (``DB_PASSWORD=...``) when it looks like a secret (eight
    characters or more, letters and digits; not a path, a URL or code).

    The interface other stores rely on: :meth:`redact`, :meth:`redact_event`,
    :meth:`redact_text`, :meth:`learn`, :meth:`is_secret_key`, :meth:`shorten_path`,
    :attr:`learned`, :attr:`rules`, :attr:`secret_keys`; and, in this module,
    :data:`ENVELOPE_FIELDS`, :func:`cap_record`, :func:`truncate`,
    :func:`marker`.

    >>> Redactor(extra_rules=[Rule("ticket", r"TICKET-\\d+")]).redact({"q": "see TICKET-42"})
    {'q': 'see [REDACTED:ticket]'}
    """

    def __init__(
        self,
        rules: Iterable[Rule] | None = None,
        *,
        extra_rules: Iterable[Rule] = (),
        secret_keys: str | re.Pattern[str] | None = None,
        shorten_paths: bool = False,
        cwd: str | os.PathLike[str] | None = None,
        home: str | os.PathLike[str] | None = None,
        learn_secrets: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.rules: Final[tuple[Rule, ...]] = (
            *(DEFAULT_RULES if rules is None else rules),
            *extra_rules,
        )
        for rule in self.rules:
            if not isinstance(rule, Rule):
                raise TypeError(f"rules must be onlooker.plugins.audit.Rule objects, not {rule!r}")
        self._secret_keys = DEFAULT_SECRET_KEYS if secret_keys is None else secret_keys
        if not isinstance(self._secret_keys, str):
            import re

            if not isinstance(self._secret_keys, re.Pattern):
                raise TypeError("secret_keys must be a str or re.Pattern")
        self._default_keys = secret_keys is None
        if secret_keys is not None:
            self.secret_keys  # noqa: B018  # a bad pattern fails here, not on the first event
        for rule in (*(rules or ()), *extra_rules):
            rule.pattern  # noqa: B018  # likewise
        self.shorten_paths: Final = shorten_paths
        self.cwd: Final = clean_dir(cwd) if cwd is not None else working_dir()
        self.home: Final = clean_dir(home if home is not None else os.path.expanduser("~"))
        self._paths: Final = PathShortener(self.cwd, self.home)
        # The rare texts that need work are found by their hints, lower-cased
        # substrings looked for in the lower-cased text: faster than one
        # compiled alternation, and nothing to compile in a short-lived process.
        self._rule_hints: Final = tuple(
            (rule, None if rule.hints is None else tuple({h.lower() for h in rule.hints}))
            for rule in self.rules
        )
        self._hints: Final = tuple(sorted({h for _, hs in self._rule_hints for h in hs or ()}))
        self._start_hints: Final = tuple(h[1:] for h in self._hints if h[0] == "\n" and h[1:])
        self._always: Final = tuple(rule for rule in self.rules if rule.hints is None)
        self._short: re.Pattern[str] | None = None
        self._texts = 0
        self._keys: dict[str, tuple[bool, str]] = {}
        self.learn_secrets: Final = learn_secrets
        self._known: Final = KnownSecrets(os.environ if environ is None else environ)
        self._learning: dict[Rule, Replacement] = {}
        self._screen: Screen | None = None
        self._rule_hints_of_texts: RuleHints | None = None

    # -- public ------------------------------------------------------------------

    def redact(self, value: Any, *, max_chars: int | None = None) -> Any:
        """``value`` (a JSON value) with secrets removed.

        Strings longer than ``max_chars`` (after redaction) are cut with
        ``…[truncated N chars]``. Returns ``value`` itself when nothing
        changed; never mutates it.
        """
        learned = self._known.learned
        out = self._value(value, max_chars)
        if self._known.learned != learned:  # a secret found late in the value may sit earlier
            out = self._value(out, max_chars)
        return out

    def redact_event(
        self, event: dict[str, Any], *, max_chars: int | None = None
    ) -> dict[str, Any]:
        """An event's JSON form redacted, skipping the fields onlooker generates."""
        learned = self._known.learned
        out = self._event(event, max_chars)
        if self._known.learned != learned:
            out = self._event(out, max_chars)
        return out

    def screen(self, texts: Sequence[bytes], *, max_chars: int | None = None) -> list[int]:
        """Which of many serialized values redaction may change: their indices, ascending.

        ``texts`` are JSON values (events) in UTF-8, escaped as :mod:`json`
        escapes (non-ASCII kept, as ``model_dump_json`` and the audit writer
        write them). For every index not returned, :meth:`redact` (and
        :meth:`redact_event`) with this ``max_chars`` would certainly return
        the value unchanged: write its text as it is. Cheaper by far than
        redacting each value, for the common event that holds no hint of a
        secret; those it returns must be redacted as usual.
        """
        screen = self._screen
        if screen is None:
            from ._screen import Screen

            screen = self._screen = Screen(
                None if self._always else self._hints,
                KEY_WORDS if self._default_keys else None,
                paths=self.shorten_paths,
            )
        return screen.suspects(texts, max_chars, self._known)

    def learn(self, value: Any) -> None:
        """Learn the secrets under secret keys in ``value`` (a JSON value), as :meth:`redact`
        would, without redacting anything: for a caller that keeps none of ``value`` but
        must scrub what it holds from the messages it keeps (an error that repeats it)."""
        if not self.learn_secrets:
            return
        keys = self._keys
        stack: list[tuple[Any, bool]] = [(value, False)]  # a value, and whether it is keyed
        while stack:
            item, keyed = stack.pop()
            if type(item) is dict:
                paired: set[str] | None = None
                for key, inner in item.items():
                    if inner is None or type(inner) in _SCALARS or type(key) is not str:
                        continue
                    found = keys.get(key)
                    if found is None:
                        found = self._key(key)
                    if found is _PAIRED_KEY:
                        if paired is None:
                            paired = _paired(item, keyed)
                        if key in paired:
                            self._known.learn(inner)
                    elif found is not _PLAIN_KEY and found[0]:
                        self._known.learn(inner)
                    elif type(inner) is dict:
                        stack.append((inner, _names_key_kind(key)))
                    elif type(inner) is list:
                        stack.append((inner, False))
            elif type(item) is list:
                stack.extend((x, False) for x in item if type(x) is dict or type(x) is list)

    @property
    def learned(self) -> int:
        """How many secrets were learned so far (changes when a value teaches a new one)."""
        return self._known.learned

    def redact_text(self, text: str) -> str:
        """One string with every rule applied (and paths shortened, when asked)."""
        for rule in self._rules_needed(text):
            text = rule.pattern.sub(self._replacement(rule), text)
        if self._known and self._known.has(text):
            text = self._known.scrub(text)
        if self.shorten_paths:
            text = self._paths.shorten_all(text)
        return text

    @property
    def secret_keys(self) -> re.Pattern[str]:
        """The pattern that names secret keys (searched in the key lower-cased, ``-`` as ``_``)."""
        keys = self._secret_keys
        if isinstance(keys, str):
            import re

            keys = self._secret_keys = re.compile(keys)
        return keys

    def is_secret_key(self, key: str) -> bool:
        """Whether values under ``key`` are secrets."""
        lowered = key.lower().replace("-", "_")
        if self._default_keys and not any(word in lowered for word in KEY_WORDS):
            return False  # the default pattern needs one of these words: no regex to compile
        return self.secret_keys.search(lowered) is not None

    def shorten_path(self, path: str) -> str:
        """An absolute path outside the working directory as ``~/...`` or its base name."""
        return self._paths.shorten_path(path)

    # -- walk --------------------------------------------------------------------

    def _replacement(self, rule: Rule) -> Replacement:
        """``rule``'s replacement, learning what it replaces (with ``learn_secrets``)."""
        if not self.learn_secrets:
            return rule.replace
        learning = self._learning.get(rule)
        if learning is None:
            replace, learn = rule.replace, self._known.learn_replaced
            # env replaces every NAME=value: only a secret name's value is learned
            named = self.is_secret_key if rule.name == "env" else None

            def learning(match: re.Match[str]) -> str:
                replaced = replace(match)
                learn(match.group(0), replaced, named=named)
                return replaced

            self._learning[rule] = learning
        return learning

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

    def _value(self, value: Any, max_chars: int | None) -> Any:
        kind = type(value)
        if kind is str:
            if max_chars is not None and len(value) > max_chars + _MARGIN:
                return self._cut(value, max_chars)
            text = self.redact_text(value)
            if max_chars is not None and len(text) > max_chars:
                return truncate(text, max_chars)
            return value if text == value else text
        if kind is dict:
            return self._dict(value, max_chars)
        if kind is list:
            out: list[Any] | None = None
            # After a secret's flag (["login", "--password", X]), how its value starts:
            # openssl's -passin/-passout take pass:SECRET (file:PATH says where it is).
            after_flag: str | None = None
            for index, item in enumerate(value):
                if item is None or type(item) in _SCALARS:
                    after_flag = None
                    continue
                if (
                    after_flag is not None
                    and type(item) is str
                    and item[:1] != "-"
                    and item.startswith(after_flag)
                ):
                    after_flag = None
                    if self.learn_secrets:  # known by the flag before it, as a rule's value is:
                        self._known.learn_if_secret(item)  # learned when it looks like a secret
                    new = _FLAG_VALUE
                else:
                    after_flag = None
                    if type(item) is str and item[:1] == "-":
                        if item in _OPENSSL_PASS:
                            after_flag = "pass:"
                        elif is_secret_flag(item):
                            after_flag = ""
                    new = self._value(item, max_chars)
                if new is not item:
                    if out is None:
                        out = list(value)
                    out[index] = new
            return value if out is None else out
        return value

    def _cut(self, value: str, max_chars: int) -> str:
        """A string far longer than ``max_chars``, redacted and cut, scanning only its head.

        The head scanned is ``max_chars`` plus a margin, and the part kept
        ends at least :data:`_RESERVE` characters (after redaction) before
        the end of what was scanned: a secret straddling the cut was seen
        whole, or by a long stretch of it, and shows no readable part. If
        redaction shrank the head that much (a long private key), a head
        twice as long is scanned, and so on: the work follows what is kept.
        """
        reserve = max(_RESERVE, self._known.longest)
        window = max_chars + max(_MARGIN, 2 * reserve)
        while True:
            if window >= len(value):
                text = self.redact_text(value)
                return truncate(text, max_chars) if len(text) > max_chars else text
            head = self.redact_text(value[:window])
            if len(head) >= max_chars + reserve:
                dropped = len(head) - max_chars + len(value) - window
                return f"{head[:max_chars]}…[truncated {dropped} chars]"
            window *= 2

    def _dict(
        self, value: dict[Any, Any], max_chars: int | None, keyed: bool = False
    ) -> dict[Any, Any]:
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
        paired: set[str] | None = None
        for index, (key, item) in enumerate(value.items()):
            found = keys.get(key) if type(key) is str else (False, key)
            if found is None:
                found = self._key(key)
            if found is _PAIRED_KEY:
                if paired is None:
                    paired = _paired(value, keyed)
                secret, new_key = key in paired, key
            else:
                secret, new_key = (False, key) if found is _PLAIN_KEY else found
            if secret:
                new: Any = LEARNED_MARKER
                if self.learn_secrets and item is not None:
                    self._known.learn(item)
            elif item is None or type(item) in _SCALARS:
                new = item
            elif type(item) is dict and type(key) is str and _names_key_kind(key):
                new = self._dict(item, max_chars, keyed=True)
            else:
                new = self._value(item, max_chars)
            if out is None and (new is not item or new_key is not key):
                out = dict(itertools.islice(value.items(), index))
            if out is not None:
                out[new_key] = new
        return value if out is None else out

    def _rules_needed(self, text: str) -> Sequence[Rule]:
        """The rules whose hints ``text`` holds, in order.

        Hints are looked for in the text as it came: a marker written by one
        rule never holds what a later rule must redact. A short text holding
        none is found by one quick test; the rules an ASCII text needs, on a
        squeezed copy, each hint looked for once (a loop over the rules, each
        testing its own hints, cost more than the rules themselves).
        """
        if len(text) <= _LONG and not self._always and not self._triggered(text, text.lower()):
            return ()
        by_hints = self._rule_hints_of_texts
        if by_hints is None:
            from ._screen import RuleHints

            by_hints = self._rule_hints_of_texts = RuleHints(self._rule_hints)
        needed = by_hints.needed(text)
        if needed is None:  # not ASCII
            lowered = text.lower()
            needed = [
                rule
                for rule, hints in self._rule_hints
                if hints is None or any(holds_hint(lowered, hint) for hint in hints)
            ]
        return needed

    def _untouched(self, text: str, max_chars: int | None) -> bool:
        """Whether redaction and truncation certainly leave ``text`` as it is (a quick test)."""
        return (
            (max_chars is None or len(text) <= max_chars)
            and not self._always
            and not self._triggered(text, text.lower())
            and not (self._known and self._known.has(text))
            and (not self.shorten_paths or "/" not in text)
        )

    def _triggered(self, text: str, lowered: str) -> bool:
        """Whether ``text`` holds a hint of some rule (so the rules must look at it).

        A loop of substring tests, but for short texts in a long-lived process
        (past a few hundred texts): one compiled alternation, faster there.
        """
        if len(text) <= _SHORT:
            short = self._short
            if short is not None:
                return short.search(lowered) is not None or lowered.startswith(self._start_hints)
            self._texts += 1
            if self._texts > _COMPILE_AFTER and self._hints:
                import re

                self._short = re.compile("|".join(map(re.escape, self._hints)))
        for hint in self._hints:  # a loop: any() over a generator is twice as slow
            if hint in lowered:
                return True
        return lowered.startswith(self._start_hints)  # a hint's newline: the text's start too

    def _key(self, key: str) -> tuple[bool, str]:
        redacted = self.redact_text(key)
        found = (self.is_secret_key(key), key if redacted == key else redacted)
        if found == (False, key):
            paired = self._default_keys and key.lower() in _PAIRED_NAMES
            found = _PAIRED_KEY if paired else _PLAIN_KEY
        if len(self._keys) < 4096:
            self._keys[key] = found
        return found


def _paired(value: dict[Any, Any], keyed: bool) -> set[str]:
    """The keys of ``value`` secret by what stands beside them, their values strings: a
    ``pass`` beside a ``user``, ``username`` or ``login`` (nodemailer's auth), a ``key``
    of 32 hex digits beside a ``username``, the two alone (Kaggle's), an ``accountKey`` in
    base64 beside an ``accountName`` (Azure storage's), a ``key`` in an object named for a
    kind of key (``keyed``: ``{"Jwt": {"Key": ...}}``), a recovery phrase under its name;
    none of them a placeholder, a count or a path (:func:`_may_be_password`)."""
    names = {key.lower() for key in value if type(key) is str}
    paired = set()
    for key, item in value.items():
        if type(key) is not str or type(item) is not str:
            continue
        name = key.lower()
        if name == "pass":
            found = not names.isdisjoint(_USERS) and _may_be_password(item)
        elif name == "key":
            if keyed:
                found = _may_be_password(item) and len(item) >= 8
            else:  # kaggle.json holds these two and nothing else
                found = names == _KAGGLE and len(item) == 32 and all(c in _HEX for c in item)
        elif name in ("accountkey", "account_key"):
            found = not names.isdisjoint(_ACCOUNT_NAMES) and _base64_key(item)
        elif name in _PHRASE_NAMES:  # as the seed_phrase rule reads it in a text
            found = _seed_phrase(item)
        else:
            continue
        if found:
            paired.add(key)
    return paired


def _seed_phrase(value: str) -> bool:
    """Whether ``value`` is a wallet's recovery phrase: 12 to 24 lower-case words of 3 to 8
    letters, one blank between (BIP-39's; a disassembler's ``{"mnemonic": "mov"}`` is none)."""
    words = value.split(" ")
    return 12 <= len(words) <= 24 and all(
        3 <= len(word) <= 8 and word.isascii() and word.isalpha() and word.islower()
        for word in words
    )


def _may_be_password(value: str) -> bool:
    """Whether ``value`` may be a password: not a fraction or a share, a yes or no, a path or a
    placeholder (a test's ``"pass": "3/5"``, ``"pass": "true"``, ``"Key": "${JWT_KEY}"``,
    ``<key>``, ``{{ key }}``, ``%(key)s``; ``$uperS3cret!`` is one)."""
    stripped = value.strip()
    return (
        len(stripped) >= 4
        and stripped.lower() not in _NOT_PASSWORDS
        and not (all(c.isdigit() or c in "./% " for c in stripped) and not stripped.isdigit())
        and stripped[0] != "/"
        and not _placeholder(stripped)
    )


def _placeholder(value: str) -> bool:
    """``${JWT_KEY}``, ``$JWT_KEY``, ``<key>``, ``{{ key }}``, ``%(key)s``."""
    if value[0] == "$":
        rest = value[1:]
        return (rest[:1] == "{" and rest[-1:] == "}") or (
            rest.replace("_", "").isalnum() and rest.isupper()
        )
    return (
        (value[0] == "<" and value[-1] == ">")
        or (value[:2] == "{{" and value[-2:] == "}}")
        or (value[:2] == "%(" and value[-2:] == ")s")
    )


def _base64_key(value: str) -> bool:
    """Whether ``value`` is 16 characters of base64 or more, a digit among them."""
    body = value.rstrip("=")
    return (
        len(body) >= 16
        and len(value) - len(body) <= 2
        and body.isascii()
        and all(c.isalnum() or c in "+/" for c in body)
        and any(c.isdigit() for c in body)
    )


def _names_key_kind(key: str) -> bool:
    """Whether an object under ``key`` holds a kind of key as its ``Key``: ``Jwt``,
    ``JwtSettings`` (``jwt_settings``), ``JwtBearer``, ``Signing``, ``EncryptionOptions``,
    ``HmacConfig``."""
    name = key.lower()
    for suffix in ("settings", "options", "config", "bearer"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            if name[-1:] in ("_", "-"):  # jwt_settings, jwt-bearer
                name = name[:-1]
            break
    return name in _KEY_KIND_NAMES
