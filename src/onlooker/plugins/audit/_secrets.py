"""What a secret looks like: the redaction rules, the secret key names, the markers.

Standard library only, and neither ``re`` is imported nor a regular
expression compiled before a text needs it: the coding-agent hook imports
this in a fresh interpreter on every tool call, and most payloads hold no
hint of a secret. :class:`~onlooker.plugins.audit.Redactor` applies these.
"""

from __future__ import annotations

from onlooker._shared import ENVELOPE_FIELDS as _ENVELOPE
from onlooker._shared import truncate

TYPE_CHECKING = False  # not typing's: see _writer.py (the hook imports this module)
if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Iterable
    from typing import Final, final

    Replacement = Callable[[re.Match[str]], str]
else:

    def final(cls: type) -> type:
        return cls


__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_SECRET_KEYS",
    "ENVELOPE_FIELDS",
    "Rule",
    "holds_hint",
    "is_secret_flag",
    "is_secret_name",
    "is_secret_variable",
    "marker",
    "truncate",
]


def marker(rule: str) -> str:
    """The text that replaces a secret: ``[REDACTED:<rule>]``."""
    return f"[REDACTED:{rule}]"


def holds_hint(lowered: str, hint: str) -> bool:
    """Whether ``lowered`` (a lower-cased text) holds ``hint``, a hint's newline matching its start."""
    return hint in lowered or (hint[0] == "\n" and lowered.startswith(hint[1:]))


@final
class Rule:
    """One redaction rule: a name (used in the marker) and a regular expression.

    Whatever the pattern matches is replaced by ``[REDACTED:<name>]``; if the
    pattern has a group named ``secret``, only that group is replaced and the
    rest of the match is kept (``Bearer [REDACTED:bearer]``). ``replace``, a
    function of the match, overrides both.

    ``hints``, optional, are literal substrings at least one of which occurs
    in any text the pattern matches, compared without regard to case; with
    them the rule's regular expression is compiled and run only on texts
    that contain one (most texts contain none). A hint that begins with a
    newline also matches at the start of a text (``"\nENV "``: a line's
    start).
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
        if not isinstance(pattern, str):
            import re

            if not isinstance(pattern, re.Pattern):
                raise TypeError(f"rule {name!r}: the pattern must be a str or re.Pattern")
        self.name: Final = name
        self.hints: Final[tuple[str, ...] | None] = None if hints is None else tuple(hints)
        if self.hints is not None and not all(isinstance(h, str) and h for h in self.hints):
            raise ValueError(f"rule {name!r}: hints must be non-empty strings")
        self._source = pattern
        # Compiled on first use: the hook pays only for the rules a text needs.
        self._compiled: re.Pattern[str] | None = None if isinstance(pattern, str) else pattern
        self._replace = replace

    @property
    def pattern(self) -> re.Pattern[str]:
        """The compiled regular expression."""
        compiled = self._compiled
        if compiled is None:
            import re

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
        source = self._source if isinstance(self._source, str) else self._source.pattern
        return f"Rule({self.name!r}, {source!r})"  # not compiled: a bad pattern is shown too


# An unquoted value never ends with ")" or ",", nor with ":" after one: they
# close (or go on from) a call, a subshell or a sentence around it, as in
# f(PASSWORD=x)): or "KEY=x, then". Such a run inside a value is part of it
# when more of the value follows ("pa)ss", "a,b", "$(pwd):$PATH"). Possessive:
# a value is as long as it can be, and is never scanned twice.
_JOIN = r"[),:]++(?=[^{stop}),:])"
# In a shell command, "$(" and a "(" or backtick that opens the value start
# a command (X=$(cat f), arr=(a b), X=`cat f`): the value is not a literal
# there. Anywhere else they are part of it (p@(ss)w0rd, ab`cd). Quotes are
# ordinary characters there (X=abc"def").
_SHELL_STOP = r"\s;&|()`"
_UNQUOTED = rf"(?:[^{_SHELL_STOP},]++|(?<![$=])\(|(?<!=)`|" + _JOIN.format(stop=_SHELL_STOP) + ")*+"
_ENV_ASSIGNMENT = (
    r"""([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|'[^']*'|""" + _UNQUOTED + r""")(?=[ \t]|$)"""
)
# Anywhere in a text, quotes end an unquoted value.
_ANYWHERE_STOP = "\\s;&|\"'"
_ANYWHERE_UNQUOTED = rf"(?:[^{_ANYWHERE_STOP}),]++|" + _JOIN.format(stop=_ANYWHERE_STOP) + ")++"
# Not secrets, and code rather than a value: f(password=None), DEBUG=true, X=''.
_PLACEHOLDER_WORDS = ("None", "null", "nil", "true", "false", "True", "False", "undefined")
_PLACEHOLDERS = frozenset({"", "''", '""', *_PLACEHOLDER_WORDS})


def _redact_env_run(match: re.Match[str]) -> str:
    """The complete assignments of a run redacted; a last one not followed by a blank (so
    not before a command), taken in only so no scan starts inside it again, left as is."""
    import re

    run = match.group("run")
    if not run:
        return match.group(0)
    text = marker("env")
    start = match.start("run") - match.start()
    redacted = re.sub(
        _ENV_ASSIGNMENT,
        lambda m: m.group(0) if m.group(2) in _PLACEHOLDERS else f"{m.group(1)}={text}",
        run,
    )
    return match.group(0)[:start] + redacted + (match.group("tail") or "")


def _redact_env_value(match: re.Match[str]) -> str:
    """An upper-case ``NAME=value`` with its value replaced, unless a placeholder."""
    if match.group("secret") in _PLACEHOLDERS:
        return match.group(0)
    start = match.start("secret") - match.start()
    return match.group(0)[:start] + marker("env")


# A JSON string value inside its quotes (escaped too, as JSON text held in a JSON string has
# them): "(...)"
_JSON_STRING = r"\\?\"((?:[^\"\\\n]|\\[^\"\n])+)\\?\""

# What says a JSON object's "value" is a secret: "sensitive": true, "keyName": "key1"
_SENSITIVE = (
    r"(?:\\?\"sensitive\\?\"[ \t]*:[ \t]*true"
    r"|\\?\"keyName\\?\"[ \t]*:[ \t]*\\?\"key[0-9]\\?\")"
)

# Keys that are secrets by their kind: signingKey, ENCRYPTION_KEY, primaryMasterKey, an
# HMAC's or a JWT's key, Azure's Ocp-Apim-Subscription-Key, Datadog's DD-APPLICATION-KEY.
_KEY_KINDS = r"(?:signing|encryption|master|hmac|jwt|subscription|application|storage[_-]?account)"
# ... but not what names or describes such a key: KmsMasterKeyId, jwt_key_path, hmac_key_length
_KEY_KIND_END = (
    r"(?![a-z]|[_-]?(?:id|arn|path|file|length|size|bits|algorithm|version|name|type|alias|ref)"
    r"s?(?![a-z0-9]))"
)

# What may follow a kind of key's name in the name of the object that holds its Key: JwtSettings,
# jwt_settings, JwtBearer, HmacOptions
_KEY_KIND_SUFFIX = r"(?:[_-]?(?i:settings|options|config|bearer))?"

