"""``onlooker run --interactive``: ask a program's question in the terminal."""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from collections import deque
from typing import Any, Final, TextIO, cast

from rich.console import Console
from rich.prompt import Confirm, FloatPrompt, IntPrompt, InvalidResponse, Prompt, PromptBase
from rich.text import Text

from onlooker import Elicitation, InteractionResponse
from onlooker._shared import json_loads

from ._common import escape, printable

__all__ = ["GaveUp", "StdinLines", "ask"]


class StdinLines:
    """Standard input, a line at a time, for one question after another.

    One daemon thread reads the input (from its descriptor, with
    ``os.read``: waiting for a person, it holds none of ``sys.stdin``'s
    locks, so the process can still exit — Ctrl-C at a prompt); each
    question's prompt takes its lines in turn. A question the program gave
    up waiting for gives its turn away when the next one begins
    (:meth:`begin`), so it cannot eat that one's answer. The end of input
    raises ``EOFError``, as ``input()`` does. A standard input without a
    descriptor (a test's) is read as it is.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdin
        try:
            self._fd: int | None = self._stream.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = None
        self._lines: deque[str] = deque()
        self._ended = False
        self._turn = 0
        self._ready = threading.Condition()
        self._reader: threading.Thread | None = None
        self._mine = threading.local()

    def begin(self) -> None:
        """The calling thread's prompt takes the input from now on (earlier ones give up)."""
        with self._ready:
            self._turn += 1
            self._mine.turn = self._turn
            self._ready.notify_all()
            if self._reader is None:
                self._reader = threading.Thread(
                    target=self._read, name="onlooker run: stdin", daemon=True
                )
                self._reader.start()

    def readline(self) -> str:
        """The next line without its line ending: an empty answer is ``""``, which rich's
        prompts read as "take the default" (with the newline, they read it as an answer)."""
        turn = getattr(self._mine, "turn", None)
        with self._ready:
            while not self._lines and not self._ended and self._turn == turn:
                self._ready.wait()
            if self._turn != turn:
                raise GaveUp("another question took the input")
            if self._lines:
                return self._lines.popleft().rstrip("\r\n")
        raise EOFError("end of input")

    def _read(self) -> None:
        pending = b""
        while True:
            if self._fd is None:
                line = self._stream.readline()
            else:
                while b"\n" not in pending:
                    chunk = os.read(self._fd, 4096)
                    if not chunk:
                        break
                    pending += chunk
                raw, newline, pending = pending.partition(b"\n")
                line = (raw + newline).decode(errors="replace")
            with self._ready:
                if line:
                    self._lines.append(line)
                else:
                    self._ended = True
                self._ready.notify_all()
            if not line:
                return


class GaveUp(Exception):  # not an error: a prompt nobody waits for any more
    """Raised in a prompt whose question the program stopped waiting for."""


def ask(
    question: Elicitation, console: Console, lines: StdinLines | None = None
) -> InteractionResponse:
    """Ask ``question`` and build the answer.

    First "Answer it?": no declines (yes, or an empty answer, goes on). Then,
    with an object schema, each property is asked with a prompt fitting its
    type; otherwise the answer is typed as a JSON object.
    """
    lines = lines if lines is not None else StdinLines()
    lines.begin()  # this question takes the input: one the program gave up on lets go
    stream = cast(TextIO, lines)  # it reads a line, all rich needs
    console.print(f"\n[magenta bold]?[/] {escape(question.message)}")
    if not Confirm.ask("Answer it?", default=True, console=console, stream=stream):
        return InteractionResponse.decline()
    schema = question.requested_schema or {}
    properties = schema.get("properties")
    if isinstance(properties, dict) and properties:
        required = schema.get("required")
        needed = set(required) if isinstance(required, list) else set()
        content: dict[str, Any] = {}
        for name, spec in properties.items():
            value = _ask_field(
                name, spec if isinstance(spec, dict) else {}, name in needed, console, stream
            )
            if value is not _LEFT_OUT:
                content[name] = value
        return InteractionResponse.accept(content)
    while True:
        raw = Prompt.ask("Answer (a JSON object)", default="{}", console=console, stream=stream)
        try:
            value = json_loads(raw)  # (nesting too deep is a ValueError too)
        except ValueError as exc:
            console.print(f"[red]not JSON: {escape(str(exc))}[/]")
            continue
        if isinstance(value, dict):
            return InteractionResponse.accept(value)
        console.print("[red]the answer must be a JSON object[/]")


_LEFT_OUT: Final = object()
"""An optional property answered with an empty line: not in the answer."""


class _FinitePrompt(FloatPrompt):
    """A number JSON can hold: ``nan`` and ``inf`` are asked again."""

    def process_response(self, value: str) -> float:
        number = super().process_response(value)
        if not math.isfinite(number):
            raise InvalidResponse("[prompt.invalid]Please enter a finite number")
        return number


class _TextPrompt(Prompt):
    """A string property: its ``default`` and ``enum`` choices are the program's text, shown
    with their control characters written out (``\\x1b``) as every recorded value is: rich
    prints them as they are, and an ESC there would reach the terminal."""

    def make_prompt(self, default: Any) -> Text:
        shown = super().make_prompt(default)
        return Text(printable(shown.plain), end="")


_PROMPTS: Final[dict[str, tuple[type[PromptBase[Any]], tuple[type, ...]]]] = {
    "boolean": (Confirm, (bool,)),
    "integer": (IntPrompt, (int,)),
    "number": (_FinitePrompt, (int, float)),
    "string": (_TextPrompt, (str,)),
}
"""A JSON Schema type: its prompt, and the types of a default it can offer."""


def _ask_field(
    name: str, spec: dict[str, Any], required: bool, console: Console, stream: TextIO
) -> object:
    """One property's answer. An empty line takes the schema's ``default``, or leaves an
    optional property out (:data:`_LEFT_OUT`); a required one without a default is asked
    again."""
    label = name + (f" ({spec['description']})" if isinstance(spec.get("description"), str) else "")
    kind = spec.get("type")
    prompt, offered = _PROMPTS.get(kind, (None, ())) if isinstance(kind, str) else (None, ())
    default = spec.get("default", _LEFT_OUT)
    if prompt is None and default is not _LEFT_OUT:
        default = json.dumps(default)  # typed as JSON, offered as JSON
    elif default is not _LEFT_OUT and (
        type(default) not in offered or (kind != "boolean" and type(default) is bool)
    ):
        default = _LEFT_OUT  # a default of another type than the property's: not offered
    options: dict[str, Any] = {"console": console, "stream": stream}
    if default is not _LEFT_OUT:
        options["default"] = default
    elif not required:
        label += " (optional: an empty answer leaves it out)"
        options |= {"default": _LEFT_OUT, "show_default": False}
    choices = spec.get("enum")
    if kind == "string" and isinstance(choices, list) and all(isinstance(c, str) for c in choices):
        options["choices"] = choices
    if prompt is not None:
        return prompt.ask(escape(label), **options)
    while True:
        raw = Prompt.ask(f"{escape(label)} (JSON)", **options)
        if raw is _LEFT_OUT:
            return _LEFT_OUT
        try:
            return json_loads(raw)
        except ValueError as exc:
            console.print(f"[red]not JSON: {escape(str(exc))}[/]")
