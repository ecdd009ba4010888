"""The audit trail, ids and secrets against hostile callers and peers, through the
daemon's public surface (a real HTTP server on 127.0.0.1, the real routes):

- a 9 MB id (context, task, message, push config) or name is refused with a clear
  error naming the bound, over the HTTP API, MCP (POST /mcp) and every A2A binding,
  and cannot flush today's audit records away;
- caller-chosen push tokens never become log secrets (``ERROR`` does not mask ERROR;
  80 tokens of 5 MB are refused and do not grow the secret set);
- a tool that cannot parse its input (``web_fetch("http://①②⑦.0.0.1/")``) is a tool
  error with an audit record, not a 500;
- an unwritable audit log is visible in /health and /api/status, and with
  ``audit_required`` tool calls are refused until it recovers;
- a hostile A2A peer echoing the Authorization header tern sent cannot get the token
  into a tool result.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from runtime import log as tern_log
from runtime.config import (A2aConfig, AgentConfig, Config, ExternalAgent, McpServerExposure, SecurityConfig,
                            ServerConfig, StateConfig)
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer

MAX_ID_CHARS = 256  # runtime.wire.limits.MAX_ID_CHARS, written out: this file must import on old code too
HUGE = "c" * (9 * 1024 * 1024)  # nine of these rotated a day of records away
PEER = Path(__file__).parent.parent / "fixtures" / "echo_headers_a2a_peer.py"
V10 = {"A2A-Version": "1.0"}
BOTH = "application/json, text/event-stream"


def make_config(tmp_path: Path, **security) -> Config:
    agents = [AgentConfig(name="echo", kind="echo"),
              AgentConfig(name="fetcher", kind="tool", tool="web_fetch"),
              AgentConfig(name="clock", kind="tool", tool="time_now")]
    return Config(server=ServerConfig(max_body_bytes=16 * 1024 * 1024), agents=agents,
                  state=StateConfig(dir=str(tmp_path)), security=SecurityConfig(**security),
                  a2a=A2aConfig(enabled=True, default_agent="echo"), mcp_server=McpServerExposure(enabled=True))


async def start(nursery, config: Config) -> tuple[Node, str]:
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    node.http_bound = ("127.0.0.1", bound[0][1])
    return node, f"http://127.0.0.1:{bound[0][1]}"


def records(tmp_path: Path) -> list[dict]:
    """Every audit record in every file, oldest file first."""
    files = sorted(tmp_path.glob("audit.jsonl*"), key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0)
    return [json.loads(line) for path in files for line in path.read_text().splitlines()]


def rpc(method, params, msg_id=1):
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def a2a_message(**ids):
    return {"kind": "message", "role": "user", "messageId": "m-1", "parts": [{"kind": "text", "text": "hi"}], **ids}


# --- Item 3: ids ---------------------------------------------------------------------------------


async def test_a_huge_context_id_is_refused_everywhere_and_cannot_flush_the_audit_log(nursery, tmp_path):
    node, url = await start(nursery, make_config(tmp_path))
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(3):  # today's records, which must survive what follows
            ok = await client.post(url + "/api/agents/echo/message", json={"message": f"early {i}"})
            assert ok.status_code == 200
        attempts = [await client.post(url + "/api/agents/echo/message", json={"message": "x", "context_id": HUGE})
                    for _ in range(9)]
        early = [r for r in records(tmp_path) if r["kind"] == "agent_message" and r["chars_in"] == 7]
        assert len(early) == 3  # the attack: these were rotated out of the three kept files
        for refused in attempts:
            assert refused.status_code == 400
            assert f"at most {MAX_ID_CHARS}" in refused.json()["error"]["message"]
        # MCP: tern_agent_echo's context_id, and a huge tool name
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        opened = await client.post(url + "/mcp", json=rpc("initialize", init), headers={"Accept": BOTH})
        headers = {"Accept": "application/json", "Mcp-Session-Id": opened.headers["mcp-session-id"],
                   "MCP-Protocol-Version": "2025-11-25"}
        await client.post(url + "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        for params in ({"name": "tern_agent_echo", "arguments": {"message": "x", "context_id": HUGE}},
                       {"name": "t" * 1_000_000, "arguments": {}}):
            answer = (await client.post(url + "/mcp", json=rpc("tools/call", params, 2), headers=headers)).json()
            assert answer["error"]["code"] == -32602 and "characters long" in answer["error"]["message"]
        # A2A: every binding, every id
        for method, params in (("message/send", {"message": a2a_message(contextId=HUGE)}),
                               ("message/send", {"message": a2a_message(messageId=HUGE)}),
                               ("message/send", {"message": a2a_message(taskId=HUGE)}),
                               ("tasks/send", {"id": HUGE, "message": a2a_message()}),
                               ("tasks/send", {"id": "t-1", "sessionId": HUGE, "message": a2a_message()}),
                               ("tasks/get", {"id": HUGE}),
                               ("tasks/pushNotificationConfig/set",
                                {"taskId": "t-1", "pushNotificationConfig": {"id": HUGE, "url": "http://127.0.0.1:9/"}})):
            answer = (await client.post(url + "/a2a/echo", json=rpc(method, params))).json()
            assert answer["error"]["code"] == -32602, method
            assert f"at most {MAX_ID_CHARS}" in answer["error"]["message"]
        rest = await client.post(url + "/a2a/echo/rest/message:send", headers=V10,
                                 json={"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}],
                                                   "contextId": HUGE}})
        assert rest.status_code == 400 and f"at most {MAX_ID_CHARS}" in rest.json()["error"]["message"]
        seed = await client.post(url + "/a2a/tasks/send", json={"id": HUGE, "message": a2a_message()})
        assert seed.status_code == 400
        # and the daemon still serves
        assert (await client.post(url + "/api/agents/echo/message", json={"message": "after"})).status_code == 200
    kept = [r for r in records(tmp_path) if r["kind"] == "agent_message"]
    assert len(kept) == 4 and all(len(json.dumps(r)) < 2048 for r in kept)


# --- Item 6: push tokens are the caller's, not log secrets -----------------------------------------


async def test_push_tokens_never_become_log_secrets(nursery, tmp_path, capsys):
    node, url = await start(nursery, make_config(tmp_path))
    tern_log.setup_logging("info", "text")
    say = tern_log.get_logger("test").error
    long_token = "a-longer-push-token-0123"
    async with httpx.AsyncClient(timeout=60) as client:
        sent = (await client.post(url + "/a2a/echo", json=rpc("message/send", {"message": a2a_message()}))).json()
        task = sent["result"]["taskId"] if sent["result"].get("kind") == "message" else sent["result"]["id"]
        for token in ("ERROR", long_token):
            config = {"url": "http://127.0.0.1:9/hook", "token": token, "id": f"c-{len(token)}"}
            done = await client.post(url + "/a2a/echo", json=rpc("tasks/pushNotificationConfig/set",
                                                                  {"taskId": task, "pushNotificationConfig": config}))
            assert "result" in done.json(), done.text
        say("ERROR is a word, INFO too")
        assert "ERROR is a word" in capsys.readouterr().err  # a token of ERROR masked every line
        deleted = await client.post(url + "/a2a/echo", json=rpc("tasks/pushNotificationConfig/delete",
                                                                {"id": task, "pushNotificationConfigId": "c-24"}))
        assert "error" not in deleted.json()
        say("the value %s", long_token)  # no longer (never) in the log's secret set
        assert long_token in capsys.readouterr().err
        assert long_token not in tern_log.registered_secrets()
        # 80 tokens of 5 MB: each refused at once with the bound; nothing grows
        before = tern_log.registered_secrets()
        big = "t" * (5 * 1024 * 1024)
        with trio.fail_after(120):
            for i in range(80):
                config = {"url": "http://127.0.0.1:9/hook", "token": big, "id": f"big-{i}"}
                answer = (await client.post(url + "/a2a/echo", json=rpc("tasks/pushNotificationConfig/set",
                                                                        {"taskId": task,
                                                                         "pushNotificationConfig": config}))).json()
                assert answer["error"]["code"] == -32602 and "at most 4096" in answer["error"]["message"]
        assert tern_log.registered_secrets() == before
        listed = (await client.post(url + "/a2a/echo", json=rpc("tasks/pushNotificationConfig/list", {"id": task})))
        assert len(listed.json()["result"]) == 1  # only the ERROR config is left
    logging.getLogger("tern").handlers.clear()


# --- Item 17: a tool's unparseable input ----------------------------------------------------------


async def test_a_url_the_guard_cannot_parse_is_a_tool_error_with_an_audit_record(nursery, tmp_path):
    node, url = await start(nursery, make_config(tmp_path))
    async with httpx.AsyncClient(timeout=30) as client:
        answer = await client.post(url + "/api/agents/fetcher/message", json={"message": "http://①②⑦.0.0.1/"})
    assert answer.status_code == 502  # the agent's tool failed: its sentence, not a 500
    said = answer.json()["error"]["message"]
    assert "invalid URL" in said and "internationalized" in said
    calls = [r for r in records(tmp_path) if r["kind"] == "tool_call"]
    assert [(r["tool"], r["outcome"]) for r in calls] == [("web_fetch", "tool_error")]


# --- Item 18: an unwritable audit log -------------------------------------------------------------


@pytest.mark.parametrize("required", [False, True], ids=["default", "audit_required"])
async def test_an_unwritable_audit_log_is_visible_and_recovers(nursery, tmp_path, caplog, required):
    blocker = tmp_path / "audit.jsonl"
    blocker.mkdir()  # a directory where the file should be: not even root can write it
    node, url = await start(nursery, make_config(tmp_path, audit_required=required))
    caplog.set_level(logging.ERROR, logger="tern.audit")
    async with httpx.AsyncClient(timeout=30) as client:
        assert (await client.get(url + "/health")).json() == {"status": "ok"}  # nothing written yet
        for _ in range(5):
            answer = await client.post(url + "/api/agents/clock/message", json={"message": ""})
            if required:
                assert answer.status_code == 502
                assert "audit log cannot be written" in answer.json()["error"]["message"]
                assert "audit_required" in answer.json()["error"]["message"]
            else:
                assert answer.status_code == 200 and answer.json()["text"]
        health = await client.get(url + "/health")
        assert health.status_code == 200 and health.json() == {"status": "degraded", "failing": ["audit"]}
        assert str(tmp_path) not in health.text
        status = (await client.get(url + "/api/status")).json()["audit"]
        assert status["ok"] is False and status["error"] and status["failures"] >= 5
        assert status["path"] == str(blocker)
        assert len([r for r in caplog.records if "cannot write the audit log" in r.getMessage()]) == 1  # once a minute
        blocker.rmdir()  # the operator fixes it
        first = await client.post(url + "/api/agents/clock/message", json={"message": ""})
        assert first.status_code == 200
        assert (await client.get(url + "/health")).content == b'{"status":"ok"}'
        assert (await client.get(url + "/api/status")).json()["audit"]["ok"] is True
    assert [r["tool"] for r in records(tmp_path) if r["kind"] == "tool_call"] == ["time_now"]


# --- Item 20: a peer echoing tern's credentials ---------------------------------------------------


async def test_a_peer_echoing_the_authorization_header_cannot_put_the_token_in_a_tool_result(
        nursery, tmp_path, monkeypatch):
    token = "peer-bearer-7f3a9c1e5d2b8a64"
    monkeypatch.setenv("ECHOER_AUTH", token)  # a name no secret pattern (*TOKEN*, *KEY*...) matches
    peer = subprocess.Popen([sys.executable, str(PEER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(peer.stdout.readline())
        external = ExternalAgent(name="echoer", url=f"http://127.0.0.1:{port}",
                                 headers={"Authorization": "Bearer ${ECHOER_AUTH}"})
        agents = [AgentConfig(name="asker", kind="tool", tool="a2a_echoer"),
                  AgentConfig(name="relay", kind="remote", remote="echoer")]
        config = Config(agents=agents, state=StateConfig(dir=str(tmp_path)),
                        a2a=A2aConfig(external_agents=[external], discovery_timeout_secs=10),
                        mcp_server=McpServerExposure(enabled=True, tools=["a2a_*"]))
        node, url = await start(nursery, config)
        async with httpx.AsyncClient(timeout=30) as client:
            for agent in ("asker", "relay"):  # a tool result, and a remote agent's reply
                answer = await client.post(url + f"/api/agents/{agent}/message", json={"message": "hi"})
                assert answer.status_code == 200, answer.text
                text = answer.json()["text"]
                assert "you sent me" in text and token not in text
                assert "Authorization: [redacted]" in text and "your token is [redacted]" in text
    finally:
        peer.stdin.close()
        peer.wait(timeout=10)
