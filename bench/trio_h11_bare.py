"""A bare trio + h11 keep-alive loop with tern's two benchmark routes: the reference
ceiling for bench/http_server.py (no routing table, middleware, auth or logging).

    .venv/bin/python bench/trio_h11_bare.py --port 8000      # listens on 127.0.0.1 only

Routes as bench/asgi_app.py: GET /health -> {"status":"ok"}; POST /api/echo -> the JSON
body back (json.loads to validate, 400 if not JSON); anything else 404.
"""

from __future__ import annotations

import argparse
import functools
import json
from http import HTTPStatus

import h11
import trio

HEALTH = b'{"status":"ok"}'
NOT_JSON = b'{"error":"body is not JSON"}'
NOT_FOUND = b'{"error":"not found"}'
BAD_REQUEST = b'{"error":"bad request"}'
MAX_BODY = 1 << 20
REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


def route(method: bytes, target: bytes, body: bytes) -> tuple:
    path = target.split(b"?", 1)[0]
    if path == b"/health" and method == b"GET":
        return 200, HEALTH
    if path == b"/api/echo" and method == b"POST":
        try:
            json.loads(body)
        except ValueError:
            return 400, NOT_JSON
        return 200, body
    return 404, NOT_FOUND


def respond(conn: h11.Connection, status: int, payload: bytes) -> bytes:
    head = conn.send(h11.Response(status_code=status, reason=REASONS[status], headers=[
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]))
    return head + conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage())


async def serve_connection(stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)

    async def next_event():
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await stream.receive_some(65536))  # b"" at EOF

    try:
        while True:
            event = await next_event()
            if not isinstance(event, h11.Request):
                return  # ConnectionClosed (or PAUSED after an error): done
            chunks, size = [], 0
            while True:
                part = await next_event()
                if isinstance(part, h11.Data):
                    size += len(part.data)
                    if size > MAX_BODY:
                        await stream.send_all(respond(conn, 413, BAD_REQUEST))
                        return
                    chunks.append(part.data)
                elif isinstance(part, h11.EndOfMessage):
                    break
                else:
                    return
            status, payload = route(event.method, event.target, b"".join(chunks))
            await stream.send_all(respond(conn, status, payload))  # one write per response
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            try:
                await stream.send_all(respond(conn, 400, BAD_REQUEST))
            except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    try:
        trio.run(functools.partial(trio.serve_tcp, serve_connection, args.port, host="127.0.0.1"))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
