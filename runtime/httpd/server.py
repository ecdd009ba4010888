"""tern's HTTP/1.1 server: h11 for parsing, trio for I/O, our own policy on top.

One task per connection, keep-alive, and a bound on everything a client controls:

- the request head must arrive within ``request_head_timeout_secs`` and fit in
  ``max_header_bytes`` (431); an idle keep-alive connection is closed after
  ``keep_alive_timeout_secs``; every write must finish within ``write_timeout_secs``;
- the body is refused (413) from its Content-Length before a byte is read, and a
  chunked body is cut off the moment it passes ``max_body_bytes``;
- at most ``max_connections`` at once, and ``max_connections_per_client`` from one
  client (``access.client_key``: an IPv6 client by its /64): the next gets a 503 and is
  closed. ``max_connections`` is lowered at start to the open-file soft limit minus a
  reserve (a quarter, at least 64) for files and subprocesses, so the process runs
  out of connection slots, which it answers, before it runs out of descriptors;
- under pressure (above 75% of the cap) a connection that has not started a request
  (new, TLS handshake, or idle keep-alive) gets ``PRESSURE_IDLE_SECS``, not the usual
  timeout, so idle sockets cannot hold the slots that working clients need;
- under pressure, connections not yet proven (no TLS handshake and request head
  completed yet) hold at most a quarter of the slots (``UNPROVEN``): one more sheds one
  of them, and so does a new connection when every slot is taken (with room to spare, a
  burst of a thousand real clients connecting at once is not shed); the one shed is the oldest of the client
  holding the most. So half-open handshakes, reopened as fast as they are closed, can
  neither fill the server nor push out a real client's one handshake (1,200 of them
  from 40 addresses kept 1,000 slots full before);
- a failing ``accept`` (EMFILE, ENFILE) backs off, doubling up to 2 s, and logs once.

Per request, in this order: rate limit (per client address, the route's cost) ->
route -> Host/Origin -> the route's ``admit`` (if any: its own refusals, whether the
key is needed, a lower body limit) -> API key -> body -> handler. So a client without
a key never gets to upload a body, and a flood is refused before any other work.

A handler that raises a ``TernError`` (``HttpError`` included) gets its ``http_status``
and its message as the JSON error body (and ``messages.error_headers``: a spent budget's
``Retry-After``); anything else is a bug and gets a 500 with a
request id (also in the log). Either way the server goes on.

Shutdown (``shutdown()``): stop accepting, close idle connections at once, let requests
in flight finish within ``shutdown_grace_secs``, end streams cleanly, then cancel
whatever is left.
"""

from __future__ import annotations

import itertools
import math
import os
import ssl
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

import h11
import trio

from runtime import tracing
from runtime.config import ServerConfig
from runtime.errors import TernError, single_leaf
from runtime.httpd.access import SELF_WAYS, Access, certificate_subject, client_key, is_loopback, peer_is_owner
from runtime.httpd.metrics import method_label
from runtime.httpd.messages import HttpError, Request, Response, StreamResponse, error_body, error_headers
from runtime.httpd.router import Route, Router
from runtime.log import get_logger

__all__ = ["HttpServer"]

log = get_logger("http")
access_log = get_logger("http.access")  # one info line per request: see HttpServer._access

READ_BYTES = 65536
PRESSURE = 0.75  # above this share of max_connections, connections not in a request go sooner
PRESSURE_IDLE_SECS = 1.0
UNPROVEN = 0.25  # the share of max_connections that connections before their first request head may hold
SHED_PENDING = 64  # connections shed but not yet closed, at most: beyond, a new one is refused (503)
_ACCEPT_BACKOFF_MAX = 2.0


