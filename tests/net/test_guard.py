"""runtime.net.guard and runtime.net.outbound: the SSRF guard, alone and inside the client."""

from __future__ import annotations

import functools
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
import trio

from runtime.config import SecurityConfig
from runtime.errors import ProtocolError, TernTimeout
from runtime.net.guard import (
    AddressPolicy,
    BlockedAddress,
    check_hostname,
    check_ip,
    check_url,
    resolve_checked,
)
from runtime.net.outbound import GuardedBackend, make_client
from runtime.net.tls import ssl_context

OPEN = AddressPolicy()
NO_PRIVATE = AddressPolicy(block_private=True)
NO_LOOPBACK = AddressPolicy(block_loopback=True)
STRICT = AddressPolicy(block_private=True, block_loopback=True)

# --- check_ip ----------------------------------------------------------------------------

ALWAYS_BLOCKED = [
    ("169.254.169.254", "link-local / cloud metadata"),
    ("169.254.0.1", "link-local"),
    ("100.100.100.200", "Alibaba Cloud metadata"),
    ("fd00:ec2::254", "AWS cloud metadata"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("febf:ffff::1", "link-local"),
    ("::ffff:169.254.169.254", "carries IPv4 169.254.169.254"),
    ("::ffff:a9fe:a9fe", "carries IPv4 169.254.169.254"),
    ("::ffff:0:a9fe:a9fe", "carries IPv4 169.254.169.254"),
    ("::a9fe:a9fe", "carries IPv4 169.254.169.254"),
    ("64:ff9b::a9fe:a9fe", "carries IPv4 169.254.169.254"),
    ("64:ff9b::169.254.169.254", "carries IPv4 169.254.169.254"),
    ("64:ff9b:1::a9fe:a9fe", "carries IPv4 169.254.169.254"),
    ("2002:a9fe:a9fe::1", "carries IPv4 169.254.169.254"),
    ("::ffff:100.100.100.200", "Alibaba"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("::ffff:0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("::1:0:0:0", "reserved"),
    ("not-an-ip", "not an IP address"),
    ("", "not an IP address"),
]


@pytest.mark.parametrize("ip, reason", ALWAYS_BLOCKED)
@pytest.mark.parametrize("policy", [OPEN, STRICT], ids=["open", "strict"])
def test_always_blocked(ip: str, reason: str, policy: AddressPolicy) -> None:
    with pytest.raises(BlockedAddress, match="^blocked: ") as caught:
        check_ip(ip, policy)
    assert reason in str(caught.value)
    assert caught.value.ip == ip
    assert "[security]" not in str(caught.value)  # no setting opens these


PRIVATE = [
    "10.0.0.5", "10.255.255.255", "172.16.0.1", "172.31.255.254", "192.168.1.1",
    "100.64.0.1", "100.127.255.254", "198.18.0.1", "192.0.2.1",
    "fc00::1", "fd12:3456::1", "fd00:ec2::253", "fec0::1", "2001:db8::1",
    "::ffff:10.0.0.5", "::ffff:192.168.0.1", "64:ff9b::a00:5", "2002:c0a8:101::1",
]
LOOPBACK = ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1", "64:ff9b::7f00:1"]
PUBLIC = [
    "93.184.215.14", "8.8.8.8", "1.1.1.1", "172.15.255.255", "172.32.0.1", "100.63.255.255",
    "100.128.0.0", "169.253.255.255", "169.255.0.1", "2606:4700:4700::1111",
    "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "2001:4860:4860::8888",
]


@pytest.mark.parametrize("ip", PRIVATE)
def test_private_allowed_by_default_blocked_by_policy(ip: str) -> None:
    check_ip(ip, OPEN)
    check_ip(ip, NO_LOOPBACK)
    with pytest.raises(BlockedAddress, match=r"block_private_networks = false\)$"):
        check_ip(ip, NO_PRIVATE)


@pytest.mark.parametrize("ip", LOOPBACK)
def test_loopback_allowed_by_default_blocked_by_policy(ip: str) -> None:
    check_ip(ip, OPEN)
    check_ip(ip, NO_PRIVATE)
    with pytest.raises(BlockedAddress, match=r"loopback; allowed when \[security\] block_loopback"):
        check_ip(ip, NO_LOOPBACK)


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_allowed(ip: str) -> None:
    check_ip(ip, STRICT)


def test_message_names_host_and_address() -> None:
    with pytest.raises(BlockedAddress) as caught:
        check_ip("169.254.169.254", OPEN, host="example.test")
    assert str(caught.value) == (
        "blocked: example.test resolves to 169.254.169.254 (link-local / cloud metadata)")
    assert caught.value.host == "example.test"
    with pytest.raises(BlockedAddress) as caught:
        check_ip("10.0.0.5", NO_PRIVATE, host="intranet.test")
    assert str(caught.value) == (
        "blocked: intranet.test resolves to 10.0.0.5 (private network; "
        "allowed when [security] block_private_networks = false)")


def test_blocked_address_is_a_protocol_error() -> None:
    assert issubclass(BlockedAddress, ProtocolError)


def test_policy_from_security() -> None:
    assert AddressPolicy.from_security(SecurityConfig()) == OPEN
    security = SecurityConfig(block_private_networks=True, block_loopback=True)
    assert AddressPolicy.from_security(security) == STRICT


# --- check_hostname ----------------------------------------------------------------------


@pytest.mark.parametrize("host", [
    "metadata.google.internal", "METADATA.Google.Internal", "metadata.google.internal.",
    "metadata.goog", "metadata", "Metadata.", "instance-data", "instance-data.ec2.internal",
])
def test_metadata_hostnames_blocked(host: str) -> None:
    with pytest.raises(BlockedAddress, match="is a cloud metadata host$"):
        check_hostname(host)


@pytest.mark.parametrize("host", [
    "example.com", "metadata.example.com", "google.internal", "my-metadata", "localhost",
])
def test_other_hostnames_pass(host: str) -> None:
    check_hostname(host)


# --- check_url ---------------------------------------------------------------------------


@pytest.mark.parametrize("url, expected", [
    ("https://Example.com/path?q=1", ("example.com", 443)),
    ("http://example.com", ("example.com", 80)),
    ("HTTP://example.com:8080/", ("example.com", 8080)),
    ("http://user:pw@example.com/", ("example.com", 80)),
    ("http://10.0.0.5:8080/", ("10.0.0.5", 8080)),
    ("http://[2606:4700:4700::1111]/", ("2606:4700:4700::1111", 80)),
    ("http://127.0.0.1:9/", ("127.0.0.1", 9)),
])
def test_check_url_returns_host_and_port(url: str, expected: tuple) -> None:
    assert check_url(url, OPEN) == expected


@pytest.mark.parametrize("url", [
    "ftp://example.com/file", "file:///etc/passwd", "gopher://example.com/", "example.com",
    "javascript:alert(1)",
])
def test_check_url_only_http_and_https(url: str) -> None:
    with pytest.raises(BlockedAddress, match="only http and https URLs"):
        check_url(url, OPEN)


@pytest.mark.parametrize("url", ["http:///path", "https://", "http://:80/"])
def test_check_url_needs_a_host(url: str) -> None:
    with pytest.raises(ProtocolError, match="no host"):
        check_url(url, OPEN)


def test_check_url_bad_port() -> None:
    with pytest.raises(ProtocolError, match="invalid URL"):
        check_url("http://example.com:99999/", OPEN)


@pytest.mark.parametrize("url, reason", [
    ("http://metadata.google.internal/computeMetadata/v1/", "cloud metadata host"),
    ("http://Metadata/", "cloud metadata host"),
    ("http://169.254.169.254/latest/meta-data/", "link-local / cloud metadata"),
    ("http://user@169.254.169.254/", "link-local / cloud metadata"),
    ("http://[::ffff:169.254.169.254]/", "carries IPv4 169.254.169.254"),
    ("http://[fd00:ec2::254]/", "AWS cloud metadata"),
    ("http://[fe80::1%25eth0]/", "link-local"),
    ("http://2852039166/", "link-local / cloud metadata"),  # 169.254.169.254 as one number
    ("http://0xa9.0xfe.0xa9.0xfe/", "link-local / cloud metadata"),
    ("http://0251.0376.0251.0376/", "link-local / cloud metadata"),
])
def test_check_url_blocked_hosts(url: str, reason: str) -> None:
    with pytest.raises(BlockedAddress, match="^blocked: ") as caught:
        check_url(url, OPEN)
    assert reason in str(caught.value)


def test_check_url_follows_policy() -> None:
    assert check_url("http://localhost:8080/", STRICT) == ("localhost", 8080)  # needs DNS
    with pytest.raises(BlockedAddress, match="block_loopback"):
        check_url("http://127.0.0.1/", NO_LOOPBACK)
    with pytest.raises(BlockedAddress, match="block_loopback"):
        check_url("http://0x7f.1/", NO_LOOPBACK)
    with pytest.raises(BlockedAddress, match="block_private_networks"):
        check_url("http://10.0.0.5/", NO_PRIVATE)


# --- resolve_checked ---------------------------------------------------------------------


class FakeResolver(trio.abc.HostnameResolver):
    """Answers from a table (a callable may answer differently each time); counts calls."""

    def __init__(self, table: dict) -> None:
        self.table = table
        self.calls: list[str] = []

    async def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
        name = host.decode("ascii") if isinstance(host, bytes) else host
        self.calls.append(name)
        answer = self.table.get(name)
        if callable(answer):
            answer = await answer()
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        entries = []
        for ip in answer:
            if ":" in ip:
                entries.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (ip, port, 0, 0)))
            else:
                entries.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)))
        return entries

    async def getnameinfo(self, sockaddr, flags):
        raise NotImplementedError


