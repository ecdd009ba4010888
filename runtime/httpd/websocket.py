"""WebSocket endpoints on the HTTP port, through wsproto (h11 parsed the upgrade).

The handler gets a ``ServerWebSocket`` it can ``send`` text to and ``receive`` the
client's text messages from; a reader task next to it answers pings, honours the
client's close, and refuses client messages larger than ``MAX_CLIENT_MESSAGE``. At most
``MAX_QUEUED`` client messages wait for the handler; past that the socket is closed
(1008): a client that floods is not served. The socket is
closed with 1001 when the server shuts down, and every write has a timeout. A client
that offers the subprotocol ``tern.events`` gets it selected (browsers that offer any
require one back); the ``tern.key.*`` one a browser sends its key in is never echoed.
"""

from __future__ import annotations

from typing import Any

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Ping, Request as WsRequest
from wsproto.utilities import RemoteProtocolError

from runtime.httpd.messages import HttpError, Request

__all__ = ["ServerWebSocket", "serve_websocket"]

MAX_CLIENT_MESSAGE = 64 * 1024
MAX_QUEUED = 16
WRITE_TIMEOUT_SECS = 10.0
SUBPROTOCOL = "tern.events"  # selected when offered (a browser sends its key as another: access.py)


class ServerWebSocket:
    def __init__(self, stream: trio.abc.Stream, ws: WSConnection) -> None:
        self._stream = stream
        self._ws = ws
        self._lock = trio.Lock()
        self.closed = trio.Event()
        self._queue_in, self._queue_out = trio.open_memory_channel[str](MAX_QUEUED)
        self._text: list[str] = []

    async def receive(self) -> str:
        """The client's next text message; EndOfChannel once it left."""
        return await self._queue_out.receive()

    async def _write(self, data: bytes) -> None:
        async with self._lock:
            with trio.fail_after(WRITE_TIMEOUT_SECS):
                await self._stream.send_all(data)

    async def send(self, text: str) -> None:
        if self.closed.is_set():
            raise trio.ClosedResourceError("the WebSocket is closed")
        from wsproto.events import TextMessage

        await self._write(self._ws.send(TextMessage(data=text)))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if not self.closed.is_set():
            self.closed.set()
            try:
                await self._write(self._ws.send(CloseConnection(code=code, reason=reason)))
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError, Exception):
                pass

    async def read_loop(self) -> None:
        """Answer pings and closes until the client leaves."""
        size = 0
        while not self.closed.is_set():
            data = await self._stream.receive_some(65536)
            if not data:
                self.closed.set()
                self._queue_in.close()
                return
            self._ws.receive_data(data)
            for event in self._ws.events():
                if isinstance(event, Ping):
                    await self._write(self._ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    self.closed.set()
                    try:
                        await self._write(self._ws.send(event.response()))
                    except Exception:
                        pass
                    return
                elif isinstance(event, Message):
                    size += len(event.data)
                    if size > MAX_CLIENT_MESSAGE:
                        await self.close(1009, "message too big")
                        return
                    if isinstance(event.data, str):
                        self._text.append(event.data)
                    if event.message_finished:
                        size, text, self._text = 0, "".join(self._text), []
                        try:
                            if text:
                                self._queue_in.send_nowait(text)
                        except trio.WouldBlock:
                            await self.close(1008, "too many messages waiting")
                            return


async def serve_websocket(stream: trio.abc.Stream, conn: h11.Connection, request: Request,
                          terminating: trio.Event) -> None:
    upgrade = request.header(b"upgrade")
    if upgrade is None or upgrade.strip().lower() != "websocket":
        raise HttpError(426, "this endpoint speaks WebSocket only: send Upgrade: websocket",
                        [(b"upgrade", b"websocket")])
    ws = WSConnection(ConnectionType.SERVER)
    try:
        ws.initiate_upgrade_connection(request.headers, request.path)
    except RemoteProtocolError as exc:  # a missing key, a wrong version...
        raise HttpError(400, f"a WebSocket upgrade that cannot be accepted: {exc}") from None
    leftover, _ = conn.trailing_data
    for event in ws.events():
        if isinstance(event, WsRequest):
            # the one subprotocol tern speaks, if offered; never the key a browser offers beside it
            chosen = SUBPROTOCOL if SUBPROTOCOL in event.subprotocols else None
            with trio.fail_after(WRITE_TIMEOUT_SECS):
                await stream.send_all(ws.send(AcceptConnection(subprotocol=chosen)))
    if leftover:
        ws.receive_data(leftover)
    socket = ServerWebSocket(stream, ws)

    async def run(nursery: Any) -> None:
        try:
            await request.route.handler(request, socket)
        except (trio.ClosedResourceError, trio.BrokenResourceError, trio.TooSlowError, OSError):
            socket.closed.set()  # the client left, or stopped reading: the socket is done
        finally:
            await socket.close(1000)
            nursery.cancel_scope.cancel()

    async def watch(nursery: Any) -> None:
        await terminating.wait()
        await socket.close(1001, "server shutting down")
        nursery.cancel_scope.cancel()

    async def read(nursery: Any) -> None:
        try:
            await socket.read_loop()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            socket.closed.set()
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, nursery)
        nursery.start_soon(watch, nursery)
        nursery.start_soon(read, nursery)
