"""JSON values to the bytes the trail holds: ``json``'s compact text, in UTF-8.

Standard library only (the coding-agent hook imports it); pydantic-core is
used when a process has it. :func:`json_bytes` is the reference: one C
encoder made once and reused (:func:`onlooker._shared.json_dumps` makes one
per call, for its circular-reference table; this one has none: a cycle is
caught as the ``RecursionError`` it causes and handed to ``json_dumps``,
which names it). :func:`fast_json_bytes` gives the same bytes for JSON
values three times faster with pydantic-core's encoder, re-encoding the
rare value where the two differ (floats under 1e-4, which pydantic writes
``1e-5`` and ``json`` ``1e-05``).
"""

from __future__ import annotations

from onlooker._shared import attribution as root_attribution
from onlooker._shared import json_dumps

from ._secrets import ENVELOPE_FIELDS

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any, Final

    from ._redact import Redactor

__all__ = [
    "SUSPECT",
    "encode_dicts",
    "fast_json_bytes",
    "holds_long_string",
    "json_bytes",
    "pydantic_to_json",
    "redact_where_needed",
    "root_is_plain",
    "screen_event",
    "screened_text",
]

SUSPECT: Final = b"\xff"
"""A screened text the screen always suspects (not UTF-8): the event is redacted field by field."""


