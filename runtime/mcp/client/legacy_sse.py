"""The legacy HTTP+SSE transport (MCP 2024-11-05; deprecated, still common).

A GET opens one event stream; its first ``endpoint`` event names the URL to POST
messages to, and every server message arrives on the stream as a ``message`` event.
The endpoint must be on the same origin as the stream (a server cannot send tern's
requests, with their headers, somewhere else), and it passes the SSRF guard too.
When the stream ends, the connection is over.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import trio

from runtime.config.dump import mask_url
from runtime.config import SseTransport as SseConfig
from runtime import tracing
from runtime.errors import ConnectionLost, ProtocolError
from runtime.log import get_logger, log_wire
from runtime.mcp.client.connection import McpConnection
from runtime.mcp.client.session import TransportClosed
from runtime.mcp.client.oauth.model import AuthError, AuthRequired
from runtime.mcp.client.streamable_http import AUTH_TRIES, HttpTransportBase
from runtime.net.guard import check_url
from runtime.net.outbound import reason
from runtime.wire import jsonrpc
from runtime.wire.sse import SseDecoder

__all__ = ["LegacySseTransport"]

log = get_logger("mcp.sse")


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class LegacySseTransport(HttpTransportBase):
    """One MCP server reached over HTTP+SSE."""

    def __init__(self, name: str, config: SseConfig, **options: Any) -> None:
        super().__init__(name, config, **options)
        self.connection = McpConnection("initialize")  # this transport only exists in the handshake era
        self._cancel = trio.CancelScope()
        self._ended = ""
        self.endpoint: str | None = None

    async def start(self, nursery: trio.Nursery) -> None:
        """Open the stream and wait (bounded) for its ``endpoint`` event."""
        check_url(self.url, self.policy)
        self._open_client()
        try:
            with trio.fail_after(self.timeout_secs):
                await nursery.start(self._listen)
        except trio.TooSlowError:
            await self.aclose()
            raise ConnectionLost(f"MCP server '{self.name}' sent no endpoint event within "
                                 f"{self.timeout_secs:g} s on {self.url}") from None
        except BaseException:
            await self.aclose()
            raise

    async def _open_stream(self) -> httpx.Response:
        """GET the event stream, logging in first if the server answers 401."""
        assert self._client is not None
        for tries in range(AUTH_TRIES + 1):
            await self._authorize()
            headers = self._auth_headers({**self._headers, "Accept": "text/event-stream"}, "GET")
            request = self._client.build_request("GET", self.url, headers=headers,
                                                 timeout=httpx.Timeout(self.timeout_secs, read=None))
            response = await self._client.send(request, stream=True)
            if response.status_code not in (401, 403):
                return response
            await response.aclose()
            if not await self._challenged(response, tries):
                return response
        return response

    async def _listen(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        assert self._client is not None
        started = False
        with self._cancel:
            try:
                response = await self._open_stream()
                try:
                    content_type = response.headers.get("content-type", "").split(";")[0].strip()
                    if response.status_code != 200 or content_type != "text/event-stream":
                        raise ConnectionLost(f"MCP server '{self.name}': GET {self.url} answered HTTP "
                                             f"{response.status_code} ({content_type or 'no content type'}), "
                                             "not an event stream")
                    decoder = SseDecoder(self.max_message_bytes)
                    async for chunk in response.aiter_raw():
                        for event in decoder.feed(chunk):
                            if event.event == "endpoint" and not started:
                                self.endpoint = self._check_endpoint(event.data.strip())
                                started = True
                                task_status.started()
                            elif event.event == "message" and started and event.data.strip():
                                await self._inbox_send.send(event.data.encode("utf-8"))
                finally:
                    await response.aclose()
                self._ended = "the event stream ended"
            except httpx.HTTPError as exc:
                if not started:
                    raise ConnectionLost(f"MCP server '{self.name}': cannot reach {mask_url(self.url)}: "
                                         f"{reason(exc)}") from None
                self._ended = f"the event stream broke: {exc}"
            except AuthError as exc:
                if not started:
                    raise ConnectionLost(f"MCP server '{self.name}': {exc}") from None
                self._ended = str(exc)
            except ProtocolError as exc:
                if not started:
                    raise
                self._ended = str(exc)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass
            finally:
                self._inbox_send.close()
        if not started:
            raise ConnectionLost(f"MCP server '{self.name}': the event stream on {self.url} "
                                 "closed before its endpoint event")

    def _check_endpoint(self, data: str) -> str:
        endpoint = urljoin(self.url, data)
        if _origin(endpoint) != _origin(self.url):
            raise ProtocolError(f"MCP server '{self.name}' named an endpoint on another origin "
                                f"({_origin(endpoint)[1]}); refused")
        return endpoint

    async def send(self, message: jsonrpc.Message) -> None:
        if self.endpoint is None or self._client is None or self._ended:
            raise TransportClosed(self._ended or "not connected")
        body = jsonrpc.encode(message)
        log_wire("out", getattr(message, "method", None), getattr(message, "id", None), len(body),
                 peer=f"mcp:{self.name}")
        try:
            for tries in range(AUTH_TRIES + 1):
                await self._authorize()
                with trio.fail_after(self.timeout_secs):
                    response = await self._client.post(  # 2024-11-05: no version header
                        self.endpoint, content=body,
                        headers=self._auth_headers(_traced({**self._headers, "Content-Type": "application/json"}),
                                                   "POST", self.endpoint))
                if not await self._challenged(response, tries):
                    break
        except (httpx.HTTPError, trio.TooSlowError) as exc:
            raise TransportClosed(f"POST to {self.endpoint} failed: {exc or type(exc).__name__}") from None
        except AuthError as exc:
            if isinstance(exc, AuthRequired):  # only a person can fix it: end the stream (needs_auth)
                self._ended = str(exc)
                self._cancel.cancel()
            raise TransportClosed(f"POST to {self.endpoint}: {exc}") from None
        if response.status_code >= 400:
            raise TransportClosed(f"POST to {self.endpoint} answered HTTP {response.status_code}")

    async def receive(self) -> bytes:
        try:
            return await self._inbox.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise TransportClosed(self._ended or "transport closed") from None

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            self._cancel.cancel()
            self._inbox_send.close()
            if self._client is not None:
                await self._client.aclose()


def _traced(headers: dict[str, str]) -> dict[str, str]:
    tracing.inject(headers)  # the current span (a request's), when traces are on
    return headers
