"""The middleware: each ``tools/call`` a tracked call, in its session's execution (or its own).

The mapping is in the package docstring. ``mcp`` is imported when the
middleware is built, not with this module.
"""

from __future__ import annotations

import copy
import json
import logging
import secrets
import time
import weakref
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, final

import anyio
from pydantic import JsonValue

import onlooker
from onlooker._bus import check_timeout  # the engine's own rule for timeouts

from .. import require
from .._arguments import validated
from .._ids import unused_id
from ._arguments import ToolArguments
from ._questions import answer_of, question_of, with_token, without_token
from ._wire import SERVER_INFO, as_wire, merge_envelope, split_envelope, text_of

if TYPE_CHECKING:
    from mcp.server.connection import Connection
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.mcpserver import MCPServer
    from mcp.server.session import ServerSession
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
    """The ids its calls (and questions) were recorded under: a client may reuse a request id."""


@final
@dataclass(slots=True, eq=False)
class _Call:
    """One ``tools/call`` as the client means it: every round of it, until the tool's result.

    On the 2026 protocol a tool may answer ``input_required`` (questions for
    the client); the client retries the same call with the answers, as a new
    request. The call stays open across those rounds.
    """

    run: onlooker.TrackedExecution
    tracked: onlooker.TrackedToolCall
    ids: set[str]
    """The ids in use in its execution (calls, questions)."""
    own_run: bool
    """No session: the call is its own execution, finished with it."""
    name: str
    arguments: dict[str, Any]
    """As the client sent them: its retries send the same."""
    rewritten: dict[str, Any] | None
    """A pre-hook's rewrite of them: what the handler is given, every round."""
    refused_as: str | None
    """The error type of the server's refusal, when onlooker knows the server will refuse
    the call: no such tool (``UnknownToolError``), or arguments its validator refuses
    (``ToolInputError``)."""
    questions: dict[str, str] = field(default_factory=dict)
    """While the client is asked: input request key -> interaction id."""
    asked_at: float = 0.0


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

    ``input_timeout`` is how long (seconds) a call that asked the person
    (``input_required``) waits for the client's retry before its questions
    are recorded ``expired``; the SDK's own ``requestState`` lives 600 s
    (``math.inf``: never). Anything but a positive number is a ``TypeError``
    or ``ValueError`` naming it.
    """

    __slots__ = (
        "_arguments",
        "_call_tool_result",
        "_connection_type",
        "_engine",
        "_input_timeout",
        "_lowlevel",
        "_modern",
        "_owner",
        "_program",
        "_sessions",
        "_trigger",
        "_waiting",
    )

    def __init__(
        self,
        engine: onlooker.ExecutionEngine,
        *,
        program: str = "mcp-server",
        trigger: str = "mcp",
        owner: str | None = None,
        server: MCPServer[Any] | None = None,
        input_timeout: float = 600.0,
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
        self._input_timeout = check_timeout("input_timeout", input_timeout, unbounded=True)
        self._waiting: dict[str, _Call] = {}  # token in the requestState handed out -> call

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
        await self._expire()
        call, ctx = self._retry_of(ctx, name, arguments)
        if call is not None:  # the client answers the call's questions: its next round
            next_round = self._round(call, ctx, call_next)
            return await (self._finishing(call.run, next_round) if call.own_run else next_round)
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

    def _retry_of(
        self, ctx: ServerRequestContext[Any, Any], name: str, arguments: Mapping[str, Any]
    ) -> tuple[_Call | None, ServerRequestContext[Any, Any]]:
        """The waiting call this request retries, and the request with the server's own state.

        The ``requestState`` of an ``input_required`` round carries the
        middleware's token (sealed with the server's state where the server
        seals it); the handler gets its own state back, never the token.
        """
        params = ctx.params or {}
        token, state = without_token(params.get("requestState"))
        if token is None:
            return None, ctx
        params = {key: value for key, value in params.items() if key != "requestState"}
        if state is not None:
            params["requestState"] = state
        ctx = replace(ctx, params=params)
        call = self._waiting.pop(token, None)
        if call is not None and (call.name, call.arguments) != (name, dict(arguments)):
            self._waiting[token] = call  # another call showing its token: it still waits
            return None, ctx
        if call is None or call.run.finished:  # expired, of another process, engine closed
            return None, ctx  # a new call
        return call, ctx

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
        first_round = self._tool_call(run, set(), ctx, call_next, name, arguments, own_run=True)
        return await self._finishing(run, first_round)

    async def _finishing(
        self, run: onlooker.TrackedExecution, request: Awaitable[HandlerResult]
    ) -> HandlerResult:
        """Answer a request of a call that is its own execution; finish it unless the call
        waits for the client's answers."""
        try:
            return await request
        except BaseException as exc:
            if not isinstance(exc, Exception):  # cancelled: say so, even while cancelled
                with anyio.CancelScope(shield=True):
                    await self._finish(run, "cancelled", exc)
            raise
        finally:  # the request is answered, even by an error
            if not run.finished and all(c.run is not run for c in self._waiting.values()):
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
        *,
        own_run: bool = False,
    ) -> HandlerResult:
        try:
            validate = None if self._arguments is None else self._arguments.validator(name)
            given, valid = validated(validate, dict(arguments))
            call = await run.tool_started(
                name,
                given,
                tool_call_id=unused_id(call_ids, f"{_PREFIX}{run.execution_id}:{ctx.request_id}"),
                validate=validate,
            )
            if not call.allowed:  # refused, or a rewrite the tool's validator refused
                reason = call.reason or f"onlooker refused the call to {name!r}"
                return self._refusal(reason, self._envelope(ctx))
            # not rewritten: the server validates the client's own arguments
            rewritten = None if dict(call.input) == given else dict(call.input)
            refused_as = None
            if self._arguments is not None:  # given the server, its refusals are known
                if validate is None:
                    refused_as = "UnknownToolError"
                elif not valid and rewritten is None:  # a rewrite was validated: it is valid
                    refused_as = "ToolInputError"
        except Exception:
            logger.exception("onlooker could not govern tools/call %s; passed through", name)
            return await call_next(ctx)
        first = _Call(run, call, call_ids, own_run, name, dict(arguments), rewritten, refused_as)
        return await self._round(first, ctx, call_next)

    async def _round(
        self, call: _Call, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Run the handler once for ``call`` and record what it answers: the tool's result,
        or (``input_required``) questions for the client, whose retry is the next round."""
        await self._answered(call, ctx)  # the previous round's questions, if any
        forwarded = replace(ctx, session=self._asking(call, ctx.session))
        if call.rewritten is not None:
            forwarded = replace(
                forwarded, params={**(ctx.params or {}), "arguments": call.rewritten}
            )
        try:
            result = await call_next(forwarded)
        except BaseException as exc:
            with anyio.CancelScope(shield=not isinstance(exc, Exception)):
                try:
                    await call.tracked.failed(exc)
                except Exception:
                    logger.exception(
                        "onlooker could not record the failure of tools/call %s", call.name
                    )
            raise
        try:
            wire = as_wire(result)
            if wire.get("resultType") == "input_required":
                return await self._asked(call, wire)
            return await self._settle(call.tracked, result, call.refused_as)
        except Exception:
            logger.exception("onlooker could not record the result of tools/call %s", call.name)
            return result

    # -- questions to the person --------------------------------------------------------------

    async def _asked(self, call: _Call, wire: dict[str, Any]) -> HandlerResult:
        """An ``input_required`` round: record its questions; the call waits for the retry."""
        requests = wire.get("inputRequests")
        for key, request in requests.items() if isinstance(requests, Mapping) else ():
            question = question_of(request)
            if question is not None:
                call.questions[key] = await self._ask(call, key, *question)
        token = secrets.token_hex(8)
        call.asked_at = time.monotonic()
        self._waiting[token] = call
        return {**wire, "requestState": with_token(token, wire.get("requestState"))}

    async def _ask(self, call: _Call, key: str, message: str, schema: dict[str, Any] | None) -> str:
        interaction_id = unused_id(call.ids, f"{call.tracked.tool_call_id}/{key}")
        return await call.run.interaction_started(
            message, schema=schema, interaction_id=interaction_id
        )

    async def _answered(self, call: _Call, ctx: ServerRequestContext[Any, Any]) -> None:
        """Close the questions of ``call`` with the answers its retry carries."""
        responses = (ctx.params or {}).get("inputResponses")
        questions, call.questions = call.questions, {}
        for key, interaction_id in questions.items():
            response = responses.get(key) if isinstance(responses, Mapping) else None
            try:
                status, content = answer_of(response)
            except ValueError:
                status, content = "cancelled", None  # retried without answering
            await self._resolve(call, interaction_id, status, content, None)

    async def _expire(self) -> None:
        """Give up on the calls whose questions waited ``input_timeout`` for an answer."""
        now = time.monotonic()
        expired = [t for t, c in self._waiting.items() if now - c.asked_at >= self._input_timeout]
        for token in expired:
            call = self._waiting.pop(token, None)
            if call is None or call.run.finished:  # taken meanwhile, or the engine closed
                continue
            timeout = f"no answer came within {self._input_timeout:g} s"
            try:
                for interaction_id in call.questions.values():
                    await call.run.interaction_resolved(interaction_id, "expired", error=timeout)
                await call.tracked.failed(
                    onlooker.ErrorInfo(type="TimeoutError", message=timeout, cause="interrupt")
                )
                if call.own_run:
                    await call.run.finish("expired", error=timeout)
            except Exception:
                logger.exception("onlooker could not expire tools/call %s", call.name)

    def _asking(self, call: _Call, session: ServerSession) -> ServerSession:
        """``session``, recording each ``elicitation/create`` the handler sends as a question
        of ``call`` (the handshake protocol's way of asking, ``ctx.elicit``)."""
        send_request = session.send_request

        async def asking(request: Any, result_type: Any, *args: Any, **kwargs: Any) -> Any:
            question = question_of(as_wire(request))
            interaction_id = None
            if question is not None:
                try:
                    interaction_id = await self._ask(call, "elicitation", *question)
                except Exception:
                    logger.exception("onlooker could not record a question of %s", call.name)
            if interaction_id is None:
                return await send_request(request, result_type, *args, **kwargs)
            try:
                result = await send_request(request, result_type, *args, **kwargs)
            except BaseException as exc:
                with anyio.CancelScope(shield=not isinstance(exc, Exception)):
                    ended: onlooker.InteractionStatus = (
                        "failed" if isinstance(exc, Exception) else "cancelled"
                    )
                    await self._resolve(call, interaction_id, ended, None, exc)
                raise
            try:
                status, content = answer_of(as_wire(result))
            except ValueError as exc:
                await self._resolve(call, interaction_id, "failed", None, exc)
            else:
                await self._resolve(call, interaction_id, status, content, None)
            return result

        session = copy.copy(session)  # the same channels: only its requests are watched
        session.send_request = asking  # type: ignore[method-assign]
        return session

    async def _resolve(
        self,
        call: _Call,
        interaction_id: str,
        status: onlooker.InteractionStatus,
        response: object,
        error: BaseException | None,
    ) -> None:
        try:
            await call.run.interaction_resolved(interaction_id, status, response, error=error)
        except Exception:
            logger.exception("onlooker could not record the answer to %s", interaction_id)

    async def _settle(
        self, call: onlooker.TrackedToolCall, result: HandlerResult, refused_as: str | None
    ) -> HandlerResult:
        """Record the handler's result; what the client gets (the post-hooks' output)."""
        wire = as_wire(result)
        body, envelope = split_envelope(wire)
        if body.get("isError") is True:
            message = text_of(body) or "the tool returned an error result"
            if refused_as is not None:
                await call.failed(
                    onlooker.ErrorInfo(type=refused_as, message=message, cause="failure")
                )
            else:
                await call.failed(message)
            return result
        try:
            output = await call.finished(body)
        except onlooker.HookAbortError as abort:  # a post-hook ended the execution
            return self._refusal(abort.reason or str(abort), envelope)
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
