"""Deeply nested JSON is a parse error at every entry point, and the server goes on.

msgspec and the json module raise RecursionError about 1000 levels down; a 5000-deep
line used to end ``tern mcp`` (exit 70) and give 500s over HTTP. The bound is
``runtime.wire.depth.MAX_DEPTH`` levels, checked on the raw bytes before decoding.
"""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from runtime.config import A2aConfig, AgentConfig, Config
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.metrics import Metrics
from runtime.httpd.server import HttpServer
from runtime.wire import jsonrpc
from runtime.wire.depth import MAX_DEPTH, JsonTooDeep, loads, too_deep
from tests.mcp.server_harness import TernMcp, tern_env, write_config

DEEP = b"[" * 5000 + b"]" * 5000
DEEP_IN_MESSAGE = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"a":' \
    + DEEP + b"}}}"


def test_depth_bound_counts_only_brackets_outside_strings():
    assert not too_deep(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    assert too_deep(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert too_deep(b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1))
    assert too_deep(b"[" * 5000)  # never closed: a decoder still descends it
    assert not too_deep(b'["' + b"[" * 5000 + b'"]')  # inside a string
    assert not too_deep(b'["\\"' + b"[" * 5000 + b'"]')  # an escaped quote does not end the string
    assert not too_deep(b"[" + b"[]," * 10000 + b"[]]")  # many brackets, shallow
    assert too_deep("[" * 5000)
    with pytest.raises(JsonTooDeep):
        loads(DEEP)
    with pytest.raises(ValueError):  # callers that catch ValueError need no change
        loads(DEEP)


def test_jsonrpc_parse_answers_a_parse_error():
    with pytest.raises(jsonrpc.InvalidMessage) as caught:
        jsonrpc.parse(DEEP_IN_MESSAGE)
    assert caught.value.code == jsonrpc.PARSE_ERROR


async def test_tern_mcp_stdio_answers_deep_json_and_keeps_serving(tmp_path):
    server = await TernMcp.start(write_config(tmp_path), tern_env(tmp_path), "--standalone")
    try:
        await server.handshake()
        await server.write(DEEP_IN_MESSAGE + b"\n")
        answer = await server.receive()
        assert answer["error"]["code"] == -32700, answer
        reply = await server.call(8, "tools/list")
        assert reply["result"]["tools"]
    finally:
        assert await server.close() == 0


async def test_http_entry_points_answer_400_and_keep_serving(nursery):
    cfg = Config(a2a=A2aConfig(enabled=True), agents=[AgentConfig(name="echo", kind="echo")])
    node = Node(cfg)
    await nursery.start(node.run)
    server = HttpServer(cfg.server, build_router(node, metrics=Metrics()), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2025-11-25"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{bound[0][1]}", timeout=10) as client:
        for path in ("/mcp", "/a2a", "/a2a/echo", "/a2a/echo/rest/message:send", "/api/agents/echo/message",
                     "/api/echo"):
            response = await client.post(path, content=DEEP_IN_MESSAGE, headers=headers)
            assert response.status_code in (200, 400), (path, response.status_code, response.text)
            text = response.text
            if response.status_code == 200:  # JSON-RPC over HTTP: the error is in the body
                assert json.loads(text)["error"]["code"] == -32700, (path, text)
            assert "internal error" not in text
        ok = await client.post("/a2a/echo", headers=headers, json={
            "jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}]}}})
        assert ok.status_code == 200 and "result" in ok.json(), ok.text
        assert (await client.get("/health")).status_code == 200
    server.shutdown()
    with trio.fail_after(10):
        await server.wait_stopped()
