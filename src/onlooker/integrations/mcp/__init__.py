"""onlooker for MCP servers: ``OnlookerMiddleware(engine)``, a server middleware.

``pip install "onlooker[mcp]"`` (the official SDK, ``mcp`` 2.3 or later, whose
servers take a middleware chain)::

    async with onlooker.ExecutionEngine(plugins=[...], hooks=[...]) as engine:
        server = MCPServer("calc")
        server.middleware.append(OnlookerMiddleware(engine, program="calc", server=server))
        await server.run_stdio_async()     # or: lowlevel_server.middleware.append(...)

Every ``tools/call`` the server answers becomes a tracked tool call, governed
by onlooker's pre-hooks before the tool runs and by its post-hooks after:

========================================  ==============================================
MCP server (``mcp`` 2.3 middleware)       onlooker
========================================  ==============================================
first ``tools/call`` of a session         ``engine.track(program, trigger="mcp")``,
                                          ``run.start()``
``tools/call`` (JSON-RPC id ``N``)        ``run.tool_started(name, arguments,
                                          tool_call_id="mcp:<execution_id>:N",
                                          validate=<the tool's validator>)``
pre-hook BLOCK / SKIP / ABORT             an error ``CallToolResult`` (``isError``, the
                                          reason as text); the tool is not called
pre-hook ``modified_input``               validated as the server validates; then
                                          ``params.arguments`` replaced for the handler
invalid ``modified_input``                an error ``CallToolResult``; the call is
                                          ``failed`` (``ToolInputError`` naming the hook)
result with ``isError`` false             ``call.finished(result)``; a post-hook's
                                          ``modified_output`` is what the client gets
result with ``isError`` true              ``call.failed(its text)``; given ``server=``,
                                          typed ``UnknownToolError`` (no such tool) or
                                          ``ToolInputError`` (arguments it refuses)
handler raises (``MCPError``, ...)        ``call.failed(exc)``, then the error goes on
request cancelled                         ``call.failed(cancellation)``: ``cancelled``
``elicitation/create`` sent by the tool   ``run.interaction_started(message,
                                          schema=requestedSchema)``, then
                                          ``run.interaction_resolved`` with the answer
result ``input_required`` (2026)          ``run.interaction_started`` per elicitation;
                                          the call stays open for the client's retry
the retry with ``inputResponses``         ``run.interaction_resolved``; the same call's
                                          next round (no new ``tool_started``)
no retry within ``input_timeout``         question ``expired``, call ``cancelled``
session ends (connection exit stack)      ``run.finish(status="completed")``
2026-07-28 request (no session)           one execution per ``tools/call``
========================================  ==============================================

**One execution per session, or per request where there are none.** On the
handshake protocol (2025-11-25 and earlier: stdio, stateful streamable HTTP,
the in-memory ``Client(server, mode="legacy")``) a client connection is a
session: its first ``tools/call`` starts a tracked execution that holds all
of the session's calls, finished ``completed`` from the connection's exit
stack when the session ends. The 2026-07-28 protocol has no sessions
(``Client(server)`` in-process, stateless HTTP): each ``tools/call`` is its
own execution, finished when the request is answered (``completed``, or
``cancelled`` when the request was). ``mcp`` 2.3 does not yet hand middleware
the ``Connection`` (it sits on the per-request ``ServerSession``); should a
later SDK move it, sessions fall back to one execution per request too.

**Tool call ids.** JSON-RPC ids are unique only within one session (every
client counts from 0 or 1), while onlooker's ``tool_call_id`` is unique
everywhere; the recorded id is therefore ``"mcp:<execution_id>:<request id>"``,
and :func:`request_id_of` gives the request id back (as a string).

**Arguments as the tool receives them.** Given ``server=`` (the
``MCPServer``), the middleware validates the arguments as ``MCPServer`` does
inside the handler, after every middleware (the tool's argument model: ``"2"``
becomes ``2``, defaults are filled, unknown keys dropped): the client's own
arguments before the pre-hooks (invalid ones are recorded as sent, and the
server answers its usual error result), and each pre-hook's
``modified_input``. The handler is given the validated arguments, which the
server's second validation leaves as they are. Without ``server=``, or on a
low-level ``Server`` (which validates nothing itself), arguments are
recorded as the client and the hooks gave them.

**What is recorded as the result.** The ``CallToolResult`` in its wire form
(``content``, ``structuredContent``, ``isError``, ``_meta``), without the
protocol's envelope (``resultType``, the ``serverInfo`` stamp); a post-hook
receives that dict. Its ``modified_output`` may be such a dict, a
``CallToolResult``, or a string (the one text content the client then gets;
a tool with an output schema needs its ``structuredContent`` too, so rewrite
the whole dict there). A rewrite that is no ``CallToolResult`` is logged and
the client gets the tool's own result, as when a post-hook raises.

**Questions to the person.** A tool asks one of two ways; both are recorded
as interactions of its call. On the handshake protocol it sends
``elicitation/create`` while it runs (``ctx.elicit``): the middleware hands
the handler a session that records each one and its answer. On the 2026
protocol it answers ``input_required`` and the client retries the same
``tools/call`` with the answers, as a new request: the rounds are one call
(its id carries the first request's id), open until the tool's result; the
pre-hooks judge it once, the post-hooks its result, never a question. A
retry is tied to its call by a token the middleware adds to the
``requestState`` it hands out (inside ``MCPServer``'s seal) and removes
before the handler sees it. Questions no retry answers within
``input_timeout`` seconds are ``expired`` (noticed at the next
``tools/call``); the engine closing cancels them first.

The middleware never breaks the server: its own errors are logged on
``onlooker.integrations.mcp`` and the request passes through unchanged. The
engine must run on the server's event loop (open it around ``run_*_async``).
"""

from __future__ import annotations

from .. import require

require("mcp_types", extra="mcp", framework="MCP")
require("mcp.server", extra="mcp", framework="MCP")  # the SDK itself: mcp_types ships apart

from ._middleware import OnlookerMiddleware, request_id_of  # noqa: E402  # after require()

__all__ = ["OnlookerMiddleware", "request_id_of"]
