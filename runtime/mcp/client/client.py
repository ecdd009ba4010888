"""A connected MCP server: start it, list its tools, call them, close it.

``McpClient.connect`` runs the transport and the session in a nursery the caller owns
(the supervisor's, or a test's), rather than hiding a nursery inside an async context
manager: that keeps exception groups from leaking out of ``async with`` blocks.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import trio

from runtime.config import HttpTransport as HttpConfig, McpServerEntry, StdioTransport as StdioConfig
from runtime.log import get_logger
from runtime.mcp import protocol
from runtime.mcp.client.session import McpSession, NotificationHandler

__all__ = ["McpClient", "MAX_TOOL_PAGES"]

log = get_logger("mcp")
MAX_TOOL_PAGES = 100


def make_transport(entry: McpServerEntry, policy: Any = None, *, state_dir: str = "", authorizer: Any = None) -> Any:
    """The transport object for a configured server. Imported lazily, so a config
    with only stdio servers never pays for importing httpx. ``policy`` is the SSRF
    guard's AddressPolicy (default: metadata and link-local blocked, nothing else).
    ``state_dir`` holds OAuth tokens; ``authorizer`` completes a login (none in the daemon)."""
    if isinstance(entry.transport, StdioConfig):
        from runtime.mcp.client.stdio import StdioTransport

        return StdioTransport(entry.name, entry.transport, entry.env)
    from runtime.net.guard import AddressPolicy

    policy = policy or AddressPolicy()
    if isinstance(entry.transport, HttpConfig):
        from runtime.mcp.client.streamable_http import StreamableHttpTransport

        return StreamableHttpTransport(entry.name, entry.transport, policy=policy, timeout_secs=entry.timeout_secs,
                                       state_dir=state_dir, authorizer=authorizer)
    from runtime.mcp.client.legacy_sse import LegacySseTransport

    return LegacySseTransport(entry.name, entry.transport, policy=policy, timeout_secs=entry.timeout_secs,
                              state_dir=state_dir, authorizer=authorizer)


class McpClient:
    """One live connection to one MCP server."""

    def __init__(self, entry: McpServerEntry, session: McpSession) -> None:
        self.entry = entry
        self.session = session

    @classmethod
    async def connect(cls, entry: McpServerEntry, nursery: trio.Nursery, *,
                      roots: list[str] | None = None,
                      on_notification: NotificationHandler | None = None,
                      transport: Any = None, policy: Any = None, state_dir: str = "") -> McpClient:
        """Start the server's transport in ``nursery``, negotiate, and return the client.

        On failure everything started is closed again before the error propagates.
        """
        transport = transport or make_transport(entry, policy, state_dir=state_dir)
        session = McpSession(transport, name=entry.name, timeout_secs=entry.timeout_secs, roots=roots,
                             on_notification=on_notification)
        try:
            await transport.start(nursery)
            await nursery.start(session.run)
            await session.open(entry.protocol)
        except BaseException:
            await session.aclose()
            raise
        return cls(entry, session)

    @property
    def info(self) -> protocol.ServerInfo:
        assert self.session.info is not None
        return self.session.info

    @property
    def closed(self) -> trio.Event:
        return self.session.closed

    async def list_tools(self) -> list[protocol.McpTool]:
        """Every tool, following ``nextCursor`` (bounded, and a repeated cursor ends it)."""
        tools: list[protocol.McpTool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_TOOL_PAGES):
            result = await self.session.request("tools/list", {"cursor": cursor} if cursor else None)
            page, cursor = protocol.parse_tools_page(result)
            tools.extend(page)
            if cursor is None:
                break
            if cursor in seen:
                log.warning("MCP server '%s' repeated a tools/list cursor; stopped paging", self.entry.name)
                break
            seen.add(cursor)
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *,
                        timeout_secs: float | None = None,
                        on_progress: Callable[[dict[str, Any]], None] | None = None) -> protocol.CallResult:
        """Call a tool by its original name. A tool failure is ``result.is_error``;
        protocol faults raise RpcError, timeouts TernTimeout, a dead server ConnectionLost.

        The call may take the smaller of ``timeout_secs`` (the pipeline's) and the
        server's own ``timeout_secs``: either side can bound a server it distrusts."""
        limit = self.entry.timeout_secs if timeout_secs is None else min(timeout_secs, self.entry.timeout_secs)
        result = await self.session.request("tools/call", {"name": name, "arguments": arguments or {}},
                                            timeout_secs=limit, on_progress=on_progress)
        return protocol.parse_call_result(result)

    async def aclose(self) -> None:
        await self.session.aclose()
