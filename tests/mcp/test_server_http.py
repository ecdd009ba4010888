"""``POST /mcp`` on the daemon's HTTP server, over real HTTP: sessions, both eras' header
rules and status codes, JSON and SSE answers, progress on the stream, a client that
disconnects mid-call, the key, Host and Origin."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
import trio

from runtime.config import load_config
from runtime.httpd.access import Access
from runtime.host.api import build_router
from runtime.httpd.server import HttpServer
from runtime.host.node import Node
from tests.mcp.server_harness import META, MODERN, initialize, request, write_config

BOTH = "application/json, text/event-stream"
KEY = "mcp-test-key-1234"


async def start(nursery, tmp_path, *, mcp_server: str = 'tools = ["time_now"]', key: str = ""):
    config = load_config(str(write_config(tmp_path, mcp_server=mcp_server))).config
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(key))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    return f"http://127.0.0.1:{bound[0][1]}/mcp"


def sse_messages(text: str) -> list[dict]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]


def modern_headers(method: str, name: str = "", accept: str = BOTH) -> dict:
    headers = {"Accept": accept, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name:
        headers["Mcp-Name"] = name
    return headers


def call(msg_id, name, arguments, meta=None):
    params = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return request(msg_id, "tools/call", params)


@pytest.fixture
async def mcp_url(nursery, tmp_path):
    return await start(nursery, tmp_path)


async def open_session(client, url, version="2025-11-25"):
    response = await client.post(url, json=initialize(1, version), headers={"Accept": BOTH})
    assert response.status_code == 200
    session = response.headers["mcp-session-id"]
    assert len(session) >= 32
    headers = {"Accept": BOTH, "Mcp-Session-Id": session, "MCP-Protocol-Version": version}
    assert (await client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                              headers=headers)).status_code == 202
    return headers


async def test_handshake_session_lifecycle(mcp_url):
    async with httpx.AsyncClient() as client:
        first = await client.post(mcp_url, json=initialize(1), headers={"Accept": "application/json"})
        assert first.json()["result"]["protocolVersion"] == "2025-11-25"
        headers = await open_session(client, mcp_url)
        listed = await client.post(mcp_url, json=request(2, "tools/list"), headers=headers)
        assert listed.headers["content-type"].startswith("application/json")
        assert [t["name"] for t in listed.json()["result"]["tools"]][:2] == ["tern_agent_echo", "tern_agent_slow_poke"]
        called = await client.post(mcp_url, json=call(3, "tern_agent_echo", {"message": "hi"}), headers=headers)
        assert called.headers["content-type"].startswith("text/event-stream")  # a call may notify first
        assert sse_messages(called.text)[-1]["result"]["structuredContent"]["reply"] == "hi"
        json_only = await client.post(mcp_url, json=call(4, "tern_agent_echo", {"message": "j"}),
                                      headers={**headers, "Accept": "application/json"})
        assert json_only.json()["result"]["content"][0]["text"] == "j"
        assert (await client.post(mcp_url, json={"jsonrpc": "2.0", "id": 99, "result": {}},
                                  headers=headers)).status_code == 202  # a response from the client
        assert (await client.post(mcp_url, json=request(5, "ping"), headers=headers)).json()["result"] == {}
        no_session = await client.post(mcp_url, json=request(6, "tools/list"), headers={"Accept": BOTH})
        assert no_session.status_code == 400 and no_session.json()["error"]["code"] == -32600
        unknown = await client.post(mcp_url, json=request(7, "tools/list"),
                                    headers={**headers, "Mcp-Session-Id": "not-a-session"})
        assert unknown.status_code == 404
        bad_version = await client.post(mcp_url, json=request(8, "tools/list"),
                                        headers={**headers, "MCP-Protocol-Version": "1999-01-01"})
        assert bad_version.status_code == 400
        assert (await client.delete(mcp_url, headers=headers)).status_code == 200
        gone = await client.post(mcp_url, json=request(9, "tools/list"), headers=headers)
        assert gone.status_code == 404
        assert (await client.delete(mcp_url, headers=headers)).status_code == 404


async def test_get_stream_and_method_rules(mcp_url):
    async with httpx.AsyncClient() as client:
        assert (await client.get(mcp_url, headers={"Accept": "text/event-stream"})).status_code == 405
        headers = await open_session(client, mcp_url)
        async with client.stream("GET", mcp_url, headers={**headers, "Accept": "text/event-stream"}) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"] == "text/event-stream"
        modern_get = await client.get(mcp_url, headers={"MCP-Protocol-Version": MODERN})
        assert modern_get.status_code == 405
        assert (await client.request("PUT", mcp_url)).status_code == 405


async def test_bad_requests(mcp_url):
    async with httpx.AsyncClient() as client:
        html = await client.post(mcp_url, json=initialize(1), headers={"Accept": "text/html"})
        assert html.status_code == 406
        text = await client.post(mcp_url, content=b"{}", headers={"Accept": BOTH, "Content-Type": "text/plain"})
        assert text.status_code == 415
        garbage = await client.post(
            mcp_url, content=b"{nope", headers={"Accept": BOTH, "Content-Type": "application/json"}
        )
        assert garbage.status_code == 400 and garbage.json()["error"]["code"] == -32700
        batch = await client.post(mcp_url, json=[initialize(1)], headers={"Accept": BOTH})
        assert batch.status_code == 400 and batch.json()["error"]["code"] == -32600
        assert (await client.post(mcp_url, json=initialize(2), headers={"Accept": BOTH})).status_code == 200


async def test_modern_era_headers_and_statuses(mcp_url):
    async with httpx.AsyncClient() as client:

        async def post(body, headers):
            return await client.post(mcp_url, json=body, headers=headers)

        ok = await post(
            call(1, "tern_agent_echo", {"message": "m"}, META), modern_headers("tools/call", "tern_agent_echo")
        )
        assert ok.status_code == 200 and "mcp-session-id" not in ok.headers
        assert sse_messages(ok.text)[-1]["result"]["resultType"] == "complete"
        as_json = await post(
            call(2, "tern_agent_echo", {"message": "m"}, META),
            modern_headers("tools/call", "tern_agent_echo", accept="application/json"),
        )
        assert as_json.json()["result"]["content"][0]["text"] == "m"
        encoded = "=?base64?" + base64.b64encode(b"tern_agent_echo").decode() + "?="
        assert (
            await post(call(3, "tern_agent_echo", {"message": "b"}, META), modern_headers("tools/call", encoded))
        ).status_code == 200
        discover = await post(request(4, "server/discover", {"_meta": META}), modern_headers("server/discover"))
        assert discover.json()["result"]["supportedVersions"][0] == MODERN

        async def error(body, headers, status, code):
            response = await post(body, headers)
            assert response.status_code == status, response.text
            assert response.json()["error"]["code"] == code
            return response.json()["error"]

        await error(
            call(5, "tern_agent_echo", {"message": "m"}, META), modern_headers("tools/call", "other_tool"), 400, -32020
        )
        await error(call(6, "tern_agent_echo", {"message": "m"}, META), modern_headers("tools/list"), 400, -32020)
        await error(call(7, "tern_agent_echo", {"message": "m"}, META), modern_headers("tools/call"), 400, -32020)
        await error(
            call(8, "tern_agent_echo", {"message": "m"}, META),
            {**modern_headers("tools/call", "tern_agent_echo"), "MCP-Protocol-Version": "2025-11-25"},
            400,
            -32020,
        )
        await error(
            call(9, "tern_agent_echo", {"message": "m"}), modern_headers("tools/call", "tern_agent_echo"), 400, -32602
        )
        await error(request(10, "no/such_method", {"_meta": META}), modern_headers("no/such_method"), 404, -32601)
        old = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
        data = (
            await error(
                request(11, "tools/list", {"_meta": old}),
                {**modern_headers("tools/list"), "MCP-Protocol-Version": "2099-01-01"},
                400,
                -32022,
            )
        )["data"]
        assert data == {"supported": [MODERN], "requested": "2099-01-01"}
        unknown_tool = await post(call(12, "nope", {}, META), modern_headers("tools/call", "nope"))
        assert sse_messages(unknown_tool.text)[-1]["error"]["code"] == -32602


async def test_progress_on_the_sse_stream(mcp_url):
    async with httpx.AsyncClient() as client:
        headers = await open_session(client, mcp_url)
        response = await client.post(
            mcp_url, json=call(2, "tern_agent_counter", {"message": ""}, {"progressToken": "t"}), headers=headers
        )
        messages = sse_messages(response.text)
        progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
        assert len(progress) >= 3 and progress == sorted(set(progress))
        assert messages[-1]["id"] == 2 and "step 4" in messages[-1]["result"]["content"][0]["text"]


async def test_a_client_that_disconnects_cancels_its_call(nursery, tmp_path):
    url = await start(nursery, tmp_path)
    async with httpx.AsyncClient() as client:
        async with client.stream(
            "POST",
            url,
            json=call(1, "tern_agent_slow_poke", {"message": ""}, {**META, "progressToken": 1}),
            headers=modern_headers("tools/call", "tern_agent_slow_poke"),
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    break  # the "started" progress: the call is running; now go away
    audit = tmp_path / "state" / "audit.jsonl"
    with trio.fail_after(5):
        while not (audit.exists() and '"outcome":"cancelled"' in audit.read_text()):
            await trio.sleep(0.05)
    record = [json.loads(line) for line in audit.read_text().splitlines() if '"agent_message"' in line][-1]
    assert record["agent"] == "slow-poke" and record["outcome"] == "cancelled" and record["ms"] < 5000


async def test_notifications_cancelled_over_http(mcp_url):
    async with httpx.AsyncClient(timeout=10) as client:
        headers = await open_session(client, mcp_url)
        async with trio.open_nursery() as nursery:
            answers = []

            async def slow():
                answers.append(
                    await client.post(
                        mcp_url,
                        json=call(2, "tern_agent_slow_poke", {"message": ""}),
                        headers={**headers, "Accept": "application/json"},
                    )
                )

            nursery.start_soon(slow)
            # A cancel before the call is in flight cancels nothing (and the agent sleeps
            # 30 s): rather than guess when it is, cancel every 0.1 s until it answers.
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}
            with trio.fail_after(10):
                while not answers:
                    assert (await client.post(mcp_url, json=cancel, headers=headers)).status_code == 202
                    await trio.sleep(0.1)
        assert answers[0].status_code == 202 and answers[0].content == b""  # cancelled: no JSON-RPC answer


async def test_sessions_are_bounded_and_expire(nursery, tmp_path):
    url = await start(nursery, tmp_path, mcp_server="max_sessions = 2\nsession_idle_secs = 0.5")
    async with httpx.AsyncClient() as client:
        first = await open_session(client, url)
        second = await open_session(client, url)
        await client.post(url, json=request(2, "ping"), headers=first)  # first is now the most recent
        third = await open_session(client, url)  # evicts the least recently used: second
        assert (await client.post(url, json=request(3, "ping"), headers=second)).status_code == 404
        assert (await client.post(url, json=request(4, "ping"), headers=first)).status_code == 200
        await trio.sleep(0.7)
        assert (await client.post(url, json=request(5, "ping"), headers=third)).status_code == 404


async def test_key_host_and_origin(nursery, tmp_path):
    url = await start(nursery, tmp_path, key=KEY)
    async with httpx.AsyncClient() as client:
        assert (await client.post(url, json=initialize(1), headers={"Accept": BOTH})).status_code == 401
        auth = {"Accept": BOTH, "Authorization": f"Bearer {KEY}"}
        assert (await client.post(url, json=initialize(1), headers=auth)).status_code == 200
        evil_origin = await client.post(url, json=initialize(1), headers={**auth, "Origin": "http://evil.example"})
        assert evil_origin.status_code == 403
        rebinding = await client.post(url, json=initialize(1), headers={**auth, "Host": "evil.example"})
        assert rebinding.status_code == 403


async def test_disabled_mcp_server_has_no_route(nursery, tmp_path):
    url = await start(nursery, tmp_path, mcp_server="enabled = false")
    async with httpx.AsyncClient() as client:
        assert (await client.post(url, json=initialize(1), headers={"Accept": BOTH})).status_code == 404
