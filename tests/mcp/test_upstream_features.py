"""Upstream MCP servers' resources and prompts reached through the pipeline tools
(``mcp_resources_list``, ``mcp_resource_read``, ``mcp_prompts_list``, ``mcp_prompt_get``)
against real servers: server-everything on stdio and over Streamable HTTP (in a
loopback-only network namespace), and the official Python SDK server (2026-07-28).
Agents reach a server's resources and prompts only as far as their tools globs and the
server's include/exclude globs allow; what comes back is bounded and tainted."""

from __future__ import annotations

import trio

from runtime.config import AgentConfig, Config, HttpTransport, McpServerEntry, StateConfig
from runtime.kernel.pipeline import Run
from tests.mcp.conftest import SDK_SERVER, stdio_entry
from tests.netns import isolated_server

FEATURES = ["mcp_resources_list", "mcp_resource_read", "mcp_prompts_list", "mcp_prompt_get"]


async def booted(nursery, tmp_path, *servers: McpServerEntry, agents=()):
    from runtime.kernel.kernel import Kernel

    kernel = Kernel(Config(mcp_servers=list(servers), agents=list(agents),
                           state=StateConfig(dir=str(tmp_path / "state"))))
    await nursery.start(kernel.run)
    with trio.fail_after(60):
        await kernel.mcp.wait_settled()
    for server in servers:
        assert kernel.mcp.status(server.name).state == "ready", kernel.mcp.status(server.name).last_error
    return kernel


async def check_everything(kernel, server: str) -> None:
    listed = await kernel.call_tool("mcp_resources_list", {"server": server})
    assert not listed.is_error, listed.text
    assert "demo://resource/static/document/architecture.md" in listed.text
    read = await kernel.call_tool("mcp_resource_read", {"server": server,
                                                        "uri": "demo://resource/static/document/architecture.md"})
    assert not read.is_error and "Architecture" in read.text
    prompts = await kernel.call_tool("mcp_prompts_list", {"server": server})
    assert "args-prompt (city*, state)" in prompts.text
    prompt = await kernel.call_tool("mcp_prompt_get", {"server": server, "name": "args-prompt",
                                                       "arguments": {"city": "Lisbon"}})
    assert not prompt.is_error and prompt.text.startswith("user: ") and "Lisbon" in prompt.text
    missing = await kernel.call_tool("mcp_resource_read", {"server": server, "uri": "demo://no/such/thing"})
    assert missing.is_error


async def test_server_everything_stdio(npm, node, nursery, tmp_path):
    entry = stdio_entry(node, npm["server-everything"], "stdio", name="everything")
    await check_everything(await booted(nursery, tmp_path, entry), "everything")


async def test_server_everything_streamable_http(npm, node, nursery, tmp_path):
    async with isolated_server([node, npm["server-everything"], "streamableHttp"], 3001,
                               env={"PORT": "3001"}) as base:
        entry = McpServerEntry(name="everything", transport=HttpTransport(url=f"{base}/mcp"), timeout_secs=20)
        kernel = await booted(nursery, tmp_path, entry)
        await check_everything(kernel, "everything")
        await kernel.mcp.aclose()


async def test_python_sdk_server_and_the_allowlists(sdk_python, nursery, tmp_path):
    sdk = stdio_entry(sdk_python, SDK_SERVER, name="sdk", timeout_secs=20)
    closed = stdio_entry(sdk_python, SDK_SERVER, name="closed", timeout_secs=20)
    closed = McpServerEntry(name="closed", transport=closed.transport, tools_exclude=["prompts"])
    reader = AgentConfig(name="reader", kind="echo", tools=[*FEATURES, "mcp_sdk_*"])
    stranger = AgentConfig(name="stranger", kind="echo", tools=[*FEATURES, "mcp_other_*"])
    kernel = await booted(nursery, tmp_path, sdk, closed, agents=[reader, stranger])
    assert kernel.mcp.status("sdk").era == "modern"

    as_reader = Run(reader)
    listed = await kernel.pipeline.call("mcp_resources_list", {"server": "sdk"}, run=as_reader)
    assert "note://greeting greeting (text/plain) - A short note." in listed.text
    assert listed.structured == [{"uri": "note://greeting", "name": "greeting", "description": "A short note.",
                                  "mimeType": "text/plain"}]
    read = await kernel.pipeline.call("mcp_resource_read", {"server": "sdk", "uri": "note://greeting"}, run=as_reader)
    assert read.text == "hello from the SDK server"
    assert as_reader.taint.find({"text": "hello from the SDK server"}) is not None  # untrusted from here on
    prompt = await kernel.pipeline.call("mcp_prompt_get", {"server": "sdk", "name": "review",
                                                           "arguments": {"language": "Go"}}, run=as_reader)
    assert prompt.text == "user: Please review this Go code."

    refused = await kernel.pipeline.call("mcp_resource_read", {"server": "sdk", "uri": "note://greeting"},
                                         run=Run(stranger))
    assert refused.is_error and "mcp_sdk_resources" in refused.text
    not_allowed = await kernel.pipeline.call("mcp_prompts_list", {"server": "closed"})
    assert not_allowed.is_error and "does not allow its prompts" in not_allowed.text
    assert not (await kernel.pipeline.call("mcp_resources_list", {"server": "closed"})).is_error
    unknown = await kernel.pipeline.call("mcp_resources_list", {"server": "nope"})
    assert unknown.is_error and "no MCP server is called 'nope'" in unknown.text
    bad = await kernel.pipeline.call("mcp_resource_read", {"server": "sdk"})  # no uri: the schema refuses it
    assert bad.is_error
    await kernel.mcp.aclose()
