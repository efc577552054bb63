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
SubagentStart          ``parent.child(agent_type, parent_tool_call_id=<the Agent/Task
                       call's tool_use_id>).start()``; the parent is the execution that
                       made that call (so sub-agents of sub-agents nest)
SubagentStop           ``child.finish("completed", result=last_assistant_message)``
Stop                   ``run.finish("completed", result=last_assistant_message)``, once
                       the turn's background sub-agents have stopped too
=====================  ==================================================================

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
- Permission prompts (``can_use_tool``) are the application's; they are not
  recorded as interactions.

The hooks run on the event loop that runs ``query()``/``ClaudeSDKClient``,
which must be the engine's. An error of the adapter itself is logged on
``onlooker.integrations.claude_agent_sdk`` and answered with an empty hook
output (the agent goes on), but a refusal already decided is always sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import require

require("claude_agent_sdk", extra="claude-agent-sdk", framework="Claude Agent SDK")

from .._claude_declarations import (  # noqa: E402  # after require(): a missing extra is named
    BUILTIN_TOOLS,
    HOOK_EVENTS,
    TRIGGER,
    ToolInterrupted,
)
from ._adapter import Adapter, logger  # noqa: E402

if TYPE_CHECKING:
    from claude_agent_sdk import HookMatcher
    from claude_agent_sdk.types import HookEvent

    from onlooker import ExecutionEngine

__all__ = ["BUILTIN_TOOLS", "HOOK_EVENTS", "TRIGGER", "ToolInterrupted", "hooks"]


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
