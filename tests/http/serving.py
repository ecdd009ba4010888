"""A real HttpServer with a small test router, and raw-socket helpers, for the server
tests: start one on 127.0.0.1:0, talk to it with raw trio sockets or httpx, and check
afterwards that it still answers and holds no leaked connections, streams or tasks."""

from __future__ import annotations

import socket
import struct
import threading
from contextlib import contextmanager
from typing import Any, Iterator
from urllib.parse import parse_qs

import h11
import httpx
import trio

from runtime.config import ServerConfig
from runtime.errors import BudgetExceeded, TernError, UnknownAgent
from runtime.httpd.access import Access
from runtime.httpd.messages import Request, Response, StreamResponse
from runtime.wire.ratelimit import RateLimiter
from runtime.httpd.router import Router
from runtime.httpd.server import HttpServer

OK_BODY = b'{"ok":true}'


def small_config(**overrides: Any) -> ServerConfig:
    """Small limits, and timeouts long enough that a test only meets the one it is about."""
    values: dict[str, Any] = dict(max_body_bytes=1024, max_connections=50, request_head_timeout_secs=5.0,
                                  keep_alive_timeout_secs=5.0, write_timeout_secs=5.0, shutdown_grace_secs=3.0)
    values.update(overrides)
    return ServerConfig(**values)


class State:
    """What the handlers saw, for tests to wait on."""

    def __init__(self) -> None:
        self.slow_started = trio.Event()
        self.streams_started = 0


def _query(request: Request, name: str, default: float, high: float) -> float:
    """A number from the query string, kept within [0, high] (random input reaches
    these handlers too, and must not make them raise, hog memory or run forever)."""
    try:
        value = float(parse_qs(request.query)[name][0])
    except (KeyError, ValueError):
        return default
    return min(max(value, 0.0), high) if value == value else default


class Conflict(TernError):
    """A TernError of the kind a layer below HTTP defines, with a status of its own."""

    http_status = 409


def build_test_router(state: State) -> Router:
    router = Router()

    async def ok(request: Request) -> Response:
        return Response(200, OK_BODY)

    async def echo(request: Request) -> Response:
        return Response(200, request.body, content_type=b"application/octet-stream")

    async def boom(request: Request) -> Response:
        raise RuntimeError("boom: a handler bug")

    async def refuse(request: Request) -> Response:
        if request.params["what"] == "agent":
            raise UnknownAgent("no agent named 'ghost'")
        if request.params["what"] == "budget":  # a kernel error that carries a Retry-After
            raise BudgetExceeded("agent 'busy' has had its 3 messages in the last minute; try again in 3 s", 2.2)
        raise Conflict(f"{request.params['what']} is already running")

    async def big(request: Request) -> Response:
        size = int(_query(request, "size", 1 << 20, 64 << 20))
        return Response(200, b"b" * size, content_type=b"application/octet-stream")

    def producer(request: Request) -> Any:
        """``n`` chunks (``forever=yes``: endless) of ``size`` bytes (0: a short SSE
        event), ``delay`` apart."""
        n = int(_query(request, "n", 5, 100_000))
        forever = "forever=yes" in request.query
        size = int(_query(request, "size", 0, 1 << 20))
        delay = _query(request, "delay", 0.01, 1.0)

        async def produce(send: trio.MemorySendChannel[bytes]) -> None:
            state.streams_started += 1
            i = 0
            while forever or i < n:
                await send.send(b"z" * size if size else b"data: %d\n\n" % i)
                i += 1
                if delay:
                    await trio.sleep(delay)

        return produce

    async def stream(request: Request) -> StreamResponse:
        return StreamResponse(producer(request), keepalive_secs=_query(request, "keepalive", 15.0, 60.0) or 15.0)

    async def slow(request: Request) -> Response:
        state.slow_started.set()
        await trio.sleep(_query(request, "secs", 0.5, 60.0))
        return Response(200, b'{"slept":true}')

    async def slow_stream(request: Request) -> StreamResponse:
        """Sleeps first (a request in flight), then answers with a stream."""
        state.slow_started.set()
        await trio.sleep(_query(request, "secs", 0.5, 60.0))
        return StreamResponse(producer(request))

    router.add("GET", "/ok", ok)
    router.add("POST", "/echo", echo)
    router.add("GET", "/boom", boom)
    router.add("GET", "/refuse/{what}", refuse)
    router.add("GET", "/big", big)
    router.add("GET", "/stream", stream)
    router.add("GET", "/slow", slow)
    router.add("GET", "/slow-stream", slow_stream)
    return router


class Served:
    def __init__(self, server: HttpServer, port: int, state: State, headers: dict[str, str]) -> None:
        self.server = server
        self.port = port
        self.state = state
        self.headers = headers  # what a normal request needs (the API key, if any)
        self.url = f"http://127.0.0.1:{port}"


async def start_server(nursery: trio.Nursery, config: ServerConfig | None = None, *,
                       access: Access | None = None, limiter: Any = "default",
                       headers: dict[str, str] | None = None) -> Served:
    """An HttpServer on 127.0.0.1:0 (loopback only), run in ``nursery``."""
    state = State()
    if limiter == "default":
        limiter = RateLimiter(1_000_000, 1_000_000)
    server = HttpServer(config or small_config(), build_test_router(state), access or Access(""), limiter=limiter)
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    return Served(server, bound[0][1], state, headers or {})


