"""mTLS on the server: a client certificate signed by ``tls_client_ca`` whose subject is a
key's ``tls_subject`` is that key. Certificates are made with the ``openssl`` CLI (tests/net/pki.py)
(CI installs it: .ci/run): a good one, none, one from an untrusted CA, an expired one."""

from __future__ import annotations

import shutil
import ssl

import httpx
import pytest

from runtime.config import ServerConfig
from runtime.config.checks import find_problems
from runtime.config.schema import Config, KeyConfig
from runtime.host.daemon import _ssl_context
from runtime.httpd.access import certificate_subject
from tests.http.keyed import config as keyed_config
from tests.http.keyed import key_configs, start
from tests.net import pki as certs

SUBJECT = "CN=ci-bot,O=Acme"
REFUSED = (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError)
CLIENT_SUBJECT = "/O=Acme/CN=ci-bot"  # SUBJECT, as openssl spells it
CLIENT_EXT = "extendedKeyUsage=clientAuth\n"


def _expired(name: str, issuer: str, cwd) -> None:
    """A client certificate ``issuer`` signed that was valid for one day in 2020."""
    certs.openssl("req", *certs.EC, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                  "-subj", CLIENT_SUBJECT, cwd=cwd)
    (cwd / "index.txt").write_text("")
    (cwd / "serial").write_text("01\n")
    (cwd / "ca.cnf").write_text(
        f"[ca]\ndefault_ca = test\n[test]\ndatabase = {cwd}/index.txt\nnew_certs_dir = {cwd}\n"
        f"serial = {cwd}/serial\ncertificate = {cwd}/{issuer}.pem\nprivate_key = {cwd}/{issuer}.key\n"
        "default_md = sha256\npolicy = anything\n[anything]\ncommonName = supplied\norganizationName = optional\n")
    certs.openssl("ca", "-config", "ca.cnf", "-batch", "-notext", "-in", f"{name}.csr", "-out", f"{name}.pem",
                  "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", cwd=cwd)


@pytest.fixture
def pki(tmp_path):
    return make_certificates(tmp_path)


def make_certificates(tmp_path) -> dict:
    """The server's certificate, a trusted CA, and client certificates: good, from another
    CA, expired."""
    assert shutil.which("openssl"), "the openssl command makes the test certificates (.ci/run installs it)"
    other = tmp_path / "other"
    other.mkdir()
    certs.ca("trusted-ca", tmp_path)
    certs.ca("rogue-ca", other)
    certs.leaf("server", "trusted-ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
               tmp_path)
    certs.leaf("good", "trusted-ca", CLIENT_EXT, tmp_path, subject=CLIENT_SUBJECT)
    certs.leaf("untrusted", "rogue-ca", CLIENT_EXT, other, subject=CLIENT_SUBJECT)
    _expired("expired", "trusted-ca", tmp_path)

    def pair(directory, name: str) -> tuple[str, str]:
        return str(directory / f"{name}.pem"), str(directory / f"{name}.key")

    return {"server": pair(tmp_path, "server"), "ca": str(tmp_path / "trusted-ca.pem"),
            "good": pair(tmp_path, "good"), "untrusted": pair(other, "untrusted"),
            "expired": pair(tmp_path, "expired")}


async def _serve(nursery, tmp_path, pki, *, required: bool):
    cfg = keyed_config(tmp_path)
    server = ServerConfig(tls_cert=pki["server"][0], tls_key=pki["server"][1], tls_client_ca=pki["ca"],
                          tls_client_required=required,
                          keys=[*key_configs(), KeyConfig(name="ci-bot", tls_subject=SUBJECT, scopes=["tasks"])])
    cfg = Config(agents=cfg.agents, state=cfg.state, a2a=cfg.a2a, server=server)
    assert find_problems(cfg) == []
    return (await start(nursery, tmp_path, ssl_context=_ssl_context(cfg), cfg=cfg))[1]


def _client_for(url: str, pki, cert: str | None) -> httpx.AsyncClient:
    context = ssl.create_default_context(cafile=pki["ca"])
    if cert is not None:
        context.load_cert_chain(*pki[cert])
    return httpx.AsyncClient(base_url=url, verify=context, timeout=10)


async def test_a_good_certificate_is_its_key(nursery, tmp_path, pki):
    url = await _serve(nursery, tmp_path, pki, required=False)
    async with _client_for(url, pki, "good") as bot:
        assert (await bot.get("/api/tasks")).status_code == 200  # the scope "tasks", with no key sent
        refused = await bot.get("/metrics")
        assert refused.status_code == 403 and "'ci-bot'" in refused.json()["error"]["message"]
    async with _client_for(url, pki, None) as anonymous:  # no certificate: a key is needed, as ever
        assert (await anonymous.get("/api/tasks")).status_code == 401
        keyed = await anonymous.get("/api/tasks", headers={"Authorization": "Bearer alice-key-0123456789"})
        assert keyed.status_code == 200


@pytest.mark.parametrize("cert", ["untrusted", "expired"])
async def test_a_bad_certificate_is_refused_in_the_handshake(nursery, tmp_path, pki, cert):
    url = await _serve(nursery, tmp_path, pki, required=False)
    async with _client_for(url, pki, cert) as bad:
        with pytest.raises(REFUSED):
            await bad.get("/api/tasks")
    async with _client_for(url, pki, "good") as good:  # and the server goes on serving
        assert (await good.get("/api/tasks")).status_code == 200


async def test_required_refuses_a_client_without_a_certificate(nursery, tmp_path, pki):
    url = await _serve(nursery, tmp_path, pki, required=True)
    async with _client_for(url, pki, None) as anonymous:
        with pytest.raises(REFUSED):
            await anonymous.get("/health")
    async with _client_for(url, pki, "good") as good:
        assert (await good.get("/health")).status_code == 200


def test_subjects_are_rfc4514_strings():
    cert = {"subject": ((("countryName", "DE"),), (("organizationName", "Acme, Inc."),),
                        (("commonName", "#bot "),), (("domainComponent", "a"), ("userId", "b+c")))}
    assert certificate_subject(cert) == r"DC=a+UID=b\+c,CN=\#bot\ ,O=Acme\, Inc.,C=DE"
    assert certificate_subject({}) is None and certificate_subject(None) is None


def test_mtls_settings_are_checked():
    def problems(**server):
        return find_problems(Config(server=ServerConfig(**server)))

    assert any("tls_client_ca" in p for p in problems(tls_client_ca="ca.pem"))
    assert any("tls_client_required needs" in p
               for p in problems(tls_cert="c", tls_key="k", tls_client_required=True))
    assert any("exactly one" in p for p in problems(keys=[KeyConfig(name="x")]))
    assert any("exactly one" in p for p in problems(keys=[KeyConfig(name="x", key="a", key_env="B")]))
    assert any("unknown" in p for p in problems(keys=[KeyConfig(name="x", key="a", scopes=["root"])]))
    assert any("name" in p for p in problems(keys=[KeyConfig(name="Admin!", key="a")]))
    assert any("64 hex" in p for p in problems(keys=[KeyConfig(name="x", key_sha256="abc")]))
    assert any("name" in p for p in problems(keys=[KeyConfig(name="x", key="a"), KeyConfig(name="x", key="b")]))
