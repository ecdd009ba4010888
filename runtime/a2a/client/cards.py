"""Reading a peer's agent card and choosing how to speak to it (sans-IO).

Discovery tries ``<url>/.well-known/agent-card.json``, then ``agent.json`` (and the
same two at the host's root when ``url`` has a path); a URL ending in ``.json`` is
the card itself. A card must be a JSON object with a name and an endpoint. The
dialect comes from the card: a ``supportedInterfaces`` JSONRPC entry with
protocolVersion 1.x is 1.0 (that entry's URL and tenant); 0.2/0.3 markers
(``protocolVersion``, ``preferredTransport``, ``additionalInterfaces``,
``securitySchemes``, or a card found at the 0.3 location) are 0.3; anything else is
the legacy 0.1 shape (``tasks/send``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import msgspec

from runtime.wire.depth import loads as json_loads
from runtime.a2a.client.requests import A2aClientError, snippet

__all__ = ["RemoteAgent", "NoCard", "CARD_PATHS", "card_urls", "read_card", "remote"]

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")


class RemoteAgent(msgspec.Struct, kw_only=True):
    """A discovered peer: where to send JSON-RPC, in which dialect, and its card."""

    name: str
    url: str  # the JSON-RPC endpoint
    dialect: str  # "0.1" | "0.3" | "1.0"
    card_url: str
    description: str = ""
    streaming: bool = False
    skills: list[dict[str, Any]] = []
    tenant: str | None = None
    card: dict[str, Any] = {}


class NoCard(A2aClientError):
    """This candidate URL has no usable card; try the next one. ``said``: the server's own
    words about it, if any (a tern with A2A off says what turns it on)."""

    def __init__(self, text: str, said: str = "") -> None:
        super().__init__(text)
        self.said = said


def card_urls(url: str) -> list[str]:
    """Where to look for the card of the peer at ``url``, in order."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path.endswith(".json"):
        return [url]
    base = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    urls = [base + suffix for suffix in CARD_PATHS]
    if path:  # the well-known location is at the host's root too
        root = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        urls += [root + suffix for suffix in CARD_PATHS]
    return urls


def read_card(body: bytes, card_url: str, content_type: str) -> dict[str, Any]:
    """The card in a 200 answer's ``body``; :class:`NoCard` says why it is not one."""
    try:
        card = json_loads(body)
    except (ValueError, UnicodeDecodeError):
        kind = content_type.split(";")[0]
        raise NoCard(f"{short(card_url)}: not JSON ({kind}: {snippet(body)})") from None
    if not isinstance(card, dict):
        raise NoCard(f"{short(card_url)}: a card must be a JSON object, got {type(card).__name__}")
    if not isinstance(card.get("name"), str) or not card["name"]:
        raise NoCard(f"{short(card_url)}: the card has no name")
    return card


def short(url: str) -> str:
    return urlsplit(url).path or url


def _pick_interface(card: dict[str, Any], major: str) -> dict[str, Any] | None:
    """The first JSONRPC entry of ``supportedInterfaces`` whose protocolVersion has this
    major version ("1" or "0"): the card lists them in order of preference."""
    for entry in card.get("supportedInterfaces") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str) or not entry["url"]:
            continue
        binding = str(entry.get("protocolBinding") or entry.get("transport") or "").upper()
        version = str(entry.get("protocolVersion") or "")
        if binding in ("JSONRPC", "JSON-RPC") and version.split(".")[0] == major:
            return entry
    return None


def _jsonrpc_url_03(card: dict[str, Any]) -> str | None:
    preferred = str(card.get("preferredTransport") or "JSONRPC").upper()
    if preferred in ("JSONRPC", "JSON-RPC") and isinstance(card.get("url"), str) and card["url"]:
        return card["url"]
    for entry in card.get("additionalInterfaces") or []:
        if isinstance(entry, dict) and str(entry.get("transport") or "").upper() in ("JSONRPC", "JSON-RPC") \
                and isinstance(entry.get("url"), str) and entry["url"]:
            return entry["url"]
    entry = _pick_interface(card, "0")
    return entry["url"] if entry else None


def _looks_03(card: dict[str, Any], card_url: str) -> bool:
    version = str(card.get("protocolVersion") or "")
    return (version.startswith(("0.2", "0.3")) or any(key in card for key in (
        "preferredTransport", "additionalInterfaces", "securitySchemes", "supportsAuthenticatedExtendedCard"))
        or _pick_interface(card, "0") is not None or card_url.rstrip("/").endswith("agent-card.json"))


def remote(card: dict[str, Any], card_url: str, forced: str | None) -> RemoteAgent:
    """The peer a card describes, in the dialect it prefers (or ``forced``)."""
    v10 = _pick_interface(card, "1")
    tenant = None
    if forced == "1.0" or (forced is None and v10 is not None):
        dialect = "1.0"
        url = v10["url"] if v10 else card.get("url")
        tenant = v10.get("tenant") if v10 else None
    elif forced == "0.3" or (forced is None and _looks_03(card, card_url)):
        dialect, url = "0.3", _jsonrpc_url_03(card)
    else:
        dialect, url = "0.1", card.get("url")
    if not isinstance(url, str) or not url:
        where = {"1.0": "no JSONRPC 1.x entry in supportedInterfaces and no url",
                 "0.3": "no JSON-RPC url (preferredTransport, additionalInterfaces, supportedInterfaces)",
                 "0.1": "no url"}[dialect]
        raise A2aClientError(f"the agent card at {card_url} names no endpoint tern can use for A2A {dialect}: {where}")
    url = urljoin(card_url, url)  # a relative endpoint is relative to the card
    capabilities = card.get("capabilities") if isinstance(card.get("capabilities"), dict) else {}
    skills = [s for s in card.get("skills") or [] if isinstance(s, dict)]
    return RemoteAgent(name=card["name"], url=url, dialect=dialect, card_url=card_url,
                       description=str(card.get("description") or ""), streaming=bool(capabilities.get("streaming")),
                       skills=skills, tenant=tenant if isinstance(tenant, str) and tenant else None, card=card)
