"""Signed agent cards with real peers: tern's cards checked by the a2a-sdk's own verifier,
cards the a2a-sdk signed (served by its own routes) checked by tern's client, and every
way a card's signature can be wrong refused with its reason. Also the extended card and
its gate, the JWKS route, and the signing key file's rules."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from runtime.a2a.client.card_trust import CardTrust
from runtime.a2a.client.client import A2aClient
from runtime.a2a.client.external import card_trust
from runtime.a2a.client.requests import A2aClientError
from runtime.a2a.server.card_signing import KEY_FILE, load_key
from runtime.a2a.server.request import may_read_extended_card
from runtime.config import A2aConfig, AgentConfig, Config, ExternalAgent, StateConfig
from runtime.crypto import jwk
from runtime.errors import TernError
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from runtime.net.guard import AddressPolicy
from tests import peers

ROOT = Path(__file__).resolve().parent.parent.parent
SIGNED_CARDS = ROOT / "tests" / "fixtures" / "a2a_sdk_signed_cards.py"
KEY = "card-test-key-1234"
LOOPBACK = AddressPolicy()


def _sdk() -> tuple[str, dict[str, str]]:
    python = str(peers.require(peers.a2a_sdk_python))
    path = str(peers.require(peers.a2a_signing_path))
    return python, {"PYTHONPATH": path, "PATH": "/usr/bin:/bin"}


async def start(nursery, tmp_path, *, key=KEY, signing_key=""):
    agents = [AgentConfig(name="echo", kind="echo", description="Echoes ünïcode €.", tools=["file_read", "web_*"]),
              AgentConfig(name="other", kind="echo")]
    config = Config(agents=agents, state=StateConfig(dir=str(tmp_path)),
                    a2a=A2aConfig(enabled=True, default_agent="echo", card_signing_key=signing_key))
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node, secured=bool(key)), Access(key))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    node.http_bound = ("127.0.0.1", bound[0][1])
    return node, f"http://127.0.0.1:{bound[0][1]}"


_SDK_VERIFY = r"""
import json, sys
from jwt import PyJWK
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
job = json.loads(sys.stdin.read())
keys = {k["kid"]: PyJWK(k) for k in job["jwks"]["keys"]}
verify = create_signature_verifier(lambda kid, jku: keys[kid], ["EdDSA"])
out = []
for card in job["cards"]:
    try:
        verify(parse_agent_card(card))
        out.append("valid")
    except InvalidSignaturesError as exc:
        out.append(f"invalid: {exc}")
