"""Adapters that turn other frameworks' agents into tracked executions.

One module per framework, each a thin mapping onto
:meth:`onlooker.ExecutionEngine.track`; each imports its framework lazily
and, when it is missing, fails with an ``ImportError`` naming the extra to
install (``pip install "onlooker[langchain]"``). The core never imports
this package.

===================  ==========================  =======================
module               extra                       entry points
===================  ==========================  =======================
claude_agent_sdk     ``claude-agent-sdk``        ``hooks(engine)``
pydantic_ai          ``pydantic-ai``             ``OnlookerCapability``
langchain            ``langchain``               ``OnlookerCallbackHandler``, ``wrap_tool_call``
openai_agents        ``openai-agents``           ``OnlookerRunHooks``, ``tool_guardrail``, ``OnlookerTracingProcessor``
mcp                  ``mcp``                     ``OnlookerMiddleware``
opentelemetry        ``opentelemetry``           ``plugin``, ``OnlookerSpanProcessor``
===================  ==========================  =======================
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, *, extra: str, framework: str) -> ModuleType:
    """Import ``module`` or fail with an ``ImportError`` that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"onlooker's {framework} integration needs {module!r}, which is not installed: "
            f'pip install "onlooker[{extra}]"',
            name=exc.name,
        ) from exc
