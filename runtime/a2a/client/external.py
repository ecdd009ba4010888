"""``[a2a] external_agents``: A2A agents elsewhere, for tern's own agents to use.

Each is discovered at boot in the background (``discovery_timeout_secs``, failures
logged, boot never waits) and again on first use if that failed. It then serves as:

- the tool ``a2a_{name}`` (one ``message``, an optional ``context_id``), which goes
  through the kernel's tool pipeline like any tool; its replies count as untrusted
  network content for taint tracking;
- the target of ``kind = "remote"`` agents (``remote = "{name}"``), so ``tern run``,
  ``agent_send``, MCP and A2A clients reach it like a local agent.

Every request goes through tern's guarded HTTP client (metadata and link-local
addresses refused, DNS pinned per connection); header values may use ``${VAR}``.
Credentials (``auth``) are chosen once the card is read (``security.choose``): the
card's requirements decide where a token goes, and may name the token endpoint; a
client certificate (``tls_client_cert``) is this peer's only.
A peer with ``card_public_key`` or ``card_jwks_url`` must serve a card signed by
that key (``card_trust.py``); a bad pinned key fails that peer only.
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

import msgspec
import trio

from runtime.config import Config, ExternalAgent
from runtime.errors import TernError
from runtime.log import get_logger

__all__ = ["ExternalAgents", "RemoteReply", "tool_name"]

log = get_logger("a2a.external")


class RemoteReply(msgspec.Struct, frozen=True):
    text: str
    context_id: str
    state: str
    task_id: str = ""


def tool_name(name: str) -> str:
    return "a2a_" + name.replace("-", "_")


class _Peer:
    def __init__(self, entry: ExternalAgent) -> None:
        self.entry = entry
        self.client: Any = None
        self.remote: Any = None
        self.error = ""
        self.state = "discovering"
        self.lock = trio.Lock()
        self.since = time.time()
        self.header_names: frozenset[str] = frozenset()


class ExternalAgents:
    def __init__(self, config: Config, policy: Any, *, on_event: Any = None) -> None:
        self.config = config
        self.policy = policy
        self.on_event = on_event
        self.timeout = config.a2a.discovery_timeout_secs
        self.peers = {entry.name: _Peer(entry) for entry in config.a2a.external_agents if entry.enabled}
        self.tokens: Any = None  # the TokenCache every peer's client-credentials tokens come from

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from runtime.a2a.client.client import A2aClient
        from runtime.net.credentials import TokenCache
        from runtime.net.headers import expand_headers
        from runtime.net.tls import client_context

        async with AsyncExitStack() as stack:
            self.tokens = await stack.enter_async_context(TokenCache(self.policy, timeout_secs=self.timeout))
            for peer in self.peers.values():
                try:
                    headers = expand_headers(peer.entry.headers, f"a2a.external_agents '{peer.entry.name}'")
                    tls = client_context(peer.entry.tls_client_cert, peer.entry.tls_client_key)
                    trust = card_trust(peer.entry)
                except TernError as exc:  # an unset ${VAR}, a certificate gone, an unusable pinned key: this peer only
                    peer.state, peer.error = "failed", str(exc)
                    continue
                peer.header_names = frozenset(name.lower() for name in headers)
                peer.client = await stack.enter_async_context(
                    A2aClient(policy=self.policy, timeout=self.timeout, headers=headers, tls=tls, trust=trust))
            async with trio.open_nursery() as nursery:
                task_status.started()
                for peer in self.peers.values():
                    if peer.client is not None:
                        nursery.start_soon(self._discover, peer)
                await trio.sleep_forever()

    async def _discover(self, peer: _Peer) -> Any:
        async with peer.lock:
            if peer.remote is not None:
                return peer.remote
            try:
                remote = await peer.client.discover(peer.entry.url, timeout=self.timeout)
                peer.client.credentials = self._credentials(peer, remote.card)
                peer.remote = remote
            except (TernError, OSError) as exc:
                peer.state, peer.error, peer.since = "failed", str(exc), time.time()
                log.warning("A2A agent '%s' at %s: discovery failed: %s", peer.entry.name, peer.entry.url, exc)
            else:
                peer.state, peer.error, peer.since = "ready", "", time.time()
                log.info("A2A agent '%s': %s, dialect %s", peer.entry.name, peer.remote.url, peer.remote.dialect)
            if self.on_event is not None:
                self.on_event("a2a.peer", {"name": peer.entry.name, "state": peer.state, "error": peer.error})
            return peer.remote

    def _credentials(self, peer: _Peer, card: dict[str, Any]) -> Any:
        """What ``peer`` gets on every call, as its card asks and its entry allows; None
        for nothing beyond its headers and certificate. TernError when the card asks for
        credentials the entry does not have."""
        from runtime.a2a.client.security import choose
        from runtime.net.credentials import credential_for

        entry, owner = peer.entry, f"A2A agent '{peer.entry.name}'"
        plan = choose(card, owner, auth=entry.auth.kind if entry.auth else "",
                      token_url=entry.auth.token_url if entry.auth else "", headers=peer.header_names,
                      has_cert=bool(entry.tls_client_cert))
        if plan.kind == "none" or entry.auth is None:
            return None
        return credential_for(entry.auth, owner, self.tokens, header=plan.header, token_url=plan.token_url,
                              scopes=plan.scopes, metadata_url=plan.metadata_url)

    async def send(self, name: str, text: str, *, context_id: str | None = None) -> RemoteReply:
        """One blocking exchange with the named peer (discovering it first if needed)."""
        from runtime.a2a.client.client import reply_text
        from runtime.a2a.model import Task

        peer = self.peers.get(name)
        if peer is None:
            raise TernError(f"no A2A agent named {name!r} in [a2a] external_agents")
        if peer.client is None:
            raise TernError(f"A2A agent {name!r} is not usable: {peer.error}")
        remote = peer.remote or await self._discover(peer)
        if remote is None:
            raise TernError(f"A2A agent {name!r} at {peer.entry.url} cannot be reached: {peer.error}")
        result = await peer.client.send(remote, text, context_id=context_id)
        if isinstance(result, Task):
            if result.state in ("failed", "rejected", "canceled"):
                raise TernError(
                    f"A2A agent {name!r}: the task {result.state}: {reply_text(result) or 'no reason given'}"
                )
            return RemoteReply(reply_text(result), result.context_id or context_id or "", result.state, result.id)
        return RemoteReply(reply_text(result), result.context_id or context_id or "", "completed")

    def statuses(self) -> list[dict[str, Any]]:
        """Each peer's state, its URLs masked as the config's are (a token in a path or query)."""
        from runtime.config.dump import mask_url

        return [
            {
                "name": name,
                "url": mask_url(peer.entry.url),
                "state": peer.state,
                "error": peer.error,
                "dialect": peer.remote.dialect if peer.remote else None,
                "endpoint": mask_url(peer.remote.url) if peer.remote else None,
            }
            for name, peer in self.peers.items()
        ]


def card_trust(entry: ExternalAgent) -> Any:
    """How this peer's card signatures are checked: its pinned key (inline JWK JSON or a
    file of one), its trusted JWKS URL, or neither."""
    from runtime.a2a.client.card_trust import CardTrust
    from runtime.crypto.jwk import BadKey, public_key
    from runtime.wire.depth import loads

    text = entry.card_public_key.strip()
    if not text:
        return CardTrust(jwks_url=entry.card_jwks_url)
    where = f"a2a.external_agents '{entry.name}' card_public_key"
    try:
        if not text.startswith("{"):
            with open(text, "rb") as handle:
                text = handle.read(64 * 1024).decode("utf-8")
        document = loads(text)
        if isinstance(document, dict) and isinstance(document.get("keys"), list) and len(document["keys"]) == 1:
            document = document["keys"][0]  # a JWKS holding the one key
        return CardTrust(pinned=public_key(document))
    except (OSError, UnicodeDecodeError, ValueError, BadKey) as exc:
        raise TernError(f"{where}: {exc}") from None


def register_tools(registry: Any, external: ExternalAgents) -> None:
    """``a2a_{name}`` for every external agent, through the pipeline like any tool."""
    from runtime.ports import Tool, ToolContext, ToolResult

    for name, peer in external.peers.items():
        description = f"Ask the A2A agent {name} ({peer.entry.url}) and get its reply."

        async def handler(arguments: dict[str, Any], context: ToolContext, _name: str = name) -> ToolResult:
            try:
                reply = await external.send(_name, arguments["message"], context_id=arguments.get("context_id"))
            except TernError as exc:
                return ToolResult(str(exc), is_error=True)
            return ToolResult(
                reply.text, structured={"reply": reply.text, "context_id": reply.context_id, "state": reply.state}
            )

        registry.register(
            Tool(
                tool_name(name),
                description,
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["message"],
                    "properties": {
                        "message": {"type": "string", "maxLength": 100_000},
                        "context_id": {"type": "string", "maxLength": 200},
                    },
                },
                annotations={"readOnlyHint": False, "destructiveHint": False, "openWorldHint": True},
            ),
            handler,
        )