print(json.dumps(out))
"""


def sdk_verify(jwks: dict, cards: list[dict]) -> list[str]:
    python, env = _sdk()
    done = subprocess.run([python, "-c", _SDK_VERIFY], input=json.dumps({"jwks": jwks, "cards": cards}),
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_sdk_verifies_terns_signed_cards(nursery, tmp_path):
    """Every card tern serves (public, per agent, the list, the extended one in both
    bindings) passes the a2a-sdk's own verifier with the key from tern's JWKS; a card
    changed after signing does not, so the check is not vacuous."""
    node, url = await start(nursery, tmp_path)
    auth = {"Authorization": f"Bearer {KEY}", "A2A-Version": "1.0"}
    async with httpx.AsyncClient() as client:
        jwks = (await client.get(url + "/.well-known/jwks.json")).json()
        public = (await client.get(url + "/.well-known/agent-card.json")).json()
        other = (await client.get(url + "/a2a/other/.well-known/agent-card.json")).json()
        listed = (await client.get(url + "/a2a/agents")).json()["agents"]
        rest = (await client.get(url + "/a2a/echo/rest/extendedAgentCard", headers=auth)).json()
        rpc = (await client.post(url + "/a2a/echo", headers=auth, json={
            "jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}})).json()["result"]
    [key] = jwks["keys"]
    assert key["kty"] == "OKP" and key["crv"] == "Ed25519" and "d" not in key
    assert key["kid"] == jwk.thumbprint(key) and key["alg"] == "EdDSA" and key["use"] == "sig"
    assert public["capabilities"]["extendedAgentCard"] and public["supportsAuthenticatedExtendedCard"]
    assert public["url"] and public["securitySchemes"]["bearer"]["type"] == "http"  # the 0.3 fields are there too
    tampered = {**public, "description": "not what was signed"}
    moved = {**public, "url": "http://elsewhere.example/a2a/echo"}  # unsigned 0.3 field: the SDK drops it
    assert sdk_verify(jwks, [public, other, *listed, rest, rpc, tampered, moved]) == (
        ["valid"] * (4 + len(listed)) + ["invalid: No valid signature found", "valid"])
    assert rest == rpc and {s["id"] for s in rest["skills"]} >= {"tool:file_read", "tool:web_*"}
    assert not any(s["id"].startswith("tool:") for s in public["skills"])  # only the extended card says
    header = json.loads(jwk.unb64url(public["signatures"][0]["protected"]))
    assert header == {"alg": "EdDSA", "kid": key["kid"], "typ": "JOSE"}


async def test_tern_client_refuses_a_moved_endpoint_and_checks_terns_own_cards(nursery, tmp_path):
    """tern's client checks a tern card against its origin's JWKS, a pinned key and a
    trusted JWKS URL; a wrong pinned key is refused; an unsigned 0.3 ``url`` that the
    signed card does not name is refused even though the 1.0 signature holds."""
    node, url = await start(nursery, tmp_path)
    async with httpx.AsyncClient() as http:
        jwks = (await http.get(url + "/.well-known/jwks.json")).json()
    async with A2aClient(policy=LOOPBACK) as client:
        assert (await client.discover(url)).name == "echo"
    async with A2aClient(policy=LOOPBACK, trust=CardTrust(pinned=jwk.public_key(jwks["keys"][0]))) as client:
        assert (await client.discover(url + "/a2a/other")).name == "other"
    async with A2aClient(policy=LOOPBACK, trust=CardTrust(jwks_url=url + "/.well-known/jwks.json")) as client:
        assert (await client.discover(url)).dialect == "1.0"
    stranger = jwk.generate().public
    async with A2aClient(policy=LOOPBACK, trust=CardTrust(pinned=stranger)) as client:
        with pytest.raises(A2aClientError, match="refused: no valid signature.*does not match the card"):
            await client.discover(url)
    from runtime.a2a.client.card_trust import CardRefused

    async with httpx.AsyncClient() as http:
        card = (await http.get(url + "/.well-known/agent-card.json")).json()

    async def fetch(_url):
        return jwks

    await CardTrust().verify(card, url + "/.well-known/agent-card.json", fetch)
    with pytest.raises(CardRefused, match="the endpoint http://evil.example/a2a is not in the signed card"):
        await CardTrust().verify({**card, "url": "http://evil.example/a2a"}, url + "/x", fetch)


@pytest.fixture(scope="module")
def sdk_cards():
    python, env = _sdk()
    process = subprocess.Popen([python, str(SIGNED_CARDS)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
    try:
        line = process.stdout.readline()
        assert line.startswith("listening on "), line + process.stdout.read()
        keys = json.loads(process.stdout.readline())
        yield line.split()[-1], keys
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.parametrize("case", ["es256", "eddsa", "rs256", "unsigned"])
async def test_tern_accepts_cards_the_sdk_signed(sdk_cards, case):
    """ES256, EdDSA and RS256 cards signed by the a2a-sdk's signer and served by its routes
    (1.0 card with the 0.3 fields merged in, non-ASCII text): checked against the JWKS at
    the card's origin; an unsigned card is taken when nothing requires a signature."""
    base, _ = sdk_cards
    async with A2aClient(policy=LOOPBACK) as client:
        agent = await client.discover(f"{base}/{case}")
    assert agent.name == f"sdk-{case}" and agent.dialect == "1.0"


