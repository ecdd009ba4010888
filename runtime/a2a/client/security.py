"""Which credentials to present to a peer, from its card's security requirements and
what the config has (sans-IO).

A card lists alternatives, each a set of schemes that must all be met: A2A 0.3's
``security: [{name: [scopes]}]`` over OpenAPI-shaped ``securitySchemes`` (``type``
http/apiKey/oauth2/openIdConnect/mutualTLS), A2A 1.0's ``securityRequirements:
[{schemes: {name: {list: [scopes]}}}]`` over one-of ``securitySchemes``
(``httpAuthSecurityScheme``, ``apiKeySecurityScheme``, ``oauth2SecurityScheme``, ...).
The first alternative the config can meet wins:

- HTTP bearer: the configured ``auth`` (either kind), or an ``Authorization`` header;
- OAuth 2.0: ``auth`` of either kind (a bearer token is an OAuth token someone got),
  client credentials at the configured ``token_url``, else the card's
  ``clientCredentials.tokenUrl`` (https only, or loopback http), with the configured
  scopes, else the requirement's;
- an API key in a header: a bearer ``auth`` (its token goes in that header) or the
  header itself among the configured ``headers``;
- mutual TLS: a configured client certificate.

A card with requirements tern cannot meet is refused with one line naming the schemes,
unless the entry configures headers of its own (credentials the card may not describe:
tern itself takes ``X-API-Key`` while its card names only bearer); those, and ``auth``,
are then sent as configured. A card with no requirements leaves the config as it is.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import msgspec

from runtime.a2a.client.requests import A2aClientError

__all__ = ["Scheme", "Plan", "requirements", "choose"]

MAX_ALTERNATIVES = 16  # a hostile card cannot make the choice slow
_ONE_OF = {"httpAuthSecurityScheme": "http", "apiKeySecurityScheme": "apiKey", "oauth2SecurityScheme": "oauth2",
           "openIdConnectSecurityScheme": "openIdConnect", "mtlsSecurityScheme": "mutualTLS"}


class Scheme(msgspec.Struct, frozen=True):
    """One security scheme of a card, as far as tern can meet it."""

    name: str
    type: str  # http | apiKey | oauth2 | openIdConnect | mutualTLS | anything else the card says
    http_scheme: str = ""  # for http: "bearer", "basic", ...
    header: str = ""  # for an apiKey in a header: its name
    location: str = ""  # for an apiKey: header | query | cookie
    token_url: str = ""  # for oauth2: the clientCredentials flow's
    metadata_url: str = ""  # for oauth2: the authorization server's metadata
    scopes: tuple[str, ...] = ()  # what the requirement asks for

    def describe(self) -> str:
        if self.type == "http":
            return f"'{self.name}' (HTTP {self.http_scheme or 'auth'})"
        if self.type == "apiKey":
            return f"'{self.name}' (an API key in the {self.location or 'header'} {self.header!r})"
        if self.type == "oauth2":
            return f"'{self.name}' (OAuth 2.0{' client credentials at ' + self.token_url if self.token_url else ''})"
        return f"'{self.name}' ({self.type or 'an unknown kind'})"


class Plan(msgspec.Struct, frozen=True):
    """What to present: ``kind`` "none" (nothing beyond the configured headers and
    certificate), "bearer" or "client_credentials"; ``header``: where a bearer secret
    goes; the card's ``token_url``, ``metadata_url`` and ``scopes`` for client credentials."""

    kind: str = "none"
    header: str = "Authorization"
    token_url: str = ""
    metadata_url: str = ""
    scopes: tuple[str, ...] = ()
    scheme: str = ""  # the card's scheme it meets ("" when the card asks for none)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _scheme(name: str, raw: Any, scopes: tuple[str, ...]) -> Scheme:
    if not isinstance(raw, dict):
        return Scheme(name, "")
    kind = _str(raw.get("type"))
    for field, one_of in _ONE_OF.items():  # 1.0: the scheme is a one-of
        if isinstance(raw.get(field), dict):
            kind, raw = one_of, raw[field]
            break
    flows = raw.get("flows") if isinstance(raw.get("flows"), dict) else {}
    flow = flows.get("clientCredentials") if isinstance(flows.get("clientCredentials"), dict) else {}
    return Scheme(name, kind, http_scheme=_str(raw.get("scheme")).lower(), header=_str(raw.get("name")),
                  location=_str(raw.get("in") or raw.get("location")).lower(), token_url=_str(flow.get("tokenUrl")),
                  metadata_url=_str(raw.get("oauth2MetadataUrl")), scopes=scopes)