def _refuse(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _reusable_encoder() -> Callable[[Any, int], Any] | None:
    try:
        from _json import encode_basestring, make_encoder
    except ImportError:  # pragma: no cover - another interpreter
        return None
    return make_encoder(None, _refuse, encode_basestring, None, ":", ",", False, False, True)


_ENCODE = _reusable_encoder()


def json_bytes(value: Any) -> bytes:
    """``value`` as ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)`` in UTF-8.

    Lone surrogates are written as ``\\udXXX`` escapes (``backslashreplace``),
    which read back as the same string; an int too long for ``str()`` as
    :func:`onlooker._shared.long_int_note` says. A value that is not JSON raises
    :mod:`json`'s ``TypeError`` or ``ValueError``.
    """
    if _ENCODE is None:  # pragma: no cover - another interpreter
        text = json_dumps(value)
    else:
        try:
            text = "".join(_ENCODE(value, 0))
        except (RecursionError, ValueError):
            # A circular reference: json's own error, or the text; an int too long for str()
            # (over 4,300 digits), which no JSON reader takes: a string saying so.
            text = json_dumps(value)
    return text.encode("utf-8", "backslashreplace")


def fast_json_bytes(values: Sequence[Any]) -> list[bytes]:
    """:func:`json_bytes` of each of ``values`` (JSON values), by pydantic-core's encoder.

    A value that is not JSON but that pydantic can serialize (bytes, a set,
    a datetime, a ``None`` key) is written as pydantic writes it instead of
    refused; one neither can serialize raises :mod:`json`'s ``TypeError``.
    """
    to_json = pydantic_to_json()
    if to_json is None:  # pragma: no cover - pydantic is a dependency
        return [json_bytes(value) for value in values]
    out: list[bytes] = []
    for value in values:
        try:
            out.append(to_json(value))
        except ValueError:  # lone surrogates, unknown types: json's bytes or json's error
            out.append(json_bytes(value))
    if _small_float(b"\n".join(out)):  # rare: look at each
        for index, text in enumerate(out):
            if _small_float(text):
                out[index] = json_bytes(values[index])  # as json writes it
    return out


def _small_float(text: bytes) -> bool:
    """Whether ``text`` may hold a float under 1e-4, which pydantic writes unlike json.

    pydantic writes ``1e-5`` or ``0.00001`` where json writes ``1e-05``: an
    exponent of one digit, or a number starting ``0.0000``, after a digit or
    a ``:``, ``,``, ``[`` or ``-``. Each pattern starts with a literal, so
    ``re`` finds candidates at the speed of a substring search.
    """
    exponent, decimal = _SMALL_FLOATS
    for pattern, before in ((exponent, b"0123456789"), (decimal, b":,[-")):
        for match in pattern.finditer(text):
            if match.start() and text[match.start() - 1] in before:
                return True
    return False


_SMALL_FLOATS: list[re.Pattern[bytes]] = []  # compiled with pydantic-core, which loads re


def pydantic_to_json() -> Callable[..., bytes] | None:
    try:
        import re

        from pydantic_core import to_json
    except ImportError:  # pragma: no cover - pydantic is a dependency
        return None
    if not _SMALL_FLOATS:
        _SMALL_FLOATS.append(re.compile(rb"e-[1-9](?![0-9])"))
        _SMALL_FLOATS.append(re.compile(rb"0\.0000"))
    return to_json


def holds_long_string(values: Iterable[Any], limit: int) -> bool:
    """Whether one of ``values``, or an item of one of them, is a string over ``limit`` characters.

    Two levels only (an event's fields and their items: a tool call's
    arguments): a quick guess that spares serializing a huge string only to
    redact and cut it. Deeper strings are found by the length of the text.
    """
    for value in values:
        kind = type(value)
        if kind is str:
            if len(value) > limit:
                return True
        elif kind is dict or kind is list:
            for item in value.values() if kind is dict else value:
                if type(item) is str and len(item) > limit:
                    return True
    return False


def screened_text(
    to_json: Callable[..., bytes], event: Any, attribution: object, skip_root: bool
) -> bytes | None:
    """What the screen looks at in an event: its JSON without the fields never redacted.

    ``attribution`` is the event's (as a dict): the root one, nothing but
    nulls and a zero depth, is left out too when ``skip_root`` (see
    :func:`root_is_plain`). ``None`` when pydantic cannot serialize the
    event (lone surrogates): it is redacted field by field.
    """
    skip = _SKIP_WITH_ATTRIBUTION if skip_root and attribution == _ROOT else _SKIP
    try:
        return to_json(event, exclude=skip)
    except ValueError:
        return None


def screen_event(event: Any, max_chars: int, skip_root: bool) -> bytes:
    """What the screen looks at in a pydantic event, or :data:`SUSPECT` to redact it unseen.

    An event holding a string over ``max_chars`` is not serialized first (it
    is to be cut, and serializing a huge string costs more than cutting it);
    one pydantic cannot serialize (lone surrogates) is redacted field by field.
    """
    if holds_long_string(event.__dict__.values(), max_chars):
        return SUSPECT
    to_json = event.__pydantic_serializer__.to_json
    screen = screened_text(to_json, event, event.attribution.__dict__, skip_root)
    return SUSPECT if screen is None or len(screen) > max_chars else screen


def root_is_plain(redactor: Redactor) -> bool:
    """Whether the redactor leaves the root attribution as it is (no rule of its holds its keys)."""
    return not redactor.screen([_ROOT_JSON])


_ROOT: Final = root_attribution()
_ROOT_JSON: Final = json_dumps(_ROOT).encode()
_SKIP: Final = set(ENVELOPE_FIELDS)
_SKIP_WITH_ATTRIBUTION: Final = {*ENVELOPE_FIELDS, "attribution"}


def encode_dicts(
    events: Sequence[Mapping[str, Any]],
    redactor: Redactor,
    max_chars: int,
    redact_one: Callable[[int], bytes],
) -> list[bytes]:
    """Events' JSON forms as the trail holds them: serialized, and redacted where needed.

    ``redact_one(index)`` redacts, truncates and serializes one event value
    by value (the reference); here only those the screen suspects go
    through it, and those holding a string over the cap, which are not
    serialized at all first.
    """
    to_json = pydantic_to_json()
    skip_root = root_is_plain(redactor)
    screened: list[bytes] = []  # what the screen looks at in each
    for event in events:
        screen = None
        if (
            type(event) is dict
            and to_json is not None
            and not holds_long_string(event.values(), max_chars)  # spares serializing it
        ):
            screen = screened_text(to_json, event, event.get("attribution"), skip_root)
        # Too long: a string may be over the cap.
        screened.append(screen if screen is not None and len(screen) <= max_chars else SUSPECT)
    redacted = redact_where_needed(redactor, screened, max_chars, redact_one)
    as_is = fast_json_bytes(
        [_EMPTY if index in redacted else event for index, event in enumerate(events)]
    )
    return [
        text
        for index, plain in enumerate(as_is)
        if (text := redacted.get(index, plain)) is not None
    ]


_EMPTY: Final[Mapping[str, Any]] = {}


def redact_where_needed(
    redactor: Redactor,
    screened: list[bytes],
    max_chars: int,
    redact_one: Callable[[int], bytes | None],
) -> dict[int, bytes | None]:
    """The events the screen suspects, redacted by ``redact_one``, by index.

    ``screened[index]`` is what the screen looks at for event ``index``
    (its strings that redaction would see; :data:`SUSPECT` makes it suspect
    whatever it holds). The others redaction leaves as they are: serialize
    them as they are. When redacting one teaches the redactor a secret (a
    value under a secret key), every event of the batch goes through the
    screen again and those it names are redacted again, until nothing new
    is learned (a few passes at most): none of the batch is written yet, so
    a secret learned from one event is scrubbed from those before it too.
    ``redact_one(index)`` redacts from the event as it came, and returns
    ``None`` for an event it could not record.
    """
    redacted: dict[int, bytes | None] = {}
    suspects = redactor.screen(screened, max_chars=max_chars)
    for _ in range(_MAX_PASSES):  # more: a batch teaching more secrets than are kept
        learned = redactor.learned
        for index in suspects:
            redacted[index] = redact_one(index)
        if redactor.learned == learned:
            break
        suspects = redactor.screen(screened, max_chars=max_chars)
    return redacted


_MAX_PASSES: Final = 4
