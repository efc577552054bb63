"""Ready-made governance hooks: ``require_intent()`` and ``deny_commands()``.

Both return a :class:`~onlooker.HookMatcher`, so they go straight into
``ExecutionEngine(hooks=[...])`` (or a plugin's ``hooks``)::

    engine = onlooker.ExecutionEngine(
        tools=[...],
        hooks=[policies.require_intent(), policies.deny_commands()],
    )

They use only the public API, as a user's own policy would.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Literal

from onlooker import HookAction, HookMatcher, PreHookResult, ToolUseContext

from ._shared import DEFAULT_DENIED_COMMANDS, compile_command_rule

__all__ = ["DEFAULT_DENIED_COMMANDS", "deny_commands", "require_intent"]


def require_intent(
    *,
    intents: Collection[str] | None = None,
    pattern: str | None = None,
    phases: Sequence[str] | None = None,
) -> HookMatcher:
    """A matcher that ``BLOCK``s mutating tools until the program selects an intent.

    A tool declared ``@tool(mutating=True)`` runs only after the program has
    called ``ctx.select_intent(intent_id)``; before that, the call ends
    ``blocked`` and the program gets a ``ToolBlockedError`` whose reason says
    that an intent is missing. With ``intents``, the selected intent must
    also be one of them. Non-mutating tools always run. ``pattern`` and
    ``phases`` narrow the matcher as in :class:`~onlooker.HookMatcher`.
    The selected intent id rides the attribution of every later event.
    """
    if isinstance(intents, str):  # its letters would be the intents
        raise TypeError(f"intents must be a collection of intent ids, not the string {intents!r}")
    allowed = None if intents is None else frozenset(intents)
    if allowed is not None and any(not isinstance(i, str) or not i for i in allowed):
        raise ValueError("intents must be non-empty strings")

    def require_intent(use: ToolUseContext) -> PreHookResult | None:
        if not use.mutating:
            return None
        intent = use.attribution.intent_id
        if intent is None:
            expected = f" (one of {', '.join(sorted(allowed))})" if allowed else ""
            return PreHookResult(
                HookAction.BLOCK,
                reason=(
                    f"tool {use.tool_name!r} is mutating and no intent is selected{expected}: "
                    "select one first (ctx.select_intent or run.select_intent)"
                ),
                metadata={"policy": "require_intent", "missing_intent": True},
            )
        if allowed is not None and intent not in allowed:
            return PreHookResult(
                HookAction.BLOCK,
                reason=(
                    f"tool {use.tool_name!r} is mutating and intent {intent!r} is not allowed "
                    f"(one of {', '.join(sorted(allowed))})"
                ),
                metadata={"policy": "require_intent", "intent_id": intent},
            )
        return None

    require_intent.__qualname__ = "policies.require_intent"
    return HookMatcher(pattern=pattern, phases=phases, pre=(require_intent,))


def deny_commands(
    patterns: Sequence[str | re.Pattern[str]] | Mapping[str, str | re.Pattern[str]] | None = None,
    *,
    argument: str = "command",
    syntax: Literal["regex", "glob"] = "regex",
    tools: str | None = None,
    phases: Sequence[str] | None = None,
    action: HookAction = HookAction.BLOCK,
) -> HookMatcher:
    """A matcher that refuses shell-like tool calls whose command matches a rule.

    A call is shell-like when its input has ``argument`` (default
    ``"command"``): a string, or a list of strings joined with spaces. Other
    calls pass untouched. ``patterns`` (default :data:`DEFAULT_DENIED_COMMANDS`)
    is a sequence of patterns, or a mapping of rule names to patterns:

    - ``syntax="regex"`` (the default): regular expressions, found anywhere
      in the command (``re.search``); compiled ``re.Pattern`` objects work too.
    - ``syntax="glob"``: shell-style globs (``fnmatch``) matched against the
      whole command, so ``"*sudo *"`` matches ``sudo`` anywhere.

    The first matching rule decides: the call ends ``blocked`` (or the
    execution is aborted with ``action=HookAction.ABORT``), the reason names
    the rule, and the finished event's metadata records
    ``{"denied_by": rule}`` — the rule's name, or the pattern itself when
    ``patterns`` is a sequence. ``tools`` is a glob on the tool name and
    ``phases`` a tuple of phase names, as in :class:`~onlooker.HookMatcher`.
    Invalid patterns raise ``ValueError`` here, not at call time.
    """
    if action not in (HookAction.BLOCK, HookAction.ABORT):
        raise ValueError(f"action must be HookAction.BLOCK or HookAction.ABORT, not {action!r}")
    if syntax not in ("regex", "glob"):
        raise ValueError(f"syntax must be 'regex' or 'glob', not {syntax!r}")
    if not isinstance(argument, str) or not argument:
        raise ValueError("argument must name the input field that holds the command")
    if patterns is None:
        patterns = DEFAULT_DENIED_COMMANDS
    elif isinstance(patterns, str | re.Pattern):
        raise TypeError("patterns must be a sequence or a mapping of patterns, not one pattern")
    named = (
        list(patterns.items())
        if isinstance(patterns, Mapping)
        else [(p if isinstance(p, str) else p.pattern, p) for p in patterns]
    )
    rules = tuple((name, compile_command_rule(name, pattern, syntax)) for name, pattern in named)
    return HookMatcher(pattern=tools, phases=phases, pre=(_command_hook(rules, argument, action),))


def _command_hook(
    rules: tuple[tuple[str, re.Pattern[str]], ...], argument: str, action: HookAction
) -> Callable[[ToolUseContext], PreHookResult | None]:
    """The pre-hook of :func:`deny_commands`: the first rule that finds the command decides."""

    def deny_commands(use: ToolUseContext) -> PreHookResult | None:
        value = use.tool_input.get(argument)
        if value is None:
            return None
        if isinstance(value, list | tuple):
            command = " ".join(str(part) for part in value)
        else:
            command = str(value)
        for name, rule in rules:
            if rule.search(command) is not None:
                return PreHookResult(
                    action,
                    reason=f"command denied by rule {name!r}",
                    metadata={"denied_by": name},
                )
        return None

    deny_commands.__qualname__ = "policies.deny_commands"
    return deny_commands
