"""The Jinja2 environment: autoescaping on, and the filters the templates use."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import jinja2
from markupsafe import Markup, escape
from pydantic import BaseModel

from onlooker._cli._common import printable  # the terminal views' own rule, one way to do it
from onlooker.plugins.audit._events import json_form

from ._timeline import Lane, qid

__all__ = ["ICONS", "environment", "fragment_for_stream", "lane_rows"]

ICONS: Final = {
    "completed": "✓",
    "accepted": "✓",
    "failed": "✗",
    "blocked": "⊘",
    "skipped": "↷",
    "cancelled": "⊗",
    "declined": "↩",
    "expired": "⌛",
    "running": "▶",
    "open": "…",
    "intact": "✓",
    "tampered": "✗",
    "torn tail": "⚠",
    "unreadable": "?",
}
"""A symbol per status, so a status reads without colour (beside its name, always)."""

_MAX_JSON: Final = 100_000
# A server-sent event's data lines are joined again with "\n" by the browser,
# so a "\r" (which also ends a line there) must travel as a character reference.
_CARRIAGE_RETURN: Final = {ord("\r"): "&#13;"}


def duration(ms: float | None) -> str:
    """A duration in milliseconds, with the digits that matter (empty for ``None``)."""
    if ms is None:
        return ""
    if ms < 1:
        return f"{ms:.3f} ms"
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def when(moment: datetime | None) -> str:
    """A UTC time to the millisecond."""
    if moment is None:
        return ""
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def pretty(value: Any) -> str:
    """JSON, indented; very long values are cut with a note (the raw events keep them whole)."""
    if isinstance(value, BaseModel):
        value = json_form(value)  # not model_dump_json: it refuses a lone surrogate
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > _MAX_JSON:
        return f"{text[:_MAX_JSON]}\n… ({len(text) - _MAX_JSON} more characters)"
    return text


def fragment_for_stream(html: str) -> str:
    """``html`` as server-sent event data that the browser puts back together unchanged."""
    return html.translate(_CARRIAGE_RETURN)


def lane_rows(lane: Lane) -> Markup:
    """The waterfall's rows as HTML, every value escaped.

    Written out here rather than in a template: a 1,000-call execution is
    1,000 rows, and a Jinja loop with a dozen escaped expressions per row
    costs several times this (bench/ui.py).
    """
    parts: list[str] = ['<ol class="lane">']
    for item in lane.items:
        status = escape(item.status)
        key = escape(item.key)
        cells = (
            f'<span class="icon" aria-hidden="true">{ICONS.get(item.status, "•")}</span>'
            f'<span class="name">{"? " if item.kind == "interaction" else ""}{shown(item.name)}'
            f'</span><span class="args">{shown(item.preview)}</span>'
            f'<span class="status">{status}</span>'
            f'<span class="dur">{duration(item.duration_ms)}</span>'
            + (
                '<span class="par" title="ran at the same time as another row">∥</span>'
                if item.parallel
                else '<span class="par"></span>'
            )
            + f'<span class="track"><span class="bar" style="{item.bar_style}"></span></span>'
        )
        href = escape(item.href)
        if item.lane is not None:
            preview = f" ({shown(item.preview)})" if item.preview else ""
            parts.append(
                f'<li class="k-child s-{status}" data-key="{key}"><details open id="d-{key}">'
                f'<summary class="row">{cells}</summary><p class="child-link"><a href="{href}">'
                f"child execution {shown(item.id)}{preview}</a></p>"
                f"{lane_rows(item.lane)}</details></li>"
            )
        else:
            parts.append(
                f'<li class="k-{item.kind} s-{status}" data-key="{key}">'
                f'<a class="row" href="{href}">{cells}</a></li>'
            )
    parts.append("</ol>")
    return Markup("\n".join(parts))


def shown(text: str) -> Markup:
    """A recorded text as HTML: escaped, its control characters written out (``\\u202e``).

    Recorded values are untrusted evidence: a right-to-left override would
    show ``invoice_\\u202egpj.exe`` as ``invoice_exe.jpg``; the terminal views
    write them out the same way.
    """
    return escape(printable(text))


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}`` of the templates: text written out as :func:`shown` does."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return printable(value)
    return value


def environment() -> jinja2.Environment:
    """The templates, autoescaped (every value is text unless a template says otherwise)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(duration=duration, when=when, pretty=pretty, qid=qid)
    env.globals.update(icons=ICONS, nav="", lane_rows=lane_rows)
    return env
