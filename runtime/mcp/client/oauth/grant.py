"""The OAuth 2.1 exchanges themselves, sans-IO: what to send and what an answer means.

- Client identity, in the spec's order: a pre-registered ``client_id`` (and secret)
  from config; else a Client ID Metadata Document URL when the authorization server
  says it reads them; else Dynamic Client Registration (RFC 7591, ``application_type``
  set, as 2026-07-28 requires).
- Authorization code with PKCE S256 and ``resource`` (RFC 8707); the redirect is
  refused if its ``state`` differs, or (RFC 9207) its ``iss`` is not the issuer, or
  ``iss`` is missing while the server advertised it.
- Scope: the challenge's, else the resource's ``scopes_supported``, else none;
  ``offline_access`` only when the authorization server lists it.
- Unattended grants: client credentials; a JWT the workload's environment issued
  (RFC 7523 jwt-bearer: workload identity federation); an enterprise IdP's ID token
  exchanged there for an ID-JAG (RFC 8693), itself the jwt-bearer assertion (SEP-990).
- Token requests authenticate with ``none``, ``client_secret_basic`` or
  ``client_secret_post``; tokens are refreshed a minute (at most half their life) before they expire (a token
  without ``expires_in`` is used until the server refuses it).

Randomness comes from ``secrets``; the clock is the caller's (``now``).
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import msgspec

from runtime.mcp.client.oauth.model import AsMetadata, ResourceMetadata
from runtime.wire.oauth import (
    MAX_TOKEN_RESPONSE_BYTES, REFRESH_MARGIN_SECS, AuthError, Client, auth_method, error_text, json_object,
    needs_refresh, parse_token_response, token_request,
)

__all__ = ["Pkce", "AuthorizationRequest", "choose_scope", "client_for", "registration_body", "parse_registration",
           "authorization_request", "code_from_redirect", "token_request", "parse_token_response",
           "needs_refresh", "step_up_scope", "oauth_error", "check_assertion", "exchange_request",
           "parse_exchange_response", "MAX_STEP_UPS", "REFRESH_MARGIN_SECS", "JWT_BEARER"]

MAX_ASSERTION_CHARS = 16 * 1024  # a JWT for a grant; cloud workload tokens are 1-2 KiB
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"  # RFC 7523 authorization grant
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # RFC 8693
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
MAX_STEP_UPS = 2  # re-authorizations for wider scope before the request fails (the spec wants a limit)
CLIENT_NAME = "tern"


class Pkce(msgspec.Struct, frozen=True):
    verifier: str
    challenge: str

    @classmethod
    def make(cls) -> Pkce:
        verifier = secrets.token_urlsafe(48)  # 64 characters of the unreserved set (RFC 7636 §4.1)
        digest = hashlib.sha256(verifier.encode("ascii")).digest()
        return cls(verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii"))


class AuthorizationRequest(msgspec.Struct, frozen=True):
    """One login in progress: the URL to open and what the redirect must match."""

    url: str
    state: str
    pkce: Pkce
    redirect_uri: str
    resource: str
    scope: str
    issuer: str
    iss_required: bool


def choose_scope(challenge_scope: str, resource: ResourceMetadata | None, server: AsMetadata,
                 configured: tuple[str, ...] = (), *, want_refresh: bool = True) -> str:
    """The ``scope`` to ask for: configured scopes win, then the challenge's, then the
    resource's ``scopes_supported``, else none (empty: the parameter is omitted).
    ``offline_access`` is added only when the authorization server lists it."""
    if configured:
        scopes = list(configured)
    elif challenge_scope:
        scopes = challenge_scope.split()
    elif resource is not None and resource.scopes_supported:
        scopes = list(resource.scopes_supported)
    else:
        scopes = []
    if "offline_access" in scopes and "offline_access" not in server.scopes_supported:
        scopes.remove("offline_access")
    if want_refresh and scopes and "offline_access" in server.scopes_supported and "offline_access" not in scopes:
        scopes.append("offline_access")
    return " ".join(dict.fromkeys(scopes))


def step_up_scope(current: str, challenge_scope: str) -> str:
    """The scope to ask for after ``insufficient_scope``: what we had plus what the
    server now asks for (so a step-up never drops an earlier permission)."""
    return " ".join(dict.fromkeys(current.split() + challenge_scope.split()))


def _auth_method(server: AsMetadata, has_secret: bool) -> str:
    return auth_method(server.token_endpoint_auth_methods_supported, has_secret)


def client_for(server: AsMetadata, issuer: str, *, client_id: str = "", client_secret: str = "",
               metadata_url: str = "", redirect_uri: str = "") -> Client | None:
    """The client identity to use without registering, or None when Dynamic Client
    Registration is next (AuthError if the server offers no way at all)."""
    if client_id:
        return Client(issuer=issuer, client_id=client_id, client_secret=client_secret,
                      auth_method=_auth_method(server, bool(client_secret)), redirect_uri=redirect_uri, how="config")
    if metadata_url and server.client_id_metadata_document_supported:
        return Client(issuer=issuer, client_id=metadata_url, auth_method="none", redirect_uri=redirect_uri,
                      how="cimd")
    if not server.registration_endpoint:
        raise AuthError(f"the authorization server {issuer or 'of the server'} has no registration endpoint "
                        "and no client_id is configured: set [mcp_servers.transport.oauth] client_id")
    return None


def registration_body(server: AsMetadata, redirect_uri: str, scope: str, grant: str = "authorization_code") -> bytes:
    """An RFC 7591 registration request for a native (loopback redirect) client."""
    supported = server.token_endpoint_auth_methods_supported
    method = "none" if not supported or "none" in supported else _auth_method(server, True)
    grants = ["authorization_code", "refresh_token"] if grant == "authorization_code" else [grant]
    body: dict[str, Any] = {
        "client_name": CLIENT_NAME,
        "redirect_uris": [redirect_uri] if grant == "authorization_code" else [],
        "grant_types": grants,
        "response_types": ["code"] if grant == "authorization_code" else [],
        "token_endpoint_auth_method": method,
        "application_type": "native",
    }
    if scope:
        body["scope"] = scope
    return msgspec.json.encode(body)


def parse_registration(status: int, body: bytes, server: AsMetadata, issuer: str, redirect_uri: str) -> Client:
    """A registration answer as a ``Client``; AuthError for a refusal or a malformed one."""
    doc = json_object(body, "the client registration answer")
    if status not in (200, 201):
        raise AuthError(f"client registration refused (HTTP {status}): {error_text(doc)}")
    client_id = doc.get("client_id")
    if not isinstance(client_id, str) or not client_id:
        raise AuthError("the client registration answer has no client_id")
    secret = doc.get("client_secret") if isinstance(doc.get("client_secret"), str) else ""
    method = doc.get("token_endpoint_auth_method")
    if not isinstance(method, str) or method not in ("none", "client_secret_basic", "client_secret_post"):
        method = _auth_method(server, bool(secret))
    return Client(issuer=issuer, client_id=client_id, client_secret=secret or "", auth_method=method,
                  redirect_uri=redirect_uri, how="dcr")


def authorization_request(server: AsMetadata, client: Client, resource: str, scope: str,
                          redirect_uri: str) -> AuthorizationRequest:
    """The authorization URL (PKCE S256, ``state``, ``resource``) and what its redirect must match."""
    if not server.authorization_endpoint:
        raise AuthError("the authorization server has no authorization endpoint (it only serves "
                        "client credentials: set grant = \"client_credentials\")")
    pkce = Pkce.make()
    state = secrets.token_urlsafe(32)
    params = {"response_type": "code", "client_id": client.client_id, "redirect_uri": redirect_uri,
              "state": state, "code_challenge": pkce.challenge, "code_challenge_method": "S256",
              "resource": resource}
    if scope:
        params["scope"] = scope
    sep = "&" if urlsplit(server.authorization_endpoint).query else "?"
    url = server.authorization_endpoint + sep + urlencode(params, quote_via=quote)
    return AuthorizationRequest(url=url, state=state, pkce=pkce, redirect_uri=redirect_uri, resource=resource,
                                scope=scope, issuer=server.issuer,
                                iss_required=server.authorization_response_iss_parameter_supported)


def code_from_redirect(pending: AuthorizationRequest, redirect: str) -> str:
    """The code in a redirect (a full URL, or just its ``?code=...&state=...``);
    AuthError if the state differs, the issuer is wrong or missing, or it carries an
    error. The state is checked first, so a forged redirect learns nothing."""
    text = redirect.strip()
    if len(text) > 8192:
        raise AuthError("the redirect is longer than 8192 characters")
    query = urlsplit(text).query if "://" in text else text.lstrip("?")
    params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items() if v}
    if not secrets.compare_digest(params.get("state", "").encode(), pending.state.encode()):
        raise AuthError("the redirect's state does not match this login: refused (a forged or stale redirect)")
    iss = params.get("iss")
    if iss is not None and pending.issuer and iss != pending.issuer:
        raise AuthError(f"the redirect came from the issuer {iss[:200]!r}, not {pending.issuer}: refused "
                        "(RFC 9207, a mix-up attack)")
    if iss is None and pending.iss_required:
        raise AuthError(f"the redirect has no iss although {pending.issuer} promised one: refused (RFC 9207)")
    if "error" in params:
        detail = params.get("error_description", "")
        raise AuthError(f"the authorization server refused the login: {params['error'][:100]}"
                        + (f" ({detail[:200]})" if detail else ""))
    code = params.get("code", "")
    if not code:
        raise AuthError("the redirect carries no code")
    return code


def oauth_error(status: int, body: bytes) -> str:
    """The ``error`` code of a refusal from a token endpoint ("" if it is none or unreadable)."""
    if status < 400 or len(body) > MAX_TOKEN_RESPONSE_BYTES:
        return ""
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return ""
    return doc["error"] if isinstance(doc, dict) and isinstance(doc.get("error"), str) else ""


def check_assertion(text: str, what: str) -> str:
    """A JWT handed over for a grant (a workload's token, an enterprise ID token), trimmed;
    AuthError if it is empty, too large or not shaped like a JWT. The text never quotes it."""
    text = text.strip()
    if not text:
        raise AuthError(f"{what} is empty")
    if len(text) > MAX_ASSERTION_CHARS:
        raise AuthError(f"{what} is larger than {MAX_ASSERTION_CHARS} characters")
    if not _JWT.fullmatch(text):
        raise AuthError(f"{what} is not a JWT (three base64url parts separated by dots)")
    return text


def exchange_request(idp_client: Client, id_token: str, audience: str, resource: str,
                     scope: str) -> tuple[bytes, dict[str, str]]:
    """SEP-990's first step at the enterprise IdP: exchange the user's ID token for an
    Identity Assertion JWT Authorization Grant (ID-JAG) for ``audience`` (the MCP
    server's authorization server) and ``resource`` (RFC 8693 token exchange)."""
    return token_request(idp_client, TOKEN_EXCHANGE, {
        "subject_token": id_token, "subject_token_type": ID_TOKEN_TYPE, "requested_token_type": ID_JAG_TYPE,
        "audience": audience, "resource": resource, "scope": scope})


def parse_exchange_response(status: int, body: bytes) -> str:
    """The ID-JAG in the IdP's answer; AuthError for a refusal or another token type."""
    doc = json_object(body, "the identity provider's token exchange answer")
    if status != 200:
        raise AuthError(f"the identity provider refused the token exchange (HTTP {status}): {error_text(doc)}")
    if doc.get("issued_token_type") != ID_JAG_TYPE:
        raise AuthError(f"the identity provider issued {str(doc.get('issued_token_type'))[:80]!r}, "
                        "not an ID-JAG")
    return check_assertion(doc.get("access_token") if isinstance(doc.get("access_token"), str) else "",
                           "the ID-JAG from the identity provider")