def _scopes(value: Any) -> tuple[str, ...]:
    if isinstance(value, dict):  # 1.0: {"list": [...]}
        value = value.get("list")
    return tuple(s for s in value if isinstance(s, str))[:64] if isinstance(value, list) else ()


def requirements(card: dict[str, Any]) -> list[list[Scheme]]:
    """The card's alternatives (1.0's ``securityRequirements`` when present, else 0.3's
    ``security``), each the schemes it needs; a scheme the card names but does not
    define counts as one tern cannot meet."""
    defined = card.get("securitySchemes") if isinstance(card.get("securitySchemes"), dict) else {}
    listed = card.get("securityRequirements")
    if isinstance(listed, list):
        listed = [r.get("schemes") if isinstance(r, dict) else None for r in listed]
    else:
        listed = card.get("security")
    if not isinstance(listed, list):
        return []
    out = []
    for requirement in listed[:MAX_ALTERNATIVES]:
        if isinstance(requirement, dict):
            out.append([_scheme(str(name)[:100], defined.get(name), _scopes(scopes))
                        for name, scopes in list(requirement.items())[:MAX_ALTERNATIVES]])
    return [alternative for alternative in out if alternative] if out else []


def _usable_token_url(url: str) -> bool:
    """A card's token endpoint receives tern's client secret: https, or loopback http (tests)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return False
    return parts.scheme == "https" and bool(host) or parts.scheme == "http" and (
        host in ("localhost", "::1") or host.startswith("127."))


def _meets(scheme: Scheme, auth: str, token_url: str, headers: frozenset[str], has_cert: bool) -> Plan | None:
    """How the config meets ``scheme`` (a Plan), or None if it cannot."""
    if scheme.type == "mutualTLS":
        return Plan(scheme=scheme.name) if has_cert else None
    if scheme.type == "apiKey":
        if scheme.location not in ("", "header") or not scheme.header:
            return None
        if scheme.header.lower() in headers:
            return Plan(scheme=scheme.name)
        return Plan("bearer", header=scheme.header, scheme=scheme.name) if auth == "bearer" else None
    bearer_like = scheme.type in ("oauth2", "openIdConnect") or (
        scheme.type == "http" and scheme.http_scheme == "bearer")
    if scheme.type == "http" and "authorization" in headers:
        return Plan(scheme=scheme.name)
    if not bearer_like:
        return None
    if auth == "bearer":
        return Plan("bearer", scheme=scheme.name)
    if auth == "client_credentials":
        card_url = scheme.token_url if scheme.type == "oauth2" and _usable_token_url(scheme.token_url) else ""
        if not token_url and not card_url:
            return None
        return Plan("client_credentials", token_url=card_url, metadata_url=scheme.metadata_url
                    if scheme.metadata_url.startswith("https://") or _usable_token_url(scheme.metadata_url) else "",
                    scopes=scheme.scopes, scheme=scheme.name)
    return Plan(scheme=scheme.name) if "authorization" in headers else None


def choose(card: dict[str, Any], owner: str, *, auth: str = "", token_url: str = "",
           headers: frozenset[str] = frozenset(), has_cert: bool = False) -> Plan:
    """The plan for a peer whose card is ``card``: ``auth`` is the configured kind ("" for
    none), ``token_url`` the configured one, ``headers`` the configured header names
    (lower case). A2aClientError, one line naming the schemes, when the card asks for
    credentials the config does not have."""
    alternatives = requirements(card)
    if not alternatives:
        return Plan(auth or "none")
    for alternative in alternatives:
        plans = [_meets(scheme, auth, token_url, headers, has_cert) for scheme in alternative]
        if all(plan is not None for plan in plans):
            carrying = [plan for plan in plans if plan is not None and plan.kind != "none"]
            return carrying[0] if carrying else Plan(auth or "none", scheme=plans[0].scheme if plans[0] else "")
    if headers:  # the owner chose headers the card may not describe (tern takes X-API-Key; its card says bearer)
        return Plan(auth or "none")
    wanted = " or ".join(" and ".join(scheme.describe() for scheme in alternative) for alternative in alternatives[:4])
    have = f'auth kind = "{auth}"' if auth else "no auth"
    raise A2aClientError(f"{owner}: its agent card asks for the security scheme {wanted}, and tern has no "
                         f"credentials for it ({have}); set auth (or tls_client_cert) on its "
                         "[[a2a.external_agents]] entry")