def fake_dns(table: dict) -> FakeResolver:
    resolver = FakeResolver(table)
    trio.socket.set_custom_hostname_resolver(resolver)  # for this trio.run only
    return resolver


class CountingSockets(trio.abc.SocketFactory):
    """Counts sockets created: none created means no packet could have left."""

    def __init__(self) -> None:
        self.created = 0

    def socket(self, family=socket.AF_INET, type=socket.SOCK_STREAM, proto=0):
        self.created += 1
        return trio.socket.from_stdlib_socket(socket.socket(family, type, proto))


async def test_localhost_allowed_by_default() -> None:
    addresses = await resolve_checked("localhost", 80, OPEN)
    assert addresses
    assert set(addresses) <= {"127.0.0.1", "::1"}


async def test_localhost_blocked_by_policy() -> None:
    with pytest.raises(BlockedAddress, match=r"^blocked: localhost resolves to .*loopback"):
        await resolve_checked("localhost", 80, NO_LOOPBACK)


async def test_every_address_is_checked() -> None:
    fake_dns({"mixed.test": ["93.184.215.14", "169.254.169.254"],
              "mixed6.test": ["2606:4700::1", "::ffff:169.254.169.254"]})
    with pytest.raises(BlockedAddress, match="mixed.test resolves to 169.254.169.254"):
        await resolve_checked("mixed.test", 80, OPEN)
    with pytest.raises(BlockedAddress, match="carries IPv4 169.254.169.254"):
        await resolve_checked("mixed6.test", 80, OPEN)


