"""Tool hooks: matchers, actions, and the results hooks return."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Final, TypeAlias

from pydantic import JsonValue

from ._events import Attribution

__all__ = [
    "HookAction",
    "HookMatcher",
    "PostHook",
    "PostHookResult",
    "PreHook",
    "PreHookResult",
    "ToolUseContext",
]


class HookAction(enum.StrEnum):
    """What a hook decides for a tool call."""

    CONTINUE = "continue"
    """Run the tool (with the possibly modified input)."""
    SKIP = "skip"
    """Do not run it; ``ctx.call`` returns ``None`` and the call ends ``skipped``."""
    BLOCK = "block"
    """Refuse this one call: ``blocked``, ``ToolBlockedError`` in the program."""
    ABORT = "abort"
    """End the whole execution: ``HookAbortError``; the execution finishes ``failed``."""


@dataclass(frozen=True, slots=True)
class ToolUseContext:
    """What a hook sees of a tool call."""

    tool_name: str
    input: Mapping[str, Any]
    tool_call_id: str
    attribution: Attribution
    execution_id: str
    mutating: bool = False
    """Whether the tool was declared ``mutating=True`` (False for unknown tools)."""


@dataclass(frozen=True, slots=True)
class PreHookResult:
    """A pre-hook's decision; returning ``None`` from a hook means ``CONTINUE``."""

    action: HookAction = HookAction.CONTINUE
    modified_input: Mapping[str, Any] | None = None
    """Replaces the input for the next hooks and the tool; validated like the program's own."""
    reason: str | None = None
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)
    """Merged into ``ToolCallFinished.metadata``."""


@dataclass(frozen=True, slots=True)
class PostHookResult:
    """A post-hook's decision; ``modified_output=None`` leaves the output unchanged."""

    action: HookAction = HookAction.CONTINUE
    modified_output: Any = None
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)
    reason: str | None = None


PreHook: TypeAlias = Callable[
    [ToolUseContext], "PreHookResult | Awaitable[PreHookResult | None] | None"
]
"""``(ToolUseContext) -> PreHookResult | None``, sync or async."""
PostHook: TypeAlias = Callable[
    [ToolUseContext, Any], "PostHookResult | Awaitable[PostHookResult | None] | None"
]
"""``(ToolUseContext, output) -> PostHookResult | None``, sync or async."""


@dataclass(frozen=True, slots=True)
class HookMatcher:
    """Selects tool calls by a glob on the tool name and by phase, and names their hooks.

    ``HookMatcher()`` (no pattern, no phases) matches every call. A pre-hook
    slower than ``timeout`` seconds blocks the call (fail-closed).
    """

    pattern: str | None = None
    phases: Sequence[str] | None = None
    pre: Sequence[PreHook] = ()
    post: Sequence[PostHook] = ()
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.pattern is not None and not isinstance(self.pattern, str):
            raise TypeError(f"pattern must be a glob string or None, not {self.pattern!r}")
        if isinstance(self.phases, str):
            raise TypeError("phases must be a tuple of phase names, not a single string")
        for hook in (*self.pre, *self.post):
            if not callable(hook):
                raise TypeError(f"a hook must be callable, not {hook!r}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, not {self.timeout}")
        object.__setattr__(self, "pre", tuple(self.pre))
        object.__setattr__(self, "post", tuple(self.post))
        if self.phases is not None:
            object.__setattr__(self, "phases", tuple(self.phases))

    def matches(self, tool_name: str, phase: str | None) -> bool:
        """Whether this matcher applies to a call of ``tool_name`` in ``phase``."""
        if self.pattern is not None and not fnmatchcase(tool_name, self.pattern):
            return False
        return self.phases is None or phase in self.phases


def hook_name(hook: object) -> str:
    """A readable name for a hook, for errors and logs."""
    return str(
        getattr(hook, "__qualname__", None)
        or getattr(hook, "__name__", None)
        or type(hook).__qualname__
    )


def _is_async(hook: object) -> bool:
    if inspect.iscoroutinefunction(hook):
        return True
    call = getattr(type(hook), "__call__", None)  # noqa: B004  # an object with async __call__
    return not inspect.isfunction(hook) and inspect.iscoroutinefunction(call)


_Step: TypeAlias = tuple[Callable[..., Any], float, str, bool]
"""(hook, timeout, name, is_async): what the runner needs, worked out once per plan."""


@dataclass(frozen=True, slots=True)
class _HookPlan:
    """The hooks that apply to one (tool, phase), flattened in order (cached by the engine)."""

    pre: tuple[tuple[HookMatcher, PreHook], ...]
    post: tuple[tuple[HookMatcher, PostHook], ...]
    pre_steps: tuple[_Step, ...] = field(init=False, repr=False, compare=False)
    post_steps: tuple[_Step, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, hooks in (("pre_steps", self.pre), ("post_steps", self.post)):
            steps = tuple((h, m.timeout, hook_name(h), _is_async(h)) for m, h in hooks)
            object.__setattr__(self, name, steps)


_NO_HOOKS: Final = _HookPlan((), ())

_new: Final = object.__new__
_USE_SETTERS: Final = tuple(
    ToolUseContext.__dict__[f].__set__
    for f in ("tool_name", "input", "tool_call_id", "attribution", "execution_id", "mutating")
)


def _use_context(
    tool_name: str,
    input: Mapping[str, Any],
    tool_call_id: str,
    attribution: Attribution,
    execution_id: str,
    mutating: bool,
) -> ToolUseContext:
    """``ToolUseContext(...)`` without the frozen ``__init__``'s per-field cost (hot path)."""
    use: ToolUseContext = _new(ToolUseContext)
    s1, s2, s3, s4, s5, s6 = _USE_SETTERS
    s1(use, tool_name)
    s2(use, input)
    s3(use, tool_call_id)
    s4(use, attribution)
    s5(use, execution_id)
    s6(use, mutating)
    return use
