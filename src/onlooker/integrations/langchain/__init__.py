"""LangChain and LangGraph: any run becomes a tracked execution; ``ToolNode`` calls are governed.

Two entry points, used alone or together:

- :class:`OnlookerCallbackHandler` (``config={"callbacks": [handler]}``) records
  any LangChain or LangGraph run. Callbacks only observe: they cannot refuse
  a call nor rewrite its arguments or result.
- :func:`wrap_tool_call` (``ToolNode(tools, awrap_tool_call=...)``) runs
  onlooker's pre-hooks before each tool call of a LangGraph ``ToolNode`` and
  enforces their verdict, and hands the post-hooks' output back to the graph.

Used together they record each call once: the wrapper owns the calls it
governs (keyed by the ``ToolNode``'s run and the ``tool_call_id``, in a
registry shared through the engine) and the handler skips them; the wrapper
finds the execution the handler opened for the graph through the run ids
LangChain hands both.

=================================================  ================================================
LangChain / LangGraph                              onlooker
=================================================  ================================================
``on_chain_start``, no (known) parent run          ``engine.track(run name, execution_id=run_id)``
                                                   + ``start()``
``on_chain_start`` of a graph node whose graph is  ``parent.child(graph name, parent_tool_call_id=``
nested (a subgraph, or a graph run by a tool)      the enclosing tool call) + ``start()``
``on_chain_end`` of a root / subgraph run          ``finish("completed", result=outputs)`` (a
                                                   root: once its calls still running ended)
``on_chain_error`` of a root / subgraph run        ``finish("failed", error=...)`` (``cancelled``
                                                   for a cancellation or a graph interrupt)
``on_tool_start``                                  ``tool_started(name, inputs, tool_call_id=``
                                                   LangChain's ``tool_call_id``, else the run id)
``on_tool_end`` (a ``ToolMessage``)                ``finished(content)``
``on_tool_end`` (``ToolMessage(status="error")``,  ``failed(content)``
a handled ``ToolException``)
``on_tool_error``                                  ``failed(error)`` (``cancelled``, cause
                                                   ``interrupt``, for an ``interrupt()``)
``on_chain_end`` of a ``ToolNode`` whose output    ``tool_started`` + ``failed(UnknownToolError)``
answers a call to a tool it lacks (no tool run)    (once: not if a wrapper recorded it)
``awrap_tool_call(request, execute)``              ``tool_started`` with the ``args`` as the
                                                   tool's ``args_schema`` validates them
                                                   (``validate=`` that schema); refused: a
                                                   ``ToolMessage`` (``status="error"``, the
                                                   reason) and the tool never runs (so too a
                                                   ``modified_input`` the schema refuses,
                                                   ``failed``); ``modified_input`` rewrites
                                                   ``tool_call["args"]``; then ``finished`` /
                                                   ``failed`` (``UnknownToolError`` for a tool
                                                   the ``ToolNode`` lacks), ``modified_output``
                                                   rewrites the ``ToolMessage`` content (not
                                                   its ``artifact``)
=================================================  ================================================

Run the graph with ``ainvoke`` / ``astream`` on the engine's event loop. A
synchronous ``invoke`` runs the callbacks on another thread: the handler hops
back to the engine's loop (so call it from a worker thread, never from the
loop itself), and LangGraph does not call ``awrap_tool_call`` at all then.
The adapter's own failures are logged on ``onlooker.integrations.langchain``
and never reach the agent; a hook's ``ABORT`` does, as ``HookAbortError``.
"""

from __future__ import annotations

from ._handler import OnlookerCallbackHandler
from ._wrap import wrap_tool_call

__all__ = ["OnlookerCallbackHandler", "wrap_tool_call"]
