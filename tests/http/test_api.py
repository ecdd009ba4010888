"""The daemon's API over real HTTP: routes, the OpenAPI document, auth, metrics and
the WebSocket event stream, with a kernel connected to a (fake) stdio MCP server."""

from __future__ import annotations

import json
import sys

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from runtime.config import Config, McpServerEntry, ServerConfig, StdioTransport
from runtime.httpd.access import Access
from runtime.host.api import build_router
from runtime.httpd.metrics import Metrics
from runtime.host.openapi import document
from runtime.wire.ratelimit import RateLimiter
from runtime.httpd.server import HttpServer
from runtime.host.node import Node
from tests.mcp.conftest import FAKE

KEY = "s3cret-key-for-tests"


def config(**server) -> Config:
    fake = McpServerEntry(name="fake", transport=StdioTransport(command=sys.executable, args=[FAKE]))
    return Config(server=ServerConfig(**server), mcp_servers=[fake])


async def start(nursery, cfg: Config, key: str = ""):
    node = Node(cfg)
    kernel = node.kernel
    metrics = Metrics()
    kernel.tool_observers.append(metrics.observe_tool_call)
    await nursery.start(kernel.run)
    server = HttpServer(cfg.server, build_router(node, metrics=metrics), Access(key), metrics=metrics,
                        limiter=RateLimiter(cfg.server.rate_limit_per_sec, cfg.server.rate_limit_burst))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    await kernel.mcp.wait_settled()
    return kernel, server, f"http://127.0.0.1:{bound[0][1]}"


@pytest.mark.parametrize("a2a", [False, True], ids=["no-a2a", "a2a"])
def test_openapi_names_exactly_the_routes(a2a):
    from runtime.config import A2aConfig, AgentConfig

    cfg = config()
    if a2a:
        cfg = Config(server=cfg.server, mcp_servers=cfg.mcp_servers, a2a=A2aConfig(enabled=True),
                     agents=[AgentConfig(name="echo", kind="echo")])
    router = build_router(Node(cfg), metrics=Metrics())
    doc = document(a2a_path=cfg.a2a.listen_path if a2a else None)
    served = {(r.method.lower(), r.path) for r in router.routes}
    described = {(method, path) for path, item in doc["paths"].items() for method in item}
    assert served == described
    for route in router.routes:  # public in the document means public in the router, and back
        public = doc["paths"][route.path][route.method.lower()].get("security") == []
        assert public == (not route.auth)


async def test_api_routes(nursery):
    kernel, server, url = await start(nursery, config())
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/health")).json() == {"status": "ok"}
        status = (await client.get("/api/status")).json()
        assert status["mcp_servers"][0]["state"] == "ready" and status["mcp_server_states"] == {"ready": 1}
        tools = {t["name"]: t for t in (await client.get("/api/tools")).json()["tools"]}
        assert tools["mcp_fake_echo"]["server"] == "fake" and tools["time_now"]["source"] == "builtin"
        servers = (await client.get("/api/mcp/servers")).json()
        assert servers["configured"][0]["name"] == "fake" and servers["connected"][0]["tools_count"] == 9
        echo = await client.post("/api/echo", content=b'{"x": [1, 2, 3]}')
        assert echo.json() == {"x": [1, 2, 3]}
        bad = await client.post("/api/echo", content=b"{nope")
        assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
        assert (await client.post("/api/agents/ghost/message", json={"message": "hi"})).status_code == 404
        missing = await client.post("/api/agents/ghost/message", json={"text": "hi"})
        assert missing.status_code == 400 and "unknown field `text`" in missing.json()["error"]["message"]
        assert (await client.get("/api/openapi.json")).json()["openapi"] == "3.1.0"
        wrong = await client.delete("/api/status")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, HEAD"
        head = await client.head("/api/status")
        assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) > 10
        await kernel.call_tool("mcp_fake_echo", {"message": "counted"})
        metrics = (await client.get("/metrics")).text
        assert 'tern_http_requests_total{route="/api/status",method="GET",status="200"} 1' in metrics
        assert 'tern_tool_calls_total{tool="mcp_fake_echo",outcome="ok"} 1' in metrics
        assert 'tern_mcp_server_up{server="fake",state="ready"} 1' not in metrics  # gauge wired by the daemon
    server.shutdown()


async def test_api_key_is_required_except_for_health(nursery):
    kernel, server, url = await start(nursery, config(), key=KEY)
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/health")).status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"},
                        {"X-API-Key": KEY.upper()}, {"Authorization": f"Token {KEY}"}):
            response = await client.get("/api/status", headers=headers)
            assert response.status_code == 401, headers
            assert KEY not in response.text
        query = await client.get(f"/api/status?api_key={KEY}", headers={"Authorization": f"Bearer {KEY}"})
        assert query.status_code == 401 and "query string" in query.json()["error"]["message"]
        assert (await client.get("/api/status", headers={"Authorization": f"Bearer {KEY}"})).status_code == 200
        assert (await client.get("/api/status", headers={"X-API-Key": KEY})).status_code == 200
        assert (await client.get("/api/status", headers={"Authorization": f"bearer {KEY}"})).status_code == 200
        assert (await client.get("/metrics")).status_code == 401
    server.shutdown()


