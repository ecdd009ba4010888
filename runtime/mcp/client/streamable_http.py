"""The Streamable HTTP transport (MCP 2025-03-26 and later, both eras).

Each request is its own POST, run as its own task, so many calls are in flight at once
and a slow one blocks nobody. The answer is JSON or an SSE stream; everything the
stream carries (server requests and notifications before the response, then the
response) goes to the session in order. Whatever goes wrong with one POST (an HTTP
error, a stream that ends without an answer) becomes a JSON-RPC error for that request
id, so the caller gets a clear error at once. If the server cannot be reached at all,
the transport closes and the supervisor reconnects.

Handshake era: ``Mcp-Session-Id`` is echoed; a 404 for a known session re-runs the
``initialize`` exchange once, transparently, and retries the request; the optional GET
stream carries server notifications; ``DELETE`` ends the session on close.
Modern era (2026-07-28): every POST carries ``MCP-Protocol-Version`` equal to its
``_meta`` version, ``Mcp-Method`` and, for named calls, ``Mcp-Name``; closing the
response stream is how a request is cancelled. Those rules live in the sans-IO
``McpConnection`` (``connection.py``); this module moves the bytes.

Every connection goes through the SSRF guard (``runtime.net.outbound.make_client``).
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any
from collections.abc import AsyncIterator, Mapping

import httpx
import msgspec
import trio
from msgspec import UNSET

from runtime.config.dump import mask_url
from runtime.config import HttpTransport as HttpConfig, oauth_of
from runtime.errors import ProtocolError
from runtime.mcp.client.oauth.model import AuthError, AuthRequired, NotOAuth
from runtime.log import get_logger, log_wire
from runtime.mcp.client.connection import McpConnection
from runtime.mcp.client.inputs import MRTR_METHODS
from runtime.mcp.client.session import TransportClosed
from runtime.mcp.protocol import META_VERSION
from runtime.net.guard import AddressPolicy, check_url
from runtime import tracing
from runtime.net.headers import expand_headers
from runtime.net.outbound import make_client, reason
from runtime.net.tls import client_context
from runtime.wire.retry import Backoff
from runtime.wire import framing, jsonrpc
from runtime.wire.depth import too_deep
from runtime.wire.sse import SseDecoder

__all__ = ["StreamableHttpTransport", "HttpTransportBase"]

log = get_logger("mcp.http")

INBOX_MESSAGES = 256
MAX_RELATED = 64  # server requests whose call is remembered until the session reads them
RESUME_ATTEMPTS = 3
LISTEN = "subscriptions/listen"
LISTEN_OPEN_SECS = 5.0  # how long the handshake waits for the standing GET stream to open
AUTH_TRIES = 4  # new tokens for one request: a login, then step-ups (the OAuth session bounds those too)
ACCEPT = "application/json, text/event-stream"


class _Envelope(msgspec.Struct):
    """Just enough of a message to route it: responses have an id and no method."""

    id: Any = None
    method: str | None = None


_envelope = msgspec.json.Decoder(_Envelope)


def _response_id(body: bytes) -> Any:
    if too_deep(body):
        return None
    try:
        env = _envelope.decode(body)
    except msgspec.DecodeError:
        return None
    return env.id if env.method is None else None


class _NoAnswer(Exception):
    """A POST produced no response for its request; the text says why."""


class HttpTransportBase:
    """What both HTTP transports share: where, how (headers with ``${VAR}`` expanded,
    the SSRF policy, limits), and the inbox the session reads from."""

    def __init__(self, name: str, config: HttpConfig | Any, *, policy: AddressPolicy = AddressPolicy(),
                 timeout_secs: float = 30.0, max_message_bytes: int = framing.MAX_MESSAGE_BYTES,
                 environ: Mapping[str, str] | None = None, state_dir: str = "",
                 authorizer: Any = None) -> None:
        self.name = name
        self.url = config.url
        self.policy = policy
        self.timeout_secs = timeout_secs
        self.max_message_bytes = max_message_bytes
        self._headers = expand_headers(config.headers, f"mcp_servers '{name}'", environ)
        self._client: httpx.AsyncClient | None = None
        self._inbox_send, self._inbox = trio.open_memory_channel[bytes](INBOX_MESSAGES)
        self._related: dict[Any, Any] = {}  # a server request's id -> the call whose stream it came on
        # Every HTTP server without a static Authorization header may ask for a login;
        # one with no [oauth] table only when its 401 carries a Bearer challenge.
        self._oauth_config = oauth_of(config) if state_dir else getattr(config, "oauth", None)
        self._oauth_asked_only = getattr(config, "oauth", None) is None
        self._not_oauth = False
        self.login_required = False  # the server wants a person's login (the supervisor shows needs_auth)
        self._state_dir, self._authorizer, self._environ = state_dir, authorizer, environ
        self.oauth: Any = None  # an OAuthSession once started, if the server is configured for OAuth
        self._bearer: str | None = None  # the Authorization header every request carries
        self._client_cert = (getattr(config, "tls_client_cert", ""), getattr(config, "tls_client_key", ""))

    def _open_client(self) -> httpx.AsyncClient:
        """The guarded HTTP client, and the OAuth session on it if configured."""
        self._client = make_client(self.policy, timeout=self.timeout_secs, tls=client_context(*self._client_cert))
        if self._oauth_config is not None:
            from runtime.mcp.client.oauth.shell import OAuthSession
            from runtime.mcp.client.oauth.store import TokenStore

            self.oauth = OAuthSession(self.name, self.url, self._oauth_config, self._client,
                                      TokenStore(self._state_dir), authorizer=self._authorizer,
                                      environ=self._environ, timeout_secs=self.timeout_secs,
                                      metadata_required=self._oauth_asked_only)
        return self._client

    async def _authorize(self) -> None:
        """Bring the Authorization header up to date (a token near expiry is refreshed)."""
        if self.oauth is not None:
            self._bearer = await self.oauth.authorization()

    def _auth_headers(self, headers: dict[str, str], method: str = "POST", url: str = "") -> dict[str, str]:
        """The token, and for a DPoP-bound one a fresh proof naming this request."""
        if self._bearer:
            headers["Authorization"] = self._bearer
            proof = self.oauth.proof(method, url or self.url, self._bearer) if self.oauth is not None else ""
            if proof:
                headers["DPoP"] = proof
        return headers

    async def _challenged(self, response: httpx.Response, tries: int) -> bool:
        """Every answer passes here: one that went through resets the step-up budget (and
        may name the next DPoP nonce). A 401 or 403: True if a new token was obtained and
        the request should be sent again (at most ``AUTH_TRIES`` times). AuthError if the
        flow failed."""
        if self.oauth is not None and response.status_code < 400:
            if self._bearer and self._bearer.startswith("DPoP "):
                self.oauth.succeeded(response.request.headers.get("dpop", ""), response.headers.get("dpop-nonce", ""))
            else:
                self.oauth.succeeded()
        if self.oauth is None or response.status_code not in (401, 403) or tries >= AUTH_TRIES:
            return False
        challenges = response.headers.get_list("www-authenticate")
        if self._oauth_asked_only and (self._not_oauth or not any(
                c.strip().lower().startswith(("bearer", "dpop")) for c in challenges)):
            return False  # a server nobody configured for OAuth, refusing without asking for a login
        try:
            if not await self.oauth.challenged(response.status_code, challenges, self._bearer,
                                               sent_proof=response.request.headers.get("dpop", ""),
                                               nonce=response.headers.get("dpop-nonce", "")):
                return False
        except AuthRequired:
            self.login_required = True
            raise
        except NotOAuth as exc:
            log.info("%s: the refusal stands", exc)
            self._not_oauth = True  # asked once; its next refusals are just refusals
            return False
        self._bearer = await self.oauth.authorization()
        return True


class StreamableHttpTransport(HttpTransportBase):
    """One MCP server reached over Streamable HTTP."""

    def __init__(self, name: str, config: HttpConfig, **options: Any) -> None:
        super().__init__(name, config, **options)
        self._tasks: trio.Nursery | None = None
        self._stopped = trio.Event()
        self._broken = ""
        self._inflight: dict[Any, trio.CancelScope] = {}
        self._modern_ids: set[Any] = set()  # requests sent as 2026-07-28 (a relayed client's era per request)
        self.connection = McpConnection("sequential")  # POST server/discover; a legacy server refuses it at once
        self._reinit_lock = trio.Lock()
        # Set once an initialize POST has its answer's headers (the session id): what a
        # pipelining client sends meanwhile waits for it (see ``send``).
        self._handshake: trio.Event | None = None

    # --- Life cycle ---------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        check_url(self.url, self.policy)  # a clear error before any connection
        self._open_client()
        await nursery.start(self._run)

    async def _run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as tasks:
            self._tasks = tasks
            task_status.started()
            await self._stopped.wait()
            tasks.cancel_scope.cancel()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            if self._stopped.is_set():
                return
            if self.connection.session_id and self._client is not None:
                with trio.move_on_after(2.0):
                    try:
                        await self._client.delete(self.url, headers=self._request_headers(None, "DELETE"))
                    except httpx.HTTPError as exc:
                        log.debug("MCP server '%s': DELETE of the session failed: %s", self.name, exc)
            self._stopped.set()
            self._inbox_send.close()
            if self._client is not None:
                await self._client.aclose()

    def _break(self, reason: str) -> None:
        """The server cannot be reached: end the connection so the supervisor acts."""
        if not self._broken:
            self._broken = reason
            log.warning("MCP server '%s': %s", self.name, reason)
        self._inbox_send.close()

    # --- Moving messages ----------------------------------------------------------------

    async def receive(self) -> bytes:
        try:
            return await self._inbox.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise TransportClosed(self._broken or "transport closed") from None

    async def _deliver(self, body: bytes) -> None:
        try:
            await self._inbox_send.send(body)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # closing: nobody is listening any more

    def _note_related(self, body: bytes, request: jsonrpc.Request) -> None:
        """A server request on a call's own stream belongs to that call (the session
        asks ``related``); at most MAX_RELATED are remembered."""
        if request.method not in MRTR_METHODS or b'"method"' not in body:
            return
        try:
            message = jsonrpc.parse(body)
        except jsonrpc.InvalidMessage:
            return
        if isinstance(message, jsonrpc.Request):
            if len(self._related) >= MAX_RELATED:
                del self._related[next(iter(self._related))]
            self._related[message.id] = request.id

    def related(self, request_id: Any) -> Any:
        """The id of the call whose response stream carried server request ``request_id``
        (None: another stream), once."""
        return self._related.pop(request_id, None)

    async def send(self, message: jsonrpc.Message) -> None:
        if self._tasks is None or self._stopped.is_set() or self._broken:
            raise TransportClosed(self._broken or "transport closed")
        if isinstance(message, jsonrpc.Request) and message.method == "initialize":
            self._handshake = trio.Event()
        elif self._handshake is not None and not self._handshake.is_set() and getattr(message, "method", "") != "ping":
            # A relayed client may pipeline (the tern mcp relay forwards what arrives):
            # sent before the session id is known, the server would refuse it.
            with trio.move_on_after(self.timeout_secs):
                await self._handshake.wait()
        body = jsonrpc.encode(message)
        log_wire("out", getattr(message, "method", None), getattr(message, "id", None), len(body),
                 peer=f"mcp:{self.name}")
        self.connection.note_sent(message, body)
        if isinstance(message, jsonrpc.Request):
            scope = trio.CancelScope()
            self._inflight[message.id] = scope
            meta = message.params.get("_meta") if isinstance(message.params, dict) else None
            if isinstance(meta, dict) and META_VERSION in meta:
                self._modern_ids.add(message.id)
            self._tasks.start_soon(self._request_task, message, body, scope)
            return
        if isinstance(message, jsonrpc.Notification) and message.method == "notifications/cancelled":
            params = message.params if isinstance(message.params, dict) else {}
            scope = self._inflight.pop(params.get("requestId"), None)
            if scope is not None:
                scope.cancel()
            if self.connection.era == "modern" or params.get("requestId") in self._modern_ids:
                return  # 2026-07-28: closing the response stream is the cancellation (a POST gets 400)
        await self._post_one_way(message, body)
        if isinstance(message, jsonrpc.Notification) and message.method == "notifications/initialized":
            # The standing stream is open (or refused) before the session is used, so
            # nothing the server sends on it right after the handshake is missed.
            listening = trio.Event()
            self._tasks.start_soon(self._listen, listening)
            with trio.move_on_after(min(self.timeout_secs, LISTEN_OPEN_SECS)):
                await listening.wait()

    async def _post_one_way(self, message: jsonrpc.Message, body: bytes) -> None:
        """Notifications and responses: the server answers 202 and no body."""
        assert self._client is not None
        try:
            tries = 0
            while True:
                await self._authorize()
                with trio.fail_after(self.timeout_secs):
                    response = await self._client.post(self.url, content=body,
                                                       headers=self._request_headers(message))
                if not await self._challenged(response, tries):
                    break
                tries += 1
        except (httpx.HTTPError, trio.TooSlowError) as exc:
            raise TransportClosed(f"POST failed: {exc or type(exc).__name__}") from None
        except AuthError as exc:
            raise TransportClosed(str(exc)) from None
        if response.status_code >= 400:
            log.warning("MCP server '%s' refused a %s with HTTP %d", self.name,
                        getattr(message, "method", "response"), response.status_code)

    def _request_headers(self, message: jsonrpc.Message | None, method: str = "POST") -> dict[str, str]:
        headers = {**self._headers, "Accept": ACCEPT, "Content-Type": "application/json"}
        tracing.inject(headers)  # the current span (a request's), when traces are on
        return self.connection.add_headers(self._auth_headers(headers, method), message)

    # --- One request --------------------------------------------------------------------

    async def _request_task(self, request: jsonrpc.Request, body: bytes, scope: trio.CancelScope) -> None:
        try:
            with scope:
                try:
                    await self._exchange(request, body)
                except _NoAnswer as exc:
                    await self._fail(request, str(exc))
                except httpx.TransportError as exc:
                    await self._fail(request, f"cannot reach {mask_url(self.url)}: {reason(exc)}")
                    if isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError)):
                        self._break(f"cannot reach {mask_url(self.url)}: {reason(exc)}")
                except (ProtocolError, AuthError) as exc:  # e.g. an oversized SSE event, a failed login
                    await self._fail(request, str(exc))
                    if isinstance(exc, AuthRequired):
                        self._break(str(exc))  # only a person can fix it: the supervisor shows needs_auth
        finally:
            self._inflight.pop(request.id, None)
            self._modern_ids.discard(request.id)
            if request.method == "initialize" and self._handshake is not None:
                self._handshake.set()  # failed or answered: nothing waits longer than the request

    async def _fail(self, request: jsonrpc.Request, text: str) -> None:
        await self._deliver(jsonrpc.encode(jsonrpc.error_response(request.id, -32603, text)))

    async def _exchange(self, request: jsonrpc.Request, body: bytes, *, retried: bool = False,
                        auth_tries: int = 0) -> None:
        assert self._client is not None
        generation = self.connection.generation
        await self._authorize()
        headers = self._request_headers(request)
        # No read timeout on a request's response: a listen stream is quiet for as long as
        # nothing changes, and a call's stream while the server's question waits for a
        # person (the call's clock is stopped then). The session's watchdog bounds each
        # call by its own deadline, and its cancellation closes this stream.
        timeout = httpx.Timeout(self.timeout_secs, read=None)
        async with self._client.stream("POST", self.url, content=body, headers=headers, timeout=timeout) as response:
            if await self._challenged(response, auth_tries):
                await response.aclose()
                await self._exchange(request, body, retried=retried, auth_tries=auth_tries + 1)
                return
            self.connection.note_session(request.method, response.headers.get("mcp-session-id"))
            if request.method == "initialize" and self._handshake is not None:
                self._handshake.set()
            if self.connection.on_status(response.status_code, headers, retried=retried) == "reinitialize":
                await response.aclose()
                if await self._reinitialize(generation):
                    await self._exchange(request, body, retried=True)
                    return
            answered = False
            last_event_id, retry_ms = "", None
            async with aclosing(self._messages(response, request)) as messages:
                async for message in messages:
                    if isinstance(message, tuple):  # the stream ended: how to resume it
                        last_event_id, retry_ms = message
                        break
                    self._note_related(message, request)
                    await self._deliver(message)
                    if _response_id(message) == request.id:
                        answered = True
                        break
        if not answered and last_event_id and self.connection.era != "modern":
            answered = await self._resume(request, last_event_id, retry_ms)
        if not answered:
            raise _NoAnswer(self._no_answer_text(response))

    def _no_answer_text(self, response: httpx.Response) -> str:
        status = response.status_code
        if status in (401, 403):
            return (f"HTTP {status} from {mask_url(self.url)}: the server wants credentials "
                    "(set headers in [mcp_servers.transport])")
        if status >= 400:
            return f"HTTP {status} from {self.url}"
        return f"HTTP {status} from {self.url} with no JSON-RPC answer"

    async def _messages(self, response: httpx.Response, request: jsonrpc.Request) -> AsyncIterator[Any]:
        """Each JSON-RPC message in a response body, JSON or SSE, size-bounded. An SSE
        stream that ends yields ``(last_event_id, retry_ms)`` last."""
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "text/event-stream" and response.status_code == 200:
            decoder = SseDecoder(self.max_message_bytes)
            async for chunk in response.aiter_raw():
                for event in decoder.feed(chunk):
                    if event.event == "message" and event.data.strip():
                        yield event.data.encode("utf-8")
            yield (decoder.last_event_id, decoder.retry)
            return
        if response.status_code == 202:
            return
        data = bytearray()
        async for chunk in response.aiter_raw():
            data += chunk
            if len(data) > self.max_message_bytes:
                raise _NoAnswer(f"the answer from {self.url} is larger than {self.max_message_bytes} bytes")
        if not data.strip():
            return
        body = bytes(data)
        # A JSON-RPC error about this request may come with any status (2026-07-28
        # answers an unknown method with 404 and -32601). An error with a null id
        # (the SDK's "missing session") is still about this POST: re-address it.
        try:
            message = jsonrpc.parse(body)
        except jsonrpc.InvalidMessage:
            if response.status_code < 400:
                log.warning("MCP server '%s' answered %s with a body that is not JSON-RPC",
                            self.name, request.method)
            return
        if isinstance(message, jsonrpc.ErrorResponse) and message.id is None:
            message = jsonrpc.ErrorResponse(id=request.id, error=message.error)
            body = jsonrpc.encode(message)
        yield body

    async def _resume(self, request: jsonrpc.Request, last_event_id: str, retry_ms: int | None) -> bool:
        """SSE polling (SEP-1699): the server closed the stream early; GET it again
        with ``Last-Event-ID`` until the answer arrives (a few attempts)."""
        assert self._client is not None
        for _ in range(RESUME_ATTEMPTS):
            await trio.sleep(min((retry_ms or 1000) / 1000, 5.0))
            headers = {**self._request_headers(None, "GET"), "Last-Event-ID": last_event_id}
            headers.pop("Content-Type", None)
            async with self._client.stream("GET", self.url, headers=headers) as response:
                if response.status_code != 200:
                    return False
                async with aclosing(self._messages(response, request)) as messages:
                    async for message in messages:
                        if isinstance(message, tuple):
                            last_event_id, retry_ms = message[0] or last_event_id, message[1]
                            break
                        self._note_related(message, request)
                        await self._deliver(message)
                        if _response_id(message) == request.id:
                            return True
        return False

    async def _reinitialize(self, generation: int) -> bool:
        """The server forgot our session (404): run ``initialize`` again, once."""
        assert self._client is not None
        async with self._reinit_lock:
            expired = self.connection.session_id
            action = self.connection.session_expired(generation)
            if action != "initialize":
                return action == "retry"
            log.info("MCP server '%s' expired session %s; initializing again", self.name, expired)
            body = self.connection.initialize_body
            assert body is not None
            init = jsonrpc.parse(body)
            assert isinstance(init, jsonrpc.Request)
            try:
                with trio.fail_after(self.timeout_secs):
                    async with self._client.stream("POST", self.url, content=body,
                                                   headers=self._request_headers(init)) as response:
                        self.connection.note_session(init.method, response.headers.get("mcp-session-id"))
                        ok = False
                        async with aclosing(self._messages(response, init)) as messages:
                            async for message in messages:
                                if not isinstance(message, tuple) and _response_id(message) == init.id:
                                    ok = isinstance(jsonrpc.parse(message), jsonrpc.Response)
                                    break
                    if not ok:
                        return False
                    await self._post_one_way(jsonrpc.Notification("notifications/initialized", UNSET),
                                             jsonrpc.encode(jsonrpc.Notification("notifications/initialized",
                                                                                 UNSET)))
            except (httpx.HTTPError, trio.TooSlowError, TransportClosed, ProtocolError) as exc:
                log.warning("MCP server '%s': initializing again failed: %s", self.name, exc)
                return False
            self.connection.reinitialized()
            return True

    # --- The optional GET stream (handshake era) ----------------------------------------

    async def _listen(self, listening: trio.Event) -> None:
        """Server-initiated messages on a standing GET stream, if the server offers one;
        reconnects with ``Last-Event-ID`` and backoff, stops at 405 or any 4xx.
        ``listening`` is set once the first GET is answered (or has failed)."""
        assert self._client is not None
        backoff, last_event_id = Backoff(1.0, 30.0), ""
        stand_in = jsonrpc.Request(0, "(GET stream)", UNSET)
        while not self._stopped.is_set() and self.connection.era == "handshake":
            headers = self._request_headers(None, "GET")
            headers.pop("Content-Type", None)
            headers["Accept"] = "text/event-stream"
            if last_event_id:
                headers["Last-Event-ID"] = last_event_id
            try:
                async with self._client.stream("GET", self.url, headers=headers,
                                               timeout=httpx.Timeout(self.timeout_secs, read=None)) as response:
                    listening.set()
                    if response.status_code != 200:
                        log.debug("MCP server '%s' offers no GET stream (HTTP %d)", self.name, response.status_code)
                        return
                    backoff.reset()
                    async with aclosing(self._messages(response, stand_in)) as messages:
                        async for message in messages:
                            if isinstance(message, tuple):
                                last_event_id = message[0] or last_event_id
                                break
                            await self._deliver(message)
            except (httpx.HTTPError, ProtocolError, _NoAnswer) as exc:
                log.debug("MCP server '%s': GET stream ended: %s", self.name, exc)
            listening.set()
            await trio.sleep(backoff.next())
