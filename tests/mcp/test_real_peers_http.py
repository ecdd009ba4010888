"""The MCP client over Streamable HTTP and legacy HTTP+SSE against real servers:
the official Python SDK server (both eras) on 127.0.0.1, and server-everything in
its ``streamableHttp`` and ``sse`` modes, isolated in a loopback-only namespace."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
import trio

from runtime.config import HttpTransport, McpServerEntry, SseTransport
from runtime.errors import ConfigError, ConnectionLost, RpcError, TernTimeout
from runtime.mcp.client.client import McpClient
from runtime.net.guard import AddressPolicy, BlockedAddress
from tests.mcp.conftest import SDK_SERVER
from tests.netns import isolated_server


def http_entry(url, *, name="remote", kind="http", protocol="auto", timeout_secs=10.0, headers=None):
    transport = (HttpTransport if kind == "http" else SseTransport)(url=url, headers=headers or {})
    return McpServerEntry(name=name, transport=transport, protocol=protocol, timeout_secs=timeout_secs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sdk_http(sdk_python: str, port: int) -> subprocess.Popen:
    process = subprocess.Popen([sdk_python, SDK_SERVER, "http", str(port)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("the SDK HTTP server exited")
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the SDK HTTP server did not start")


@pytest.fixture
def sdk_http(sdk_python):
    port = free_port()
    process = start_sdk_http(sdk_python, port)
    yield f"http://127.0.0.1:{port}/mcp", port
    process.kill()
    process.wait()


@pytest.mark.parametrize("protocol, era, version", [
    ("auto", "modern", "2026-07-28"),
    ("2026-07-28", "modern", "2026-07-28"),
    ("2025-11-25", "handshake", "2025-11-25"),
    ("2025-06-18", "handshake", "2025-06-18"),
    ("2024-11-05", "handshake", "2024-11-05"),
])
async def test_python_sdk_streamable_http(sdk_http, nursery, protocol, era, version):
    url, _ = sdk_http
    client = await McpClient.connect(http_entry(url, protocol=protocol), nursery)
    assert (client.info.era, client.info.version) == (era, version)
    transport = client.session.transport
    assert (transport.connection.session_id is not None) == (era == "handshake")
    tools = {t.name for t in await client.list_tools()}
    assert {"add", "shout", "slow"} <= tools
    result = await client.call_tool("add", {"a": 20, "b": 22})  # modern: Mcp-Method and Mcp-Name checked
    assert result.text() == "42" and result.structured_content == {"result": 42}
    assert (await client.call_tool("shout", {"text": "hé"})).text() == "HÉ"
    assert (await client.call_tool("add", {"a": "x"})).is_error
    with pytest.raises(RpcError):
        await client.session.request("no/such/method", {})
    await client.aclose()


@pytest.mark.parametrize("protocol", ["auto", "2025-11-25"])
async def test_http_concurrency_and_timeout(sdk_http, nursery, protocol):
    url, _ = sdk_http
    client = await McpClient.connect(http_entry(url, protocol=protocol), nursery)
    results = []

    async def one(i):
        results.append((await client.call_tool("slow", {"seconds": 0.3})).text())

    start = trio.current_time()
    async with trio.open_nursery() as calls:
        for i in range(30):
            calls.start_soon(one, i)
    # A real server process, so real time: one after another, 30 x 0.3 s take 9 s; the
    # bound is half that, loose enough for a loaded machine.
    assert len(results) == 30 and trio.current_time() - start < 4.5
    with trio.fail_after(3):
        with pytest.raises(TernTimeout, match="did not answer tools/call within 0.3 s"):
            await client.call_tool("slow", {"seconds": 10}, timeout_secs=0.3)
    assert (await client.call_tool("add", {"a": 1, "b": 1})).text() == "2"  # still serving
    await client.aclose()


async def test_http_session_expiry_reinitializes(sdk_python, nursery):
    """A restarted server forgets the session: 404, then one transparent re-initialize."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    process = start_sdk_http(sdk_python, port)
    try:
        client = await McpClient.connect(http_entry(url, protocol="2025-11-25"), nursery)
        first_session = client.session.transport.connection.session_id
        assert (await client.call_tool("add", {"a": 1, "b": 2})).text() == "3"
        process.kill()
        process.wait()
        process = start_sdk_http(sdk_python, port)
        assert (await client.call_tool("add", {"a": 2, "b": 2})).text() == "4"
        assert client.session.transport.connection.session_id not in (None, first_session)
        await client.aclose()
    finally:
        process.kill()
        process.wait()


