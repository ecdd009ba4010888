"""What the OAuth client knows about one server: its authorization server, the
client identity there, and the tokens. Plain data, no I/O, so the store can save it
and the core can reason about it without a socket."""

from __future__ import annotations

from typing import Any

import msgspec

from runtime.errors import TernError

__all__ = ["AuthError", "AuthRequired", "NotOAuth", "AsMetadata", "ResourceMetadata", "Client", "Tokens", "Grant"]


class AuthError(TernError):
    """The OAuth flow with an MCP server's authorization server failed; the text says
    which step and why. Never contains a token or a secret."""

    http_status = 502


class AuthRequired(AuthError):
    """The server needs a user's login, and none can happen here (the daemon never
    opens a browser): run ``tern auth login SERVER``."""

    http_status = 401


class NotOAuth(AuthError):
    """A server nobody configured for OAuth refused us without publishing protected
    resource metadata (RFC 9728): its refusal is not a login to run (e.g. a keyed tern)."""


class ResourceMetadata(msgspec.Struct, frozen=True):
    """RFC 9728 protected resource metadata, the fields tern uses."""

    resource: str
    authorization_servers: list[str] = []
    scopes_supported: list[str] = []


class AsMetadata(msgspec.Struct, frozen=True):
    """RFC 8414 authorization server metadata (or the 2025-03-26 defaults when a
    server has none: ``issuer`` empty, nothing to check it against)."""

    issuer: str
    authorization_endpoint: str = ""
    token_endpoint: str = ""
    registration_endpoint: str = ""
    scopes_supported: list[str] = []
    grant_types_supported: list[str] = []
    token_endpoint_auth_methods_supported: list[str] = []
    code_challenge_methods_supported: list[str] = []
    authorization_response_iss_parameter_supported: bool = False
    client_id_metadata_document_supported: bool = False
    dpop_signing_alg_values_supported: list[str] = []


class Client(msgspec.Struct):
    """The client's identity at one authorization server (``issuer``): registered,
    pre-registered or a metadata document URL."""

    issuer: str
    client_id: str
    client_secret: str = ""
    auth_method: str = "none"  # none | client_secret_basic | client_secret_post | private_key_jwt
    redirect_uri: str = ""
    how: str = "dcr"  # config | cimd | dcr


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


class Grant(msgspec.Struct, frozen=True):
    """How tokens are obtained: a user's login (authorization code) or the client's
    own credentials (client credentials, for unattended daemons)."""

    kind: str = "authorization_code"
    scopes: tuple[str, ...] = ()
    extra: dict[str, Any] = {}
