"""An MCP server that requires a client certificate: the official Python SDK's
Streamable HTTP server behind uvicorn with mutual TLS. tern's MCP client presents the
certificate configured on the server's transport (``tls_client_cert``/``tls_client_key``)
and works; without it the connection is refused. (Tokens for MCP servers come from the
transport's ``oauth`` table, client credentials included: tests/mcp/oauth.)"""

from __future__ import annotations

import subprocess

import pytest

from runtime.config import HttpTransport, McpServerEntry
from runtime.errors import TernError
from runtime.mcp.client.client import McpClient
from runtime.net import tls
from tests.mcp.conftest import SDK_SERVER
from tests.mcp.test_real_peers_http import free_port
from tests.net.pki import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def sdk_https(sdk_python, pki, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(pki / "ca.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    tls.ssl_context.cache_clear()
    tls._contexts.clear()
    port = free_port()
    process = subprocess.Popen([sdk_python, SDK_SERVER, "https", str(port), str(pki / "server.pem"),
                                str(pki / "server.key"), str(pki / "ca.pem")],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    import socket
    import time

    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.05)
    yield f"https://127.0.0.1:{port}/mcp"
    process.kill()
    process.wait()
    tls.ssl_context.cache_clear()
    tls._contexts.clear()


def entry(url, **certs):
    return McpServerEntry(name="mtls", transport=HttpTransport(url=url, **certs), timeout_secs=10.0)


async def test_the_sdk_server_takes_tern_with_its_certificate(sdk_https, pki, nursery):
    client = await McpClient.connect(entry(sdk_https, tls_client_cert=str(pki / "client.pem"),
                                           tls_client_key=str(pki / "client.key")), nursery)
    assert (await client.call_tool("add", {"a": 40, "b": 2})).text() == "42"
    await client.aclose()


@pytest.mark.parametrize("name", [None, "stranger"], ids=["none", "untrusted"])
async def test_the_sdk_server_refuses_tern_without_a_good_one(sdk_https, pki, nursery, name):
    certs = {"tls_client_cert": str(pki / f"{name}.pem"), "tls_client_key": str(pki / f"{name}.key")} if name else {}
    with pytest.raises((TernError, OSError)) as caught:
        await McpClient.connect(entry(sdk_https, **certs), nursery)
    assert "cannot reach " + sdk_https in str(caught.value)  # TLS 1.3: the server hangs up after the handshake
