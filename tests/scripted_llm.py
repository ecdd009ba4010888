"""A scripted OpenAI-compatible chat-completions server for tests (h11 on 127.0.0.1).

Each POST /v1/chat/completions takes the next scripted answer: a whole JSON reply,
an SSE stream of chunks, an HTTP error status, or a hang. The request bodies are kept
for assertions. The reply shapes mirror real servers: OpenAI (arguments as a JSON
string, ids, ``[DONE]``), Ollama's OpenAI endpoint (all tool calls in one chunk) and
llama-server (arguments streamed in fragments, sometimes without ids).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import h11
import trio


def sse(*chunks: Any, done: bool = True) -> dict:
    return {"sse": [*chunks, "[DONE]"] if done else list(chunks)}


def text_chunk(text: str) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}}]}


def call_chunk(index: int, name: str = "", arguments: Any = "", call_id: str = "") -> dict:
    call: dict[str, Any] = {"index": index, "function": {}}
    if call_id:
        call["id"] = call_id
        call["type"] = "function"
    if name:
        call["function"]["name"] = name
    call["function"]["arguments"] = arguments
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}


def whole(content: str = "", calls: list | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {"json": {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}}


class ScriptedLLM:
    def __init__(self, *script: dict) -> None:
        self.script = list(script)
        self.requests: list[dict] = []
        self.url = ""

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/v1"
        await trio.serve_listeners(functools.partial(self._connection), listeners, task_status=task_status)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        body = b""
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    conn.receive_data(data)
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    self.requests.append(json.loads(body) if body else {})
                    body = b""
                    await self._answer(conn, stream)
                    if conn.our_state is h11.MUST_CLOSE:
                        return
                    conn.start_next_cycle()
                elif isinstance(event, h11.ConnectionClosed):
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return

    async def _answer(self, conn: h11.Connection, stream: trio.SocketStream) -> None:
        step = self.script.pop(0) if self.script else {"status": 500}
        if "hang" in step:
            await trio.sleep_forever()
        if "status" in step:
            headers = [(k.encode(), str(v).encode()) for k, v in step.get("headers", {}).items()]
            payload = b'{"error": {"message": "scripted failure"}}'
            await stream.send_all(conn.send(h11.Response(status_code=step["status"], headers=[
                *headers, (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]))
                + conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage()))
            return
        if "json" in step:
            payload = json.dumps(step["json"]).encode()
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=[
                (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]))
                + conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage()))
            return
        if "text" in step:
            payload = step["text"].encode()
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=[
                (b"content-type", b"text/plain"), (b"content-length", str(len(payload)).encode())]))
                + conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage()))
            return
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[
            (b"content-type", b"text/event-stream"), (b"transfer-encoding", b"chunked")])))
        for chunk in step["sse"]:
            data = chunk if isinstance(chunk, str) else json.dumps(chunk)
            await stream.send_all(conn.send(h11.Data(data=f"data: {data}\n\n".encode())))
        await stream.send_all(conn.send(h11.EndOfMessage()))
