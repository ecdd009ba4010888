"""Signed agent cards (A2A 1.0 ``AgentCard.signatures``), sans-IO: what a signature
covers, tern's signature on its own cards, and the check of a peer's.

A signature is a JWS with a detached payload: the RFC 8785 form of the card without
``signatures``, with empty strings, lists and objects left out (the a2a-sdk's rule).
Which card: the SDKs sign the 1.0 card and serve it with the 0.3 fields merged in
(``url``, ``preferredTransport``, ``protocolVersion``, ``additionalInterfaces``,
``security``, ``supportsAuthenticatedExtendedCard``, the 0.3 keys of a security
scheme), and their verifier maps those fields back into the 1.0 card before it checks
(:func:`signed_view` does the same). A signer that signed the whole card as served is
checked against that form too. Whichever form a signature covers, a 0.3 endpoint
(``url``, ``additionalInterfaces``) must be one the signed card names, or a client
reading it would go where no signature sent it.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from runtime.crypto import jws
from runtime.crypto.jwk import PublicKey, SigningKey
from runtime.errors import ProtocolError
from runtime.wire.jcs import CanonicalError, canonicalize

__all__ = ["CardSignature", "CardRefused", "MAX_SIGNATURES", "signed_view", "payloads", "sign_card",
           "signatures_of", "check", "uncovered_endpoints"]

MAX_SIGNATURES = 8
_COMPAT_KEYS = ("url", "preferredTransport", "protocolVersion", "additionalInterfaces", "security",
                "supportsAuthenticatedExtendedCard")
_SCHEME_WRAPPERS = {"apiKey": "apiKeySecurityScheme", "http": "httpAuthSecurityScheme",
                    "oauth2": "oauth2SecurityScheme", "openIdConnect": "openIdConnectSecurityScheme",
                    "mutualTLS": "mtlsSecurityScheme"}


class CardRefused(ProtocolError, ValueError):
    """The card's signatures do not hold; the text says why (every reason, once)."""


class CardSignature(NamedTuple):
    protected: str
    header: dict[str, Any]
    signature: str


def _clean(value: Any) -> Any:
    """The a2a-sdk's ``_clean_empty``: "" and empty lists and objects dropped, recursively."""
    if isinstance(value, dict):
        out = {k: c for k, v in value.items() if (c := _clean(v)) is not None}
        return out or None
    if isinstance(value, list):
        items = [c for v in value if (c := _clean(v)) is not None]
        return items or None
    if value == "" and isinstance(value, str):
        return None
    return value


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _requirements(legacy: Any) -> list[dict[str, Any]]:
    return [{"schemes": {name: {"list": scopes} for name, scopes in entry.items()}}
            for entry in legacy if isinstance(entry, dict)] if isinstance(legacy, list) else []


def signed_view(card: dict[str, Any]) -> dict[str, Any]:
    """The 1.0 card as the a2a-sdk's verifier sees it (its ``parse_agent_card``): the 0.3
    fields mapped into their 1.0 places or dropped, ``signatures`` left out."""
    view = copy.deepcopy({k: v for k, v in card.items() if k != "signatures"})
    if view.pop("supportsAuthenticatedExtendedCard", None) and isinstance(view.get("capabilities", {}), dict):
        view.setdefault("capabilities", {}).setdefault("extendedAgentCard", True)
    url, binding = view.pop("url", None), view.pop("preferredTransport", "JSONRPC")
    version, extra = view.pop("protocolVersion", "0.3.0"), _list(view.pop("additionalInterfaces", None))
    if "supportedInterfaces" not in view and url:
        view["supportedInterfaces"] = [{"url": url, "protocolBinding": binding, "protocolVersion": version}] + [
            {"url": i.get("url"), "protocolBinding": i.get("transport"), "protocolVersion": version}
            for i in extra if isinstance(i, dict)]
    legacy = view.pop("security", None)
    if "securityRequirements" not in view and legacy is not None:
        view["securityRequirements"] = _requirements(legacy)
    for skill in _list(view.get("skills")):
        if isinstance(skill, dict):
            legacy = skill.pop("security", None)
            if "securityRequirements" not in skill and legacy is not None:
                skill["securityRequirements"] = _requirements(legacy)
    schemes = view.get("securitySchemes")
    for name, scheme in (schemes.items() if isinstance(schemes, dict) else ()):
        if not isinstance(scheme, dict):
            continue
        kind = scheme.get("type")
        wrappers = {k: v for k, v in scheme.items() if k in _SCHEME_WRAPPERS.values()}
        if wrappers:  # served in both shapes: the 1.0 one is what was signed
            schemes[name] = wrappers
        elif kind in _SCHEME_WRAPPERS:
            body = {k: v for k, v in scheme.items() if k != "type"}
            if kind == "apiKey" and "in" in body:
                body["location"] = body.pop("in")
            schemes[name] = {_SCHEME_WRAPPERS[kind]: body}
    capabilities = view.get("capabilities")
    if isinstance(capabilities, dict):
        capabilities.pop("stateTransitionHistory", None)  # 0.3 only: not in the 1.0 card
    return _clean(view) or {}