async def test_addresses_in_resolver_order_once_each() -> None:
    fake_dns({"many.test": ["8.8.8.8", "2001:4860:4860::8888", "8.8.4.4", "8.8.8.8"]})
    assert await resolve_checked("many.test", 443, STRICT) == [
        "8.8.8.8", "2001:4860:4860::8888", "8.8.4.4"]


async def test_metadata_name_and_ip_literals_skip_dns() -> None:
    resolver = fake_dns({})
    with pytest.raises(BlockedAddress, match="cloud metadata host"):
        await resolve_checked("metadata.google.internal", 80, OPEN)
    with pytest.raises(BlockedAddress, match="link-local"):
        await resolve_checked("169.254.169.254", 80, OPEN)
    assert await resolve_checked("[::1]", 80, OPEN) == ["::1"]
    assert await resolve_checked("8.8.8.8", 80, STRICT) == ["8.8.8.8"]
    assert resolver.calls == []


async def test_resolver_failure_is_an_oserror() -> None:
    fake_dns({})
    with pytest.raises(socket.gaierror):
        await resolve_checked("nowhere.test", 80, OPEN)


async def test_resolver_timeout(autojump_clock) -> None:
    """A resolver that never answers is given up on at the timeout exactly (virtual clock)."""
    fake_dns({"slow.test": trio.sleep_forever})
    start = trio.current_time()
    with pytest.raises(TernTimeout, match="resolving slow.test took longer than 0.05 s"):
        await resolve_checked("slow.test", 80, OPEN, timeout=0.05)
    assert trio.current_time() - start == pytest.approx(0.05)


