"""The daemon's HTTP API: health, status, tools, MCP servers, agents, events, metrics.

Every route is declared here with its policy; ``openapi.py`` describes the same routes
and a test keeps the two in step. A2A and ``POST /mcp`` add their routes to the same
router when they are enabled.
"""

from __future__ import annotations

import time
from typing import Any, Literal
from urllib.parse import parse_qs

import msgspec

from runtime import __version__
from runtime.httpd.messages import HttpError, Request, Response, json_response
from runtime.host.node import Node
from runtime.httpd.router import Router

__all__ = ["build_router"]

_HEALTH = Response(200, b'{"status":"ok"}')
_DEGRADED = Response(200, b'{"status":"degraded","failing":["audit"]}')  # no path, no error text: /health is public


class _MessageIn(msgspec.Struct, forbid_unknown_fields=True):
    message: str
    context_id: str | None = None


class _DecisionIn(msgspec.Struct, forbid_unknown_fields=True):
    decision: Literal["approve", "deny"]
    scope: Literal["once", "always", "args"] = "once"
    reason: str = ""


_APPROVAL_STATES = ("pending", "approved", "denied", "expired", "all")


def _approval_id(request: Request) -> str:
    from runtime.wire.limits import check_id

    approval_id = request.params["id"]
    check_id(approval_id, "the approval id")
    return approval_id


def build_router(node: Node, *, metrics: Any = None, secured: bool = False) -> Router:
    """Every route; ``secured``: an API key is configured (the A2A cards say so)."""
    router = Router()
    config = node.config  # for what a reload cannot change; the rest reads node.config per request
    kernel = node.kernel

    audit = kernel.pipeline.audit

    async def health(request: Request) -> Response:
        return _DEGRADED if audit is not None and audit.failing else _HEALTH

    async def status(request: Request) -> Response:
        states: dict[str, int] = {}
        for server in kernel.mcp.statuses():
            states[server.state] = states.get(server.state, 0) + 1
        return json_response({
            "version": __version__,
            "uptime_secs": round(time.time() - kernel.started, 3),
            "agents": [{"name": a.name, "kind": a.kind} for a in node.config.agents],
            "mcp_servers": [{"name": s.name, "state": s.state, "tools": s.tool_count, "last_error": s.last_error,
                             "restarts": s.restarts} for s in kernel.mcp.statuses()],
            "mcp_server_states": states,
            "a2a_peers": kernel.external.statuses() if kernel.external is not None else [],
            "tasks": node.a2a.engine.counts() if node.a2a is not None else {},
            "audit": audit.status() if audit is not None else None,
            "budgets": kernel.agents.budgets.status(),  # agents with a budget: limits, use, times exceeded
        })

    async def tools(request: Request) -> Response:
        return json_response({"tools": [msgspec.structs.asdict(t) for t in kernel.registry.tools()]})

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
                                          "tools": a.tools} for a in node.config.agents]})

    async def agent_message(request: Request) -> Response:
        from runtime.errors import AgentError
        from runtime.wire.limits import check_id, check_name

        name = check_name(request.params["name"], "the agent name")
        body = request.json(_MessageIn)
        check_id(body.context_id, "context_id")  # 400 naming the bound (the kernel checks again)
        try:  # an UnknownAgent answers itself: 404 and its message
            reply = await kernel.agents.send(name, body.message, context_id=body.context_id)
        except AgentError as exc:
            raise HttpError(502, f"the agent could not answer: {exc}") from None
        return json_response(reply)

    approvals = kernel.approvals

    async def approval_list(request: Request) -> Response:
        state = parse_qs(request.query).get("state", ["pending"])[0]
        if state not in _APPROVAL_STATES:
            raise HttpError(400, f"state must be one of {', '.join(_APPROVAL_STATES)}")
        listed = approvals.list(None if state == "all" else state)
        return json_response({"approvals": [msgspec.structs.asdict(a) for a in listed]})

    async def approval_get(request: Request) -> Response:
        return json_response(approvals.get(_approval_id(request)))  # UnknownApproval answers 404 itself

    async def approval_decide(request: Request) -> Response:
        approval_id = _approval_id(request)
        body = request.json(_DecisionIn)
        who = f"api:{request.client[0]}"
        decided = approvals.decide(approval_id, body.decision == "approve", scope=body.scope, reason=body.reason,
                                   by=str(who), channel="http")  # 404 unknown, 409 already decided or expired
        return json_response(decided)

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
            while True:
                event = await subscription.next()
                await socket.send(json.dumps(event, default=str))

    router.add("GET", "/health", health, auth=False, guard_origin=False, summary="liveness")
    router.add("GET", "/api/status", status, summary="version, uptime, agents, MCP server states, A2A peers")
    router.add("GET", "/api/tools", tools, summary="every tool agents can call")
    router.add("GET", "/api/mcp/servers", mcp_servers, summary="configured and connected MCP servers")
    router.add("POST", "/api/mcp/servers/{name}/restart", mcp_restart, cost=5.0,
               summary="reconnect one MCP server now; a failed one is revived with a fresh restart budget")
    router.add("GET", "/api/agents", agents, summary="configured agents")
    router.add("POST", "/api/agents/{name}/message", agent_message, cost=5.0, watch_disconnect=True,
               summary="send an agent a message")
    router.add("GET", "/api/approvals", approval_list, summary="tool calls waiting for a person (?state=...)")
    router.add("GET", "/api/approvals/{id}", approval_get, summary="one approval request")
    router.add("POST", "/api/approvals/{id}", approval_decide,
               summary='decide a pending approval: {"decision": "approve"|"deny", "scope": "once"|"always"|"args"}')
    router.add("POST", "/api/echo", echo, summary="answer the JSON body back (load tests, client checks)")
    router.add("GET", "/api/openapi.json", openapi, summary="this API as OpenAPI 3.1")
    router.add("GET", "/api/events", events, websocket=True, summary="kernel events over a WebSocket")
    router.add("GET", "/metrics", prometheus, summary="Prometheus metrics")
    if node.a2a is not None:
        from runtime.a2a.server.endpoint import A2aEndpoint

        node.a2a_endpoint = A2aEndpoint(config, node.a2a, secured=secured, bound=lambda: node.http_bound)
        node.a2a_endpoint.add_routes(router)
    else:
        off = "A2A is off on this tern (set [a2a] enabled = true in its config to serve agent cards and tasks)"
        for prefix in (config.a2a.listen_path, "/.well-known/agent-card.json", "/.well-known/agent.json"):
            router.hint(prefix, off)
    if node.mcp_server is not None:  # built by the node, which runs its nursery
        from runtime.mcp.server.streamable_http import McpHttpEndpoint

        McpHttpEndpoint(node.mcp_server, config.mcp_server).add_routes(router)
    else:
        router.hint("/mcp", "tern's MCP server is off here (set [mcp_server] enabled = true in its config)")
    return router
