"""An OAuth 2.0 token endpoint's wire format, sans-IO: the request a client sends and
how the answer reads (RFC 6749 §2.3.1, §4.4, §5). One implementation for every client
that asks a token endpoint for tokens: the MCP client's OAuth flows
(``runtime.mcp.client.oauth``) and the credentials tern presents to A2A peers and
webhooks (``runtime.net.credentials``).

Tokens are refreshed a minute (at most half their life) before they expire; a token
without ``expires_in`` is used until the server refuses it.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote, urlencode

import msgspec

from runtime.errors import TernError

__all__ = ["AuthError", "Client", "Tokens", "auth_method", "token_request", "parse_token_response", "needs_refresh",
           "json_object", "error_text", "MAX_TOKEN_RESPONSE_BYTES", "REFRESH_MARGIN_SECS"]

MAX_TOKEN_RESPONSE_BYTES = 64 * 1024
REFRESH_MARGIN_SECS = 60.0
MAX_TOKEN_CHARS = 16384


class AuthError(TernError):
    """Getting a token failed; the text says which step and why. Never contains a
    token or a secret."""

    http_status = 502


class Client(msgspec.Struct):
    """The client's identity at one authorization server (``issuer``): registered,
    pre-registered or a metadata document URL."""

    issuer: str
    client_id: str
    client_secret: str = ""
    auth_method: str = "none"  # none | client_secret_basic | client_secret_post | private_key_jwt
    redirect_uri: str = ""
    how: str = "dcr"  # config | cimd | dcr

    def __repr__(self) -> str:  # never print a secret by accident
        return f"Client(issuer={self.issuer!r}, client_id={self.client_id!r}, auth_method={self.auth_method!r})"


class Tokens(msgspec.Struct):
    """A token response, with its expiry made absolute (``expires_at`` 0: unknown).
    ``token_type`` "DPoP": bound to the server's DPoP key, sent only with a proof."""

    access_token: str
    token_type: str = "Bearer"  # Bearer | DPoP
    refresh_token: str = ""
    scope: str = ""
    expires_at: float = 0.0
    obtained_at: float = 0.0
    issuer: str = ""
    resource: str = ""

    def __repr__(self) -> str:  # never print a token by accident
        return f"Tokens(issuer={self.issuer!r}, scope={self.scope!r}, expires_at={self.expires_at})"

    @property
    def header(self) -> str:
        """The ``Authorization`` header value: a DPoP-bound token never goes as Bearer."""
        return f"{self.token_type} {self.access_token}"


def auth_method(supported: list[str], has_secret: bool) -> str:
    """How a client with (or without) a secret authenticates at a token endpoint that
    lists ``supported`` methods: Basic first, as RFC 8414 defaults to it."""
    if not has_secret:
        return "none"
    for method in ("client_secret_basic", "client_secret_post"):
        if method in (supported or ["client_secret_basic"]):
            return method
    return "client_secret_basic"


def _client_auth(client: Client, form: dict[str, str], headers: dict[str, str]) -> None:
    """``client_id`` always goes in the form too: it identifies, the secret authenticates,
    and some servers (the official Python SDK's) want it there even with Basic. (A
    jwt-bearer grant may have none: its assertion names the client.)"""
    if client.client_id:
        form["client_id"] = client.client_id
    if client.auth_method == "client_secret_basic" and client.client_secret:
        pair = f"{quote(client.client_id, safe='')}:{quote(client.client_secret, safe='')}"  # RFC 6749 §2.3.1
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return
    if client.auth_method == "client_secret_post" and client.client_secret:
        form["client_secret"] = client.client_secret


def token_request(client: Client, grant: str, fields: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    """A token endpoint request body and headers: ``grant`` (authorization_code,
    refresh_token, client_credentials) with its ``fields``, the client authenticated
    its way."""
    form = {"grant_type": grant, **{k: v for k, v in fields.items() if v}}
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
    _client_auth(client, form, headers)
    return urlencode(form).encode("ascii"), headers


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """``body`` as a JSON object; AuthError naming ``what`` if it is too large or not one."""
    if len(body) > MAX_TOKEN_RESPONSE_BYTES:
        raise AuthError(f"{what} is larger than {MAX_TOKEN_RESPONSE_BYTES} bytes")
    try:
        doc = msgspec.json.decode(body) if body.strip() else {}
    except msgspec.DecodeError:
        raise AuthError(f"{what} is not JSON") from None
    if not isinstance(doc, dict):
        raise AuthError(f"{what} is not a JSON object")
    return doc


def error_text(doc: dict[str, Any]) -> str:
    """An OAuth error answer's ``error`` and ``error_description``, shortened."""
    error = doc.get("error")
    text = str(error)[:100] if error else "no error code"
    if isinstance(doc.get("error_description"), str):
        text += f" ({doc['error_description'][:200]})"
    return text


def parse_token_response(status: int, body: bytes, now: float, *, issuer: str, resource: str,
                         previous: Tokens | None = None, dpop: bool = False) -> Tokens:
    """A token endpoint answer as ``Tokens`` (absolute expiry; a refresh answer without
    a new refresh token keeps the old one); AuthError for an error or a bad shape, or
    for a DPoP-bound token when the request carried no proof (``dpop``)."""
    if status != 200:
        try:
            why = error_text(json_object(body, "the answer"))
        except AuthError:  # an HTML error page, say: its status is what counts
            why = "no OAuth error in the answer"
        raise AuthError(f"the token endpoint refused (HTTP {status}): {why}")
    doc = json_object(body, "the token response")
    token = doc.get("access_token")
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
        raise AuthError("the token response has no usable access_token")
    token_type = doc.get("token_type", "Bearer")
    kind = token_type.lower() if isinstance(token_type, str) else ""
    if kind == "dpop" and not dpop:
        raise AuthError("the token response has token_type DPoP although tern sent no DPoP proof: refused")
    if kind not in ("bearer", "dpop"):
        raise AuthError(f"the token response has token_type {str(token_type)[:40]!r}; tern sends Bearer and "
                        "DPoP tokens only")
    expires_in = doc.get("expires_in")
    if isinstance(expires_in, str) and expires_in.isdigit():
        expires_in = int(expires_in)
    expires_at = now + expires_in if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) \
        and expires_in > 0 else 0.0
    refresh = doc.get("refresh_token") if isinstance(doc.get("refresh_token"), str) else ""
    if not refresh and previous is not None:
        refresh = previous.refresh_token
    scope = doc.get("scope") if isinstance(doc.get("scope"), str) else (previous.scope if previous else "")
    return Tokens(access_token=token, token_type="DPoP" if kind == "dpop" else "Bearer", refresh_token=refresh or "",
                  scope=scope or "", expires_at=float(expires_at), obtained_at=now, issuer=issuer, resource=resource)


def needs_refresh(tokens: Tokens, now: float) -> bool:
    """Whether to refresh before the next request: it expires within a minute (or
    within half its lifetime, for a short-lived one, so it is not refreshed on every
    request)."""
    if not tokens.expires_at:
        return False
    margin = REFRESH_MARGIN_SECS
    if tokens.obtained_at:
        margin = min(margin, (tokens.expires_at - tokens.obtained_at) / 2)
    return now >= tokens.expires_at - margin