# --- the client --------------------------------------------------------------------------

BODY = b"hello from tern test"


async def serve(nursery: trio.Nursery, response: bytes = b"", tls: ssl.SSLContext = None) -> int:
    """Answer every connection on 127.0.0.1 with one fixed HTTP response; the port."""
    response = response or (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n%s" % (len(BODY), BODY))

    async def handler(stream: trio.abc.Stream) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            await stream.send_all(response)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # e.g. the client refused our certificate
        finally:
            await trio.aclose_forcefully(stream)

    if tls is None:
        serve = functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
    else:
        serve = functools.partial(trio.serve_ssl_over_tcp, handler, 0, tls, host="127.0.0.1")
    listeners = await nursery.start(serve)
    sock = getattr(listeners[0], "socket", None) or listeners[0].transport_listener.socket
    return sock.getsockname()[1]


def find_in_chain(error: BaseException, kind: type) -> BaseException:
    """The first ``kind`` exception in the cause/context chain (httpcore's pool
    re-raises ``from None``, so the guard's error sits in ``__context__``)."""
    while error is not None and not isinstance(error, kind):
        error = error.__cause__ or error.__context__
    return error


async def test_client_gets_loopback_by_default(nursery: trio.Nursery) -> None:
    port = await serve(nursery)
    async with make_client(OPEN) as client:
        response = await client.get(f"http://127.0.0.1:{port}/")
        assert response.status_code == 200
        assert response.content == BODY
        response = await client.get(f"http://localhost:{port}/")
        assert response.status_code == 200


async def test_client_blocked_loopback_is_a_connect_error(nursery: trio.Nursery) -> None:
    port = await serve(nursery)
    async with make_client(NO_LOOPBACK) as client:
        for host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]"):
            with pytest.raises(httpx.ConnectError, match="^blocked: .*block_loopback") as caught:
                await client.get(f"http://{host}:{port}/")
            assert isinstance(find_in_chain(caught.value, BlockedAddress), BlockedAddress)


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "https://169.254.169.254/",
    "http://2852039166/",
])
async def test_metadata_fails_in_the_guard_without_a_socket(url: str) -> None:
    sockets = CountingSockets()
    trio.socket.set_custom_socket_factory(sockets)
    with trio.fail_after(2):
        async with make_client(OPEN) as client:
            with pytest.raises(httpx.ConnectError, match="^blocked: "):
                await client.get(url)
    assert sockets.created == 0


async def test_name_resolving_to_metadata_is_refused() -> None:
    fake_dns({"evil.test": ["169.254.169.254"]})
    sockets = CountingSockets()
    trio.socket.set_custom_socket_factory(sockets)
    async with make_client(OPEN) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.get("http://evil.test/")
    assert str(caught.value) == (
        "blocked: evil.test resolves to 169.254.169.254 (link-local / cloud metadata)")
    assert sockets.created == 0


