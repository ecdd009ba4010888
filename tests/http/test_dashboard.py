"""The dashboard's serving over real HTTP: the page and its files with their security
headers, path hardening, the Host/Origin checks, the asset budget, and the events
WebSocket's key offered as a subprotocol (as a browser must)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import HandshakeError, open_websocket_url

from runtime.host.dashboard_routes import CSP, MAX_ASSET_BYTES
from tests.http.test_api import KEY, config, start

DASHBOARD = Path(__file__).resolve().parents[2] / "runtime" / "host" / "dashboard"


def assert_hardened(response: httpx.Response) -> None:
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["cache-control"] == "no-cache"


def test_assets_fit_the_budget_and_hold_no_inline_script():
    files = [path for path in DASHBOARD.iterdir() if path.is_file()]
    assert any(path.name == "index.html" for path in files)
    assert sum(path.stat().st_size for path in files) <= MAX_ASSET_BYTES
    page = (DASHBOARD / "index.html").read_text()
    assert "<style" not in page and " style=" not in page and " onclick=" not in page
    assert "<script>" not in page  # scripts only from files (src=...), as the CSP demands


async def test_page_and_files_are_served_with_strict_headers(nursery):
    kernel, server, url = await start(nursery, config(), key=KEY)  # no key needed to load the page
    async with httpx.AsyncClient(base_url=url) as client:
        page = await client.get("/")
        assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.content == (DASHBOARD / "index.html").read_bytes()
        assert_hardened(page)
        same = await client.get("/ui/index.html")
        assert same.content == page.content and same.headers["etag"] == page.headers["etag"]
        cached = await client.get("/", headers={"If-None-Match": page.headers["etag"]})
        assert cached.status_code == 304 and cached.content == b""
        assert_hardened(cached)
        head = await client.head("/")
        assert head.status_code == 200 and head.content == b""
        for path in DASHBOARD.iterdir():
            answer = await client.get(f"/ui/{path.name}")
            assert answer.status_code == 200 and answer.content == path.read_bytes(), path.name
            kind = {"js": "text/javascript", "css": "text/css", "svg": "image/svg+xml", "html": "text/html"}
            assert answer.headers["content-type"].startswith(kind[path.suffix[1:]])
        api = await client.get("/api/status", headers={"Authorization": f"Bearer {KEY}"})
        assert api.headers["x-content-type-options"] == "nosniff" and api.headers["x-frame-options"] == "DENY"
        assert "content-security-policy" not in api.headers
    server.shutdown()


@pytest.mark.parametrize("path", ["/ui/", "/ui/missing.js", "/ui/..%2Fapi.py", "/ui/%2e%2e%2fapi.py",
                                  "/ui/../host/api.py", "/ui/dashboard_routes.py", "/ui/..", "/ui/.",
                                  "/ui/%2e%2e", "/ui/sub/index.html", "/ui/index.html%00.js",
                                  "/ui/%2Fetc%2Fpasswd", "/ui/..%5c..%5capi.py", "/index.html"])
async def test_only_the_folders_files_are_served(nursery, path):
    kernel, server, url = await start(nursery, config())
    port = int(url.rsplit(":", 1)[1])
    stream = await trio.open_tcp_stream("127.0.0.1", port)  # the path as written: a client would normalise it
    await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    answer = b""
    with trio.fail_after(5):
        while chunk := await stream.receive_some(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 404 "), (path, answer[:100])
    assert b"import" not in answer and b"root:" not in answer
    server.shutdown()


async def test_host_and_origin_checks_apply_to_the_page(nursery):
    kernel, server, url = await start(nursery, config())
    async with httpx.AsyncClient(base_url=url) as client:
        rebound = await client.get("/", headers={"Host": "evil.example"})
        assert rebound.status_code == 403 and "loopback name" in rebound.json()["error"]["message"]
        assert (await client.get("/ui/index.html", headers={"Host": "evil.example:80"})).status_code == 403
        assert (await client.get("/", headers={"Origin": "http://evil.example"})).status_code == 403
        assert (await client.get("/", headers={"Host": "localhost:1"})).status_code == 200
    server.shutdown()


def key_protocol(key: str) -> str:
    return "tern.key." + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


async def test_events_take_the_key_as_a_subprotocol(nursery):
    kernel, server, url = await start(nursery, config(), key=KEY)
    ws = url.replace("http", "ws") + "/api/events"
    async with open_websocket_url(ws, subprotocols=["tern.events", key_protocol(KEY)]) as socket:
        assert socket.subprotocol == "tern.events"  # selected; the key is never echoed
        assert json.loads(await socket.get_message())["type"] == "hello"
    for offered in (["tern.events", key_protocol("wrong")], ["tern.events"], ["tern.events", "tern.key.!!!"],
                    ["tern.events", "tern.key."], ["tern.events", key_protocol(KEY.upper())]):
        with pytest.raises(HandshakeError) as refused:
            async with open_websocket_url(ws, subprotocols=offered):
                pass
        assert refused.value.status_code == 401 and KEY.encode() not in refused.value.body
    async with httpx.AsyncClient(base_url=url) as client:  # a plain request cannot use that route to the key
        plain = await client.get("/api/status", headers={"Sec-WebSocket-Protocol": key_protocol(KEY)})
        assert plain.status_code == 401
    server.shutdown()


async def test_events_without_a_key_on_loopback_select_the_subprotocol(nursery):
    kernel, server, url = await start(nursery, config())  # no key: the peer's uid is ours
    async with open_websocket_url(url.replace("http", "ws") + "/api/events", subprotocols=["tern.events"]) as socket:
        assert socket.subprotocol == "tern.events"
        assert json.loads(await socket.get_message())["type"] == "hello"
    async with open_websocket_url(url.replace("http", "ws") + "/api/events") as socket:  # tern events: none
        assert socket.subprotocol is None
    server.shutdown()


@pytest.mark.pyz
def test_served_from_the_built_pyz(pyz: Path, tmp_path: Path):
    """The files come out of the zip (importlib.resources through tern's code-cache importer)."""
    import subprocess
    import sys

    from tests.test_build_pyz import clean_env
    from tests.test_daemon import write_config

    env = clean_env(tmp_path / "cache", tmp_path)
    process = subprocess.Popen([sys.executable, str(pyz), "serve", "--config", write_config(tmp_path)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=tmp_path)
    try:
        line = ""
        for _ in range(200):
            line = process.stderr.readline()
            if "serving on " in line or not line:
                break
        assert "serving on " in line, line
        url = line.split("serving on ", 1)[1].strip()
        for path in DASHBOARD.iterdir():
            answer = httpx.get(f"{url}/ui/{path.name}", timeout=10)
            assert answer.status_code == 200 and answer.content == path.read_bytes(), path.name
        page = httpx.get(url + "/", timeout=10)
        assert page.content == (DASHBOARD / "index.html").read_bytes()
        assert_hardened(page)
        assert httpx.get(url + "/ui/api.py", timeout=10).status_code == 404
    finally:
        process.kill()
        process.wait()


async def test_events_check_the_origin_and_never_log_the_key(nursery, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    kernel, server, url = await start(nursery, config(), key=KEY)
    ws = url.replace("http", "ws") + "/api/events"
    offered = ["tern.events", key_protocol(KEY)]
    with pytest.raises(HandshakeError) as refused:  # a page elsewhere, with the key it somehow holds
        async with open_websocket_url(ws, subprotocols=offered, extra_headers=[(b"origin", b"http://evil.example")]):
            pass
    assert refused.value.status_code == 403
    async with open_websocket_url(ws, subprotocols=offered, extra_headers=[(b"origin", url.encode())]) as socket:
        assert json.loads(await socket.get_message())["type"] == "hello"
    with pytest.raises(HandshakeError):
        async with open_websocket_url(ws, subprotocols=["tern.events", key_protocol("not-the-key")]):
            pass
    assert KEY not in caplog.text and key_protocol(KEY) not in caplog.text
    server.shutdown()


@pytest.mark.parametrize("key", ["", KEY])
async def test_events_from_a_remote_client(nursery, monkeypatch, key):
    """Tests listen on loopback only: the server is made to believe its client is remote.
    Without a key nobody remote gets in, subprotocol or not; with one, the subprotocol key does."""
    from runtime.httpd import server as server_module

    monkeypatch.setattr(server_module, "is_loopback", lambda host: False)
    kernel, server, url = await start(nursery, config(), key=key)
    ws = url.replace("http", "ws") + "/api/events"
    if not key:
        with pytest.raises(HandshakeError) as refused:
            async with open_websocket_url(ws, subprotocols=["tern.events", key_protocol("anything")]):
                pass
        assert refused.value.status_code == 403
    else:
        async with open_websocket_url(ws, subprotocols=["tern.events", key_protocol(KEY)]) as socket:
            assert socket.subprotocol == "tern.events"
        with pytest.raises(HandshakeError) as refused:
            async with open_websocket_url(ws, subprotocols=["tern.events"]):
                pass
        assert refused.value.status_code == 401
    server.shutdown()
