"""``POST /mcp``: tern's MCP server over Streamable HTTP, both eras on one endpoint.

The HTTP layer has already checked the key, the rate limit, Host and Origin, and the
body size. Here:

- **Answers**: a request gets JSON, or an SSE stream when the client accepts one and the
  request may produce notifications first (``tools/call``: progress, log messages; a
  prompt that asks: its questions, in the handshake era); a
  client that goes away mid-stream cancels its call. Notifications and responses get
  202. An ``Accept`` with neither JSON nor SSE gets 406.
- **2026-07-28** (``_meta`` carries the version, or ``MCP-Protocol-Version`` says
  2026-07-28): stateless. ``MCP-Protocol-Version`` must equal ``_meta``, ``Mcp-Method``
  the method, ``Mcp-Name`` the tool and each ``Mcp-Param-*`` the argument its tool marks
  with ``x-mcp-header`` (400, -32020, otherwise), except that ``tasks/*`` without
  ``Mcp-Name`` is let through when the body has its ``taskId`` (pydantic-ai's
  ``tasks/get`` sends none; FastMCP's server accepts it); a wrong one never; missing ``_meta`` is
  400/-32602; an unknown method 404/-32601; an unsupported version 400/-32022. GET and
  DELETE are 405, and ``Mcp-Session-Id`` is ignored.
- **Handshake era**: ``initialize`` opens a session and its ``Mcp-Session-Id``; every
  later message must carry it (400 without, 404 when unknown or expired, so the client
  initializes again). Sessions are bounded (``max_sessions``: the least recently used
  idle one makes room) and expire after ``session_idle_secs``. GET opens the session's
  SSE stream (``tools/list_changed``); DELETE ends the session and cancels its calls.
  ``MCP-Protocol-Version``, when present, must be a handshake version (400).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import Any

import msgspec
import trio

from runtime.config import McpServerExposure
from runtime.httpd.messages import Request, Response, StreamResponse
from runtime.mcp import param_headers
from runtime.mcp.protocol import (HANDSHAKE_VERSIONS, HEADER_MISMATCH, META_VERSION, MISSING_CAPABILITY,
                                  MODERN_VERSION, NAMED_PARAMS, UNSUPPORTED_VERSION, header_text)
from runtime.mcp.server.dispatch import MODERN_METHODS, TASK_METHODS, McpServer, Peer
from runtime.wire import jsonrpc
from runtime.wire.sse import encode_event

__all__ = ["McpHttpEndpoint"]

_STATUS_OF_CODE = {
    jsonrpc.METHOD_NOT_FOUND: 404,
    jsonrpc.INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_CAPABILITY: 400,
    UNSUPPORTED_VERSION: 400,
    jsonrpc.INVALID_REQUEST: 400,
    jsonrpc.PARSE_ERROR: 400,
}
_encoder = msgspec.json.Encoder()


def _rpc_error(status: int, code: int, message: str, msg_id: Any = None, data: Any = msgspec.UNSET) -> Response:
    return Response(status, jsonrpc.encode(jsonrpc.error_response(msg_id, code, message, data)))


class McpHttpEndpoint:
    """``POST /mcp`` (and GET, DELETE) over one dispatcher."""

    def __init__(self, server: McpServer, settings: McpServerExposure) -> None:
        self.server = server
        self.max_sessions = settings.max_sessions
        self.idle_secs = settings.session_idle_secs
        self.sessions: OrderedDict[str, Peer] = OrderedDict()

    def add_routes(self, router: Any) -> None:
        router.add("POST", "/mcp", self.post, scope="mcp",
                   summary="MCP (Streamable HTTP, both eras): tern's agents as tools")
        router.add("GET", "/mcp", self.get, scope="mcp", summary="MCP: a session's server-to-client SSE stream")
        router.add("DELETE", "/mcp", self.delete, scope="mcp", summary="MCP: end a session")

    # --- POST -----------------------------------------------------------------------------

    async def post(self, request: Request) -> Response | StreamResponse:
        accept = (request.header(b"accept") or "*/*").lower()
        wants_sse = "text/event-stream" in accept
        wants_json = any(t in accept for t in ("application/json", "application/*", "*/*"))
        if not (wants_sse or wants_json):
            return _rpc_error(
                406,
                jsonrpc.INVALID_REQUEST,
                "Not Acceptable: Accept must include application/json and text/event-stream",
            )
        content_type = (request.header(b"content-type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return _rpc_error(415, jsonrpc.INVALID_REQUEST, "Unsupported Media Type: send application/json")
        try:
            message = jsonrpc.parse(request.body)
        except jsonrpc.InvalidMessage as exc:
            return Response(400, jsonrpc.encode(exc.to_response()))
        params = getattr(message, "params", None)
        meta = params.get("_meta") if isinstance(params, dict) else None
        header_version = request.header(b"mcp-protocol-version")
        if (isinstance(meta, dict) and META_VERSION in meta) or header_version == MODERN_VERSION:
            return await self._modern(request, message, params, meta, header_version, wants_sse, wants_json)
        return await self._handshake(request, message, header_version, wants_sse, wants_json)

    async def _modern(
        self,
        request: Request,
        message: Any,
        params: Any,
        meta: Any,
        header_version: Any,
        wants_sse: bool,
        wants_json: bool,
    ) -> Response | StreamResponse:
        msg_id = getattr(message, "id", None)
        if not isinstance(message, (jsonrpc.Request, jsonrpc.Notification)):
            return Response(202)
        if not (isinstance(meta, dict) and META_VERSION in meta):
            return _rpc_error(400, jsonrpc.INVALID_PARAMS, f"params._meta[{META_VERSION!r}] is required", msg_id)
        problem = self._header_problem(request, message, params, meta, header_version) or \
            self._param_header_problem(request, message, params)
        if problem:
            return _rpc_error(400, HEADER_MISMATCH, problem, msg_id)
        if isinstance(message, jsonrpc.Notification):
            return Response(202)
        if meta.get(META_VERSION) != MODERN_VERSION:
            return _rpc_error(
                400,
                UNSUPPORTED_VERSION,
                "Unsupported protocol version",
                msg_id,
                {"supported": [MODERN_VERSION], "requested": meta.get(META_VERSION)},
            )
        if message.method not in MODERN_METHODS and not (message.method in TASK_METHODS and self.server.tasks):
            return _rpc_error(404, jsonrpc.METHOD_NOT_FOUND, f"method not found: {message.method}", msg_id)
        peer = Peer(f"mcp:http:{request.client[0]}", request.caller)
        return await self._answer(message, peer, wants_sse, wants_json, headers=[])

    @staticmethod
    def _header_problem(request: Request, message: Any, params: Any, meta: dict[str, Any], header_version: Any) -> str:
        if header_version != meta.get(META_VERSION):
            return (
                f"header mismatch: MCP-Protocol-Version is {header_version!r} but _meta says {meta.get(META_VERSION)!r}"
            )
        method = request.header(b"mcp-method")
        if method is None or header_text(method) != message.method:
            return f"header mismatch: Mcp-Method is {method!r} but the body's method is {message.method!r}"
        named = NAMED_PARAMS.get(message.method)
        if named:
            name = request.header(b"mcp-name")
            expected = params.get(named) if isinstance(params, dict) else None
            if name is None and message.method in TASK_METHODS and isinstance(expected, str) and expected:
                return ""  # lenient: a server-issued taskId names it alone (docs/conformance.md, "Mcp-Name")
            if name is None or header_text(name) != expected:
                return f"header mismatch: Mcp-Name is {name!r} but the body names {expected!r}"
        return ""

    def _param_header_problem(self, request: Request, message: Any, params: Any) -> str:
        """``Mcp-Param-*`` against the arguments of a ``tools/call`` whose tool marks some
        with ``x-mcp-header`` (runtime.mcp.param_headers)."""
        if message.method != "tools/call" or not isinstance(params, dict) or not isinstance(params.get("name"), str):
            return ""
        schema = self.server.exposure.input_schema(params["name"])
        return param_headers.problem(schema, params.get("arguments"), lambda name: request.header(name.encode()))

    async def _handshake(
        self, request: Request, message: Any, header_version: Any, wants_sse: bool, wants_json: bool
    ) -> Response | StreamResponse:
        if header_version is not None and header_version not in HANDSHAKE_VERSIONS:
            return _rpc_error(
                400,
                jsonrpc.INVALID_REQUEST,
                f"Bad Request: unsupported MCP-Protocol-Version {header_version!r} "
                f"(supported: {', '.join((MODERN_VERSION, *HANDSHAKE_VERSIONS))})",
                getattr(message, "id", None),
            )
        if isinstance(message, jsonrpc.Request) and message.method == "initialize":
            peer, session_id = self._open_session(request)
            if peer is None:
                return _rpc_error(
                    503, jsonrpc.INTERNAL_ERROR, "too many MCP sessions are open; try again later", message.id
                )
            return await self._answer(
                message, peer, wants_sse, wants_json, headers=[(b"mcp-session-id", session_id.encode())]
            )
        peer, error = self._session(request, getattr(message, "id", None))
        if peer is None:
            return error  # type: ignore[return-value]
        if not isinstance(message, jsonrpc.Request):
            await self.server.handle(message, peer, None)
            return Response(202)
        return await self._answer(message, peer, wants_sse, wants_json, headers=[])

    async def _answer(
        self,
        message: jsonrpc.Request,
        peer: Peer,
        wants_sse: bool,
        wants_json: bool,
        *,
        headers: list[tuple[bytes, bytes]],
    ) -> Response | StreamResponse:
        refusal = self.server.refusal(message) if _is_modern(message) else None
        if refusal is not None:
            return Response(_STATUS_OF_CODE.get(refusal.code, 400),
                            jsonrpc.encode(jsonrpc.error_answer(message.id, refusal)), headers=headers)
        if wants_sse and (self.server.streams(message) or not wants_json):

            async def produce(send: trio.MemorySendChannel[bytes]) -> None:
                async def notify(notification: dict[str, Any]) -> None:
                    await send.send(
                        encode_event(_encoder.encode({"jsonrpc": "2.0", **notification}).decode(), event="message")
                    )

                reply = await self.server.handle(message, peer, notify)
                if reply is not None:
                    await send.send(encode_event(jsonrpc.encode(reply).decode(), event="message"))

            return StreamResponse(produce, headers=headers)
        reply = await self.server.handle(message, peer, None)
        if reply is None:  # cancelled while we waited
            return Response(202, headers=headers)
        status = 200
        if isinstance(reply, jsonrpc.ErrorResponse) and _is_modern(message):
            status = _STATUS_OF_CODE.get(reply.error.code, 200)
        return Response(status, jsonrpc.encode(reply), headers=headers)

    # --- GET and DELETE -------------------------------------------------------------------

    async def get(self, request: Request) -> Response | StreamResponse:
        if request.header(b"mcp-protocol-version") == MODERN_VERSION or request.header(b"mcp-session-id") is None:
            return Response(405, b"", [(b"allow", b"POST, DELETE")])
        peer, error = self._session(request, None)
        if peer is None:
            return error  # type: ignore[return-value]
        if "text/event-stream" not in (request.header(b"accept") or "").lower():
            return _rpc_error(406, jsonrpc.INVALID_REQUEST, "Not Acceptable: GET /mcp is an SSE stream")
        exposure = self.server.exposure

        async def tools(send: trio.MemorySendChannel[bytes]) -> None:
            async for _ in exposure.changes():
                peer.last_seen = time.monotonic()
                await send.send(
                    encode_event('{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}', event="message")
                )

        async def resources(send: trio.MemorySendChannel[bytes]) -> None:
            async for uri in self.server.catalog.updates(peer.subscriptions):
                peer.last_seen = time.monotonic()
                updated = jsonrpc.Notification("notifications/resources/updated", {"uri": uri})
                await send.send(encode_event(jsonrpc.encode(updated).decode(), event="message"))

        async def lists(send: trio.MemorySendChannel[bytes]) -> None:
            async for kind in self.server.catalog.list_changes():
                peer.last_seen = time.monotonic()
                changed = jsonrpc.Notification(f"notifications/{kind}/list_changed")
                await send.send(encode_event(jsonrpc.encode(changed).decode(), event="message"))

        async def produce(send: trio.MemorySendChannel[bytes]) -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tools, send)
                nursery.start_soon(resources, send)
                nursery.start_soon(lists, send)

        return StreamResponse(produce)

    async def delete(self, request: Request) -> Response:
        if request.header(b"mcp-protocol-version") == MODERN_VERSION:
            return Response(405, b"", [(b"allow", b"POST")])
        peer, error = self._session(request, None)
        if peer is None:
            return error  # type: ignore[return-value]
        session_id = request.header(b"mcp-session-id")
        self.sessions.pop(session_id or "", None)
        peer.cancel_all()
        return Response(200, b"{}")

    # --- Sessions -------------------------------------------------------------------------

    def _session(self, request: Request, msg_id: Any) -> tuple[Peer | None, Response | None]:
        session_id = request.header(b"mcp-session-id")
        if session_id is None:
            return None, _rpc_error(
                400,
                jsonrpc.INVALID_REQUEST,
                "Bad Request: Mcp-Session-Id header is required (send initialize first)",
                msg_id,
            )
        peer = self.sessions.get(session_id)
        if peer is not None and request.caller is not None and peer.caller is not None \
                and peer.caller.name != request.caller.name:
            peer = None  # another key's session: not found, as if it never was (the session stays its own)
        elif peer is not None and self._expired(peer):
            del self.sessions[session_id]
            peer.cancel_all()
            peer = None
        if peer is None:
            return None, _rpc_error(
                404, jsonrpc.INVALID_REQUEST, "Session not found: it expired or never existed; initialize again", msg_id
            )
        self.sessions.move_to_end(session_id)
        peer.last_seen = time.monotonic()
        return peer, None

    def _open_session(self, request: Request) -> tuple[Peer | None, str]:
        for session_id in [sid for sid, peer in self.sessions.items() if self._expired(peer)]:
            self.sessions.pop(session_id).cancel_all()
        if len(self.sessions) >= self.max_sessions:
            idle = next((sid for sid, peer in self.sessions.items() if not peer.inflight), None)
            if idle is None:
                return None, ""
            del self.sessions[idle]
        session_id = secrets.token_urlsafe(24)
        peer = Peer(f"mcp:http:{request.client[0]}", request.caller)
        self.sessions[session_id] = peer
        return peer, session_id

    def _expired(self, peer: Peer) -> bool:
        return not peer.inflight and time.monotonic() - peer.last_seen > self.idle_secs


def _is_modern(message: jsonrpc.Request) -> bool:
    params = message.params if isinstance(message.params, dict) else {}
    meta = params.get("_meta")
    return isinstance(meta, dict) and META_VERSION in meta
