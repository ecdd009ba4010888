"""The JSON-RPC binding of every dialect: one POST per call, the dialect read from
the method (``tasks/send`` is 0.1, ``message/send`` 0.3, ``SendMessage`` 1.0, which
needs ``A2A-Version: 1.x``; none means 0.3, per the spec)."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import trio
from msgspec import UNSET

from runtime.a2a import protocol
from runtime.a2a.protocol import TRAITS
from runtime.a2a.server.engine import A2aError
from runtime.a2a.server.handler import ANSWERED, A2aHandler, error_of
from runtime.a2a.server.request import caller_of, json_names, require_1x
from runtime.errors import RpcError
from runtime.httpd.messages import Request, Response, StreamResponse
from runtime.wire import jsonrpc
from runtime.wire.sse import encode_event

__all__ = ["JsonRpcBinding"]


class JsonRpcBinding:
    """``agent_of(request)`` names the agent the request's path is for."""

    def __init__(self, handler: A2aHandler, agent_of: Callable[[Request], str],
                 extended_card: Callable[[Request, str], Any] | None = None) -> None:
        self.handler = handler
        self.agent_of = agent_of
        self.extended = extended_card

    async def rpc(self, request: Request) -> Response | StreamResponse:
        agent = self.agent_of(request)
        content_type = (request.header(b"content-type") or "").split(";")[0].strip().lower()
        if content_type and content_type != "application/json" and not content_type.endswith("+json"):
            return _error(None, protocol.CONTENT_TYPE_NOT_SUPPORTED,
                          f"Content-Type {content_type!r} is not supported: send application/json", "1.0")
        try:
            message = jsonrpc.parse(request.body)
        except jsonrpc.InvalidMessage as exc:
            return Response(200, jsonrpc.encode(exc.to_response()))
        if isinstance(message, jsonrpc.Notification):  # A2A has no notifications: answer it, with id null
            message = jsonrpc.Request(None, message.method, message.params)  # type: ignore[arg-type]
        if not isinstance(message, jsonrpc.Request):
            return Response(204)  # a response from the client: nothing to say
        params = message.params if isinstance(message.params, dict) else {}
        row = protocol.METHODS.get(message.method)
        dialect = row.dialect if row else "0.3"
        traits = TRAITS[dialect]
        if traits.proto_json:
            params = json_names(params)
        try:
            if row is None:
                raise RpcError(jsonrpc.METHOD_NOT_FOUND, f"method not found: {message.method}")
            if traits.version:
                require_1x(request, message.method)
            if row.op == "extended_card" and self.extended is not None:
                result = self.extended(request, agent)
            else:
                result = await self.handler.call(message.method, params, agent, _framer(message.id),
                                                 caller=caller_of(request), who=request.caller)
        except ANSWERED as exc:
            code, text = error_of(exc)
            if isinstance(exc, A2aError) and row is not None and row.op == "resubscribe" \
                    and traits.resubscribe_errors_in_stream:
                return _error_stream(message.id, code, text)  # 0.3 clients read a stream: the error in it
            return _error(message.id, code, text, dialect)
        if isinstance(result, StreamResponse):
            return result
        return Response(200, jsonrpc.encode(jsonrpc.Response(message.id, result)))


def _framer(msg_id: Any) -> Callable[[Any], bytes]:
    def frame(result: Any) -> bytes:
        return encode_event(jsonrpc.encode(jsonrpc.Response(msg_id, result)).decode())

    return frame


def _error(msg_id: Any, code: int, text: str, dialect: str) -> Response:
    reason = protocol.reason(code)
    data: Any = UNSET
    if TRAITS[dialect].error_details and reason:
        data = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org"}]
    return Response(200, jsonrpc.encode(jsonrpc.error_response(msg_id, code, text, data)))


def _error_stream(msg_id: Any, code: int, text: str) -> StreamResponse:
    event = encode_event(jsonrpc.encode(jsonrpc.error_response(msg_id, code, text)).decode())

    async def produce(send: trio.MemorySendChannel[bytes]) -> None:
        await send.send(event)

    return StreamResponse(produce)