# A name that holds a secret, inside an assignment: password, db_password,
# "api_key", clientSecret, accessToken ... (not max_tokens, token_count).
# The whole run of name characters, holding a secret word somewhere: looked for
# ahead, then the run taken at once (never split again at each secret word of a
# name made of many: "token_token_...").
_SECRET_NAME = (
    r"(?=[A-Za-z0-9_.-]*?(?i:pass(?:word|wd|phrase)|secret|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|"
    + _KEY_KINDS
    + r"[_-]{0,2}key"
    + _KEY_KIND_END
    + r"|credentials?|erlang[_-]?cookie"
    r"|token(?![a-z]|_(?:count|usage|limit|budget|type))"
    # ... or a name that ends in a word "pass" (ansible_become_pass, DB_PASS; not bypass)
    r"|(?<=[_.-])pass(?![A-Za-z0-9_.-])))"
    r"[A-Za-z0-9_.-]++"
)
# A part of an attribute chain in code: snake_case (digits too: api_v2), camelCase and
# CamelCase whose digits end a hump before the next (OAuth2Token, getV2Token), UPPER_CASE.
# Not a password's Summer2024.Fall nor a token's kUb3T0k3nV4lu3.xQz9Lm2Wn7.
# (atomic, to a part's end: "A", "AB_C" and "A1B" read as UPPER_CASE and as CamelCase, and
# a chain of such parts that is no value after all doubled the ways a search tried at each)
_IDENTIFIER = (
    r"(?>(?:[a-z_][a-z0-9_]*(?:[A-Z][a-z_]*[0-9]*)*|[A-Z][A-Z0-9_]*"
    r"|[A-Z][A-Za-z_]*(?:[0-9]+[A-Z][A-Za-z_]*)*)(?![A-Za-z0-9_]))"
)
# What is assigned is not a secret when it is code or a placeholder: a call,
# an index, an attribute chain, a variable reference, a type, a literal.
_NOT_A_VALUE = (
    r"(?!(?:" + "|".join(_PLACEHOLDER_WORDS) + r"|str|string|bytes|int|bool"
    r"|number|any|Any|SecretStr|Optional)(?![\w.]))(?![$%<{=])"
    r"(?!" + _IDENTIFIER + r"(?:\." + _IDENTIFIER + r")+(?![\w.-]))"
)
_QUOTED = (
    r"\"(?P<dq>(?:[^\"\\\n]|\\.)+)\"|'(?P<sq>(?:[^'\\\n]|\\.)+)'"
    # quoted inside a JSON string (JSON text held in a JSON value): \"api_key\": \"...\"
    # (its own escapes doubled: \\\\ for a backslash, \\\" for a quote, \\u00e4 ...)
    r"|\\\"(?P<edq>(?:[^\"\\\n]|\\\\(?:\\\\|\\\"|[^\"\\\n]))+)\\\""
)
_BARE = _NOT_A_VALUE + r"(?!\\)[^\s,;'\"`(){}\[\]#]+(?![(\[.\w])"
# The value of a "pass" (or a "pwd") that a user beside it makes a password (see the rule):
# quoted (as in _QUOTED, the groups unnamed), or bare to the line's end (INI, YAML) with a
# digit or a symbol, not a number
_PAIRED_VALUE = (
    r"(?:\"((?:[^\"\\\n]|\\.)+)\"|'((?:[^'\\\n]|\\.)+)'"
    r"|\\\"((?:[^\"\\\n]|\\\\(?:\\\\|\\\"|[^\"\\\n]))+)\\\"|"
    + _NOT_A_VALUE
    # (bounded: in a long run of "user:pass:...", each "pass" read the rest again)
    + r"(?![-+]?[0-9]+(?:[./][0-9]+)?%?[ \t]*(?:\r?\n|$)|/)(?=[^\s,;'\"`]{0,255}[0-9/+=!@#$%^&*~-])"
    r"([^\s,;'\"`(){}\[\]#]{1,256}+)(?=[ \t]*(?:\r?\n|$)))"
)
_PASS = (
    # (the name first, then what stands before it: a search jumps to its first letter)
    r"(?i:pass)(?<![\w.$-](?i:pass))(?:\\?[\"'])?[ \t]*(?:=>|[:=])[ \t]*" + _PAIRED_VALUE
)
# MongoDB's pwd beside its user (db.createUser({user: "app", pwd: "..."}), YAML's pwd:): a
# colon only, and not a directory (a process's {"user": "root", "pwd": "/srv"}, "$HOME"; a
# password may start with a "$": $uperS3cret!)
_PWD = (
    r"(?i:pwd)(?<![\w.$-](?i:pwd))(?:\\?[\"'])?[ \t]*:[ \t]*"
    r"(?!(?:\\?[\"'])?(?:[/~.]|[A-Za-z]:[\\/]|\$(?:\{|[A-Z_][A-Z0-9_]*+(?![a-z0-9]))))"
    + _PAIRED_VALUE
)
# After YAML's `: `, a value with round brackets in it (Xk9(2)aZ!, p@(ss)w0rd) is
# one value, unless it is a call and nothing more (make_password(8)).
_BRACKETED = (
    _NOT_A_VALUE + r"(?=[^\s,;'\"`#]*[()])(?![A-Za-z_][\w.]*\([^\s)]*\)(?:[\s,;#)\]}]|$))"
    r"[^\s,;'\"`#\[\]{}]++(?<!:)"  # not up to the next name's `:`
)
# After a tight `=`, a value with round brackets in it (p@(ss)w0rd) is one value too,
# unless it starts as a call or an index does (Field(default=None), env["X"]); only
# brackets it opens are its own (the ")" of f(password=p@(ss)w0rd) is the call's).
_PARENTHESIZED = (
    _NOT_A_VALUE + r"(?![A-Za-z_][\w.]*[(\[])(?=[^\s,;'\"`#()]*\()"
    r"(?:[^\s,;'\"`#()\[\]{}]|\([^\s,;'\"`#()\[\]{}]*\))++"
)
# The operator: a tight `=` (.env, shell, keyword arguments) or YAML's `: `
# before any value; with spaces around (code), only before a quoted value.
_SECRET_ASSIGNMENT = (
    # A name starts after a character no name holds: scanning from inside one (each "-" of
    # "a-a-...-token") would read it again from every such start, in quadratic time.
    # ... or after a diff's "-" that starts a line: the removed line -password = "...".
    r"(?<![A-Za-z0-9_.])(?:(?<!-)|(?<=^-)|(?<=\n-))(?:\\?[\"'])?" + _SECRET_NAME + r"(?:\\?[\"'])?"
    r"(?::[ \t]+(?P<bracketed>" + _BRACKETED + r")"
    r"|=(?P<parenthesized>" + _PARENTHESIZED + r")"
    # INI and credentials files: name = value to the end of the line, a value that is not
    # a word of code (it holds a digit or a symbol): aws_secret_access_key = wJalr/K7MD...
    r"|[ \t]+=[ \t]+(?P<ini>" + _NOT_A_VALUE + r"(?=\S*[0-9/+=!@#$%^&*~-])"
    r"(?![-+]?[0-9]+(?:\.[0-9]+)?[ \t]*(?:\r?\n|$))"  # a number: a setting, not a secret
    r"[^\s,;'\"`(){}\[\]#]+)(?=[ \t]*(?:\r?\n|$))"
    # =>, := and spaced = / : before a quote first: a bare value is never ">" or "=".
    r"|(?:[ \t]*(?::=|=>|[:=])[ \t]*(?=\\?[\"'])|=|:[ \t]+)"
    r"(?:" + _QUOTED + r"|(?P<bare>" + _BARE + r")))"
)


# The name of a name/value pair that holds a secret: DB_PASSWORD, /prod/db/password,
# api-token, ClearTextPassword (not max_tokens).
_SECRET_VALUE_NAME = (
    r"(?=[\w./-]*?(?i:pass(?:word|wd|phrase)|secret|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|" + _KEY_KINDS + r"[_-]{0,2}key" + _KEY_KIND_END + r"|credentials?"
    r"|token(?![a-z]|_(?:count|usage|limit|budget|type))))"
    r"[\w./-]++"
)

# A character of the command a scan reads: not past a line's end (but a continued line's, a
# "\\" then a newline, as scripts and docs break a long command), nor a ";", "&" or "|" (but an
# escaped one: find -exec ... \;). A "\" before a letter is read alone: "\curl" is the
# command again, where a scan stops (read with its letter, a line of them was read whole
# from each "curl").
_BLANKS = r"(?:[ \t]|\\\r?\n)+"  # blanks, a continued line's break among them
_ON_THE_COMMAND = r"(?:[^\n;&|\\]|\\\r?\n|\\[^\n\w]|\\(?=\w))"
# One of htpasswd's options: -b, -nbB, -5, and -C COST / -r ROUNDS with their number.
# (atomic: "-C5" read both ways, each option doubled the ways a failing search tried)
_HTPASSWD_OPTION = r"(?:[ \t]+-(?>[a-zA-Z25]*[Cr][ \t]*[0-9]+|[a-zA-Z25]+))"

# Between a .netrc entry's tokens: blanks and line breaks, a line's number after a break.
_NETRC_BLANK = r"(?:[ \t]*\r?\n(?:[ \t]*[0-9]+\t)?|[ \t])++"
_NETRC_LOGIN = _NETRC_BLANK + r"(?:login|account)[ \t]"


def _redact_assignment(match: re.Match[str]) -> str:
    """The assignment with its value (inside its quotes, when quoted) replaced."""
    groups = ("dq", "sq", "edq", "bare", "bracketed", "parenthesized", "ini")
    return _redact_group(match, "secret_assignment", groups)


def _redact_quoted(match: re.Match[str]) -> str:
    """A secret assignment with its quoted value (:data:`_QUOTED`) replaced inside its quotes."""
    return _redact_group(match, "secret_assignment", ("dq", "sq", "edq"))


def _redact_group(match: re.Match[str], rule: str, groups: tuple[str | int, ...]) -> str:
    """The match with the first of ``groups`` that took part replaced by ``rule``'s marker."""
    group = next(name for name in groups if match.group(name) is not None)
    start, end = match.start(group) - match.start(), match.end(group) - match.start()
    whole = match.group(0)
    return whole[:start] + marker(rule) + whole[end:]


# What makes a "pass" a password (_PASS), a "key" Kaggle's, an "accountKey" Azure's: a user's
# name or the account's beside it (in the text lower-cased; a literal first, that a search
# jumps to, the name's start checked behind it)
_USER = (
    r"(?:user(?<![\w.$-]user)(?:name)?|login(?<![\w.$-]login)|account(?<![\w.$-]account)_?name)"
    r"(?:\\?[\"'])?[ \t]*(?:=>|[:=])"
)
_USER_PATTERN: list[re.Pattern[str]] = []  # compiled when first needed


def _redact_paired(match: re.Match[str]) -> str:
    """A "pass" (the groups of _PASS) or MongoDB's "pwd" (11 to 14) redacted when a user's
    name (user, username, login) stands beside it, Kaggle's "key" (the fifth group) when a
    quoted "username" does, an "accountKey" (the sixth) when an "accountName" does: within
    200 characters before or after it, no bracket between (one object, one INI section); a
    kind of key's "Key" (the groups 7 to 10: its JSON and YAML forms) always. The text
    around is looked at here, one bounded search a value: a pattern that reached back from
    every user's name read 200 characters again from each."""
    if all(match.group(group) is None for group in (7, 8, 9, 10)):
        text, start, end = match.string, match.start(), match.end()
        low, high = max(0, start - 200), min(len(text), end + 200)
        for bracket in "{}[]":
            low = max(low, text.rfind(bracket, low, start) + 1)
            found = text.find(bracket, end, high)
            high = high if found < 0 else found
        around = text[max(0, low - 1) : start].lower() + "\n" + text[end:high].lower()
        kaggle, account = match.group(5) is not None, match.group(6) is not None
        if ("account" if account else "user") not in around and "login" not in around:
            return match.group(0)
        if not _USER_PATTERN:
            import re

            _USER_PATTERN.append(re.compile(_USER))
        for name in _USER_PATTERN[0].finditer(around, 1 if low else 0):
            at, word = name.start(), name.group(0)
            if account != word.startswith("account") or (
                kaggle and not word.startswith("username")
            ):
                continue
            if around[at - 1 : at] in ('"', "'"):  # a quoted name: what stands before its quote
                at -= 2 if around[at - 2 : at - 1] == "\\" else 1
            elif kaggle:  # (Kaggle's is JSON)
                continue
            before = around[at - 1 : at]  # a name of its own: no word, dot or dash before it
            if not before or not (before.isalnum() or before in "_.$-"):
                break
        else:
            return match.group(0)
    return _redact_group(match, "secret_assignment", tuple(range(1, 15)))


