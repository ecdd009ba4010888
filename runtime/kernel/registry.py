"""One registry of every tool an agent can call: built-in tools and tool sources.

Built-in tools register a handler; tool sources (the MCP supervisor's servers) are
live: their set changes as servers connect, restart and send ``tools/list_changed``.
The registry only finds and routes: the guarded execution pipeline (capabilities,
validation, timeouts, truncation, taint, audit) wraps ``call``.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import msgspec

from runtime.errors import UnknownTool
from runtime.kernel.annotations import BUILTIN_ANNOTATIONS
from runtime.kernel.elicitation import CALL_ASK
from runtime.ports import Handler, Tool, ToolContext, ToolResult, ToolSource

__all__ = ["ToolRegistry"]


class ToolRegistry:
    def __init__(self, sources: Sequence[ToolSource] = ()) -> None:
        self._builtins: dict[str, tuple[Tool, Handler]] = {}
        self.sources = list(sources)

    def register(self, tool: Tool, handler: Handler) -> None:
        if tool.name in self._builtins:
            raise RuntimeError(f"built-in tool {tool.name!r} registered twice")
        if tool.annotations is None:  # tern's own hints, one table (kernel/annotations.py)
            known = BUILTIN_ANNOTATIONS.get(tool.name)
            if known is not None:
                tool = msgspec.structs.replace(tool, annotations=known)
        self._builtins[tool.name] = (tool, handler)

    def tools(self) -> list[Tool]:
        """Every tool, built-ins first, then each source's tools sorted by name."""
        listed = [tool for tool, _ in self._builtins.values()]
        for source in self.sources:
            listed.extend(sorted(source.tools(), key=lambda t: t.name))
        return listed

    def get(self, name: str) -> Tool | None:
        if name in self._builtins:
            return self._builtins[name][0]
        for source in self.sources:
            tool = source.get(name)
            if tool is not None:
                return tool
        return None

    async def wait_for(self, name: str) -> Tool | None:
        """``get``, waiting for a source that is still bringing the tool up (an MCP server
        connecting at boot); None if no source will have it."""
        tool = self.get(name)
        if tool is not None:
            return tool
        for source in self.sources:
            if source.owns(name):
                return await source.wait_for(name)
        return None

    def adopt_builtins(self, other: ToolRegistry) -> None:
        """Take ``other``'s built-in tools in place of ours (a reloaded config's), keeping
        the sources: everyone holding this registry sees the new set at once."""
        self._builtins = dict(other._builtins)

    async def call(self, name: str, arguments: dict[str, Any] | None = None, *,
                   timeout_secs: float | None = None, context: ToolContext | None = None) -> ToolResult:
        """Route a call by name. Raises UnknownTool; a source's faults raise as its
        client does (RpcError, TernTimeout, ConnectionLost)."""
        arguments = arguments or {}
        if name in self._builtins:
            return await self._builtins[name][1](arguments, context or ToolContext())
        for source in self.sources:
            if source.owns(name):
                token = CALL_ASK.set(context.ask if context is not None else None)  # a server's question asks it
                try:
                    return await source.call(name, arguments, timeout_secs=timeout_secs)
                except UnknownTool:
                    break  # the source's set changed under the call: say so with a hint
                finally:
                    CALL_ASK.reset(token)
        raise UnknownTool(f"no tool named {name!r}{self._hint(name)}")

    def _hint(self, name: str) -> str:
        import difflib

        close = difflib.get_close_matches(name, [t.name for t in self.tools()], n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""
