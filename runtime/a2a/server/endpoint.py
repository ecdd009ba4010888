"""tern's A2A server: the three dialects' JSON-RPC methods and the seed's REST routes,
over one task engine, on the daemon's HTTP server.

Routes (``P`` = ``[a2a] listen_path``):

- cards: ``/.well-known/agent-card.json`` (1.0 + 0.3 fields) and ``/.well-known/agent.json``
  (0.1) for ``[a2a] default_agent``; ``P/{agent}/.well-known/agent-card.json``; ``GET P/agents``
  (the seed's ``{agents, total}``). Public, with ETag, Cache-Control and Last-Modified.
- JSON-RPC at each card's URL, ``P/{agent}`` (with or without the trailing slash: the 1.0
  TCK posts to ``<url>/``), and at ``P`` for the default agent. The dialect comes from
  the method: ``tasks/send`` is 0.1, ``message/send`` 0.3, ``SendMessage`` 1.0 (which
  needs ``A2A-Version: 1.x``; none means 0.3, per the spec).
- the seed's REST: ``POST P/tasks/send``, ``GET P/tasks/{id}``, ``POST P/tasks/{id}/cancel``.

Everything but the cards needs the key (task contents are private).
"""

from __future__ import annotations

import hashlib
import time
from email.utils import formatdate
from typing import Any, Callable, Union

import msgspec
import trio

from runtime.a2a import dialects
from runtime.a2a.dialects import BadMessage, Dialect
from runtime.a2a.server.engine import A2aError, TaskNotFound, UnsupportedOperation
from runtime.a2a.model import StatusEvent, Task
from runtime.a2a.server.runner import A2aService
from runtime.config import Config
from runtime.errors import RpcError
from runtime.httpd.messages import HttpError, Request, Response, StreamResponse, json_response
from runtime.wire import jsonrpc
from runtime.wire.sse import encode_event

__all__ = ["A2aEndpoint"]

_REST = object()  # stands in for a JSON-RPC id: the answer goes out without an envelope
BLOCKING_WAIT_SECS = 300.0  # a blocking send returns the task as it is after this long
_encoder = msgspec.json.Encoder()

METHODS_01 = {"tasks/send", "tasks/sendSubscribe"}
METHODS_03 = {"message/send", "message/stream", "tasks/resubscribe", "tasks/pushNotificationConfig/set",
              "tasks/pushNotificationConfig/get", "tasks/pushNotificationConfig/list",
              "tasks/pushNotificationConfig/delete", "agent/getAuthenticatedExtendedCard",
              "tasks/pushNotification/set", "tasks/pushNotification/get"}
METHODS_10 = {"SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask",
              "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
              "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard"}
SHARED = {"tasks/get", "tasks/cancel"}  # 0.1 and 0.3: answered in the task's own dialect
_HTTP_STATUS = {-32001: 404, -32002: 400, -32003: 400, -32004: 400, -32005: 400, -32006: 500, -32007: 400,
                -32008: 400, -32009: 400, -32602: 400, -32600: 400, -32601: 404, -32700: 400, -32603: 500}