# A table's row names a secret when its name holds the word (DB_PASSWORD, SECRET_KEY_BASE,
# GITHUB_TOKEN_2, secret_id), but not when it ends with what names a setting (Vault's
# token_ttl, token_policies, secret_id_num_uses; password_min_length, token_endpoint); and
# holds one, in Vault's tables, when its value is no setting's (a number, a duration, true,
# <nil>, a list: bind_secret_id true)
_TABLE_NAME = (
    r"(?![\w./-]*?[_.-](?i:ttl|policies|accessor|uses|period|type|cidrs|duration|renewable"
    r"|endpoint|url|uri|file|path|length|count|enabled|version)(?![\w./-]))" + _SECRET_VALUE_NAME
)
_SETTING = r"(?:[-+]?[0-9]+(?:\.[0-9]+)?[smhd]?|(?i:true|false|null|none|n/a)|<nil>|-|(?:map)?\[[^\]\n]*\])"
# A row of a table of names and values (Vault's) whose name holds a secret: its value replaced
# (not a number: a setting's, password_min_length 12)
_TABLE_ROW = (
    r"(?m:^)([ \t]*" + _TABLE_NAME + r"[ \t]+)(?!" + _SETTING + r"[ \t]*(?:\r?\n|$))\S[^\r\n]*"
)


def _redact_table(match: re.Match[str]) -> str:
    """A table's secret values replaced: a row of Doppler's (the group ``row``), or those of
    the rows of Vault's (the group ``rows``, each a name and its value, :data:`_TABLE_ROW`)."""
    if match.group("row") is not None:
        return _redact_group(match, "name_value", ("row",))
    return _sub_in_group(match, "rows", _TABLE_ROW, lambda row: row.group(1) + marker("name_value"))


def _sub_in_group(match: re.Match[str], group: str, pattern: str, replace: Replacement) -> str:
    """``match``'s text with what ``pattern`` finds inside its group ``group`` replaced."""
    import re

    whole, start, end = match.group(0), match.start(group), match.end(group)
    inner = re.sub(pattern, replace, match.string[start:end])
    return whole[: start - match.start()] + inner + whole[end - match.start() :]


# The secret keys of rclone config create's KEY VALUE pairs (key=value too)
_RCLONE_PAIR = (
    r"(?<![^ \t])(?:pass(?:word2?)?|(?=[\w-]*?secret)[\w-]++|token|key|sas_url)(?:[ \t]+|=)"
    r"(?!-|\[REDACTED:|[\"']?\$)(?P<secret>\"[^\"]*\"|'[^']*'|[^\s\"']+)"
)


def _redact_rclone(match: re.Match[str]) -> str:
    """rclone config create's pairs (the group ``rest``) with each secret key's value replaced."""
    return _sub_in_group(
        match,
        "rest",
        _RCLONE_PAIR,
        lambda pair: _redact_group(pair, "password_option", ("secret",)),
    )


# A line's start, after its number as Claude Code's Read and cat -n number lines, and blanks
_LINE_START = r"(?m:^)(?:[ \t]*[0-9]+\t)?[ \t]*"

# Where a token starts: not inside a word, but just after an escape (\n, \t, \r) of
# text held in a JSON string ("...\nHRKU-...").
_START = r"(?:(?<![A-Za-z0-9])|(?<=\\[ntr]))"

# Decimal digits in base64: three of them are four characters, two are three (the first
# part of a Discord bot token is its id so written)
_DIGITS3 = r"(?:[MNO][DTjz][AEIMQUYcgk][w-z0-5])"
_DIGITS2 = r"[MNO][DTjz][AEIMQUYcgk]"

_NAME_HINTS = (
    "passw", "passphrase", "_pass", "secret", "token", "api_key", "api-key", "apikey",
    "access_key", "access-key", "accesskey", "private_key", "private-key", "privatekey",
    "credential",
    # (the kinds of key: _KEY_KINDS)
    "signing", "encryption", "masterkey", "master_key", "master-key", "hmac", "jwt",
    "subscription", "applicationkey", "application_key", "application-key", "erlang",
    "storageaccountkey", "storage_account_key", "storage-account-key",
)  # fmt: skip

