"""runtime.net.tls: one cached client SSLContext, from certifi's data or SSL_CERT_*."""

from __future__ import annotations

import ssl
from importlib.resources import files
from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.net.tls import ssl_context


@pytest.fixture(autouse=True)
def fresh_context(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    ssl_context.cache_clear()
    yield
    ssl_context.cache_clear()


def first_certificate() -> str:
    pem = files("certifi").joinpath("cacert.pem").read_text(encoding="ascii")
    end = "-----END CERTIFICATE-----"
    start = pem.index("-----BEGIN CERTIFICATE-----")
    return pem[start : pem.index(end, start) + len(end)] + "\n"


def test_loads_certifi_bundle_with_verification_on() -> None:
    context = ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert len(context.get_ca_certs()) > 100  # certifi ships ~150 roots


def test_built_once_per_process() -> None:
    assert ssl_context() is ssl_context()


def test_honours_ssl_cert_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cafile = tmp_path / "one.pem"
    cafile.write_text(first_certificate(), encoding="ascii")
    monkeypatch.setenv("SSL_CERT_FILE", str(cafile))
    assert len(ssl_context().get_ca_certs()) == 1


def test_honours_ssl_cert_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    # A capath is read lazily, at handshake time: nothing loaded up front, not certifi.
    assert ssl_context().get_ca_certs() == []


def test_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", "")
    monkeypatch.setenv("SSL_CERT_DIR", "")
    assert len(ssl_context().get_ca_certs()) > 100


def test_unloadable_ssl_cert_file_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "missing.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    with pytest.raises(ConfigError, match="SSL_CERT_FILE") as caught:
        ssl_context()
    assert "\n" not in str(caught.value)


def test_garbage_ssl_cert_file_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(garbage))
    with pytest.raises(ConfigError, match="SSL_CERT_FILE"):
        ssl_context()


async def test_usable_by_httpx() -> None:
    import httpx

    async with httpx.AsyncClient(verify=ssl_context()) as client:
        assert not client.is_closed