async def test_http_server_death_fails_inflight_calls_at_once(sdk_python, nursery):
    port = free_port()
    process = start_sdk_http(sdk_python, port)
    client = await McpClient.connect(http_entry(f"http://127.0.0.1:{port}/mcp", timeout_secs=30), nursery)
    errors = []

    async def call():
        try:
            await client.call_tool("slow", {"seconds": 20})
        except (RpcError, ConnectionLost) as exc:
            errors.append(exc)

    with trio.fail_after(5):  # not the 30 s timeout
        async with trio.open_nursery() as calls:
            calls.start_soon(call)
            await trio.sleep(0.5)
            process.kill()
            process.wait()
    assert errors and "127.0.0.1" in str(errors[0])
    await client.aclose()


async def test_ssrf_guard_blocks_metadata_and_policy(sdk_http, nursery):
    with trio.fail_after(3):
        with pytest.raises(BlockedAddress, match="169.254.169.254"):
            await McpClient.connect(http_entry("http://169.254.169.254/mcp"), nursery)
        with pytest.raises(BlockedAddress, match="metadata"):
            await McpClient.connect(http_entry("http://metadata.google.internal/mcp", kind="sse"), nursery)
    url, _ = sdk_http
    with pytest.raises((BlockedAddress, ConnectionLost, RpcError), match="loopback"):
        await McpClient.connect(http_entry(url.replace("127.0.0.1", "localhost")), nursery,
                                policy=AddressPolicy(block_loopback=True))


async def test_header_variables_must_be_set(nursery, monkeypatch):
    monkeypatch.delenv("TERN_TEST_TOKEN", raising=False)
    entry = http_entry("http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer ${TERN_TEST_TOKEN}"})
    with pytest.raises(ConfigError, match=r"needs \$\{TERN_TEST_TOKEN\}"):
        await McpClient.connect(entry, nursery)


# --- server-everything over HTTP (binds every interface: isolated) -----------------------


async def test_server_everything_streamable_http(npm, node, nursery, tmp_path):
    async with isolated_server([node, npm["server-everything"], "streamableHttp"], 3001,
                               env={"PORT": "3001"}) as base:
        client = await McpClient.connect(http_entry(f"{base}/mcp", name="everything"), nursery,
                                         roots=[str(tmp_path)])
        assert client.info.era == "handshake"  # discover refused at once, then initialize
        assert client.session.transport.connection.session_id
        tools = {t.name for t in await client.list_tools()}
        assert {"echo", "get-sum", "trigger-long-running-operation", "get-roots-list"} <= tools
        assert (await client.call_tool("echo", {"message": "over http"})).text() == "Echo: over http"
        progress = []
        result = await client.call_tool("trigger-long-running-operation", {"duration": 1, "steps": 3},
                                        on_progress=progress.append)
        assert not result.is_error and len(progress) >= 2  # notifications on the SSE stream
        image = await client.call_tool("get-tiny-image")
        assert any(item["type"] == "image" for item in image.content)
        links = await client.call_tool("get-resource-links", {"count": 2})
        assert any(item["type"] == "resource_link" for item in links.content)
        with trio.fail_after(5):  # the server asked roots/list on a stream; tern answered by POST
            while tmp_path.name not in (await client.call_tool("get-roots-list")).text():
                await trio.sleep(0.1)
        await client.aclose()


async def test_server_everything_legacy_sse(npm, node, nursery):
    async with isolated_server([node, npm["server-everything"], "sse"], 3001, env={"PORT": "3001"}) as base:
        client = await McpClient.connect(http_entry(f"{base}/sse", name="everything", kind="sse"), nursery)
        assert client.info.era == "handshake"
        assert "/message" in client.session.transport.endpoint
        tools = {t.name for t in await client.list_tools()}
        assert "echo" in tools
        results = []

        async def echo(i):
            results.append((await client.call_tool("echo", {"message": str(i)})).text())

        async with trio.open_nursery() as calls:
            for i in range(10):
                calls.start_soon(echo, i)
        assert sorted(results) == sorted(f"Echo: {i}" for i in range(10))
        await client.aclose()


@pytest.mark.parametrize("protocol", ["auto", "2025-11-25"])
async def test_a_tool_added_at_run_time_reaches_the_tool_list(sdk_http, nursery, protocol):
    """The SDK server adds a tool and says so: on the ``subscriptions/listen`` stream the
    client holds open (2026-07-28), or on the session's GET stream (handshake era); either
    way the supervisor lists the tools again and the new one is callable."""
    from runtime.mcp.client.supervisor import McpSupervisor

    url, _ = sdk_http
    supervisor = McpSupervisor([http_entry(url, protocol=protocol)])
    await nursery.start(supervisor.run)
    await supervisor.wait_settled(20)
    assert supervisor.status("remote").state == "ready", supervisor.status("remote").last_error
    assert supervisor.tool("mcp_remote_late") is None
    assert (await supervisor.call("mcp_remote_grow", {"name": "late"})).text() == "added late"
    with trio.fail_after(10):
        while supervisor.tool("mcp_remote_late") is None:
            await trio.sleep(0.05)
    assert (await supervisor.call("mcp_remote_late", {"text": "hi"})).text() == "hi"
    await supervisor.aclose()
