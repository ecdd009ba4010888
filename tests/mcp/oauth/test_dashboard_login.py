"""``POST /api/mcp/servers/{name}/login`` on a real ``tern serve`` (in this process)
against the MCP server built from the official Python SDK's auth components: the
server waits in ``needs_auth``, the dashboard's request answers the authorization URL
(a second request the same URL: one login at a time), the "browser" follows it one hop
to tern's loopback listener, and the server comes back ``ready`` with its tools."""

from __future__ import annotations

import json

import httpx
import trio
from trio_websocket import open_websocket_url

from runtime.config import load_config
from runtime.host.daemon import serve
from tests.mcp.oauth.test_sdk_server import follow, oauth_server, stats, write_config  # noqa: F401 (a fixture)


async def server_state(client: httpx.AsyncClient, state: str) -> dict:
    with trio.fail_after(20):
        while True:
            (server,) = (await client.get("/api/status")).json()["mcp_servers"]
            if server["state"] == state:
                return server
            await trio.sleep(0.05)


async def test_login_from_the_dashboard_revives_the_server(oauth_server, tmp_path, nursery):  # noqa: F811
    base = oauth_server()
    path = write_config(tmp_path, f"{base}/mcp")
    path.write_text('[server]\nlisten = "127.0.0.1:0"\n' + path.read_text())
    url = await nursery.start(lambda task_status: serve(load_config(str(path)).config, config_path=path,
                                                        task_status=task_status))
    async with httpx.AsyncClient(base_url=url, timeout=20) as client, \
            open_websocket_url(url.replace("http", "ws") + "/api/events") as events:
        waiting = await server_state(client, "needs_auth")
        assert "tern auth login sdk" in waiting["last_error"]
        answer = await client.post("/api/mcp/servers/sdk/login")
        assert answer.status_code == 200, answer.text
        authorization_url = answer.json()["authorization_url"]
        assert authorization_url.startswith(f"{base}/authorize?") and "code_challenge=" in authorization_url
        again = await client.post("/api/mcp/servers/sdk/login")
        assert again.json()["authorization_url"] == authorization_url  # the login in progress, not a second one
        callback = await trio.to_thread.run_sync(follow, authorization_url)
        assert callback.startswith("http://127.0.0.1:") and "/callback?" in callback
        forged = callback.replace("state=", "state=x")
        async with httpx.AsyncClient() as browser:
            refused = await browser.get(forged)  # not this login's: refused, and the login keeps waiting
            assert refused.status_code == 400
            page = await browser.get(callback)
        assert page.status_code == 200 and "Logged in" in page.text
        await server_state(client, "ready")
        tools = (await client.get("/api/tools")).json()["tools"]
        assert any(t["name"] == "mcp_sdk_add" for t in tools)
        with trio.fail_after(10):
            while True:
                event = json.loads(await events.get_message())
                if event["type"] == "mcp.login":
                    break
        assert event == {**event, "server": "sdk", "outcome": "ok"}
    assert stats(base)["authorization_code"] == 1
