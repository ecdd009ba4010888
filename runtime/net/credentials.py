"""The credentials tern presents to a peer (an A2A agent, a push webhook): a bearer token
from the environment, or an OAuth client-credentials token (RFC 6749 4.4).

A client asks its ``Credential`` for the headers of each request and, when the peer
answers 401 to a request that carried them, calls ``refused(sent)``: True means a fresh
token is there to retry with (once). Tokens come from a ``TokenCache``:

- one token per (token_url, client_id, scopes, audience), kept until shortly before its
  ``expires_in`` (``wire.oauth.needs_refresh``); one fetch at a time per key, so callers
  that arrive together wait for the same answer;
- the token endpoint is asked through the SSRF guard and tern's outbound client, with a
  deadline and a bound on the answer; the client authenticates with
  ``client_secret_basic``, or ``client_secret_post`` when the authorization server's
  metadata lists only that;
- a refresh that fails while the old token is still valid keeps the old one (logged).

Client secrets and tokens from the environment are registered with the log masking;
access tokens are not (they rotate, and the masking set is bounded): no code logs them.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import Protocol

import httpx
import msgspec
import trio

from runtime.config import PeerAuth
from runtime.errors import ConfigError, TernError
from runtime.log import get_logger, register_secret
from runtime.net.guard import AddressPolicy, BlockedAddress, check_url
from runtime.net.outbound import make_client
from runtime.wire import oauth

__all__ = ["Credential", "StaticCredential", "TokenCredential", "ClientCredentials", "TokenCache", "secret_from_env",
           "credential_for"]

log = get_logger("net.credentials")

TIMEOUT_SECS = 30.0
MAX_KEYS = 64  # distinct (token_url, client_id, scopes, audience): each from config or a configured peer's card


class Credential(Protocol):
    """What a client asks for each request to one peer."""

    async def headers(self) -> dict[str, str]: ...

    async def refused(self, sent: Mapping[str, str]) -> bool: ...


class StaticCredential:
    """A secret that does not change: a bearer token (``Authorization: Bearer ...``) or
    an API key in the header a peer's card names."""

    def __init__(self, header: str, value: str) -> None:
        self._headers = {header: value}

    async def headers(self) -> dict[str, str]:
        return dict(self._headers)

    async def refused(self, sent: Mapping[str, str]) -> bool:
        return False  # nothing fresher to offer: the refusal stands


class ClientCredentials(msgspec.Struct, frozen=True):
    """One client's credentials at one token endpoint. ``metadata_url``: the
    authorization server's RFC 8414 metadata (from a peer's card), read for its
    client authentication methods."""

    token_url: str
    client_id: str
    client_secret: str
    scopes: tuple[str, ...] = ()
    audience: str = ""
    metadata_url: str = ""

    def __repr__(self) -> str:  # never print the secret by accident
        return f"ClientCredentials({self.token_url!r}, {self.client_id!r}, scopes={self.scopes!r})"

    @property
    def key(self) -> tuple[str, str, tuple[str, ...], str]:
        return self.token_url, self.client_id, self.scopes, self.audience


class TokenCredential:
    """An OAuth client-credentials token, from ``cache``."""

    def __init__(self, cache: TokenCache, spec: ClientCredentials) -> None:
        self.cache, self.spec = cache, spec

    async def headers(self) -> dict[str, str]:
        return {"Authorization": (await self.cache.get(self.spec)).header}

    async def refused(self, sent: Mapping[str, str]) -> bool:
        self.cache.drop(self.spec, sent.get("Authorization", ""))
        return True


class _Entry:
    def __init__(self) -> None:
        self.lock = trio.Lock()
        self.tokens: oauth.Tokens | None = None
        self.auth_method = ""


