"""A hostile server on the other end of tern's OAuth discovery: huge, slow, cross-origin
and redirecting metadata, and authorization servers at addresses the SSRF guard
refuses. A real loopback HTTP server answers each path as scripted; tern's OAuth
session talks to it through the same guarded client the MCP transport uses."""

from __future__ import annotations

import functools

import msgspec
import pytest
import trio

from runtime.config import OAuthConfig
from runtime.mcp.client.oauth.challenge import Challenge
from runtime.mcp.client.oauth.model import AuthError, AuthRequired
from runtime.mcp.client.oauth.shell import OAuthSession
from runtime.mcp.client.oauth.store import TokenStore
from runtime.net.guard import AddressPolicy
from runtime.net.outbound import make_client


class Hostile:
    """Serves ``routes[path] = (status, headers, body, delay)``; records every path asked."""

    def __init__(self, routes: dict) -> None:
        self.routes = routes
        self.asked: list[str] = []
        self.port = 0

    async def serve(self, nursery: trio.Nursery) -> str:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1"))
        self.port = listeners[0].socket.getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                head += chunk
            path = head.split(b" ", 2)[1].decode()
            self.asked.append(path)
            status, headers, body, delay = self.routes.get(path, (404, {}, b"{}", 0))
            await trio.sleep(delay)
            lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close",
                     *(f"{k}: {v}" for k, v in headers.items())]
            try:
                await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            except trio.BrokenResourceError:
                pass


def prm(base: str, servers: list[str]) -> bytes:
    return msgspec.json.encode({"resource": f"{base}/mcp", "authorization_servers": servers})


async def discover(routes_of, *, challenge=Challenge(), timeout=2.0, authorizer=None):
    async with trio.open_nursery() as nursery:
        hostile = Hostile({})
        base = await hostile.serve(nursery)
        hostile.routes.update(routes_of(base))
        async with make_client(AddressPolicy(), timeout=timeout) as http:
            session = OAuthSession("h", f"{base}/mcp", OAuthConfig(), http, TokenStore(""), timeout_secs=timeout,
                                   authorizer=authorizer)
            started = trio.current_time()
            try:
                found = await session.discover(challenge)
            except AuthError as exc:
                error = exc  # raised outside the nursery, not inside an exception group
            else:
                error = None
            nursery.cancel_scope.cancel()
    if error is not None:
        raise error
    return found, hostile, trio.current_time() - started


async def test_huge_metadata_is_cut_and_skipped():
    big = b'{"resource": "' + b"x" * 2_000_000 + b'"}'
    (meta, server, resource), hostile, _ = await discover(lambda base: {
        "/.well-known/oauth-protected-resource/mcp": (200, {}, big, 0),
        "/.well-known/oauth-protected-resource": (200, {}, big, 0),
        "/.well-known/oauth-authorization-server": (200, {}, big, 0)})
    assert meta is None and server.token_endpoint.endswith("/token")  # nothing usable: the 2025-03-26 fallback
    assert len(hostile.asked) >= 3


async def test_slow_metadata_is_bounded_by_the_timeout(loopback_clock):
    (meta, server, _), hostile, took = await discover(lambda base: {
        path: (200, {}, prm(base, [base]), 30) for path in (
            "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")}, timeout=0.5)
    assert meta is None and took == pytest.approx(2.0, abs=0.2)  # four URLs, 0.5 s each, then the fallback


async def test_cross_origin_resource_metadata_is_not_fetched():
    async with trio.open_nursery() as nursery:
        other = Hostile({})
        other_base = await other.serve(nursery)
        challenge = Challenge(scheme="bearer", resource_metadata=f"{other_base.replace('127.0.0.1', 'localhost')}/x")
        (meta, _, _), hostile, _ = await discover(lambda base: {}, challenge=challenge)
        nursery.cancel_scope.cancel()
    assert other.asked == [] and "/.well-known/oauth-protected-resource/mcp" in hostile.asked


async def test_redirects_are_not_followed_to_metadata_addresses():
    moved = (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b"", 0)
    (meta, server, _), hostile, _ = await discover(lambda base: {
        "/.well-known/oauth-protected-resource/mcp": moved, "/.well-known/oauth-protected-resource": moved,
        "/.well-known/oauth-authorization-server": moved})
    assert meta is None and server.issuer == ""  # nothing followed: the fallback endpoints


@pytest.mark.parametrize("issuer", ["http://169.254.169.254", "http://[fe80::1]:80", "http://0.0.0.0:1"])
async def test_an_authorization_server_at_a_blocked_address_is_refused(issuer):
    with pytest.raises(AuthError, match="no authorization server metadata"):
        await discover(lambda base: {"/.well-known/oauth-protected-resource/mcp": (200, {}, prm(base, [issuer]), 0)})


