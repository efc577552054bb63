"""The per-record cap: an event's JSON form cut to a size, keeping its shape.

Standard library only (the coding-agent hook imports it). The audit trail,
the hook and history cut a record that is still too large after each string
was capped, the same way, with the same markers as :func:`truncate`.
"""

from __future__ import annotations

from onlooker._shared import json_dumps

from ._secrets import ENVELOPE_FIELDS, truncate

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DEEPEST", "cap_depth", "cap_record"]

DEEPEST = 200
"""Levels of containers a value may nest, as the engine's snapshots keep them: deeper
ones are marked (pydantic, which :func:`onlooker.parse_event` reads with, goes no deeper)."""


def cap_depth(value: Any, deepest: int = DEEPEST) -> Any:
    """``value`` with each list or dict nested deeper than ``deepest`` levels replaced by
    ``"<list nested deeper than 200 levels>"``; ``value`` itself when none is."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return value
    if deepest == 0:
        return f"<{kind.__name__} nested deeper than {DEEPEST} levels>"
    items = value.items() if kind is dict else enumerate(value)
    out: Any = None
    for key, item in items:
        new = cap_depth(item, deepest - 1)
        if new is not item:
            if out is None:
                out = dict(value) if kind is dict else list(value)
            out[key] = new
    return value if out is None else out


def _size(value: Any) -> int:
    return len(json_dumps(value))


def cap_record(event: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """An event's JSON form cut so that its compact JSON holds about ``max_chars`` at most.

    The fields of :data:`ENVELOPE_FIELDS` are kept; the largest of the
    others is cut first, keeping its type, so the event still validates: a
    string becomes its first characters and ``…[truncated N chars]``, a list
    its first items and ``"…[truncated N items]"``, an object keeps its keys
    and cuts its largest member (one with too many members to fit even so
    keeps its first ones, and ``"…": "…[truncated N members]"``). Returns ``event`` itself when it fits;
    never mutates it. Run it after redaction, on what is about to be written.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive integer, not {max_chars!r}")
    size = _size(event)
    if size <= max_chars:
        return event
    out = dict(event)
    sizes = {key: _size(value) for key, value in out.items() if key not in _KEPT}
    return _fit(out, sizes, size, max_chars)


# Never cut: the envelope, and the attribution (small, and the event is invalid without it).
_KEPT = ENVELOPE_FIELDS | {"attribution"}


def _fit(out: dict[str, Any], sizes: dict[str, int], size: int, budget: int) -> dict[str, Any]:
    """Cut the members of ``out`` named in ``sizes`` until ``out`` takes about ``budget``.

    Water-filling: small members are kept whole and the others share what
    is left equally; then, if escapes or markers overshoot, the largest is
    cut again.
    """
    available = budget - (size - sum(sizes.values()))
    remaining = len(sizes)
    for key in sorted(sizes, key=sizes.__getitem__):
        share = max(available // remaining, 0)
        remaining -= 1
        if sizes[key] > share:
            new = _shrink(out[key], share)
            new_size = _size(new)
            size += new_size - sizes[key]
            out[key], sizes[key] = new, new_size
        available -= sizes[key]
    if size <= budget:
        return out
    from heapq import heapify, heappop, heappush  # the hook rarely gets here

    largest = [(-member_size, key) for key, member_size in sizes.items()]
    heapify(largest)
    while size > budget and largest:
        negated, key = heappop(largest)
        if -negated != sizes[key]:
            continue  # cut since: its new size is in the heap too
        new = _shrink(out[key], max(sizes[key] - (size - budget), 0))
        new_size = _size(new)
        if new_size >= sizes[key]:
            continue  # cannot get smaller: the next largest
        size += new_size - sizes[key]
        out[key], sizes[key] = new, new_size
        heappush(largest, (-new_size, key))
    return out


def _shrink(value: Any, budget: int) -> Any:
    """``value`` cut toward ``budget`` characters of JSON, keeping its type (best effort)."""
    kind = type(value)
    if kind is str:
        # Cut by characters, measured in JSON: escapes (a newline is two) make it longer.
        keep = max(budget - 32, 0)
        cut = truncate(value, keep)
        while keep and (size := _size(cut)) > budget:
            keep = max(keep * budget // size - 1, 0)
            cut = truncate(value, keep)
        return cut
    if kind is list:
        kept: list[Any] = []
        used = 2 + 32  # the brackets and the marker
        for item in value:
            item_size = _size(item) + 1
            if used + item_size > budget:
                if not kept and item_size > 64:  # one huge first item: cut it instead
                    kept.append(_shrink(item, budget - used))
                break
            kept.append(item)
            used += item_size
        if len(kept) < len(value):
            kept.append(f"…[truncated {len(value) - len(kept)} items]")
        return kept
    if kind is dict:
        members = dict(value)
        sizes = {key: _size(item) for key, item in members.items()}
        members = _fit(members, sizes, _size(value), budget)
        return members if _size(members) <= budget else _first_members(members, sizes, budget)
    return value


def _first_members(members: dict[str, Any], sizes: dict[str, int], budget: int) -> dict[str, Any]:
    """An object too large even with each member cut: its first members, and a marker."""
    kept: dict[str, Any] = {}
    used = 2 + 32  # the braces and the marker
    for key, item in members.items():
        used += len(json_dumps(key)) + 2 + sizes[key]
        if used > budget:
            break
        kept[key] = item
    kept[_MORE] = f"…[truncated {len(members) - len(kept)} members]"
    return kept


_MORE = "…"  # the key of the marker that ends a cut object
