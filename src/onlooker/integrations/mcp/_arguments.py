"""An ``MCPServer``'s own validation of a tool's arguments, done before onlooker records the call.

``MCPServer`` validates ``arguments`` inside the handler, after every
middleware (``Tool.run``: ``fn_metadata.validate_arguments``, the tool's
argument model built from its signature, with the SDK's JSON pre-parsing).
The middleware runs that same validation first, so ``ToolCallStarted.args``
are what the tool receives (``"2"`` coerced to ``2``, defaults filled) and a
pre-hook's rewrite the tool would refuse is refused with a ``ToolInputError``
naming the hook. Arguments no hook rewrote go on as the client sent them, so
the server validates them once; a rewrite goes on validated, and the server
validates it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

from .. import require
from .._arguments import Validate

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.tools import ToolManager

__all__ = ["ToolArguments"]


@final
class ToolArguments:
    """The argument validators of one ``MCPServer``'s tools, looked up by name at each call."""

    __slots__ = ("_tools",)

    def __init__(self, server: MCPServer[Any]) -> None:
        mcpserver = require("mcp.server.mcpserver", extra="mcp", framework="MCP")
        if not isinstance(server, mcpserver.MCPServer):
            raise TypeError(
                "server must be the MCPServer the middleware serves (a low-level Server "
                f"validates nothing itself), not {server!r}"
            )
        # No public lookup of a registered tool: MCPServer keeps them in its ToolManager.
        self._tools: ToolManager = server._tool_manager

    def validator(self, tool: str) -> Validate | None:
        """The validator ``Tool.run`` applies to ``tool``'s arguments; ``None`` for no such tool."""
        registered = self._tools.get_tool(tool)
        return None if registered is None else registered.fn_metadata.validate_arguments
