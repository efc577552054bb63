"""The record format: one line of compact JSON per event, hash-chained.

Standard library only (the coding-agent hook imports it). A record is::

    {"v":1,"seq":0,"at":"...Z","session_id":"...","prev":"<hex>","event":{...},"hash":"<hex>"}

``hash`` is the SHA-256 (hex) of the line's UTF-8 bytes with its final
``,"hash":"<hex>"`` member removed, i.e. of the record serialized without
``hash``; ``prev`` is the previous record's ``hash`` (:data:`GENESIS` for
the first record of a session); ``seq`` counts records per session, with no
gaps, across rotated segments.

A few records are the writer's own notes, chained like the others, with a
``note`` member in place of ``event``::

    {"v":1,"seq":7,"at":"...Z","session_id":"...","prev":"<hex>","note":{"kind":"gap",...},"hash":"<hex>"}

``{"kind":"retired","through_seq":N}`` ends the segment a rotation closes,
written before that rotation deletes the oldest segment (``keep=0``: right
after it): records up to seq ``N`` are gone on purpose (``verify``
accepts a trail whose first record is ``N + 1`` only with this proof).
``{"kind":"gap","since":...,"until":...,"attempts":...,"error":...,
"dropped":...}`` is the first record written after the disk refused writes:
the records that follow were written late (their ``at`` is when they were
written), and ``dropped`` were given up on.
"""

from __future__ import annotations

import sys
from binascii import hexlify

from onlooker._shared import json_loads
from onlooker._shared import sha256 as _own_sha256

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, Final, final
else:

    def final(cls: type) -> type:
        return cls


__all__ = [
    "EVENT",
    "GENESIS",
    "LIVE_NAME",
    "NOTE",
    "RECORD_VERSION",
    "RecordMaker",
    "first_seq",
    "record_state",
    "segment_name",
]

RECORD_VERSION: Final = 1
"""The record format version, written as ``v``."""

GENESIS: Final = "0" * 64
"""The ``prev`` of a session's first record."""

LIVE_NAME: Final = "events.jsonl"
"""The live segment's file name; rotated ones are ``events.1.jsonl`` (newest) ... ``events.<keep>.jsonl``."""

EVENT: Final = b'","event":'
"""The member after ``prev`` in an event's record."""
NOTE: Final = b'","note":'
"""The member after ``prev`` in one of the writer's notes."""
_HASH: Final = b',"hash":"'
_END: Final = b'"}\n'


def segment_name(index: int) -> str:
    """The file name of segment ``index``: 0 is the live file, 1 the newest rotated one."""
    return LIVE_NAME if index == 0 else f"events.{index}.jsonl"


def _sha256() -> Callable[[bytes], Any]:
    """OpenSSL's SHA-256 when ``hashlib`` is loaded already (twice as fast), else CPython's own.

    The coding-agent hook does not load ``hashlib`` (OpenSSL costs it ~2.5 ms
    per start); a long-lived process has it. Both give the same digests.
    """
    hashlib = sys.modules.get("hashlib")
    if hashlib is None:
        return _own_sha256
    openssl: Callable[[bytes], Any] = hashlib.sha256
    return openssl


@final
class RecordMaker:
    """Makes the record lines of one batch: same ``at`` and session, chained one to the next."""

    __slots__ = ("_event", "_hash", "_note")

    def __init__(self, session_id: str, at: str) -> None:
        # One bytes % per record makes it up to its closing brace, from seq, prev and body.
        middle = f',"at":"{at}","session_id":"{session_id}","prev":"'.encode().replace(b"%", b"%%")
        start = b'{"v":%d,"seq":%%d' % RECORD_VERSION + middle + b"%s"
        self._event = start + EVENT + b"%s"
        self._note = start + NOTE + b"%s"
        self._hash = _sha256()

    def line(self, seq: int, prev: bytes, member: bytes, body: bytes) -> tuple[bytes, bytes]:
        """Record ``seq`` after the one whose hash is ``prev``: its line and its hash (hex).

        ``member`` is :data:`EVENT` or :data:`NOTE`; ``body`` the event's (or
        note's) compact JSON in UTF-8.
        """
        start = (self._event if member is EVENT else self._note) % (seq, prev, body)
        digest = hexlify(self._hash(start + b"}").digest())
        return start + _HASH + digest + _END, digest

    def lines(self, bodies: Sequence[bytes], seq: int, prev: bytes) -> tuple[bytes, bytes]:
        """The records of ``bodies`` (events), the first being ``seq``: their lines and last hash."""
        template, sha = self._event, self._hash
        lines: list[bytes] = []
        add = lines.append
        for body in bodies:
            start = template % (seq, prev, body)
            prev = hexlify(sha(start + b"}").digest())
            add(start + _HASH + prev + _END)
            seq += 1
        return b"".join(lines), prev


def record_state(line: bytes) -> tuple[int, str] | None:
    """The seq and hash of one record line (without its newline), or None if it is not one."""
    try:
        record = json_loads(line.decode("utf-8", "surrogatepass"))  # as json.loads decodes
        seq, digest = record["seq"], record["hash"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(seq, int) and isinstance(digest, str) and len(digest) == 64:
        return seq, digest
    return None


def first_seq(path: str) -> int | None:
    """The seq of the first record of the segment at ``path``, or None."""
    try:
        with open(path, "rb") as handle:
            state = record_state(handle.readline().rstrip(b"\n"))
    except OSError:
        return None
    return None if state is None else state[0]