async def test_pinned_and_trusted_jwks_require_a_good_signature(sdk_cards):
    base, keys = sdk_cards
    pinned = CardTrust(pinned=jwk.public_key(keys["pinned"]))
    async with A2aClient(policy=LOOPBACK, trust=pinned) as client:
        assert (await client.discover(f"{base}/es256")).name == "sdk-es256"
        with pytest.raises(A2aClientError, match="is not signed, and this peer's card must be"):
            await client.discover(f"{base}/unsigned")
        with pytest.raises(A2aClientError, match="the signature says EdDSA but the key is for ES256"):
            await client.discover(f"{base}/eddsa")  # another key's signature
    trusted = CardTrust(jwks_url=f"{base}/.well-known/jwks.json")
    async with A2aClient(policy=LOOPBACK, trust=trusted) as client:
        assert (await client.discover(f"{base}/rs256")).name == "sdk-rs256"
        with pytest.raises(A2aClientError, match="is not signed"):
            await client.discover(f"{base}/unsigned")


@pytest.mark.parametrize("case,reason", [
    ("tampered", "does not match the card"),
    ("wrongkey", "does not match the card"),
    ("unknownkid", "unknown kid 'nobody'"),
    ("jku", "jku http://127.0.0.2:9/.well-known/jwks.json is not a trusted key set"),
    ("none", "the algorithm 'none' is not accepted"),
    ("bigrsa", "the key 'big' .* cannot be used: an RSA modulus of 9000 bits"),
    ("malformed", "the protected header is not unpadded base64url"),
])
async def test_bad_signatures_refused(sdk_cards, case, reason):
    base, _ = sdk_cards
    async with A2aClient(policy=LOOPBACK) as client:
        with pytest.raises(A2aClientError, match=f"card at .*/{case}/.* is refused: no valid signature .*{reason}"):
            await client.discover(f"{base}/{case}")


async def test_unknown_kid_refetches_the_key_set_at_most_once(autojump_clock):
    """A kid not in the cached set refetches it once; within REFRESH_SECS it does not
    refetch again (a hostile card cannot make tern hammer a JWKS), after it does."""
    import trio

    from runtime.a2a.client.card_trust import REFRESH_SECS, CardRefused
    from runtime.a2a.signatures import sign_card

    key = jwk.generate()
    card = sign_card({"name": "x", "supportedInterfaces": [{"url": "http://p/a2a", "protocolBinding": "JSONRPC",
                                                            "protocolVersion": "1.0"}]}, key)
    fetched = []
    published: list[dict] = []

    async def fetch(url):
        fetched.append(url)
        return {"keys": list(published)}

    trust = CardTrust()
    with pytest.raises(CardRefused, match="unknown kid"):
        await trust.verify(card, "http://p/.well-known/agent-card.json", fetch)
    assert fetched == ["http://p/.well-known/jwks.json"]  # the first fetch: no second one right after
    published.append(key.public.jwk)
    with pytest.raises(CardRefused, match="unknown kid"):
        await trust.verify(card, "http://p/.well-known/agent-card.json", fetch)
    assert len(fetched) == 1
    await trio.sleep(REFRESH_SECS + 1)
    await trust.verify(card, "http://p/.well-known/agent-card.json", fetch)
    assert len(fetched) == 2


