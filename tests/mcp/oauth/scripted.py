"""A loopback HTTP server whose answers a test scripts per path: a function of the
request (method, path, headers, body) returning (status, headers, body). It records
every request, so a test can count retries and read what tern sent."""

from __future__ import annotations

import functools
from collections.abc import Callable

import msgspec
import trio


class Request(msgspec.Struct):
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


Answer = tuple[int, dict[str, str], bytes]


class Scripted:
    def __init__(self, routes: dict[str, Callable[[Request], Answer]]) -> None:
        self.routes = routes
        self.requests: list[Request] = []
        self.base = ""

    async def serve(self, nursery: trio.Nursery) -> str:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1"))
        self.base = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        return self.base

    def to(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path.split("?")[0] == path]

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            while len(body) < int(headers.get("content-length", "0")):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                body += chunk
            request = Request(method, path, headers, body)
            self.requests.append(request)
            route = self.routes.get(path.split("?")[0])
            status, extra, answer = route(request) if route else (404, {}, b"{}")
            out = [f"HTTP/1.1 {status} X", f"Content-Length: {len(answer)}", "Connection: close",
                   *(f"{k}: {v}" for k, v in extra.items())]
            try:
                await stream.send_all(("\r\n".join(out) + "\r\n\r\n").encode() + answer)
            except trio.BrokenResourceError:
                pass


def json_answer(status: int, doc: object, **headers: str) -> Answer:
    return status, {"Content-Type": "application/json", **{k.replace("_", "-"): v for k, v in headers.items()}}, \
        msgspec.json.encode(doc)
