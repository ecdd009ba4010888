"""The MCP server's dispatcher in-process: an llm agent's streamed text as progress,
pagination, and the preset and allowlist rules, without a transport in the way."""

from __future__ import annotations

import pytest
import trio

from runtime.config import (AgentConfig, Config, McpPreset, McpServerExposure, ModelConfig, StateConfig,
                            parse_config)
from runtime.errors import RpcError
from runtime.kernel.kernel import Kernel
from runtime.mcp.client.session import McpSession
from runtime.mcp.client.connection import McpConnection
from runtime.mcp.server.dispatch import McpServer, Peer
from runtime.wire import jsonrpc
from tests.scripted_llm import ScriptedLLM, sse, text_chunk


def call(msg_id, name, arguments, token=None):
    params = {"name": name, "arguments": arguments}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return jsonrpc.Request(msg_id, "tools/call", params)


def _ports(kernel: Kernel):
    """The ports the composition root hands the MCP server: the pipeline and the event bus."""
    return kernel.pipeline, kernel.events


async def ready(server: McpServer) -> Peer:
    peer = Peer("mcp:test")
    init = jsonrpc.Request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    assert isinstance(await server.handle(init, peer, None), jsonrpc.Response)
    return peer


async def test_llm_agent_text_streams_as_progress(nursery, tmp_path):
    llm = ScriptedLLM(sse(text_chunk("Thinking"), text_chunk(" about it"), text_chunk(": done.")))
    await nursery.start(llm.serve)
    agent = AgentConfig(name="bot", kind="llm", model=ModelConfig(base_url=llm.url, model="m", timeout_secs=5))
    kernel = Kernel(Config(agents=[agent], state=StateConfig(dir=str(tmp_path))))
    server = McpServer(kernel.config, kernel.pipeline, kernel.events)
    peer = await ready(server)
    sent = []

    async def notify(notification):
        sent.append(notification)

    reply = await server.handle(call(1, "tern_agent_bot", {"message": "hi"}, token="t"), peer, notify)
    assert reply.result["content"][0]["text"] == "Thinking about it: done."
    progress = [n["params"] for n in sent if n["method"] == "notifications/progress"]
    assert progress[0]["message"] == "started" and len(progress) >= 2
    assert [p["progress"] for p in progress] == list(range(1, len(progress) + 1))
    assert "done." in progress[-1]["message"]  # coalesced: the latest text wins


async def test_pagination_walks_every_tool_once(tmp_path):
    agents = [AgentConfig(name=f"a{i}", kind="echo") for i in range(5)]
    config = Config(agents=agents, mcp_server=McpServerExposure(page_size=2, tools=["time_*"]),
                    state=StateConfig(dir=str(tmp_path)))
    server = McpServer(config, *_ports(Kernel(config)))
    peer = await ready(server)
    names, cursor, pages = [], None, 0
    while True:
        params = {"cursor": cursor} if cursor else {}
        result = (await server.handle(jsonrpc.Request(pages + 1, "tools/list", params), peer, None)).result
        names += [t["name"] for t in result["tools"]]
        pages += 1
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert names == [f"tern_agent_a{i}" for i in range(5)] + ["time_now"] and pages == 3
    for bad in ("", "e30=", "eyJvIjotMX0=", 7):  # empty, {}, {"o":-1}, a number
        error = await server.handle(jsonrpc.Request(9, "tools/list", {"cursor": bad}), peer, None)
        assert error.error.code == -32602


async def test_the_allowlist_matches_normalised_names(tmp_path):
    """``[mcp_server] tools`` globs match casefolded, with - and _ the same."""
    config = Config(mcp_server=McpServerExposure(tools=["TIME-*"]), state=StateConfig(dir=str(tmp_path)))
    server = McpServer(config, *_ports(Kernel(config)))
    peer = await ready(server)
    result = (await server.handle(jsonrpc.Request(1, "tools/list", {}), peer, None)).result
    assert [t["name"] for t in result["tools"]] == ["time_now"]
    assert result["tools"][0]["annotations"] == {"readOnlyHint": True, "openWorldHint": False}  # tern's own hints
    reply = await server.handle(jsonrpc.Request(2, "tools/call", {"name": "time_now", "arguments": {}}), peer, None)
    assert reply.result["isError"] is False