def fd_budget(max_connections: int) -> int:
    """``max_connections``, lowered to leave a reserve of open files (a quarter of the
    soft RLIMIT_NOFILE, at least 64) for the process's own files and subprocesses."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return max_connections
    return max(1, min(max_connections, soft - max(64, soft // 4)))
_JSON = b"application/json"
# on every answer: no answer is a page to frame or a file to sniff (the dashboard adds its CSP)
_HARDENING = ((b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"))
_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


def _head_size(event: h11.Request) -> int:
    """The request head's size on the wire, near enough (h11 strips some whitespace)."""
    return len(event.method) + len(event.target) + 14 + sum(len(name) + len(value) + 4 for name, value in event.headers)


class _H11(h11.Connection):
    """An h11 connection that skips rebuilding a response head it would not change.

    h11 rebuilds every Response before writing it (``_clean_up_response_headers_for_
    sending``), re-running its header regexes, to add framing and ``Connection: close``
    where needed. For a keep-alive response with a Content-Length it changes nothing,
    and that is every plain response tern sends. This leans on h11 internals, so h11 is
    pinned in the lock and tests/http/test_h11_fastpath.py checks that the bytes are
    identical to h11's own in every case.
    """

    def _clean_up_response_headers_for_sending(self, response: h11.Response) -> h11.Response:
        if self._cstate.keep_alive and response.status_code not in (204, 304) \
                and any(name == b"content-length" for name, _ in response.headers):
            return response
        return super()._clean_up_response_headers_for_sending(response)


def _head(status: int, headers: list[tuple[bytes, bytes]]) -> h11.Response:
    """A response head. The header names and values are ours or were checked when the
    handler built its Response (messages.py), so h11's per-header regex pass is skipped."""
    return h11.Response(status_code=status, headers=headers, reason=_REASONS.get(status, b""), _parsed=True)


