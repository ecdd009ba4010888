"""/mcp and MCP tasks by key: the scope ``mcp``; an HTTP session is its key's (another key
presenting its id finds no session); a conversation and an MCP task are their owner's."""

from __future__ import annotations

import pytest

from runtime.a2a.server.engine import TaskNotFound
from runtime.a2a.server.mcp_tasks import McpTaskBridge
from runtime.config.keys import ADMIN, Caller
from runtime.kernel.conversations import Conversations
from tests.http.keyed import client, start
from tests.mcp.server_harness import initialize, request

BOTH = "application/json, text/event-stream"


@pytest.fixture
async def served(nursery, tmp_path):
    return await start(nursery, tmp_path)


async def _session(who) -> dict[str, str]:
    opened = await who.post("/mcp", json=initialize(1), headers={"Accept": BOTH})
    assert opened.status_code == 200, opened.text
    return {"Accept": "application/json", "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-11-25"}


async def test_an_mcp_session_and_its_conversations_are_its_keys(served):
    node, url = served
    await node.kernel.conversations.append("ctx-a", Conversations.message("user", "echo", "a's"), owner="only-mcp")
    async with client(url, "only-mcp") as a, client(url, "mcp-b") as b, client(url, "alice") as alice:
        assert (await alice.post("/mcp", json=initialize(1), headers={"Accept": BOTH})).status_code == 403
        headers = await _session(a)
        call = request(2, "tools/call", {"name": "tern_agent_echo", "arguments": {"message": "hi"}})
        answered = await a.post("/mcp", json=call, headers=headers)
        assert answered.json()["result"]["structuredContent"]["reply"] == "hi"
        stolen = await b.post("/mcp", json=call, headers=headers)  # b presents a's session id
        assert stolen.status_code == 404 and "Session not found" in stolen.text
        assert (await b.delete("/mcp", headers=headers)).status_code == 404
        assert (await a.post("/mcp", json=call, headers=headers)).status_code == 200  # a's session is still a's
        resume = request(3, "tools/call", {"name": "tern_agent_echo",
                                           "arguments": {"message": "go on", "context_id": "ctx-a"}})
        b_headers = await _session(b)
        refused = (await b.post("/mcp", json=resume, headers=b_headers)).json()["result"]
        assert refused["isError"] is True and "no conversation has the id 'ctx-a'" in refused["content"][0]["text"]
        mine = (await a.post("/mcp", json=resume, headers=headers)).json()["result"]
        assert mine["isError"] is False and mine["structuredContent"]["context_id"] == "ctx-a"


async def test_mcp_tasks_are_their_owners(served):
    node, _ = served
    bridge = McpTaskBridge(node.a2a)
    alice, bob = Caller("alice", frozenset({"mcp"})), Caller("bob", frozenset({"mcp"}))
    started = await bridge.start("echo", "hello", caller="mcp:http:127.0.0.1", who=alice)
    assert (await bridge.view(started.id, alice)).id == started.id
    assert (await bridge.view(started.id, ADMIN)).id == started.id
    with pytest.raises(TaskNotFound) as theirs:
        await bridge.view(started.id, bob)
    with pytest.raises(TaskNotFound) as never:
        await bridge.view("never-was", bob)
    assert str(theirs.value).replace(started.id, "ID") == str(never.value).replace("never-was", "ID")
    with pytest.raises(TaskNotFound):
        await bridge.cancel(started.id, bob)
    assert (await node.a2a.engine.find(started.id)).owner == "alice"
