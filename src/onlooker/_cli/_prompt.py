"""``onlooker run --interactive``: ask a program's question in the terminal."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO, cast

from rich.console import Console
from rich.markup import escape
from rich.prompt import Confirm, FloatPrompt, IntPrompt, Prompt

from onlooker import Elicitation, InteractionResponse

__all__ = ["StdinLines", "ask"]


class StdinLines:
    """Standard input, a line at a time, read from its descriptor with ``os.read``.

    A thread waiting here for a person holds none of ``sys.stdin``'s locks,
    so the process can still exit while it waits (Ctrl-C at a prompt): the
    interpreter's shutdown would wait for, or abort on, a thread blocked in
    ``input()``. The end of input raises ``EOFError``, as ``input()`` does. A
    standard input without a descriptor (a test's) is read as it is.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdin
        try:
            self._fd: int | None = self._stream.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = None
        self._pending = b""

    def readline(self) -> str:
        if self._fd is None:
            line = self._stream.readline()
        else:
            while b"\n" not in self._pending:
                chunk = os.read(self._fd, 4096)
                if not chunk:
                    break
                self._pending += chunk
            raw, newline, self._pending = self._pending.partition(b"\n")
            line = (raw + newline).decode(errors="replace")
        if not line:
            raise EOFError("end of input")
        return line


def ask(
    question: Elicitation, console: Console, lines: StdinLines | None = None
) -> InteractionResponse:
    """Ask ``question`` and build the answer.

    First "Answer it?": no declines (yes, or an empty answer, goes on). Then,
    with an object schema, each property is asked with a prompt fitting its
    type; otherwise the answer is typed as a JSON object.
    """
    stream = cast(
        TextIO, lines if lines is not None else StdinLines()
    )  # reads a line, as rich needs
    console.print(f"\n[magenta bold]?[/] {escape(question.message)}")
    if not Confirm.ask("Answer it?", default=True, console=console, stream=stream):
        return InteractionResponse.decline()
    properties = (question.requested_schema or {}).get("properties")
    if isinstance(properties, dict) and properties:
        content: dict[str, Any] = {}
        for name, spec in properties.items():
            content[name] = _ask_field(
                name, spec if isinstance(spec, dict) else {}, console, stream
            )
        return InteractionResponse.accept(content)
    while True:
        raw = Prompt.ask("Answer (a JSON object)", default="{}", console=console, stream=stream)
        try:
            value = json.loads(raw)
        except ValueError as exc:
            console.print(f"[red]not JSON: {escape(str(exc))}[/]")
            continue
        if isinstance(value, dict):
            return InteractionResponse.accept(value)
        console.print("[red]the answer must be a JSON object[/]")


def _ask_field(name: str, spec: dict[str, Any], console: Console, stream: TextIO) -> object:
    label = name + (f" ({spec['description']})" if isinstance(spec.get("description"), str) else "")
    kind = spec.get("type")
    if kind == "boolean":
        return Confirm.ask(escape(label), console=console, stream=stream)
    if kind == "integer":
        return IntPrompt.ask(escape(label), console=console, stream=stream)
    if kind == "number":
        return FloatPrompt.ask(escape(label), console=console, stream=stream)
    if kind == "string":
        choices = spec.get("enum")
        if isinstance(choices, list) and all(isinstance(c, str) for c in choices):
            return Prompt.ask(escape(label), choices=choices, console=console, stream=stream)
        return Prompt.ask(escape(label), console=console, stream=stream)
    while True:
        raw = Prompt.ask(f"{escape(label)} (JSON)", console=console, stream=stream)
        try:
            return json.loads(raw)
        except ValueError as exc:
            console.print(f"[red]not JSON: {escape(str(exc))}[/]")
