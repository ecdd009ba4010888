"""A TLS handshake that never completes cannot hold a connection slot: a client that
connects and sends nothing, or half a ClientHello, is dropped after the head timeout
(and at once it is under pressure). Loopback only, real time with generous bounds."""

from __future__ import annotations

import shutil
import ssl
import subprocess

import httpx
import pytest
import trio

from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from tests.http.serving import State, build_test_router, small_config

# The first bytes of a TLS 1.2+ ClientHello record (handshake, version, a length far
# larger than what follows): the server waits for the rest.
PARTIAL_HELLO = bytes.fromhex("160301020001") + b"\x00" * 40


@pytest.fixture
def tls_files(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


async def _closed_within(stream: trio.SocketStream, seconds: float) -> bool:
    with trio.move_on_after(seconds):
        try:
            while await stream.receive_some(4096):
                pass
        except trio.BrokenResourceError:
            pass
        return True
    return False


@pytest.mark.parametrize("first", [b"", PARTIAL_HELLO], ids=["silent", "partial-hello"])
async def test_a_stalled_tls_handshake_is_dropped(nursery, tls_files, first):
    cert, key = tls_files
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    server = HttpServer(small_config(request_head_timeout_secs=1.0, keep_alive_timeout_secs=5.0),
                        build_test_router(State()), Access(""), ssl_context=context)
    port = (await nursery.start(server.serve, "127.0.0.1", 0))[0][1]
    stalled = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(5)]
    for stream in stalled:
        if first:
            await stream.send_all(first)
    for stream in stalled:
        assert await _closed_within(stream, 10.0), "a stalled TLS handshake held its connection"
    with trio.fail_after(10):
        while server.active:
            await trio.sleep(0.05)
    trusted = ssl.create_default_context(cafile=str(cert))
    async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=trusted, timeout=10) as client:
        assert (await client.get("/ok")).status_code == 200
    for stream in stalled:
        await stream.aclose()
    server.shutdown()
