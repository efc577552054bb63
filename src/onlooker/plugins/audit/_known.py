"""Known secret values: scrubbed wherever they show up, bare.

Standard library only (the coding-agent hook imports it). A
:class:`~onlooker.plugins.audit.Redactor` keeps one :class:`KnownSecrets`:
the values of secret-named environment variables, and the values it learned
under secret keys or from what a rule replaced after a secret name (a tool
that echoes its password in a result).
"""

from __future__ import annotations

from onlooker._shared import json_dumps

from ._secrets import is_secret_name, is_secret_variable, marker

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Mapping
    from typing import Any, Final, final
else:

    def final(cls: type) -> type:
        return cls


__all__ = ["LEARNED_MARKER", "KnownSecrets"]

LEARNED_MARKER: Final = marker("secret_field")
"""What replaces a learned value: the marker of the key it was learned under."""
_ENVIRONMENT: Final = marker("environment")
_MAX_LEARNED: Final = 256  # the most recent values learned are kept
_LOOP_KNOWN: Final = 8  # known secrets searched one by one up to this many, then by one regex
_RECENT: Final = 32  # values learned since the index was built, looked for one by one
_MARKER: Final = r"\[REDACTED:[A-Za-z0-9_.:-]+\]"
_markers: re.Pattern[str] | None = None
_NOT_IN_SECRETS: Final = tuple(" \t\r\n\"'`()[]{}<>,;\\")  # never in a learned value


def _looks_secret(value: str) -> bool:
    """Whether a value a rule replaced may be learned: eight characters or more, letters
    and digits both, no blank, quote or bracket, not a path, a URL or a snake_case name. A
    rule also replaces code (``password=pwd``, ``token = "Please``, ``allow_s3_credentials``)
    and file names (``KEY_FILE=/run/key.pem``); learned, those would be scrubbed from every
    later text."""
    return (
        len(value) >= 8
        and value[0] not in "/~.$="
        and not any(mark in value for mark in _NOT_IN_SECRETS)
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and "://" not in value  # a URL (token_url: https://...)
        and not ("_" in value and value.isidentifier() and value.islower())  # s3_credentials
    )


def _names_secret(before: str, is_secret_key: Callable[[str], bool]) -> bool:
    """Whether the text before a value ends with a secret-named ``NAME=`` (``DB_PASSWORD=``):
    a secret variable's name, or a name a secret key would be (``PGPASSWORD``, ``REDIS_AUTH``)."""
    if not before.endswith("="):
        return False
    name = before[:-1]
    start = len(name)
    while start and (name[start - 1].isalnum() or name[start - 1] == "_"):
        start -= 1
    name = name[start:]
    return is_secret_name(name) or is_secret_key(name)


def _split_at_markers(text: str) -> list[str]:
    """``text`` split at the redaction markers it holds (``[REDACTED:env]``)."""
    global _markers
    if _markers is None:
        import re

        _markers = re.compile(_MARKER)
    return _markers.split(text)