_STATUS_NAME = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 500: "INTERNAL", 409: "FAILED_PRECONDITION"}
_REASONS = {-32001: "TASK_NOT_FOUND", -32002: "TASK_NOT_CANCELABLE", -32003: "PUSH_NOTIFICATION_NOT_SUPPORTED",
            -32004: "UNSUPPORTED_OPERATION", -32005: "CONTENT_TYPE_NOT_SUPPORTED", -32007:
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED", -32009: "VERSION_NOT_SUPPORTED"}


_Fault = RpcError  # the one carrier of JSON-RPC errors, under the name this module uses


class A2aEndpoint:
    """Every A2A route over one ``A2aService``. ``bound()`` is the listener's
    ``(host, port)`` once the daemon listens (the cards' fallback URL)."""

    def __init__(self, config: Config, service: A2aService, *, secured: bool,
                 bound: Callable[[], Any] = lambda: None) -> None:
        self.config = config
        self.engine = service.engine
        self.push = service.push
        self.bound = bound
        self.secured = secured
        self.agents = {agent.name: agent for agent in self.config.agents}
        self.default_agent = self.config.a2a.default_agent or (self.config.agents[0].name if self.config.agents else "")
        self.started = time.time()

    def add_routes(self, router: Any) -> None:
        path = self.config.a2a.listen_path.rstrip("/")
        public = {"auth": False, "guard_origin": False}
        router.add("GET", "/.well-known/agent-card.json", self.default_card, **public, summary="A2A agent card (1.0)")
        router.add("GET", "/.well-known/agent.json", self.default_legacy_card, **public,
                   summary="A2A agent card (0.1 shape)")
        router.add("GET", f"{path}/agents", self.list_agents, **public, summary="A2A: every agent's card")
        router.add("GET", f"{path}/{{agent}}/.well-known/agent-card.json", self.agent_card, **public,
                   summary="A2A: one agent's card")
        for rpc_path in (path, f"{path}/"):
            router.add("POST", rpc_path, self.rpc, summary="A2A JSON-RPC for the default agent")
        router.add("POST", f"{path}/{{agent}}", self.rpc, summary="A2A JSON-RPC for one agent (also at its URL + /)")
        rest = f"{path}/{{agent}}/rest"
        router.add("POST", f"{rest}/message:send", self.http_send, summary="A2A 1.0 HTTP+JSON: SendMessage")
        router.add("POST", f"{rest}/message:stream", self.http_stream, summary="A2A 1.0 HTTP+JSON: SendStreamingMessage")
        router.add("GET", f"{rest}/tasks", self.http_list, summary="A2A 1.0 HTTP+JSON: ListTasks")
        router.add("GET", f"{rest}/tasks/{{op}}", self.http_task, summary="A2A 1.0 HTTP+JSON: GetTask, SubscribeToTask")
        router.add("POST", f"{rest}/tasks/{{op}}", self.http_task, summary="A2A 1.0 HTTP+JSON: CancelTask, SubscribeToTask")
        configs = f"{rest}/tasks/{{op}}/pushNotificationConfigs"
        router.add("POST", configs, self.http_push, summary="A2A 1.0 HTTP+JSON: CreateTaskPushNotificationConfig")
        router.add("GET", configs, self.http_push, summary="A2A 1.0 HTTP+JSON: ListTaskPushNotificationConfigs")
        router.add("GET", f"{configs}/{{config}}", self.http_push, summary="A2A 1.0 HTTP+JSON: GetTaskPushNotificationConfig")
        router.add("DELETE", f"{configs}/{{config}}", self.http_push,
                   summary="A2A 1.0 HTTP+JSON: DeleteTaskPushNotificationConfig")
        router.add("GET", f"{rest}/extendedAgentCard", self.http_extended_card,
                   summary="A2A 1.0 HTTP+JSON: GetExtendedAgentCard")
        router.add("POST", f"{path}/tasks/send", self.rest_send, summary="A2A (seed REST): send a task")
        router.add("GET", f"{path}/tasks/{{id}}", self.rest_get, summary="A2A (seed REST): a task")
        router.add("POST", f"{path}/tasks/{{id}}/cancel", self.rest_cancel, summary="A2A (seed REST): cancel a task")

    # --- Cards ------------------------------------------------------------------------------

    def _base(self, request: Request) -> str:
        from runtime.a2a.server.cards import base_url

        return base_url(self.config, self.bound(), request.header(b"host"))

    def _cached(self, request: Request, body: Any) -> Response:
        data = _encoder.encode(body)
        etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
        headers = [(b"etag", etag.encode()), (b"cache-control", b"public, max-age=60"),
                   (b"last-modified", formatdate(self.started, usegmt=True).encode())]
        if request.header(b"if-none-match") == etag:
            return Response(304, b"", headers)
        return Response(200, data, headers)

    def _agent(self, name: str) -> Any:
        agent = self.agents.get(name)
        if agent is None:
            raise HttpError(404, f"no agent named {name!r}")
        return agent

    async def default_card(self, request: Request) -> Response:
        from runtime.a2a.server.cards import card

        return self._cached(request, card(self.config, self._agent(self.default_agent), self._base(request),
                                          secured=self.secured))

    async def default_legacy_card(self, request: Request) -> Response:
        from runtime.a2a.server.cards import legacy_card

        return self._cached(request, legacy_card(self.config, self._agent(self.default_agent), self._base(request),
                                                 secured=self.secured))

    async def agent_card(self, request: Request) -> Response:
        from runtime.a2a.server.cards import card

        return self._cached(request, card(self.config, self._agent(request.params["agent"]), self._base(request),
                                          secured=self.secured))

    async def list_agents(self, request: Request) -> Response:
        from runtime.a2a.server.cards import card

        base = self._base(request)
        cards = [card(self.config, agent, base, secured=self.secured) for agent in self.config.agents]
        return self._cached(request, {"agents": cards, "total": len(cards)})

    # --- JSON-RPC ---------------------------------------------------------------------------

    async def rpc(self, request: Request) -> Union[Response, StreamResponse]:
        agent = self._agent(request.params.get("agent", self.default_agent)).name
        content_type = (request.header(b"content-type") or "").split(";")[0].strip().lower()
        if content_type and content_type != "application/json" and not content_type.endswith("+json"):
            return self._error(None, -32005, f"Content-Type {content_type!r} is not supported: send application/json",
                               "1.0")
        try:
            message = jsonrpc.parse(request.body)
        except jsonrpc.InvalidMessage as exc:
            return json_response(msgspec.to_builtins(exc.to_response()))
        if isinstance(message, jsonrpc.Notification):  # A2A has no notifications: answer it, with id null
            message = jsonrpc.Request(None, message.method, message.params)  # type: ignore[arg-type]
        if not isinstance(message, jsonrpc.Request):
            return Response(204)  # a response from the client: nothing to say
        params = message.params if isinstance(message.params, dict) else {}
        method = message.method
        if method in METHODS_10:
            params = _json_names(params)
        dialect: Dialect = "1.0" if method in METHODS_10 else "0.1" if method in METHODS_01 else "0.3"
        try:
            if method in METHODS_10:
                _require_1x(request, method)
            elif method not in METHODS_01 | METHODS_03 | SHARED:
                raise _Fault(jsonrpc.METHOD_NOT_FOUND, f"method not found: {method}")
            result = await self._call(method, params, agent, dialect, message.id)
        except _Fault as fault:
            return self._error(message.id, fault.code, fault.message, dialect)
        except A2aError as exc:
            return self._error(message.id, exc.code, str(exc), dialect)
        except BadMessage as exc:
            return self._error(message.id, jsonrpc.INVALID_PARAMS, str(exc), dialect)
        if isinstance(result, StreamResponse):
            return result
        return Response(200, _encoder.encode({"jsonrpc": "2.0", "id": message.id, "result": result}))

    def _error(self, msg_id: Any, code: int, text: str, dialect: Dialect) -> Response:
        error: dict[str, Any] = {"code": code, "message": text}
        if dialect == "1.0" and code in _REASONS:
            error["data"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": _REASONS[code],
                              "domain": "a2a-protocol.org"}]
        return Response(200, _encoder.encode({"jsonrpc": "2.0", "id": msg_id, "error": error}))

    async def _call(self, method: str, params: dict[str, Any], agent: str, dialect: Dialect, msg_id: Any) -> Any:
        if method in ("tasks/send", "message/send", "SendMessage"):
            return await self._send(params, agent, dialect)
        if method in ("tasks/sendSubscribe", "message/stream", "SendStreamingMessage"):
            task = self._start_with_push(params, agent, dialect)
            return self._stream(task, dialect, msg_id, first=True, new=True)
        if method in ("tasks/resubscribe", "SubscribeToTask"):
            try:
                task = self.engine.get(_task_id(params))
                if task.terminal:
                    raise UnsupportedOperation(f"task {task.id} is {task.state}: nothing more will happen to it")
            except A2aError as exc:
                if method == "SubscribeToTask":
                    raise
                return self._error_stream(msg_id, exc.code, str(exc))  # 0.3 clients read a stream: the error in it
            return self._stream(task, self._dialect_of(task, dialect), msg_id, first=True)
        if method in ("tasks/get", "GetTask"):
            task = self.engine.get(_task_id(params))
            return dialects.render_task(task, self._dialect_of(task, dialect),
                                        history_length=_history_length(params))
        if method in ("tasks/cancel", "CancelTask"):
            task = self.engine.cancel(_task_id(params))
            return dialects.render_task(task, self._dialect_of(task, dialect))
        if method == "ListTasks":
            return self._list(params)
        if "ushNotification" in method:
            return self._push(method, params, dialect)
        if method in ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"):
            raise _Fault(-32007, "this agent has no extended card")
        raise _Fault(jsonrpc.METHOD_NOT_FOUND, f"method not found: {method}")

    def _push(self, method: str, params: dict[str, Any], dialect: Dialect) -> Any:
        push = self.push
        if method == "CreateTaskPushNotificationConfig":
            raw = params.get("pushNotificationConfig") or params.get("config") or params
            return push.set(_string(params, "taskId"), raw, "1.0")
        if method == "GetTaskPushNotificationConfig":
            return push.get(_string(params, "taskId"), params.get("id"), "1.0")
        if method == "ListTaskPushNotificationConfigs":
            return {"configs": push.list(_string(params, "taskId"), "1.0"), "nextPageToken": ""}
        if method == "DeleteTaskPushNotificationConfig":
            push.delete(_string(params, "taskId"), _string(params, "id"))
            return {}
        if method in ("tasks/pushNotificationConfig/set", "tasks/pushNotification/set"):
            task_id = params.get("taskId") or params.get("id")
            config = push.set(task_id if isinstance(task_id, str) else "", params.get("pushNotificationConfig"), "0.3")
            return config if method.endswith("Config/set") else {"id": task_id, **{k: v for k, v in config.items()
                                                                                  if k != "taskId"}}
        if method in ("tasks/pushNotificationConfig/get", "tasks/pushNotification/get"):
            return push.get(_task_id(params), params.get("pushNotificationConfigId"), "0.3")
        if method == "tasks/pushNotificationConfig/list":
            return push.list(_task_id(params), "0.3")
        if method == "tasks/pushNotificationConfig/delete":
            push.delete(_task_id(params), _string(params, "pushNotificationConfigId"))
            return None
        raise _Fault(jsonrpc.METHOD_NOT_FOUND, f"method not found: {method}")

    def _dialect_of(self, task: Task, asked: Dialect) -> Dialect:
        """1.0 methods answer in 1.0; tasks/get and tasks/cancel in the task's own dialect."""
        if asked == "1.0":
            return "1.0"
        return "0.1" if task.dialect == "0.1" else "0.3"

    def _start(self, params: dict[str, Any], agent: str, dialect: Dialect) -> Task:
        message = dialects.parse_message(params.get("message"))
        if dialect == "0.1":  # the client chooses the task id; sessionId is the context
            task_id = params.get("id")
            if not isinstance(task_id, str) or not task_id:
                raise BadMessage("tasks/send needs params.id (the task id, chosen by the client)")
            if isinstance(params.get("sessionId"), str):
                message.context_id = params["sessionId"]
            try:
                self.engine.get(task_id)
                message.task_id = task_id
            except TaskNotFound:
                return self.engine.send(agent, message, task_id=task_id, dialect="0.1")
        return self.engine.send(agent, message, dialect=dialect)

    def _start_with_push(self, params: dict[str, Any], agent: str, dialect: Dialect) -> Task:
        task = self._start(params, agent, dialect)
        configuration = params.get("configuration") if isinstance(params.get("configuration"), dict) else {}
        webhook = (configuration.get("taskPushNotificationConfig") or configuration.get("pushNotificationConfig")
                   or params.get("pushNotification"))
        if webhook:  # registered before the work's first event goes out
            try:
                self.push.set(task.id, webhook, dialect)
            except A2aError:
                self.engine.cancel(task.id)
                raise
        return task

    async def _send(self, params: dict[str, Any], agent: str, dialect: Dialect) -> Any:
        task = self._start_with_push(params, agent, dialect)
        configuration = params.get("configuration") if isinstance(params.get("configuration"), dict) else {}
        blocking = not configuration.get("returnImmediately", False) if dialect == "1.0" \
            else configuration.get("blocking", True) is not False
        if blocking:
            with trio.move_on_after(BLOCKING_WAIT_SECS):
                await self.engine.wait(task.id)
        if task.reply is not None and dialect != "0.1":  # the agent answered with a Message, not a task
            reply = msgspec.structs.replace(task.reply, task_id=None)
            return dialects.wrap_result(dialects.render_message(reply, dialect), "message", dialect)
        history_length = configuration.get("historyLength", params.get("historyLength"))
        rendered = dialects.render_task(task, dialect, history_length=history_length
                                        if isinstance(history_length, int) and history_length >= 0 else None)
        return dialects.wrap_result(rendered, "task", dialect)

    def _error_stream(self, msg_id: Any, code: int, text: str) -> StreamResponse:
        event = encode_event(_encoder.encode({"jsonrpc": "2.0", "id": msg_id,
                                              "error": {"code": code, "message": text}}).decode())

        async def produce(send: trio.MemorySendChannel[bytes]) -> None:
            await send.send(event)

        return StreamResponse(produce)

    def _stream(self, task: Task, dialect: Dialect, msg_id: Any, *, first: bool, new: bool = False) -> StreamResponse:
        """The task's events as SSE. ``new``: the stream of a send, where the agent may
        still answer with a Message (then that message is the whole stream)."""
        receive = self.engine.subscribe(task.id)
        if dialect == "0.1":  # 0.1 streams carry only status and artifact events
            snapshot = dialects.render_event(StatusEvent(task_id=task.id, context_id=task.context_id, state=task.state,
                                                         timestamp=task.timestamp), dialect)
        else:
            snapshot = dialects.wrap_result(dialects.render_task(task, dialect), "task", dialect)

        def frame(result: Any) -> bytes:
            if msg_id is _REST:  # HTTP+JSON: the StreamResponse itself
                return encode_event(_encoder.encode(result).decode())
            return encode_event(_encoder.encode({"jsonrpc": "2.0", "id": msg_id, "result": result}).decode())

        async def produce(send: trio.MemorySendChannel[bytes]) -> None:
            async with receive:
                pending = None
                if new and dialect != "0.1":
                    # An agent may answer with a Message: then the stream is that one
                    # message. So the task goes out only with its first event.
                    try:
                        pending = await receive.receive()
                    except trio.EndOfChannel:
                        pending = None
                    if task.reply is not None:
                        reply = msgspec.structs.replace(task.reply, task_id=None)
                        await send.send(frame(dialects.wrap_result(dialects.render_message(reply, dialect),
                                                                   "message", dialect)))
                        return
                if first:
                    await send.send(frame(snapshot))
                if pending is not None:
                    await send.send(frame(dialects.render_event(pending, dialect)))
                async for event in receive:
                    await send.send(frame(dialects.render_event(event, dialect)))

        return StreamResponse(produce)

    def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        state = params.get("status")
        tasks = self.engine.list(context_id=params.get("contextId") or None,
                                 state=dialects.parse_state(state) if state else None)
        size = params.get("pageSize") if isinstance(params.get("pageSize"), int) else 50
        size = max(1, min(size, 100))
        try:
            start = int(params.get("pageToken") or 0)
        except (TypeError, ValueError):
            raise _Fault(jsonrpc.INVALID_PARAMS, "invalid pageToken") from None
        page = tasks[start:start + size]
        history_length = params.get("historyLength")
        include = bool(params.get("includeArtifacts"))
        return {"tasks": [dialects.render_task(t, "1.0", include_artifacts=include,
                                               history_length=history_length if isinstance(history_length, int)
                                               else None) for t in page],
                "nextPageToken": str(start + size) if start + size < len(tasks) else "",
                "pageSize": size, "totalSize": len(tasks)}

    # --- The 1.0 HTTP+JSON binding -------------------------------------------------------------

    async def _http(self, request: Request, method: str, params: dict[str, Any]) -> Union[Response, StreamResponse]:
        agent = self._agent(request.params.get("agent", self.default_agent)).name
        try:
            _require_1x(request, f"the HTTP+JSON binding ({method})")
            result = await self._call(method, params, agent, "1.0", _REST)
        except _Fault as fault:
            return self._http_error(fault.code, fault.message)
        except A2aError as exc:
            return self._http_error(exc.code, str(exc))
        except BadMessage as exc:
            return self._http_error(jsonrpc.INVALID_PARAMS, str(exc))
        if isinstance(result, StreamResponse):
            return result
        return Response(200, _encoder.encode(result))

    def _http_error(self, code: int, text: str) -> Response:
        status = _HTTP_STATUS.get(code, 500)
        details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": _REASONS[code],
                    "domain": "a2a-protocol.org"}] if code in _REASONS else []
        return Response(status, _encoder.encode({"error": {"code": status, "status": _STATUS_NAME.get(status, "UNKNOWN"),
                                                           "message": text, "details": details}}))

    def _body(self, request: Request) -> dict[str, Any]:
        try:
            body = msgspec.json.decode(request.body) if request.body else {}
        except msgspec.DecodeError:
            raise HttpError(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise HttpError(400, "the body must be a JSON object")
        return body

    async def http_send(self, request: Request) -> Union[Response, StreamResponse]:
        return await self._http(request, "SendMessage", self._body(request))

    async def http_stream(self, request: Request) -> Union[Response, StreamResponse]:
        return await self._http(request, "SendStreamingMessage", self._body(request))

    async def http_list(self, request: Request) -> Union[Response, StreamResponse]:
        from urllib.parse import parse_qsl

        params: dict[str, Any] = dict(parse_qsl(request.query))
        for key in ("pageSize", "historyLength"):
            if key in params:
                try:
                    params[key] = int(params[key])
                except ValueError:
                    return self._http_error(jsonrpc.INVALID_PARAMS, f"{key} must be an integer")
        params["includeArtifacts"] = params.get("includeArtifacts", "").lower() == "true"
        return await self._http(request, "ListTasks", params)

    async def http_task(self, request: Request) -> Union[Response, StreamResponse]:
        from urllib.parse import parse_qsl

        task_id, _, verb = request.params["op"].partition(":")
        query = dict(parse_qsl(request.query))
        if request.method == "GET" and not verb:
            params: dict[str, Any] = {"id": task_id}
            if "historyLength" in query:
                try:
                    params["historyLength"] = int(query["historyLength"])
                except ValueError:
                    return self._http_error(jsonrpc.INVALID_PARAMS, "historyLength must be an integer")
            return await self._http(request, "GetTask", params)
        if verb == "subscribe":
            return await self._http(request, "SubscribeToTask", {"id": task_id})
        if verb == "cancel" and request.method == "POST":
            return await self._http(request, "CancelTask", {"id": task_id, **self._body(request)})
        raise HttpError(404, f"no route for {request.path}")

    async def http_push(self, request: Request) -> Union[Response, StreamResponse]:
        task_id, config_id = request.params["op"], request.params.get("config")
        if request.method == "POST":
            return await self._http(request, "CreateTaskPushNotificationConfig", {**self._body(request), "taskId": task_id})
        if request.method == "DELETE":
            return await self._http(request, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})
        if config_id:
            return await self._http(request, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})
        return await self._http(request, "ListTaskPushNotificationConfigs", {"taskId": task_id})

    async def http_extended_card(self, request: Request) -> Union[Response, StreamResponse]:
        return await self._http(request, "GetExtendedAgentCard", {})

    # --- The seed's REST routes (0.1 shapes, no JSON-RPC envelope) ---------------------------

    async def rest_send(self, request: Request) -> Response:
        body = request.json()
        if not isinstance(body, dict):
            raise HttpError(400, "expected a JSON object with id and message")
        try:
            return json_response(await self._send(body, self.default_agent, "0.1"))
        except BadMessage as exc:
            raise HttpError(400, str(exc)) from None
        except A2aError as exc:
            raise HttpError(404 if isinstance(exc, TaskNotFound) else 400, str(exc)) from None

    async def rest_get(self, request: Request) -> Response:
        try:
            task = self.engine.get(request.params["id"])
        except TaskNotFound as exc:
            raise HttpError(404, str(exc)) from None
        return json_response(dialects.render_task(task, "0.1"))

    async def rest_cancel(self, request: Request) -> Response:
        try:
            task = self.engine.cancel(request.params["id"])
        except TaskNotFound as exc:
            raise HttpError(404, str(exc)) from None
        except A2aError as exc:
            raise HttpError(409, str(exc)) from None
        return json_response(dialects.render_task(task, "0.1"))


