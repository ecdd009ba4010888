"""Where an MCP server's authorization lives, and whether what was found there can
be trusted (sans-IO: URLs to try, documents to judge).

- Protected resource metadata (RFC 9728): the ``resource_metadata`` URL of the
  server's challenge, then ``/.well-known/oauth-protected-resource/<path>``, then the
  root one. Its ``resource`` must be the server's URL or a parent of it on the same
  origin (otherwise a server could collect tokens meant for another).
- Authorization server metadata: RFC 8414 with path insertion, then OpenID discovery
  with path insertion, then OpenID appended to the path (the order of the MCP spec);
  the document's ``issuer`` must be the one the URL was built from (RFC 8414 §3.3).
- 2025-03-26 servers have no resource metadata: their origin is the authorization
  server, at ``/.well-known/oauth-authorization-server`` or, lacking even that, at
  ``/authorize``, ``/token`` and ``/register``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import msgspec

from runtime.mcp.client.oauth.model import AsMetadata, AuthError, ResourceMetadata

__all__ = ["resource_metadata_urls", "as_metadata_urls", "parse_resource_metadata", "parse_as_metadata",
           "legacy_as_metadata", "canonical_resource", "same_resource", "origin_of"]

MAX_METADATA_BYTES = 64 * 1024


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _norm(url: str) -> tuple[str, str, int | None, str]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def canonical_resource(server_url: str) -> str:
    """The server's URL as an RFC 8707 resource: no fragment, scheme and host lower
    case, no trailing slash (used when the server publishes no metadata)."""
    parts = urlsplit(server_url)
    netloc = parts.netloc.lower()
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), parts.query, ""))


def same_resource(published: str, server_url: str) -> bool:
    """Whether metadata naming ``published`` may speak for ``server_url``: same
    origin, and the published path is the server's path or a parent of it."""
    pub, srv = _norm(published), _norm(server_url)
    if pub[:3] != srv[:3] or not pub[1]:
        return False
    return srv[3] == pub[3] or srv[3].startswith(pub[3] + "/") or pub[3] == ""


def resource_metadata_urls(server_url: str, header_url: str = "") -> list[str]:
    """The protected resource metadata URLs to try, in order (RFC 9728 §3.1)."""
    parts = urlsplit(server_url)
    base = origin_of(server_url)
    urls = [header_url] if header_url else []
    path = parts.path.rstrip("/")
    if path:
        urls.append(f"{base}/.well-known/oauth-protected-resource{path}")
    urls.append(f"{base}/.well-known/oauth-protected-resource")
    return list(dict.fromkeys(urls))


def as_metadata_urls(issuer: str) -> list[str]:
    """The authorization server metadata URLs for ``issuer``, in the spec's order."""
    parts = urlsplit(issuer)
    base = origin_of(issuer)
    path = parts.path.rstrip("/")
    if not path:
        return [f"{base}/.well-known/oauth-authorization-server", f"{base}/.well-known/openid-configuration"]
    return [f"{base}/.well-known/oauth-authorization-server{path}",
            f"{base}/.well-known/openid-configuration{path}",
            f"{base}{path}/.well-known/openid-configuration"]


def _decode(body: bytes, what: str) -> dict[str, Any]:
    if len(body) > MAX_METADATA_BYTES:
        raise AuthError(f"{what} is larger than {MAX_METADATA_BYTES} bytes")
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise AuthError(f"{what} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise AuthError(f"{what} is not a JSON object")
    return doc


def _strings(doc: dict[str, Any], key: str) -> list[str]:
    value = doc.get(key)
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, str)][:64]


def _http_url(value: Any, what: str, *, required: bool = True) -> str:
    if not isinstance(value, str) or not value:
        if required:
            raise AuthError(f"{what} is missing")
        return ""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment:
        raise AuthError(f"{what} is not an http(s) URL without a fragment: {value[:200]!r}")
    return value


def parse_resource_metadata(body: bytes, server_url: str) -> ResourceMetadata:
    """A protected resource metadata document for ``server_url``; AuthError if it is
    malformed or names another resource."""
    doc = _decode(body, "the protected resource metadata")
    resource = _http_url(doc.get("resource"), "the protected resource metadata's resource")
    if not same_resource(resource, server_url):
        raise AuthError(f"the protected resource metadata names the resource {resource[:200]!r}, "
                        f"not {server_url}: refused (it could collect tokens meant for another server)")
    servers = [_http_url(s, "an authorization server") for s in _strings(doc, "authorization_servers")]
    if not servers:
        raise AuthError("the protected resource metadata names no authorization server")
    return ResourceMetadata(resource=resource, authorization_servers=servers,
                            scopes_supported=_strings(doc, "scopes_supported"))


def _same_issuer(a: str, b: str) -> bool:
    return a == b or (a.rstrip("/") == b.rstrip("/") and not urlsplit(a).path.strip("/"))


def parse_as_metadata(body: bytes, issuer: str) -> AsMetadata:
    """An authorization server metadata document fetched for ``issuer``; AuthError if
    its ``issuer`` is another (RFC 8414 §3.3: a mix-up attack) or it lacks endpoints."""
    doc = _decode(body, "the authorization server metadata")
    found = doc.get("issuer")
    if not isinstance(found, str) or not _same_issuer(found, issuer):
        raise AuthError(f"the authorization server metadata at {issuer} names the issuer "
                        f"{str(found)[:200]!r}: refused (RFC 8414 requires the same issuer)")
    challenge_methods = _strings(doc, "code_challenge_methods_supported")
    if challenge_methods and "S256" not in challenge_methods:
        raise AuthError(f"the authorization server {issuer} does not support PKCE S256")
    return AsMetadata(
        issuer=found,
        authorization_endpoint=_http_url(doc.get("authorization_endpoint"), "authorization_endpoint",
                                         required=False),
        token_endpoint=_http_url(doc.get("token_endpoint"), "token_endpoint"),
        registration_endpoint=_http_url(doc.get("registration_endpoint"), "registration_endpoint", required=False),
        scopes_supported=_strings(doc, "scopes_supported"),
        grant_types_supported=_strings(doc, "grant_types_supported"),
        token_endpoint_auth_methods_supported=_strings(doc, "token_endpoint_auth_methods_supported"),
        code_challenge_methods_supported=challenge_methods,
        authorization_response_iss_parameter_supported=doc.get("authorization_response_iss_parameter_supported")
        is True,
        client_id_metadata_document_supported=doc.get("client_id_metadata_document_supported") is True,
        dpop_signing_alg_values_supported=_strings(doc, "dpop_signing_alg_values_supported"),
    )


def legacy_as_metadata(server_url: str) -> AsMetadata:
    """The 2025-03-26 fallback: the server's origin is its own authorization server at
    fixed paths. ``issuer`` stays empty: there is no document to check it against."""
    base = origin_of(server_url)
    return AsMetadata(issuer="", authorization_endpoint=f"{base}/authorize", token_endpoint=f"{base}/token",
                      registration_endpoint=f"{base}/register")