DEFAULT_RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)",
        hints=["-----begin"],
    ),
    Rule("anthropic_key", r"sk-ant-[A-Za-z0-9_-]{8,}", hints=["sk-ant-"]),
    Rule("openai_key", r"sk-(?<![A-Za-z0-9]sk-)[A-Za-z0-9_-]{16,}", hints=["sk-"]),
    Rule(
        "github_token",
        r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}",
        hints=["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
    ),
    Rule("aws_access_key", r"(?:AKIA|ASIA)[0-9A-Z]{16}", hints=["akia", "asia"]),
    # the token aws ecr get-login-password prints: base64 of {"payload":"...
    Rule(
        "aws_ecr_token", _START + r"eyJwYXlsb2FkIjoi[A-Za-z0-9+/=]{40,}", hints=["eyjwyxlsb2fkijoi"]
    ),
    Rule("google_api_key", r"AIza[0-9A-Za-z_-]{30,}", hints=["aiza"]),
    Rule("npm_token", r"npm_[A-Za-z0-9]{20,}", hints=["npm_"]),
    Rule(
        "gitlab_token",
        # (personal, pipeline trigger, deploy, runner and CI job tokens: each hint costs
        # every text a search, so GitLab's rarer prefixes are left out)
        r"gl(?:pat|ptt|dt|rt|cbt)-[A-Za-z0-9_-]{20,}",
        hints=["glpat-", "glptt-", "gldt-", "glrt-", "glcbt-"],
    ),
    Rule(
        "stripe_key",
        r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",
        hints=["sk_live_", "sk_test_", "rk_live_", "rk_test_"],
    ),
    Rule("huggingface_token", r"hf_[A-Za-z]{30,}", hints=["hf_"]),
    Rule("pypi_token", r"pypi-AgE[A-Za-z0-9_-]{20,}", hints=["pypi-age"]),
    Rule("sendgrid_key", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", hints=["sg."]),
    # Tokens whose prefix names their service: none starts inside a word.
    Rule(
        "vault_token",
        _START + r"hv[sbr]\.[A-Za-z0-9_-]{24,}",
        hints=["hvs.", "hvb.", "hvr."],
    ),
    Rule("digitalocean_token", _START + r"do[opr]_v1_[a-f0-9]{64}", hints=["_v1_"]),
    Rule("shopify_token", _START + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", hints=["shp"]),
    Rule("databricks_token", _START + r"dapi[a-f0-9]{32}(?:-[0-9]+)?", hints=["dapi"]),
    Rule(
        "grafana_token",
        _START + r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}=*)",
        hints=["glsa_", "glc_"],
    ),
    Rule("linear_key", _START + r"lin_(?:api|oauth)_[A-Za-z0-9]{32,}", hints=["lin_"]),
    Rule("stripe_webhook_secret", _START + r"whsec_[A-Za-z0-9+/]{24,}", hints=["whsec_"]),
    Rule(
        "sentry_token",
        _START + r"(?:sntry[su]_[A-Za-z0-9+/=_]{32,}|sntrys_eyJ[A-Za-z0-9+/=_]{20,})",
        hints=["sntry"],
    ),
    Rule("supabase_token", _START + r"sbp_[a-f0-9]{40}", hints=["sbp_"]),
    Rule("dockerhub_token", _START + r"dckr_pat_[A-Za-z0-9_-]{20,}", hints=["dckr_pat_"]),
    Rule("groq_key", _START + r"gsk_[A-Za-z0-9]{40,}", hints=["gsk_"]),
    Rule("langsmith_key", _START + r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}", hints=["lsv2_"]),
    Rule("netlify_token", _START + r"nfp_[A-Za-z0-9]{30,}", hints=["nfp_"]),
    Rule(
        "tailscale_key",
        _START + r"tskey-(?:auth|api|client|scim|webhook)-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,}",
        hints=["tskey-"],
    ),
    Rule("pulumi_token", _START + r"pul-[a-f0-9]{40}", hints=["pul-"]),
    Rule(
        "doppler_token",
        _START + r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9_.-]{40,}",
        hints=["dp."],
    ),
    Rule("atlassian_token", _START + r"ATATT3[A-Za-z0-9_=-]{40,}", hints=["atatt3"]),
    Rule("newrelic_key", _START + r"NRAK-[A-Z0-9]{27}", hints=["nrak-"]),
    Rule("heroku_key", _START + r"HRKU-[A-Za-z0-9_-]{40,}", hints=["hrku-"]),
    Rule("age_key", r"AGE-SECRET-KEY-1[0-9A-Z]{58}", hints=["age-secret-key-"]),
    Rule(
        "google_oauth",
        # (and a refresh token: 1//0...)
        _START + r"(?:ya29\.[A-Za-z0-9_-]{20,}|GOCSPX-[A-Za-z0-9_-]{20,}|1//0[A-Za-z0-9_-]{40,})",
        hints=["ya29.", "gocspx-", "1//0"],
    ),
    # A wallet's recovery phrase (BIP-39: 12 to 24 lower-case words) after a name that says
    # so: mnemonic: '...' (hardhat.config.js), MNEMONIC="...", seed_phrase = "...",
    # fromMnemonic('...'): the whole value (a disassembler's {"mnemonic": "mov"} stays)
    Rule(
        "seed_phrase",
        r"(?i:mnemonic|(?:seed|recovery)[_ -]?phrase)[\"']?[ \t]*(?:=>|[:=(])[ \t]*[\"'`]?"
        # (the whole value: to its quote or the line's end; prose goes on, or ends in a ".")
        r"(?:(?P<secret>[a-z]{3,8}(?: [a-z]{3,8}){11,23})(?=[\"'`]|[ \t]*(?:\r?\n|$))"
        # ... or a YAML block scalar's indented lines (mnemonic: > then the words)
        r"|[|>][-+]?[ \t]*\r?\n[ \t]+"
        r"(?P<block>[a-z]{3,8}(?:(?:[ \t]+|[ \t]*\r?\n[ \t]+)[a-z]{3,8}){11,23})"
        # (its lines all: prose that goes on, a next line's "them.", is none; a key may follow)
        r"[ \t]*(?=$|\r?\n(?![ \t]+[a-z]+(?![\w:-]))))",
        lambda match: _redact_group(match, "seed_phrase", ("secret", "block")),
        hints=["mnemonic", "phrase"],
    ),
    # Webhook URLs whose path is the credential: Slack's, Discord's, a Telegram bot's.
    Rule(
        "webhook_url",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9/_-]{20,})"
        r"|discord(?:app)?\.com/api/webhooks/[0-9]+/(?P<discord>[A-Za-z0-9_-]{20,})",
        lambda match: _redact_group(match, "webhook_url", ("secret", "discord")),
        hints=["hooks.slack.com", "/api/webhooks/"],
    ),
    Rule(
        "telegram_bot_token",
        _START + r"(?:bot)?[0-9]{6,12}:(?P<secret>AA[A-Za-z0-9_-]{33})(?![A-Za-z0-9_-])",
        hints=[":aa"],
    ),
    # A Discord bot token: the bot's id (a snowflake of 17 to 20 digits) in base64url, then
    # a timestamp and an HMAC, "." between. Digits in base64 fall in a fixed pattern, four
    # characters for three digits: the first part is told by its shape, not by a prefix.
    # (hints: the ids of 19 digits, "1..." in base64, every bot made since 2022; an older
    # token is found beside the word "discord" or "token")
    Rule(
        "discord_token",
        # (17 digits, 18, 19 or 20: five groups of three, then two, or a sixth, then none,
        # one or two)
        # (its first letter first, then what stands before it: a search jumps to the letter)
        r"[MNO](?:(?<![A-Za-z0-9_-].)|(?<=\\[ntr].))[DTjz][AEIMQUYcgk][w-z0-5]"
        + _DIGITS3
        + "{4}(?:"
        + _DIGITS2
        + "|"
        + _DIGITS3
        + "(?:"
        + _DIGITS2
        + r"|[MNO][AQgw])?)\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,}+",
        # ("mt" alone: ten hints "mta" ... "mtk" made the screen of every event 5% dearer)
        hints=["discord", "token", "mt"],
    ),
    # A Twilio auth token (32 hex digits) after its account's SID (AC and 32 hex digits) on
    # the same line: Client('AC...', '...'), AC...:... (hint: the word "twilio"; "ac" is in
    # every text)
    Rule(
        "twilio_token",
        # (the token bounded by no hex digit, nor a letter: not the SID's own digits)
        r"AC(?<![A-Za-z0-9]AC)[0-9a-f]{32}(?![0-9A-Za-z])[^\r\n]{0,80}?"
        r"(?<![0-9A-Za-z])(?P<secret>[0-9a-f]{32})(?![0-9A-Za-z])",
        hints=["twilio"],
    ),
    # The body of a private key whose BEGIN line was not read (a read from line 2 on), its
    # lines numbered or not (cat -n, Claude Code's Read). A body starts a line that does not
    # follow one of its lines (the lookbehinds): each block is read once, not once a line.
    Rule(
        "private_key",
        # (a line's number starts after its blanks, not inside them: each start in a long
        # run of blanks read the rest of the run again, in quadratic time)
        r"(?<![A-Za-z0-9+/=])(?<![A-Za-z0-9+/=]\n)"
        r"(?:(?:(?<![ \t])[ \t]*+[0-9]+\t)?[A-Za-z0-9+/=]{40,}\r?\n)++"
        r"(?:[ \t]*[0-9]+\t)?[A-Za-z0-9+/=]{0,80}\r?\n?(?:[ \t]*[0-9]+\t)?"
        r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
        hints=["private key-----", "private key block-----"],
    ),
    # Azure storage and service-bus connection strings: AccountKey=...;
    Rule(
        "connection_string",
        r"(?i:AccountKey|SharedAccessKey|SharedAccessSignature|(?<=;)[ \t]*pwd)"
        # (ODBC braces a value that holds a ";"; bounded: each "{" with no "}" after it
        # was read to the text's end, in quadratic time)
        # ("}}" inside is an escaped "}", as ODBC writes one)
        r"=(?P<secret>\{(?:[^}\r\n]|\}\}){0,256}+\}|[^;\s\"']+)",
        hints=["accountkey=", "sharedaccesskey=", "sharedaccesssignature=", "pwd="],
    ),
    # The signature of a signed URL (Azure SAS, S3 presigned): ?sig=..., &X-Amz-Signature=...
    Rule(
        "url_signature",
        r"[?&](?i:sig|x-amz-signature|signature)=(?P<secret>[^&\s\"'#]+)",
        hints=["sig=", "signature="],
    ),
    Rule(
        "cookie",
        # (a cookie's name, then =: "cookie: str" in code, and prose, are no header)
        r"(?i:\b(?:set-)?cookie)[ \t]*:[ \t]*"
        r"(?P<secret>[A-Za-z0-9_.!#$%&*+^`|~-]+=[^\r\n\"']*)",
        hints=["cookie"],
    ),
    # Passwords given as options: curl -u user:pass, mysql -pPASS, sshpass -p PASS,
    # docker login -p PASS, aws configure set aws_secret_access_key VALUE. Each command
    # is read up to where it starts again at most (a later search starts there): linear
    # on "curl curl ...".
    Rule(
        "password_option",
        r"\b(?:curl\b(?:(?!\bcurl\b)"
        + _ON_THE_COMMAND
        + r")*?[ \t](?:-u|--user)(?:[ \t]+|=)[\"']?[^\s:\"']*:"
        r"(?P<curl>[^\s\"']+)"
        r"|mysql(?<![\w/.-]mysql)(?:dump|admin|import|show|check|sh)?\b"  # the command, no path
        r"(?:(?!\bmysql)" + _ON_THE_COMMAND + r")*?[ \t]-p"
        r"(?P<mysql>[^\s\"']+)"
        # (and the other registry clients' login, and Azure's: az login -u APP -p SECRET)
        r"|(?:sshpass"
        + _BLANKS
        + r"|(?P<client>docker|podman|buildah|nerdctl|helm[ \t]+registry|az)"
        r"[ \t]+login\b(?:(?!\b(?P=client)\b)" + _ON_THE_COMMAND + r")*?[ \t])-p[ \t]*"
        r"(?P<p>\"[^\"]*\"|'[^']*'|[^\s\"']+)"
        r"|aws[ \t]+configure[ \t]+set[ \t]+(?=\S*?(?i:secret|key|token|password))\S++[ \t]+"
        r"(?P<aws>[^\s\"']+)"
        # aws configure's answers given on its input, the secret key second: printf 'AKIA...
        # \nSECRET\n...' | aws configure (echo -e too), aws configure <<EOF (a here-document's
        # second line), aws configure <<< $'AKIA...\nSECRET' (the scan to "<<" stops at the next
        # "aws configure": from each of a line's many, it read the rest of the line again)
        r"|(?:(?:printf|echo(?:[ \t]+-[neE]+)*)[ \t]+(?P<q>[\"'])"
        r"(?=[^\"']*(?P=q)[ \t]*\|[ \t]*aws[ \t]+configure\b(?![ \t]+[a-z]))"
        r"|aws[ \t]+configure\b(?:(?!aws[ \t]+configure\b)[^\n;&|<])*+<<<[ \t]*\$?[\"'])"
        r"[^\"'\\\n]*\\n(?P<aws_input>[^\s\"'\\]+)"
        r"|aws[ \t]+configure\b(?:(?!aws[ \t]+configure\b)[^\n;&|<])*+<<-?[ \t]*"
        r"[\"']?\w+[\"']?[ \t]*\r?\n[^\r\n]*\r?\n[ \t]*"
        r"(?P<aws_heredoc>[^\s\"']+)"
        # redis-cli -a PASS (--pass), mongosh/mongo -p PASS (a value, not the next option)
        r"|(?:redis-cli\b(?:(?!\bredis-cli\b)" + _ON_THE_COMMAND + r")*?[ \t](?:-a|--pass)"
        r"|mongo(?:sh)?\b(?<![\w/.-]mongo)(?<![\w/.-]mongosh)"
        r"(?:(?!\bmongo(?:sh)?\b)" + _ON_THE_COMMAND + r")*?[ \t]-p)"
        r"[ \t]+(?!-)(?P<option>\"[^\"]*\"|'[^']*'|[^\s\"']+)"
        # htpasswd -b FILE USER PASS, htpasswd -nb USER PASS (-b: the password on the line;
        # -C COST and -r ROUNDS take a number; a password may be quoted)
        r"|htpasswd(?=" + _HTPASSWD_OPTION + r"*?[ \t]+-[a-zA-Z25]*b)"
        r"(?P<no_file>(?="
        + _HTPASSWD_OPTION
        + r"*?[ \t]+-[a-zA-Z25]*n))?"
        + _HTPASSWD_OPTION
        + r"++(?(no_file)|[ \t]+[^\s;&|]+)[ \t]+[^\s;&|]+[ \t]+"
        r"(?P<htpasswd>\"[^\"]*\"|'[^']*'|[^\s\"';&|]+)"
        # poetry config [--local] http-basic.REPO USER PASS, poetry config pypi-token.REPO TOKEN
        r"|poetry[ \t]+config(?:[ \t]+-[-a-z]+)*+[ \t]+"
        r"(?:http-basic\.\S+[ \t]+\S+|pypi-token\.\S+)[ \t]+"
        r"(?P<poetry>\"[^\"]*\"|'[^']*'|[^\s\"']+))",
        lambda match: _redact_group(
            match,
            "password_option",
            (
                "curl",
                "mysql",
                "p",
                "aws",
                "aws_input",
                "aws_heredoc",
                "option",
                "htpasswd",
                "poetry",
            ),
        ),
        hints=[
            *("curl", "mysql", "sshpass", "docker", "configure"),
            *("podman", "buildah", "nerdctl", "registry login", "az login"),
            *("redis-cli", "mongo", "htpasswd", "poetry"),
        ],
    ),
    # A JSON Web Token: base64url JSON header, payload and (maybe no) signature.
    # It may start inside a run of base64url (token_eyJ..., id_token%3DeyJ... in an encoded
    # URL): the run is read once, from its start (or after an escape of text held in a JSON
    # string), up to its first "eyJ", which nothing after can move (the atomic group). From
    # each "eyJ" inside a long run, the scan went to the run's end again, in quadratic time:
    # 24 s for 300 KB of base64 JSON.
    Rule(
        "jwt",
        r"(?:(?<![A-Za-z0-9_-])|(?<=\\[ntr]))(?>(?P<pre>[A-Za-z0-9_-]*?)(?=eyJ[A-Za-z0-9_-]{4}))"
        r"eyJ[A-Za-z0-9_-]*+\.eyJ[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*)?",
        lambda match: match.group("pre") + marker("jwt"),
        hints=["eyj"],
    ),
    Rule(
        "slack_token",
        r"xox[a-z]-[A-Za-z0-9-]{6,}|" + _START + r"xapp-[0-9]-[A-Za-z0-9-]{10,}",
        hints=["xox", "xapp-"],
    ),
    Rule(
        "authorization",
        r"(?i:authorization)\"?\s*[:=]\s*\"?(?P<secret>(?:[A-Za-z]+\s+)?[^\s,;\"']+)",
        hints=["authorization"],
    ),
    # A bearer token: 6+ token characters with a digit or symbol among them,
    # or 20+ letters (so "the bearer shall" stays prose).
    Rule(
        "bearer",
        r"(?:[Bb]earer|BEARER)\s+(?P<secret>(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{6,}"
        r"|[A-Za-z]{20,})",
        hints=["bearer"],
    ),
    Rule(
        "url_credentials",
        # The password may hold "/" (base64); a port before a path ("host:8080/a@b") is
        # none. It never holds "://", where the next URL starts: each scan stops there.
        # The scheme is taken from its start only: from inside a long run of letters, each
        # start would scan the whole run again (quadratic time).
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://"
        # (not an IPv6 host, "[::1]"; a password holds no "?" or "#", a query's marks)
        # An "@" left unescaped in a password (p@ss) is the password's when another follows
        # before a blank or a "/": the last one ends it.
        r"(?P<secret>[^/\s:@\"'\[]*:(?![0-9]+/)(?:[^\s@\"':/?#]|/|:(?!//)|@(?=[^\s/\"'@]*@))+"
        # ... or a token alone as the user (git's https://TOKEN@github.com/...): 36 letters and
        # digits or more, both (a user name is shorter: git@, alice@; a Sentry DSN's public
        # key, 32 hex digits, stays)
        r"|(?=[A-Za-z_-]*[0-9])(?=[0-9_-]*[A-Za-z])(?:[A-Za-z0-9]{1,12}[_-][A-Za-z0-9]{32,}+|[A-Za-z0-9]{36,}+))@",
        hints=["://"],
    ),
    # npm's per-registry credentials: //registry.example/:_authToken=...
    # (a quoted value, as `npm config list` and a hand-written .npmrc have it, is the value
    # inside its quotes; the "=" of "KEY = VALUE" is never the value)
    Rule(
        "npmrc_auth",
        r":_(?:authToken|auth|password)\b(?:[ \t]*=[ \t]*|[ \t]+)(?!\[REDACTED:)"
        r"(?:\"(?P<dq>[^\"\r\n]+)\"|'(?P<sq>[^'\r\n]+)'|(?P<secret>[^\s\"'=][^\s\"']*))",
        lambda match: _redact_group(match, "npmrc_auth", ("dq", "sq", "secret")),
        hints=[":_"],
    ),
    # ... and the top-level ones of an .npmrc: _auth=..., _authToken=..., on a line's start
    Rule(
        "npmrc_auth",
        # (not code, _password = kwargs.pop(...), nor npm's ${NPM_TOKEN}: an unquoted
        # value ends its line)
        _LINE_START
        + r"_(?:authToken|auth|password)[ \t]*=[ \t]*(?!\[REDACTED:)"
        + _NOT_A_VALUE
        + r"(?:\"(?P<dq>[^\"\r\n]+)\"|'(?P<sq>[^'\r\n]+)'|(?P<secret>[^\s\"']+)[ \t]*(?m:$))",
        lambda match: _redact_group(match, "npmrc_auth", ("dq", "sq", "secret")),
        hints=["_auth", "_password"],
    ),
    # ... and an "_auth" in JSON text (npm config list --json, a registry's settings printed):
    # "_auth": "...", "//registry.example/:_auth": "..." (JSON held in a JSON string too; an
    # "_authToken" and a "_password" are secret_assignment's, by their names)
    Rule(
        "npmrc_auth",
        r"(?:(?<![\w\\])|(?<=\\[ntr]))(\\?)\"(?:[^\"\s\\:]*:)?_auth\1\""
        # (a placeholder word is no value: "_auth": "false")
        r"[ \t]*:[ \t]*\1\"(?!\[REDACTED:|\$\{|(?:true|false|null|none)\1\")"
        r"(?P<secret>[^\"\\\s]+)\1\"",
        hints=['"_auth', ":_auth"],
    ),
    # .netrc: "password VALUE" in an entry that starts "machine HOST" (or "default"), its
    # tokens on one line or many, numbered as Claude Code's Read numbers lines or not. A
    # host without a dot, and "default", need a login first: "the machine root password
    # is" and "the default password is" are prose.
    Rule(
        "netrc",
        r"\b(?:machine[ \t]+(?:[^\s\"'.]*\.[^\s\"']+|[^\s\"']+(?=" + _NETRC_LOGIN + r"))"
        r"|default(?=" + _NETRC_LOGIN + r"))"
        # (a value is never the next entry's keyword: each entry is read once, never again
        # from inside another, so the scan is linear)
        r"(?:" + _NETRC_BLANK + r"(?:login|account|port)[ \t]+(?!(?:machine|default)\b)"
        r"[^\s\"']+)*+" + _NETRC_BLANK + r"password[ \t]+"
        # (quoted, whatever follows: a quoted value is no word of prose)
        r"(?P<secret>\"[^\"\n]*\"|[^\s\"']+"
        # (unquoted, then the line ends, or another token, or the quote of an echo around it:
        # in prose, "machine 10.0.0.5 password authentication failed", more words follow)
        # (or a shell's operator, a comment, a JSON-escaped line break: echo ... password x >> f)
        r"(?=[ \t]*(?:\r?\n|$|[\"'`;&|<>)#]|\\[rn]|(?:machine|login|account|port|macdef|default)\b)))",
        hints=["password"],
    ),
    # Docker's config.json (and any JSON text) keeps a registry's "user:password" in base64
    # under "auth": {"auths": {"registry.example": {"auth": "dXNlcjpwYXNz"}}}.
    Rule(
        "auth_field",
        r'(?:(?<![\w\\])|(?<=\\[ntr]))(\\?)"auth\1"[ \t]*:[ \t]*\1"(?P<secret>[^"\\\s]+)\1"',
        hints=['"auth'],
    ),
    # Docker's config.json in base64, as a Kubernetes Secret's .dockerconfigjson holds it
    # (kubectl get secret -o yaml): '{"auths":' encoded, its registries' passwords inside.
    Rule("auth_field", r"eyJhdXRocyI6[A-Za-z0-9+/]*+=*+", hints=["eyjhdxrocyi6"]),
    # A PEM private key in base64, as kubeconfig's client-key-data and a Kubernetes Secret's
    # tls.key hold it: "-----BEGIN [RSA |EC |...]PRIVATE KEY" encoded (a certificate stays).
    Rule(
        "private_key",
        r"LS0tLS1CRUdJTi(?:BQUklWQVRF|BSU0EgUFJJVkFURS|BFQyBQUklWQVRF|BEU0EgUFJJVkFURS"
        r"|BPUEVOU1NIIFBSSVZBVEUgS0VZ|BFTkNSWVBURUQgUFJJVkFURS|BQR1AgUFJJVkFURS)"
        # (wrapped, as `base64 key.pem` wraps at 76: each line after a full one of 60 or
        # more, numbered or not, is the key's too)
        # (a line of base64 to its end: "password=..." after a key on one line is no part of it)
        r"[A-Za-z0-9+/]*+(?:(?<=[A-Za-z0-9+/]{60})\r?\n(?:[ \t]*[0-9]+\t)?[A-Za-z0-9+/]++"
        r"(?==*+(?:[ \t]*(?:\r?\n|$)|[\"'`,;)\]}<\\])))*+=*+",
        hints=["ls0tls1crudjti"],
    ),
    # A container's secret-named variable whose value is a YAML block scalar (a key, a
    # certificate bundle): "- name: TLS_KEY_PASSWORD\n  value: |\n    ..." (lines numbered as
    # Read numbers them, or not). Its lines, indented deeper than "value", are the value;
    # before the rule below, which would take the "|" alone for it.
    Rule(
        "name_value",
        r"(?m:^)(?P<num>[ \t]*[0-9]+\t)?[ \t]*(?:-[ \t]+)?(?i:name):[ \t]*[\"']?"
        + _SECRET_VALUE_NAME
        + r"[\"']?(?:[ \t]+#[^\r\n]*+)?[ \t]*\r?\n"
        # (up to four lines of the entry between: a comment, a blank line, another key; not
        # a new entry, another name or key, nor a bracket, as the rule below)
        r"(?:(?(num)[ \t]*[0-9]+\t)(?![ \t]*(?:-[ \t]|(?i:name|key|value)[\"']?[ \t]*:))"
        r"[^\r\n{}\[\]<>]*\r?\n){0,4}?"
        r"(?(num)[ \t]*[0-9]+\t)(?P<indent>[ \t]*)(?i:value):[ \t]+"
        r"(?P<secret>[|>][-+0-9]{0,2}(?:[ \t]+#[^\r\n]*+)?[ \t]*+\r?\n"
        r"(?:(?(num)[ \t]*[0-9]+\t)(?:[ \t]*\r?\n|(?P=indent)[ \t]+\S[^\r\n]*(?:\r?\n|$)))+)",
        lambda match: (
            match.group(0)[: match.start("secret") - match.start()] + marker("name_value") + "\n"
        ),
        hints=_NAME_HINTS,
    ),
    # A secret-named entry given as a name and a value: a container's environment
    # (Kubernetes "- name: DB_PASSWORD\n  value: ...", ECS {"name": ..., "value": ...}), an
    # SSM parameter, Spring's <property name="password" value="..."/>, NuGet's
    # <add key="ClearTextPassword" value="..."/>. The value must follow within the entry:
    # never past another name, nor a bracket (valueFrom: secretKeyRef: ... stays).
    Rule(
        "name_value",
        r"(?<![\w-])(?i:name|key)(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?"
        + _SECRET_VALUE_NAME
        + r"(?:\\?[\"'])?(?:(?!(?<![\w-])(?:\\?[\"'])?(?i:name|key)(?:\\?[\"'])?[ \t]*[:=])"
        # (an object or a list with no bracket inside is passed whole: az keyvault secret
        # show's "tags": {} or {"env": "prod"} between "name" and "value")
        r"(?:[^{}\[\]<>]|\{[^{}\[\]<>]{0,200}+\}|\[[^{}\[\]<>]{0,200}+\])){0,160}?"
        r"(?<![\w-])(?:\\?[\"'])?(?i:value)(?:\\?[\"'])?[ \t]*[:=][ \t]*"
        # (a bare number is a setting's: {"key": "password_min_length", "value": 12})
        r"(?:" + _QUOTED + r"|(?![-+]?[0-9]+(?:\.[0-9]+)?[\s,;}\]]|[-+]?[0-9]+(?:\.[0-9]+)?$)"
        r"(?P<bare>" + _BARE + "))",
        lambda match: _redact_group(match, "name_value", ("dq", "sq", "edq", "bare")),
        hints=_NAME_HINTS,
    ),
    # A CLI's table of names and values: vault kv get and vault read print "Key  Value", a
    # line of dashes, then a row a name (rows to a blank line); doppler secrets draws one,
    # "│ DB_PASSWORD │ value │"
    Rule(
        "name_value",
        # (its header's "Key" first, then the line's start before it: a search jumps to it)
        r"Key(?<![^\n]Key)[ \t]+Value[ \t]*\r?\n---[ \t]+-----[ \t]*\r?\n"
        r"(?P<rows>(?:[^\r\n]++(?:\r?\n|$))++)"
        r"|│[ \t]*" + _TABLE_NAME + r"[ \t]*│[ \t]*"
        r"(?P<row>[^│\s](?:[^│\r\n]*[^│\s])?)",
        _redact_table,
        hints=["-----", "│"],
    ),
    # An XML element named for a secret: Maven's <password>...</password>, <apiToken>.
    Rule(
        "xml_secret",
        # (not a page's token, <NextContinuationToken>, <resumptionToken>; not a placeholder
        # or a template's value: false, ${db.password}, {{ csrf_token() }}, %(password)s)
        # (told by the tag's end, looked behind once: a lookahead for the page word anywhere
        # in the tag read the rest of a long tag again from each such word, in quadratic
        # time, and kept <NEXTAUTH_SECRET> and <pagerdutyToken>)
        r"<(?P<tag>(?=[A-Za-z_])"
        r"[\w.:-]*?(?i:pass(?:word|wd|phrase)|secret|token|api[_-]?key"
        r"|access[_-]?key|private[_-]?key))"
        + "".join(
            rf"(?<!(?i:{word}{sep}token))"
            for word in ("continuation", "resumption", "page", "next")
            for sep in ("", "[_.-]")
        )
        + ">"
        r"(?!(?:" + "|".join(_PLACEHOLDER_WORDS) + r")</)(?![ \t]*(?:\$\{|\{\{|\{%|%\())"
        r"(?P<secret>[^<>]+)</(?P=tag)>",
        hints=["password>", "passwd>", "passphrase>", "secret>", "token>", "key>"],
    ),
    # ~/.pgpass: host:port:database:user:password, an entry a word of its own (a line, or
    # numbered as Read numbers lines; a MAC address has six fields, a time three; a ":" in
    # the password is escaped as "\:"), on PostgreSQL's usual ports or any ("*"): a hint
    # as common as ":" would send every text to the rules.
    Rule(
        "pgpass",
        # (the port is one of the hints': with any number, a text that named one port
        # anywhere had every five-field word redacted, a log's 12:30:45:123:abc too)
        # (and the ports of PostgreSQL's kin: Redshift's 5439, Supabase's pooler 6543 and local
        # 54322, CockroachDB's 26257, a second or third server's 5434, 5435, a tunnel's 15432)
        r"(?<!\S)[^\s:#][^\s:]*:(?:543[2-59]|6432|6543|15432|25060|26257|54322|\*)"
        r":[^\s:]+:[^\s:]+:(?P<secret>(?:[^\s:\\]|\\\S)+)(?!\S)",
        hints=[
            *(":5432:", ":5433:", ":5434:", ":5435:", ":5439:", ":6432:", ":6543:"),
            *(":15432:", ":25060:", ":26257:", ":54322:", ":*:"),
        ],
    ),
    # Rails' master key (32 hex digits) printed under its file's name: cat config/master.key
    # in a terminal's transcript, head's "==> config/master.key <==", grep's "FILE:" (and a
    # credentials file's key, config/credentials/production.key); a line of its own
    Rule(
        "rails_master_key",
        r"(?:master(?<![\w-]master)|credentials/[\w-]++)\.key(?:[ \t]*<==)?"
        r"(?:[ \t]*(?:\r?\n|(?:\\r)?\\n)(?:[ \t]*[0-9]+\t)?[ \t]*|:)(?P<secret>[0-9a-f]{32})"
        r"(?=[ \t]*(?:\r?\n|\\[rn\"]|\"|$))",
        hints=["master.key", "credentials/"],
    ),
    # What a command prints that is the secret alone: gcloud secrets versions access (its
    # line's command), the lines after it in a terminal's transcript up to a blank line or a
    # prompt (not an error;
    # nothing with --out-file; --format's JSON or YAML is below); and the payload's data in
    # that JSON or YAML, beside its checksum
    Rule(
        "secret_output",
        # (the command starts its line, after a prompt or none: a text that names it in a
        # sentence, "fetch it with `gcloud secrets versions access ...`", goes on in prose)
        r"(?m:^)[ \t]*(?:PS [^\s>]*>[ \t]*|[^\s`'\"]{0,64}[$#%>+][ \t]+)?"
        r"gcloud[ \t]+(?:(?:alpha|beta)[ \t]+)?secrets[ \t]+versions[ \t]+access\b"
        r"(?![^\r\n]*(?:--out-file|--format[ \t=]+[\"']?(?:json|yaml)|`|(?<![0-9&>])>(?!&)))"
        r"[^\r\n]*+\r?\n(?![ \t]*(?:ERROR:|WARNING:))"
        # (nor a code fence: the command in a README's code block, then the prose after it)
        r"(?P<secret>(?![ \t]*(?:[$%>#+][ \t]|PS |```|~~~))[^\r\n]+"
        r"(?:\r?\n(?![ \t]*(?:[$%>#+][ \t]|PS |```|~~~))[^\r\n]+){0,99}+)"
        r"|(?P<esc>\\?)\"?data(?P=esc)\"?[ \t]*:[ \t]*(?:(?P=esc)\")?"
        r"(?P<data>[A-Za-z0-9+/_-]+=*)(?:(?P=esc)\")?"
        r"(?=,?[ \t]*(?:\\[rn]|\r?\n)?[ \t]*(?:(?P=esc)\")?dataCrc32c)",
        lambda match: _redact_group(match, "secret_output", ("secret", "data")),
        hints=["versions access", "datacrc32c"],
    ),
    # SQL that sets a password: CREATE USER ... WITH PASSWORD '...', ALTER ROLE ... PASSWORD
    # '...' (PostgreSQL), IDENTIFIED BY '...' (MySQL, Oracle); the value inside its quotes
    # ('' is a quote inside one).
    Rule(
        "sql_password",
        # (a double-quoted value only after IDENTIFIED BY, as MySQL takes one: the password
        # "reset" link is prose) (in a statement about a user or a role: "wrong password "
        # 'try again' is Python, "identified by 'id'" prose)
        r"(?i:\b(?:user|role)\b)[^;]{0,120}?"
        r"(?:(?i:\bpassword)[ \t]+'(?P<sq>(?:[^'\r\n]|'')+)'"
        r"|(?i:\bidentified[ \t]+(?:with[ \t]+\w+[ \t]+)?by)[ \t]+(?:'(?P<by>(?:[^'\r\n]|'')+)'|\"(?P<dq>[^\"\r\n]+)\"))",
        lambda match: _redact_group(match, "sql_password", ("sq", "by", "dq")),
        hints=["password '", "identified by", "identified with"],
    ),
    # Redis's own password settings, in redis.conf, `redis-server --requirepass ...` and
    # CONFIG SET: requirepass S3cret, masterauth S3cret.
    Rule(
        "redis_password",
        # (a setting: at a line's start, an option, or after CONFIG SET; not a placeholder)
        r"(?:" + _LINE_START + r"|(?<![\w-])--|(?i:config[ \t]+set)[ \t]+)"
        r"(?i:requirepass|masterauth)"
        r"[ \t]+(?!<)(?P<secret>\"[^\"\r\n]*\"|'[^'\r\n]*'|[^\s\"']+)",
        hints=["requirepass", "masterauth"],
    ),
    # A secret given to a command that stores it, or to a SQL Server client: gh secret set
    # NAME --body VALUE, az keyvault secret set --value VALUE, aws ssm put-parameter --value
    # VALUE, sqlcmd -U sa -P VALUE.
    Rule(
        "password_option",
        # (a parameter SSM keeps encrypted: SecureString; a $VARIABLE is no value)
        r"\b(?:(?:gh[ \t]+secret[ \t]+set|az[ \t]+keyvault[ \t]+secret[ \t]+set"
        r"|aws[ \t]+ssm[ \t]+put-parameter(?=(?:(?!\baws\b)"
        + _ON_THE_COMMAND
        + r")*?SecureString))"
        r"\b(?:(?!\b(?:gh|az|aws)\b)"
        + _ON_THE_COMMAND
        + r")*?[ \t](?:-b|--body|--value)(?:[ \t]+|=)(?![\"']?\$)"
        r"|sqlcmd\b(?:(?!\bsqlcmd\b)" + _ON_THE_COMMAND + r")*?[ \t]-P[ \t]*"
        # openssl's -passin/-passout pass:VALUE (file:PATH and env:NAME say where it is),
        # enc's -pass pass:VALUE, and enc's password or raw key: -k VALUE, -K HEX
        r"|(?<=-)pass(?:in|out)?[ \t]+[\"']?pass:"
        r"|openssl(?<![\w.-]openssl)[ \t]+(?:enc|(?:aes|aria|bf|camellia|cast|chacha|des|idea|rc[245]|seed|sm4)[\w-]*)(?![\w.-])"
        r"(?:(?!\bopenssl\b)" + _ON_THE_COMMAND + r")*?[ \t]-[kK][ \t]+"
        # MinIO's client: mc alias set ALIAS URL ACCESS_KEY SECRET_KEY (mc config host add,
        # its older name; --api and --path take a value)
        r"|(?<![\w.-])mc[ \t]+(?:alias[ \t]+set|config[ \t]+host[ \t]+add)"
        r"(?:"
        + _BLANKS
        + r"--?(?:api|path)(?:"
        + _BLANKS
        + r"|=)[^\s;&|]+|"
        + _BLANKS
        + r"--?[\w-]+)*+(?:"
        + _BLANKS
        + r"[^\s;&|\\-][^\s;&|]*){3}"
        + _BLANKS
        # twine upload -p, yarn/npm/pnpm config set <secret name> VALUE, ngrok's authtoken,
        # and the aws configure prompt's answer: AWS Secret Access Key [None]: VALUE
        + r"|twine[ \t]+upload\b(?:(?!\btwine\b)"
        + _ON_THE_COMMAND
        + r")*?[ \t]-p[ \t]+"
        r"|(?:yarn|npm|pnpm)[ \t]+config[ \t]+set[ \t]+(?:-[-\w]+[ \t]+)*"
        + _SECRET_NAME
        + r"[ \t]+"
        r"|ngrok[ \t]+(?:config[ \t]+add-)?authtoken[ \t]+"
        # .NET's dotnet user-secrets set "Jwt:Key" VALUE ("Smtp:Password", "Stripe:SecretKey")
        r"|dotnet[ \t]+user-secrets[ \t]+set[ \t]+[\"']?(?=[\w.:-]*?(?i:pass(?:word|wd|phrase)?"
        r"|secret(?:[_-]?key)?|token|api[_-]?key|access[_-]?key|(?:jwt|signing|encryption|hmac):key)"
        r"(?![A-Za-z]))[\w.:-]++[\"']?[ \t]+"
        # shell history's passwords: ssh-keygen -N (-P), ldapsearch -w (ldapadd, ldapmodify,
        # ...), smbclient -U user%..., rabbitmqctl add_user USER ..., zip -P (unzip), 7z -p...
        r"|ssh-keygen\b(?:(?!\bssh-keygen\b)" + _ON_THE_COMMAND + r")*?[ \t]-[NP][ \t]*"
        r"|ldap[a-z]+\b(?:(?!\bldap[a-z]+\b)" + _ON_THE_COMMAND + r")*?[ \t]-w[ \t]*"
        # (-U's user attached too: -Ubob%...)
        # (quoted, user and password: the password to the quote, blanks in it: -U"bob%a b")
        r"|smbclient\b(?:(?!\bsmbclient\b)"
        + _ON_THE_COMMAND
        + r")*?[ \t](?:-U(?:[ \t]+|=)?|--user(?:[ \t]+|=))"
        r"(?P<smb_quote>[\"'])?[^\s%\"']+%"
        r"|rabbitmqctl[ \t]+(?:add_user|change_password)[ \t]+[^\s;&|]+[ \t]+"
        r"|(?<![\w.-])(?:un)?zip\b(?:(?!\b(?:un)?zip\b)" + _ON_THE_COMMAND + r")*?[ \t]-P[ \t]*"
        # (the scan stops at the next 7z command, not at an archive's name: x a.7z -p...)
        r"|(?<![\w.-])7za?\b(?:(?!(?<![\w.-])7za?\b)" + _ON_THE_COMMAND + r")*?[ \t]-p"
        r"|(?i:aws[ \t]+secret[ \t]+access[ \t]+key)[ \t]*\[[^\[\]\n]{0,64}\]:[ \t]*)"
        # (a $VARIABLE given, or a help text's <placeholder>, is no value)
        # (nor an empty one: ssh-keygen -N '')
        r"(?!\[REDACTED:|[\"']?\$|<|''|\"\")"
        r"(?P<secret>\"[^\"]*\"|'[^']*'|(?(smb_quote)[^\"'\r\n]{1,256}+|[^\s\"']+))",
        hints=[
            *("secret set", "put-parameter", "sqlcmd", "twine", "-passin", "-passout"),
            *("config set", "authtoken", "secret access key", "user-secrets"),
            *("ssh-keygen", "ldap", "smbclient", "rabbitmqctl", "zip ", "7z "),
            *("-pass ", "openssl", "alias set", "host add"),
        ],
    ),
    # rclone config create NAME TYPE KEY VALUE ... (update NAME, password NAME): the value
    # of each secret key (pass, password, password2, *secret*, token, key, sas_url)
    Rule(
        "password_option",
        r"rclone[ \t]+config[ \t]+(?:create[ \t]+[^\s;&|]+|update|password)[ \t]+[^\s;&|]+"
        r"(?P<rest>" + _ON_THE_COMMAND + r"*)",
        _redact_rclone,
        hints=["rclone config"],
    ),
    # PHP's define('DB_PASSWORD', '...') (wp-config.php): a secret name, then its value;
    # WordPress's keys and salts too (AUTH_KEY, SECURE_AUTH_SALT, LOGGED_IN_KEY, NONCE_SALT)
    Rule(
        "secret_assignment",
        r"\bdefine\([ \t]*(?P<q>[\"'])(?:"
        + _SECRET_NAME
        + r"|(?:SECURE_AUTH|AUTH|LOGGED_IN|NONCE)_(?:KEY|SALT))(?P=q)[ \t]*,[ \t]*(?:"
        + _QUOTED
        + ")",
        _redact_quoted,
        hints=["define("],
    ),
    # Python's requests: auth=("user", "password"), the password second
    Rule(
        "secret_assignment",
        # (over lines too, with a trailing comma)
        r"\bauth[ \t]*=[ \t]*\(\s*(?:\"[^\"\n]*\"|'[^'\n]*'|[\w.]+)\s*,\s*"
        r"(?:" + _QUOTED + r")\s*,?\s*\)",
        _redact_quoted,
        hints=["auth=", "auth ="],
    ),
    # A Dockerfile's legacy ENV NAME value (ENV NAME=value is the env rule's)
    Rule(
        "secret_assignment",
        _LINE_START + r"ENV[ \t]+" + _SECRET_NAME + r"[ \t]+(?!\$)(?P<secret>[^\s=][^\r\n]*)",
        # (a Dockerfile's ENV lines follow a newline, the blanks that indent them or a
        # Read's number, or start the text: an Edit's new_string, a grep of the file)
        hints=["\nenv ", "\nenv\t", " env ", " env\t", "\tenv ", "\tenv\t"],
    ),
    # wpa_supplicant's psk="passphrase" (or its 64 hex digits)
    Rule(
        "secret_assignment",
        r"(?m:^)[ \t]*psk=(?:\"(?P<dq>[^\"\r\n]+)\"|(?P<secret>[0-9a-fA-F]{64}))",
        lambda match: _redact_group(match, "secret_assignment", ("dq", "secret")),
        hints=["psk="],
    ),
    # Terraform's sensitive values in JSON (terraform output -json, a state file): the
    # "value" of an object that says "sensitive": true, before or after it; and Azure's
    # keys (az storage account keys list: {"keyName": "key1", ..., "value": "..."})
    Rule(
        "sensitive_value",
        r"\\?\"value\\?\"[ \t]*:[ \t]*" + _JSON_STRING + r"(?=[^{}\[\]]{0,200}?" + _SENSITIVE + ")"
        r"|" + _SENSITIVE + r"[^{}\[\]]{0,200}?\\?\"value\\?\"[ \t]*:[ \t]*" + _JSON_STRING,
        lambda match: _redact_group(match, "sensitive_value", (1, 2)),
        hints=["sensitive", "keyname"],
    ),
    # Names no secret alone, one beside its user: a "pass" beside a "user", "username" or
    # "login" (nodemailer's auth: {user: ..., pass: '...'}, rclone.conf's user = ... then
    # pass = ..., {"user": ..., "pass": ...}); Kaggle's {"username": ..., "key": "..."} (its
    # 32 hex digits); an Azure storage account's key beside its name (accountName and
    # accountKey, account_name='...', account_key='...': base64); and the "Key" of a JSON
    # object named for a kind of key ("Jwt": {"Key": "..."}, .NET's appsettings.json)
    Rule(
        "secret_assignment",
        _PASS + r"|[\"']key\\?[\"'][ \t]*:[ \t]*\\?[\"']([0-9a-f]{32})\\?[\"']"
        r"|(?i:account_?key)(?<![\w.$-](?i:accountkey))(?<![\w.$-](?i:account_key))"
        r"(?:\\?[\"'])?[ \t]*(?:=>|[:=])[ \t]*\\?[\"']"
        r"(?=[A-Za-z+/]*[0-9])([A-Za-z0-9+/]{16,}+={0,2})\\?[\"']"
        + r"|\"(?i:jwt|signing|encryption|hmac)"
        + _KEY_KIND_SUFFIX
        + r"\\?\"[ \t]*:[ \t]*\{"
        r"[^{}\[\]]{0,200}?\\?\"(?i:key)\\?\"[ \t]*:[ \t]*"
        + _JSON_STRING
        # ... and in YAML (appsettings.yaml, a chart's values): Jwt: then its indented lines,
        # up to eight before its Key, each with its value (a next object's "cache:" ends it; a
        # name of its own: no word, dot or dash before it)
        + r"|(?i:jwt(?<![\w.$-]jwt)|signing(?<![\w.$-]signing)|encryption(?<![\w.$-]encryption)"
        r"|hmac(?<![\w.$-]hmac))"
        + _KEY_KIND_SUFFIX
        + r"[ \t]*:[ \t]*(?:#[^\r\n]*)?\r?\n(?:[ \t]+[\w-]+[ \t]*:[ \t]+[^\s#][^\r\n]*\r?\n){0,8}"
        # (8 characters or more, as a Key in an object: not a placeholder, ${JWT_KEY}, <key>)
        r"[ \t]+(?i:key):[ \t]+(?:\"(?![$%<{])([^\"\r\n]{8,})\"|'(?![$%<{])([^'\r\n]{8,})'"
        r"|(?![\"'|>$%<{])([^\s#][^\r\n#]{6,}[^\s#]))[ \t]*(?:#[^\r\n]*)?(?=\r?\n|$)"
        # ... and MongoDB's pwd beside its user (the groups 11 to 14)
         + r"|" + _PWD,
        _redact_paired,
        # (what each alternative's match holds: "pass" then a quote, a blank or its sign, not
        # "4 passed" or "tests pass.", which every test run prints; a quoted name)
        hints=[
            *("pass:", "pass=", "pass ", "pass\t", 'pass"', "pass'", "pass\\"),
            *('"username', "'username", "accountkey", "account_key"),
            *('"jwt', '"signing', '"encryption', '"hmac'),
            *(" key:", "\tkey:"),  # (YAML's Key, under its Jwt:)
            *("pwd:", 'pwd"', "pwd'", "pwd\\"),  # (MongoDB's pwd, then its colon)
        ],
    ),
    Rule(
        "secret_flag",
        # A flag starts a word (top-secret, my-token and a/b-token are none); its
        # name may have words before the secret one: --db-password. The dash comes
        # first, so the scan jumps from dash to dash. What follows " = ", " : ", "=>",
        # ":=" or "==" is no flag's value: a removed line of a diff (-password = "..."),
        # left to the assignment rule, which knows code from values, or a comparison.
        r"-(?<![\w./\\-]-)-?(?:[A-Za-z0-9]+-)*"
        # (and keytool's -storepass and -keypass, an --authkey, skopeo's --creds and
        # --dest-creds) (not a help text's <placeholder>)
        r"(?i:password|passwd|passphrase|token|secret|api[-_]?key|access[-_]?key"
        r"|storepass|keypass|authkey|creds|account-key)"
        r"(?:=(?!>)|\s+(?![=:]\s|=>|:=|==))(?!<[\w-]+>|\[REDACTED:)(?P<secret>\"[^\"]*\"|'[^']*'|[^\s\"']+)",
        hints=[
            *("-passw", "-passphrase", "-token", "-secret", "-api", "-access"),
            *("-storepass", "-keypass", "-authkey", "-creds", "-account-key"),
        ],
    ),
    # X=Y before a shell command, at the start of the text or of a command
    # after ; && || | ( $( or a backtick, optionally after `export`/`env`. A "("
    # right after a name is a call, not a subshell: f(password=None) (checked
    # after the "(", so that every start is a character the scan can jump to).
    Rule(
        "env",
        # (not NAME==value: a comparison, or a pin in pip freeze's output)
        r"""(?:^|[;|`\n]|&&|\((?<!\w\())[ \t]*(?:(?:export|env)[ \t]+)?"""
        r"""(?=[A-Za-z_][A-Za-z0-9_]*=(?!=))(?P<run>(?:[A-Za-z_][A-Za-z0-9_]*=(?!=)"""
        r"""(?:"(?:[^"\\]|\\.)*"|'[^']*'|"""
        + _UNQUOTED
        + r""")(?:[ \t]+|$))*+)(?P<tail>[A-Za-z_][A-Za-z0-9_]*=(?!=)"""
        + _UNQUOTED
        + ")?+",
        _redact_env_run,
        hints=["="],
    ),
    # After export, an assignment is the environment's whatever ends it: export x=y; cmd.
    # The literal first (a fast search for it), then the word before it checked.
    Rule(
        "env",
        r"""export(?<![^\s;|&(`]export)[ \t]+(?P<run>(?:[A-Za-z_][A-Za-z0-9_]*="""
        r"""(?:"(?:[^"\\]|\\.)*"|'[^']*'|"""
        + _UNQUOTED
        + r""")(?:[ \t]+|$|(?=[;&|\n])))++)(?P<tail>)""",
        _redact_env_run,
        hints=["export"],
    ),
    # An environment-style assignment (upper-case name) anywhere, as when a
    # command is quoted inside a message or a result (not NAME => value: code).
    Rule(
        "env",
        r"""(?<![A-Za-z0-9_$])[A-Z][A-Z0-9_]*=(?![>=]|\[REDACTED:)"""
        r"""(?P<secret>"(?:[^"\\]|\\.)*"|'[^']*'|"""
        # quoted inside a JSON string (a command in JSON text): X=\"...\", its escapes doubled,
        # and JSON's own escapes of what the value holds (\u00e4, \t, \n)
        r"""\\"(?:[^"\\\n]|\\\\(?:\\\\|\\"|[^"\\\n])|\\[bfnrt/]|\\u[0-9a-fA-F]{4})*\\"|"""
        + _ANYWHERE_UNQUOTED
        + ")",
        _redact_env_value,
        hints=["="],
    ),
    # A YAML block scalar under a secret name (secret: |, password: >-): its lines, those
    # indented deeper than the name's, are the value (the indicator alone is no secret).
    Rule(
        "secret_assignment",
        # (lines numbered as Read numbers them: each line of the block is numbered too)
        r"(?m:^)(?P<num>[ \t]*[0-9]+\t)?(?P<indent>[ \t]*)(?:-[ \t]+)?[\"']?"
        + _SECRET_NAME
        + r"[\"']?:[ \t]+(?P<secret>[|>][-+0-9]{0,2}(?:[ \t]+#[^\r\n]*+)?[ \t]*+\r?\n"
        r"(?:(?(num)[ \t]*[0-9]+\t)"
        r"(?:[ \t]*\r?\n|(?P=indent)[ \t]+\S[^\r\n]*(?:\r?\n|$)))+)",
        lambda match: (
            match.group(0)[: match.start("secret") - match.start()]
            + marker("secret_assignment")
            + "\n"
        ),
        hints=_NAME_HINTS,  # (not ": |": two blanks or a tab before the indicator are YAML too)
    ),
    # password = "...", db_password=..., password: ... (YAML), "api_key": "..."
    # (JSON), clientSecret := "..." in code, .env files and configuration.
    Rule("secret_assignment", _SECRET_ASSIGNMENT, _redact_assignment, hints=_NAME_HINTS),
)
"""The secret shapes redacted by default, in the order they are applied."""