def _task_id(params: dict[str, Any]) -> str:
    task_id = params.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise BadMessage("params.id (the task id) is required")
    return task_id


def _string(params: dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise BadMessage(f"params.{key} is required")
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _fold(obj: Any) -> Any:
    """One object's snake_case keys as camelCase (the camelCase one wins a tie)."""
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = _camel(key) if "_" in key else key
        if name not in out or name == key:
            out[name] = value
    return out


def _json_names(params: dict[str, Any]) -> dict[str, Any]:
    """1.0 is ProtoJSON, whose parsers take the proto field names (``history_length``)
    as well as the JSON names (``historyLength``): fold them where A2A defines fields,
    never inside ``data`` or ``metadata``."""
    out = _fold(params)
    for key in ("configuration", "message", "config", "pushNotificationConfig"):
        if isinstance(out.get(key), dict):
            out[key] = _fold(out[key])
    configuration = out.get("configuration")
    if isinstance(configuration, dict):
        for key in ("taskPushNotificationConfig", "pushNotificationConfig"):
            if isinstance(configuration.get(key), dict):
                configuration[key] = _fold(configuration[key])
                if isinstance(configuration[key].get("authentication"), dict):
                    configuration[key]["authentication"] = _fold(configuration[key]["authentication"])
    if isinstance(out.get("authentication"), dict):
        out["authentication"] = _fold(out["authentication"])
    message = out.get("message")
    if isinstance(message, dict) and isinstance(message.get("parts"), list):
        message["parts"] = [_fold(part) for part in message["parts"]]
    return out


def _history_length(params: dict[str, Any]) -> Union[int, None]:
    value = params.get("historyLength")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _require_1x(request: Request, what: str) -> None:
    """1.0 needs ``A2A-Version: 1.x`` (header or query parameter); none means 0.3."""
    version = request.header(b"a2a-version") or _query_version(request.query) or "0.3"
    if version.split(".")[0] != "1":
        raise _Fault(-32009, f"{what} is A2A 1.0: send the header A2A-Version: 1.0 (got {version!r}; "
                             "no header means 0.3)")


def _query_version(query: str) -> Union[str, None]:
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key == "A2A-Version" and value:
            return value
    return None

