"""Connection slots cannot be taken without a key (loopback only, bounded in count and time).

Idle sockets from one address used to hold every slot (210 idle sockets took 106 of 108
legitimate requests to 503), and EMFILE made accept fail ten times a second. Now:
a per-client cap, a short wait for the first byte under pressure, ``max_connections``
sized from RLIMIT_NOFILE, and a backoff on a failing accept.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import trio

from runtime.httpd.access import client_key
from runtime.wire.ratelimit import RateLimiter
from runtime.httpd.server import HttpServer, fd_budget
from runtime.httpd.access import Access
from tests.http.serving import RawClient, State, assert_healthy, build_test_router, request, small_config, start_server
from tests.test_cli import ROOT


def _can_bind(address: str) -> bool:
    try:
        with socket.socket() as sock:
            sock.bind((address, 0))
        return True
    except OSError:
        return False


needs_127_0_0_2 = pytest.mark.skipif(not _can_bind("127.0.0.2"), reason="127.0.0.2 is not routed to loopback here")


async def _connect_from(source: str, port: int) -> RawClient:
    sock = trio.socket.socket()
    await sock.bind((source, 0))
    await sock.connect(("127.0.0.1", port))
    return RawClient(trio.SocketStream(sock))


@needs_127_0_0_2
async def test_idle_sockets_from_one_address_cannot_starve_another(nursery, loopback_clock):
    """One address opens more idle sockets than there are slots; requests from another
    address are all still answered (before: 503 once the idle ones held every slot)."""
    with trio.fail_after(30):
        served = await start_server(nursery, small_config(max_connections=50, request_head_timeout_secs=30.0,
                                                          keep_alive_timeout_secs=30.0))
        idle = []
        for _ in range(60):
            idle.append(await _connect_from("127.0.0.1", served.port))
        await trio.sleep(0.2)  # every one of them accepted (or refused) by now
        assert served.server.active <= 32 + 1
        statuses = []

        async def legit() -> None:
            client = await _connect_from("127.0.0.2", served.port)
            await client.send(request("GET", "/ok", {"Connection": "close"}))
            response = await client.response()
            statuses.append(response.status if response else 0)
            await client.aclose()

        async with trio.open_nursery() as clients:
            for _ in range(15):
                clients.start_soon(legit)
        assert statuses == [200] * 15
        for client in idle:
            await client.aclose()
        await assert_healthy(served.server, served.port)


async def test_over_the_per_client_cap_is_a_503(nursery):
    with trio.fail_after(10):
        served = await start_server(nursery, small_config(max_connections_per_client=3))
        held = [await RawClient.connect(served.port) for _ in range(3)]
        with trio.fail_after(2):
            while served.server.active < 3:
                await trio.sleep(0.01)
        extra = await RawClient.connect(served.port)
        response = await extra.response()
        assert response is not None and response.status == 503 and b"your address" in response.body
        await extra.aclose()
        for client in held:
            await client.aclose()
        await assert_healthy(served.server, served.port)


async def _proven(port: int) -> RawClient:
    """A keep-alive connection that has had one request answered (so it is no longer
    among those shed to make room), idle now."""
    client = await RawClient.connect(port)
    await client.send(request("GET", "/ok"))
    response = await client.response()
    assert response is not None and response.status == 200
    return client


async def test_under_pressure_idle_connections_are_closed_quickly(nursery, loopback_clock):
    """Above 75% of the cap an idle keep-alive connection goes after ~1 s, not the
    configured 30 s keep-alive timeout."""
    with trio.fail_after(60):
        served = await start_server(nursery, small_config(max_connections=20, max_connections_per_client=0,
                                                          keep_alive_timeout_secs=30.0))
        start = trio.current_time()
        idle = [await _proven(served.port) for _ in range(18)]
        while served.server.active < 18:
            await trio.sleep(0.01)
        for client in idle:
            assert await client.closed()  # the server closed it
        took = trio.current_time() - start
        assert took < 3.0, took
        for client in idle:
            await client.aclose()
        await assert_healthy(served.server, served.port)


async def test_without_pressure_idle_connections_keep_the_head_timeout(nursery, loopback_clock):
    with trio.fail_after(60):
        served = await start_server(nursery, small_config(max_connections=20, request_head_timeout_secs=8.0))
        start = trio.current_time()
        client = await RawClient.connect(served.port)
        assert await client.closed()
        assert 7.9 <= trio.current_time() - start < 9.0
        await client.aclose()


async def test_unproven_connections_hold_a_quarter_of_the_slots_and_the_oldest_goes(nursery):
    """Under pressure (above 75% of the slots), connections that have sent no request head
    hold at most a quarter of the slots: one more closes the oldest of the client holding
    the most; a proven one is never shed, and a client's one connection outlasts another's
    many. With room to spare, a burst of new connections is not shed at all."""
    with trio.fail_after(30):
        served = await start_server(nursery, small_config(max_connections=20, max_connections_per_client=0,
                                                          request_head_timeout_secs=30.0))
        server = served.server
        assert server.max_unproven == 5
        burst = [await RawClient.connect(served.port) for _ in range(10)]
        while server.unproven < 10:  # 10 of 20 slots: room to spare, so none of them goes
            await trio.sleep(0.01)
        for client in burst:
            with trio.move_on_after(0.1) as still_open:
                await client.closed()
            assert still_open.cancelled_caught
        assert server.active == 10
        for client in burst:
            await client.aclose()
        while server.active:
            await trio.sleep(0.01)
        working = [await _proven(served.port) for _ in range(11)]  # 11 + 5 = 16 of 20: under pressure
        silent = [await RawClient.connect(served.port) for _ in range(5)]
        while server.unproven < 5:
            await trio.sleep(0.01)
        newer = await RawClient.connect(served.port)
        assert await silent[0].closed()  # the oldest made room
        while server.unproven < 5:
            await trio.sleep(0.01)
        assert server.unproven == 5 and server.active == 11 + 5
        for client in working:  # untouched: they answer as before
            await client.send(request("GET", "/ok"))
            assert (await client.response()).status == 200
        if _can_bind("127.0.0.2"):  # one connection from another client outlasts five more from the first
            lone = await _connect_from("127.0.0.2", served.port)
            for _ in range(5):
                silent.append(await RawClient.connect(served.port))
            await lone.send(request("GET", "/ok", {"Connection": "close"}))
            assert (await lone.response()).status == 200
            await lone.aclose()
        for client in [*working, *silent, newer]:
            await client.aclose()
        await assert_healthy(served.server, served.port)


def test_max_connections_is_sized_from_the_open_file_limit():
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        assert fd_budget(10_000) == min(256, hard) - 64
        assert fd_budget(10) == 10
        server = HttpServer(small_config(max_connections=10_000), None, None)  # type: ignore[arg-type]
        assert server.max_connections == min(256, hard) - 64
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_ipv6_clients_are_keyed_by_their_prefix():
    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:ffff:1:2:3") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("2001:db8::1", 128) == "2001:db8::1"
    assert client_key("2001:db8:1:2:3::1", 48) == "2001:db8:1::/48"
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("fe80::1%eth0") == "fe80::/64"
    assert client_key("::1") == "::/64"


def test_a_rotating_ipv6_client_shares_one_budget_and_the_table_stays_bounded():
    now = [1000.0]
    limiter = RateLimiter(1.0, 5, max_keys=100, clock=lambda: now[0])
    allowed = sum(limiter.check(client_key(f"2001:db8:1:2::{i:x}")) == 0.0 for i in range(1, 1001))
    assert allowed == 5  # one /64, one bucket, however many addresses it rotates through
    for i in range(10_000):  # many different /64s: the table never grows past its bound
        limiter.check(client_key(f"2001:db8:{i // 65536:x}:{i % 65536:x}::1"))
        assert len(limiter) <= 101


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_NOFILE in a child via preexec_fn; Linux only here")
def test_emfile_does_not_spin(tmp_path):
    """A daemon with 128 open files and max_connections 1000: a flood of idle sockets is
    met with 503s (the cap was lowered to fit), and accept never spins on EMFILE."""
    import resource

    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:0"\nmax_connections = 1000\nmax_connections_per_client = 0\n'
                      f'[state]\ndir = "{tmp_path / "state"}"\n[[agents]]\nname = "echo"\nkind = "echo"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    log = open(tmp_path / "stderr.log", "w+b")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    process = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--config", str(config),
                                "--log-level", "info"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
                               preexec_fn=limit)
    sockets: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 20
        port = 0
        while time.monotonic() < deadline and not port:
            text = (tmp_path / "stderr.log").read_text(errors="replace")
            if "serving on " in text:
                port = int(text.split("serving on ", 1)[1].split()[0].rsplit(":", 1)[1].rstrip("/"))
            time.sleep(0.05)
        assert port, text
        for _ in range(200):  # more than 128 files: without the lowered cap, EMFILE
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sockets.append(sock)
        time.sleep(2.0)
        text = (tmp_path / "stderr.log").read_text(errors="replace")
        assert text.count("accept failed") <= 1, text[-2000:]
        assert "max_connections lowered from 1000 to 64" in text
        assert process.poll() is None
    finally:
        for sock in sockets:
            sock.close()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


async def test_accept_backs_off_on_emfile_and_logs_once(autojump_clock, caplog):
    """EMFILE leaves the connection in the backlog, so accept fails again at once: over
    10 s the server tries a handful of times (backoff doubling to 2 s), not 100, and
    logs one warning, not one a failure."""
    import errno
    import logging

    class Exhausted:
        calls = 0

        async def accept(self):
            Exhausted.calls += 1
            await trio.lowlevel.checkpoint()
            raise OSError(errno.EMFILE, "Too many open files")

    server = HttpServer(small_config(), None, None)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="tern.http"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._accept, Exhausted(), nursery)
            await trio.sleep(10)
            nursery.cancel_scope.cancel()
    assert Exhausted.calls <= 12, Exhausted.calls
    assert sum("accept failed" in r.getMessage() for r in caplog.records) == 1


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no ::1 here")
async def test_the_live_server_rate_limits_ipv6_clients_by_prefix(nursery):
    limiter = RateLimiter(0.001, 3)
    server = HttpServer(small_config(), build_test_router(State()), Access(""), limiter=limiter)
    port = (await nursery.start(server.serve, "::1", 0))[0][1]
    statuses = []
    with trio.fail_after(10):
        for _ in range(5):
            stream = await trio.open_tcp_stream("::1", port)
            client = RawClient(stream)
            await client.send(request("GET", "/ok", {"Connection": "close"}))
            response = await client.response()
            statuses.append(response.status if response else 0)
            await client.aclose()
    assert statuses == [200, 200, 200, 429, 429]
    assert list(limiter._tats) == ["::/64"]
    server.shutdown()
