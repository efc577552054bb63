"""Tool hooks: matchers, actions, the results hooks return, and the one hook runner.

The runner (``run_pre_hooks`` / ``run_post_hooks``) is kept apart from the
tool-call lifecycle that calls it, as pluggy keeps its call loop apart from
its hook specifications: ``ctx.call`` and tracked tool calls both end here.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from time import perf_counter
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeAlias

import anyio
from pydantic import JsonValue

from ._bus import check_timeout
from ._errors import HookAbortError, ToolBlockedError
from ._events import Attribution
from ._results import cancel_requests, cancelled_meanwhile, undo_task_group_cancels

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
    tool_input: Mapping[str, Any]
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", _action(self.action, HookAction))
        if self.modified_input is not None and not isinstance(self.modified_input, Mapping):
            raise TypeError(
                "modified_input must be a mapping of argument names to values, or None, "
                f"not {type(self.modified_input).__name__}"
            )
        _check_metadata(self.metadata)


@dataclass(frozen=True, slots=True)
class PostHookResult:
    """A post-hook's decision; ``modified_output=None`` leaves the output unchanged."""

    action: HookAction = HookAction.CONTINUE
    modified_output: Any = None
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)
    reason: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "action", _action(self.action, (HookAction.CONTINUE, HookAction.ABORT))
        )
        _check_metadata(self.metadata)


def _check_metadata(metadata: object) -> None:
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"metadata must be a mapping of names to JSON values, not {type(metadata).__name__}"
        )


