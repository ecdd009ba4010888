"""Agent cards: what an A2A peer reads before it sends anything.

One card per agent, in the 1.0 shape with the 0.3 compatibility fields (``url``,
``preferredTransport``, ``protocolVersion``, ``additionalInterfaces``) as the SDKs
serve it, plus the legacy 0.1 shape for ``/.well-known/agent.json``. Capabilities say
only what works: streaming and push notifications (``push.py``).
The ``url`` comes from ``[a2a] public_url``, else the concrete address tern listens
on. On a wildcard listener (0.0.0.0, ::) the Host the client sent is used only when
it is a loopback name or one of ``[server] allowed_hosts``; anything else is the
caller's word, and a card is cached (max-age 60), so one caller could point every
other peer at a host of its choosing. Then the card names this machine's host name
and the port, and a warning (once) says to set ``public_url``. Never 0.0.0.0.
"""

from __future__ import annotations

import socket
from typing import Any

from runtime import __version__
from runtime.config import AgentConfig, Config
from runtime.log import get_logger

__all__ = ["base_url", "agent_url", "card", "extended_card", "legacy_card", "skills"]

_UNSPECIFIED = {"0.0.0.0", "::", "[::]", ""}
_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]"}
log = get_logger("a2a")
_warned = False


def _host_name(host_header: str) -> str:
    """``Example.com:8080`` -> ``example.com``; ``[::1]:80`` -> ``[::1]``."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.rsplit(":", 1)[0]


def base_url(config: Config, bound: tuple[str, int] | None, host_header: str | None) -> str:
    """Where peers reach this tern: ``public_url``, the bound address, or the Host header."""
    if config.a2a.public_url:
        return config.a2a.public_url.rstrip("/")
    scheme = "https" if config.server.tls_cert else "http"
    if bound is not None and bound[0] not in _UNSPECIFIED:
        host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        return f"{scheme}://{host}:{bound[1]}"
    if host_header and (_host_name(host_header) in _LOOPBACK_HOSTS
                        or _host_name(host_header) in {h.lower() for h in config.server.allowed_hosts}):
        return f"{scheme}://{host_header.strip()}"
    global _warned
    if not _warned:
        _warned = True
        log.warning("[a2a] public_url is not set and tern listens on every address: agent cards name this "
                    "machine (%s), not the Host header a caller sent; set public_url to say where peers reach it",
                    socket.gethostname())
    port = f":{bound[1]}" if bound is not None else ""
    return f"{scheme}://{socket.gethostname()}{port}"


def agent_url(config: Config, base: str, agent: str) -> str:
    return f"{base}{config.a2a.listen_path.rstrip('/')}/{agent}"


def skills(agent: AgentConfig) -> list[dict[str, Any]]:
    """The configured skills, else one derived from what the agent is."""
    if agent.skills:
        return [{"id": s.id, "name": s.name, "description": s.description or s.name, "tags": s.tags,
                 **({"examples": s.examples} if s.examples else {})} for s in agent.skills]
    tags = [agent.kind, *(t.rstrip("_*") for t in agent.tools[:8])]
    return [{"id": agent.name, "name": agent.name, "description": agent.description or f"a tern {agent.kind} agent",
             "tags": [t for t in tags if t]}]


def card(config: Config, agent: AgentConfig, base: str, *, secured: bool) -> dict[str, Any]:
    url = agent_url(config, base, agent.name)
    out: dict[str, Any] = {
        "name": agent.name,
        "description": agent.description or f"a tern {agent.kind} agent",
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                                {"url": url + "/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
                                {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}],
        "provider": {"organization": "tern", "url": base},
        "version": __version__,
        "capabilities": {"streaming": True, "pushNotifications": True},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills(agent),
    }
    compat = config.a2a.card_03_fields
    if compat:  # 0.3 compatibility fields, as the SDKs serve them alongside 1.0
        out.update({"url": url, "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0",
                    "additionalInterfaces": [{"url": url, "transport": "JSONRPC"}]})
    if secured:  # a caller can authenticate: the extended card is theirs to read (card_routes.py)
        out["capabilities"]["extendedAgentCard"] = True
        if compat:
            out["supportsAuthenticatedExtendedCard"] = True
        scheme: dict[str, Any] = {"httpAuthSecurityScheme": {"scheme": "Bearer"}}
        # the 0.3 keys repeat the 1.0 ones exactly: a verifier maps them back before it checks the signature
        out["securitySchemes"] = {"bearer": {**scheme, "type": "http", "scheme": "Bearer"} if compat else scheme}
        out["securityRequirements"] = [{"schemes": {"bearer": {"list": []}}}]
        if compat:
            out["security"] = [{"bearer": []}]
    return out


def extended_card(config: Config, agent: AgentConfig, base: str, *, secured: bool) -> dict[str, Any]:
    """The authenticated extended card: the public one plus what the agent may use (its
    tool allowlist, the one tool of a ``tool`` agent, the peer of a ``remote`` one), one
    skill each (``tool:<pattern>``, ``agent:<peer>``), for callers trusted to see how it works."""
    out = card(config, agent, base, secured=secured)
    uses = [("tool", pattern) for pattern in [*agent.tools, *([agent.tool] if agent.tool else [])]]
    uses += [("agent", agent.remote)] if agent.remote else []
    out["skills"] = out["skills"] + [
        {"id": f"{kind}:{name}", "name": name, "tags": [kind],
         "description": f"{agent.name} may call the {'tools matching' if kind == 'tool' else 'A2A agent'} {name}"}
        for kind, name in uses]
    return out


def legacy_card(config: Config, agent: AgentConfig, base: str, *, secured: bool) -> dict[str, Any]:
    """The 0.1 shape (OpenFang, the seed): ``/.well-known/agent.json``."""
    out: dict[str, Any] = {
        "name": agent.name,
        "description": agent.description or f"a tern {agent.kind} agent",
        "url": agent_url(config, base, agent.name),
        "provider": {"organization": "tern", "url": base},
        "version": __version__,
        "capabilities": {"streaming": True, "pushNotifications": True, "stateTransitionHistory": False},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [{**s, "inputModes": ["text"], "outputModes": ["text"]} for s in skills(agent)],
    }
    if secured:
        out["authentication"] = {"schemes": ["Bearer"]}
    return out
