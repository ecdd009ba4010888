"""What the OAuth client knows about one server: its authorization server, the
client identity there, and the tokens. Plain data, no I/O, so the store can save it
and the core can reason about it without a socket."""

from __future__ import annotations

from typing import Any

import msgspec

from runtime.wire.oauth import AuthError, Client, Tokens

__all__ = ["AuthError", "AuthRequired", "NotOAuth", "AsMetadata", "ResourceMetadata", "Client", "Tokens", "Grant"]


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


class Grant(msgspec.Struct, frozen=True):
    """How tokens are obtained: a user's login (authorization code) or the client's
    own credentials (client credentials, for unattended daemons)."""

    kind: str = "authorization_code"
    scopes: tuple[str, ...] = ()
    extra: dict[str, Any] = {}
