"""The trio shell of tern's OAuth client: it moves the bytes the sans-IO core asks
for, through the transport's guarded HTTP client (the SSRF guard checks every
address, no redirect is followed, every answer is size-bounded and every exchange
has a deadline).

A transport asks ``authorization()`` for the header of each request (refreshing the
token a minute before it expires), ``proof()`` for its DPoP header when the token is
DPoP-bound, and calls ``challenged()`` when a server answers 401 or 403; it retries
the request when that returns True. Only one flow runs at a
time per server; a request that was refused with a token someone has replaced since
just retries.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import httpx
import trio

from runtime.config import OAuthConfig
from runtime.log import get_logger, register_secret
from runtime.mcp.client.oauth import discovery, dpop, grant
from runtime.mcp.client.oauth.challenge import Challenge, parse_www_authenticate
from runtime.mcp.client.oauth.model import (
    AsMetadata, AuthError, AuthRequired, Client, NotOAuth, ResourceMetadata, Tokens,
)
from runtime.mcp.client.oauth.store import TokenStore

__all__ = ["OAuthSession", "Authorizer", "MAX_RESPONSE_BYTES"]

log = get_logger("mcp.oauth")
MAX_RESPONSE_BYTES = 64 * 1024
DEFAULT_REDIRECT = "http://127.0.0.1/callback"
LOGIN_SECS = 15 * 60  # a person has this long to log in


class Authorizer(Protocol):
    """Whoever completes a login: shows ``url`` to a person (or a test's headless
    agent), gets the redirect it led to (a URL, or its query) and returns what
    ``accept`` makes of it: the code. ``accept`` raises AuthError for a redirect that
    is not this login's (wrong state or issuer); the authorizer may wait for another."""

    redirect_uri: str

    async def __call__(self, url: str, accept: Callable[[str], str]) -> str: ...


