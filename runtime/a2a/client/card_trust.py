"""Checking a peer's signed agent card before tern uses it (A2A 1.0 ``signatures``).

Three ways to trust a peer's card, per peer:

- **pinned** (``card_public_key``): only that key; the card must carry a valid
  signature by it.
- **a trusted key set** (``card_jwks_url``): the keys of that JWKS; the card must carry a
  valid signature by one of them, named by ``kid``.
- **neither** (every other peer): an unsigned card is taken as it is; a signed one is
  checked against the JWKS at the card's own origin (its ``jku`` when that is on the
  same origin, else ``/.well-known/jwks.json``), so a card changed on the way, or
  signed by a key its server does not publish, is refused.

Any one valid signature suffices; when none is, the card is refused with every
signature's reason. A ``jku`` outside the trusted URLs and any ``x5u`` are refused
(tern fetches keys only from where it was told to trust them). An unknown ``kid``
refetches the key set once, at most every :data:`REFRESH_SECS`; key sets are cached
for :data:`TTL_SECS` and read through the SSRF guard, bounded in size and time by the
client's ``fetch``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import trio

from runtime.a2a.signatures import CardRefused, CardSignature, check, payloads, signatures_of, uncovered_endpoints
from runtime.crypto.jwk import MAX_KEYS, BadKey, PublicKey, public_key
from runtime.errors import TernError

__all__ = ["CardTrust", "CardRefused", "TTL_SECS", "REFRESH_SECS", "MAX_JWKS_BYTES", "JWKS_PATH"]

TTL_SECS = 300.0
REFRESH_SECS = 30.0
MAX_JWKS_BYTES = 64 * 1024
JWKS_PATH = "/.well-known/jwks.json"

Fetch = Callable[[str], Awaitable[Any]]  # GET a URL's JSON (bounded, guarded), or raise with the reason


class _KeySet:
    def __init__(self) -> None:
        self.fetched = -float("inf")
        self.keys: dict[str, PublicKey] = {}
        self.unusable: dict[str, str] = {}


class CardTrust:
    def __init__(self, *, pinned: PublicKey | None = None, jwks_url: str = "") -> None:
        self.pinned = pinned
        self.jwks_url = jwks_url
        self.required = pinned is not None or bool(jwks_url)
        self._sets: dict[str, _KeySet] = {}

    async def verify(self, card: dict[str, Any], card_url: str, fetch: Fetch) -> None:
        """Return if the card may be used; :class:`CardRefused` says why not."""
        signatures, problems = signatures_of(card)
        if not signatures and not problems:
            if self.required:
                raise CardRefused("the card is not signed, and this peer's card must be (card_public_key or "
                                  "card_jwks_url is set)")
            return
        forms = payloads(card)
        for i, signature in enumerate(signatures):
            try:
                key = await self._key(signature, card_url, fetch)
                uncovered = uncovered_endpoints(card, check(forms, signature, key))
                if uncovered:
                    raise CardRefused(f"the endpoint {uncovered[0]} is not in the signed card")
                return
            except CardRefused as exc:
                problems.append(f"signature {i + 1}: {exc}")
        raise CardRefused("no valid signature (" + "; ".join(problems) + ")")

    async def _key(self, signature: CardSignature, card_url: str, fetch: Fetch) -> PublicKey:
        header = signature.header
        if "x5u" in header:
            raise CardRefused("an x5u certificate URL: tern fetches keys only from trusted key sets")
        jku, kid = header.get("jku"), header.get("kid")
        if self.pinned is not None:
            if jku is not None:
                raise CardRefused(f"jku {jku[:200]} is not trusted (this peer's key is pinned)")
            return self.pinned
        origin = _origin(card_url)
        trusted = self.jwks_url or (jku if jku is not None and _origin(jku) == origin else origin + JWKS_PATH)
        if jku is not None and jku != trusted:
            raise CardRefused(f"jku {jku[:200]} is not a trusted key set (trusted: {trusted[:200]})")
        keys = await self._keys(trusted, fetch, refresh=False)
        if kid is None:
            if len(keys.keys) != 1:
                raise CardRefused(f"no kid, and the key set at {trusted[:200]} has {len(keys.keys)} usable keys")
            return next(iter(keys.keys.values()))
        if kid not in keys.keys and kid not in keys.unusable:
            keys = await self._keys(trusted, fetch, refresh=True)
        if kid in keys.unusable:
            raise CardRefused(f"the key {kid[:64]!r} at {trusted[:200]} cannot be used: {keys.unusable[kid]}")
        if kid not in keys.keys:
            raise CardRefused(f"unknown kid {kid[:64]!r}: not in the key set at {trusted[:200]}")
        return keys.keys[kid]

    async def _keys(self, url: str, fetch: Fetch, *, refresh: bool) -> _KeySet:
        now = trio.current_time()
        keys = self._sets.get(url)
        age = now - keys.fetched if keys is not None else float("inf")
        if keys is not None and (age < REFRESH_SECS or (age < TTL_SECS and not refresh)):
            return keys
        fresh = _KeySet()
        try:
            document = await fetch(url)
        except (TernError, ValueError) as exc:  # the fetch's own words: status, size, time, address refused
            raise CardRefused(f"the key set at {url[:200]} cannot be read: {exc}") from None
        fresh.fetched = now
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise CardRefused(f"the key set at {url[:200]} is not a JWKS (no keys list)")
        for entry in entries[:MAX_KEYS]:
            kid = entry.get("kid") if isinstance(entry, dict) else None
            try:
                key = public_key(entry)
            except BadKey as exc:
                if isinstance(kid, str):
                    fresh.unusable[kid] = str(exc)
                continue
            fresh.keys[key.kid] = key
        self._sets[url] = fresh
        return fresh


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"