DEFAULT_SECRET_KEYS: Final = (
    r"password|passwd|passphrase|secret|api_?key|apikey|access_?key|private_?key"
    r"|" + _KEY_KINDS + r"[_-]{0,2}key" + _KEY_KIND_END + r"|erlang_?cookie"
    r"|authori[sz]ation|cookie|credential|session_?token|(?:^|_)auth(?:$|_)|_pass$"
    r"|token(?![a-z]|_(?:count|usage|limit|budget|type))"
)
"""Key names whose values are secrets, searched in the key lower-cased with ``-`` as ``_``."""

KEY_WORDS: Final = ("pass", "secret", "key", "auth", "cookie", "credential", "token")
"""A key can match :data:`DEFAULT_SECRET_KEYS` only if it holds one of these (a cheap test first)."""

_VARIABLE_WORDS: Final = frozenset(
    {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "APIKEY", "CREDENTIALS"}
)
_KEY_WORDS: Final = frozenset({"KEY", "SECRETKEY", "PRIVATEKEY", "ACCESSKEY"})


# Secret variables whose names hold none of those words, as the tools reading them spell them.
_SECRET_VARIABLES: Final = frozenset(
    {"PGPASSWORD", "MYSQL_PWD", "SSHPASS", "GITHUB_PAT", "REDISCLI_AUTH"}
)


