"""One registry of every tool an agent can call: built-in tools and MCP tools.

Built-in tools register a handler; MCP tools come live from the supervisor (their set
changes as servers connect, restart and send ``tools/list_changed``). The registry
only finds and routes: the guarded execution pipeline (capabilities, validation,
timeouts, truncation, taint, audit) wraps ``call``.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Literal, Union

import msgspec

from runtime.errors import TernError

__all__ = ["Tool", "ToolResult", "ToolContext", "ToolRegistry", "UnknownTool", "Handler"]

Source = Literal["builtin", "mcp"]


class UnknownTool(TernError):
    """No tool has this name."""


class Tool(msgspec.Struct, frozen=True):
    """A tool as agents (and LLMs) see it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    source: Source = "builtin"
    server: str = ""  # MCP tools: the configured server
    original_name: str = ""  # MCP tools: the name the server knows it by


class ToolResult(msgspec.Struct):
    """What a call returns to its caller. ``is_error`` is a tool error for the model to
    read (the tool ran and failed), not a fault of tern."""

    text: str
    is_error: bool = False
    structured: Any = None
    content: list[dict[str, Any]] = []


class ToolContext(msgspec.Struct, frozen=True):
    """Who is calling, for tools that act on the caller's own things: the agent's
    name, its workspace directory (file tools stay inside it), tern's state directory.
    A caller that can show a long call's life (the MCP server) sets ``progress(text)``
    (output as it comes) and ``log(level, text)``: plain callbacks that never block."""

    agent: str = ""
    workspace: str = ""
    state_dir: str = ""
    progress: Any = None
    log: Any = None


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


class ToolRegistry:
    def __init__(self, mcp: Any = None) -> None:
        self._builtins: dict[str, tuple[Tool, Handler]] = {}
        self.mcp = mcp  # an McpSupervisor, or None

    def register(self, tool: Tool, handler: Handler) -> None:
        if tool.name in self._builtins:
            raise ValueError(f"built-in tool {tool.name!r} registered twice")
        self._builtins[tool.name] = (tool, handler)

    def tools(self) -> list[Tool]:
        """Every tool, built-ins first, MCP tools sorted by name."""
        listed = [tool for tool, _ in self._builtins.values()]
        if self.mcp is not None:
            listed.extend(sorted((self._mcp_tool(entry) for entry in self.mcp.tools()), key=lambda t: t.name))
        return listed

    def get(self, name: str) -> Union[Tool, None]:
        if name in self._builtins:
            return self._builtins[name][0]
        entry = self.mcp.tool(name) if self.mcp is not None else None
        return None if entry is None else self._mcp_tool(entry)

    @staticmethod
    def _mcp_tool(entry: Any) -> Tool:
        return Tool(entry.name, f"[MCP:{entry.server}] {entry.tool.description}".rstrip(),
                    entry.tool.input_schema, source="mcp", server=entry.server, original_name=entry.tool.name)

    async def call(self, name: str, arguments: Union[dict[str, Any], None] = None, *,
                   timeout_secs: Union[float, None] = None, context: Union[ToolContext, None] = None) -> ToolResult:
        """Route a call by name. Raises UnknownTool; MCP faults raise as the client does
        (RpcError, TernTimeout, ConnectionLost)."""
        arguments = arguments or {}
        if name in self._builtins:
            return await self._builtins[name][1](arguments, context or ToolContext())
        if self.mcp is not None and self.mcp.owner(name) is not None:
            try:
                result = await self.mcp.call(name, arguments, timeout_secs=timeout_secs)
            except KeyError:
                pass
            else:
                return ToolResult(result.text(), result.is_error, result.structured_content, result.content)
        raise UnknownTool(f"no tool named {name!r}{self._hint(name)}")

    def _hint(self, name: str) -> str:
        import difflib

        close = difflib.get_close_matches(name, [t.name for t in self.tools()], n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""