def payloads(card: dict[str, Any]) -> list[tuple[bytes, dict[str, Any]]]:
    """The forms a signature on ``card`` may cover, each ``(canonical bytes, the card as
    signed)``: the 1.0 view, then the whole card as served when that differs."""
    whole = _clean({k: v for k, v in card.items() if k != "signatures"}) or {}
    out: list[tuple[bytes, dict[str, Any]]] = []
    for form in (signed_view(card), whole):
        try:
            data = canonicalize(form)
        except CanonicalError as exc:
            raise CardRefused(f"the card has no canonical form to check a signature against: {exc}") from None
        if not out or out[0][0] != data:
            out.append((data, form))
    return out


def sign_card(card: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """``card`` with tern's signature (over its 1.0 view) as its only ``signatures`` entry."""
    protected, signature = jws.sign(key, {"typ": "JOSE"}, canonicalize(signed_view(card)))
    return {**card, "signatures": [{"protected": protected, "signature": signature}]}


def signatures_of(card: dict[str, Any]) -> tuple[list[CardSignature], list[str]]:
    """The card's well-formed signatures and why the others are not."""
    entries = card.get("signatures")
    if entries is None:
        return [], []
    if not isinstance(entries, list):
        raise CardRefused("the card's signatures are not a list")
    if len(entries) > MAX_SIGNATURES:
        raise CardRefused(f"the card has {len(entries)} signatures (tern checks at most {MAX_SIGNATURES})")
    good, problems = [], []
    for i, entry in enumerate(entries):
        try:
            if not isinstance(entry, dict) or not isinstance(entry.get("signature"), str):
                raise jws.BadJws("not an object with protected and signature strings")
            good.append(CardSignature(entry.get("protected"), jws.protected_header(entry.get("protected")),
                                      entry["signature"]))
        except jws.BadJws as exc:
            problems.append(f"signature {i + 1}: {exc}")
    return good, problems


def check(forms: list[tuple[bytes, dict[str, Any]]], signature: CardSignature, key: PublicKey) -> dict[str, Any]:
    """The form of the card ``signature`` holds for with ``key``; :class:`CardRefused` if none."""
    try:
        for data, form in forms:
            if jws.verify(key, signature.protected, data, signature.signature):
                return form
    except jws.BadJws as exc:
        raise CardRefused(str(exc)) from None
    raise CardRefused(f"the signature by key {key.kid[:64]!r} does not match the card (changed after signing, "
                      "or another key)")


def uncovered_endpoints(card: dict[str, Any], signed: dict[str, Any]) -> list[str]:
    """The card's 0.3 endpoint URLs that its signed form does not name."""
    named = [i.get("url") for i in _list(signed.get("supportedInterfaces")) if isinstance(i, dict)]
    named.append(signed.get("url"))
    urls = [card.get("url")] + [i.get("url") for i in _list(card.get("additionalInterfaces")) if isinstance(i, dict)]
    return [str(u)[:200] for u in urls if u and u not in named]
