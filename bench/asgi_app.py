"""A raw ASGI app (no framework) with tern's two benchmark routes, for uvicorn in
bench/http_server.py:

    GET  /health    -> 200 {"status":"ok"}
    POST /api/echo  -> the JSON body it was sent (parsed with json.loads to validate it,
                       400 if it is not JSON), as application/json
    anything else   -> 404

    .peers/bench-venv/bin/python -m uvicorn asgi_app:app --app-dir bench --port 8000
"""

from __future__ import annotations

import json

HEALTH = b'{"status":"ok"}'
NOT_JSON = b'{"error":"body is not JSON"}'
NOT_FOUND = b'{"error":"not found"}'


async def _send(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        return await _lifespan(receive, send)
    if scope["type"] != "http":
        return
    method, path = scope["method"], scope["path"]
    if path == "/health" and method == "GET":
        return await _send(send, 200, HEALTH)
    if path == "/api/echo" and method == "POST":
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            json.loads(body)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
            return await _send(send, 400, NOT_JSON)
        return await _send(send, 200, body)
    return await _send(send, 404, NOT_FOUND)
