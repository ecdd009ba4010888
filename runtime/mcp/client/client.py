"""A connected MCP server: start it, list its tools, call them, close it.

``McpClient.connect`` runs the transport and the session in a nursery the caller owns
(the supervisor's, or a test's), rather than hiding a nursery inside an async context
manager: that keeps exception groups from leaking out of ``async with`` blocks.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import AsyncIterator, Callable

import trio

from runtime.config import HttpTransport as HttpConfig, McpServerEntry, StdioTransport as StdioConfig
from runtime.errors import ConnectionLost, ProtocolError, RpcError, TernError
from runtime.log import get_logger
from runtime.mcp import protocol
from runtime.mcp.client.session import InputHandler, McpSession, NotificationHandler

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
                      transport: Any = None, policy: Any = None, on_input: InputHandler | None = None,
                      input_methods: tuple[str, ...] = ("elicitation/create",), state_dir: str = "") -> McpClient:
        """Start the server's transport in ``nursery``, negotiate, and return the client.

        On failure everything started is closed again before the error propagates.
        """
        transport = transport or make_transport(entry, policy, state_dir=state_dir)
        session = McpSession(transport, name=entry.name, timeout_secs=entry.timeout_secs, roots=roots,
                             on_notification=on_notification, on_input=on_input, input_methods=input_methods)
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
        """Every tool, following ``nextCursor`` (bounded, and a repeated cursor ends it).
        A tool with invalid ``x-mcp-header`` declarations is left out (and logged)."""
        tools: list[protocol.McpTool] = []
        async for result in self._pages("tools/list"):
            page, _ = protocol.parse_tools_page(result)
            tools.extend(page)
        tools, refused = self.session.connection.note_tools(tools)
        for name, reason in refused:
            log.warning("MCP server '%s': tool %r left out: %s", self.entry.name, name[:100], reason)
        return tools

    async def _pages(self, method: str) -> AsyncIterator[dict[str, Any]]:
        """Each page of a paginated list, following ``nextCursor`` (at most
        ``MAX_TOOL_PAGES``; a repeated cursor ends it)."""
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_TOOL_PAGES):
            result = await self.session.request(method, {"cursor": cursor} if cursor else None)
            if not isinstance(result, dict):
                raise ProtocolError(f"the {method} result is not an object")
            yield result
            cursor = result.get("nextCursor") if isinstance(result.get("nextCursor"), str) else None
            if not cursor:
                break
            if cursor in seen:
                log.warning("MCP server '%s' repeated a %s cursor; stopped paging", self.entry.name, method)
                break
            seen.add(cursor)

    async def list_resources(self) -> list[dict[str, Any]]:
        """Every resource (``uri``, ``name`` and what else the server says), paginated."""
        return [item async for item in self._items("resources/list", "resources", "uri")]

    async def list_prompts(self) -> list[dict[str, Any]]:
        """Every prompt (``name``, ``description``, ``arguments``), paginated."""
        return [item async for item in self._items("prompts/list", "prompts", "name")]

    async def _items(self, method: str, key: str, required: str) -> AsyncIterator[dict[str, Any]]:
        async for result in self._pages(method):
            for item in result.get(key) or []:
                if isinstance(item, dict) and isinstance(item.get(required), str):
                    yield item

    async def read_resource(self, uri: str, *, timeout_secs: float | None = None) -> dict[str, Any]:
        """``resources/read``: the result (``contents``), answering input requests (MRTR)."""
        return await self._complete("resources/read", {"uri": uri}, timeout_secs)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None, *,
                         timeout_secs: float | None = None) -> dict[str, Any]:
        """``prompts/get``: the result (``messages``), answering input requests (MRTR)."""
        return await self._complete("prompts/get", {"name": name, "arguments": arguments or {}}, timeout_secs)

    async def _complete(self, method: str, params: dict[str, Any], timeout_secs: float | None) -> dict[str, Any]:
        limit = self.entry.timeout_secs if timeout_secs is None else min(timeout_secs, self.entry.timeout_secs)
        result = await self.session.call(method, params, timeout_secs=limit)
        if not isinstance(result, dict):
            raise ProtocolError(f"the {method} result is not an object")
        return result

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *,
                        timeout_secs: float | None = None,
                        on_progress: Callable[[dict[str, Any]], None] | None = None) -> protocol.CallResult:
        """Call a tool by its original name. A tool failure is ``result.is_error``;
        protocol faults raise RpcError, timeouts TernTimeout, a dead server ConnectionLost.

        The call may take the smaller of ``timeout_secs`` (the pipeline's) and the
        server's own ``timeout_secs``: either side can bound a server it distrusts."""
        limit = self.entry.timeout_secs if timeout_secs is None else min(timeout_secs, self.entry.timeout_secs)
        result = await self.session.call("tools/call", {"name": name, "arguments": arguments or {}},
                                         timeout_secs=limit, on_progress=on_progress)
        return protocol.parse_call_result(result)

    def listens(self) -> dict[str, bool]:
        """What ``subscriptions/listen`` would ask a 2026-07-28 server for: the
        ``list_changed`` notifications its capabilities offer (none in the handshake
        era, whose notifications need no request)."""
        info = self.info
        if info.era != "modern":
            return {}
        wanted = {"toolsListChanged": "tools", "promptsListChanged": "prompts", "resourcesListChanged": "resources"}
        offered = {name: value for name, value in info.capabilities.items() if isinstance(value, dict)}
        return {key: True for key, capability in wanted.items() if offered.get(capability, {}).get("listChanged")}

    async def listen(self, *, backoff_secs: float = 1.0, backoff_max_secs: float = 30.0) -> None:
        """Hold a ``subscriptions/listen`` stream open for as long as the connection
        lives (2026-07-28): its notifications reach ``on_notification`` like the
        handshake era's. A stream that ends is opened again after a backoff (doubling
        up to ``backoff_max_secs``, back to the start after a stream that lived longer
        than that). Events are not replayed, so whoever handles notifications should
        list again on ``notifications/subscriptions/acknowledged``: what changed while
        no stream was open was told to nobody. Returns at once if the server offers
        nothing to listen for, or refuses the method."""
        notifications = self.listens()
        if not notifications:
            return
        delay = backoff_secs
        while self.session.close_reason is None:
            started = trio.current_time()
            try:
                await self.session.request("subscriptions/listen", {"notifications": notifications},
                                            timeout_secs=math.inf)
                log.debug("MCP server '%s' ended its subscriptions/listen stream", self.entry.name)
            except ConnectionLost:
                return
            except RpcError as exc:
                if exc.code == -32601:  # offered list_changed but not the method: nothing to listen to
                    log.info("MCP server '%s' does not offer subscriptions/listen: %s", self.entry.name, exc)
                    return
                log.info("MCP server '%s': subscriptions/listen ended: %s", self.entry.name, exc)
            except TernError as exc:
                log.info("MCP server '%s': subscriptions/listen ended: %s", self.entry.name, exc)
            if trio.current_time() - started > backoff_max_secs:
                delay = backoff_secs  # it lived a while: not a failing loop
            await trio.sleep(delay)
            delay = min(delay * 2, backoff_max_secs)

    async def aclose(self) -> None:
        await self.session.aclose()
