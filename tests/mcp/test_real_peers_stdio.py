"""The MCP client over stdio against real servers: the npm reference servers and a
server built on the official Python SDK, in both protocol eras."""

import pytest

from runtime.mcp.client.client import McpClient
from tests.mcp.conftest import SDK_SERVER, stdio_entry


@pytest.mark.parametrize("protocol", ["auto", "2025-11-25", "2025-06-18", "2024-11-05"])
async def test_server_everything(npm, node, nursery, protocol):
    entry = stdio_entry(node, npm["server-everything"], "stdio", name="everything", protocol=protocol)
    client = await McpClient.connect(entry, nursery)
    expected = "2025-11-25" if protocol == "auto" else protocol
    assert (client.info.era, client.info.version) == ("handshake", expected)
    tools = {t.name: t for t in await client.list_tools()}
    assert {"echo", "get-sum", "get-structured-content"} <= set(tools)
    assert (await client.call_tool("echo", {"message": "hi"})).text() == "Echo: hi"
    total = await client.call_tool("get-sum", {"a": 2, "b": 40})
    assert "42" in total.text() and not total.is_error
    await client.aclose()


async def test_server_everything_tool_error_and_images(npm, node, nursery):
    client = await McpClient.connect(stdio_entry(node, npm["server-everything"], "stdio"), nursery)
    tools = {t.name for t in await client.list_tools()}
    if "get-tiny-image" in tools:
        image = await client.call_tool("get-tiny-image")
        assert any(item["type"] == "image" for item in image.content)
        assert "[image: image/png" in image.text()
    bad = await client.call_tool("get-sum", {"a": "not a number"})
    assert bad.is_error  # SDK servers report bad input as a tool error
    await client.aclose()


async def test_server_filesystem(npm, node, nursery, tmp_path):
    (tmp_path / "note.txt").write_text("from the filesystem server")
    entry = stdio_entry(node, npm["server-filesystem"], str(tmp_path), name="fs")
    client = await McpClient.connect(entry, nursery, roots=[str(tmp_path)])
    tools = {t.name for t in await client.list_tools()}
    assert {"read_text_file", "list_directory"} <= tools or {"read_file", "list_directory"} <= tools
    read = "read_text_file" if "read_text_file" in tools else "read_file"
    result = await client.call_tool(read, {"path": str(tmp_path / "note.txt")})
    assert "from the filesystem server" in result.text()
    outside = await client.call_tool(read, {"path": "/etc/passwd"})
    assert outside.is_error
    await client.aclose()


async def test_server_memory(npm, node, nursery, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_FILE_PATH", str(tmp_path / "memory.jsonl"))
    entry = stdio_entry(node, npm["server-memory"], name="memory", env=["MEMORY_FILE_PATH"])
    client = await McpClient.connect(entry, nursery)
    tools = {t.name for t in await client.list_tools()}
    assert "create_entities" in tools and "read_graph" in tools
    await client.call_tool("create_entities", {"entities": [
        {"name": "tern", "entityType": "runtime", "observations": ["ships as one file"]}]})
    graph = await client.call_tool("read_graph")
    assert "ships as one file" in graph.text()
    await client.aclose()
    assert "tern" in (tmp_path / "memory.jsonl").read_text()


@pytest.mark.parametrize("protocol, era, version", [
    ("auto", "modern", "2026-07-28"),
    ("2026-07-28", "modern", "2026-07-28"),
    ("2025-11-25", "handshake", "2025-11-25"),
    ("2025-03-26", "handshake", "2025-03-26"),
])
async def test_python_sdk_server(sdk_python, nursery, protocol, era, version):
    client = await McpClient.connect(stdio_entry(sdk_python, SDK_SERVER, name="sdk", protocol=protocol), nursery)
    assert (client.info.era, client.info.version) == (era, version)
    tools = {t.name: t for t in await client.list_tools()}
    assert {"add", "shout"} <= set(tools)
    assert tools["add"].input_schema["required"] == ["a", "b"]
    result = await client.call_tool("add", {"a": 2, "b": 3})
    assert result.text() == "5" and result.structured_content == {"result": 5}
    assert (await client.call_tool("shout", {"text": "hé"})).text() == "HÉ"
    bad = await client.call_tool("add", {"a": "x"})
    assert bad.is_error
    await client.aclose()


async def test_a_real_servers_annotations_drive_the_approval_policy(npm, node, nursery, tmp_path):
    """The npm filesystem server annotates write_file destructive and list_directory
    read-only: through the kernel, the first waits for a person, the second runs at once."""
    import trio

    from runtime.config import Config, StateConfig
    from runtime.kernel.kernel import Kernel

    entry = stdio_entry(node, npm["server-filesystem"], str(tmp_path), name="fs")
    kernel = Kernel(Config(mcp_servers=[entry], state=StateConfig(dir=str(tmp_path / "state"))))
    await nursery.start(kernel.run)
    with trio.fail_after(30):
        await kernel.mcp.wait_settled()
    write = kernel.registry.get("mcp_fs_write_file")
    assert write is not None and write.annotations["destructiveHint"] is True
    listed = await kernel.call_tool("mcp_fs_list_directory", {"path": str(tmp_path)})
    assert not listed.is_error and await kernel.approvals.list() == []
    results = []

    async def write_note() -> None:
        results.append(await kernel.call_tool("mcp_fs_write_file", {"path": str(tmp_path / "w.txt"), "content": "ok"}))

    nursery.start_soon(write_note)
    with trio.fail_after(10):
        while not (pending := await kernel.approvals.list()):
            await trio.sleep(0.01)
    assert pending[0].tool == "mcp_fs_write_file" and not (tmp_path / "w.txt").exists()
    await kernel.approvals.decide(pending[0].id, True, channel="test")
    with trio.fail_after(10):
        while not results:
            await trio.sleep(0.01)
    assert not results[0].is_error and (tmp_path / "w.txt").read_text() == "ok"