async def test_presets_and_the_allowlist(tmp_path):
    config = Config(agents=[AgentConfig(name="echo", kind="echo")], state=StateConfig(dir=str(tmp_path)),
                    mcp_server=McpServerExposure(presets=[
                        McpPreset(name="clock", tool="time_now"),
                        McpPreset(name="hello", tool="tern_agent_echo", arguments={"message": "hello"})]))
    server = McpServer(config, *_ports(Kernel(config)))
    peer = await ready(server)
    listed = (await server.handle(jsonrpc.Request(1, "tools/list", {}), peer, None)).result["tools"]
    assert [t["name"] for t in listed] == ["tern_agent_echo", "clock", "hello"]
    assert (await server.handle(call(2, "hello", {}), peer, None)).result["content"][0]["text"] == "hello"
    assert not (await server.handle(call(3, "clock", {}), peer, None)).result["isError"]
    # time_now is reachable only through its preset: by its own name it is not exposed
    assert (await server.handle(call(4, "time_now", {}), peer, None)).error.code == -32602
    assert (
        await server.handle(call(5, "agent_send", {"agent": "echo", "message": "x"}), peer, None)
    ).error.code == -32602


def test_config_check_catches_exposure_mistakes(tmp_path):
    import pytest

    from runtime.errors import ConfigError

    agents = '[[agents]]\nname = "a-b"\nkind = "echo"\n'
    for extra, expected in [
        ('[[agents]]\nname = "a_b"\nkind = "echo"\n', 'two exposed tools would be named "tern_agent_a_b"'),
        ('[[mcp_server.presets]]\nname = "bad name!"\ntool = "time_now"\n', "mcp_server.presets[0].name"),
        (
            '[[mcp_server.presets]]\nname = "p"\ntool = "tern_agent_nobody"\n',
            'no agent is exposed as "tern_agent_nobody"',
        ),
        ('[[mcp_server.presets]]\nname = "tern_agent_a_b"\ntool = "time_now"\n', "two exposed tools"),
        ("[mcp_server]\nmax_sessions = 0\n", "mcp_server.max_sessions"),
    ]:
        with pytest.raises(ConfigError) as caught:
            parse_config(agents + extra, "test", tmp_path)
        assert expected in str(caught.value)
    assert parse_config(agents + '[[mcp_server.presets]]\nname = "p"\ntool = "tern_agent_a_b"\n', "t", tmp_path)


class _InMemory:
    """A client transport wired straight to a server's ``handle``: no framing, no I/O."""

    def __init__(self, server: McpServer) -> None:
        self.connection = McpConnection("initialize")  # the handshake era only, as legacy SSE
        self.server, self.peer, self.wire = server, Peer("mcp:memory"), []
        self.send_replies, self.replies = trio.open_memory_channel(16)

    async def start(self, nursery) -> None:
        pass

    async def send(self, message) -> None:
        reply = await self.server.handle(jsonrpc.parse(jsonrpc.encode(message)), self.peer, None)
        if reply is not None:
            self.wire.append(jsonrpc.encode(reply))
            await self.send_replies.send(self.wire[-1])

    async def receive(self) -> bytes:
        return await self.replies.receive()

    async def aclose(self) -> None:
        pass


async def test_a_handler_error_is_an_rpc_error_end_to_end(nursery, tmp_path):
    config = Config(agents=[AgentConfig(name="bot", kind="echo")], state=StateConfig(dir=str(tmp_path)))
    server = McpServer(config, *_ports(Kernel(config)))
    with pytest.raises(RpcError) as raised:  # the server side raises the one carrier of JSON-RPC errors
        await server.exposure.call("nope", {}, caller="test")
    assert raised.value.code == jsonrpc.INVALID_PARAMS

    transport = _InMemory(server)
    session = McpSession(transport, name="self", timeout_secs=5)
    await nursery.start(session.run)
    await session.open("2025-11-25")
    with pytest.raises(RpcError) as answered:  # and tern's client raises it for the error answer
        await session.request("tools/call", {"name": "nope", "arguments": {}})
    assert (answered.value.code, answered.value.message, answered.value.data) == (
        jsonrpc.INVALID_PARAMS,
        "Unknown tool: nope",
        None,
    )
    assert b'"data"' not in transport.wire[-1]  # no data: the member is left out, not null