async def test_host_and_origin_checks(nursery):
    kernel, server, url = await start(nursery, config())
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/api/status", headers={"Host": "localhost:1"})).status_code == 200
        rebound = await client.get("/api/status", headers={"Host": "evil.example"})
        assert rebound.status_code == 403 and "loopback name" in rebound.json()["error"]["message"]
        origin = await client.get("/api/status", headers={"Origin": "http://evil.example"})
        assert origin.status_code == 403
        same = await client.get("/api/status", headers={"Origin": url})
        assert same.status_code == 200
        assert (await client.get("/health", headers={"Host": "evil.example"})).status_code == 200
    server.shutdown()


async def test_cors_allowlist(nursery):
    kernel, server, url = await start(nursery, config())
    server.access.cors_origins = {"https://app.example"}
    async with httpx.AsyncClient(base_url=url) as client:
        allowed = await client.get("/api/status", headers={"Origin": "https://app.example"})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        assert (await client.get("/api/status", headers={"Origin": "https://other.example"})).status_code == 403
    server.shutdown()


async def test_events_websocket_streams_kernel_events(nursery):
    kernel, server, url = await start(nursery, config())
    async with open_websocket_url(url.replace("http", "ws") + "/api/events") as socket:
        hello = json.loads(await socket.get_message())
        assert hello["type"] == "hello"
        await kernel.call_tool("mcp_fake_echo", {"message": "x"})
        with trio.fail_after(3):
            event = json.loads(await socket.get_message())
        assert event["type"] == "tool.call" and event["tool"] == "mcp_fake_echo" and event["outcome"] == "ok"
        crashed = await kernel.call_tool("mcp_fake_crash")  # the server dies: a state change follows
        assert crashed.is_error and "exited with code 9" in crashed.text
        with trio.fail_after(5):
            while True:
                event = json.loads(await socket.get_message())
                if event["type"] == "mcp.server" and event["state"] == "restarting" and event["last_error"]:
                    break
        assert "exited with code 9" in event["last_error"]
    server.shutdown()
    with trio.fail_after(5):
        await server.wait_stopped()


async def test_events_need_the_key(nursery):
    from trio_websocket import HandshakeError

    kernel, server, url = await start(nursery, config(), key=KEY)
    with pytest.raises(HandshakeError):
        async with open_websocket_url(url.replace("http", "ws") + "/api/events"):
            pass
    headers = [(b"authorization", f"Bearer {KEY}".encode())]
    async with open_websocket_url(url.replace("http", "ws") + "/api/events", extra_headers=headers) as socket:
        assert json.loads(await socket.get_message())["type"] == "hello"
    server.shutdown()


async def test_wrong_content_type_is_415(nursery):
    kernel, server, url = await start(nursery, config())
    async with httpx.AsyncClient(base_url=url) as client:
        wrong = await client.post("/api/echo", content=b'{"a": 1}', headers={"Content-Type": "text/plain"})
        assert wrong.status_code == 415 and "application/json" in wrong.json()["error"]["message"]
        ok = await client.post("/api/echo", content=b'{"a": 1}',
                               headers={"Content-Type": "application/json; charset=utf-8"})
        assert ok.json() == {"a": 1}
    server.shutdown()


async def test_tls(nursery, tmp_path):
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    from runtime.host.daemon import _ssl_context

    cfg = config(tls_cert=str(cert), tls_key=str(key))
    node = Node(cfg)
    await nursery.start(node.run)
    server = HttpServer(cfg.server, build_router(node), Access(""), ssl_context=_ssl_context(cfg))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    trusted = ssl.create_default_context(cafile=str(cert))
    async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{bound[0][1]}", verify=trusted) as client:
        assert (await client.get("/health")).json() == {"status": "ok"}
        assert (await client.get("/api/status")).status_code == 200
    with trio.fail_after(5):  # a client that never does its TLS handshake is dropped, the server goes on
        plain = await trio.open_tcp_stream("127.0.0.1", bound[0][1])
        await plain.send_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = await plain.receive_some(100)
        except trio.BrokenResourceError:
            answer = b""
        assert not answer.startswith(b"HTTP/")  # no plaintext answer on the TLS port: a TLS alert, or closed
        await plain.aclose()
    async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{bound[0][1]}", verify=trusted) as client:
        assert (await client.get("/health")).status_code == 200
    server.shutdown()
