"""An MCP server under onlooker: every tools/call recorded, governed and audited.

Runs offline: the server and the SDK's in-process client share this script.
The client makes three calls: one completes, one fails, and one an onlooker
pre-hook refuses before the tool body runs.

    python examples/integrations/mcp_server.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import TextContent

import onlooker
from onlooker.integrations.mcp import OnlookerMiddleware, request_id_of
from onlooker.plugins import audit, history


def no_deletes(use: onlooker.ToolUseContext) -> onlooker.PreHookResult:
    """Refuse every tool whose name starts with ``delete_``."""
    return onlooker.PreHookResult(
        action=onlooker.HookAction.BLOCK, reason=f"{use.tool_name} needs a human"
    )


def build_server(engine: onlooker.ExecutionEngine) -> MCPServer:
    server = MCPServer("notes", log_level="WARNING")
    # given the server, the middleware records arguments as its tools receive them
    server.middleware.append(OnlookerMiddleware(engine, program="notes", server=server))
    notes = {"todo.md": "- ship the MCP adapter"}

    @server.tool()
    def read_note(name: str) -> str:
        """Read a note."""
        if name not in notes:
            raise ToolError(f"no note called {name!r}")
        return notes[name]

    @server.tool()
    def delete_note(name: str) -> str:
        """Delete a note."""
        del notes[name]  # never reached: onlooker refuses the call first
        return "deleted"

    return server


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="onlooker-mcp-") as tmp:
        await run(Path(tmp))


async def run(directory: Path) -> None:
    url = f"sqlite:///{directory / 'history.db'}"
    trail = audit.plugin(directory=directory / "audit", session_id="mcp-example")
    async with onlooker.ExecutionEngine(
        plugins=[history.plugin(url), trail],
        hooks=[onlooker.HookMatcher(pattern="delete_*", pre=(no_deletes,))],
    ) as engine:
        server = build_server(engine)
        async with Client(server, mode="legacy") as client:  # one session: one execution
            for name, args in [
                ("read_note", {"name": "todo.md"}),
                ("read_note", {"name": "missing.md"}),
                ("delete_note", {"name": "todo.md"}),
            ]:
                result = await client.call_tool(name, args)
                said = " ".join(c.text for c in result.content if isinstance(c, TextContent))
                print(f"client: {name}{args} -> {'error' if result.is_error else 'ok'}: {said}")
        audit_path = engine.extension(trail).path

    async with history.open(url) as store:
        (run,) = await store.list_executions()
        tree = await store.get_execution(run.execution_id)
        assert tree is not None
        print(f"\nexecution {tree.execution_id} ({tree.program}): {tree.status}")
        for call in tree.tool_calls:
            print(
                f"  {call.tool:<12} {call.status:<10} request id {request_id_of(call.tool_call_id)}"
            )
    report = audit.verify(audit_path)
    print(f"\naudit trail: {'intact' if report.ok else 'BROKEN'}, {report.records} records")


if __name__ == "__main__":
    anyio.run(main)