@final
class KnownSecrets:
    """Values to scrub: the environment's secret ones, and those learned (the 256 seen last).

    ``environ`` gives the variables; those :func:`is_secret_variable` names are kept.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environment = {
            value: _ENVIRONMENT
            for name, value in environ.items()
            if is_secret_variable(name, value)
        }
        self._learned_values: dict[str, None] = {}
        self.learned = 0
        """How many values were learned so far (changes when a value teaches a new one)."""
        self._known: dict[str, str] = {}  # every known value -> its marker
        self._order: tuple[str, ...] = ()  # longest first
        self._pattern: re.Pattern[str] | None = None
        self._escaped: tuple[bytes, ...] | None = None
        # Learned since the index was built: looked for one by one, so that a run of texts
        # each teaching a value does not build the index (a regular expression) each time.
        self._recent: list[str] = []
        self._longest = 0
        self._index()

    def __bool__(self) -> bool:
        return bool(self._learned_values) or bool(self._environment)

    def __len__(self) -> int:
        if self._recent:  # learned since the index was built
            self._index()
        return len(self._order)

    @property
    def longest(self) -> int:
        """The length of the longest known value (or of one forgotten since: at least)."""
        return self._longest

    def has(self, text: str) -> bool:
        """Whether some known value occurs in ``text``."""
        if len(self._recent) > _RECENT:
            self._index()
        pattern = self._pattern
        if pattern is not None:
            if pattern.search(text) is not None:
                return True
        elif any(value in text for value in self._order):
            return True
        return any(value in text for value in self._recent)

    def scrub(self, text: str) -> str:
        """``text`` with every known value replaced by its marker, longest first."""
        if self._recent:  # learned since the index was built
            self._index()
        pattern = self._pattern
        if pattern is not None:
            known = self._known
            return pattern.sub(lambda match: known[match.group(0)], text)
        for value in self._order:
            if value in text:
                text = text.replace(value, self._known[value])
        return text

    def escaped(self) -> tuple[bytes, ...]:
        """Each known value as it appears inside a JSON string in UTF-8 (for a scan of JSON)."""
        if self._recent:  # learned since the index was built
            self._index()
        escaped = self._escaped
        if escaped is None:
            escaped = self._escaped = tuple(
                json_dumps(value)[1:-1].encode("utf-8", "backslashreplace") for value in self._order
            )
        return escaped

    def learn(self, value: Any) -> None:
        """Remember the strings of six characters or more in ``value`` (found under a secret key)."""
        if type(value) is dict:
            for item in value.values():
                self.learn(item)
        elif type(value) is list:
            for item in value:
                self.learn(item)
        elif type(value) is str and len(value) >= 6 and value not in self._environment:
            learned = self._learned_values
            if value in learned:  # seen again: the last to be forgotten, as a secret in use
                del learned[value]
                learned[value] = None
                return
            learned[value] = None
            if len(learned) > _MAX_LEARNED:
                del learned[next(iter(learned))]
            self._recent.append(value)  # indexed when next needed: learning stays linear
            self._longest = max(self._longest, len(value))
            self.learned += 1

    def learn_replaced(
        self, whole: str, replaced: str, *, named: Callable[[str], bool] | None = None
    ) -> None:
        """Remember what a rule replaced by its markers in ``whole`` (the text it matched),
        when the rule knew it by what stands around it (``DB_PASSWORD=`` before it): a token
        a rule knows by its own shape is found wherever it shows up, and is not kept.
        ``named`` (the redactor's test of a secret key) when the rule replaces every
        ``NAME=value`` (``env``): a value is learned only after a secret name
        (``DB_PASSWORD=``, not ``GIT_COMMIT=`` or ``LANG=``)."""
        if whole == replaced:
            return  # a value redacted already (DB_PASSWORD=[REDACTED:env])
        pieces = _split_at_markers(replaced)
        if len(pieces) < 2 or pieces == ["", ""]:
            return  # no marker (a replacement of the user's own), or the whole match replaced
        first, last = pieces[0], pieces[-1]
        start, stop = len(first), len(whole) - len(last)
        if start > stop or not whole.startswith(first) or not whole.endswith(last):
            return
        before = first
        for between in pieces[1:-1]:
            found = whole.find(between, start + 1, stop) if between else -1
            if found < 0:  # two markers side by side: where one secret ends is not known
                return
            if named is None or _names_secret(before, named):
                self.learn_if_secret(whole[start:found])
            start = found + len(between)
            before = between
        if named is None or _names_secret(before, named):
            self.learn_if_secret(whole[start:stop])

    def learn_if_secret(self, part: str) -> None:
        """Remember ``part`` (a value a rule or a flag before it named secret) when it looks
        like one: not code, a path, a URL, or a word (``--no-password production``)."""
        if "[REDACTED:" in part:  # a marker another rule wrote
            return
        if len(part) >= 4 and part.startswith('\\"') and part.endswith('\\"'):
            part = part[2:-2]  # quoted inside a JSON string: X=\"...\"
        elif len(part) >= 2 and part[0] == part[-1] and part[0] in "\"'":
            part = part[1:-1]  # the quotes around a value are not the value's (X="...")
        for value in (part, part.partition(":")[2]):  # user:password (a URL's, Basic auth)
            if _looks_secret(value):
                self.learn(value)

    def _index(self) -> None:
        known = dict.fromkeys(self._learned_values, LEARNED_MARKER)
        known.update(self._environment)
        self._known = known
        self._order = tuple(sorted(known, key=len, reverse=True))
        self._pattern = None
        self._escaped = None
        self._longest = len(self._order[0]) if self._order else 0
        self._recent = []
        if len(self._order) > _LOOP_KNOWN:
            import re

            self._pattern = re.compile("|".join(map(re.escape, self._order)))