def is_secret_flag(item: str) -> bool:
    """Whether ``item`` is, alone, the flag of a secret (``--password``, ``--api-key``,
    ``-storepass``): in an argument list, the item after it is the secret."""
    if item[:1] != "-" or len(item) > 64:
        return False
    if not _SECRET_FLAG:
        import re

        _SECRET_FLAG.append(
            re.compile(
                r"--?(?:[A-Za-z0-9]+-)*(?i:password|passwd|passphrase|token|secret|api[-_]?key"
                r"|access[-_]?key|storepass|keypass|authkey|creds|account-key)"
            )
        )
    return _SECRET_FLAG[0].fullmatch(item) is not None


_SECRET_FLAG: list[re.Pattern[str]] = []  # compiled when first needed


def is_secret_name(name: str) -> bool:
    """Whether a variable's name says it holds a secret (see :func:`is_secret_variable`)."""
    upper = name.upper()
    words = upper.split("_")
    return (
        bool(_VARIABLE_WORDS.intersection(words))
        or words[-1] in _KEY_WORDS
        or upper in _SECRET_VARIABLES
    )


def is_secret_variable(name: str, value: str) -> bool:
    """Whether an environment variable holds a secret worth scrubbing wherever it shows up.

    Its name has a word (``_``-separated) ``TOKEN``, ``SECRET``, ``PASSWORD``,
    ``PASS``, ``PASSWD``, ``PASSPHRASE``, ``APIKEY`` or ``CREDENTIALS``, or
    its last word is ``KEY`` (``OPENAI_API_KEY``, ``STRIPE_KEY``), or it is one
    the tools that read it name so (``PGPASSWORD``, ``MYSQL_PWD``, ``SSHPASS``,
    ``GITHUB_PAT``, ``REDISCLI_AUTH``); and its value is
    worth the search: 8 characters or more, not only letters unless 16 or
    more, and not a path (``GOOGLE_APPLICATION_CREDENTIALS=/path/key.json``
    names a file, it is not the secret).
    """
    if not is_secret_name(name):
        return False
    if len(value) < 8 or (len(value) < 16 and value.isalpha()):
        return False
    return not (value[0] in "/~." and ("/" in value or "\\" in value))


ENVELOPE_FIELDS: Final = frozenset(_ENVELOPE) - {"attribution"} | {
    "status",
    "duration_ms",
    "mode",
    "tool_call_id",
    "interaction_id",
}
"""Event fields onlooker itself produces (ids, timestamps, enums, numbers): never redacted.

The envelope (``onlooker._shared.ENVELOPE_FIELDS``) but ``attribution``
(whose task and phase are user text), plus the statuses, durations, modes
and ids of the events' own fields.
"""
