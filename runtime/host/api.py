"""The daemon's HTTP API: health, readiness, status, tools, MCP servers, agents, events, metrics.

Every route is declared here with its policy; ``openapi.py`` describes the same routes
and a test keeps the two in step. A2A and ``POST /mcp`` add their routes to the same
router when they are enabled.
"""

from __future__ import annotations

import time
from typing import Any, Literal
from urllib.parse import parse_qs

import msgspec
import trio

from runtime import __version__
from runtime.config.dump import mask_urls
from runtime.httpd.messages import HttpError, Request, Response, json_response
from runtime.host.node import Node
from runtime.host.readiness import Readiness
from runtime.httpd.router import Router

__all__ = ["build_router"]

_HEALTH = Response(200, b'{"status":"ok"}')
_READY = Response(200, b'{"status":"ready"}')
_DEGRADED = Response(200, b'{"status":"degraded","failing":["audit"]}')  # no path, no error text: /health is public


class _MessageIn(msgspec.Struct, forbid_unknown_fields=True):
    message: str
    context_id: str | None = None


class _DecisionIn(msgspec.Struct, forbid_unknown_fields=True):
    decision: Literal["approve", "deny", "cancel"]  # cancel: a question's denial that says "dismissed"
    scope: Literal["once", "always", "args"] = "once"
    reason: str = ""
    channel: Literal["http", "terminal", "websocket"] = "http"  # "terminal": tern's CLI asked a person inline
    answer: dict[str, Any] | None = None  # a question's field values (checked against its form)
    digest: str | None = None  # the arguments_sha256 approved: another one is refused (409)


class _CallIn(msgspec.Struct, forbid_unknown_fields=True):
    arguments: dict[str, Any] = {}
    timeout_secs: float | None = None


MAX_AUDIT_RECORDS = 10_000  # what GET /api/audit answers at most
MAX_FEED_EVENTS = 256  # what a stream holds for a slow reader besides text (tool calls, approvals)


class _Feed:
    """What one streamed run tells its caller, in order: text (consecutive pieces merged,
    so a fast model never fills the queue with fragments), tool calls, approvals, and
    the end. The kernel's callbacks are synchronous and never block, so they append
    here; the stream's producer drains it into the bounded channel the server writes
    from. A reader that stops reading is cut off by the server's write timeout; events
    other than text beyond ``MAX_FEED_EVENTS`` are dropped (counted)."""

    def __init__(self) -> None:
        from collections import deque

        self.items: deque[tuple[str, Any]] = deque()
        self.dropped = 0
        self.done = False
        self._wake = trio.Event()

    def text(self, piece: str) -> None:
        if self.items and self.items[-1][0] == "text":
            self.items[-1] = ("text", self.items[-1][1] + piece)
        else:
            self.items.append(("text", piece))
        self._wake.set()

    def put(self, kind: str, data: Any) -> None:
        if len(self.items) >= MAX_FEED_EVENTS and kind not in ("reply", "result", "error"):
            self.dropped += 1
            return
        self.items.append((kind, data))
        self._wake.set()

    def close(self) -> None:
        self.done = True
        self._wake.set()

    async def drain(self, send: Any) -> None:
        from runtime.wire.sse import encode_event

        encode = msgspec.json.encode
        while True:
            while self.items:
                kind, data = self.items.popleft()
                payload = {"text": data} if kind == "text" else data
                await send.send(encode_event(encode(payload).decode(), event=kind))
            if self.done:
                return
            self._wake = trio.Event()
            await self._wake.wait()


def _streamed(work: Any, log_name: str) -> Any:
    """A StreamResponse whose producer runs ``work(feed)`` and sends its events as SSE:
    ``text``, ``tool`` (a call starts or ends), ``approval`` (a call waits for a person;
    ``approval_done`` once it is decided), then ``reply``/``result`` or ``error``
    ({status, message}). A client that leaves cancels the work (the server cancels the
    producer), which is how Ctrl-C in ``tern run`` stops a reply in the daemon."""
    from runtime.errors import TernError
    from runtime.httpd.messages import StreamResponse
    from runtime.log import get_logger

    async def produce(send: Any) -> None:
        feed = _Feed()

        async def run() -> None:
            try:
                kind, value = await work(feed)
                feed.put(kind, msgspec.to_builtins(value))
            except TernError as exc:
                feed.put("error", {"status": exc.http_status, "message": str(exc)})
            except Exception as exc:  # a bug: the client hears of it, the log has the traceback
                get_logger("api").error("%s failed: %s", log_name, type(exc).__name__, exc_info=True)
                feed.put("error", {"status": 500, "message": f"internal error: {type(exc).__name__}"})
            finally:
                feed.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await feed.drain(send)

    return StreamResponse(produce)


