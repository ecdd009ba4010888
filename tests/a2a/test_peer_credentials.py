"""Credentials tern presents to A2A peers: a bearer token from the environment, OAuth
client-credentials tokens from a token endpoint in the test (cached, refreshed before
expiry, one fetch for callers that arrive together, a 401 answered with one fresh
token), chosen from the peer card's security requirements (0.3 and 1.0 shapes); bad
token endpoints fail clearly; the real a2a-sdk server requiring a bearer token."""

from __future__ import annotations

import base64
import functools
import os
import re
import subprocess
from urllib.parse import parse_qs

import msgspec
import pytest
import trio
import trio.testing

from runtime.a2a.client.client import A2aClient, A2aClientError
from runtime.a2a.client.external import ExternalAgents
from runtime.a2a.client.security import choose, requirements
from runtime.config import A2aConfig, Config, ExternalAgent, PeerAuth, StateConfig
from runtime.errors import ConfigError, TernError
from runtime.log import registered_secrets
from runtime.net.credentials import ClientCredentials, TokenCache, TokenCredential, credential_for
from runtime.net.guard import AddressPolicy
from runtime.wire import oauth
from tests import peers
from tests.a2a.conftest import ROOT, SDK_SERVER
from tests.mcp.oauth.scripted import Request, Scripted, json_answer

SECRET = "s3cret-client-secret-value"
OPEN = AddressPolicy()