def _action(action: object, allowed: Iterable[HookAction]) -> HookAction:
    """``action`` as a :class:`HookAction` (its value, ``"skip"``, is accepted too), if allowed."""
    for known in allowed:
        if action == known:
            return known
    names = ", ".join(f"HookAction.{known.name}" for known in allowed)
    raise ValueError(f"action must be one of {names}, not {action!r}")


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
        object.__setattr__(self, "timeout", check_timeout("timeout", self.timeout, unbounded=True))
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
class HookPlan:
    """The hooks that apply to one (tool, phase), flattened in order (cached by the engine)."""

    pre: tuple[tuple[HookMatcher, PreHook], ...]
    post: tuple[tuple[HookMatcher, PostHook], ...]
    pre_steps: tuple[_Step, ...] = field(init=False, repr=False, compare=False)
    post_steps: tuple[_Step, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, hooks in (("pre_steps", self.pre), ("post_steps", self.post)):
            steps = tuple((h, m.timeout, hook_name(h), _is_async(h)) for m, h in hooks)
            object.__setattr__(self, name, steps)


NO_HOOKS: Final = HookPlan((), ())

_new: Final = object.__new__
_USE_SETTERS: Final = tuple(
    ToolUseContext.__dict__[f].__set__
    for f in ("tool_name", "tool_input", "tool_call_id", "attribution", "execution_id", "mutating")
)


def use_context(
    tool_name: str,
    tool_input: Mapping[str, Any],
    tool_call_id: str,
    attribution: Attribution,
    execution_id: str,
    mutating: bool,
) -> ToolUseContext:
    """``ToolUseContext(...)`` without the frozen ``__init__``'s per-field cost (hot path)."""
    use: ToolUseContext = _new(ToolUseContext)
    s1, s2, s3, s4, s5, s6 = _USE_SETTERS
    s1(use, tool_name)
    s2(use, tool_input)
    s3(use, tool_call_id)
    s4(use, attribution)
    s5(use, execution_id)
    s6(use, mutating)
    return use


MAX_PLANS: Final = 4096
"""Plans cached per engine at most; past it the cache starts again (it only saves work)."""


class HookPlans:
    """The hook plan of every (tool, phase), worked out once and cached (one per engine)."""

    __slots__ = ("_plans", "matchers")

    def __init__(self, matchers: Sequence[HookMatcher] = ()) -> None:
        self.matchers = tuple(matchers)
        """Every matcher, in order (empty: no call has hooks)."""
        self._plans: dict[tuple[str, str | None], HookPlan] = {}

    def replace(self, matchers: Sequence[HookMatcher]) -> None:
        """Use ``matchers`` from now on (the engine adds its plugins' hooks at start)."""
        self.matchers = tuple(matchers)
        self._plans.clear()

    def plan(self, tool: str, phase: str | None) -> HookPlan:
        """The hooks that apply to a call of ``tool`` in ``phase``, in order."""
        key = (tool, phase)
        plan = self._plans.get(key)
        if plan is None:
            matching = [m for m in self.matchers if m.matches(tool, phase)]
            if not matching:
                plan = NO_HOOKS
            else:
                plan = HookPlan(
                    tuple((m, hook) for m in matching for hook in m.pre),
                    tuple((m, hook) for m in matching for hook in m.post),
                )
            if len(self._plans) >= MAX_PLANS:  # a phase per request, names a model made up
                self._plans.clear()
            self._plans[key] = plan
        return plan


class SkipCall(Exception):
    """A pre-hook said SKIP (caught by the tool-call lifecycle, never seen by programs)."""

    def __init__(self, reason: str | None) -> None:
        super().__init__(reason)
        self.reason = reason


Revalidate: TypeAlias = Callable[[Mapping[str, Any], str], dict[str, Any]]
"""Checks a pre-hook's ``modified_input`` (and the hook's name) and returns the new input."""

logger: Final = logging.getLogger("onlooker")


class AbortState(Protocol):
    """The state an ABORT leaves for every later call of a run (root and children)."""

    aborted: HookAbortError | None


def aborted_refusal(tool: str, abort: HookAbortError) -> HookAbortError:
    """The refusal of a call of an execution an ABORT has ended."""
    return HookAbortError(
        f"tool {tool!r} refused: the execution was aborted ({abort})",
        tool=tool,
        reason=abort.reason,
    )


async def run_pre_hooks(
    steps: tuple[_Step, ...],
    use: ToolUseContext,
    metadata: dict[str, JsonValue],
    revalidate: Revalidate,
    run: AbortState,
) -> tuple[ToolUseContext, dict[str, Any] | None]:
    """Run the pre-hooks in order: the context they leave, and the input the tool gets
    when one of them rewrote it (``None`` when none did).

    Fail-closed: a hook that raises, times out or returns something else than
    a ``PreHookResult`` blocks the call (``ToolBlockedError``). ``SKIP`` raises
    :class:`SkipCall`, ``BLOCK`` ``ToolBlockedError``, ``ABORT``
    ``HookAbortError``; so does an ABORT of another call of ``run`` that came
    meanwhile, whatever the hooks said. Hook metadata is merged into ``metadata``.
    """
    tool = use.tool_name
    rewritten: dict[str, Any] | None = None
    for hook, timeout, name, is_async in steps:
        if run.aborted is not None:
            raise aborted_refusal(tool, run.aborted)
        try:
            decision = await _call_hook(hook, timeout, is_async, use)
        except Exception as exc:  # fail-closed: a broken governance hook blocks
            problem = "timed out" if isinstance(exc, TimeoutError) else f"failed: {exc!r}"
            raise ToolBlockedError(
                f"tool {tool!r} blocked: pre-hook {name!r} {problem}",
                tool=tool,
                reason=f"pre-hook {name!r} {problem}",
                hook=name,
            ) from exc
        if run.aborted is not None:  # another call aborted the run while this hook decided
            raise aborted_refusal(tool, run.aborted)
        if decision is None:
            continue
        if not isinstance(decision, PreHookResult):
            raise ToolBlockedError(
                f"tool {tool!r} blocked: pre-hook {name!r} returned {type(decision).__name__}, "
                "not PreHookResult",
                tool=tool,
                reason=f"pre-hook {name!r} returned {type(decision).__name__}",
                hook=name,
            )
        if decision.metadata:
            metadata.update(decision.metadata)
        use, rewritten = _follow(decision, use, name, revalidate, rewritten)
    return use, rewritten


def _follow(
    decision: PreHookResult,
    use: ToolUseContext,
    name: str,
    revalidate: Revalidate,
    rewritten: dict[str, Any] | None,
) -> tuple[ToolUseContext, dict[str, Any] | None]:
    """What one pre-hook's verdict does: the context and input the call goes on with, or
    the refusal. The next hooks see the rewritten input detached, as the first saw its own."""
    tool = use.tool_name
    action = decision.action
    if action is HookAction.CONTINUE:
        if decision.modified_input is not None:
            rewritten = revalidate(decision.modified_input, name)
            use = use_context(
                tool,
                detached(rewritten),
                use.tool_call_id,
                use.attribution,
                use.execution_id,
                use.mutating,
            )
    elif action is HookAction.SKIP:
        raise SkipCall(decision.reason)
    elif action is HookAction.BLOCK:
        reason = decision.reason or "no reason given"
        raise ToolBlockedError(
            f"tool {tool!r} blocked by {name}: {reason}", tool=tool, reason=reason, hook=name
        )
    else:
        reason = decision.reason or "no reason given"
        raise HookAbortError(
            f"execution aborted by pre-hook {name} on tool {tool!r}: {reason}",
            tool=tool,
            reason=reason,
        )
    return use, rewritten


def detached(args: dict[str, Any]) -> Mapping[str, Any]:
    """What hooks see of a call's arguments: a read-only view whose nested lists and dicts
    are copies, so a hook changing one in place changes neither what the tool receives nor
    the caller's (a framework's) own values; a hook rewrites through ``modified_input``."""
    for value in args.values():
        if type(value) is dict or type(value) is list:
            copies: dict[int, Any] = {}
            return MappingProxyType({key: _copied(item, copies, 0) for key, item in args.items()})
    return MappingProxyType(args)


def _copied(value: Any, copies: dict[int, Any], depth: int) -> Any:
    """``value``'s lists and dicts copied, each once (``copies``: by the original's id, so a
    value that holds itself, or one list in many places, is copied as it is shared)."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return value
    copy = copies.get(id(value))
    if copy is not None:
        return copy
    if depth == _DETACHED_LEVELS:
        return value  # deeper still: shared, as other objects are
    if kind is dict:
        copy = copies[id(value)] = {}
        for key, item in value.items():
            copy[key] = _copied(item, copies, depth + 1)
    else:
        copy = copies[id(value)] = []
        for item in value:
            copy.append(_copied(item, copies, depth + 1))
    return copy


_DETACHED_LEVELS: Final = 100


async def run_post_hooks(
    steps: tuple[_Step, ...],
    use: ToolUseContext,
    output: Any,
    metadata: dict[str, JsonValue],
) -> Any:
    """Run the post-hooks in order; the output they leave.

    Fail-safe: a hook that raises, times out or returns something else than
    a ``PostHookResult`` is logged and the output passes unchanged. ``ABORT``
    raises ``HookAbortError``.
    """
    tool = use.tool_name
    for hook, timeout, name, is_async in steps:
        try:
            decision = await _call_hook(hook, timeout, is_async, use, output)
        except Exception as exc:  # fail-safe: observability never breaks the call
            logger.error(
                "post-hook %r failed on tool %r (execution %s); output passed unchanged",
                name,
                tool,
                use.execution_id,
                exc_info=exc,
            )
            continue
        if decision is None:
            continue
        if not isinstance(decision, PostHookResult):
            logger.error("post-hook %r returned %r, not PostHookResult; ignored", name, decision)
            continue
        if decision.metadata:
            metadata.update(decision.metadata)
        if decision.action is HookAction.ABORT:
            reason = decision.reason or "no reason given"
            raise HookAbortError(
                f"execution aborted by post-hook {name} on tool {tool!r}: {reason}",
                tool=tool,
                reason=reason,
            )
        if decision.modified_output is not None:
            output = decision.modified_output
    return output


_RESULT_TYPES: Final = (PreHookResult, PostHookResult)


async def _call_hook(hook: Callable[..., Any], timeout: float, is_async: bool, *args: Any) -> Any:  # noqa: ASYNC109  # per-matcher timeout
    began = perf_counter()
    if is_async:
        requests = cancel_requests()
        try:
            with anyio.fail_after(timeout):
                decision = await hook(*args)
        except BaseException as exc:
            undo_task_group_cancels(exc)
            raise
        await cancelled_meanwhile(requests, "cancelled while a hook ran")
    else:
        decision = hook(*args)
        if (
            decision is not None
            and type(decision) not in _RESULT_TYPES
            and inspect.isawaitable(decision)  # a sync callable that returned an awaitable
        ):
            requests = cancel_requests()
            try:
                with anyio.fail_after(max(timeout - (perf_counter() - began), 0.0)):
                    decision = await decision
            except BaseException as exc:
                undo_task_group_cancels(exc)
                raise
            await cancelled_meanwhile(requests, "cancelled while a hook ran")
    # Late all the same: a sync hook cannot be interrupted, and an async one may have
    # shielded itself from the cancellation, or caught it and returned.
    if perf_counter() - began > timeout:
        raise TimeoutError(f"hook took longer than {timeout}s")
    return decision