# --- Health ----------------------------------------------------------------------------


def _serve_task(server: HttpServer) -> trio.lowlevel.Task | None:
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        frame = getattr(task.coro, "cr_frame", None)
        if (getattr(task.coro, "__qualname__", "") == "HttpServer.serve" and frame is not None
                and frame.f_locals.get("self") is server):
            return task
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return None


def server_tasks(server: HttpServer) -> list[str]:
    """The names of every task running under ``server.serve`` (the acceptors, and one
    per connection or refusal)."""
    root = _serve_task(server)
    if root is None:
        return []
    names: list[str] = []
    stack = [root]
    while stack:
        task = stack.pop()
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                names.append(child.name)
                stack.append(child)
    return names


def leaked_tasks(server: HttpServer) -> list[str]:
    return [name for name in server_tasks(server) if not name.endswith(("._accept", "._sweep"))]


async def wait_settled(server: HttpServer, timeout: float = 2.0) -> None:
    """Until the server holds no connection, stream or connection task; AssertionError
    with what is left after ``timeout``."""
    with trio.move_on_after(timeout):
        while server.active or server._connections or server._streams or leaked_tasks(server):
            await trio.sleep(0.01)
        return
    raise AssertionError(f"the server did not settle in {timeout}s: active={server.active} "
                         f"connections={len(server._connections)} streams={len(server._streams)} "
                         f"tasks={leaked_tasks(server)}")


async def assert_healthy(server: HttpServer, port: int, *, headers: dict[str, str] | None = None) -> None:
    """A normal request gets its 200, and then nothing is left behind: no open
    connection, no stream, no task but the acceptors."""
    with trio.fail_after(10):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            response = await client.get("/ok", headers=headers or {})
        assert response.status_code == 200, (response.status_code, response.text)
        assert response.content == OK_BODY
        await wait_settled(server)


# --- Raw sockets -------------------------------------------------------------------------


class RawResponse:
    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, complete: bool) -> None:
        self.status = status
        self.headers = {name.decode(): value.decode("latin-1") for name, value in headers}
        self.body = body
        self.complete = complete  # the body ended as its framing says (not cut off)

    def json(self) -> Any:
        import json

        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<RawResponse {self.status} {self.headers} {self.body[:200]!r} complete={self.complete}>"


class RawClient:
    """A TCP connection we write anything to, reading responses with h11's parser."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)
        self.reset = False

    @classmethod
    async def connect(cls, port: int) -> "RawClient":
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self, *, reset: bool = False) -> None:
        """Close; with ``reset``, abortively (an RST: the client vanished)."""
        if reset:
            self.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await self.stream.aclose()

    async def _receive(self) -> bytes:
        try:
            return await self.stream.receive_some(65536)
        except trio.BrokenResourceError:  # ECONNRESET
            self.reset = True
            return b""

    async def response(self, method: bytes = b"GET") -> RawResponse | None:
        """The next response (``method`` is the request's, so HEAD has no body); None if
        the connection closed before a status line. Informational responses are skipped."""
        conn = self.h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
        if conn.our_state is h11.IDLE:
            conn.send(h11.Request(method=method, target=b"/", headers=[(b"host", b"localhost")]))
            conn.send(h11.EndOfMessage())
        status, headers, body = 0, [], bytearray()
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await self._receive())
                elif isinstance(event, h11.Response):
                    status, headers = event.status_code, list(event.headers)
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    return RawResponse(status, headers, bytes(body), True)
                elif isinstance(event, h11.ConnectionClosed):
                    return None
        except h11.RemoteProtocolError:
            if not status:
                return None
            return RawResponse(status, headers, bytes(body), False)

    async def closed(self) -> bool:
        """Read until the server closes (EOF or reset); True. Anything more the server
        sends is discarded."""
        while await self._receive():
            pass
        return True

    async def read_all(self) -> bytes:
        data = bytearray()
        while True:
            chunk = await self._receive()
            if not chunk:
                return bytes(data)
            data += chunk


def request(method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: localhost"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body and not any(name.lower() in ("content-length", "transfer-encoding") for name in headers or {}):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# --- A server in a thread (for sync tests, e.g. hypothesis) ------------------------------


@contextmanager
def server_in_thread(config: ServerConfig | None = None) -> Iterator[tuple[Any, Served]]:
    """A server in its own ``trio.run`` on a thread: yields (trio token, Served), for
    ``trio.from_thread.run(fn, ..., trio_token=token)``. Shut down on exit."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            box["served"] = await start_server(nursery, config)
            box["token"] = trio.lowlevel.current_trio_token()
            ready.set()
            await box["served"].server.wait_stopped()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # handed to the test below
            box["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="http-server", daemon=True)
    thread.start()
    ready.wait(10)
    if "error" in box:
        raise box["error"]
    try:
        yield box["token"], box["served"]
    finally:
        try:
            trio.from_thread.run_sync(box["served"].server.shutdown, trio_token=box["token"])
        except trio.RunFinishedError:
            pass
        thread.join(10)
        if thread.is_alive():
            raise AssertionError("the server thread did not stop after shutdown()")
        if "error" in box:
            raise box["error"]
