"""Claude Agent SDK: each agent turn a tracked execution, governed through the SDK's hooks.

::

    from claude_agent_sdk import ClaudeAgentOptions, query
    from onlooker.integrations.claude_agent_sdk import hooks

    async with onlooker.ExecutionEngine(hooks=[...], plugins=[...]) as engine:
        options = ClaudeAgentOptions(hooks=hooks(engine))
        async for message in query(prompt="...", options=options): ...

:func:`hooks` returns the ``hooks=`` mapping of ``ClaudeAgentOptions``: one
``claude_agent_sdk.HookMatcher`` (matching every tool) per hook event below,
all served by one adapter that keeps, per ``session_id``, the turn being
tracked, the sub-agents running in it (by ``agent_id``) and the calls still
open (by ``tool_use_id``, which becomes onlooker's ``tool_call_id``).

=====================  ==================================================================
SDK hook               onlooker
=====================  ==================================================================
UserPromptSubmit       ``engine.track(program, trigger=Trigger(kind="claude-agent-sdk",
                       metadata={session_id, prompt_id}), input={"prompt": prompt})`` and
                       ``run.start()``; a turn of the same session that never reached
                       ``Stop`` (an interrupted one) finishes ``cancelled`` first
PreToolUse             ``run.tool_started(tool_name, tool_input, tool_call_id=tool_use_id)``
                       on the turn (started here if no prompt started it) or, with
                       ``agent_id``, on that sub-agent's child execution. Refused (SKIP,
                       BLOCK) -> ``permissionDecision: "deny"`` with the reason; ABORT ->
                       the same plus ``continue: false`` and the turn finishes ``failed``
                       (until ``Stop`` or the next prompt, every later call of the
                       session gets that deny too); a ``modified_input`` ->
                       ``updatedInput``
PostToolUse            ``call.finished(tool_response, duration_ms=duration_ms)``; a
                       post-hook rewrite -> ``updatedToolOutput`` (and
                       ``updatedMCPToolOutput`` for ``mcp__`` tools); a post-hook ABORT
                       -> ``continue: false`` and the turn finishes ``failed``
PostToolUseFailure     ``call.failed(error, duration_ms=duration_ms)`` (``cancelled`` when
                       ``is_interrupt``)
PostToolBatch          a call of the batch still open (no ``PostToolUse*`` came: refused
                       outside onlooker) -> ``call.failed(ToolRefused)``, and its
                       ``Agent``/``Task`` call links no sub-agent
SubagentStart          ``parent.child(agent_type, parent_tool_call_id=<the Agent/Task
                       call's tool_use_id>).start()``; the parent is the execution that
                       made that call (so sub-agents of sub-agents nest)
SubagentStop           ``child.finish("completed", result=last_assistant_message)``
Stop                   ``run.finish("completed", result=last_assistant_message)``, once
                       the turn's background sub-agents have stopped too
StopFailure            ``run.finish("failed", error=APIError: <what the CLI said>)``: an
                       API error ended the turn (no ``Stop`` comes)
=====================  ==================================================================

:func:`approvals` wraps the application's ``can_use_tool``: each prompt is
``run.interaction_started("tool 'X' (call <tool_use_id>) awaits approval")``
on the call's execution, resolved ``accepted`` / ``declined`` by the answer
(``failed`` when the callback raises, ``cancelled`` when the CLI withdraws
it); a denied call is ``call.failed(REJECTED)`` (``ToolApprovalRejected``).

``duration_ms`` from the SDK wins over onlooker's clock. Claude's built-in
tools are declared with ``engine.declare_tool`` (``Write``, ``Edit``,
``MultiEdit``, ``NotebookEdit`` and ``Bash`` mutating; ``Write`` writes,
``Edit``/``MultiEdit`` edit and ``Read`` reads ``file_path``;
``NotebookEdit`` edits ``notebook_path``), so ``policies.require_intent()``
and the summary understand them.

What cannot be governed or rewritten:

- ``SubagentStart`` carries no ``tool_use_id``: a sub-agent is linked to the
  ``Agent``/``Task`` call whose result named its ``agentId`` (a background
  launch), else to the oldest open such call of its session whose
  ``subagent_type`` matches its ``agent_type`` (parallel sub-agents of one
  type may swap links).
- A refusal reaches the model as a failed tool result with the reason; the
  SDK has no way to answer a call with a result it did not run, so ``SKIP``
  is a deny too (recorded ``skipped``).
- A post-hook rewrite of a built-in tool's output must keep that tool's
  output shape, or the CLI keeps the original output (the record keeps the
  rewrite). Failed calls (``PostToolUseFailure``) run no post-hooks: the SDK
  cannot rewrite an error.
- Permission prompts are recorded only through :func:`approvals`, the
  wrapper of the application's ``can_use_tool``: no hook tells a prompt's
  answer (``PermissionRequest`` carries none). A call refused outside onlooker
  and that wrapper (the CLI's own deny without ``can_use_tool``, a deny from
  a hook of your own) gets no ``PostToolUse*``: the batch's ``PostToolBatch``
  closes it ``failed`` (``ToolRefused``, with what the model was told).

The hooks run on the event loop that runs ``query()``/``ClaudeSDKClient``,
which must be the engine's. An error of the adapter itself is logged on
``onlooker.integrations.claude_agent_sdk`` and answered with an empty hook
output (the agent goes on), but a refusal already decided is always sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import require

require("claude_agent_sdk", extra="claude-agent-sdk", framework="Claude Agent SDK")

from .._claude_declarations import (  # noqa: E402  # after require(): a missing extra is named
    BUILTIN_TOOLS,
    HOOK_EVENTS,
    TRIGGER,
    ToolInterrupted,
)
from ._adapter import REJECTED, Adapter, logger  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from claude_agent_sdk import HookMatcher
    from claude_agent_sdk.types import (
        CanUseTool,
        HookEvent,
        PermissionResult,
        ToolPermissionContext,
    )

    from onlooker import ExecutionEngine

__all__ = [
    "BUILTIN_TOOLS",
    "HOOK_EVENTS",
    "REJECTED",
    "TRIGGER",
    "ToolInterrupted",
    "approvals",
    "hooks",
]


def hooks(
    engine: ExecutionEngine,
    *,
    program: str = "claude-agent",
    owner: str | None = None,
    timeout: float | None = None,
) -> dict[HookEvent, list[HookMatcher]]:
    """The ``hooks=`` of ``ClaudeAgentOptions`` that track and govern every turn on ``engine``.

    Each agent turn (one prompt, up to ``Stop``) becomes a tracked execution
    named ``program`` (with ``owner``); each sub-agent a child execution named
    after its ``agent_type``. ``timeout`` (seconds) is the SDK's per-hook
    timeout (its default, 60 s, when ``None``): give onlooker's pre-hooks the
    time they need, a human approval for instance. Merge the result with
    hooks of your own by extending its lists.
    """
    sdk = require("claude_agent_sdk", extra="claude-agent-sdk", framework="Claude Agent SDK")
    for declaration in BUILTIN_TOOLS:
        try:
            engine.declare_tool(declaration)
        except ValueError:  # the application declared it its own way: keep theirs
            logger.info("kept the engine's own declaration of Claude's %s tool", declaration.name)
    adapter = Adapter(engine, program=program, owner=owner)
    matcher: type[HookMatcher] = sdk.HookMatcher
    return {event: [matcher(hooks=[adapter], timeout=timeout)] for event in HOOK_EVENTS}


def approvals(
    registered: Mapping[HookEvent, Sequence[HookMatcher]], can_use_tool: CanUseTool
) -> CanUseTool:
    """``can_use_tool`` (the SDK's permission prompt) that records each prompt as an interaction.

    ``registered`` is the mapping :func:`hooks` returned (possibly extended
    with hooks of your own); ``can_use_tool`` is yours, the one that asks a
    person (or decides). Each prompt becomes an interaction of the call it
    asks about, ``tool 'Write' (call toolu_...) awaits approval``, resolved
    ``accepted`` or ``declined`` by your answer (``failed`` if it raises,
    ``cancelled`` if the CLI withdraws the question); a denied call, which
    the CLI never runs, is recorded ``failed`` with ``ToolApprovalRejected``
    (:data:`REJECTED`). Your answer always goes to the CLI unchanged, even if
    recording it fails::

        registered = hooks(engine)
        options = ClaudeAgentOptions(hooks=registered, can_use_tool=approvals(registered, ask))
    """
    adapter = next(
        (
            callback
            for matcher in registered.get("PreToolUse", ())
            for callback in matcher.hooks
            if isinstance(callback, Adapter)
        ),
        None,
    )
    if adapter is None:
        raise ValueError("approvals() needs the mapping hooks(engine) returned: it holds none")
    if not callable(can_use_tool):
        raise TypeError(f"can_use_tool must be a callable, not {type(can_use_tool).__name__}")
    found: Adapter = adapter

    async def recorded(
        tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResult:
        asked = await found.ask(tool_name, context)
        try:
            result = await can_use_tool(tool_name, tool_input, context)
        except BaseException as error:
            await found.answered(asked, None, error)
            raise
        await found.answered(asked, result, None)
        return result

    return recorded