async def test_connects_to_the_checked_address_no_second_lookup(nursery: trio.Nursery) -> None:
    port = await serve(nursery)
    answers = iter([["127.0.0.1"]])

    async def rebinding() -> list:
        return next(answers, ["169.254.169.254"])  # a second lookup would get metadata

    resolver = fake_dns({"rebind.test": rebinding})
    async with make_client(OPEN) as client:
        response = await client.get(f"http://rebind.test:{port}/")
    assert response.status_code == 200
    assert resolver.calls == ["rebind.test"]


async def test_tries_checked_addresses_in_order(nursery: trio.Nursery) -> None:
    port = await serve(nursery)  # 127.0.0.1 only, so ::1 refuses (or has no route)
    fake_dns({"two.test": ["::1", "127.0.0.1"]})
    async with make_client(OPEN) as client:
        response = await client.get(f"http://two.test:{port}/")
    assert response.status_code == 200


async def test_last_connect_error_is_raised() -> None:
    with trio.socket.socket() as probe:  # a port nothing listens on
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with make_client(OPEN) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.get(f"http://127.0.0.1:{port}/")
    assert find_in_chain(caught.value, BlockedAddress) is None


async def test_redirects_not_followed_and_guarded_when_asked(nursery: trio.Nursery) -> None:
    port = await serve(nursery, b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\n"
                                b"Content-Length: 0\r\nConnection: close\r\n\r\n")
    async with make_client(OPEN) as client:
        response = await client.get(f"http://127.0.0.1:{port}/")
        assert response.status_code == 302
        with trio.fail_after(2):
            with pytest.raises(httpx.ConnectError, match="^blocked: 169.254.169.254"):
                await client.get(f"http://127.0.0.1:{port}/", follow_redirects=True)


def test_make_client_settings() -> None:
    client = make_client(OPEN, timeout=60.0, headers={"User-Agent": "tern-test"})
    assert client.follow_redirects is False
    assert client.trust_env is False
    assert client.timeout == httpx.Timeout(60.0, connect=10.0)
    assert client.headers["User-Agent"] == "tern-test"
    assert make_client(OPEN, timeout=3.0).timeout == httpx.Timeout(3.0, connect=3.0)
    pool = client._transport._pool
    assert isinstance(pool._network_backend, GuardedBackend)
    assert pool._network_backend.policy == OPEN
    assert pool._ssl_context is ssl_context()


async def test_proxy_environment_ignored(monkeypatch: pytest.MonkeyPatch,
                                         nursery: trio.Nursery) -> None:
    port = await serve(nursery)
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://169.254.169.254:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with make_client(OPEN) as client:
        response = await client.get(f"http://127.0.0.1:{port}/")
    assert response.status_code == 200


# --- TLS checks the URL's name, not the address connected to ------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA and a certificate for tern.test (DNS name only, no IP) signed by it."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    here = tmp_path_factory.mktemp("certs")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=tern test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=here)
    _openssl("req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=tern.test",
             cwd=here)
    (here / "leaf.ext").write_text(
        "subjectAltName=DNS:tern.test\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    _openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-set_serial", "1", "-days", "2", "-out", "leaf.pem", "-extfile", "leaf.ext",
             cwd=here)
    return here


@pytest.fixture
def trust_test_ca(certificates: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates / "ca.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    ssl_context.cache_clear()
    yield
    ssl_context.cache_clear()


async def test_tls_verifies_the_url_hostname(certificates: Path, trust_test_ca,
                                             nursery: trio.Nursery) -> None:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(certificates / "leaf.pem", certificates / "leaf.key")
    port = await serve(nursery, tls=server)
    fake_dns({"tern.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    async with make_client(OPEN) as client:
        # Connected to 127.0.0.1, verified as tern.test: the certificate has no IP name.
        response = await client.get(f"https://tern.test:{port}/")
        assert response.content == BODY
        for wrong in ("other.test", "127.0.0.1"):
            with pytest.raises(httpx.ConnectError) as caught:
                await client.get(f"https://{wrong}:{port}/")
            failure = find_in_chain(caught.value, ssl.SSLCertVerificationError)
            assert failure is not None
            assert "mismatch" in failure.verify_message, failure.verify_message
