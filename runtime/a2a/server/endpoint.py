"""tern's A2A server on the daemon's HTTP server: every route of every binding over
one task engine (``A2aService``). Routes (``P`` = ``[a2a] listen_path``):

- cards (``card_routes.py``): ``/.well-known/agent-card.json`` (1.0 + 0.3 fields) and
  ``/.well-known/agent.json`` (0.1) for ``[a2a] default_agent``;
  ``P/{agent}/.well-known/agent-card.json``; ``GET P/agents`` (the seed's ``{agents, total}``);
  ``/.well-known/jwks.json`` (the key the cards are signed with).
- JSON-RPC (``jsonrpc.py``) at each card's URL, ``P/{agent}`` (with or without the
  trailing slash: the 1.0 TCK posts to ``<url>/``), and at ``P`` for the default agent.
- the 1.0 HTTP+JSON binding (``http_json.py``) under ``P/{agent}/rest``.
- the seed's REST (``rest.py``): ``POST P/tasks/send``, ``GET P/tasks/{id}``,
  ``POST P/tasks/{id}/cancel``.

Everything but the cards needs a key (task contents are private), with the scope
``message`` to send (and the agent among the key's), ``tasks`` for the rest; JSON-RPC
checks per method (``handler.permit``). A caller sees only its own tasks.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import msgspec

from runtime.a2a.server.card_routes import CardRoutes
from runtime.a2a.server.handler import A2aHandler
from runtime.a2a.server.http_json import HttpJsonBinding
from runtime.a2a.server.jsonrpc import JsonRpcBinding
from runtime.a2a.server.rest import SeedRest
from runtime.a2a.server.runner import A2aService
from runtime.config import AgentConfig, Config
from runtime.httpd.messages import HttpError, Request

__all__ = ["A2aEndpoint"]


class A2aEndpoint:
    """Every A2A route over one ``A2aService``. ``bound()`` is the listener's
    ``(host, port)`` once the daemon listens (the cards' fallback URL)."""

    def __init__(self, config: Config, service: A2aService, *, secured: bool,
                 bound: Callable[[], Any] = lambda: None) -> None:
        self.config = config
        self.agents = {agent.name: agent for agent in config.agents}
        self.default_agent = config.a2a.default_agent or (config.agents[0].name if config.agents else "")
        handler = A2aHandler(service.engine, service.push, admit=service.agents.admit)
        self.cards = CardRoutes(config, self.agent, self.default_agent, secured=secured, bound=bound)
        self.jsonrpc = JsonRpcBinding(handler, self.agent_of, self.cards.extended)
        self.http_json = HttpJsonBinding(handler, self.agent_of, self.cards.extended)
        self.rest = SeedRest(handler, self.default_agent)

    def reconfigure(self, config: Config) -> None:
        """A reloaded config's agents and their cards (the routes and ``[a2a]`` stay)."""
        self.config = self.cards.config = msgspec.structs.replace(config, a2a=self.config.a2a)
        self.agents = {agent.name: agent for agent in config.agents}

    def agent(self, name: str) -> AgentConfig:
        agent = self.agents.get(name)
        if agent is None:
            raise HttpError(404, f"no agent named {name!r}")
        return agent

    def agent_of(self, request: Request) -> str:
        """The agent a JSON-RPC or HTTP+JSON path names (the default one for ``P``)."""
        return self.agent(request.params.get("agent", self.default_agent)).name

    def add_routes(self, router: Any) -> None:
        path = self.config.a2a.listen_path.rstrip("/")
        public = {"auth": False, "guard_origin": False}
        cards, http, rest = self.cards, self.http_json, self.rest
        router.add("GET", "/.well-known/agent-card.json", cards.default_card, **public, summary="A2A agent card (1.0)")
        router.add("GET", "/.well-known/agent.json", cards.default_legacy_card, **public,
                   summary="A2A agent card (0.1 shape)")
        router.add("GET", "/.well-known/jwks.json", cards.jwks, **public, summary="the keys A2A cards are signed with")
        router.add("GET", f"{path}/agents", cards.list_agents, **public, summary="A2A: every agent's card")
        router.add("GET", f"{path}/{{agent}}/.well-known/agent-card.json", cards.agent_card, **public,
                   summary="A2A: one agent's card")
        for rpc_path in (path, f"{path}/"):
            router.add("POST", rpc_path, self.jsonrpc.rpc, summary="A2A JSON-RPC for the default agent")
        router.add("POST", f"{path}/{{agent}}", self.jsonrpc.rpc,
                   summary="A2A JSON-RPC for one agent (also at its URL + /)")
        base = f"{path}/{{agent}}/rest"
        router.add("POST", f"{base}/message:send", http.send, scope="message", summary="A2A 1.0 HTTP+JSON: SendMessage")
        router.add("POST", f"{base}/message:stream", http.stream, scope="message",
                   summary="A2A 1.0 HTTP+JSON: SendStreamingMessage")
        router.add("GET", f"{base}/tasks", http.list, scope="tasks", summary="A2A 1.0 HTTP+JSON: ListTasks")
        router.add("GET", f"{base}/tasks/{{op}}", http.task, scope="tasks",
                   summary="A2A 1.0 HTTP+JSON: GetTask, SubscribeToTask")
        router.add("POST", f"{base}/tasks/{{op}}", http.task, scope="tasks",
                   summary="A2A 1.0 HTTP+JSON: CancelTask, SubscribeToTask")
        configs = f"{base}/tasks/{{op}}/pushNotificationConfigs"
        router.add("POST", configs, http.push, scope="tasks",
                   summary="A2A 1.0 HTTP+JSON: CreateTaskPushNotificationConfig")
        router.add("GET", configs, http.push, scope="tasks",
                   summary="A2A 1.0 HTTP+JSON: ListTaskPushNotificationConfigs")
        router.add(
            "GET", f"{configs}/{{config}}", http.push, scope="tasks",
            summary="A2A 1.0 HTTP+JSON: GetTaskPushNotificationConfig"
        )
        router.add(
            "DELETE", f"{configs}/{{config}}", http.push, scope="tasks",
            summary="A2A 1.0 HTTP+JSON: DeleteTaskPushNotificationConfig"
        )
        router.add(
            "GET", f"{base}/extendedAgentCard", http.extended_card, summary="A2A 1.0 HTTP+JSON: GetExtendedAgentCard"
        )
        router.add("POST", f"{path}/tasks/send", rest.send, scope="message", summary="A2A (seed REST): send a task")
        router.add("GET", f"{path}/tasks/{{id}}", rest.get, scope="tasks", summary="A2A (seed REST): a task")
        router.add("POST", f"{path}/tasks/{{id}}/cancel", rest.cancel, scope="tasks",
                   summary="A2A (seed REST): cancel a task")
