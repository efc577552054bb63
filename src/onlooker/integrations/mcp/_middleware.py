"""The middleware: each ``tools/call`` a tracked call, in its session's execution (or its own).

The mapping is in the package docstring. ``mcp`` is imported when the
middleware is built, not with this module.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, final

import anyio
from pydantic import JsonValue

import onlooker

from .. import require
from .._arguments import validated
from .._ids import unused_id
from ._arguments import ToolArguments
from ._wire import SERVER_INFO, as_wire, merge_envelope, split_envelope, text_of

if TYPE_CHECKING:
    from mcp.server.connection import Connection
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult

__all__ = ["OnlookerMiddleware", "request_id_of"]

logger: Final = logging.getLogger("onlooker.integrations.mcp")

_PREFIX: Final = "mcp:"


def request_id_of(tool_call_id: str) -> str | None:
    """The JSON-RPC request id inside a ``tool_call_id`` this middleware recorded.

    ``"mcp:<execution_id>:<request id>"`` gives ``"<request id>"`` (a string,
    whether the client sent a number or a string); any other id gives ``None``.
    """
    if not tool_call_id.startswith(_PREFIX):
        return None
    parts = tool_call_id.split(":", 2)  # execution ids hold no ":"; request ids may
    return parts[2] if len(parts) == 3 else None


@final
@dataclass(slots=True, eq=False)
class _Session:
    """The tracked execution of one connection."""

    run: onlooker.TrackedExecution
    lock: anyio.Lock
    started: bool = False
    call_ids: set[str] = field(default_factory=set)
    """The ids its calls were recorded under: a client may reuse a request id (7 and "7")."""


@final
class OnlookerMiddleware:
    """An ``mcp`` server middleware that turns every ``tools/call`` into a tracked tool call.

    Pass it to ``MCPServer(middleware=[...])`` or append it to a low-level
    ``Server.middleware``. ``program`` names the tracked executions (the
    server's name is a good choice), ``trigger`` is their trigger kind and
    ``owner`` their owner; without one, the client id of an authenticated
    request (OAuth bearer token) is the owner. See the module docstring for
    the mapping.

    ``server`` is the ``MCPServer`` the middleware serves (append the
    middleware to ``server.middleware`` once the server exists): with it, the
    arguments are validated as the server validates them before the call is
    recorded, so ``ToolCallStarted.args`` are what the tool receives and a
    pre-hook's invalid rewrite is refused. Without it (or on a low-level
    ``Server``, which validates nothing itself), arguments are recorded as the
    client and the pre-hooks gave them.
    """

    __slots__ = (
        "_arguments",
        "_call_tool_result",
        "_connection_type",
        "_engine",
        "_lowlevel",
        "_modern",
        "_owner",
        "_program",
        "_sessions",
        "_trigger",
    )

    def __init__(
        self,
        engine: onlooker.ExecutionEngine,
        *,
        program: str = "mcp-server",
        trigger: str = "mcp",
        owner: str | None = None,
        server: MCPServer[Any] | None = None,
    ) -> None:
        types = require("mcp_types", extra="mcp", framework="MCP")
        connection = require("mcp.server.connection", extra="mcp", framework="MCP")
        versions = require("mcp_types.version", extra="mcp", framework="MCP")
        self._engine = engine
        self._program = program
        self._trigger = trigger
        self._owner = owner
        self._arguments = None if server is None else ToolArguments(server)
        # mcp 2.3's MCPServer keeps its low-level Server (which holds the stamp) private.
        self._lowlevel: object = getattr(server, "_lowlevel_server", server)
        self._call_tool_result: type[CallToolResult] = types.CallToolResult
        self._connection_type: type[Connection] = connection.Connection
        self._modern: frozenset[str] = frozenset(versions.MODERN_PROTOCOL_VERSIONS)
        self._sessions: weakref.WeakKeyDictionary[Connection, _Session] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Track a ``tools/call`` request; pass every other message through untouched."""
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        params = ctx.params or {}
        name = params.get("name")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(name, str) or not isinstance(arguments, Mapping):
            return await call_next(ctx)  # malformed: the SDK answers INVALID_PARAMS
        connection = None if ctx.protocol_version in self._modern else self._connection(ctx)
        if connection is None:  # no session: this request is the execution
            return await self._per_request(ctx, call_next, name, arguments)
        try:
            run = await self._session_run(ctx, connection)
        except Exception:
            logger.exception(
                "onlooker could not track the MCP session; tools/call %s untracked", name
            )
            return await call_next(ctx)
        session = self._sessions[connection]
        return await self._tool_call(run, session.call_ids, ctx, call_next, name, arguments)

    # -- executions -------------------------------------------------------------------------

    def _connection(self, ctx: ServerRequestContext[Any, Any]) -> Connection | None:
        # mcp 2.3 keeps the Connection on the per-request ServerSession only
        # (its TODO(L54) moves it onto the context); without it, one execution per request.
        connection = getattr(ctx.session, "_connection", None)
        return connection if isinstance(connection, self._connection_type) else None

    def _track(
        self, ctx: ServerRequestContext[Any, Any], session_id: str | None
    ) -> onlooker.TrackedExecution:
        metadata: dict[str, JsonValue] = {"protocol_version": ctx.protocol_version}
        if session_id is not None:
            metadata["session_id"] = session_id
        client = ctx.session.client_params
        if client is not None:
            metadata["client"] = {
                "name": client.client_info.name,
                "version": client.client_info.version,
            }
        return self._engine.track(
            self._program,
            trigger=onlooker.Trigger(kind=self._trigger, metadata=metadata),
            owner=self._owner if self._owner is not None else _authenticated_client(),
        )

    async def _session_run(
        self, ctx: ServerRequestContext[Any, Any], connection: Connection
    ) -> onlooker.TrackedExecution:
        session = self._sessions.get(connection)
        if session is None:
            session = _Session(self._track(ctx, connection.session_id), anyio.Lock())
            self._sessions[connection] = session
        if not session.started:
            async with session.lock:  # concurrent first calls start it once
                if not session.started:
                    await session.run.start()
                    session.started = True
                    connection.exit_stack.push_async_callback(self._session_closed, session)
        return session.run

    async def _session_closed(self, session: _Session) -> None:
        try:
            await session.run.finish(status="completed")
        except Exception:
            logger.exception("onlooker could not finish the MCP session's execution")

    async def _per_request(
        self,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        name: str,
        arguments: Mapping[str, Any],
    ) -> HandlerResult:
        try:
            run = self._track(ctx, None)
            await run.start()
        except Exception:
            logger.exception("onlooker could not track tools/call %s; untracked", name)
            return await call_next(ctx)
        try:
            return await self._tool_call(run, set(), ctx, call_next, name, arguments)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # cancelled: say so, even while cancelled
                with anyio.CancelScope(shield=True):
                    await self._finish(run, "cancelled", exc)
            raise
        finally:
            if not run.finished:  # the request is answered, even by an error
                await self._finish(run, "completed", None)

    async def _finish(
        self,
        run: onlooker.TrackedExecution,
        status: onlooker.ExecutionStatus,
        error: BaseException | None,
    ) -> None:
        try:
            await run.finish(status=status, error=error)
        except Exception:
            logger.exception("onlooker could not finish the execution of an MCP request")

    # -- one tools/call ---------------------------------------------------------------------

    async def _tool_call(
        self,
        run: onlooker.TrackedExecution,
        call_ids: set[str],
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        name: str,
        arguments: Mapping[str, Any],
    ) -> HandlerResult:
        try:
            validate = None if self._arguments is None else self._arguments.validator(name)
            given = validated(validate, dict(arguments))
            call = await run.tool_started(
                name,
                given,
                tool_call_id=unused_id(call_ids, f"{_PREFIX}{run.execution_id}:{ctx.request_id}"),
                validate=validate,
            )
            if not call.allowed:  # refused, or a rewrite the tool's validator refused
                reason = call.reason or f"onlooker refused the call to {name!r}"
                return self._refusal(reason, self._envelope(ctx))
            forwarded = ctx  # not rewritten: the server validates the client's own arguments
            if dict(call.input) != given:
                forwarded = replace(
                    ctx, params={**(ctx.params or {}), "arguments": dict(call.input)}
                )
        except Exception:
            logger.exception("onlooker could not govern tools/call %s; passed through", name)
            return await call_next(ctx)
        try:
            result = await call_next(forwarded)
        except BaseException as exc:
            with anyio.CancelScope(shield=not isinstance(exc, Exception)):
                try:
                    await call.failed(exc)
                except Exception:
                    logger.exception("onlooker could not record the failure of tools/call %s", name)
            raise
        try:
            return await self._settle(call, result)
        except Exception:
            logger.exception("onlooker could not record the result of tools/call %s", name)
            return result

    async def _settle(self, call: onlooker.TrackedToolCall, result: HandlerResult) -> HandlerResult:
        """Record the handler's result; what the client gets (the post-hooks' output)."""
        wire = as_wire(result)
        body, envelope = split_envelope(wire)
        if body.get("isError") is True and wire.get("resultType") != "input_required":
            await call.failed(text_of(body) or "the tool returned an error result")
            return result
        asks = wire.get("resultType") == "input_required"
        if asks:
            body.pop("requestState", None)  # the server's own state, sealed for the client
        try:
            output = await call.finished(body)
        except onlooker.HookAbortError as abort:  # a post-hook ended the execution
            return self._refusal(abort.reason or str(abort), envelope)
        if asks:  # a question for the client, as the server put it: not a rewritable result
            return result
        if output is body:
            return result
        rewritten = merge_envelope(self._rewritten(output), envelope)
        try:
            self._call_tool_result.model_validate(rewritten)
        except ValueError as exc:  # fail-safe, as for a raising post-hook: the output passes
            logger.error(
                "a post-hook rewrote the result of tools/call %s into no CallToolResult (%s); "
                "the client gets the tool's own result",
                call.tool,
                exc,
            )
            return result
        return rewritten

    def _refusal(self, reason: str, envelope: Mapping[str, Any]) -> dict[str, Any]:
        """An error result saying ``reason``, in the envelope the connection's protocol has.

        A middleware that answers without ``call_next`` owns its result's
        envelope (the SDK adds none): ``resultType`` and the ``serverInfo``
        stamp on a 2026-era connection, neither on an older one.
        """
        body = {"content": [{"type": "text", "text": reason}], "isError": True}
        return merge_envelope(body, envelope)

    def _envelope(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        """The envelope the SDK would give a result on this request's connection."""
        if ctx.protocol_version not in self._modern:
            return {}
        envelope: dict[str, Any] = {"resultType": "complete"}
        stamp = getattr(self._lowlevel, "server_info_stamp", None)
        if isinstance(stamp, Mapping):  # known with ``server=`` only
            envelope["_meta"] = {SERVER_INFO: dict(stamp)}
        return envelope

    def _rewritten(self, output: object) -> dict[str, Any]:
        if isinstance(output, self._call_tool_result):
            wire = output.model_dump(by_alias=True, mode="json", exclude_none=True)
            wire.pop("resultType", None)  # the connection's envelope decides it
            return wire
        if isinstance(output, Mapping):
            return {str(k): v for k, v in output.items()}
        text = output if isinstance(output, str) else json.dumps(output, default=str)
        return {"content": [{"type": "text", "text": text}], "isError": False}


def _authenticated_client() -> str | None:
    try:
        from mcp.server.auth.middleware.auth_context import get_access_token
    except ImportError:  # pragma: no cover - part of mcp itself
        return None
    token = get_access_token()
    return None if token is None else token.client_id
