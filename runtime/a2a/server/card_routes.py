"""The routes that serve agent cards: public, with ETag, Cache-Control and
Last-Modified, so peers can cache what they read before they send anything."""

from __future__ import annotations

import hashlib
import time
from email.utils import formatdate
from typing import Any
from collections.abc import Callable

import msgspec

from runtime.a2a.server.cards import base_url, card, legacy_card
from runtime.config import AgentConfig, Config
from runtime.httpd.messages import Request, Response

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

    async def default_card(self, request: Request) -> Response:
        return self._cached(request, card(self.config, self.agent(self.default_agent), self._base(request),
                                          secured=self.secured))

    async def default_legacy_card(self, request: Request) -> Response:
        return self._cached(request, legacy_card(self.config, self.agent(self.default_agent), self._base(request),
                                                 secured=self.secured))

    async def agent_card(self, request: Request) -> Response:
        return self._cached(request, card(self.config, self.agent(request.params["agent"]), self._base(request),
                                          secured=self.secured))

    async def list_agents(self, request: Request) -> Response:
        base = self._base(request)
        cards = [card(self.config, agent, base, secured=self.secured) for agent in self.config.agents]
        return self._cached(request, {"agents": cards, "total": len(cards)})
