"""Client certificates for outgoing connections: a peer's own TLS context (cached by the
files' paths and modification times) presents the certificate to a loopback TLS server
that requires one; without it, or with one from another CA, the server refuses; a
missing, mismatched or encrypted key is a config error at load."""

from __future__ import annotations

import functools
import os
import ssl
from pathlib import Path

import httpx
import pytest
import trio

from runtime.a2a.client.external import ExternalAgents
from runtime.config import A2aConfig, Config, ExternalAgent, StateConfig, parse_config
from runtime.errors import ConfigError, TernError
from runtime.net import tls
from runtime.net.guard import AddressPolicy
from runtime.net.outbound import make_client
from tests.mcp.oauth.scripted import Scripted, json_answer
from tests.net.pki import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def trust(pki, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(pki / "ca.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    tls.ssl_context.cache_clear()
    tls._contexts.clear()
    yield
    tls.ssl_context.cache_clear()
    tls._contexts.clear()


async def mtls_server(nursery, pki: Path, routes) -> tuple[str, list]:
    """A loopback HTTPS server that requires a client certificate signed by the test CA;
    ``subjects``: the certificate each connection presented."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.pem"))
    context.load_cert_chain(pki / "server.pem", pki / "server.key")
    context.verify_mode = ssl.CERT_REQUIRED
    scripted, subjects = Scripted(routes), []

    async def handle(stream: trio.SSLStream) -> None:
        try:
            await stream.do_handshake()
        except (trio.BrokenResourceError, ssl.SSLError):
            return  # refused: no certificate, or one the CA did not sign
        subjects.append(dict(pair[0] for pair in stream.getpeercert()["subject"]))
        await scripted._handle(stream)

    listeners = await nursery.start(functools.partial(trio.serve_ssl_over_tcp, handle, 0, context,
                                                      host="127.0.0.1"))
    return f"https://127.0.0.1:{listeners[0].transport_listener.socket.getsockname()[1]}", subjects


OK = {"/": lambda r: json_answer(200, {"ok": True})}


async def test_the_certificate_reaches_a_server_that_requires_one(nursery, pki, trust):
    base, subjects = await mtls_server(nursery, pki, OK)
    async with make_client(AddressPolicy(), tls=tls.client_context(str(pki / "client.pem"),
                                                                   str(pki / "client.key"))) as client:
        assert (await client.get(base + "/")).json() == {"ok": True}
    assert subjects == [{"commonName": "client"}]


@pytest.mark.parametrize("cert", [None, "stranger"], ids=["none", "untrusted"])
async def test_without_a_good_certificate_the_server_refuses(nursery, pki, trust, cert):
    base, subjects = await mtls_server(nursery, pki, OK)
    context = tls.client_context(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key")) if cert else None
    async with make_client(AddressPolicy(), tls=context) as client:
        with pytest.raises(httpx.HTTPError):
            await client.get(base + "/")
    assert subjects == []


def test_contexts_are_cached_by_path_and_modification_time(pki, trust, tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "c.key"
    cert.write_bytes((pki / "client.pem").read_bytes())
    key.write_bytes((pki / "client.key").read_bytes())
    first = tls.client_context(str(cert), str(key))
    assert tls.client_context(str(cert), str(key)) is first
    assert tls.client_context("", "") is tls.ssl_context() is not first  # no certificate: the shared one
    os.utime(cert, ns=(1, 1))  # a renewed certificate: loaded again
    assert tls.client_context(str(cert), str(key)) is not first
    key.unlink()
    with pytest.raises(ConfigError, match="cannot read the client certificate"):
        tls.client_context(str(cert), str(key))


def config_text(pki: Path, cert: str, key: str) -> str:
    return (f'[[a2a.external_agents]]\nname = "peer"\nurl = "https://127.0.0.1:1"\n'
            f'tls_client_cert = "{cert}"\ntls_client_key = "{key}"\n')


@pytest.mark.parametrize("cert,key,words", [
    ("client.pem", "missing.key", "No such file"),
    ("client.pem", "other.key", "KEY_VALUES_MISMATCH|key values mismatch"),
    ("client.pem", "client-encrypted.key", "the key is encrypted"),
    ("client.key", "client.key", "PEM|SSL"),
], ids=["missing", "mismatched", "encrypted", "not-a-certificate"])
def test_a_bad_client_certificate_is_a_config_error_at_load(pki, cert, key, words):
    with pytest.raises(ConfigError, match=words) as caught:
        parse_config(config_text(pki, cert, key), "config.toml", pki)  # relative to the config's directory
    assert str(caught.value).startswith("config.toml: a2a.external_agents[0]: cannot load the client certificate")
    assert "\n" not in str(caught.value)


def test_certificate_and_key_go_together(pki):
    with pytest.raises(ConfigError, match="tls_client_cert and tls_client_key go together"):
        parse_config('[[mcp_servers]]\nname = "x"\n[mcp_servers.transport]\ntype = "http"\nurl = "https://a"\n'
                     'tls_client_cert = "c.pem"\n', "config.toml", pki)


async def test_an_external_agent_presents_its_certificate(nursery, pki, trust, tmp_path):
    def rpc(request):
        return json_answer(200, {"jsonrpc": "2.0", "id": 1, "result": {"message": {
            "messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "over mTLS"}]}}})

    routes = {"/rpc": rpc}
    base, subjects = await mtls_server(nursery, pki, routes)
    routes["/.well-known/agent-card.json"] = lambda r: json_answer(200, {
        "name": "peer", "supportedInterfaces": [{"url": base + "/rpc", "protocolBinding": "JSONRPC",
                                                 "protocolVersion": "1.0"}],
        "securitySchemes": {"mtls": {"mtlsSecurityScheme": {}}},
        "securityRequirements": [{"schemes": {"mtls": {"list": []}}}]})

    def agents(**certs):
        return ExternalAgents(Config(state=StateConfig(dir=str(tmp_path)), a2a=A2aConfig(
            discovery_timeout_secs=5, external_agents=[ExternalAgent(name="peer", url=base, **certs)])),
            AddressPolicy())

    with_cert = agents(tls_client_cert=str(pki / "client.pem"), tls_client_key=str(pki / "client.key"))
    await nursery.start(with_cert.run)
    assert (await with_cert.send("peer", "hi")).text == "over mTLS"
    assert subjects and all(s == {"commonName": "client"} for s in subjects)
    without = agents()
    await nursery.start(without.run)
    with pytest.raises(TernError):
        await without.send("peer", "hi")