async def test_resource_metadata_for_another_server_is_refused():
    with pytest.raises(AuthError, match="refused"):
        await discover(lambda base: {"/.well-known/oauth-protected-resource/mcp": (
            200, {}, msgspec.json.encode({"resource": "http://evil.example/mcp", "authorization_servers": [base]}), 0)})


async def test_the_daemon_has_no_authorizer_so_a_login_is_required():
    async with trio.open_nursery() as nursery:
        hostile = Hostile({})
        base = await hostile.serve(nursery)
        hostile.routes["/.well-known/oauth-authorization-server"] = (200, {}, msgspec.json.encode({
            "issuer": base, "authorization_endpoint": f"{base}/a", "token_endpoint": f"{base}/t",
            "registration_endpoint": f"{base}/r"}), 0)
        async with make_client(AddressPolicy(), timeout=2) as http:
            session = OAuthSession("h", f"{base}/mcp", OAuthConfig(), http, TokenStore(""), timeout_secs=2)
            with pytest.raises(AuthRequired, match="tern auth login h"):
                await session.challenged(401, ['Bearer error="invalid_token"'], None)
        nursery.cancel_scope.cancel()
    assert "/r" not in hostile.asked  # nothing registered for a login that cannot happen


async def test_authorization_server_metadata_naming_another_issuer_is_refused():
    def routes(base):
        return {"/.well-known/oauth-protected-resource/mcp": (200, {}, prm(base, [f"{base}/tenant"]), 0),
                "/.well-known/oauth-authorization-server/tenant": (200, {}, msgspec.json.encode({
                    "issuer": "https://attacker.example", "token_endpoint": f"{base}/t"}), 0)}

    with pytest.raises(AuthError, match="names the issuer 'https://attacker.example'"):
        await discover(routes)


async def test_a_server_that_moved_to_another_authorization_server_is_not_refreshed_at_the_old_one(tmp_path):
    """The token came from as1; the server's metadata now names as2. A 401 must not send
    the old refresh token (or the old client id) to as1 or as2: register at as2, log in."""
    from urllib.parse import parse_qs, urlsplit

    from runtime.mcp.client.oauth.model import Client, Tokens

    def as_doc(base, name):
        return msgspec.json.encode({"issuer": f"{base}/{name}", "authorization_endpoint": f"{base}/{name}/authorize",
                                    "token_endpoint": f"{base}/{name}/token",
                                    "registration_endpoint": f"{base}/{name}/register"})

    seen_clients = []

    class Person:
        redirect_uri = "http://127.0.0.1:9/callback"

        async def __call__(self, url, accept):
            query = parse_qs(urlsplit(url).query)
            seen_clients.append(query["client_id"][0])
            return accept(f"?code=c&state={query['state'][0]}&iss={url.split('/as2/')[0]}/as2")

    async with trio.open_nursery() as nursery:
        hostile = Hostile({})
        base = await hostile.serve(nursery)
        token = msgspec.json.encode({"access_token": "as2-token", "token_type": "Bearer", "expires_in": 3600})
        hostile.routes.update({
            "/.well-known/oauth-protected-resource/mcp": (200, {}, prm(base, [f"{base}/as2"]), 0),
            "/.well-known/oauth-authorization-server/as1": (200, {}, as_doc(base, "as1"), 0),
            "/.well-known/oauth-authorization-server/as2": (200, {}, as_doc(base, "as2"), 0),
            "/as1/token": (200, {}, msgspec.json.encode({"access_token": "as1-again"}), 0),
            "/as2/register": (201, {}, msgspec.json.encode({"client_id": "as2-client"}), 0),
            "/as2/token": (200, {}, token, 0)})
        store = TokenStore(tmp_path)
        store.save_tokens(f"{base}/mcp", Tokens(access_token="as1-token", refresh_token="as1-refresh",
                                                issuer=f"{base}/as1", resource=f"{base}/mcp"))
        store.save_client(f"{base}/as1", Client(issuer=f"{base}/as1", client_id="as1-client"))
        async with make_client(AddressPolicy(), timeout=2) as http:
            session = OAuthSession("h", f"{base}/mcp", OAuthConfig(), http, store, timeout_secs=2, authorizer=Person())
            assert await session.challenged(401, ['Bearer error="invalid_token"'], "Bearer as1-token")
        nursery.cancel_scope.cancel()
    assert "/as1/token" not in hostile.asked and "/as2/register" in hostile.asked and "/as2/token" in hostile.asked
    assert seen_clients == ["as2-client"]
    assert store.tokens(f"{base}/mcp").issuer == f"{base}/as2" and store.client(f"{base}/as2").client_id == "as2-client"
