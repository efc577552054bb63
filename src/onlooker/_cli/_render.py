"""Draw executions for the terminal: the tree of calls, questions and children."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final, assert_never

from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from onlooker import (
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionStarted,
    ToolCallFinished,
    ToolCallStarted,
)

if TYPE_CHECKING:  # the stores stay unimported until a command needs them
    from onlooker.plugins.history import ExecutionTree, InteractionRecord, ToolCallRecord
    from onlooker.plugins.summary import ExecutionSummary

__all__ = ["event_line", "execution_tree", "short", "summary_table"]

STYLES: Final = {
    "completed": "green",
    "accepted": "green",
    "failed": "red",
    "blocked": "red",
    "expired": "yellow",
    "cancelled": "yellow",
    "declined": "yellow",
    "skipped": "dim",
    "running": "cyan",
}


def short(value: object, limit: int = 60) -> str:
    """A value as compact JSON, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _status(status: str) -> str:
    return f"[{STYLES.get(status, 'white')}]{status}[/]"


def _args(args: dict[str, object]) -> str:
    return ", ".join(f"{key}={short(value, 40)}" for key, value in args.items())


def execution_tree(root: ExecutionTree) -> Tree:
    """A rich ``Tree`` of one stored execution: its steps in order, then its children.

    Tool calls show their status and duration (and result or error),
    questions their answer, child executions their own subtree.
    """
    top = Tree(_execution_label(root))
    _add_steps(top, root)
    return top


def _execution_label(node: ExecutionTree) -> str:
    label = f"[b]{escape(node.program or '?')}[/b]"
    if node.task_id:
        label += f" [dim]task={escape(node.task_id)}[/]"
    label += f" [dim]{escape(node.execution_id)}[/]  {_status(node.status)}"
    if node.duration_ms is not None:
        label += f" {node.duration_ms:.1f} ms"
    if node.error is not None:
        label += f"  [red]{escape(node.error.type)}: {escape(node.error.message)}[/]"
    return label


def _add_steps(parent: Tree, node: ExecutionTree) -> None:
    steps: list[tuple[int, ToolCallRecord | None, InteractionRecord | None]] = [
        (call.seq, call, None) for call in node.tool_calls
    ]
    steps += [(question.seq, None, question) for question in node.interactions]
    for _, step, question in sorted(steps, key=lambda item: item[0]):
        if step is not None:
            args = _args(step.args) if step.args is not None else "…"
            line = f"[cyan]{escape(step.tool)}[/]({escape(args)})  {_status(step.status)}"
            if step.duration_ms is not None:
                line += f" {step.duration_ms:.1f} ms"
            if step.error is not None:
                line += f"  [red]{escape(step.error.message)}[/]"
            elif step.result is not None:
                line += f"  → {escape(short(step.result))}"
        elif question is not None:
            line = f"[magenta]? {escape(question.message or '?')}[/]  {_status(question.status)}"
            if question.response is not None:
                line += f"  {escape(short(question.response))}"
        parent.add(line)
    for child in node.children:
        _add_steps(parent.add(_execution_label(child)), child)


def summary_table(summary: ExecutionSummary) -> Table:
    """The summary of an execution (and its children, folded in) as a two-column table."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("status", _status(summary.status))
    table.add_row("duration", f"{summary.duration_ms:.1f} ms")
    usage = ", ".join(f"{tool} x{count}" for tool, count in summary.tool_usage.items())
    table.add_row("tool calls", f"{summary.tool_calls} ({escape(usage) or 'none'})")
    table.add_row("success rate", f"{summary.success_rate:.0%}")
    for label, files in (
        ("files read", summary.files_read),
        ("files written", summary.files_written),
        ("files edited", summary.files_edited),
    ):
        if files:
            table.add_row(label, escape(", ".join(files)))
    for error in summary.errors:
        table.add_row(
            "error", f"[red]{escape(error.tool)} {error.status}: {escape(error.message)}[/]"
        )
    for child in summary.children:
        table.add_row(
            "child",
            f"{escape(child.program)} {_status(child.status)}, {child.tool_calls} tool calls",
        )
    return table


def event_line(event: ExecutionEvent) -> Text:
    """One line for one event, as ``audit tail`` and ``run``'s progress show it."""
    indent = "  " * event.attribution.depth
    match event:
        case ExecutionStarted():
            body = f"▶ [b]{escape(event.program)}[/b] [dim]{escape(event.execution_id)}[/]"
        case ToolCallStarted():
            body = f"  → [cyan]{escape(event.tool)}[/]({escape(_args(event.args))})"
        case ToolCallFinished():
            body = f"  ← [cyan]{escape(event.tool)}[/] {_status(event.status)}"
            body += f" {event.duration_ms:.1f} ms"
            if event.error is not None:
                body += f" [red]{escape(event.error.message)}[/]"
        case InteractionStarted():
            body = f"  [magenta]? {escape(event.message)}[/]"
        case InteractionResolved():
            body = f"  [magenta]![/] {_status(event.status)}"
        case ExecutionFinished():
            body = f"■ {_status(event.status)} {event.duration_ms:.1f} ms"
            if event.error is not None:
                body += f" [red]{escape(event.error.type)}: {escape(event.error.message)}[/]"
        case _:
            assert_never(event)
    stamp = event.at.strftime("%H:%M:%S")
    return Text.from_markup(f"[dim]{stamp}[/] {indent}{body}")
