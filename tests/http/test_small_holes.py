"""Smaller holes from the attack on tern, each driven through the public surface:
request smuggling framing, /api/events without an upgrade, the agent card's URL on a
wildcard listener, short API keys, LLM replies read whole, and REST agent calls that
ran on after their client left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import trio

from runtime.config import A2aConfig, AgentConfig, Config, ServerConfig, StateConfig
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.metrics import Metrics
from runtime.httpd.server import HttpServer
from tests.http.serving import RawClient, assert_healthy, start_server
from tests.test_cli import ROOT


async def _serve(nursery, cfg: Config, access: Access | None = None) -> tuple[Node, HttpServer, int]:
    node = Node(cfg)
    await nursery.start(node.run)
    server = HttpServer(cfg.server, build_router(node, metrics=Metrics()), access or Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    return node, server, bound[0][1]


# --- Content-Length with Transfer-Encoding ---------------------------------------------------


async def test_content_length_with_transfer_encoding_is_400_and_closed(nursery):
    """The smuggling shape: h11 reads the chunked body (empty), and the "body" by
    Content-Length would have been the next request. Before: answered, kept open."""
    with trio.fail_after(10):
        served = await start_server(nursery)
        client = await RawClient.connect(served.port)
        smuggled = b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        await client.send(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s"
                          % (len(smuggled) + 5, smuggled))
        response = await client.response(b"POST")
        assert response is not None and response.status == 400, response
        assert await client.closed()  # and the smuggled request was never answered
        await client.aclose()
        await assert_healthy(served.server, served.port)


# --- /api/events without an upgrade -----------------------------------------------------------


async def test_events_without_upgrade_is_426(nursery):
    _, server, port = await _serve(nursery, Config())
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        response = await client.get("/api/events")
        assert response.status_code == 426, response.text
        assert response.headers["upgrade"] == "websocket"
        bad = await client.get("/api/events", headers={"upgrade": "websocket", "connection": "upgrade"})
        assert bad.status_code == 400, bad.text  # no Sec-WebSocket-Key: refused, not a 500
        assert (await client.get("/health")).status_code == 200
    server.shutdown()


# --- The agent card's URL on a wildcard listener -----------------------------------------------


async def test_card_url_on_a_wildcard_listener_ignores_a_foreign_host_header(nursery):
    cfg = Config(server=ServerConfig(allowed_hosts=["tern.example"]), a2a=A2aConfig(enabled=True),
                 agents=[AgentConfig(name="echo", kind="echo")])
    node, server, port = await _serve(nursery, cfg, Access("", loopback_listener=False))
    node.http_bound = ("0.0.0.0", port)  # what the daemon records when it listens on every address
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        evil = (await client.get("/.well-known/agent-card.json", headers={"host": "evil.example"})).json()
        assert "evil.example" not in json.dumps(evil)
        assert "0.0.0.0" not in json.dumps(evil)
        vetted = (await client.get("/.well-known/agent-card.json", headers={"host": "tern.example:8443"})).json()
        assert vetted["url"].startswith("http://tern.example:8443/")
        local = (await client.get("/.well-known/agent-card.json", headers={"host": f"localhost:{port}"})).json()
        assert local["url"].startswith(f"http://localhost:{port}/")
    server.shutdown()


# --- Short API keys -------------------------------------------------------------------------


def test_config_check_warns_about_a_short_key(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\napi_key = "k"\n[state]\ndir = "{tmp_path / "state"}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "runtime", "config", "check", str(path)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "1 characters long; use at least 16" in done.stderr
    path.write_text(f'[server]\napi_key = "{"k" * 16}"\n[state]\ndir = "{tmp_path / "state"}"\n')
    done = subprocess.run([sys.executable, "-m", "runtime", "config", "check", str(path)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0 and "use at least" not in done.stderr


def test_serve_warns_about_a_short_key(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\napi_key = "k"\n[state]\ndir = "{tmp_path / "state"}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--config", str(path)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=env)
    try:
        lines = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            lines.append(line)
            if "serving on" in line or not line:
                break
        text = "".join(lines)
        assert "1 characters long; use at least 16" in text, text
        assert '"k"' not in text
    finally:
        process.terminate()
        process.wait(10)


# --- An LLM reply is bounded while it is read -------------------------------------------------


async def test_an_llm_reply_is_bounded_while_read(monkeypatch):
    from runtime.config import ModelConfig
    from runtime.kernel import llm

    monkeypatch.setattr(llm, "MAX_REPLY_BYTES", 64 * 1024)
    sent = 0

    async def endless():
        nonlocal sent
        while sent < 64 * 1024 * 1024:  # bounded even if the client never stopped reading
            sent += 16384
            yield b"x" * 16384

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, content=endless())

    client = llm.ChatClient(ModelConfig(base_url="http://127.0.0.1:9/v1", model="m"),
                            client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    with pytest.raises(llm.LlmError, match="too large"):
        await client.complete([{"role": "user", "content": "hi"}], [])
    assert sent <= 64 * 1024 + 16384  # stopped at the bound, not after reading it all


# --- A REST agent call ends when its client goes away -------------------------------------------


async def test_rest_agent_call_is_cancelled_when_the_client_disconnects(nursery, tmp_path):
    pid_file = tmp_path / "pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    cfg = Config(state=StateConfig(dir=str(tmp_path / "state")),
                 agents=[AgentConfig(name="sleeper", kind="command", command=[sys.executable, "-c", script])])
    _, server, port = await _serve(nursery, cfg)
    with trio.fail_after(30):
        client = await RawClient.connect(port)
        body = b'{"message":"hi"}'
        await client.send(b"POST /api/agents/sleeper/message HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        while not (pid_file.exists() and pid_file.read_text()):
            await trio.sleep(0.05)
        pid = int(pid_file.read_text())
        await client.aclose()
        gone_by = trio.current_time() + 10
        while _alive(pid):
            assert trio.current_time() < gone_by, "the agent's process outlived its client by 10 s"
            await trio.sleep(0.05)
        audit = Path(tmp_path / "state" / "audit.jsonl")
        while not (audit.exists() and '"cancelled"' in audit.read_text()):
            await trio.sleep(0.05)
        records = [json.loads(line) for line in audit.read_text().splitlines()]
        assert any(r.get("kind") == "agent_message" and r.get("outcome") == "cancelled" for r in records)
    server.shutdown()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