def _stream_ask(feed: _Feed) -> Any:
    """The ``Ask`` of a streamed run: the request goes to the client as an ``approval``
    event (``tern run`` prompts its person and answers with ``POST /api/approvals/{id}``);
    when any channel decides, this is cancelled and says so (``approval_done``)."""

    async def ask(approval: Any) -> None:
        feed.put("approval", msgspec.structs.asdict(approval))
        try:
            await trio.sleep_forever()
        finally:
            feed.put("approval_done", {"id": approval.id})

    return ask


_NO_METRICS = ("http_requests", "http_errors", "tool_calls", "tool_errors")
_APPROVAL_STATES = ("pending", "approved", "denied", "expired", "all")


def _approval_id(request: Request) -> str:
    from runtime.wire.limits import check_id

    approval_id = request.params["id"]
    check_id(approval_id, "the approval id")
    return approval_id


def _agent_name(request: Request) -> str:
    """The agent the path names (whether the caller may reach it is the kernel's door)."""
    from runtime.wire.limits import check_name

    return check_name(request.params["name"], "the agent name")


def build_router(node: Node, *, metrics: Any = None, secured: bool = False) -> Router:
    """Every route; ``secured``: an API key is configured (the A2A cards say so)."""
    router = Router()
    config = node.config  # for what a reload cannot change; the rest reads node.config per request
    kernel = node.kernel

    audit = kernel.pipeline.audit

    async def health(request: Request) -> Response:
        return _DEGRADED if audit is not None and audit.failing else _HEALTH

    readiness = Readiness(kernel.db, config.state.dir)

    async def ready(request: Request) -> Response:
        reason = await readiness.check()
        if reason is None:
            return _READY
        return json_response({"status": "unready", "reason": reason}, status=503)

    async def status(request: Request) -> Response:
        states: dict[str, int] = {}
        for server in kernel.mcp.statuses():
            states[server.state] = states.get(server.state, 0) + 1
        return json_response({
            "version": __version__,
            "uptime_secs": round(time.time() - kernel.started, 3),
            "agents": [{"name": a.name, "kind": a.kind, "description": a.description} for a in node.config.agents],
            "mcp_servers": [{"name": s.name, "state": s.state, "tools": s.tool_count,
                             "last_error": mask_urls(s.last_error),
                             "restarts": s.restarts, "lock": s.lock, "unlocked": s.unlocked}
                            for s in kernel.mcp.statuses()],
            "mcp_server_states": states,
            "a2a_peers": kernel.external.statuses() if kernel.external is not None else [],
            "tasks": node.a2a.engine.counts() if node.a2a is not None else None,  # None: A2A is off
            "audit": audit.status() if audit is not None else None,
            "budgets": kernel.agents.budgets.status(),  # agents with a budget: limits, use, times exceeded
            "counters": {**(metrics.totals() if metrics is not None else dict.fromkeys(_NO_METRICS, 0)),
                         "model_calls": kernel.agents.model_calls},  # monotonic: the dashboard charts deltas
        })

    async def tools(request: Request) -> Response:
        return json_response({"tools": [msgspec.structs.asdict(t) for t in kernel.registry.tools()],
                              "servers": [msgspec.structs.replace(s, last_error=mask_urls(s.last_error))
                                          for s in kernel.mcp.statuses()],
                              "collisions": [[n.name for n in group] for group in kernel.mcp.collisions]})

    async def tool_call(request: Request) -> Response:
        from runtime.wire.limits import check_name

        name = check_name(request.params["name"], "the tool name")
        body = request.json(_CallIn)

        async def work(feed: _Feed) -> tuple[str, Any]:
            run = kernel.pipeline.run(ask=_stream_ask(feed), owner=request.caller)
            result = await kernel.call_tool(name, body.arguments, timeout_secs=body.timeout_secs,
                                            caller=f"api:{request.client[0]}", run=run)
            return "result", result

        return _streamed(work, "a tool call")

    async def mcp_servers(request: Request) -> Response:
        from runtime.mcp.client.supervisor import servers_report

        return json_response(servers_report(node.config, kernel.mcp))

    async def mcp_restart(request: Request) -> Response:
        """Reconnect one MCP server now (a failed one is revived with a fresh restart
        budget); answers its status at once, before the connection is made."""
        from runtime.wire.limits import check_name

        name = check_name(request.params["name"], "the MCP server name")
        status = kernel.mcp.restart(name)  # UnknownServer answers 404 itself
        return json_response(msgspec.structs.asdict(status))

    async def agents(request: Request) -> Response:
        return json_response({"agents": [{"name": a.name, "kind": a.kind, "description": a.description,
                                          "tools": a.tools} for a in node.config.agents
                                         if request.caller is None or request.caller.reaches(a.name)]})

    async def agent_message(request: Request) -> Response:
        from runtime.errors import AgentError
        from runtime.wire.limits import check_id, check_stored

        name = _agent_name(request)
        body = request.json(_MessageIn)
        check_id(body.context_id, "context_id")  # 400 naming the bound (the kernel checks again)
        check_stored(body.message, "message")
        try:  # an UnknownAgent answers itself: 404 and its message
            reply = await kernel.agents.send(name, body.message, context_id=body.context_id, owner=request.caller)
        except AgentError as exc:
            raise HttpError(502, f"the agent could not answer: {exc}") from None
        return json_response(reply)

    async def agent_stream(request: Request) -> Response:
        from runtime.wire.limits import check_id, check_stored

        name = _agent_name(request)
        body = request.json(_MessageIn)
        check_id(body.context_id, "context_id")
        check_stored(body.message, "message")  # before the stream starts: a 400, not a failed stream
        kernel.agents.admit(name, request.caller)  # unknown (404), not the key's (403), no budget (429): before
        if body.context_id and kernel.conversations is not None \
                and not await kernel.conversations.visible(body.context_id, request.caller):
            raise HttpError(404, f"no conversation has the id {body.context_id!r} (see `tern conversations`)")

        async def work(feed: _Feed) -> tuple[str, Any]:
            from runtime.errors import AgentError

            try:
                reply = await kernel.agents.send(name, body.message, context_id=body.context_id, on_text=feed.text,
                                                 ask=_stream_ask(feed), on_tool=lambda event: feed.put("tool", event),
                                                 owner=request.caller)
            except AgentError as exc:
                raise HttpError(502, f"the agent could not answer: {exc}") from None
            return "reply", reply

        return _streamed(work, "an agent message")

    async def conversation_list(request: Request) -> Response:
        store = kernel.conversations
        return json_response({"conversations": await store.list(who=request.caller) if store is not None else []})

    async def conversation_get(request: Request) -> Response:
        from runtime.wire.limits import check_id

        context_id = request.params["id"]
        check_id(context_id, "the conversation id")
        messages = await kernel.conversations.history(context_id, who=request.caller) \
            if kernel.conversations is not None else []
        if not messages:
            raise HttpError(404, f"no conversation has the id {context_id!r} (see `tern conversations`)")
        return json_response({"context_id": context_id, "messages": messages})

    async def conversation_delete(request: Request) -> Response:
        from runtime.wire.limits import check_id

        context_id = request.params["id"]
        check_id(context_id, "the conversation id")
        gone = await kernel.conversations.delete(context_id, request.caller) if kernel.conversations is not None else 0
        if not gone:
            raise HttpError(404, f"no conversation has the id {context_id!r} (see `tern conversations`)")
        return json_response({"context_id": context_id, "messages": gone})

    async def audit_tail(request: Request) -> Response:
        from runtime.kernel.audit import RecordFilter, last_records

        if audit is None:
            raise HttpError(404, "this tern keeps no audit log (no [state] dir)")
        query = parse_qs(request.query)
        try:
            wanted = min(max(int(query.get("n", ["20"])[0]), 0), MAX_AUDIT_RECORDS)
        except ValueError:
            raise HttpError(400, "n must be a whole number") from None
        keep = RecordFilter(query.get("agent", [None])[0], query.get("tool", [None])[0], query.get("outcome", []))
        lines = await trio.to_thread.run_sync(last_records, audit.path, wanted, keep)  # file reads: off the loop
        return json_response({"records": [line.decode("utf-8", "replace").rstrip("\n") for line in lines]})

    async def audit_verify(request: Request) -> Response:
        from runtime.kernel.audit import verify_log

        if audit is None:
            raise HttpError(404, "this tern keeps no audit log (no [state] dir)")
        report = await trio.to_thread.run_sync(verify_log, audit.path)  # walks every file: off the loop
        return json_response({"summary": report.summary(), **msgspec.to_builtins(report)})

    approvals = kernel.approvals

    async def approval_list(request: Request) -> Response:
        state = parse_qs(request.query).get("state", ["pending"])[0]
        if state not in _APPROVAL_STATES:
            raise HttpError(400, f"state must be one of {', '.join(_APPROVAL_STATES)}")
        listed = await approvals.list(None if state == "all" else state, who=request.caller)
        return json_response({"approvals": [msgspec.structs.asdict(a) for a in listed]})

    async def approval_get(request: Request) -> Response:
        return json_response(await approvals.get(_approval_id(request), request.caller))  # UnknownApproval: 404

    async def approval_arguments(request: Request) -> Response:
        """The whole arguments, the bytes ``arguments_sha256`` names, as a download."""
        approval_id = _approval_id(request)
        data = await approvals.whole_arguments(approval_id, request.caller)  # UnknownApproval: 404
        return Response(200, data, [(b"content-disposition",
                                     f'attachment; filename="{approval_id}-arguments.json"'.encode()),
                                    (b"cache-control", b"no-store")])

    async def approval_decide(request: Request) -> Response:
        approval_id = _approval_id(request)
        body = request.json(_DecisionIn)
        by = f"{'terminal:' if body.channel == 'terminal' else ''}api:{request.client[0]}"
        return json_response(await _decide(approval_id, body, by, request.caller))

    async def _decide(approval_id: str, body: _DecisionIn, by: str, who: Any) -> Any:
        """404 unknown (or not ``who``'s to answer), 409 already decided or expired, 400 an
        answer that does not fit the form, 503 a store that cannot be reached now."""
        return await approvals.decide(approval_id, body.decision == "approve", scope=body.scope, reason=body.reason,
                                by=by, channel=body.channel, answer=body.answer, cancel=body.decision == "cancel",
                                who=who, digest=body.digest)

    async def echo(request: Request) -> Response:
        request.json()  # validate: a load test must not be able to echo garbage
        return Response(200, request.body)

    async def openapi(request: Request) -> Response:
        from runtime.host.openapi import document

        return json_response(document(a2a_path=config.a2a.listen_path if node.a2a is not None else None,
                                      mcp=config.mcp_server.enabled))

    async def prometheus(request: Request) -> Response:
        from runtime.httpd.metrics import CONTENT_TYPE

        if metrics is None:
            raise HttpError(404, "metrics are off")
        return Response(200, metrics.render().encode(), content_type=CONTENT_TYPE.encode())

    async def events(request: Request, socket: Any) -> None:
        import json

        with kernel.events.subscribe() as subscription:
            await socket.send(json.dumps({"type": "hello", "version": __version__}))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(decisions, request, socket)
                while True:
                    event = await subscription.next()
                    await socket.send(json.dumps(event, default=str))

    async def decisions(request: Request, socket: Any) -> None:
        """A person's answers on the events socket: ``{"type": "decide", "id", "decision",
        "answer"?, ...}`` (the body of ``POST /api/approvals/{id}``), each answered with
        ``decided`` (the request) or ``error`` (and the socket stays open)."""
        import json

        from runtime.errors import TernError
        from runtime.wire.limits import check_id

        while True:
            try:
                text = await socket.receive()
            except trio.EndOfChannel:
                return
            approval_id = None
            try:
                message = msgspec.json.decode(text)
                if not isinstance(message, dict) or message.pop("type", None) != "decide":
                    raise HttpError(400, 'a message must be {"type": "decide", "id": ..., "decision": ...}')
                approval_id = check_id(message.pop("id", None), "the approval id")
                if not isinstance(approval_id, str):
                    raise HttpError(400, "a decision names its approval: id (ap_...)")
                body = msgspec.convert({"channel": "websocket", **message}, _DecisionIn)
                decided = await _decide(approval_id, body, f"websocket:{request.client[0]}", request.caller)
                reply = {"type": "decided", "id": approval_id, "approval": msgspec.to_builtins(decided)}
            except (TernError, msgspec.ValidationError, msgspec.DecodeError) as exc:
                reply = {"type": "error", "id": approval_id if isinstance(approval_id, str) else None,
                         "error": str(exc)[:500]}
            await socket.send(json.dumps(reply))

    with router.entering("api"):  # the way in callers of these routes come by (Caller.way)
        router.add("GET", "/health", health, auth=False, guard_origin=False, summary="liveness")
        router.add("GET", "/ready", ready, auth=False, guard_origin=False,
                   summary="readiness: the store answers (503 with the reason while it does not)")
        router.add("GET", "/api/status", status, summary="version, uptime, agents, MCP server states, A2A peers")
        router.add("GET", "/api/tools", tools, summary="every tool agents can call")
        router.add("POST", "/api/tools/{name}/call", tool_call, cost=5.0, scope="admin",
                   summary="call one tool through the pipeline; the answer is an SSE stream (approval, result)")
        router.add("GET", "/api/mcp/servers", mcp_servers, summary="configured and connected MCP servers")
        router.add("POST", "/api/mcp/servers/{name}/restart", mcp_restart, cost=5.0, scope="admin",
                   summary="reconnect one MCP server now; a failed one is revived with a fresh restart budget")
        router.add("GET", "/api/agents", agents, summary="configured agents")
        router.add("POST", "/api/agents/{name}/message", agent_message, cost=5.0, watch_disconnect=True,
                   scope="message",
                   summary="send an agent a message")
        router.add("POST", "/api/agents/{name}/stream", agent_stream, cost=5.0, scope="message",
                   summary="send an agent a message; the answer is an SSE stream (text, tool, approval, reply)")
        router.add("GET", "/api/conversations", conversation_list, scope="tasks",
                   summary="conversations, most recent first")
        router.add("GET", "/api/conversations/{id}", conversation_get, scope="tasks",
                   summary="one conversation's messages, oldest first")
        router.add("DELETE", "/api/conversations/{id}", conversation_delete, scope="tasks",
                   summary="forget one conversation")
        router.add("GET", "/api/audit", audit_tail, cost=5.0, scope="audit",
                   summary="the last audit records (?n=20&agent=GLOB&tool=GLOB&outcome=O...), raw JSON lines")
        router.add("GET", "/api/audit/verify", audit_verify, cost=20.0, scope="audit",
                   summary="check the audit log's hash chain")
        router.add("GET", "/api/approvals", approval_list, summary="tool calls waiting for a person (?state=...)")
        router.add("GET", "/api/approvals/{id}", approval_get, summary="one approval request")
        router.add("GET", "/api/approvals/{id}/arguments", approval_arguments,
                   summary="a request's whole arguments: the RFC 8785 bytes its arguments_sha256 names (a download)")
        router.add("POST", "/api/approvals/{id}", approval_decide,
                   summary='decide a pending approval: {"decision": "approve"|"deny", "scope": "once"|"always"|"args", '
                           '"digest": arguments_sha256}')
        router.add("POST", "/api/echo", echo, summary="answer the JSON body back (load tests, client checks)")
        router.add("GET", "/api/openapi.json", openapi, summary="this API as OpenAPI 3.1")
        router.add("GET", "/api/events", events, websocket=True, scope="events",
                   summary="kernel events over a WebSocket")
        router.add("GET", "/metrics", prometheus, scope="metrics", summary="Prometheus metrics")
    from runtime.host import dashboard_api, dashboard_routes, triggers_api

    dashboard_routes.add_routes(router)
    with router.entering("api"):
        dashboard_api.add_routes(router, node)
        triggers_api.add_routes(router, node)
    from runtime.host import approve_links

    approve_links.add_routes(router, node)  # way "link": authenticated by a one-time token, never a key
    from runtime.host.hooks import Hooks

    with router.entering("hook"):
        Hooks(lambda: node.triggers).add_routes(router)
    if node.a2a is not None:
        from runtime.a2a.server.endpoint import A2aEndpoint

        node.a2a_endpoint = A2aEndpoint(config, node.a2a, secured=secured, bound=lambda: node.http_bound)
        with router.entering("a2a"):
            node.a2a_endpoint.add_routes(router)
    else:
        off = "A2A is off on this tern (set [a2a] enabled = true in its config to serve agent cards and tasks)"
        for prefix in (config.a2a.listen_path, "/.well-known/agent-card.json", "/.well-known/agent.json"):
            router.hint(prefix, off)
    if node.mcp_server is not None:  # built by the node, which runs its nursery
        from runtime.mcp.server.streamable_http import McpHttpEndpoint

        with router.entering("mcp"):
            McpHttpEndpoint(node.mcp_server, config.mcp_server).add_routes(router)
    else:
        router.hint("/mcp", "tern's MCP server is off here (set [mcp_server] enabled = true in its config)")
    return router