class _Date:
    """The Date header, formatted at most once a second."""

    def __init__(self) -> None:
        self._second = 0
        self._value = b""

    def get(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = formatdate(now, usegmt=True).encode()
        return self._value


class _Connection:
    """One client connection and its one timer for every timeout.

    ``deadline`` follows ``phase`` ("idle", "head", "body", "write", or "busy" = none
    while a handler runs). Setting it is a float assignment: the server's sweeper task
    cancels ``timer`` (the scope around the whole connection) once it has passed. So a
    request costs no cancel scope and no deadline bookkeeping in trio's run loop; a
    timeout fires up to one sweep tick late, which is nothing against seconds.
    """

    __slots__ = ("stream", "client", "key", "loopback", "h11", "timer", "phase", "deadline", "fd", "sock",
                 "same_user", "subject", "shed")

    def __init__(self, stream: trio.SocketStream, client: tuple[str, int], key: str, max_header_bytes: int) -> None:
        self.stream: trio.abc.Stream = stream  # an SSLStream over it once TLS is on
        self.sock = stream.socket
        self.same_user: str | None = None  # "owner", "self" (tern's own socket) or "": looked up once, when needed
        self.subject: str | None = None  # the verified TLS client certificate's subject (RFC 4514), if any
        self.fd = -1  # plain TCP only: the socket's fd, for the direct first write (HttpServer._send)
        self.client = client
        self.key = key  # the rate limit's and the per-client cap's key (access.client_key)
        self.loopback = is_loopback(client[0])
        self.h11 = _H11(h11.SERVER, max_incomplete_event_size=max_header_bytes)
        self.timer = trio.CancelScope()
        self.phase = "busy"
        self.deadline = math.inf
        self.shed = False  # closed to make room for another (HttpServer._shed)

    def expire_in(self, phase: str, seconds: float) -> None:
        self.phase = phase
        self.deadline = trio.current_time() + seconds

    def no_deadline(self) -> None:
        self.phase = "busy"
        self.deadline = math.inf


class HttpServer:
    def __init__(self, config: ServerConfig, router: Router, access: Access, *, limiter: Any = None,
                 metrics: Any = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.config = config
        self.router = router
        self.access = access
        self.limiter = limiter
        self.metrics = metrics
        self.ssl_context = ssl_context
        self.active = 0
        self.max_connections = fd_budget(config.max_connections)
        if self.max_connections < config.max_connections:
            log.info("max_connections lowered from %d to %d to fit the open-file limit", config.max_connections,
                     self.max_connections)
        self._pressure = max(1, int(self.max_connections * PRESSURE))
        self.max_unproven = max(1, int(self.max_connections * UNPROVEN))
        self._unproven: dict[str, dict[_Connection, None]] = {}  # before their first request head, per client
        self.unproven = 0
        self._shedding = 0  # shed, not yet closed
        self._per_client: dict[str, int] = {}
        self._connections: set[_Connection] = set()
        self._streams: set[trio.CancelScope] = set()
        self._terminating = trio.Event()
        self._stopped = trio.Event()
        self._ids = itertools.count(1)
        self._date = _Date()
        self.bound: list[tuple[str, int]] = []

    # --- Running --------------------------------------------------------------------------

    async def serve(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on ``host:port`` and serve until ``shutdown()``; ``task_status.started``
        gets the bound addresses (port 0 picks a free port)."""
        listeners = await trio.open_tcp_listeners(port, host=host, backlog=1024)
        self.bound = [listener.socket.getsockname()[:2] for listener in listeners]
        async with trio.open_nursery() as connections:
            async with trio.open_nursery() as acceptors:
                acceptors.start_soon(self._sweep)
                for listener in listeners:
                    acceptors.start_soon(self._accept, listener, connections)
                task_status.started(self.bound)
                await self._terminating.wait()
                acceptors.cancel_scope.cancel()
            for listener in listeners:
                await listener.aclose()
            for conn in list(self._connections):
                if conn.phase == "idle":
                    conn.timer.cancel()
            for scope in list(self._streams):
                scope.cancel()
            connections.cancel_scope.deadline = trio.current_time() + self.config.shutdown_grace_secs
        self._stopped.set()

    def shutdown(self) -> None:
        """Begin a graceful shutdown (safe to call more than once)."""
        self._terminating.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _sweep(self) -> None:
        """Cancel every connection whose deadline has passed (see ``_Connection``)."""
        config = self.config
        tick = max(0.02, min(config.request_head_timeout_secs, config.keep_alive_timeout_secs,
                             config.write_timeout_secs) / 10)
        while True:
            await trio.sleep(tick)
            now = trio.current_time()
            if self.active > self._pressure:  # connections not in a request go sooner (see the module doc)
                soon = now + PRESSURE_IDLE_SECS
                for conn in self._connections:
                    if conn.phase in ("idle", "handshake") and conn.deadline > soon:
                        conn.deadline = soon
            for conn in self._connections:
                if conn.deadline < now:
                    conn.timer.cancel()

    async def _accept(self, listener: trio.SocketListener, connections: trio.Nursery) -> None:
        """Accept forever. EMFILE and friends leave the connection in the backlog, so
        the listener stays readable: back off (doubling, up to 2 s) instead of
        spinning, and log once an episode, not once a failure."""
        backoff = 0.0
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if not backoff:
                    log.warning("accept failed (%s); backing off until it succeeds", exc)
                backoff = min(max(backoff * 2, 0.05), _ACCEPT_BACKOFF_MAX)
                await trio.sleep(backoff)
                continue
            if backoff:
                log.info("accepting connections again")
                backoff = 0.0
            connections.start_soon(self._serve_connection, stream)

    # --- One connection -----------------------------------------------------------------

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        try:
            client = stream.socket.getpeername()[:2]
        except OSError:
            await trio.aclose_forcefully(stream)
            return
        if self.active - self._shedding >= self.max_connections:
            if not self.unproven or self._shedding >= SHED_PENDING:
                await self._refuse_full(stream, "too many connections; try again shortly")
                return
            self._shed()  # full: the oldest connection that has sent no request yet makes room
        key = client_key(client[0], self.config.client_ipv6_prefix)
        per_client = self._per_client.get(key, 0)
        if per_client >= self.config.max_connections_per_client > 0:
            await self._refuse_full(stream, "too many connections from your address; try again shortly")
            return
        self._per_client[key] = per_client + 1
        self.active += 1
        conn = _Connection(stream, client, key, self.config.max_header_bytes)
        self._connections.add(conn)
        if self.unproven >= self.max_unproven and self.active > self._pressure:
            self._shed()  # under pressure only: a burst of real clients with room to spare is not shed
        self._unproven.setdefault(key, {})[conn] = None
        self.unproven += 1
        try:
            with conn.timer:
                if self.ssl_context is not None:
                    tls = trio.SSLStream(stream, self.ssl_context, server_side=True)
                    conn.stream = tls
                    conn.expire_in("handshake", self._first_wait())
                    await tls.do_handshake()
                    conn.subject = certificate_subject(tls.getpeercert())
                elif os.name != "nt":  # TLS: every byte must go through the SSLStream instead
                    conn.fd = stream.socket.fileno()
                await self._requests(conn)
            if conn.timer.cancelled_caught:
                await self._timed_out(conn)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError, ssl.SSLError):
            pass  # the client went away, or never finished its TLS handshake
        except Exception:  # one connection must never take the server down
            log.exception("connection from %s failed", client[0])
        finally:
            self.active -= 1
            self._proven(conn)
            if conn.shed:
                self._shedding -= 1
            left = self._per_client[key] - 1
            if left:
                self._per_client[key] = left
            else:
                del self._per_client[key]
            self._connections.discard(conn)
            await trio.aclose_forcefully(conn.stream)

    def _shed(self) -> None:
        """Close the oldest connection that has not yet completed a request head, of the
        client holding the most (a client's one handshake outlasts many others')."""
        most = max(self._unproven.values(), key=len)
        oldest = next(iter(most))
        self._proven(oldest)
        oldest.shed = True
        self._shedding += 1
        oldest.timer.cancel()

    def _proven(self, conn: _Connection) -> None:
        """``conn`` is no longer among the unproven (its head came, or it is gone)."""
        mine = self._unproven.get(conn.key)
        if mine is not None and conn in mine:
            del mine[conn]
            self.unproven -= 1
            if not mine:
                del self._unproven[conn.key]

    def _first_wait(self) -> float:
        """How long a new connection may take to start its first request."""
        if self.active > self._pressure:
            return min(PRESSURE_IDLE_SECS, self.config.request_head_timeout_secs)
        return self.config.request_head_timeout_secs

    async def _refuse_full(self, stream: trio.SocketStream, message: str) -> None:
        conn = h11.Connection(h11.SERVER)
        body = error_body(503, message)
        data = conn.send(h11.Response(status_code=503, reason=b"Service Unavailable", headers=[
            (b"content-type", _JSON), (b"content-length", str(len(body)).encode()), (b"connection", b"close"),
            (b"retry-after", b"1")]))
        with trio.move_on_after(1.0):
            try:
                await stream.send_all(data + body)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        await trio.aclose_forcefully(stream)

    async def _receive(self, conn: _Connection) -> None:
        """Feed h11 the next bytes. On plain TCP, first one direct non-blocking read: a
        keep-alive client has often sent its next request by the time the last answer
        is written, and then the request costs no trip through trio's scheduler at all
        (``_requests`` still yields once a request)."""
        if conn.fd >= 0:
            try:
                data = os.read(conn.fd, READ_BYTES)
            except BlockingIOError:
                pass
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from None
            else:
                conn.h11.receive_data(data)
                return
        data = await conn.stream.receive_some(READ_BYTES)
        conn.h11.receive_data(data)

    async def _requests(self, conn: _Connection) -> None:
        first = True
        while not self._terminating.is_set():
            try:
                event = await self._read_head(conn, first)
            except h11.RemoteProtocolError as exc:
                await self._send_error(conn, exc.error_status_hint, str(exc) or "malformed request", close=True)
                return
            if not isinstance(event, h11.Request):
                return  # closed, timed out, or shutting down
            if first:  # proven: handshake and head complete, no longer among those shed for room
                self._proven(conn)
            first = False
            if _head_size(event) > self.config.max_header_bytes:  # h11 only bounds a head still incomplete
                await self._send_error(conn, 431, f"the request head is larger than {self.config.max_header_bytes} "
                                       "bytes", close=True)
                return
            keep = await self._handle(conn, event)
            if not keep or conn.h11.our_state is h11.MUST_CLOSE:
                return
            if conn.fd >= 0:
                # Direct reads and writes never pass through trio's scheduler: yield once
                # a request, so every connection gets its turn (measured: yielding only
                # every 8 requests took p99 at 32 connections from 8 ms to 96 ms).
                await trio.lowlevel.checkpoint()
            try:
                # Answered before the body was read (404, 405, 401, 429...): the rest of the
                # request may be buffered already (a GET's end always is); if not, close.
                while conn.h11.their_state is h11.SEND_BODY:
                    if conn.h11.next_event() is h11.NEED_DATA:
                        return
                conn.h11.start_next_cycle()
            except (h11.LocalProtocolError, h11.RemoteProtocolError):
                return

    async def _read_head(self, conn: _Connection, first: bool) -> Any:
        """The next request head. While no byte has arrived the timer is the idle
        keep-alive timer (and shutdown may cancel it); from the first byte on, the
        head timeout (``_timed_out`` then answers 408)."""
        event = conn.h11.next_event()  # a pipelined request may be buffered already
        if event is not h11.NEED_DATA:
            conn.no_deadline()  # the last response's write deadline must not bound the handler
            return event
        config = self.config
        conn.expire_in("idle", self._first_wait() if first else config.keep_alive_timeout_secs)
        await self._receive(conn)
        event = conn.h11.next_event()
        if event is h11.NEED_DATA:  # the head came in pieces: now the head timeout
            conn.expire_in("head", config.request_head_timeout_secs)
            while event is h11.NEED_DATA:
                await self._receive(conn)
                event = conn.h11.next_event()
        conn.no_deadline()
        return event

    async def _timed_out(self, conn: _Connection) -> None:
        """The connection's timer fired: a 408 if a request was arriving, else just close."""
        waiting = conn.phase == "body" or (conn.phase == "head" and conn.h11.trailing_data[0])
        if waiting:
            with trio.move_on_after(1.0):
                message = "the request body" if conn.phase == "body" else "the request head"
                await self._send_error(conn, 408, f"{message} did not arrive in time", close=True)

    # --- One request -------------------------------------------------------------------

    def _new_request(self, conn: _Connection, event: h11.Request) -> Request:
        target = event.target.decode("latin-1")
        path, _, query = target.partition("?")
        return Request(event.method.decode("ascii", "replace"), path, query, event.headers, conn.client,
                       next(self._ids))

    async def _handle(self, conn: _Connection, event: h11.Request) -> bool:
        """Answer one request; returns whether the connection may be kept. Traced as a
        SERVER span, under the caller's ``traceparent`` if it sent a valid one."""
        request = self._new_request(conn, event)
        parent = tracing.extract(request.header(b"traceparent"), request.header(b"tracestate")) \
            if tracing.enabled() else None
        method = method_label(request.method)
        with tracing.span(method, tracing.SERVER, {"http.request.method": method, "url.path": request.path},
                          parent=parent) as span:
            return await self._answer(conn, request, span)

    async def _answer(self, conn: _Connection, request: Request, span: Any) -> bool:
        started = time.perf_counter()
        route: Route | None = None
        status = 500
        try:
            if self.limiter is not None:
                wait = self.limiter.check(conn.key, 1.0)
                if wait:
                    raise HttpError(429, "too many requests", [(b"retry-after", str(int(wait) + 1).encode())])
            route, request.params = self.router.match(request.method, request.path)
            request.route = route
            if route.cost > 1.0 and self.limiter is not None:
                wait = self.limiter.check(conn.key, route.cost - 1.0)
                if wait:
                    raise HttpError(429, "too many requests", [(b"retry-after", str(int(wait) + 1).encode())])
            if route.guard_origin:
                self.access.check_origin(request)
            key_required, body_limit = route.auth, self.config.max_body_bytes
            if route.admit is not None:
                key_required, admitted_limit = route.admit(request)
                body_limit = min(body_limit, admitted_limit)
            if key_required:
                if conn.same_user is None and conn.loopback and self.access.needs_peer_owner:
                    conn.same_user = self._peer_is_owner(conn)
                same = conn.same_user == "owner" or conn.same_user == "self" and route.way in SELF_WAYS
                request.caller = self.access.authenticate(request, conn.loopback, same,
                                                          conn.subject).entering(route.way)
                self.access.check_scope(request.caller, route.scope, route.path)
            if route.websocket:
                status = 101
                await self._websocket(conn, request)
                return False
            await self._read_body(conn, request, body_limit)
            if route.watch_disconnect and conn.fd >= 0:
                result = await self._watched(conn, route.handler, request)
            else:
                result = await route.handler(request)
            if isinstance(result, StreamResponse):
                status = result.status
                await self._stream(conn, request, result)
            else:
                status = result.status
                await self._respond(conn, request, result)
            return True
        except TernError as exc:  # the one mapping to HTTP: the error's status, its message
            status = exc.http_status
            if status >= 500 and not isinstance(exc, HttpError):
                log.warning("request %s %s %s failed: %s", request.request_id, request.method,
                            route.path if route else request.path, exc)
            headers = error_headers(exc)
            return await self._send_error(conn, status, str(exc), headers, request,
                                          close=status in (408, 413, 431) or status >= 500)
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            return await self._send_error(conn, status, str(exc) or "malformed request", close=True)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError):
            status = 499  # the client went away, or would not read
            return False
        except Exception:
            status = 500
            log.exception("request %s %s %s failed", request.request_id, request.method,
                          route.path if route else request.path)
            return await self._send_error(conn, 500, "internal error", request=request, close=True, with_id=True)
        finally:
            if span.recording:
                _trace_answer(span, request.method, route, status)
            if self.metrics is not None:
                self.metrics.observe_request(route.path if route else "(unmatched)", method_label(request.method),
                                             status, time.perf_counter() - started)
            if access_log.isEnabledFor(20):  # logging.INFO, without importing logging here
                self._access(request, status, time.perf_counter() - started)

    @staticmethod
    def _access(request: Request, status: int, seconds: float) -> None:
        """The access log line: method, path, status, duration, client, and the key's name
        (``-`` before or without one). Never the query string (a key sent there is refused,
        and must not be kept either), never a header, never a key; the path is cut to 200
        characters (the log escapes control characters); a path that holds a credential
        (``Route.secret_path``: a one-time approval link) is logged as its template."""
        route = request.route
        path = route.path if route is not None and route.secret_path else request.path
        access_log.info("%s %s %d %.1f ms %s %s", request.method[:16], path[:200], status, seconds * 1000,
                        request.client[0], request.caller.name if request.caller is not None else "-")

    @staticmethod
    def _peer_is_owner(conn: _Connection) -> str:
        """Once per connection (no key configured): is the loopback client's socket ours?"""
        try:
            local = conn.sock.getsockname()[:2]
        except OSError:
            return ""
        return peer_is_owner(conn.client, local)

    async def _read_body(self, conn: _Connection, request: Request, limit: int) -> None:
        if request.header(b"transfer-encoding") is not None and request.header(b"content-length") is not None:
            # RFC 9112 6.1: a request smuggling pattern. h11 would go by Transfer-Encoding;
            # a proxy in front may have gone by Content-Length. Refuse, and close.
            raise h11.RemoteProtocolError("a request may not have both Content-Length and Transfer-Encoding",
                                          error_status_hint=400)
        event = conn.h11.next_event()
        if type(event) is h11.EndOfMessage:  # no body (most GETs): no timer, no I/O
            return
        length = request.header(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise HttpError(413, f"the request body is larger than {limit} bytes")
        if event is h11.NEED_DATA and conn.h11.they_are_waiting_for_100_continue:
            await self._send(conn, conn.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        chunks: list[bytes] = []
        size = 0
        conn.expire_in("body", self.config.request_head_timeout_secs)
        while True:
            if event is h11.NEED_DATA:
                await self._receive(conn)
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise HttpError(413, f"the request body is larger than {limit} bytes")
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise trio.BrokenResourceError("client closed mid-body")
            event = conn.h11.next_event()
        conn.no_deadline()
        request.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _watched(self, conn: _Connection, handler: Any, request: Request) -> Any:
        """Run ``handler`` while watching the socket: a client that closes its connection
        cancels it (an agent call then stops, its processes killed) instead of it running
        on for an answer no one reads. Plain TCP only, as in ``_pump``."""
        result: list[Any] = []
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_on_close, conn, nursery.cancel_scope)
                result.append(await handler(request))
                nursery.cancel_scope.cancel()
        except Exception as exc:  # the nursery's group: re-raise the one error inside
            leaf = single_leaf(exc)
            if leaf is not exc and isinstance(leaf, Exception):
                raise leaf from None
            raise
        if not result:
            raise trio.BrokenResourceError("the client closed the connection during the call")
        return result[0]

    def _base_headers(self, request: Request | None) -> list[tuple[bytes, bytes]]:
        headers = [(b"date", self._date.get()), *_HARDENING]
        if request is not None and self.access.cors_origins:
            headers.extend(self.access.cors_headers(request))
        if self._terminating.is_set():
            headers.append((b"connection", b"close"))
        return headers

    async def _send(self, conn: _Connection, data: bytes) -> None:
        """Write with the write timeout. The deadline stays until the next phase sets
        its own (the next head wait; ``_pump`` clears it between chunks).

        On plain TCP the first attempt is one direct non-blocking write: a response
        nearly always fits the socket buffer, and then it costs no trip through trio's
        scheduler. Whatever does not fit goes through ``send_all`` as usual.
        ``_requests`` yields once a request, so no client can starve the others."""
        conn.expire_in("write", self.config.write_timeout_secs)
        if conn.fd >= 0:
            try:
                sent = os.write(conn.fd, data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:  # EPIPE, ECONNRESET: the client is gone
                raise trio.BrokenResourceError(str(exc)) from None
            if sent == len(data):
                return
            data = data[sent:]
        await conn.stream.send_all(data)

    async def _respond(self, conn: _Connection, request: Request, response: Response) -> None:
        body = b"" if request.method == "HEAD" else response.body
        headers = self._base_headers(request) + response.headers
        headers.append((b"content-length", str(len(response.body)).encode()))
        data = conn.h11.send(_head(response.status, headers))
        if body:
            data += conn.h11.send(h11.Data(data=body))
        data += conn.h11.send(h11.EndOfMessage())
        await self._send(conn, data)

    async def _send_error(self, conn: _Connection, status: int, message: str,
                          headers: list[tuple[bytes, bytes]] | None = None, request: Request | None = None,
                          *, close: bool = False, with_id: bool = False) -> bool:
        """An error response if one can still be sent; returns whether to keep the connection."""
        if conn.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return False
        body = error_body(status, message, request.request_id if (request is not None and with_id) else "")
        all_headers = self._base_headers(request) + [(b"content-type", _JSON),
                                                     (b"content-length", str(len(body)).encode())]
        if request is not None and with_id:
            all_headers.append((b"x-request-id", request.request_id.encode()))
        all_headers.extend(headers or [])
        if close:
            all_headers.append((b"connection", b"close"))
        try:
            data = conn.h11.send(_head(status, all_headers))
            if request is None or request.method != "HEAD":
                data += conn.h11.send(h11.Data(data=body))
            data += conn.h11.send(h11.EndOfMessage())
            await self._send(conn, data)
        except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                OSError):
            return False
        return not close

    async def _stream(self, conn: _Connection, request: Request, response: StreamResponse) -> None:
        """A chunked body from the response's producer; keep-alive comments while it is
        quiet; cancelled (and ended cleanly) on shutdown or when the client goes away."""
        headers = self._base_headers(request) + response.headers
        await self._send(conn, conn.h11.send(_head(response.status, headers)))
        conn.no_deadline()
        if request.method != "HEAD":
            scope = trio.CancelScope()
            self._streams.add(scope)
            if self._terminating.is_set():  # began during shutdown: serve() has ended the others already
                scope.cancel()
            try:
                with scope:
                    await self._pump(conn, response)
            except Exception as exc:  # the nursery's group: re-raise the one error inside
                leaf = single_leaf(exc)
                if leaf is not exc and isinstance(leaf, Exception):
                    raise leaf from None
                raise
            finally:
                self._streams.discard(scope)
        with trio.CancelScope(shield=True):  # end the body cleanly, even on shutdown
            with trio.move_on_after(min(self.config.write_timeout_secs, 2.0)):
                await conn.stream.send_all(conn.h11.send(h11.EndOfMessage()))

    async def _pump(self, conn: _Connection, response: StreamResponse) -> None:
        send, receive = trio.open_memory_channel[bytes](16)

        async def produce() -> None:
            async with send:
                await response.producer(send)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            if conn.fd >= 0:  # plain TCP; a cancelled TLS read could leave the TLS state unknown
                # a client that closes mid-stream cancels the producer at once (MCP 2026-07-28
                # cancels a call that way), not at the next keep-alive write
                nursery.start_soon(_cancel_on_close, conn, nursery.cancel_scope)
            while True:
                # The quiet timer covers the wait only, never a write: a chunk cut short by
                # it and followed by a keep-alive would break the chunked framing.
                chunk: bytes | None = None
                with trio.move_on_after(response.keepalive_secs):
                    try:
                        chunk = await receive.receive()
                    except trio.EndOfChannel:
                        nursery.cancel_scope.cancel()  # done: stop watching for a disconnect
                        return
                if chunk is not None:
                    await self._send(conn, conn.h11.send(h11.Data(data=chunk)))
                    conn.no_deadline()
                elif response.keepalive:
                    await self._send(conn, conn.h11.send(h11.Data(data=response.keepalive)))
                    conn.no_deadline()

    async def _websocket(self, conn: _Connection, request: Request) -> None:
        from runtime.httpd.websocket import serve_websocket

        await serve_websocket(conn.stream, conn.h11, request, self._terminating)


def _trace_answer(span: Any, method: str, route: Route | None, status: int) -> None:
    if route is not None:
        span.rename(f"{method_label(method)} {route.path}")
        span.set("http.route", route.path)
        if route.secret_path:
            span.set("url.path", route.path)
    span.set("http.response.status_code", status)
    if status >= 500:
        span.error(str(status))


async def _cancel_on_close(conn: _Connection, scope: trio.CancelScope) -> None:
    """Read while an answer is being made: EOF (the client left) cancels ``scope``; a
    pipelined next request is kept for h11, to be read after this answer."""
    try:
        data = await conn.stream.receive_some(READ_BYTES)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        data = b""
    if data:
        conn.h11.receive_data(data)
        return
    scope.cancel()
