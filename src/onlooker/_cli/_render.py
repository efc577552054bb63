"""Draw executions for the terminal: the tree of calls, questions and children."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, assert_never

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

if TYPE_CHECKING:  # the summary store stays unimported until a command needs it
    from datetime import datetime

    from onlooker.plugins.history import ExecutionTree, InteractionRecord, ToolCallRecord
    from onlooker.plugins.summary import ExecutionSummary

from ._common import STYLES, escape, ms

__all__ = ["event_line", "execution_tree", "short", "summary_table"]


def short(value: object, limit: int = 60) -> str:
    """A value as compact JSON, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _lit(text: str) -> str:
    """``text`` as markup where plain text, not a tag, follows it: escaped, but a trailing
    backslash kept single (``escape`` doubles it lest it escape a tag that follows)."""
    escaped = escape(text)
    return escaped[:-1] if escaped.endswith("\\\\") and not text.endswith("\\\\") else escaped


def _status(status: str) -> str:
    return f"[{STYLES.get(status, 'white')}]{status}[/]"


def _args(args: Mapping[str, object]) -> str:
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
        label += f" {ms(node.duration_ms)}"
    if node.error is not None:
        label += f"  [red]{escape(node.error.type)}: {escape(node.error.message)}[/]"
    return label


def _add_steps(parent: Tree, node: ExecutionTree) -> None:
    # Steps in seq order; each child right after the last step that began before it.
    steps: list[tuple[int, ToolCallRecord | InteractionRecord]] = [
        (call.seq, call) for call in node.tool_calls
    ]
    steps += [(question.seq, question) for question in node.interactions]
    children = list(node.children)
    for _, step in sorted(steps, key=lambda item: item[0]):
        while children and _before(children[0].started_at, step.started_at):
            child = children.pop(0)
            _add_steps(parent.add(_execution_label(child)), child)
        parent.add(_step_line(step))
    for child in children:
        _add_steps(parent.add(_execution_label(child)), child)


def _before(child: datetime | None, step: datetime | None) -> bool:
    return child is not None and step is not None and child < step


def _step_line(step: ToolCallRecord | InteractionRecord) -> str:
    from onlooker.plugins.history import InteractionRecord  # sqlalchemy: only when drawing

    if isinstance(step, InteractionRecord):
        line = f"[magenta]? {escape(step.message or '?')}[/]  {_status(step.status)}"
        if step.response is not None:
            line += f"  {_lit(short(step.response, 40))}"
        return line
    args = _args(step.args) if step.args is not None else "…"
    line = f"[cyan]{escape(step.tool)}[/]({_lit(args)})  {_status(step.status)}"
    if step.duration_ms is not None:
        line += f" {ms(step.duration_ms)}"
    if step.error is not None:
        line += f"  [red]{escape(step.error.message)}[/]"
    elif step.result is not None:
        line += f"  → {_lit(short(step.result, 40))}"
    return line


def summary_table(summary: ExecutionSummary) -> Table:
    """The summary of an execution (and its children, folded in) as a two-column table."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("status", _status(summary.status))
    table.add_row("duration", f"{ms(summary.duration_ms)}")
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
            f"{escape(child.program)} {_status(child.status)}, {child.tool_calls} tool call{'' if child.tool_calls == 1 else 's'}",
        )
    return table


# Line breaks but the control characters ``escape`` writes out: U+2028 and U+2029 too,
# which ``str.splitlines`` and some log viewers break lines at.
_LINE_BREAKS: Final = str.maketrans({"\n": "\\n", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _one(text: str) -> str:
    """``escape(text)`` with its line breaks written out (``\\n``): an event's line stays
    one line, so a recorded value cannot start a line that passes for another event."""
    return escape(text.translate(_LINE_BREAKS))


def event_line(event: ExecutionEvent) -> Text:
    """One line for one event, as ``audit tail`` and ``run``'s progress show it."""
    indent = "  " * event.attribution.depth
    match event:
        case ExecutionStarted():
            body = f"▶ [b]{_one(event.program)}[/b] [dim]{_one(event.execution_id)}[/]"
        case ToolCallStarted():
            args = _args(event.args).translate(_LINE_BREAKS)
            body = f"  → [cyan]{_one(event.tool)}[/]({_lit(args)})"
        case ToolCallFinished():
            body = f"  ← [cyan]{_one(event.tool)}[/] {_status(event.status)}"
            body += f" {ms(event.duration_ms)}"
            if event.error is not None:
                body += f" [red]{_one(event.error.message)}[/]"
        case InteractionStarted():
            body = f"  [magenta]? {_one(event.message)}[/]"
        case InteractionResolved():
            body = f"  [magenta]![/] {_status(event.status)}"
        case ExecutionFinished():
            body = f"■ {_status(event.status)} {ms(event.duration_ms)}"
            if event.error is not None:
                body += f" [red]{_one(event.error.type)}: {_one(event.error.message)}[/]"
        case _:
            assert_never(event)
    stamp = event.at.strftime("%H:%M:%S")
    return Text.from_markup(f"[dim]{stamp}[/] {indent}{body}")
