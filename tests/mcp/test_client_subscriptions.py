"""Upstream resource subscriptions through tern, against server-everything's own
subscription feature (stdio and Streamable HTTP): a client of tern's MCP server
subscribes to one of everything's resources (``[mcp_server] upstream``), tern's client
sends ``resources/subscribe`` upstream, everything's ``toggle-subscriber-updates`` tool
(called through tern's pipeline, on the same upstream session) starts its updates, and
each ``notifications/resources/updated`` reaches the subscribed client as tern's own."""

from __future__ import annotations

import trio
import trio.testing

from runtime.config import Config, HttpTransport, McpServerEntry, McpServerExposure, StateConfig
from runtime.mcp.server.dispatch import McpServer
from runtime.mcp.server.stdio import LocalBackend, StdioServer
from tests.mcp.conftest import stdio_entry
from tests.mcp.test_server_memory import Client
from tests.netns import isolated_server

DOCUMENT = "demo://resource/static/document/architecture.md"


async def check_updates(nursery, tmp_path, entry: McpServerEntry) -> None:
    from runtime.kernel.kernel import Kernel

    config = Config(mcp_servers=[entry], mcp_server=McpServerExposure(upstream=["everything"]),
                    state=StateConfig(dir=str(tmp_path / "state")))
    kernel = Kernel(config)
    await nursery.start(kernel.run)
    with trio.fail_after(60):
        await kernel.mcp.wait_settled()
    assert kernel.mcp.status("everything").state == "ready", kernel.mcp.status("everything").last_error
    assert kernel.mcp.capabilities("everything")["resources"]["subscribe"] is True
    client_end, server_end = trio.testing.memory_stream_pair()
    server = McpServer(config, kernel.pipeline, kernel.events, approvals=kernel.approvals, content=kernel.content)
    nursery.start_soon(StdioServer(LocalBackend(server), server_end, server_end).serve)
    client = Client(client_end)
    await client.call(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    with trio.fail_after(20):
        assert (await client.call(1, "resources/subscribe", {"uri": DOCUMENT})) == {"jsonrpc": "2.0", "id": 1,
                                                                                      "result": {}}
    started = await kernel.call_tool("mcp_everything_toggle_subscriber_updates", {})
    assert "Started simulated resource updated notifications" in started.text, started.text
    try:
        with trio.fail_after(15):
            message = await client.receive()
            while message.get("method") != "notifications/resources/updated":
                message = await client.receive()
        assert message["params"] == {"uri": DOCUMENT}
    finally:
        await kernel.call_tool("mcp_everything_toggle_subscriber_updates", {})  # stop everything's timer
        await kernel.mcp.aclose()


async def test_everything_subscriptions_stdio(npm, node, nursery, tmp_path):
    await check_updates(nursery, tmp_path, stdio_entry(node, npm["server-everything"], "stdio", name="everything"))


async def test_everything_subscriptions_streamable_http(npm, node, nursery, tmp_path):
    async with isolated_server([node, npm["server-everything"], "streamableHttp"], 3001,
                               env={"PORT": "3001"}) as base:
        entry = McpServerEntry(name="everything", transport=HttpTransport(url=f"{base}/mcp"), timeout_secs=20)
        await check_updates(nursery, tmp_path, entry)

