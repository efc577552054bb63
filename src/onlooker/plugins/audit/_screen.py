"""The screen: which serialized events redaction would certainly leave as they are.

Standard library only. Walking an event value by value, in Python, costs
more than the rest of writing it; most events hold no hint of a secret.
:meth:`Screen.suspects` looks at JSON text instead, many events at once (the
writers give it each event's JSON without the fields redaction never
touches, see ``_encode.screened_text``): an event is left alone only when
its text holds none of the hints of the rules, none of the words a secret
key needs, no known secret value, and is no longer than the cap on one
string. Every string (and every key) appears in the JSON, escaped as
``json`` escapes it, so a hint found in none of the texts is a hint found
in none of the strings: the redactor, run on those events, would return
them unchanged. A suspect event goes through the redactor as before; the
screen only decides which events need it.
"""

from __future__ import annotations

from bisect import bisect_right

from onlooker._shared import json_dumps

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import AnyStr, Final, final

    from ._known import KnownSecrets
    from ._secrets import Rule
else:

    def final(cls: type) -> type:
        return cls


__all__ = ["Needles", "RuleHints", "Screen", "Squeeze"]

_MAX_KNOWN: Final = 32  # more known secrets than this: every event goes to the redactor
_SEPARATOR: Final = b"\n"  # never in compact JSON: escaped inside strings
_HEAD: Final = 64  # a text's first characters, where a hint's leading newline matches too


def _escaped(text: str) -> str:
    """``text`` as it appears inside a JSON string (the same escapes ``json`` writes)."""
    return json_dumps(text)[1:-1]


def _fewest(words: Iterable[AnyStr]) -> tuple[AnyStr, ...]:
    """The words that hold no shorter one of ``words``: finding those finds every word's."""
    kept: list[AnyStr] = []
    for word in sorted(set(words), key=len):
        if not any(shorter in word for shorter in kept):
            kept.append(word)
    return tuple(kept)


@final
class Squeeze:
    """Lower-cases ASCII bytes and deletes every byte none of ``words`` holds, in one pass.

    A word found (lower-cased) in the text is found in what is left of it,
    and there are fewer bytes to search. (``bytes.translate`` deletes
    before it maps: the upper-case forms of the words' letters are kept.)
    """

    def __init__(self, words: Iterable[bytes]) -> None:
        needed = b"".join(words) + _SEPARATOR
        kept = set(needed) | set(needed.upper())
        self._delete: Final = bytes(byte for byte in range(256) if byte not in kept)

    def __call__(self, data: bytes) -> bytes:
        return data.translate(_LOWER, self._delete)


_LOWER: Final = bytes(range(256)).lower()


@final
class RuleHints:
    """The rules a long ASCII text needs, found on a squeezed copy of it.

    ``rules`` pairs each rule with its lower-case hints (``None``: it runs
    on every text). The same rules, in the same order, as testing each
    rule's hints in the lower-cased text: faster on long texts, where one
    pass of ``bytes.translate`` leaves less to search, and most texts hold
    no hint of any rule.
    """

    def __init__(self, rules: Iterable[tuple[Rule, tuple[str, ...] | None]]) -> None:
        self._rules: Final = tuple(
            (rule, None if hints is None else frozenset(h.encode() for h in hints if h.isascii()))
            for rule, hints in rules
        )
        # Each word is looked for once, whichever rules share it, and each rule's words
        # checked against those found: a loop over the rules, each searching its own
        # words, cost more in Python than the searches.
        every = dict.fromkeys(word for _, words in self._rules for word in words or ())
        self._every: Final = Needles(every)
        self._always: Final = [rule for rule, words in self._rules if words is None]
        self._squeeze: Final = Squeeze(every)
        # A hint's leading newline matches the text's start too (see Rule)
        self._at_start: Final = tuple(word for word in every if word[:1] == b"\n" and word[1:])

    def needed(self, text: str) -> list[Rule] | None:
        """The rules whose hints ``text`` holds, in order; ``None`` if it is not ASCII."""
        if not text.isascii():
            return None
        found = self._every.found(self._squeeze(text.encode("ascii")))
        if self._at_start:
            head = text[:_HEAD].lower().encode("ascii")
            found.update(word for word in self._at_start if head.startswith(word[1:]))
        if not found:
            return self._always
        return [rule for rule, words in self._rules if words is None or not words.isdisjoint(found)]


