"""Stdio MCP servers in the per-server sandbox (``sandbox``, ``network``, ``writable``,
``readable`` in ``[mcp_servers.transport]``): the npm reference servers pass their tool
calls inside it, under bubblewrap and under Landlock with bwrap gone from PATH; a server
that writes outside what it may is denied, and the error says what was denied."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.config import McpServerEntry, StdioTransport
from runtime.mcp.client.client import McpClient
from runtime.net import sandbox
from tests.kernel.test_tools_shell import bwrap_problem, path_without_bwrap

pytestmark = pytest.mark.skipif(not os.sys.platform.startswith("linux"), reason="bubblewrap and Landlock are Linux")


@pytest.fixture(params=["bubblewrap", "landlock"])
def kind(request, tmp_path, monkeypatch):
    sandbox.probe.cache_clear()
    if request.param == "bubblewrap":
        if bwrap_problem() is not None:
            pytest.skip(bwrap_problem())
    else:
        if sandbox.probe("landlock") is not None:
            pytest.skip(sandbox.probe("landlock"))
        monkeypatch.setenv("PATH", path_without_bwrap(tmp_path))
        sandbox.probe.cache_clear()
    assert sandbox.choose("auto") == (request.param, "")
    yield request.param
    sandbox.probe.cache_clear()


def npm_root(npm: dict[str, str]) -> str:
    """The node_modules tree the three servers (and their dependencies) live in."""
    path = Path(npm["server-everything"])
    while path.name != "node_modules":
        path = path.parent
    return str(path)


def boxed(command, *args, name="boxed", cwd="", writable=(), readable=(), network=True, env=()):
    return McpServerEntry(name=name, timeout_secs=20.0, env=list(env),
                          transport=StdioTransport(command=command, args=list(args), cwd=cwd, sandbox="auto",
                                                   network=network, writable=list(writable),
                                                   readable=list(readable)))


async def test_server_everything_in_the_sandbox(kind, npm, node, nursery, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    entry = boxed(node, npm["server-everything"], "stdio", cwd=str(work), readable=[npm_root(npm)], network=False)
    client = await McpClient.connect(entry, nursery)
    assert (await client.call_tool("echo", {"message": "hi"})).text() == "Echo: hi"
    assert "42" in (await client.call_tool("get-sum", {"a": 2, "b": 40})).text()
    await client.aclose()


async def test_server_filesystem_in_the_sandbox_writes_only_where_it_may(kind, npm, node, nursery, tmp_path):
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("s3cr3t")
    # the server itself is told both directories are its own; the sandbox allows only its cwd
    entry = boxed(node, npm["server-filesystem"], str(data), str(outside), cwd=str(data), readable=[npm_root(npm)])
    client = await McpClient.connect(entry, nursery, roots=[str(data), str(outside)])
    tools = {t.name for t in await client.list_tools()}
    read = "read_text_file" if "read_text_file" in tools else "read_file"
    written = await client.call_tool("write_file", {"path": str(data / "note.txt"), "content": "inside"})
    assert not written.is_error and (data / "note.txt").read_text() == "inside"
    assert "inside" in (await client.call_tool(read, {"path": str(data / "note.txt")})).text()
    denied = await client.call_tool("write_file", {"path": str(outside / "pwned.txt"), "content": "x"})
    assert denied.is_error and not (outside / "pwned.txt").exists()
    stolen = await client.call_tool(read, {"path": str(outside / "secret.txt")})
    assert "s3cr3t" not in stolen.text()
    if kind == "landlock":  # bubblewrap hides the directory (ENOENT); Landlock refuses it
        assert "EACCES" in denied.text() or "denied" in denied.text().lower(), denied.text()
    await client.aclose()


async def test_server_memory_in_the_sandbox(kind, npm, node, nursery, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("MEMORY_FILE_PATH", str(work / "memory.jsonl"))
    entry = boxed(node, npm["server-memory"], cwd=str(work), readable=[npm_root(npm)], env=["MEMORY_FILE_PATH"])
    client = await McpClient.connect(entry, nursery)
    await client.call_tool("create_entities", {"entities": [
        {"name": "tern", "entityType": "runtime", "observations": ["boxed"]}]})
    assert "boxed" in (await client.call_tool("read_graph")).text()
    await client.aclose()
    assert "tern" in (work / "memory.jsonl").read_text()


async def test_a_server_that_writes_outside_at_start_is_denied_and_says_what(kind, nursery, tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    entry = boxed("sh", "-c", f"echo x > {outside}/state.json && exec cat", cwd=str(work))
    with pytest.raises(Exception) as failed:
        await McpClient.connect(entry, nursery)
    said = str(failed.value)
    assert not (outside / "state.json").exists()
    assert f"sandbox denied: cannot create {outside}/state.json" in said, said
    assert "writable" in said


async def test_without_a_sandbox_an_auto_server_is_not_started(nursery, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_without_bwrap(tmp_path))
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    sandbox.probe.cache_clear()
    try:
        with pytest.raises(Exception) as failed:
            await McpClient.connect(boxed("sh", "-c", "touch ran; exec cat", cwd=str(tmp_path)), nursery)
        assert 'sandbox = "auto" but this host gives no sandbox' in str(failed.value)
        assert not (tmp_path / "ran").exists()
    finally:
        sandbox.probe.cache_clear()
