"""Export onlooker executions as OpenTelemetry GenAI spans, offline.

A program calls tools (one fails, one is refused by a pre-hook), asks a
question and delegates to a child execution; a tracked run (tools another
framework ran) follows. The ``opentelemetry`` plugin turns both into
``invoke_agent`` / ``execute_tool`` spans on a local ``TracerProvider``,
printed here as a tree. ``--console`` prints the SDK's JSON instead; point an
``OTLPSpanExporter`` at your collector to send them for real.

Run it with ``.venv/bin/python examples/integrations/opentelemetry_export.py``.
"""

from __future__ import annotations

import contextlib
import sys

import anyio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import onlooker
from onlooker import ExecutionContext, HookAction, HookMatcher, PreHookResult, ToolUseContext
from onlooker.integrations import opentelemetry as otel


@onlooker.tool(description="Search the knowledge base.")
def search(q: str) -> list[str]:
    """Search."""
    return [f"{q}: see policy 4.2"]


@onlooker.tool
def charge(eur: int) -> None:
    """Charge a card (it is declined)."""
    raise onlooker.ToolError("card declined")


@onlooker.tool(mutating=True)
def delete_account(user: str) -> None:
    """Refused by the pre-hook below."""


@onlooker.tool
async def research(topic: str) -> str:
    """Delegate to a child execution."""
    result = await onlooker.current_context().spawn(researcher, task_id="research")
    return str(result.value)


async def researcher(ctx: ExecutionContext) -> str:
    hits = await ctx.call("search", q="refund window")
    return str(hits[0])


async def support(ctx: ExecutionContext) -> str:
    await ctx.call("search", q="refund")
    with contextlib.suppress(onlooker.ToolError):
        await ctx.call("charge", eur=20)
    with contextlib.suppress(onlooker.ToolBlockedError):
        await ctx.call("delete_account", user="alice")
    await ctx.call("research", topic="refunds")
    answer = await ctx.elicit("Refund 20 EUR?")
    return "refunded" if answer.action == "accept" else "kept"


def no_deletes(use: ToolUseContext) -> PreHookResult:
    return PreHookResult(action=HookAction.BLOCK, reason="accounts are never deleted here")


async def approve(question: onlooker.Elicitation) -> onlooker.InteractionResponse:
    return onlooker.InteractionResponse.accept({})


def print_tree(spans: tuple[ReadableSpan, ...]) -> None:
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def show(span: ReadableSpan, depth: int) -> None:
        attributes = span.attributes or {}
        status = attributes.get("onlooker.tool.status") or attributes.get(
            "onlooker.execution.status"
        )
        took = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        error = f"  error.type={attributes['error.type']!r}" if "error.type" in attributes else ""
        print(f"{'  ' * depth}{span.name}  [{status}, {took:.2f} ms]{error}")
        for event in span.events:
            print(f"{'  ' * (depth + 1)}· {event.name} {dict(event.attributes or {})}")
        context = span.get_span_context()
        for child in children.get(context.span_id if context else None, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


async def main() -> None:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    exporter = ConsoleSpanExporter() if "--console" in sys.argv else memory
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async with onlooker.ExecutionEngine(
        tools=[search, charge, delete_account, research],
        hooks=[HookMatcher(pattern="delete_*", pre=(no_deletes,))],
        plugins=[otel.plugin(provider, record_content=True)],
    ) as engine:
        await engine.execute(support, on_elicitation=approve, trigger="example")

        # Tools another framework ran, reported through a tracked execution.
        async with engine.track("langgraph-bot", trigger="langgraph") as run:
            call = await run.tool_started("web_search", {"q": "status page"}, tool_call_id="call_1")
            await call.finished({"up": True})
    provider.shutdown()

    if exporter is memory:
        print_tree(memory.get_finished_spans())


if __name__ == "__main__":
    anyio.run(main)
