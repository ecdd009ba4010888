"""Requests, responses and HTTP errors as the server's handlers see them.

Handlers are ``async def handler(request) -> Response | StreamResponse``. They never
touch the socket: the server owns framing, limits, timeouts and shutdown.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any
from collections.abc import Awaitable, Callable

import msgspec
import trio

from runtime.errors import BudgetExceeded, TernError
from runtime.wire.depth import MAX_DEPTH, too_deep

__all__ = ["Request", "Response", "StreamResponse", "HttpError", "json_response", "error_body", "error_headers",
           "retry_after"]

_encoder = msgspec.json.Encoder()
_ID_PREFIX = os.urandom(3).hex()
JSON = b"application/json"
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_UNSAFE_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def _checked(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Header names and values a handler supplies, checked once here: the server writes
    response heads without re-validating them (no response splitting either way)."""
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or _UNSAFE_VALUE.search(value):
            raise ValueError(f"invalid response header {name!r}: {value!r}")
    return headers


class HttpError(TernError):
    """Raise from a handler (or the server) to answer with this status and a JSON error
    body. Any other TernError is answered the same way, with its class's status."""

    def __init__(self, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(message)
        self.http_status = status
        self.headers = _checked(headers or [])


def retry_after(seconds: float) -> list[tuple[bytes, bytes]]:
    """A ``Retry-After`` header: whole seconds, rounded up, at least 1 (a day at most)."""
    whole = math.ceil(min(seconds, 86400.0)) if seconds == seconds else 1
    return [(b"retry-after", str(max(1, whole)).encode())]


def error_headers(exc: TernError) -> list[tuple[bytes, bytes]]:
    """The headers an error answer carries besides its body: an ``HttpError``'s own, and
    ``Retry-After`` for a spent budget (429), whichever route it came from."""
    if isinstance(exc, HttpError):
        return exc.headers
    if isinstance(exc, BudgetExceeded):
        return retry_after(exc.retry_after)
    return []


class Request:
    """One parsed request. ``headers`` are h11's: lower-case names, raw bytes values."""

    __slots__ = ("method", "path", "query", "headers", "body", "client", "params", "route", "number", "state",
                 "caller")

    def __init__(self, method: str, path: str, query: str, headers: list[tuple[bytes, bytes]],
                 client: tuple[str, int], number: int = 0) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = b""
        self.client = client
        self.params: dict[str, str] = {}
        self.route: Any = None
        self.number = number
        self.state: dict[str, Any] = {}  # what middleware learned
        self.caller: Any = None  # the authenticated ``runtime.config.keys.Caller`` (None: a public route)

    @property
    def request_id(self) -> str:
        """Unique within this process run, and across runs (a random prefix): made only
        when needed (errors, logs)."""
        return f"{_ID_PREFIX}-{self.number:x}"

    def header(self, name: bytes) -> str | None:
        """The first value of a header (name in lower case), decoded as latin-1."""
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return None

    def json(self, type: Any = Any) -> Any:
        """The body decoded as JSON (into ``type`` if given); a clear 400 otherwise, and
        415 when the client says the body is something else (no Content-Type is taken
        as JSON: curl and many scripts send none)."""
        content_type = self.header(b"content-type")
        if content_type is not None:
            media = content_type.split(";", 1)[0].strip().lower()
            if media != "application/json" and not media.endswith("+json"):
                raise HttpError(415, f"expected Content-Type application/json, got {media or 'nothing'}")
        if not self.body:
            raise HttpError(400, "the request body is empty; expected JSON")
        if too_deep(self.body):
            raise HttpError(400, f"the request body is not valid JSON: nested more than {MAX_DEPTH} levels deep")
        try:
            return msgspec.json.decode(self.body, type=type)
        except msgspec.ValidationError as exc:
            raise HttpError(400, f"invalid request body: {exc}") from None
        except msgspec.DecodeError as exc:
            raise HttpError(400, f"the request body is not valid JSON: {exc}") from None


class Response:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int = 200, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None,
                 content_type: bytes = JSON) -> None:
        self.status = status
        self.body = body
        self.headers = [(b"content-type", content_type), *_checked(headers or [])]
        if content_type is not JSON and content_type != b"text/event-stream":
            _checked(self.headers[:1])


def json_response(data: Any, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None) -> Response:
    return Response(status, _encoder.encode(data), headers)


def error_body(status: int, message: str, request_id: str = "") -> bytes:
    error: dict[str, Any] = {"status": status, "message": message}
    if request_id:
        error["request_id"] = request_id
    return _encoder.encode({"error": error})


Producer = Callable[[trio.MemorySendChannel[bytes]], Awaitable[None]]


class StreamResponse:
    """A streamed (chunked) body. The ``producer`` writes chunks into a bounded channel
    and returns when done; the server writes them out with the write timeout, sends
    ``keepalive`` (an SSE comment) when the producer is quiet for ``keepalive_secs``,
    and cancels the producer when the client goes away or the server shuts down."""

    __slots__ = ("status", "headers", "producer", "keepalive", "keepalive_secs")

    def __init__(self, producer: Producer, *, status: int = 200, content_type: bytes = b"text/event-stream",
                 headers: list[tuple[bytes, bytes]] | None = None, keepalive: bytes = b": keep-alive\n\n",
                 keepalive_secs: float = 15.0) -> None:
        self.status = status
        self.producer = producer
        self.keepalive = keepalive
        self.keepalive_secs = keepalive_secs
        self.headers = [(b"content-type", content_type), (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"), *_checked(headers or [])]
        if content_type is not JSON and content_type != b"text/event-stream":
            _checked(self.headers[:1])