class OAuthSession:
    """OAuth for one MCP server (``server_url``), as configured in ``config``."""

    def __init__(self, name: str, server_url: str, config: OAuthConfig, http: httpx.AsyncClient, store: TokenStore,
                 *, authorizer: Authorizer | None = None, environ: Mapping[str, str] | None = None,
                 timeout_secs: float = 30.0, now: Callable[[], float] = time.time,
                 metadata_required: bool = False) -> None:
        self.name = name
        # True for a server with no [oauth] table: only RFC 9728 metadata makes a 401 a login.
        self.metadata_required = metadata_required
        self.server_url = server_url
        self.config = config
        self.http = http
        self.store = store
        self.authorizer = authorizer
        self.timeout_secs = timeout_secs
        self.now = now
        env = os.environ if environ is None else environ
        self._secret = env.get(config.client_secret_env, "") if config.client_secret_env else ""
        if self._secret:
            register_secret(self._secret)  # masked in every log line, should one ever quote it
        if config.client_secret_env and not self._secret:
            log.warning("MCP server '%s': %s is not set; using no client secret", name, config.client_secret_env)
        self._environ = env
        self._idp_secret = env.get(config.idp_client_secret_env, "") if config.idp_client_secret_env else ""
        if self._idp_secret:
            register_secret(self._idp_secret)
        self._dpop: tuple[dpop.DpopKey, bytes] | None = None  # the key and its encoded proof header
        self.nonces = dpop.Nonces()
        self._lock = trio.Lock()
        self._step_ups = 0
        self.requested_scope = ""
        self._cached: tuple[tuple[int, int], Tokens | None] | None = None
        self._refreshed_on_401 = ""  # the header of a token refreshed because of a 401

    # --- what the transport calls ---------------------------------------------------

    def current(self) -> Tokens | None:
        """The saved tokens; read again only when the file changed (a login by the CLI,
        whose tokens may be bound to a DPoP key it made: that is read again too)."""
        stamp = self.store.tokens_stamp(self.server_url)
        if self._cached is None or self._cached[0] != stamp:
            self._cached = (stamp, self.store.tokens(self.server_url))
            self._dpop = None
        return self._cached[1]

    async def authorization(self) -> str | None:
        """The ``Authorization`` header value for the next request (None: no token yet).
        A token about to expire is refreshed first; if that fails the old one is sent
        and the server's 401 starts a new flow."""
        tokens = self.current()
        if tokens is None:
            return None
        if tokens.token_type == "DPoP" and self._dpop_key(create=False) is None:
            # Bound to a key that is gone: as a Bearer token it would be refused (or, worse,
            # accepted by a careless server). Forget it; the server's 401 starts a new flow.
            log.warning("MCP server '%s': the DPoP key of its token is missing; a new token is needed", self.name)
            self.store.forget_tokens(self.server_url)
            return None
        if grant.needs_refresh(tokens, self.now()):
            async with self._lock:
                tokens = self.current()
                if tokens is not None and grant.needs_refresh(tokens, self.now()):
                    tokens = await self._refresh_or_none(tokens) or tokens
        return tokens.header if tokens else None

    def proof(self, method: str, url: str, authorization: str | None) -> str:
        """The ``DPoP`` header for a request carrying ``authorization`` ("" unless that is
        a DPoP-bound token): fresh for every request, with the server's latest nonce."""
        if not authorization or not authorization.startswith("DPoP "):
            return ""
        found = self._dpop_key(create=False)
        if found is None:
            return ""
        key, header = found
        return dpop.proof(key, method, url, self.now(), nonce=self.nonces.get(url),
                          access_token=authorization[5:], header=header)

    def succeeded(self, sent_proof: str = "", nonce: str = "") -> None:
        """A request went through (with the DPoP proof ``sent_proof``; the server may have
        sent a next ``nonce``): the step-up budget starts again."""
        self._step_ups = 0
        if sent_proof:
            url, sent_nonce = _proof_target(sent_proof, self.server_url)
            self.nonces.worked(url, sent_nonce)
            self.nonces.offered(url, nonce)

    async def challenged(self, status: int, www_authenticate: list[str], sent: str | None, *,
                         sent_proof: str = "", nonce: str = "") -> bool:
        """The server refused a request sent with the header ``sent`` (401 or 403) and the
        DPoP proof ``sent_proof``, maybe naming a DPoP ``nonce``: get a new token (or use
        the nonce) if that can help. True: send the request again; False: give up (the
        refusal stands). AuthRequired when only a person can log in."""
        challenge = parse_www_authenticate(www_authenticate)
        if challenge.use_dpop_nonce:  # once per request: a server wanting a new nonce forever is refused
            return bool(sent_proof) and self.nonces.retry(*_proof_target(sent_proof, self.server_url), nonce)
        if status == 403 and not challenge.insufficient_scope:
            return False
        async with self._lock:
            tokens = self.current()
            if tokens is not None and sent != tokens.header:
                return True  # another request already got a new token
            if challenge.insufficient_scope:
                self._step_ups += 1
                if self._step_ups > grant.MAX_STEP_UPS:
                    log.warning("MCP server '%s' still wants more scope after %d re-authorizations: giving up",
                                self.name, grant.MAX_STEP_UPS)
                    return False
                current = tokens.scope if tokens and tokens.scope else self.requested_scope
                await self.login(challenge, scope=grant.step_up_scope(current, challenge.scope))
                return True
            found = await self.discover(challenge)
            issuer = found[1].issuer or discovery.origin_of(self.server_url)
            if (tokens is not None and tokens.refresh_token and sent is not None and issuer == tokens.issuer
                    and sent != self._refreshed_on_401):
                # Refresh once at the issuer that gave the token; a token refreshed because of
                # a 401 and refused again, or a server now naming another authorization server
                # (a migration), needs a new login instead.
                fresh = await self._refresh_or_none(tokens)
                if fresh is not None:
                    self._refreshed_on_401 = fresh.header
                    return True
            await self.login(challenge, found=found)
            return True

    # --- the flows ------------------------------------------------------------------

    async def probe(self, *, sse: bool = False) -> Challenge:
        """Ask the server without a token and read its challenge (where its metadata
        is, what scope it wants); an empty one if it did not refuse."""
        headers = {"Accept": "text/event-stream" if sse else "application/json, text/event-stream",
                   "Content-Type": "application/json"}
        body = None if sse else b'{"jsonrpc":"2.0","id":0,"method":"ping"}'
        try:
            with trio.fail_after(self.timeout_secs):
                async with self.http.stream("GET" if sse else "POST", self.server_url, content=body,
                                            headers=headers) as response:
                    status, values = response.status_code, response.headers.get_list("www-authenticate")
        except (trio.TooSlowError, httpx.HTTPError) as exc:
            raise AuthError(f"MCP server '{self.name}': cannot reach {_short(self.server_url)}: "
                            f"{exc or type(exc).__name__}") from None
        return parse_www_authenticate(values) if status in (401, 403) else Challenge()

    async def discover(self, challenge: Challenge = Challenge()) -> tuple[ResourceMetadata | None, AsMetadata, str]:
        """The server's resource metadata (None for a 2025-03-26 server), its
        authorization server's metadata and the ``resource`` to ask tokens for."""
        resource_meta = await self._resource_metadata(challenge.resource_metadata)
        if resource_meta is None and self.metadata_required:
            raise NotOAuth(f"MCP server '{self.name}' refused the request and publishes no OAuth metadata")
        if resource_meta is None:
            issuer = discovery.origin_of(self.server_url)
            server = await self._as_metadata(issuer) or discovery.legacy_as_metadata(self.server_url)
            return None, server, discovery.canonical_resource(self.server_url)
        issuer = resource_meta.authorization_servers[0]
        server = await self._as_metadata(issuer)
        if server is None:
            raise AuthError(f"MCP server '{self.name}': no authorization server metadata found for {issuer}")
        return resource_meta, server, resource_meta.resource

    async def login(self, challenge: Challenge = Challenge(), *, scope: str | None = None,
                    found: tuple[ResourceMetadata | None, AsMetadata, str] | None = None) -> Tokens:
        """The whole flow: discover (unless ``found`` already), identify the client,
        get tokens, save them."""
        resource_meta, server, resource = found if found is not None else await self.discover(challenge)
        issuer = server.issuer or discovery.origin_of(self.server_url)
        if scope is None:
            scope = grant.choose_scope(challenge.scope, resource_meta, server, tuple(self.config.scopes),
                                       want_refresh=self.config.grant == "authorization_code")
        self.requested_scope = scope
        if self.config.grant != "authorization_code":
            tokens = await self._unattended(server, issuer, resource, scope)
        else:
            if self.authorizer is None:
                self.store.forget_tokens(self.server_url)  # refused and not refreshable: useless now
                raise AuthRequired(login_hint(self.name))
            redirect_uri = self.config.redirect_uri or self.authorizer.redirect_uri or DEFAULT_REDIRECT
            client = await self._client(server, issuer, redirect_uri, scope)
            pending = grant.authorization_request(server, client, resource, scope, redirect_uri)
            try:
                with trio.fail_after(LOGIN_SECS):
                    code = await self.authorizer(pending.url, lambda redirect: grant.code_from_redirect(pending,
                                                                                                       redirect))
            except trio.TooSlowError:
                raise AuthError(f"MCP server '{self.name}': no login within {LOGIN_SECS // 60} minutes") from None
            tokens = await self._token(server, client, "authorization_code",
                                       {"code": code, "code_verifier": pending.pkce.verifier,
                                        "redirect_uri": redirect_uri, "resource": resource}, issuer, resource)
        self.store.save_tokens(self.server_url, tokens)
        log.info("MCP server '%s': signed in at %s (scope %s)", self.name, issuer, tokens.scope or scope or "none")
        return tokens

    async def _unattended(self, server: AsMetadata, issuer: str, resource: str, scope: str) -> Tokens:
        """Tokens without a person: the client's own credentials, a workload's JWT
        (jwt-bearer), or an enterprise ID token exchanged for an ID-JAG first (SEP-990).
        A refusal is final: the grant is not retried, nor another one tried."""
        client = self._configured_client(server, issuer)
        fields = {"scope": scope, "resource": resource}
        kind = self.config.grant
        if kind == "jwt_bearer":
            kind, fields["assertion"] = grant.JWT_BEARER, self._read_assertion("the workload's JWT")
        elif kind == "enterprise_managed":
            idp = Client(issuer=self.config.idp_token_endpoint, client_id=self.config.idp_client_id,
                         client_secret=self._idp_secret,
                         auth_method="client_secret_basic" if self._idp_secret else "none")
            body, headers = grant.exchange_request(idp, self._read_assertion("the enterprise ID token"),
                                                   server.issuer or issuer, resource, scope)
            status, answer, _ = await self._fetch("POST", self.config.idp_token_endpoint, body, headers)
            kind, fields["assertion"] = grant.JWT_BEARER, grant.parse_exchange_response(status, answer)
        return await self._token(server, client, kind, fields, issuer, resource)

    def _configured_client(self, server: AsMetadata, issuer: str) -> Client:
        if not self.config.client_id:
            if self.config.grant == "jwt_bearer":  # the assertion says who the workload is
                return Client(issuer=issuer, client_id="", how="config")
            raise AuthError(f"MCP server '{self.name}': grant = \"{self.config.grant}\" needs a client_id")
        client = grant.client_for(server, issuer, client_id=self.config.client_id, client_secret=self._secret)
        assert client is not None  # a configured client_id always gives one
        if self.config.private_key_file:
            client.auth_method = "private_key_jwt"
        return client

    def _read_assertion(self, what: str) -> str:
        """The grant's JWT, read afresh for each token request (workload tokens rotate):
        from ``assertion_env`` or ``assertion_file``. Never logged, never quoted."""
        if self.config.assertion_env:
            text = self._environ.get(self.config.assertion_env, "")
            if not text:
                raise AuthError(f"MCP server '{self.name}': {self.config.assertion_env} (holding {what}) is not set")
            return grant.check_assertion(text, f"{what} in {self.config.assertion_env}")
        path = self.config.assertion_file
        try:  # non-blocking: a FIFO with no writer must not hang the process
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise OSError(0, "not a regular file")
                data = f.read(grant.MAX_ASSERTION_CHARS + 1)
        except OSError as exc:
            raise AuthError(f"MCP server '{self.name}': cannot read {what} from {path}: "
                            f"{exc.strerror or type(exc).__name__}") from None
        if len(data) > grant.MAX_ASSERTION_CHARS:
            raise AuthError(f"MCP server '{self.name}': {what} in {path} is larger than "
                            f"{grant.MAX_ASSERTION_CHARS} bytes")
        return grant.check_assertion(data.decode("ascii", "replace"), f"{what} in {path}")

    def _uses_dpop(self, server: AsMetadata) -> bool:
        """DPoP when configured so, or (``auto``) when the authorization server offers ES256."""
        if self.config.dpop == "auto":
            return dpop.ALG in server.dpop_signing_alg_values_supported
        return self.config.dpop == "always"

    def _dpop_key(self, *, create: bool) -> tuple[dpop.DpopKey, bytes] | None:
        """This server's DPoP key (made and saved on first use when ``create``; a saved one
        that fails its check counts as none)."""
        if self._dpop is None:
            key = self.store.dpop_key(self.server_url)
            try:
                key = dpop.check_key(key) if key is not None else None
            except AuthError as exc:
                log.warning("MCP server '%s': %s: not used", self.name, exc)
                key = None
            if key is None and create:
                key = dpop.new_key()
                self.store.save_dpop_key(self.server_url, key)
            if key is not None:
                self._dpop = (key, dpop.encoded_header(key))
        return self._dpop

    def _assertion(self, client: Client, audience: str) -> dict[str, str]:
        """RFC 7523 client authentication: a JWT signed with the configured key."""
        from runtime.mcp.client.oauth import jwt

        try:
            with open(self.config.private_key_file, encoding="ascii") as f:
                pem = f.read(16384)
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthError(f"MCP server '{self.name}': cannot read the OAuth private key "
                            f"{self.config.private_key_file}: {getattr(exc, 'strerror', None) or exc}") from None
        key = jwt.load_private_key(pem)
        return {"client_assertion_type": jwt.ASSERTION_TYPE,
                "client_assertion": jwt.client_assertion(key, client.client_id, audience, self.now())}

    async def _client(self, server: AsMetadata, issuer: str, redirect_uri: str, scope: str) -> Client:
        client = grant.client_for(server, issuer, client_id=self.config.client_id, client_secret=self._secret,
                                  metadata_url=self.config.client_metadata_url, redirect_uri=redirect_uri)
        if client is not None:
            return client
        saved = self.store.client(issuer)
        if saved is not None and saved.issuer == issuer and saved.redirect_uri == redirect_uri:
            return saved
        status, body, _ = await self._fetch("POST", server.registration_endpoint,
                                            grant.registration_body(server, redirect_uri, scope),
                                            {"Content-Type": "application/json", "Accept": "application/json"})
        client = grant.parse_registration(status, body, server, issuer, redirect_uri)
        self.store.save_client(issuer, client)
        return client

    async def _token(self, server: AsMetadata, client: Client, kind: str, fields: dict[str, str], issuer: str,
                     resource: str, previous: Tokens | None = None) -> Tokens:
        if client.auth_method == "private_key_jwt":
            fields = {**fields, **self._assertion(client, server.issuer or server.token_endpoint)}
        body, headers = grant.token_request(client, kind, fields)
        found = self._dpop_key(create=True) if self._uses_dpop(server) else None
        endpoint = server.token_endpoint
        for _ in range(2):  # a use_dpop_nonce refusal is answered once with the server's nonce
            if found is not None:
                headers["DPoP"] = dpop.proof(found[0], "POST", endpoint, self.now(), nonce=self.nonces.get(endpoint),
                                             header=found[1])
            status, answer, answer_headers = await self._fetch("POST", endpoint, body, headers)
            if found is None:
                break
            sent = _proof_target(headers["DPoP"], endpoint)[1]
            demanded = answer_headers.get("dpop-nonce", "")
            if status == 400 and grant.oauth_error(status, answer) == "use_dpop_nonce":
                if not self.nonces.retry(endpoint, sent, demanded):
                    break
                continue
            self.nonces.worked(endpoint, sent)
            self.nonces.offered(endpoint, demanded)
            break
        return grant.parse_token_response(status, answer, self.now(), issuer=issuer, resource=resource,
                                          previous=previous, dpop=found is not None)

    async def _refresh_or_none(self, tokens: Tokens) -> Tokens | None:
        """Refresh ``tokens`` at the issuer that gave them (never another one); None
        if that cannot be done, with the reason logged (then a new flow runs)."""
        if not tokens.refresh_token:
            return None
        try:
            server = await self._as_metadata(tokens.issuer) if tokens.issuer else None
            if server is None:
                server = discovery.legacy_as_metadata(self.server_url)
            client = await self._saved_client(server, tokens.issuer)
            if client is None:
                return None
            fresh = await self._token(server, client, "refresh_token",
                                      {"refresh_token": tokens.refresh_token, "resource": tokens.resource},
                                      tokens.issuer, tokens.resource, previous=tokens)
        except AuthError as exc:
            log.warning("MCP server '%s': refreshing the token failed: %s", self.name, exc)
            return None
        self.store.save_tokens(self.server_url, fresh)
        return fresh

    async def _saved_client(self, server: AsMetadata, issuer: str) -> Client | None:
        client = grant.client_for(server, issuer, client_id=self.config.client_id, client_secret=self._secret,
                                  metadata_url=self.config.client_metadata_url)
        return client if client is not None else self.store.client(issuer)

    # --- discovery --------------------------------------------------------------------

    async def _resource_metadata(self, header_url: str) -> ResourceMetadata | None:
        if header_url and discovery.origin_of(header_url) != discovery.origin_of(self.server_url):
            log.warning("MCP server '%s' named resource metadata on another origin (%s): ignored",
                        self.name, discovery.origin_of(header_url)[:200])
            header_url = ""
        for url in discovery.resource_metadata_urls(self.server_url, header_url):
            status, body = await self._get_document(url)
            if status == 200:
                return discovery.parse_resource_metadata(body, self.server_url)
        return None

    async def _as_metadata(self, issuer: str) -> AsMetadata | None:
        for url in discovery.as_metadata_urls(issuer):
            status, body = await self._get_document(url)
            if status == 200:
                return discovery.parse_as_metadata(body, issuer)
        return None

    async def _get_document(self, url: str) -> tuple[int, bytes]:
        """GET one metadata document: (status, body); (0, b"") if it could not be
        fetched at all (refused by the guard, too slow, too large), with a warning."""
        try:
            status, body, _ = await self._fetch("GET", url, None, {"Accept": "application/json"})
        except AuthError as exc:
            log.warning("MCP server '%s': %s", self.name, exc)
            return 0, b""
        return status, body

    async def _fetch(self, method: str, url: str, content: bytes | None,
                     headers: dict[str, str]) -> tuple[int, bytes, httpx.Headers]:
        """One exchange with a bounded answer and a deadline; AuthError for anything
        that goes wrong on the way (the text names the URL, never a secret)."""
        data = bytearray()
        try:
            with trio.fail_after(self.timeout_secs):
                async with self.http.stream(method, url, content=content, headers=headers) as response:
                    async for chunk in response.aiter_raw():
                        data += chunk
                        if len(data) > MAX_RESPONSE_BYTES:
                            raise AuthError(f"{method} {_short(url)}: the answer is larger than "
                                            f"{MAX_RESPONSE_BYTES} bytes")
        except trio.TooSlowError:
            raise AuthError(f"{method} {_short(url)} took longer than {self.timeout_secs:g} s") from None
        except httpx.HTTPError as exc:
            raise AuthError(f"{method} {_short(url)} failed: {exc or type(exc).__name__}") from None
        return response.status_code, bytes(data), response.headers


def _proof_target(proof: str, default_url: str) -> tuple[str, str]:
    """The URL and nonce a proof of ours named: the nonce a server answers about is
    that URL's."""
    claims = dpop.claims_of(proof)
    url, nonce = claims.get("htu"), claims.get("nonce")
    return (url if isinstance(url, str) and url else default_url), (nonce if isinstance(nonce, str) else "")


def login_hint(name: str) -> str:
    return f"MCP server '{name}' needs a login: run `tern auth login {name}`"


def _short(url: str) -> str:
    """A URL for a message: no query (it may carry a code)."""
    return url.split("?", 1)[0][:200]