async def test_hostile_key_sets_refused(autojump_clock):
    from runtime.a2a.client.card_trust import CardRefused
    from runtime.a2a.signatures import sign_card

    key = jwk.generate()
    card = sign_card({"name": "x"}, key)
    for document, reason in [([], "not a JWKS"), ({"keys": "x"}, "not a JWKS"),
                             ({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": key.public.kid}]},
                              "cannot be used: the JWK holds a private key member"),
                             ({"keys": [{**key.public.jwk, "d": "AAAA"}]}, "cannot be used")]:
        async def fetch(url, document=document):
            return document

        with pytest.raises(CardRefused, match=reason):
            await CardTrust().verify(card, "http://p/card.json", fetch)

    async def broken(url):
        raise A2aClientError("the key set is larger than 65536 bytes")

    with pytest.raises(CardRefused, match="cannot be read: the key set is larger"):
        await CardTrust().verify(card, "http://p/card.json", broken)
    too_many = {**card, "signatures": card["signatures"] * 9}
    with pytest.raises(CardRefused, match="9 signatures"):
        await CardTrust().verify(too_many, "http://p/card.json", broken)
    for bad in ("x", [1], [{"protected": 5, "signature": "x"}]):
        with pytest.raises(CardRefused):
            await CardTrust().verify({**card, "signatures": bad}, "http://p/card.json", broken)


async def test_extended_card_needs_the_key_and_the_card_scope(nursery, tmp_path):
    node, url = await start(nursery, tmp_path)
    async with httpx.AsyncClient(headers={"A2A-Version": "1.0"}) as client:
        assert (await client.get(url + "/a2a/echo/rest/extendedAgentCard")).status_code == 401
        body = {"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard", "params": {}}
        assert (await client.post(url + "/a2a/echo", json=body)).status_code == 401
        old = await client.post(url + "/a2a/echo", json=body, headers={"Authorization": f"Bearer {KEY}"})
        assert old.json()["result"]["name"] == "echo" and old.json()["result"]["signatures"]
        wrong = await client.get(url + "/a2a/echo/rest/extendedAgentCard", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
    _, open_url = await start(nursery, tmp_path / "open", key="")  # no key: no one is authenticated
    async with httpx.AsyncClient(headers={"A2A-Version": "1.0"}) as client:
        card = (await client.get(open_url + "/.well-known/agent-card.json")).json()
        assert "extendedAgentCard" not in card["capabilities"] and "supportsAuthenticatedExtendedCard" not in card
        answer = await client.post(open_url + "/a2a/echo", json=body)
        assert answer.json()["error"]["code"] == -32007
        assert (await client.get(open_url + "/a2a/echo/rest/extendedAgentCard")).status_code == 400
    # named keys (request.caller) gate it on the "card" scope
    assert may_read_extended_card(SimpleNamespace(caller=SimpleNamespace(allows=lambda s: s == "card")))
    assert not may_read_extended_card(SimpleNamespace(caller=SimpleNamespace(allows=lambda s: s == "tasks")))


async def test_signing_key_file(nursery, tmp_path):
    """Made at first use, 0600, reused; refused when others may read it or it is a
    symlink; a configured PKCS#8 PEM key is used as it is; cards are signed once per content."""
    node, url = await start(nursery, tmp_path / "a")
    path = tmp_path / "a" / KEY_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    first = load_key(path, generate=True)
    async with httpx.AsyncClient() as client:
        for _ in range(3):
            assert (await client.get(url + "/.well-known/jwks.json")).json()["keys"][0]["kid"] == first.public.kid
            await client.get(url + "/.well-known/agent-card.json")
    assert len(node.a2a_endpoint.cards.signer._signed) == 1  # one content, one signature
    os.chmod(path, 0o640)
    with pytest.raises(TernError, match="may be read by other users"):
        load_key(path, generate=True)
    os.chmod(path, 0o600)
    link = tmp_path / "link.jwk"
    link.symlink_to(path)
    with pytest.raises(TernError, match="symlink"):
        load_key(link, generate=False)
    seed = bytes(range(32))
    pem = tmp_path / "card.pem"
    der = bytes.fromhex("302e020100300506032b657004220420") + seed
    import base64

    pem.write_text("-----BEGIN PRIVATE KEY-----\n" + base64.b64encode(der).decode() + "\n-----END PRIVATE KEY-----\n")
    pem.chmod(0o600)
    assert load_key(pem, generate=False).seed == seed
    (tmp_path / "rsa.pem").write_text("-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASC\n-----END "
                                      "PRIVATE KEY-----\n")
    (tmp_path / "rsa.pem").chmod(0o600)
    with pytest.raises(TernError, match="cannot be used"):
        load_key(tmp_path / "rsa.pem", generate=False)
    with pytest.raises(TernError, match="no file"):
        load_key(tmp_path / "missing.jwk", generate=False)


def test_without_a_state_directory_the_key_stays_in_memory(tmp_path, monkeypatch):
    from runtime.a2a.server.card_signing import CardSigner

    monkeypatch.chdir(tmp_path)
    signer = CardSigner(Config(a2a=A2aConfig(enabled=True)))
    assert signer.sign({"name": "x"})["signatures"] and signer.jwks()["keys"][0]["kid"] == signer.key().public.kid
    assert list(tmp_path.iterdir()) == []


def test_external_agent_pinned_key_forms(tmp_path):
    key = jwk.generate().public.jwk
    inline = card_trust(ExternalAgent(name="p", url="http://p", card_public_key=json.dumps(key)))
    assert inline.required and inline.pinned.kid == key["kid"]
    path = tmp_path / "peer.jwks"
    path.write_text(json.dumps({"keys": [key]}))
    assert card_trust(ExternalAgent(name="p", url="http://p", card_public_key=str(path))).pinned.kid == key["kid"]
    assert card_trust(ExternalAgent(name="p", url="http://p", card_jwks_url="https://p/jwks")).required
    assert not card_trust(ExternalAgent(name="p", url="http://p")).required
    for bad, reason in [('{"kty": "RSA", "n": "AQAB", "e": "AQAB"}', "modulus"), ("{not json", "card_public_key"),
                        (str(tmp_path / "missing"), "No such file")]:
        with pytest.raises(TernError, match=reason):
            card_trust(ExternalAgent(name="p", url="http://p", card_public_key=bad))


async def test_external_agents_with_a_trusted_key_set_and_a_wrong_pinned_key(nursery, tmp_path):
    """Through the kernel: a peer whose card is signed by a key of its trusted JWKS
    works; a peer pinned to another key is refused at discovery with the reason, and a
    peer whose pinned key cannot be used fails alone; boot waits for none of them."""
    import trio

    from runtime.kernel.kernel import Kernel

    _, server = await start(nursery, tmp_path / "server", key="")
    stranger = json.dumps(jwk.generate().public.jwk)
    config = Config(state=StateConfig(dir=str(tmp_path / "client")),
                    agents=[AgentConfig(name="good", kind="remote", remote="trusted"),
                            AgentConfig(name="bad", kind="remote", remote="pinned")],
                    a2a=A2aConfig(discovery_timeout_secs=5, external_agents=[
                        ExternalAgent(name="trusted", url=server, card_jwks_url=server + "/.well-known/jwks.json"),
                        ExternalAgent(name="pinned", url=server, card_public_key=stranger),
                        ExternalAgent(name="broken", url=server, card_public_key='{"kty": "none"}')]))
    kernel = Kernel(config)
    with trio.fail_after(1):
        await nursery.start(kernel.run)
    assert (await kernel.agents.send("good", "signed and checked")).text == "signed and checked"
    from runtime.errors import AgentError

    with pytest.raises(AgentError, match="is refused: no valid signature"):
        await kernel.agents.send("bad", "hi")
    states = {s["name"]: s for s in kernel.external.statuses()}
    assert states["trusted"]["state"] == "ready" and states["pinned"]["state"] == "failed"
    assert states["broken"]["state"] == "failed" and "card_public_key" in states["broken"]["error"]


def test_config_of_card_keys(tmp_path):
    from runtime.config.load import parse_config
    from runtime.errors import ConfigError

    both = ('[a2a]\n[[a2a.external_agents]]\nname = "p"\nurl = "http://p"\ncard_public_key = "k.jwk"\n'
            'card_jwks_url = "https://p/jwks.json"\n')
    with pytest.raises(ConfigError, match="not both"):
        parse_config(both, "test", tmp_path)
    with pytest.raises(ConfigError, match="card_jwks_url: expected an http"):
        parse_config('[[a2a.external_agents]]\nname = "p"\nurl = "http://p"\ncard_jwks_url = "file:///etc/x"\n',
                     "test", tmp_path)
    config = parse_config('[a2a]\ncard_signing_key = "keys/card.jwk"\n[[a2a.external_agents]]\nname = "p"\n'
                          'url = "http://p"\ncard_public_key = "peer.jwk"\n', "test", tmp_path)
    assert config.a2a.card_signing_key == str(tmp_path / "keys" / "card.jwk")
    assert config.a2a.external_agents[0].card_public_key == str(tmp_path / "peer.jwk")


def test_from_the_built_pyz(pyz, tmp_path):
    """The pyz (no crypto package, no native code but msgspec) makes its key, serves
    signed cards and the JWKS, and its own client checks them: ``tern a2a discover``."""
    import signal
    import socket
    import sys
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:{port}"\n[state]\ndir = "{tmp_path / "state"}"\n'
                      '[a2a]\nenabled = true\n[[agents]]\nname = "echo"\nkind = "echo"\n')
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "TERN_CACHE_DIR": str(tmp_path / "cache"),
           "TMPDIR": str(tmp_path), "LANG": "C.UTF-8"}
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        daemon = subprocess.Popen([sys.executable, "-I", str(pyz), "serve", "--config", str(config)], env=env,
                                  cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + 60
        while "serving on" not in log.read_text() and time.monotonic() < deadline:
            assert daemon.poll() is None, log.read_text()
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(base + "/.well-known/jwks.json", timeout=10) as answer:
            [key] = json.load(answer)["keys"]
        assert (tmp_path / "state" / KEY_FILE).stat().st_mode & 0o777 == 0o600
        discovered = subprocess.run([sys.executable, "-I", str(pyz), "a2a", "discover", base, "--config", str(config)],
                                    env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert discovered.returncode == 0 and "echo" in discovered.stdout, discovered
        with urllib.request.urlopen(base + "/.well-known/agent-card.json", timeout=10) as answer:
            card = json.load(answer)
        assert json.loads(jwk.unb64url(card["signatures"][0]["protected"]))["kid"] == key["kid"]
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        finally:
            if daemon.poll() is None:
                daemon.kill()


async def test_key_set_fetch_is_bounded_against_hostile_servers(nursery):
    """A JWKS server that never answers costs the client's timeout; one that sends too
    much is cut at 64 KiB; one that answers HTML is refused: each a reason, not a hang."""
    from functools import partial

    import trio

    from runtime.a2a.client.requests import A2aTimeout

    async def handle(stream):
        request = await stream.receive_some(4096)
        if b"GET /silent" in request:
            await trio.sleep_forever()
        body = b'{"keys": [' + b'{"kty": "OKP"},' * 10_000 + b'{}]}' if b"/huge" in request else b"<html>"
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + body)
        await stream.aclose()

    listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
    base = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    async with A2aClient(policy=LOOPBACK, timeout=0.5) as client:
        with trio.fail_after(5), pytest.raises(A2aTimeout, match="no answer within 0.5 s"):
            await client._fetch_jwks(base + "/silent")
        with pytest.raises(A2aClientError, match="larger than 65536 bytes"):
            await client._fetch_jwks(base + "/huge")
        with pytest.raises(A2aClientError, match="not JSON"):
            await client._fetch_jwks(base + "/html")


@pytest.mark.parametrize("field", ["url", "additionalInterfaces", "supportedInterfaces", "skills", "security",
                                   "securitySchemes", "capabilities", "supportsAuthenticatedExtendedCard",
                                   "protocolVersion", "preferredTransport", "signatures"])
async def test_hostile_card_fields_are_refused_not_crashed(field, autojump_clock):
    """Whatever a peer puts in a field (wrong types, huge numbers, deep nesting), the
    check ends in a refusal with a reason (or the card as it is), never another error."""
    from runtime.a2a.client.card_trust import CardRefused
    from runtime.a2a.signatures import sign_card

    key = jwk.generate()
    card = sign_card({"name": "x", "supportedInterfaces": [{"url": "http://p/a", "protocolBinding": "JSONRPC",
                                                            "protocolVersion": "1.0"}]}, key)

    async def fetch(url):
        return {"keys": [key.public.jwk]}

    nested: object = "deep"
    for _ in range(100):
        nested = [nested]
    for value in (None, 5, 2**80, 1.5, "text", True, [], {}, [1, "a", None], {"a": [1]}, nested,
                  [{"url": 5, "transport": []}], {"bearer": 5}, {"b": {"type": "apiKey", "in": "header"}}):
        try:
            await CardTrust(pinned=key.public).verify({**card, field: value}, "http://p/card.json", fetch)
        except CardRefused:
            pass
