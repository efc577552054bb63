"""An ``MCPServer``'s own validation of a tool's arguments, done before onlooker records the call.

``MCPServer`` validates ``arguments`` inside the handler, after every
middleware (``Tool.run``: ``fn_metadata.validate_arguments``, the tool's
argument model built from its signature, with the SDK's JSON pre-parsing).
The middleware runs that same validation first, so ``ToolCallStarted.args``
are what the tool receives (``"2"`` coerced to ``2``, defaults filled) and a
pre-hook's rewrite the tool would refuse is refused with a ``ToolInputError``
naming the hook. The validated arguments are what the handler is given; the
server validates them again, which changes nothing (validation is idempotent,
and every default is already filled).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, final

from .. import require

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.tools import ToolManager

__all__ = ["ToolArguments", "Validate", "validated"]

Validate: TypeAlias = Callable[[dict[str, Any]], dict[str, Any]]
"""A tool's validator: the arguments its function receives, or it raises."""


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


def validated(validate: Validate | None, arguments: dict[str, Any]) -> dict[str, Any]:
    """The client's own ``arguments`` as the tool would receive them; as given if invalid.

    Invalid arguments are left for the server to refuse with its own error
    result, as without onlooker.
    """
    if validate is None:
        return arguments
    try:
        return validate(arguments)
    except Exception:  # the server's own validator: it reports the error itself
        return arguments
