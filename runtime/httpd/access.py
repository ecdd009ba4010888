"""Who may call: the keys, the loopback rule, Host and Origin checks, CORS.

- A key (``api_key`` or the variable named by ``api_key_env``: the caller ``admin``; or
  one of ``[[server.keys]]`` and the stored ``tern keys``: ``runtime.config.keys``) is accepted as
  ``Authorization: Bearer KEY`` (the scheme is case-insensitive, as RFC 7235 says) or
  ``X-API-Key: KEY``, compared in constant time. A browser's WebSocket (``/api/events``)
  cannot send headers, so there the key may come as the subprotocol
  ``tern.key.<base64url(key)>`` beside ``tern.events`` (the one the server selects).
  Never from a query string: a request that tries gets a 401 saying so, and query
  strings are never logged. A TLS client certificate the server verified against
  ``tls_client_ca`` whose subject is a key's ``tls_subject`` is that key.
- ``authenticate`` answers the ``Caller``; the server then checks the route's scope
  (403 naming it). Who owns what is the handlers' business (not found, never 403).
- With no key configured, only tern's own OS user gets in: a loopback client whose
  socket belongs to our uid (``net/peer.py``, looked up once per connection by the
  server), or one presenting the local token (``local-token`` in the state directory,
  0600: where the peer's uid cannot be told): the caller ``local``. Another local user gets a 401, a remote
  client a 403, unless ``allow_unauthenticated_remote`` is set (then anyone gets in,
  and boot logs a warning). Named keys without an ``api_key`` do not lock the owner
  out: tern's own OS user on loopback, sending no key, is still ``local``.
- DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 sends
  ``Host: evil.example``. So on a loopback listener the Host must be a loopback name
  (or one of ``allowed_hosts``), and a browser ``Origin`` must be this server's own or
  one of ``cors_origins``; otherwise 403 (421 would also fit Host, 403 is what the MCP
  spec asks for Origin, and one status keeps clients simple).
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

from runtime.config.keys import LOCAL, Caller, KeyTable
from runtime.httpd.messages import HttpError, Request

__all__ = ["Access", "certificate_subject", "client_key", "is_loopback", "peer_is_owner"]

_QUERY_KEYS = ("api_key=", "apikey=", "key=", "token=", "access_token=")
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
ANONYMOUS = Caller("anonymous", frozenset({"admin"}))  # allow_unauthenticated_remote with no key: anyone


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host.lower() == "localhost"


_KEY_SUBPROTOCOL = b"tern.key."


def _subprotocol_key(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The key a browser offered as a WebSocket subprotocol, ``tern.key.<base64url(key)>``
    (a browser's WebSocket cannot send headers); None if it offered none. The server
    never selects that subprotocol, so the key is not echoed back."""
    import base64
    import binascii

    for name, value in headers:
        if name != b"sec-websocket-protocol":
            continue
        for offered in value.split(b","):
            offered = offered.strip()
            if offered.startswith(_KEY_SUBPROTOCOL):
                encoded = offered[len(_KEY_SUBPROTOCOL):]
                try:
                    return base64.urlsafe_b64decode(encoded + b"=" * (-len(encoded) % 4)) or b"\0invalid"
                except (binascii.Error, ValueError):
                    return b"\0invalid"  # never matches
    return None


_RDN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
              "stateOrProvinceName": "ST", "localityName": "L", "streetAddress": "STREET", "domainComponent": "DC",
              "userId": "UID", "emailAddress": "1.2.840.113549.1.9.1"}


def _escape_rdn(value: str) -> str:
    """An attribute value escaped as RFC 4514 section 2.4 says."""
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out[:1] in ("#", " "):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def certificate_subject(cert: dict | None) -> str | None:
    """A verified peer certificate's subject as an RFC 4514 string (last RDN first, as
    ``openssl x509 -nameopt RFC2253`` and ``cryptography``'s ``rfc4514_string()`` print
    it); None when the client sent no certificate (the TLS layer has already refused
    one that does not verify)."""
    if not cert or "subject" not in cert:
        return None
    rdns = ["+".join(f"{_RDN_NAMES.get(name, name)}={_escape_rdn(value)}" for name, value in rdn)
            for rdn in cert["subject"]]
    return ",".join(reversed(rdns))


