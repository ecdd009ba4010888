"""The 1.0 HTTP+JSON binding at ``P/{agent}/rest``: REST-style routes onto the same
operations as JSON-RPC, errors as google.rpc Status bodies with the HTTP status of
``protocol.ERRORS``. Every call needs ``A2A-Version: 1.x``."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable
from urllib.parse import parse_qsl

import msgspec

from runtime.a2a import protocol
from runtime.a2a.server.handler import ANSWERED, A2aHandler, error_of
from runtime.a2a.server.request import caller_of, require_1x
from runtime.httpd.messages import HttpError, Request, Response, StreamResponse
from runtime.wire.depth import JsonTooDeep, check_depth
from runtime.wire.jsonrpc import INVALID_PARAMS
from runtime.wire.sse import encode_event

__all__ = ["HttpJsonBinding"]

_encoder = msgspec.json.Encoder()
Answer = Response | StreamResponse


class HttpJsonBinding:
    """``agent_of(request)`` names the agent the request's path is for."""

    def __init__(self, handler: A2aHandler, agent_of: Callable[[Request], str],
                 extended_card: Callable[[Request, str], Any] | None = None) -> None:
        self.handler = handler
        self.agent_of = agent_of
        self.extended = extended_card

    async def _call(self, request: Request, method: str, params: dict[str, Any]) -> Answer:
        agent = self.agent_of(request)
        try:
            require_1x(request, f"the HTTP+JSON binding ({method})")
            if method == "GetExtendedAgentCard" and self.extended is not None:
                result = self.extended(request, agent)
            else:
                result = await self.handler.call(method, params, agent, _frame, caller=caller_of(request),
                                                 who=request.caller)
        except ANSWERED as exc:
            return _error(*error_of(exc))
        if isinstance(result, StreamResponse):
            return result
        return Response(200, _encoder.encode(result))

    async def send(self, request: Request) -> Answer:
        return await self._call(request, "SendMessage", _body(request))

    async def stream(self, request: Request) -> Answer:
        return await self._call(request, "SendStreamingMessage", _body(request))

    async def list(self, request: Request) -> Answer:
        params: dict[str, Any] = dict(parse_qsl(request.query))
        for key in ("pageSize", "historyLength"):
            if key in params:
                try:
                    params[key] = int(params[key])
                except ValueError:
                    return _error(INVALID_PARAMS, f"{key} must be an integer")
        params["includeArtifacts"] = params.get("includeArtifacts", "").lower() == "true"
        return await self._call(request, "ListTasks", params)

    async def task(self, request: Request) -> Answer:
        task_id, _, verb = request.params["op"].partition(":")
        query = dict(parse_qsl(request.query))
        if request.method == "GET" and not verb:
            params: dict[str, Any] = {"id": task_id}
            if "historyLength" in query:
                try:
                    params["historyLength"] = int(query["historyLength"])
                except ValueError:
                    return _error(INVALID_PARAMS, "historyLength must be an integer")
            return await self._call(request, "GetTask", params)
        if verb == "subscribe":
            return await self._call(request, "SubscribeToTask", {"id": task_id})
        if verb == "cancel" and request.method == "POST":
            return await self._call(request, "CancelTask", {"id": task_id, **_body(request)})
        raise HttpError(404, f"no route for {request.path}")

    async def push(self, request: Request) -> Answer:
        task_id, config_id = request.params["op"], request.params.get("config")
        if request.method == "POST":
            return await self._call(request, "CreateTaskPushNotificationConfig", {**_body(request), "taskId": task_id})
        if request.method == "DELETE":
            return await self._call(request, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})
        if config_id:
            return await self._call(request, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})
        return await self._call(request, "ListTaskPushNotificationConfigs", {"taskId": task_id})

    async def extended_card(self, request: Request) -> Answer:
        return await self._call(request, "GetExtendedAgentCard", {})


def _frame(result: Any) -> bytes:
    return encode_event(_encoder.encode(result).decode())  # the StreamResponse itself, no envelope


def _error(code: int, text: str) -> Response:
    status = protocol.http_status(code)
    reason = protocol.reason(code)
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                "domain": "a2a-protocol.org"}] if reason else []
    return Response(
        status,
        _encoder.encode(
            {
                "error": {
                    "code": status,
                    "status": protocol.STATUS_NAMES.get(status, "UNKNOWN"),
                    "message": text,
                    "details": details,
                }
            }
        ),
    )


def _body(request: Request) -> dict[str, Any]:
    try:
        check_depth(request.body)
        body = msgspec.json.decode(request.body) if request.body else {}
    except (msgspec.DecodeError, JsonTooDeep):
        raise HttpError(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a JSON object")
    return body
