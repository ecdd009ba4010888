"""Scopes on every route: a table of what each route in the OpenAPI document needs, walked
with a key that lacks the scope (403 naming it) and one that holds only it (let past).
A route added without a row here fails ``test_the_table_names_every_route``."""

from __future__ import annotations

import base64
import re
from contextlib import AsyncExitStack

import pytest
import trio
from trio_websocket import HandshakeError, open_websocket_url

from runtime.config.keys import SCOPES
from runtime.host.openapi import document
from tests.http.keyed import KEYS, client, start

PUBLIC = "public"
HOOK = "hook"  # decided by the webhook's own door (tests/http/test_hooks.py)
LINK = "link"  # a one-time token is the credential, never a key (tests/http/test_approve_links.py)
ANY = "any"  # any key: the operation decides (A2A JSON-RPC), or the route reads nothing private
P = "/a2a"
REST = f"{P}/{{agent}}/rest"
TABLE = {
    ("get", "/health"): PUBLIC, ("get", "/ready"): PUBLIC, ("get", "/"): PUBLIC, ("get", "/ui/{file}"): PUBLIC,
    ("get", "/.well-known/agent-card.json"): PUBLIC, ("get", "/.well-known/agent.json"): PUBLIC,
    ("get", "/.well-known/jwks.json"): PUBLIC,
    ("get", f"{P}/agents"): PUBLIC, ("get", f"{P}/{{agent}}/.well-known/agent-card.json"): PUBLIC,
    ("get", "/api/status"): ANY, ("get", "/api/tools"): ANY, ("get", "/api/mcp/servers"): ANY,
    ("get", "/api/agents"): ANY, ("post", "/api/echo"): ANY, ("get", "/api/openapi.json"): ANY,
    ("get", "/api/approvals"): ANY, ("get", "/api/approvals/{id}"): ANY, ("post", "/api/approvals/{id}"): ANY,
    ("get", "/api/approvals/{id}/arguments"): ANY, ("get", "/api/sign-in"): PUBLIC,
    ("post", P): ANY, ("post", f"{P}/"): ANY, ("post", f"{P}/{{agent}}"): ANY,
    ("get", f"{REST}/extendedAgentCard"): ANY,
    ("post", "/api/tools/{name}/call"): "admin", ("post", "/api/mcp/servers/{name}/restart"): "admin",
    ("post", "/api/mcp/servers/{name}/login"): "admin", ("get", "/api/config"): "admin",
    ("post", "/api/config/reload"): "admin",
    ("get", "/api/triggers"): "admin", ("get", "/api/triggers/{name}/runs"): "admin",
    ("get", "/api/triggers/{name}/runs/{id}"): "admin", ("post", "/api/triggers/{name}/fire"): "admin",
    ("post", "/api/triggers/{name}/resume"): "admin",
    # its own door: a signature, or a key with "message"; an unknown name is a 401 like a bad
    # signature (tests/http/test_hooks.py)
    ("post", "/hooks/{name}"): HOOK,
    ("get", "/approve/{token}"): LINK, ("post", "/approve/{token}"): LINK,
    ("post", "/api/agents/{name}/message"): "message", ("post", "/api/agents/{name}/stream"): "message",
    ("post", f"{REST}/message:send"): "message", ("post", f"{REST}/message:stream"): "message",
    ("post", f"{P}/tasks/send"): "message",
    ("get", "/api/conversations"): "tasks", ("get", "/api/conversations/{id}"): "tasks",
    ("delete", "/api/conversations/{id}"): "tasks", ("get", "/api/tasks"): "tasks", ("get", "/api/tasks/{id}"): "tasks",
    ("post", "/api/tasks/{id}/cancel"): "tasks", ("get", f"{REST}/tasks"): "tasks",
    ("get", f"{REST}/tasks/{{op}}"): "tasks", ("post", f"{REST}/tasks/{{op}}"): "tasks",
    ("post", f"{REST}/tasks/{{op}}/pushNotificationConfigs"): "tasks",
    ("get", f"{REST}/tasks/{{op}}/pushNotificationConfigs"): "tasks",
    ("get", f"{REST}/tasks/{{op}}/pushNotificationConfigs/{{config}}"): "tasks",
    ("delete", f"{REST}/tasks/{{op}}/pushNotificationConfigs/{{config}}"): "tasks",
    ("get", f"{P}/tasks/{{id}}"): "tasks", ("post", f"{P}/tasks/{{id}}/cancel"): "tasks",
    ("get", "/api/audit"): "audit", ("get", "/api/audit/verify"): "audit", ("get", "/api/activity"): "audit",
    ("get", "/api/activity/runs"): "audit", ("get", "/api/activity/runs/{id}"): "audit",
    ("get", "/api/events"): "events", ("get", "/metrics"): "metrics",
    ("post", "/mcp"): "mcp", ("get", "/mcp"): "mcp", ("delete", "/mcp"): "mcp",
}
FILL = {"name": "echo", "agent": "echo", "id": "x1", "op": "x1", "config": "c1", "file": "app.js"}


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: FILL[m.group(1)], path)