def client_key(host: str, ipv6_prefix: int = 64) -> str:
    """Who a client is, for the rate limit and the per-client connection cap.

    An IPv4 address is itself. An IPv6 client usually holds a whole /64 and can rotate
    through it at will, so it is keyed by its first ``ipv6_prefix`` bits (128: the
    address itself); an IPv4-mapped address is its IPv4 address. Called once a
    connection, never per request.
    """
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.split("%")[0])
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    prefix = min(max(ipv6_prefix, 0), 128)
    if prefix == 128:
        return str(address)
    return str(ipaddress.IPv6Network((int(address) >> (128 - prefix) << (128 - prefix), prefix)))


def _host_name(value: str) -> str:
    """``example.com:8080`` -> ``example.com``; ``[::1]:80`` -> ``[::1]``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


#: The ways in tern's own outbound sockets may use as the owner (tern as an A2A or MCP
#: client of itself, POSTs a model's ``web_fetch`` cannot make); the API, the dashboard's
#: and the hooks' routes never take them for the owner.
SELF_WAYS = frozenset({"a2a", "mcp"})


def peer_is_owner(peer: tuple[str, int], local: tuple[str, int]) -> str:
    """Who the loopback client socket ``peer`` is: ``"owner"`` (this process's OS user),
    ``"self"`` (one of tern's own outbound sockets, ``net.peer.is_outbound``: our uid, but
    speaking for whatever fed it a URL, so the owner only on ``SELF_WAYS``), or ``""``."""
    import os

    from runtime.net.peer import is_outbound, loopback_peer_uid

    if os.name != "posix" or loopback_peer_uid(peer, local) != os.geteuid():
        return ""
    return "self" if is_outbound(peer) else "owner"


class Access:
    def __init__(self, api_key: str, *, allow_unauthenticated_remote: bool = False, loopback_listener: bool = True,
                 allowed_hosts: list[str] | None = None, cors_origins: list[str] | None = None,
                 local_token: str = "", operator_token: str = "", key_hint: str = "",
                 keys: KeyTable | None = None) -> None:
        """``key_hint``: where tern's own clients take the key from (``TERN_API_KEY``, say),
        named in every 401 so a refused person learns what to set, never the key.
        ``operator_token``: what operators of the system service (``[server]
        operator_group``) send from this host; a loopback client sending it is the owner.
        ``keys``: every accepted key (default: ``api_key`` alone)."""
        self.keys = keys if keys is not None else KeyTable.build(api_key, [])
        self._hint = f" ({key_hint})" if key_hint else ""
        self.key_hint = key_hint
        self._local_token = local_token.encode() if local_token else b""
        self._operator_token = operator_token.encode() if operator_token else b""
        self.allow_unauthenticated_remote = allow_unauthenticated_remote
        self.loopback_listener = loopback_listener
        self.allowed_hosts = {h.lower() for h in (allowed_hosts or [])}
        self.cors_origins = {o.rstrip("/").lower() for o in (cors_origins or [])}

    def _owners_token(self, presented: bytes | None) -> bool:
        """Whether a loopback client sent the local or the operator token (each is 256 bits)."""
        return presented is not None and any(token and hmac.compare_digest(presented, token)
                                             for token in (self._local_token, self._operator_token))

    @property
    def has_key(self) -> bool:
        return len(self.keys) > 0

    @property
    def takes_local_token(self) -> bool:
        """Whether a loopback client may send the local token (the dashboard's sign-in says so)."""
        return bool(self._local_token)

    @property
    def needs_peer_owner(self) -> bool:
        """Whether a loopback request's answer depends on who owns the client socket."""
        return not self.keys.has_api_key and not self.allow_unauthenticated_remote

    def authenticate(self, request: Request, client_is_loopback: bool, same_user: bool = False,
                     subject: str | None = None) -> Caller:
        """The caller, or HttpError(401/403) if the request may not use a key-protected
        route. ``same_user``: the client socket belongs to tern's own OS user;
        ``subject``: the verified client certificate's subject (RFC 4514), if any."""
        if request.query and any(k in request.query.lower() for k in _QUERY_KEYS):
            raise HttpError(401, "API keys are not accepted in the query string; "
                            "send Authorization: Bearer KEY or X-API-Key: KEY")
        if subject is not None and self._presented(request) is None:
            by_certificate = self.keys.by_subject(subject)
            if by_certificate is not None:
                return by_certificate
        if not self.has_key:
            if self.allow_unauthenticated_remote:
                return ANONYMOUS
            if not client_is_loopback:
                raise HttpError(403, "this tern has no API key configured, so it serves loopback clients only; "
                                "set [server] api_key_env to serve remote clients")
            if same_user:
                return LOCAL
            presented = self._presented(request)
            if self._owners_token(presented):
                return LOCAL
            raise HttpError(401, "this tern has no API key configured, so it serves only its own OS user: "
                            "this connection is not known to be theirs (send the local token from the "
                            "state directory's local-token file as Authorization: Bearer TOKEN, or give this "
                            "tern a key: [server] api_key_env = \"TERN_API_KEY\", and set TERN_API_KEY "
                            "for it and its clients)",
                            [(b"www-authenticate", b'Bearer realm="tern"')])
        presented = self._presented(request)
        if presented is None and same_user and client_is_loopback and not self.keys.has_api_key:
            return LOCAL  # named keys but no api_key: tern's own OS user is still the owner (no key to lose)
        if presented is None:
            raise HttpError(401, f"an API key is required: Authorization: Bearer KEY or X-API-Key: KEY{self._hint}",
                            [(b"www-authenticate", b'Bearer realm="tern"')])
        caller = self.keys.match(presented)
        if caller is None and client_is_loopback and self._owners_token(presented):
            caller = LOCAL  # named keys but no api_key: tern's own clients (on loopback) still send the local token
        if caller is None:
            raise HttpError(401, f"the API key is not valid{self._hint}",
                            [(b"www-authenticate", b'Bearer error="invalid_token"')])
        return caller

    @staticmethod
    def check_scope(caller: Caller, scope: str | None, path: str) -> None:
        """403 unless ``caller`` holds the route's ``scope`` (None: any caller)."""
        if scope is not None and not caller.allows(scope):
            raise HttpError(403, f"the key {caller.name!r} lacks the scope {scope!r} that {path} needs")

    @staticmethod
    def _presented(request: Request) -> bytes | None:
        for name, value in request.headers:
            if name == b"authorization":
                scheme, _, token = value.strip().partition(b" ")
                if scheme.lower() == b"bearer" and token.strip():
                    return token.strip()
                return b"\0invalid"  # another scheme: never matches, and no fallback to X-API-Key
            if name == b"x-api-key":
                return value.strip()
        if request.route is not None and request.route.websocket:
            return _subprotocol_key(request.headers)
        return None

    def check_origin(self, request: Request) -> None:
        """Host and Origin checks against DNS rebinding (routes with ``guard_origin``)."""
        host = request.header(b"host") or ""
        name = _host_name(host)
        if self.allowed_hosts:
            if name not in self.allowed_hosts and host.lower() not in self.allowed_hosts:
                raise HttpError(403, f"Host {host!r} is not in [server] allowed_hosts")
        elif self.loopback_listener and name not in _LOOPBACK_NAMES and not is_loopback(name.strip("[]")):
            raise HttpError(403, f"Host {host!r} is not a loopback name; a loopback tern only answers "
                            "requests addressed to localhost (set [server] allowed_hosts to add names)")
        origin = request.header(b"origin")
        if origin is not None and not self.origin_allowed(origin, host):
            raise HttpError(403, f"Origin {origin!r} is not allowed (add it to [server] cors_origins)")

    def origin_allowed(self, origin: str, host: str) -> bool:
        origin = origin.rstrip("/").lower()
        if origin in self.cors_origins or "*" in self.cors_origins:
            return True
        parts = urlsplit(origin)
        return bool(parts.netloc) and parts.netloc == host.lower()

    def cors_headers(self, request: Request) -> list[tuple[bytes, bytes]]:
        """CORS response headers for an allowed cross-origin browser request."""
        origin = request.header(b"origin")
        if origin is None or origin.rstrip("/").lower() not in self.cors_origins and "*" not in self.cors_origins:
            return []
        return [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
