"""``onlooker run --interactive``: ask a program's question in the terminal."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.prompt import Confirm, FloatPrompt, IntPrompt, Prompt

from onlooker import Elicitation, InteractionResponse

__all__ = ["ask"]


def ask(question: Elicitation, console: Console) -> InteractionResponse:
    """Ask ``question`` and build the answer.

    With an object schema, each property is asked with a prompt fitting its
    type; otherwise the answer is typed as a JSON object. An empty answer to
    the first prompt declines.
    """
    console.print(f"\n[magenta bold]?[/] {escape(question.message)}")
    if not Confirm.ask("Answer it?", default=True, console=console):
        return InteractionResponse.decline()
    properties = (question.requested_schema or {}).get("properties")
    if isinstance(properties, dict) and properties:
        content: dict[str, Any] = {}
        for name, spec in properties.items():
            content[name] = _ask_field(name, spec if isinstance(spec, dict) else {}, console)
        return InteractionResponse.accept(content)
    while True:
        raw = Prompt.ask("Answer (a JSON object)", default="{}", console=console)
        try:
            value = json.loads(raw)
        except ValueError as exc:
            console.print(f"[red]not JSON: {escape(str(exc))}[/]")
            continue
        if isinstance(value, dict):
            return InteractionResponse.accept(value)
        console.print("[red]the answer must be a JSON object[/]")


def _ask_field(name: str, spec: dict[str, Any], console: Console) -> object:
    label = name + (f" ({spec['description']})" if isinstance(spec.get("description"), str) else "")
    kind = spec.get("type")
    if kind == "boolean":
        return Confirm.ask(escape(label), console=console)
    if kind == "integer":
        return IntPrompt.ask(escape(label), console=console)
    if kind == "number":
        return FloatPrompt.ask(escape(label), console=console)
    if kind == "string":
        choices = spec.get("enum")
        if isinstance(choices, list) and all(isinstance(c, str) for c in choices):
            return Prompt.ask(escape(label), choices=choices, console=console)
        return Prompt.ask(escape(label), console=console)
    while True:
        raw = Prompt.ask(f"{escape(label)} (JSON)", console=console)
        try:
            return json.loads(raw)
        except ValueError as exc:
            console.print(f"[red]not JSON: {escape(str(exc))}[/]")
