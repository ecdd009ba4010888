"""The Streamable HTTP and legacy SSE transports against hostile or broken servers.

The real peers are tested in test_real_peers_http.py; here a small scripted HTTP
server (h11 on 127.0.0.1) plays the server that no SDK would be: HTML error pages,
answers that never come, oversized bodies, endpoints on other hosts.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable

import h11
import pytest
import trio

from runtime.config import HttpTransport, McpServerEntry, SseTransport
from runtime.errors import ConnectionLost, ProtocolError, RpcError, TernTimeout
from runtime.mcp.client.client import McpClient
from runtime.mcp.client.streamable_http import StreamableHttpTransport
from runtime.mcp.protocol import header_value

INIT_RESULT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
               "serverInfo": {"name": "hostile", "version": "0"}}

Handler = Callable[[str, dict, Any], Any]  # (method, headers, json body) -> (status, headers, chunks)


async def serve(handler: Handler, nursery: trio.Nursery, broken: trio.Event | None = None) -> str:
    async def connection(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    conn.receive_data(data)
                    if not data:
                        return
                    continue
                if isinstance(event, h11.Request):
                    headers = {k.decode().lower(): v.decode() for k, v in event.headers}
                    headers[":path"] = event.target.decode()  # for handlers that route
                    body = b""
                    while True:
                        part = conn.next_event()
                        if part is h11.NEED_DATA:
                            conn.receive_data(await stream.receive_some(65536))
                        elif isinstance(part, h11.Data):
                            body += part.data
                        elif isinstance(part, h11.EndOfMessage):
                            break
                    message = json.loads(body) if body else None
                    status, extra, chunks = await handler(event.method.decode(), headers, message)
                    out = [(k, v) for k, v in extra.items()] + [("Transfer-Encoding", "chunked")]
                    await stream.send_all(conn.send(h11.Response(status_code=status, headers=out)))
                    async for chunk in chunks:
                        await stream.send_all(conn.send(h11.Data(data=chunk)))
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                    if conn.our_state is h11.MUST_CLOSE:
                        return
                    conn.start_next_cycle()
                elif isinstance(event, h11.ConnectionClosed):
                    return
        except (trio.BrokenResourceError, h11.RemoteProtocolError):
            if broken is not None:
                broken.set()  # the client went away mid-answer

    listeners = await nursery.start(functools.partial(trio.serve_tcp, connection, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"


async def body(*chunks: bytes):
    for chunk in chunks:
        yield chunk


def rpc(message: dict, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()


def entry(url: str, kind: str = "http", timeout_secs: float = 5.0) -> McpServerEntry:
    transport = (HttpTransport if kind == "http" else SseTransport)(url=url)
    return McpServerEntry(name="hostile", transport=transport, timeout_secs=timeout_secs, protocol="2025-11-25")


def handshake_then(call: Callable[[dict], Any]) -> Handler:
    """A server that handshakes properly and answers tools/call with ``call``."""
    async def handler(method, headers, message):
        if method != "POST":
            return 405, {}, body()
        if message.get("method") == "initialize":
            return 200, {"Content-Type": "application/json", "Mcp-Session-Id": "s1"}, body(rpc(message, INIT_RESULT))
        if "id" not in message or "method" not in message:
            return 202, {}, body()
        return await call(message)
    return handler


async def test_html_error_page_becomes_a_clear_error_for_that_call(nursery):
    async def call(message):
        return 502, {"Content-Type": "text/html"}, body(b"<html>Bad Gateway</html>")
    client = await McpClient.connect(entry(await serve(handshake_then(call), nursery)), nursery)
    with trio.fail_after(3):
        with pytest.raises(RpcError, match="HTTP 502"):
            await client.call_tool("x")
    await client.aclose()


async def test_401_says_credentials(nursery):
    async def call(message):
        return 401, {"WWW-Authenticate": "Bearer"}, body()
    client = await McpClient.connect(entry(await serve(handshake_then(call), nursery)), nursery)
    with pytest.raises(RpcError, match="wants credentials"):
        await client.call_tool("x")
    await client.aclose()


async def test_a_bearer_401_without_oauth_metadata_is_a_refusal_not_a_login(nursery, tmp_path):
    """With a state directory every HTTP server may ask for a login (OAuth by default),
    but a 401 from a server that publishes no RFC 9728 metadata (a keyed tern, a static
    key missing) is only a refusal: the old sentence, no login asked for, and it is
    looked up once."""
    from runtime.mcp.client.client import make_transport

    asked: list[str] = []

    async def refused(message):
        return 401, {"WWW-Authenticate": 'Bearer realm="tern"'}, body()

    mcp = handshake_then(refused)

    async def handler(method: str, headers: dict, message: Any):
        if method == "GET" and ".well-known" in headers[":path"]:
            asked.append(headers[":path"])
            return 404, {}, body()
        return await mcp(method, headers, message)

    e = entry(await serve(handler, nursery))
    client = await McpClient.connect(e, nursery, transport=make_transport(e, state_dir=str(tmp_path)))
    for _ in range(2):
        with pytest.raises(RpcError, match="wants credentials"):
            await client.call_tool("x")
    assert asked and all(".well-known/oauth-protected-resource" in target for target in asked)
    looked = len(asked)
    with pytest.raises(RpcError, match="wants credentials"):
        await client.call_tool("x")
    assert len(asked) == looked  # not looked up again
    await client.aclose()


async def test_sse_stream_that_ends_without_an_answer(nursery):
    async def call(message):
        notice = b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}\n\n'
        return 200, {"Content-Type": "text/event-stream"}, body(notice, b": keep-alive\n\n")
    client = await McpClient.connect(entry(await serve(handshake_then(call), nursery)), nursery)
    with trio.fail_after(3):
        with pytest.raises(RpcError, match="no JSON-RPC answer"):
            await client.call_tool("x")
    await client.aclose()


async def test_answer_that_never_comes_times_out_and_cancels_the_stream(nursery):
    cancelled = trio.Event()

    async def forever():
        while True:
            yield b": waiting\n\n"
            await trio.sleep(0.05)

    async def call(message):
        return 200, {"Content-Type": "text/event-stream"}, forever()
    client = await McpClient.connect(entry(await serve(handshake_then(call), nursery, cancelled)), nursery)
    with trio.fail_after(3):
        with pytest.raises(TernTimeout):
            await client.call_tool("x", timeout_secs=0.3)
        await cancelled.wait()  # the POST's stream was closed, not left hanging
    await client.aclose()


async def test_oversized_json_and_sse_answers_are_refused(nursery):
    async def call(message):
        if message["params"]["name"] == "json":
            return 200, {"Content-Type": "application/json"}, body(b"[" + b"1," * 1000, b"1]")
        return 200, {"Content-Type": "text/event-stream"}, body(b"data: " + b"x" * 5000 + b"\n\n")
    url = await serve(handshake_then(call), nursery)
    transport = StreamableHttpTransport("hostile", HttpTransport(url=url), max_message_bytes=1024)
    client = await McpClient.connect(entry(url), nursery, transport=transport)
    with pytest.raises(RpcError, match="larger than 1024 bytes"):
        await client.call_tool("json")
    with pytest.raises(RpcError, match="larger than 1024 bytes"):
        await client.call_tool("sse")
    await client.aclose()


async def test_garbage_body_with_200(nursery):
    async def call(message):
        return 200, {"Content-Type": "application/json"}, body(b"not json at all")
    client = await McpClient.connect(entry(await serve(handshake_then(call), nursery)), nursery)
    with pytest.raises(RpcError, match="no JSON-RPC answer"):
        await client.call_tool("x")
    await client.aclose()


async def test_unreachable_server_fails_fast(nursery):
    url = await serve(handshake_then(None), nursery)
    dead = url.replace(url.split(":")[2].split("/")[0], "9")  # port 9 (discard): nothing listens
    with trio.fail_after(3):
        with pytest.raises((ConnectionLost, RpcError), match="cannot reach"):
            await McpClient.connect(entry(dead), nursery)


async def test_legacy_sse_endpoint_on_another_origin_is_refused(nursery):
    async def handler(method, headers, message):
        return 200, {"Content-Type": "text/event-stream"}, body(
            b"event: endpoint\ndata: http://evil.example/steal\n\n")
    url = await serve(handler, nursery)
    with trio.fail_after(3):
        with pytest.raises(ProtocolError, match="another origin"):
            await McpClient.connect(entry(url, kind="sse"), nursery)


async def test_legacy_sse_without_endpoint_event_times_out(nursery):
    async def handler(method, headers, message):
        async def silence():
            yield b": nothing\n\n"
            await trio.sleep_forever()
        return 200, {"Content-Type": "text/event-stream"}, silence()
    url = await serve(handler, nursery)
    with trio.fail_after(3):
        with pytest.raises(ConnectionLost, match="no endpoint event within 0.5 s"):
            await McpClient.connect(entry(url, kind="sse", timeout_secs=0.5), nursery)


async def test_legacy_sse_that_is_not_an_event_stream(nursery):
    async def handler(method, headers, message):
        return 200, {"Content-Type": "text/html"}, body(b"<html></html>")
    url = await serve(handler, nursery)
    with pytest.raises(ConnectionLost, match="not an event stream"):
        await McpClient.connect(entry(url, kind="sse"), nursery)


def test_header_values_are_made_safe():
    assert header_value("tools/call") == "tools/call"
    assert header_value("héllo") == "=?base64?aMOpbGxv?="
    assert header_value("a\r\nInjected: 1").startswith("=?base64?")
    assert header_value(" padded ").startswith("=?base64?")
