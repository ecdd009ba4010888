"""The routes that serve agent cards: public, with ETag, Cache-Control and
Last-Modified, so peers can cache what they read before they send anything. Every 1.0
card is signed (``card_signing.py``; the 0.1 shape has no place for a signature) and
``/.well-known/jwks.json`` serves the key that checks them. The authenticated extended
card is served by the JSON-RPC and HTTP+JSON bindings through :meth:`CardRoutes.extended`."""

from __future__ import annotations

import hashlib
import time
from email.utils import formatdate
from typing import Any
from collections.abc import Callable

import msgspec

from runtime.a2a.protocol import EXTENDED_CARD_NOT_CONFIGURED
from runtime.a2a.server.card_signing import CardSigner
from runtime.a2a.server.cards import base_url, card, extended_card, legacy_card
from runtime.a2a.server.request import may_read_extended_card
from runtime.config import AgentConfig, Config
from runtime.errors import RpcError
from runtime.httpd.messages import HttpError, Request, Response

__all__ = ["CardRoutes"]

_encoder = msgspec.json.Encoder()


class CardRoutes:
    """``agent(name)`` finds a configured agent (404 if none); ``bound()`` is the
    listener's ``(host, port)`` once the daemon listens (the cards' fallback URL)."""

    def __init__(self, config: Config, agent: Callable[[str], AgentConfig], default_agent: str, *, secured: bool,
                 bound: Callable[[], Any]) -> None:
        self.config = config
        self.agent = agent
        self.default_agent = default_agent
        self.secured = secured
        self.bound = bound
        self.started = time.time()
        self.signer = CardSigner(config)
        self.signer.key()  # made or read now: a bad key file stops the start, not each card request

    def _base(self, request: Request) -> str:
        return base_url(self.config, self.bound(), request.header(b"host"))

    def _cached(self, request: Request, body: Any) -> Response:
        data = _encoder.encode(body)
        etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
        headers = [(b"etag", etag.encode()), (b"cache-control", b"public, max-age=60"),
                   (b"last-modified", formatdate(self.started, usegmt=True).encode())]
        if request.header(b"if-none-match") == etag:
            return Response(304, b"", headers)
        return Response(200, data, headers)

    def _card(self, request: Request, agent: AgentConfig) -> dict[str, Any]:
        return self.signer.sign(card(self.config, agent, self._base(request), secured=self.secured))

    async def default_card(self, request: Request) -> Response:
        return self._cached(request, self._card(request, self.agent(self.default_agent)))

    async def default_legacy_card(self, request: Request) -> Response:
        return self._cached(request, legacy_card(self.config, self.agent(self.default_agent), self._base(request),
                                                 secured=self.secured))

    async def agent_card(self, request: Request) -> Response:
        return self._cached(request, self._card(request, self.agent(request.params["agent"])))

    async def list_agents(self, request: Request) -> Response:
        cards = [self._card(request, agent) for agent in self.config.agents]
        return self._cached(request, {"agents": cards, "total": len(cards)})

    async def jwks(self, request: Request) -> Response:
        return self._cached(request, self.signer.jwks())

    def extended(self, request: Request, agent: str) -> dict[str, Any]:
        """``GetExtendedAgentCard``: for callers whose key has the "card" scope. A tern with
        no key authenticates no one, so it has no extended card (the public card says so)."""
        if not self.secured:
            raise RpcError(EXTENDED_CARD_NOT_CONFIGURED, "this tern has no API key, so it has no authenticated "
                           "extended card")
        if not may_read_extended_card(request):
            raise HttpError(403, 'this key may not read the extended agent card (it needs the "card" scope)')
        return self.signer.sign(extended_card(self.config, self.agent(agent), self._base(request),
                                              secured=self.secured))