@final
class Screen:
    """Finds the events among many that redaction may change, in one pass per hint.

    ``hints`` are lower-case substrings one of which occurs in every text a
    rule changes, ``key_words`` those one of which occurs in every secret
    key; ``None`` for either means any text may need redaction (a rule
    without hints, a custom key pattern), and the screen passes every
    event on. ``paths`` adds ``/`` (paths are being shortened).
    """

    def __init__(
        self, hints: Iterable[str] | None, key_words: Iterable[str] | None, *, paths: bool
    ) -> None:
        self.everything: Final = hints is None or key_words is None
        words = [*(hints or ()), *(key_words or ()), *(["/"] if paths else [])]
        # A hint's leading newline matches a text's start too (see Rule): in JSON, after
        # the opening quote of a string
        at_start = ['"' + _escaped(word[1:].lower()) for word in hints or () if word[0] == "\n"]
        self._words: Final = _fewest([*(_escaped(word.lower()) for word in words), *at_start])
        ascii_words = [word.encode("ascii") for word in self._words if word.isascii()]
        self._ascii: Final = Needles(ascii_words)
        self._squeeze: Final = Squeeze(ascii_words)

    def suspects(
        self, texts: Sequence[bytes], max_chars: int | None, known: KnownSecrets
    ) -> list[int]:
        """The indices (ascending) of ``texts`` that redaction may change.

        ``texts`` are JSON values in UTF-8 as :mod:`json` writes them (non-ASCII
        kept); ``max_chars`` the cap on one string; ``known`` the secret
        values scrubbed wherever they appear.
        """
        if self.everything or len(known) > _MAX_KNOWN:
            return list(range(len(texts)))
        suspects: list[int] = []
        plain: list[int] = []  # ASCII texts, screened together
        for index, text in enumerate(texts):
            if max_chars is not None and len(text) > max_chars:
                suspects.append(index)  # some string may be over the cap
            elif not text.isascii():
                if self._unicode_hit(text, known):
                    suspects.append(index)
            else:
                plain.append(index)
        if plain:
            pieces = [texts[index] for index in plain]
            suspects.extend(plain[hit] for hit in self._ascii_hits(pieces, known))
            suspects.sort()
        return suspects

    def _ascii_hits(self, pieces: list[bytes], known: KnownSecrets) -> set[int]:
        """Which of ``pieces`` (ASCII) hold a hint or a known value."""
        joined = _SEPARATOR.join(pieces)
        hits: set[int] = set()
        if known:
            _find(joined, Needles(known.escaped()), len(pieces), hits)
        if len(hits) < len(pieces):
            _find(self._squeeze(joined), self._ascii, len(pieces), hits)
        return hits

    def _unicode_hit(self, text: bytes, known: KnownSecrets) -> bool:
        # str.lower(), not bytes.lower(): "K" (the Kelvin sign) lower-cases to "k"
        try:
            lowered = text.decode("utf-8").lower()
        except UnicodeDecodeError:
            return True
        if any(word in lowered for word in self._words):
            return True
        return any(value in text for value in known.escaped())


@final
class Needles:
    """Words to look for in a text, with the bytes they are made of.

    A text that lacks one of a word's bytes cannot hold the word: which of
    the bytes a text holds costs one memchr each, and most texts lack some
    byte of most words, so few words are searched for in earnest.
    """

    __slots__ = ("_alphabet", "words")

    def __init__(self, words: Iterable[bytes]) -> None:
        self.words: Final = tuple((word, frozenset(word)) for word in words if word)
        self._alphabet: Final = tuple({byte for word, _ in self.words for byte in word})

    def present(self, text: bytes) -> frozenset[int]:
        """The bytes of the words that ``text`` holds."""
        return frozenset([byte for byte in self._alphabet if byte in text])

    def found(self, text: bytes) -> set[bytes]:
        """The words ``text`` holds."""
        present = self.present(text)
        return {word for word, made_of in self.words if made_of <= present and word in text}


def _find(text: bytes, needles: Needles, count: int, hits: set[int]) -> None:
    """Add to ``hits`` the index of each of the ``count`` pieces of ``text`` holding a needle."""
    starts: list[int] | None = None  # where each piece begins, found at the first hit
    present = needles.present(text)
    for needle, made_of in needles.words:
        if not made_of <= present:
            continue
        position = text.find(needle)
        while position >= 0:
            if starts is None:
                starts = _starts(text)
            piece = bisect_right(starts, position) - 1
            hits.add(piece)
            if piece + 1 >= count:
                break
            position = text.find(needle, starts[piece + 1])
        if len(hits) == count:
            return


def _starts(text: bytes) -> list[int]:
    starts, position = [0], text.find(_SEPARATOR)
    while position >= 0:
        starts.append(position + 1)
        position = text.find(_SEPARATOR, position + 1)
    return starts