WAYS = {"api", "a2a", "mcp", "hook"}


def test_every_route_with_a_key_check_names_its_way_in(tmp_path):
    """A route is where a caller is made (``Route.way``, stamped on ``Caller.way``): one
    added without saying which way in it is fails here, as one without a scope row does."""
    from runtime.host.api import build_router
    from runtime.host.node import Node
    from tests.http.keyed import config

    router = build_router(Node(config(tmp_path)), secured=True)
    for route in router.routes:
        if route.auth or route.admit is not None:
            assert route.way in WAYS, (route.method, route.path, route.way)
        else:
            assert route.way in WAYS | {"", "link"}, (route.method, route.path)


def test_the_table_names_every_route():
    """Every documented route (A2A and /mcp on) has a row, and only those."""
    doc = document(a2a_path=P, mcp=True)
    assert {(m, p) for p, item in doc["paths"].items() for m in item} == set(TABLE)


@pytest.fixture
async def url(nursery, tmp_path):
    return (await start(nursery, tmp_path))[1]


async def test_every_route_refuses_a_key_without_its_scope(url):
    """A key without the scope gets 403 naming it; a key with only that scope gets past
    the check (whatever the handler then says of an empty request); a public route needs
    no key; an "any" route takes any key."""
    async with AsyncExitStack() as stack:
        clients = {name: await stack.enter_async_context(client(url, name))
                   for name in (None, *(f"only-{s}" for s in SCOPES))}
        for (method, path), scope in TABLE.items():
            if scope in (HOOK, LINK):
                continue
            target = concrete(path)
            if scope == PUBLIC:
                response = await clients[None].request(method.upper(), target)
                assert response.status_code not in (401, 403), (method, path, response.text)
                continue
            assert (await clients[None].request(method.upper(), target)).status_code == 401, (method, path)
            allowed = f"only-{scope}" if scope != ANY else "only-card"
            response = await clients[allowed].request(method.upper(), target, headers={"Accept": "application/json"})
            assert response.status_code not in (401, 403), (method, path, allowed, response.text)
            if scope == ANY:
                continue
            for other in SCOPES:
                if other in (scope, "admin"):
                    continue
                refused = await clients[f"only-{other}"].request(method.upper(), target)
                assert refused.status_code == 403, (method, path, other, refused.text)
                error = refused.json()["error"]["message"]
                assert f"only-{other}" in error and repr(scope) in error, error


async def test_a_key_may_message_only_its_agents(url):
    async with client(url, "echo-only") as echo_only, client(url, "only-tasks") as reader:
        assert (await echo_only.post("/api/agents/echo/message", json={"message": "hi"})).status_code == 200
        refused = await echo_only.post("/api/agents/other/message", json={"message": "hi"})
        assert refused.status_code == 403 and "'other'" in refused.json()["error"]["message"]
        for dialect_call in ({"method": "SendMessage", "headers": {"A2A-Version": "1.0"},
                              "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                                                     "parts": [{"text": "x"}]}}},
                             {"method": "message/send", "headers": {},
                              "params": {"message": {"kind": "message", "messageId": "m1", "role": "user",
                                                     "parts": [{"kind": "text", "text": "x"}]}}}):
            body = {"jsonrpc": "2.0", "id": 1, "method": dialect_call["method"], "params": dialect_call["params"]}
            assert (await echo_only.post(f"{P}/echo", json=body, headers=dialect_call["headers"])).status_code == 200
            assert (await echo_only.post(f"{P}/other", json=body, headers=dialect_call["headers"])).status_code == 403
            assert (await reader.post(f"{P}/echo", json=body, headers=dialect_call["headers"])).status_code == 403
        get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "nope"}}
        only_message = client(url, "only-message")
        async with only_message:
            refused = await only_message.post(f"{P}/echo", json=get)
        assert refused.status_code == 403 and "'tasks'" in refused.json()["error"]["message"]
        answered = await reader.post(f"{P}/echo", json=get)  # the scope holds: the task is simply not there
        assert answered.status_code == 200 and answered.json()["error"]["code"] == -32001


def _ws(url: str) -> str:
    return url.replace("http://", "ws://") + "/api/events"


def _subprotocols(key: str) -> list[str]:
    return ["tern.events", "tern.key." + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")]


async def test_the_events_socket_needs_the_events_scope(url):
    """The key in the subprotocol (a browser's way) is checked like a header's."""
    with trio.fail_after(10):
        async with open_websocket_url(_ws(url), subprotocols=_subprotocols(KEYS["only-events"])) as socket:
            assert '"hello"' in await socket.get_message()
        for name in ("alice", "only-tasks"):
            with pytest.raises(HandshakeError) as refused:
                async with open_websocket_url(_ws(url), subprotocols=_subprotocols(KEYS[name])):
                    pass
            assert refused.value.status_code == 403