class TokenCache:
    """Client-credentials tokens, shared by every peer of one owner. Use as ``async
    with TokenCache(policy) as cache:`` (it owns the HTTP client to the token endpoints)."""

    def __init__(self, policy: AddressPolicy, *, timeout_secs: float = TIMEOUT_SECS) -> None:
        self.policy = policy
        self.timeout_secs = timeout_secs
        self._entries: OrderedDict[tuple[str, str, tuple[str, ...], str], _Entry] = OrderedDict()
        self._http: httpx.AsyncClient | None = None
        self.fetches = 0  # token requests sent (tests, status)

    async def __aenter__(self) -> TokenCache:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            with trio.CancelScope(shield=True):
                await self._http.aclose()

    async def get(self, spec: ClientCredentials) -> oauth.Tokens:
        """A token for ``spec``: the cached one while it is fresh, else a new one (one
        fetch at a time; callers that wait for it share it). AuthError says why not."""
        entry = self._entry(spec)
        now = trio.current_time()
        if entry.tokens is not None and not oauth.needs_refresh(entry.tokens, now):
            return entry.tokens
        async with entry.lock:
            old = entry.tokens
            if old is not None and not oauth.needs_refresh(old, trio.current_time()):
                return old  # fetched while this caller waited
            try:
                entry.tokens = await self._fetch(spec, entry)
            except oauth.AuthError as exc:
                if old is not None and old.expires_at > trio.current_time():
                    log.warning("%s; the current token is used until it expires", exc)
                    return old
                raise
            return entry.tokens

    def drop(self, spec: ClientCredentials, header: str) -> None:
        """The peer refused the token sent as ``header``: forget it, unless another
        caller has replaced it already."""
        entry = self._entries.get(spec.key)
        if entry is not None and entry.tokens is not None and entry.tokens.header == header:
            entry.tokens = None

    def _entry(self, spec: ClientCredentials) -> _Entry:
        entry = self._entries.get(spec.key)
        if entry is None:
            entry = self._entries[spec.key] = _Entry()
            while len(self._entries) > MAX_KEYS:
                self._entries.popitem(last=False)
        self._entries.move_to_end(spec.key)
        return entry

    async def _fetch(self, spec: ClientCredentials, entry: _Entry) -> oauth.Tokens:
        if not entry.auth_method:
            entry.auth_method = await self._auth_method(spec)
        client = oauth.Client(issuer="", client_id=spec.client_id, client_secret=spec.client_secret,
                              auth_method=entry.auth_method, how="config")
        body, headers = oauth.token_request(client, "client_credentials",
                                            {"scope": " ".join(spec.scopes), "audience": spec.audience})
        self.fetches += 1
        status, answer = await self._exchange("POST", spec.token_url, body, headers)
        try:
            return oauth.parse_token_response(status, answer, trio.current_time(), issuer="", resource="")
        except oauth.AuthError as exc:
            raise oauth.AuthError(f"{_short(spec.token_url)}: {exc}") from None

    async def _auth_method(self, spec: ClientCredentials) -> str:
        """Basic, unless the authorization server's metadata lists only ``client_secret_post``."""
        supported: list[str] = []
        if spec.metadata_url:
            try:
                status, body = await self._exchange("GET", spec.metadata_url, None, {"Accept": "application/json"})
                doc = oauth.json_object(body, "the authorization server metadata") if status == 200 else {}
            except oauth.AuthError as exc:
                log.warning("%s: client_secret_basic it is", exc)
                doc = {}
            methods = doc.get("token_endpoint_auth_methods_supported")
            if isinstance(methods, list):
                supported = [m for m in methods if isinstance(m, str)]
        return oauth.auth_method(supported, bool(spec.client_secret))

    async def _exchange(self, method: str, url: str, content: bytes | None,
                        headers: dict[str, str]) -> tuple[int, bytes]:
        """One bounded exchange with a deadline; AuthError naming the URL for anything
        that goes wrong (never a secret)."""
        if self._http is None:
            self._http = make_client(self.policy, timeout=self.timeout_secs)
        data = bytearray()
        try:
            check_url(url, self.policy)
            with trio.fail_after(self.timeout_secs):
                async with self._http.stream(method, url, content=content, headers=headers) as response:
                    async for chunk in response.aiter_bytes():
                        data += chunk
                        if len(data) > oauth.MAX_TOKEN_RESPONSE_BYTES:
                            raise oauth.AuthError(f"token endpoint {_short(url)}: the answer is larger than "
                                                  f"{oauth.MAX_TOKEN_RESPONSE_BYTES} bytes")
        except trio.TooSlowError:
            raise oauth.AuthError(f"token endpoint {_short(url)}: no answer within {self.timeout_secs:g} s") from None
        except (BlockedAddress, httpx.HTTPError, TernError) as exc:
            if isinstance(exc, oauth.AuthError):
                raise
            raise oauth.AuthError(f"token endpoint {_short(url)}: {_reason(exc)}") from None
        return response.status_code, bytes(data)


def secret_from_env(name: str, owner: str, environ: Mapping[str, str] | None = None) -> str:
    """The secret in the variable ``name``, registered with the log masking; an unset
    or empty variable is a ConfigError naming it (never an empty credential)."""
    env = os.environ if environ is None else environ
    value = env.get(name, "")
    if not value:
        raise ConfigError(f"{owner}: {name} is not set in tern's environment")
    register_secret(value)
    return value


def credential_for(auth: PeerAuth, owner: str, cache: TokenCache, *, header: str = "Authorization",
                   token_url: str = "", scopes: tuple[str, ...] = (), metadata_url: str = "",
                   environ: Mapping[str, str] | None = None) -> Credential:
    """The credential ``auth`` configures. ``header``: where a bearer secret goes (an API
    key header a card names takes it raw); ``token_url``/``scopes``/``metadata_url``:
    what a card says, used where the config is silent."""
    if auth.kind == "bearer":
        token = secret_from_env(auth.token_env, owner, environ)
        return StaticCredential(header, f"Bearer {token}" if header.lower() == "authorization" else token)
    url = auth.token_url or token_url
    if not url:
        raise ConfigError(f"{owner}: auth has no token_url and the peer's card names none")
    secret = secret_from_env(auth.client_secret_env, owner, environ)
    spec = ClientCredentials(url, auth.client_id, secret, tuple(auth.scopes) or scopes, auth.audience,
                             metadata_url if not auth.token_url else "")
    return TokenCredential(cache, spec)


def _short(url: str) -> str:
    return url.split("?", 1)[0][:200]


def _reason(exc: BaseException) -> str:
    chain: BaseException | None = exc
    while chain is not None:  # the guard's refusal sits further down the chain
        if isinstance(chain, BlockedAddress):
            return str(chain)
        chain = chain.__cause__ or chain.__context__
    return str(exc) or type(exc).__name__
