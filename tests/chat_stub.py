"""A minimal OpenAI-compatible chat-completions endpoint for tests that run tern as a
real process (stdlib HTTP server in a thread, on loopback): each reply message is what
``answer(messages)`` returns. ``calls_tool`` is the usual script: ask for one tool, then
say what it returned, so a reply shows what the model was told. (For in-process tests
with streaming and faults, see ``scripted_llm.py``.)"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from collections.abc import Callable, Iterator

Answer = Callable[[list[dict[str, Any]]], dict[str, Any]]


@contextmanager
def serve_chat(answer: Answer) -> Iterator[str]:
    """The endpoint's base URL (``http://127.0.0.1:PORT/v1``) while the block runs."""

    class Chat(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            chat = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            message = answer(chat["messages"])
            body = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": message}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def calls_tool(tool: str, arguments: dict[str, Any]) -> Answer:
    """Ask for ``tool`` with ``arguments``; once a tool result is in, answer
    ``the tool said: <result>``."""

    def answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
        last = messages[-1]
        if last["role"] == "tool":
            return {"role": "assistant", "content": f"the tool said: {last['content']}"}
        call = {"id": "call-1", "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    return answer
