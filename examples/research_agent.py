"""A small research agent: search, fetch, ask before writing, delegate the summary.

Run it under onlooker (history, audit trail, metrics and summary on)::

    onlooker run examples/research_agent.py --answer '{"approve": true}'

It calls several tools, one of which fails (a source is down), asks a person
whether to write the report (``--answer`` answers; without it the question is
declined), and runs the summarizing as a child execution. The tools work on
an in-memory workspace, so running it changes nothing on disk but
``.onlooker/``.
"""

from __future__ import annotations

from contextlib import suppress

import onlooker
from onlooker import ExecutionContext

SOURCES: dict[str, str] = {
    "https://example.org/event-sourcing": (
        "Event sourcing stores every change as an immutable event. "
        "State is rebuilt by replaying the events in order."
    ),
    "https://example.org/audit-trails": (
        "A hash-chained audit trail makes tampering evident: each record "
        "carries the hash of the one before it."
    ),
    "https://example.org/offline": "",  # this one is down: fetching it fails
}

WORKSPACE: dict[str, str] = {"notes/brief.md": "Explain how to keep a trustworthy record."}


@onlooker.tool
def search(query: str, limit: int = 3) -> list[str]:
    """Find source URLs for a query."""
    return sorted(SOURCES)[:limit]


@onlooker.tool
async def fetch(url: str) -> str:
    """Download a source; fails when the source is unreachable."""
    text = SOURCES.get(url)
    if not text:
        raise onlooker.ToolError(f"{url} is unreachable (HTTP 503)")
    return text


@onlooker.tool(reads="path")
def read_file(path: str) -> str:
    """Read a file of the workspace."""
    return WORKSPACE[path]


@onlooker.tool(mutating=True, writes="path")
def write_file(path: str, text: str) -> int:
    """Write a file of the workspace; returns the number of characters written."""
    WORKSPACE[path] = text
    return len(text)


@onlooker.tool
def count_words(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


async def summarize(ctx: ExecutionContext) -> str:
    """The child execution: the first sentence of every page, and a word count."""
    pages = ctx.input if isinstance(ctx.input, list) else []
    sentences = [str(page).split(". ")[0].rstrip(".") + "." for page in pages]
    summary = " ".join(sentences)
    words = await ctx.call(count_words, text=summary)
    return f"{summary} ({words} words)"


async def main(ctx: ExecutionContext) -> str:
    """Research a topic, then write a report if a person approves."""
    brief = await ctx.call(read_file, path="notes/brief.md")
    urls = await ctx.call(search, query=brief)
    pages: list[str] = []
    for url in urls:
        # A dead source is recorded as a failed call; the research goes on.
        with suppress(onlooker.ToolError):
            pages.append(await ctx.call(fetch, url=url))
    child = await ctx.spawn(summarize, task_id="summarize", input=list(pages))
    summary = child.value if child.ok and child.value is not None else "no summary"
    answer = await ctx.elicit(
        f"Write the report ({len(summary)} characters) to reports/research.md?",
        schema={
            "type": "object",
            "properties": {"approve": {"type": "boolean", "description": "write the report"}},
            "required": ["approve"],
        },
    )
    if answer.action != "accept" or not (answer.content or {}).get("approve"):
        return "report not written: not approved"
    written = await ctx.call(write_file, path="reports/research.md", text=summary)
    return f"report written: {written} characters from {len(pages)} sources"