class TokenEndpoint:
    """Issues ``tok-1``, ``tok-2``... valid ``lifetime`` seconds (trio time) to the one
    client it knows, authenticated with Basic (or in the form with ``post_only``)."""

    def __init__(self, lifetime: int = 60, post_only: bool = False) -> None:
        self.lifetime, self.post_only = lifetime, post_only
        self.issued: dict[str, float] = {}
        self.gate: trio.Event | None = None  # when set: answers wait for it

    def valid(self, header: str) -> bool:
        token = header.removeprefix("Bearer ")
        return token in self.issued and trio.current_time() < self.issued[token]

    def __call__(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        form = {k: v[0] for k, v in parse_qs(request.body.decode()).items()}
        if self.post_only:
            ok = form.get("client_secret") == SECRET and "authorization" not in request.headers
        else:
            pair = base64.b64encode(f"tern:{SECRET}".encode()).decode()
            ok = request.headers.get("authorization") == f"Basic {pair}" and "client_secret" not in form
        if not ok or form.get("grant_type") != "client_credentials" or form.get("client_id") != "tern":
            return json_answer(401, {"error": "invalid_client"})
        token = f"tok-{len(self.issued) + 1}"
        self.issued[token] = trio.current_time() + self.lifetime
        return json_answer(200, {"access_token": token, "token_type": "Bearer", "expires_in": self.lifetime,
                                 "scope": form.get("scope", "")})


def card(base: str, schemes: dict | None = None, required: list | None = None, v03: bool = False) -> dict:
    doc: dict = {"name": "peer", "description": "a peer that wants credentials"}
    if v03:
        doc.update(url=base + "/rpc", protocolVersion="0.3.0")
        if schemes is not None:
            doc.update(securitySchemes=schemes, security=required or [])
    else:
        doc["supportedInterfaces"] = [{"url": base + "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]
        if schemes is not None:
            doc.update(securitySchemes=schemes, securityRequirements=required or [])
    return doc


class Peer:
    """An A2A 1.0 peer that answers only requests carrying a credential ``accept`` likes."""

    def __init__(self, accept, doc_of) -> None:
        self.accept, self.doc_of, self.seen = accept, doc_of, []
        self.server = Scripted({"/.well-known/agent-card.json": lambda r: json_answer(200, self.doc_of(self.base)),
                                "/rpc": self.rpc})
        self.base = ""

    async def start(self, nursery) -> str:
        self.base = await self.server.serve(nursery)
        return self.base

    def rpc(self, request: Request):
        self.seen.append(dict(request.headers))
        if not self.accept(request.headers):
            return json_answer(401, {"error": {"message": "who are you"}})
        msg_id = msgspec.json.decode(request.body)["id"]
        return json_answer(200, {"jsonrpc": "2.0", "id": msg_id, "result": {"message": {
            "messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "hello, friend"}]}}})


@pytest.fixture
def mock_clock(mock_clock):
    """Virtual time, away from 0: a token obtained at time 0 reads as one of unknown age
    (trio's own clock starts at a random offset of at least 10000 s)."""
    mock_clock.jump(10_000)
    return mock_clock


async def token_server(nursery, endpoint: TokenEndpoint) -> tuple[Scripted, str]:
    server = Scripted({"/token": endpoint})
    base = await server.serve(nursery)
    return server, base + "/token"


def spec(url: str, **kw) -> ClientCredentials:
    return ClientCredentials(url, "tern", SECRET, **kw)


# --- The token cache -----------------------------------------------------------------------


async def test_a_token_is_cached_until_shortly_before_it_expires(nursery, mock_clock):
    endpoint = TokenEndpoint(lifetime=60)
    server, url = await token_server(nursery, endpoint)
    async with TokenCache(OPEN) as cache:
        first = await cache.get(spec(url, scopes=("a2a", "read"), audience="https://peer"))
        assert first.access_token == "tok-1"
        form = parse_qs(server.requests[0].body.decode())
        assert form["scope"] == ["a2a read"] and form["audience"] == ["https://peer"]
        mock_clock.jump(25)
        assert (await cache.get(spec(url, scopes=("a2a", "read"), audience="https://peer"))).access_token == "tok-1"
        mock_clock.jump(10)  # 35 s of 60: within half its life of the end, so a new one
        assert (await cache.get(spec(url, scopes=("a2a", "read"), audience="https://peer"))).access_token == "tok-2"
        # another scope or audience is another token
        assert (await cache.get(spec(url, scopes=("a2a",)))).access_token == "tok-3"
        assert cache.fetches == 3


class Held(Scripted):
    """Answers only once ``gate`` is set."""

    def __init__(self, routes, gate: trio.Event) -> None:
        super().__init__(routes)
        self.gate = gate

    async def _handle(self, stream) -> None:
        await self.gate.wait()
        await super()._handle(stream)


async def test_callers_that_arrive_together_share_one_fetch(nursery):
    gate = trio.Event()
    server = Held({"/token": TokenEndpoint()}, gate)
    url = await server.serve(nursery) + "/token"
    got = []
    async with TokenCache(OPEN) as cache:
        async def caller():
            got.append((await cache.get(spec(url))).access_token)

        async with trio.open_nursery() as callers:
            for _ in range(20):
                callers.start_soon(caller)
            await trio.testing.wait_all_tasks_blocked()
            gate.set()
    assert got == ["tok-1"] * 20 and cache.fetches == 1 and len(server.requests) == 1


async def test_client_secret_post_when_the_metadata_lists_only_that(nursery):
    endpoint = TokenEndpoint(post_only=True)
    server = Scripted({"/token": endpoint, "/.well-known/oauth-authorization-server": lambda r: json_answer(
        200, {"issuer": "x", "token_endpoint_auth_methods_supported": ["client_secret_post"]})})
    base = await server.serve(nursery)
    async with TokenCache(OPEN) as cache:
        tokens = await cache.get(spec(base + "/token", metadata_url=base + "/.well-known/oauth-authorization-server"))
    assert tokens.access_token == "tok-1"


@pytest.mark.parametrize("answer,words", [
    ((500, {"Content-Type": "text/html"}, b"<html>oops</html>"), "refused (HTTP 500)"),
    ((200, {}, b"not json at all"), "not JSON"),
    ((200, {}, b'{"access_token": "' + b"x" * 70_000 + b'"}'), "larger than 65536 bytes"),
    (json_answer(200, {"token_type": "Bearer", "expires_in": 60}), "no usable access_token"),
    (json_answer(400, {"error": "invalid_scope", "error_description": "no such scope"}), "invalid_scope"),
    (json_answer(200, {"access_token": "t", "token_type": "MAC"}), "token_type 'MAC'"),
], ids=["500", "not-json", "oversized", "no-access-token", "oauth-error", "odd-type"])
async def test_bad_token_endpoint_answers_are_clear_errors(nursery, answer, words):
    server = Scripted({"/token": lambda r: answer})
    url = await server.serve(nursery) + "/token"
    async with TokenCache(OPEN) as cache:
        with pytest.raises(oauth.AuthError, match=re.escape(words)) as caught:
            await cache.get(spec(url))
    assert url in str(caught.value) and SECRET not in str(caught.value)


async def test_a_token_endpoint_that_never_answers_times_out(nursery, autojump_clock):
    async def silent(stream):
        await trio.sleep_forever()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
    url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/token"
    async with TokenCache(OPEN, timeout_secs=5) as cache:
        with pytest.raises(oauth.AuthError, match="no answer within 5 s"):
            await cache.get(spec(url))


async def test_the_guard_checks_the_token_endpoint():
    async with TokenCache(OPEN) as cache:
        with pytest.raises(oauth.AuthError, match="169.254.169.254"):
            await cache.get(spec("http://169.254.169.254/token"))


async def test_a_failed_refresh_keeps_a_token_still_valid(nursery, mock_clock):
    endpoint = TokenEndpoint(lifetime=60)
    broken = {"now": False}
    server = Scripted({"/token": lambda r: json_answer(503, {"error": "down"}) if broken["now"] else endpoint(r)})
    url = await server.serve(nursery) + "/token"
    async with TokenCache(OPEN) as cache:
        assert (await cache.get(spec(url))).access_token == "tok-1"
        broken["now"] = True
        mock_clock.jump(40)  # due for a refresh, still valid
        assert (await cache.get(spec(url))).access_token == "tok-1"
        mock_clock.jump(30)  # expired: the failure is the answer now
        with pytest.raises(oauth.AuthError, match="HTTP 503"):
            await cache.get(spec(url))


# --- Against a peer --------------------------------------------------------------------------


async def test_a_401_drops_the_token_and_retries_once_with_a_fresh_one(nursery, mock_clock):
    endpoint = TokenEndpoint()
    _, url = await token_server(nursery, endpoint)
    revoked = {"Bearer tok-1"}
    peer = Peer(lambda h: endpoint.valid(h.get("authorization", "")) and h["authorization"] not in revoked,
                lambda base: card(base))
    base = await peer.start(nursery)
    async with TokenCache(OPEN) as cache, A2aClient(credentials=TokenCredential(cache, spec(url))) as client:
        remote = await client.discover(base)
        reply = await client.send(remote, "hi")
        assert reply.parts[0]["text"] == "hello, friend"
        assert [h["authorization"] for h in peer.seen] == ["Bearer tok-1", "Bearer tok-2"]
        revoked.add("Bearer tok-2")
        revoked.add("Bearer tok-3")  # refused again with the fresh token: the refusal stands, no loop
        with pytest.raises(A2aClientError, match="HTTP 401"):
            await client.send(remote, "hi")
        assert [h["authorization"] for h in peer.seen[2:]] == ["Bearer tok-2", "Bearer tok-3"]
        assert cache.fetches == 3
        # a stream is sent again the same way, once
        events = [event async for event in client.stream(remote, "streamed")]
        assert events[0].parts[0]["text"] == "hello, friend"
        assert [h["authorization"] for h in peer.seen[4:]] == ["Bearer tok-3", "Bearer tok-4"]


def kernel_less(tmp_path, base: str, **entry) -> ExternalAgents:
    config = Config(state=StateConfig(dir=str(tmp_path)),
                    a2a=A2aConfig(external_agents=[ExternalAgent(name="peer", url=base, **entry)],
                                  discovery_timeout_secs=5))
    return ExternalAgents(config, OPEN)


@pytest.mark.parametrize("post_only", [False, True], ids=["basic", "post-from-metadata"])
async def test_the_cards_oauth2_scheme_names_the_token_endpoint(nursery, tmp_path, monkeypatch, post_only):
    endpoint = TokenEndpoint(post_only=post_only)
    server = Scripted({"/token": endpoint, "/.well-known/oauth-authorization-server": lambda r: json_answer(
        200, {"issuer": "x", "token_endpoint_auth_methods_supported": ["client_secret_post"]})})
    url = await server.serve(nursery) + "/token"
    metadata = {"oauth2MetadataUrl": server.base + "/.well-known/oauth-authorization-server"} if post_only else {}
    schemes = {"oauth": {"oauth2SecurityScheme": {**metadata, "flows": {"clientCredentials": {
        "tokenUrl": url, "scopes": {"a2a.send": "send messages"}}}}}}
    peer = Peer(lambda h: endpoint.valid(h.get("authorization", "")),
                lambda base: card(base, schemes, [{"schemes": {"oauth": {"list": ["a2a.send"]}}}]))
    base = await peer.start(nursery)
    monkeypatch.setenv("PEER_SECRET", SECRET)
    agents = kernel_less(tmp_path, base, auth=PeerAuth(kind="client_credentials", client_id="tern",
                                                       client_secret_env="PEER_SECRET"))
    await nursery.start(agents.run)
    reply = await agents.send("peer", "hi")
    assert reply.text == "hello, friend"
    assert parse_qs(server.to("/token")[0].body.decode())["scope"] == ["a2a.send"]  # the requirement's scopes
    assert SECRET in registered_secrets()  # masked in every log line


@pytest.mark.parametrize("v03", [False, True], ids=["1.0", "0.3"])
async def test_a_bearer_token_from_the_environment_goes_where_the_card_says(nursery, tmp_path, monkeypatch, v03):
    token = "peer-bearer-token-123"
    monkeypatch.setenv("PEER_TOKEN", token)
    if v03:
        schemes, required = {"key": {"type": "apiKey", "in": "header", "name": "X-Peer-Key"}}, [{"key": []}]
    else:
        schemes = {"key": {"apiKeySecurityScheme": {"location": "header", "name": "X-Peer-Key"}}}
        required = [{"schemes": {"key": {"list": []}}}]
    peer = Peer(lambda h: h.get("x-peer-key") == token, lambda base: card(base, schemes, required, v03=v03))
    base = await peer.start(nursery)
    agents = kernel_less(tmp_path, base, auth=PeerAuth(kind="bearer", token_env="PEER_TOKEN"))
    await nursery.start(agents.run)
    assert (await agents.send("peer", "hi")).text == "hello, friend"
    assert "authorization" not in peer.seen[0]


async def test_a_card_asking_for_credentials_tern_lacks_fails_in_one_line(nursery, tmp_path):
    schemes = {"oauth": {"type": "oauth2", "flows": {"clientCredentials": {"tokenUrl": "https://idp.example/t",
                                                                            "scopes": {}}}},
               "mtls": {"type": "mutualTLS"}}
    peer = Peer(lambda h: False, lambda base: card(base, schemes, [{"oauth": []}, {"mtls": []}], v03=True))
    base = await peer.start(nursery)
    agents = kernel_less(tmp_path, base)
    await nursery.start(agents.run)
    with pytest.raises(TernError) as caught:
        await agents.send("peer", "hi")
    text = str(caught.value)
    assert "\n" not in text and "'oauth' (OAuth 2.0 client credentials at https://idp.example/t)" in text
    assert "'mtls' (mutualTLS)" in text and "set auth" in text
    assert peer.seen == []  # nothing was sent to it


async def test_a_missing_token_variable_is_a_clear_error(nursery, tmp_path, monkeypatch):
    monkeypatch.delenv("PEER_TOKEN", raising=False)
    peer = Peer(lambda h: True, lambda base: card(base))
    base = await peer.start(nursery)
    agents = kernel_less(tmp_path, base, auth=PeerAuth(kind="bearer", token_env="PEER_TOKEN"))
    await nursery.start(agents.run)
    with pytest.raises(TernError, match="A2A agent 'peer': PEER_TOKEN is not set in tern's environment"):
        await agents.send("peer", "hi")
    with pytest.raises(ConfigError, match="PEER_TOKEN is not set"):
        credential_for(PeerAuth(kind="bearer", token_env="PEER_TOKEN"), "x", None)


def test_a_cards_token_url_must_be_https_or_loopback():
    schemes = {"o": {"type": "oauth2", "flows": {"clientCredentials": {"tokenUrl": "http://idp.example/token"}}}}
    doc = {"securitySchemes": schemes, "security": [{"o": ["x"]}]}
    with pytest.raises(A2aClientError, match="'o'"):
        choose(doc, "peer", auth="client_credentials")
    # a configured token_url wins over the card's, whatever the card says
    plan = choose(doc, "peer", auth="client_credentials", token_url="https://idp.example/token")
    assert plan.kind == "client_credentials" and plan.token_url == "" and plan.scopes == ("x",)
    https = {"o": {"type": "oauth2", "flows": {"clientCredentials": {"tokenUrl": "https://idp.example/token"}}}}
    plan = choose({"securitySchemes": https, "security": [{"o": []}]}, "peer", auth="client_credentials")
    assert plan.token_url == "https://idp.example/token"


def test_hostile_cards_are_read_without_surprises():
    assert requirements({"security": "all of them"}) == []
    assert requirements({"securityRequirements": [None, 3, {"schemes": None}]}) == []
    many = {"security": [{f"s{i}": []} for i in range(10_000)]}
    assert len(requirements(many)) == 16
    with pytest.raises(A2aClientError):  # a named but undefined scheme cannot be met
        choose({"security": [{"ghost": []}]}, "peer", auth="bearer")
    # a header already configured meets an HTTP scheme; no requirements leave the config as it is
    assert choose({"securitySchemes": {"b": {"type": "http", "scheme": "bearer"}}, "security": [{"b": []}]}, "p",
                  headers=frozenset({"authorization"})).kind == "none"
    assert choose({}, "p", auth="bearer").kind == "bearer"


# --- The real a2a-sdk server requiring a bearer token ---------------------------------------------


@pytest.fixture(scope="module")
def sdk_bearer_url():
    python = str(peers.require(peers.a2a_sdk_python))
    env = {**os.environ, "A2A_REQUIRE_BEARER": "sdk-peer-token-987"}
    process = subprocess.Popen([python, str(SDK_SERVER), "0"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
    try:
        line = process.stdout.readline()
        assert line.startswith("listening on "), line + process.stdout.read()
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(10)


async def test_the_a2a_sdk_server_accepts_the_token_and_refuses_without(nursery, tmp_path, monkeypatch,
                                                                        sdk_bearer_url):
    monkeypatch.setenv("SDK_TOKEN", "sdk-peer-token-987")
    agents = kernel_less(tmp_path / "with", sdk_bearer_url, auth=PeerAuth(kind="bearer", token_env="SDK_TOKEN"))
    await nursery.start(agents.run)
    assert (await agents.send("peer", "with a token")).text == "echo: with a token"
    # no auth configured: the card's requirement is named before anything is sent
    bare = kernel_less(tmp_path / "without", sdk_bearer_url)
    await nursery.start(bare.run)
    with pytest.raises(TernError, match="security scheme 'bearer' \\(HTTP bearer\\)"):
        await bare.send("peer", "without")
    # and the server itself refuses a call without it (the requirement is real)
    async with A2aClient() as client:
        remote = await client.discover(sdk_bearer_url)
        with pytest.raises(A2aClientError, match="HTTP 401"):
            await client.send(remote, "sneaking in")


# --- Push webhooks that need a token -------------------------------------------------------------


def test_a_webhook_prefix_matches_its_origin_and_path_only():
    from runtime.a2a.server.push import matches

    prefix = "https://hooks.example.com/tern"
    assert matches(prefix, "https://hooks.example.com/tern/task-1")
    assert matches(prefix, "https://HOOKS.example.com:443/tern")
    assert matches("https://hooks.example.com", "https://hooks.example.com/any/where")
    for other in ("https://hooks.example.com.evil.net/tern/x", "http://hooks.example.com/tern/x",
                  "https://hooks.example.com:8443/tern/x", "https://hooks.example.com/ternx",
                  "https://user@evil.net/tern", "https://[::1/tern"):
        assert not matches(prefix, other), other


async def test_pushes_carry_a_client_credentials_token_from_config(nursery, tmp_path, monkeypatch):
    from runtime.config import AgentConfig, PushWebhook
    from runtime.host.api import build_router
    from runtime.host.node import Node
    from runtime.httpd.access import Access
    from runtime.httpd.server import HttpServer
    from tests.a2a.test_server import V10, message, rpc

    endpoint = TokenEndpoint()
    _, token_url = await token_server(nursery, endpoint)
    received = []

    def hook(request: Request):
        if not endpoint.valid(request.headers.get("authorization", "")) \
                or request.headers["authorization"] == "Bearer tok-1":  # the first token is revoked
            return json_answer(401, {})
        received.append(msgspec.json.decode(request.body))
        return json_answer(200, {})

    hooks = Scripted({"/hook": hook, "/theirs": lambda r: (received.append(r.headers["authorization"]),
                                                           json_answer(200, {}))[1]})
    hooks_base = await hooks.serve(nursery)
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    config = Config(agents=[AgentConfig(name="echo", kind="echo")], state=StateConfig(dir=str(tmp_path)),
                    a2a=A2aConfig(enabled=True, default_agent="echo", push_webhooks=[PushWebhook(
                        url_prefix=hooks_base, auth=PeerAuth(kind="client_credentials", token_url=token_url,
                                                             client_id="tern", client_secret_env="HOOK_SECRET"))]))
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node, secured=False), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{bound[0][1]}/a2a"
    import httpx

    async with httpx.AsyncClient(headers=V10) as client:
        await client.post(url, json=rpc("SendMessage", {"message": message("push me"), "configuration": {
            "taskPushNotificationConfig": {"url": hooks_base + "/hook"}}}))
        with trio.fail_after(10):
            while len(received) < 3:
                await trio.sleep(0.02)
        assert [h.get("authorization") for h in (r.headers for r in hooks.to("/hook"))][:2] == \
            ["Bearer tok-1", "Bearer tok-2"]
        assert endpoint.issued.keys() == {"tok-1", "tok-2"}  # one token for all the events after the refresh
        # a registration with credentials of its own keeps them
        await client.post(url, json=rpc("SendMessage", {"message": message("theirs"), "configuration": {
            "taskPushNotificationConfig": {"url": hooks_base + "/theirs",
                                           "authentication": {"scheme": "Bearer", "credentials": "their-own"}}}}))
        with trio.fail_after(10):
            while "Bearer their-own" not in received:
                await trio.sleep(0.02)


def test_configured_headers_are_trusted_over_the_cards_list():
    bearer_only = {"securitySchemes": {"b": {"type": "http", "scheme": "bearer"}}, "security": [{"b": []}]}
    with pytest.raises(A2aClientError, match="'b' \\(HTTP bearer\\)"):
        choose(bearer_only, "p")
    assert choose(bearer_only, "p", headers=frozenset({"x-api-key"})).kind == "none"
