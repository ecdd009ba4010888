"""Bad input must never crash or wedge the HTTP server.

Raw trio sockets feed it random bytes (hypothesis), truncated and pipelined requests,
huge heads, bodies over the cap, chunked bodies that never end, slow clients, clients
that vanish mid-response or never read, and 1,000 connections at once; httpx sends
the normal requests. After each, the server must answer a normal request and hold no
connection, stream or task (``assert_healthy``), and nothing may reach the
"connection failed" catch-all in the log. Auth bypass attempts must all fail.
"""

from __future__ import annotations

import base64
import logging
import re
import socket

try:
    import resource
except ImportError:  # Windows
    resource = None

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.httpd import server as server_module
from runtime.httpd.access import Access
from runtime.httpd.messages import HttpError, Request
from runtime.wire.ratelimit import RateLimiter
from tests.http.serving import (
    OK_BODY,
    RawClient,
    assert_healthy,
    request,
    server_in_thread,
    small_config,
    start_server,
    wait_settled,
)

KEY = "hostile-test-key-0123456789"


@pytest.fixture(autouse=True)
def server_errors():
    """Every ERROR the HTTP server logs; a test fails on any but the /boom handler's."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("tern.http")
    handler = Collect(logging.ERROR)
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.ERROR:
        logger.setLevel(logging.ERROR)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)
    unexpected = [r for r in records if not (r.exc_info and "boom: a handler bug" in str(r.exc_info[1]))]
    assert not unexpected, [r.getMessage() for r in unexpected]


def error_of(response) -> dict:
    """The JSON error body every error response carries."""
    assert response.headers["content-type"] == "application/json", response
    error = response.json()["error"]
    assert error["status"] == response.status and error["message"], error
    return error


def elapsed_since(start: float) -> float:
    return trio.current_time() - start


def sweep_tick(config) -> float:
    """How late a connection timeout may fire: the server's sweeper checks deadlines
    every tick (``HttpServer._sweep``)."""
    return max(0.02, min(config.request_head_timeout_secs, config.keep_alive_timeout_secs,
                         config.write_timeout_secs) / 10)


def assert_fired(took: float, timeout: float, config) -> None:
    """On the virtual clock a timeout fires no earlier than it is due and no later
    than one sweep tick after (1e-9: float sums of virtual time)."""
    assert timeout - 1e-9 <= took <= timeout + sweep_tick(config) + 1e-9, (took, timeout)


# --- Random bytes ------------------------------------------------------------------------

VALID = [
    request("GET", "/ok"),
    request("GET", "/nope"),
    request("HEAD", "/ok"),
    request("POST", "/echo", body=b'{"x": 1}'),
    request("POST", "/echo", {"Transfer-Encoding": "chunked"}, b"5\r\nhello\r\n0\r\n\r\n"),
    request("POST", "/echo", {"Expect": "100-continue"}, b"abc"),
    request("GET", "/stream?n=2&delay=0"),
    b"GET /ok HTTP/1.0\r\n\r\n",
]
# What random input may get back; anything else (a 500 above all) is a server bug.
ALLOWED = {100, 200, 400, 401, 403, 404, 405, 413, 431, 501}


def _splice(base: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    data = bytearray(base)
    for position, cut, insert in edits:
        position %= len(data) + 1
        data[position:position + cut] = insert
    return bytes(data)


def _head(line: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    return line + b"".join(name + b": " + value + b"\r\n" for name, value in headers) + b"\r\n" + body


header_names = st.sampled_from([b"Host", b"Content-Length", b"Transfer-Encoding", b"Connection", b"Expect",
                                b"Authorization", b"X-API-Key", b"Upgrade", b"Origin"]) | st.binary(max_size=12)
hostile_bytes = st.one_of(
    st.binary(max_size=2048),
    st.builds(_splice, st.sampled_from(VALID),
              st.lists(st.tuples(st.integers(0, 300), st.integers(0, 8), st.binary(max_size=8)), min_size=1,
                       max_size=4)),
    st.builds(lambda base, n: base[:n], st.sampled_from(VALID), st.integers(0, 120)),
    st.builds(_head, st.sampled_from([b"GET /ok HTTP/1.1\r\n", b"POST /echo HTTP/1.1\r\n", b"HEAD /ok HTTP/1.0\r\n",
                                      b"CONNECT /ok HTTP/1.1\r\n", b"GET http://x/ok HTTP/1.1\r\n"]),
              st.lists(st.tuples(header_names, st.binary(max_size=40)), max_size=6), st.binary(max_size=64)),
    st.lists(st.sampled_from(VALID), min_size=2, max_size=5).map(b"".join),
)


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:]) if b > a]


async def _throw(port: int, data: bytes, cuts: list[int], ending: str) -> None:
    """Send ``data`` in pieces, then close (``close``/``reset``) or half-close and
    read what comes back until the server closes, which must be prompt: the head
    timeout is 10 s, so no answer may depend on a timer."""
    with trio.fail_after(5):
        client = await RawClient.connect(port)
        try:
            for piece in _pieces(data, cuts):
                await client.send(piece)
            if ending != "half":
                await client.aclose(reset=ending == "reset")
                return
            await client.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the server already answered and closed (a 400, say)
        reply = await client.read_all()
        await client.aclose()
    if reply:
        assert reply.startswith(b"HTTP/1.1 "), reply[:100]
    statuses = {int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", reply)}
    assert statuses <= ALLOWED, (statuses, reply[:300])


def test_random_bytes_never_crash_or_wedge_the_server():
    """One server takes every example (in its own trio run on a thread, since
    hypothesis drives a sync function), then still answers and has nothing left over."""
    with server_in_thread(small_config(request_head_timeout_secs=10.0, keep_alive_timeout_secs=10.0)) as (
            token, served):

        @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(data=hostile_bytes, cuts=st.lists(st.integers(0, 4096), max_size=4),
               ending=st.sampled_from(["half", "half", "close", "reset"]))
        def throw(data: bytes, cuts: list[int], ending: str) -> None:
            trio.from_thread.run(_throw, served.port, data, cuts, ending, trio_token=token)

        throw()
        trio.from_thread.run(assert_healthy, served.server, served.port, trio_token=token)


# --- Truncated, pipelined, malformed ---------------------------------------------------------

FULL = request("POST", "/echo", body=b"0123456789")
CUTS = [1, 4, 17, FULL.index(b"\r\n\r\n") + 2, FULL.index(b"\r\n\r\n") + 4, len(FULL) - 3]


async def test_truncated_requests_are_dropped_at_once(nursery):
    with trio.fail_after(10):
        served = await start_server(nursery, small_config(request_head_timeout_secs=10.0))
        # The client closes mid-head or mid-body: the connection goes at once, not
        # after the 10 s head timeout.
        clients = [await RawClient.connect(served.port) for _ in CUTS]
        for client, cut in zip(clients, CUTS):
            await client.send(FULL[:cut])
        with trio.fail_after(2):
            while served.server.active < len(CUTS):
                await trio.sleep(0.01)
        for client in clients:
            await client.aclose()
        await wait_settled(served.server, timeout=1.0)
        # Half-closed instead: a 400 (JSON) saying so, then the server closes.
        for cut in CUTS:
            client = await RawClient.connect(served.port)
            await client.send(FULL[:cut])
            await client.send_eof()
            with trio.fail_after(1):
                response = await client.response()
                assert response is not None and response.status == 400, (cut, response)
                assert "closed" in error_of(response)["message"]
                assert await client.closed()
            await client.aclose()
        await assert_healthy(served.server, served.port)


@pytest.mark.parametrize("piece", [0, 7], ids=["one-write", "7-byte-pieces"])
async def test_pipelined_requests_are_answered_in_order(nursery, piece):
    with trio.fail_after(10):
        served = await start_server(nursery)
        client = await RawClient.connect(served.port)
        batch = (request("GET", "/ok") + request("GET", "/nope") + request("POST", "/echo", body=b"hello")
                 + request("HEAD", "/ok") + request("DELETE", "/ok")
                 + request("POST", "/echo", {"Transfer-Encoding": "chunked"}, b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
                 + request("GET", "/ok", {"Connection": "close"}))
        if piece:
            for i in range(0, len(batch), piece):
                await client.send(batch[i:i + piece])
        else:
            await client.send(batch)
        ok = await client.response()
        assert (ok.status, ok.body) == (200, OK_BODY)
        missing = await client.response()  # an early answer must not cost the connection
        assert missing.status == 404 and error_of(missing)
        echo = await client.response()
        assert (echo.status, echo.body) == (200, b"hello")
        head = await client.response(b"HEAD")
        assert (head.status, head.body, head.headers["content-length"]) == (200, b"", str(len(OK_BODY)))
        wrong = await client.response()
        assert wrong.status == 405 and wrong.headers["allow"] == "GET, HEAD"
        chunked = await client.response()
        assert (chunked.status, chunked.body) == (200, b"abcde")
        last = await client.response()
        assert (last.status, last.body, last.complete) == (200, OK_BODY, True)
        with trio.fail_after(1):
            assert await client.closed()  # it asked for Connection: close
        await assert_healthy(served.server, served.port)


async def test_malformed_requests_get_400_json(nursery):
    with trio.fail_after(10):
        served = await start_server(nursery)
        for junk in [b"NOT HTTP AT ALL\r\n\r\n", b"GET /ok HTTP/1.1\r\nBad Header: x\r\n\r\n",
                     b"GET /ok HTTP/1.1\r\nHost: localhost\r\nContent-Length: -1\r\n\r\n",
                     b"GET /ok HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                     b"GET /ok HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip\r\n\r\n",
                     b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),  # a TLS hello
                     b"GET /ok HTTP/1.1\r\n\x00\xff\r\n\r\n"]:
            client = await RawClient.connect(served.port)
            await client.send(junk)
            with trio.fail_after(2):
                response = await client.response()
                assert response is not None and response.status in (400, 501), (junk, response)
                error_of(response)
                assert response.headers.get("connection") == "close"
                assert await client.closed()
            await client.aclose()
        await assert_healthy(served.server, served.port)


# --- Heads and bodies over their limits ---------------------------------------------------


async def test_oversized_heads_get_431(nursery):
    with trio.fail_after(15):
        served = await start_server(nursery, small_config(max_header_bytes=16 * 1024))
        filler = "".join(f"X-Filler-{i}: {'a' * 1000}\r\n" for i in range(20))  # ~20 KiB
        cases = {
            "20 KiB of headers in one write": f"GET /ok HTTP/1.1\r\nHost: localhost\r\n{filler}\r\n".encode(),
            "one 20 KiB header": f"GET /ok HTTP/1.1\r\nHost: localhost\r\nX-Big: {'b' * 20_000}\r\n\r\n".encode(),
            "a 20 KiB target": f"GET /ok?{'c' * 20_000} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode(),
        }
        for name, head in cases.items():
            client = await RawClient.connect(served.port)
            await client.send(head)
            with trio.fail_after(2):
                response = await client.response()
                assert response is not None and response.status == 431, (name, response)
                error_of(response)
                assert await client.closed()
            await client.aclose()
        # Trickled in 1 KiB lines: refused as soon as 16 KiB are buffered, head unfinished.
        client = await RawClient.connect(served.port)
        await client.send(b"GET /ok HTTP/1.1\r\nHost: localhost\r\n")
        for i in range(16):
            await client.send(f"X-Filler-{i:02}: {'a' * 1009}\r\n".encode())
            await trio.sleep(0.002)
        with trio.fail_after(2):
            response = await client.response()
            assert response is not None and response.status == 431, response
            assert await client.closed()
        await client.aclose()
        # Just under the limit is fine.
        under = "".join(f"X-Filler-{i}: {'a' * 1000}\r\n" for i in range(15))
        async with httpx.AsyncClient(base_url=served.url) as http:
            response = await http.get("/ok", headers=[tuple(line.split(": ", 1)) for line in under.split("\r\n")
                                                      if line])
            assert response.status_code == 200
        await assert_healthy(served.server, served.port)


async def test_content_length_over_the_cap_is_413_before_any_body_is_read(nursery, loopback_clock):
    with trio.fail_after(10):
        served = await start_server(nursery, small_config(max_body_bytes=1024, request_head_timeout_secs=10.0))
        # Only the head: the 413 comes from the Content-Length, at once (not after the
        # 10 s it would take to wait for a body), with no 100 Continue first.
        for headers in [{"Content-Length": str(10**12)}, {"Content-Length": "1025", "Expect": "100-continue"},
                        {"Content-Length": "9" * 20}]:
            client = await RawClient.connect(served.port)
            start = trio.current_time()
            await client.send(request("POST", "/echo", headers))
            with trio.fail_after(1):
                raw = await client.read_all()
            assert elapsed_since(start) < 0.1  # virtual: not one sweep tick (0.5 s) waited
            assert raw.startswith(b"HTTP/1.1 413 "), raw[:200]
            assert b"connection: close" in raw.lower()
            await client.aclose()
        # The head and the body together, one byte over: 413; exactly at the cap: echoed.
        async with httpx.AsyncClient(base_url=served.url) as http:
            over = await http.post("/echo", content=b"x" * 1025)
            assert over.status_code == 413 and over.json()["error"]["status"] == 413
            at_cap = await http.post("/echo", content=b"y" * 1024)
            assert at_cap.status_code == 200 and at_cap.content == b"y" * 1024
            # 100-continue under the cap: the server asks for the body, then echoes it.
            client = await RawClient.connect(served.port)
            await client.send(request("POST", "/echo", {"Content-Length": "3", "Expect": "100-continue"}))
            with trio.fail_after(2):
                assert (await client.stream.receive_some(100)).startswith(b"HTTP/1.1 100 ")
                await client.send(b"abc")
                response = await client.response()
            assert (response.status, response.body) == (200, b"abc")
            await client.aclose()
        await assert_healthy(served.server, served.port)


CHUNKED_HEAD = b"POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"


async def test_chunked_body_over_the_cap_is_413(nursery):
    with trio.fail_after(10):
        served = await start_server(nursery, small_config(max_body_bytes=1024, request_head_timeout_secs=10.0))
        for body in [b"258\r\n" + b"a" * 600 + b"\r\n" + b"258\r\n" + b"b" * 600 + b"\r\n",  # 2 x 600
                     b"ffffffffff\r\n" + b"c" * 1100]:  # one chunk that claims a terabyte
            client = await RawClient.connect(served.port)
            await client.send(CHUNKED_HEAD + body)
            with trio.fail_after(1):
                response = await client.response()
                assert response is not None and response.status == 413, response
                error_of(response)
                assert await client.closed()
            await client.aclose()
        # Within the cap, chunked is fine.
        client = await RawClient.connect(served.port)
        await client.send(CHUNKED_HEAD + b"200\r\n" + b"d" * 512 + b"\r\n200\r\n" + b"e" * 512 + b"\r\n0\r\n\r\n")
        response = await client.response()
        assert (response.status, response.body) == (200, b"d" * 512 + b"e" * 512)
        await client.aclose()
        await assert_healthy(served.server, served.port)


async def test_a_chunked_body_that_never_ends_gets_408(nursery, loopback_clock):
    with trio.fail_after(10):
        config = small_config(request_head_timeout_secs=0.5)
        served = await start_server(nursery, config)
        client = await RawClient.connect(served.port)
        start = trio.current_time()
        await client.send(CHUNKED_HEAD + b"5\r\nhello\r\n")  # ... and never the last chunk
        with trio.fail_after(3):
            response = await client.response()
            assert response is not None and response.status == 408, response
            error_of(response)
            assert await client.closed()
        assert_fired(elapsed_since(start), 0.5, config)
        await client.aclose()
        await assert_healthy(served.server, served.port)


# --- Slow, idle, vanishing and non-reading clients ----------------------------------------------


async def _trickle(client: RawClient, data: bytes, first_after: float, every: float) -> None:
    await trio.sleep(first_after)
    try:
        for i in range(len(data)):
            await client.send(data[i:i + 1])
            await trio.sleep(every)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the server hung up: that is the point


async def test_slow_loris_gets_408_and_is_closed(nursery, loopback_clock):
    with trio.fail_after(10):
        timeout = 0.6
        config = small_config(request_head_timeout_secs=timeout)
        served = await start_server(nursery, config)
        slow_head = request("GET", "/ok", {"X-Slow": "z" * 200})
        # First request: a byte every 0.1 s, starting at once. The head timeout runs
        # from the first byte.
        client = await RawClient.connect(served.port)
        start = trio.current_time()
        async with trio.open_nursery() as trickling:
            trickling.start_soon(_trickle, client, slow_head, 0.0, 0.1)
            response = await client.response()
            took = elapsed_since(start)
            assert await client.closed()
            trickling.cancel_scope.cancel()
        assert response is not None and response.status == 408, response
        error_of(response)
        assert_fired(took, timeout, config)
        await client.aclose()
        # A first byte just before the idle limit, then a trickle: the head timeout runs
        # from that first byte, so the whole is bounded by the two.
        client = await RawClient.connect(served.port)
        start = trio.current_time()
        async with trio.open_nursery() as trickling:
            trickling.start_soon(_trickle, client, slow_head, timeout * 0.7, 0.1)
            response = await client.response()
            took = elapsed_since(start)
            trickling.cancel_scope.cancel()
        assert response is not None and response.status == 408, response
        assert_fired(took, timeout * 0.7 + timeout, config)
        await client.aclose()
        # On a kept-alive connection too: one normal request, then a trickle.
        client = await RawClient.connect(served.port)
        await client.send(request("GET", "/ok"))
        assert (await client.response()).status == 200
        start = trio.current_time()
        async with trio.open_nursery() as trickling:
            trickling.start_soon(_trickle, client, slow_head, 0.0, 0.1)
            response = await client.response()
            took = elapsed_since(start)
            trickling.cancel_scope.cancel()
        assert response is not None and response.status == 408, response
        assert_fired(took, timeout, config)
        await client.aclose()
        await assert_healthy(served.server, served.port)


async def test_idle_connections_are_closed_silently(nursery, loopback_clock):
    with trio.fail_after(10):
        config = small_config(request_head_timeout_secs=0.6, keep_alive_timeout_secs=0.3)
        served = await start_server(nursery, config)
        silent = await RawClient.connect(served.port)  # never sends a byte
        kept = await RawClient.connect(served.port)
        await kept.send(request("GET", "/ok"))
        assert (await kept.response()).status == 200
        start = trio.current_time()
        with trio.fail_after(2):
            assert await kept.read_all() == b""  # closed after the keep-alive timeout, no 408
        assert_fired(elapsed_since(start), 0.3, config)  # from the end of its response
        with trio.fail_after(2):
            assert await silent.read_all() == b""  # closed after the head timeout, no 408
        assert_fired(elapsed_since(start), 0.6, config)  # from its connect, no virtual time before start
        await silent.aclose()
        await kept.aclose()
        await assert_healthy(served.server, served.port)


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
async def test_a_client_vanishing_mid_response_frees_its_connection(nursery, reset):
    with trio.fail_after(10):
        served = await start_server(nursery)
        # Mid-stream: an endless stream, read a little, gone.
        client = await RawClient.connect(served.port)
        await client.send(request("GET", "/stream?forever=yes&delay=0.005"))
        seen = b""
        while b"data: 2" not in seen:
            seen += await client.stream.receive_some(65536)
        assert len(served.server._streams) == 1 and served.state.streams_started == 1
        await client.aclose(reset=reset)
        await wait_settled(served.server, timeout=2.0)
        # Mid-body: 16 MiB, read 64 KiB of it, gone.
        client = await RawClient.connect(served.port)
        await client.send(request("GET", f"/big?size={16 << 20}"))
        got = 0
        while got < 65536:
            got += len(await client.stream.receive_some(65536))
        await client.aclose(reset=reset)
        await wait_settled(served.server, timeout=2.0)
        await assert_healthy(served.server, served.port)


async def test_a_client_that_never_reads_is_cut_off_by_the_write_timeout(nursery, loopback_clock):
    with trio.fail_after(15):
        config = small_config(write_timeout_secs=0.5)
        served = await start_server(nursery, config)
        stuck = []
        for target in ["/stream?forever=yes&size=65536&delay=0", f"/big?size={16 << 20}"]:
            client = await RawClient.connect(served.port)
            client.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            await client.send(request("GET", target))
            stuck.append(client)  # never read, never closed (until the end)
            with trio.fail_after(2):
                while not served.server.active:
                    await trio.sleep(0.01)
            start = trio.current_time()
            await wait_settled(served.server, timeout=5.0)
            # Held until the 0.5 s write timeout, no longer. On the virtual clock that is
            # exact but for the two 10 ms polls around it and one sweep tick.
            assert 0.5 - 0.01 - 1e-9 <= elapsed_since(start) <= 0.5 + sweep_tick(config) + 0.01 + 1e-9
        await assert_healthy(served.server, served.port)
        for client in stuck:
            await client.aclose()


async def test_a_slow_reader_gets_an_intact_stream(nursery):
    """The producer's quiet timer (keepalive_secs) must not cut a write that is merely
    slow: a chunk written in part, then a keep-alive comment, breaks the framing."""
    with trio.fail_after(15):
        served = await start_server(nursery, small_config(write_timeout_secs=5.0))
        client = await RawClient.connect(served.port)
        client.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        chunks, size = 96, 128 * 1024  # 12 MiB: more than the socket buffers hold
        await client.send(request("GET", f"/stream?n={chunks}&size={size}&delay=0&keepalive=0.1"))
        await trio.sleep(0.6)  # the server's writes block for a while: longer than keepalive_secs
        response = await client.response()
        assert response.complete, response
        assert response.body.replace(b": keep-alive\n\n", b"") == b"z" * (chunks * size)
        await client.aclose()
        await assert_healthy(served.server, served.port)


# --- Many connections ------------------------------------------------------------------------


THOUSAND = 1000


@pytest.fixture
def open_files_for_a_thousand():
    """Both ends of every connection live in this process: raise the soft
    RLIMIT_NOFILE if it is too low (and put it back after), or skip."""
    files = 2 * THOUSAND + 256
    if resource is None:
        pytest.skip("no RLIMIT_NOFILE to check on this platform")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= files:
        yield
        return
    if hard != resource.RLIM_INFINITY and hard < files:
        pytest.skip(f"needs {files} open files, and the RLIMIT_NOFILE hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_thousand_concurrent_connections(nursery, open_files_for_a_thousand):
    n = THOUSAND
    with trio.fail_after(30):
        served = await start_server(nursery, small_config(max_connections=2000, max_connections_per_client=0,
                                                          request_head_timeout_secs=20.0,
                                                          keep_alive_timeout_secs=20.0))
        connected = 0
        all_connected = trio.Event()
        go = trio.Event()
        statuses: list[int] = []

        async def one() -> None:
            nonlocal connected
            client = await RawClient.connect(served.port)
            await client.send(request("GET", "/ok"))  # proven (a head answered): never shed to make room
            first = await client.response()
            assert first is not None and first.status == 200
            connected += 1
            if connected == n:
                all_connected.set()
            await go.wait()
            await client.send(request("GET", "/ok", {"Connection": "close"}))
            response = await client.response()
            statuses.append(response.status if response else 0)
            await client.aclose()

        start = trio.current_time()
        async with trio.open_nursery() as clients:
            for _ in range(n):
                clients.start_soon(one)
            await all_connected.wait()
            while served.server.active < n:  # every one of them open at the server at once
                await trio.sleep(0.01)
            assert served.server.active == n
            go.set()
        took = elapsed_since(start)
        assert statuses == [200] * n
        print(f"{n} concurrent connections: {took:.2f}s")
        await assert_healthy(served.server, served.port)


async def test_connections_over_the_cap_get_503(nursery):
    with trio.fail_after(10):
        served = await start_server(nursery, small_config(max_connections=5))
        held = []
        for _ in range(5):  # each has had a request answered: a full server of these refuses the next
            held.append(await RawClient.connect(served.port))
            await held[-1].send(request("GET", "/ok"))
            assert (await held[-1].response()).status == 200
        with trio.fail_after(2):
            while served.server.active < 5:
                await trio.sleep(0.01)
        for _ in range(3):
            extra = await RawClient.connect(served.port)
            with trio.fail_after(2):
                response = await extra.response()
                assert response is not None and response.status == 503, response
                error_of(response)
                assert response.headers["retry-after"] == "1" and response.headers["connection"] == "close"
                assert await extra.closed()
            await extra.aclose()
        assert served.server.active == 5
        for client in held:
            await client.aclose()
        await assert_healthy(served.server, served.port)


# --- Errors, HEAD ---------------------------------------------------------------------------


async def test_a_handler_exception_is_a_500_with_a_request_id_and_the_server_goes_on(nursery, server_errors):
    with trio.fail_after(10):
        served = await start_server(nursery)
        async with httpx.AsyncClient(base_url=served.url) as http:
            ids = set()
            for _ in range(3):
                response = await http.get("/boom")
                assert response.status_code == 500
                error = response.json()["error"]
                assert error["status"] == 500 and error["message"] == "internal error"
                assert "boom" not in response.text  # the exception text stays in the log
                assert error["request_id"] and error["request_id"] == response.headers["x-request-id"]
                assert response.headers["connection"] == "close"
                ids.add(error["request_id"])
                assert (await http.get("/ok")).status_code == 200
            assert len(ids) == 3
        assert len(server_errors) == 3 and all(r.args[0] in ids for r in server_errors)
        await assert_healthy(served.server, served.port)


async def test_a_tern_error_is_answered_with_its_status_and_message(nursery, server_errors):
    with trio.fail_after(10):
        served = await start_server(nursery)
        client = await RawClient.connect(served.port)
        for path, status, message in [("/refuse/agent", 404, "no agent named 'ghost'"),
                                      ("/refuse/task-7", 409, "task-7 is already running")]:
            await client.send(request("GET", path))
            response = await client.response()
            assert response.status == status, response
            assert response.json() == {"error": {"status": status, "message": message}}  # as an HttpError's
            assert response.headers.get("connection") != "close"
        await client.send(request("GET", "/ok"))  # the same connection goes on
        assert (await client.response()).status == 200
        await client.aclose()
        assert not server_errors
        await assert_healthy(served.server, served.port)


async def test_404_and_405_are_json_and_keep_the_connection(nursery):
    with trio.fail_after(10):
        served = await start_server(nursery)
        async with httpx.AsyncClient(base_url=served.url) as http:
            missing = await http.get("/nope")
            assert missing.status_code == 404 and missing.headers["content-type"] == "application/json"
            assert missing.json()["error"]["status"] == 404
            for method, path, allow in [("POST", "/ok", "GET, HEAD"), ("DELETE", "/echo", "POST"),
                                        ("PUT", "/stream", "GET, HEAD")]:
                wrong = await http.request(method, path, content=b"{}")
                assert wrong.status_code == 405 and wrong.headers["allow"] == allow, (method, path)
                assert wrong.json()["error"]["status"] == 405
        # One connection through 404, 405 (with a body not read) and on to a 200.
        client = await RawClient.connect(served.port)
        for data, status in [(request("GET", "/nope"), 404), (request("PUT", "/ok", body=b"{}"), 405),
                             (request("GET", "/ok"), 200)]:
            await client.send(data)
            response = await client.response()
            assert response.status == status, response
        await client.aclose()
        await assert_healthy(served.server, served.port)


async def test_head_has_no_body_but_the_get_headers(nursery):
    with trio.fail_after(10):
        served = await start_server(nursery)
        client = await RawClient.connect(served.port)
        # Pipelined behind each HEAD, a GET: any stray body byte would garble it.
        for target, status in [("/ok", 200), ("/stream?n=3", 200), ("/nope", 404), ("/echo", 405)]:
            await client.send(request("HEAD", target) + request("GET", "/ok"))
            head = await client.response(b"HEAD")
            assert (head.status, head.body) == (status, b""), (target, head)
            get = await client.response()
            assert (get.status, get.body) == (200, OK_BODY)
        await client.aclose()
        async with httpx.AsyncClient(base_url=served.url) as http:
            head = await http.head("/ok")
            assert head.status_code == 200 and head.content == b""
            assert head.headers["content-length"] == str(len(OK_BODY))
        await assert_healthy(served.server, served.port)


# --- Shutdown ---------------------------------------------------------------------------------


async def test_graceful_shutdown(nursery, loopback_clock):
    with trio.fail_after(15):
        grace = 3.0
        served = await start_server(nursery, small_config(shutdown_grace_secs=grace, request_head_timeout_secs=10.0,
                                                          keep_alive_timeout_secs=10.0))
        server = served.server
        idle = await RawClient.connect(served.port)  # kept alive after a request
        await idle.send(request("GET", "/ok"))
        assert (await idle.response()).status == 200
        fresh = await RawClient.connect(served.port)  # never sent a byte
        streaming = await RawClient.connect(served.port)
        await streaming.send(request("GET", "/stream?forever=yes&delay=0.02"))
        slow = await RawClient.connect(served.port)
        await slow.send(request("GET", "/slow?secs=1.0"))
        await served.state.slow_started.wait()
        slow_began = trio.current_time()
        while not server._streams or server.active < 4:
            await trio.sleep(0.01)

        results: dict = {}

        async def collect(name: str, client: RawClient) -> None:
            results[name] = (await client.response(), trio.current_time())

        start = trio.current_time()
        async with trio.open_nursery() as waiting:
            waiting.start_soon(collect, "stream", streaming)
            waiting.start_soon(collect, "slow", slow)
            await trio.sleep(0.05)
            server.shutdown()
            with trio.fail_after(0.5):  # idle connections: closed at once
                assert await idle.read_all() == b""
                assert await fresh.read_all() == b""
            await trio.sleep(0.1)
            with pytest.raises(OSError):  # no new connections
                await trio.open_tcp_stream("127.0.0.1", served.port)
            with trio.fail_after(grace):
                await server.wait_stopped()
            stopped_at = trio.current_time()
        stream, stream_at = results["stream"]
        assert stream is not None and stream.status == 200 and stream.complete, stream  # ended cleanly
        assert stream.body.startswith(b"data: 0\n\n") and stream_at - start == pytest.approx(0.05)  # at shutdown
        answer, _ = results["slow"]
        assert (answer.status, answer.body, answer.complete) == (200, b'{"slept":true}', True)  # finished
        assert answer.headers["connection"] == "close"
        # Stopped when the slow request was done (its 1 s sleep), not when the grace ran out.
        assert stopped_at - slow_began == pytest.approx(1.0), (stopped_at - slow_began, grace)
        assert server.active == 0 and not server._connections and not server._streams
        for client in (idle, fresh, streaming, slow):
            await client.aclose()


async def test_shutdown_cancels_what_outlives_the_grace(nursery, loopback_clock):
    with trio.fail_after(10):
        served = await start_server(nursery, small_config(shutdown_grace_secs=0.5))
        slow = await RawClient.connect(served.port)
        await slow.send(request("GET", "/slow?secs=30"))
        await served.state.slow_started.wait()
        start = trio.current_time()
        served.server.shutdown()
        with trio.fail_after(2):
            await served.server.wait_stopped()
        assert elapsed_since(start) == pytest.approx(0.5)  # the grace, to the (virtual) tick
        assert await slow.response() is None  # cut off: no answer, just closed
        assert served.server.active == 0 and not served.server._connections
        await slow.aclose()


async def test_a_stream_that_starts_during_shutdown_is_ended_cleanly(nursery, loopback_clock):
    with trio.fail_after(10):
        served = await start_server(nursery, small_config(shutdown_grace_secs=3.0))
        client = await RawClient.connect(served.port)
        await client.send(request("GET", "/slow-stream?secs=0.3&forever=yes&delay=0.02"))
        await served.state.slow_started.wait()
        start = trio.current_time()
        served.server.shutdown()
        with trio.fail_after(2):
            response = await client.response()
            await served.server.wait_stopped()
        assert response is not None and response.status == 200 and response.complete, response
        # Ended once the handler's 0.3 s were up and its stream began, not held until
        # the 3 s grace ran out.
        assert elapsed_since(start) == pytest.approx(0.3)
        await client.aclose()


# --- Auth ------------------------------------------------------------------------------------


async def test_auth_bypass_attempts_fail(nursery):
    with trio.fail_after(10):
        served = await start_server(nursery, access=Access(KEY), headers={"Authorization": f"Bearer {KEY}"})
        basic = base64.b64encode(f"user:{KEY}".encode()).decode()
        refused = [
            ({}, ""),  # missing
            ({"Authorization": "Bearer wrong"}, ""),  # wrong
            ({"Authorization": f"Bearer {KEY[:-1]}"}, ""),  # a prefix
            ({"Authorization": f"Bearer {KEY}x"}, ""),  # an extension
            ({"Authorization": f"Bearer {KEY.upper()}"}, ""),  # wrong case: keys are case-sensitive
            ({"X-API-Key": KEY.upper()}, ""),
            ({"X-API-Key": ""}, ""),
            ({"Authorization": "Bearer"}, ""),
            ({"Authorization": KEY}, ""),  # no scheme
            ({"Authorization": f"Basic {KEY}"}, ""),  # another scheme
            ({"Authorization": f"Basic {basic}"}, ""),
            ({"Authorization": f"Token {KEY}"}, ""),
            ({"Authorization": "Basic x", "X-API-Key": KEY}, ""),  # no fallback from a bad Authorization
            ({}, f"?api_key={KEY}"),  # in the query: refused outright
            ({}, f"?API_KEY={KEY}"),
            ({}, f"?token={KEY}"),
            ({}, f"?access_token={KEY}"),
            ({}, f"?x=1&key={KEY}"),
            ({"Authorization": f"Bearer {KEY}"}, f"?api_key={KEY}"),  # even with the right header
        ]
        accepted = [{"Authorization": f"Bearer {KEY}"}, {"Authorization": f"bearer {KEY}"},
                    {"Authorization": f"BEARER {KEY}"}, {"X-API-Key": KEY}, {"x-api-key": KEY}]
        async with httpx.AsyncClient(base_url=served.url) as http:
            for headers, query in refused:
                response = await http.get("/ok" + query, headers=headers)
                assert response.status_code == 401, (headers, query, response.status_code)
                assert response.json()["error"]["status"] == 401 and KEY not in response.text
            assert (await http.get("/ok")).headers["www-authenticate"].startswith("Bearer")
            # A body is never read (nor echoed) without the key.
            response = await http.post("/echo", content=b"secret upload")
            assert response.status_code == 401 and b"secret upload" not in response.content
            for headers in accepted:
                response = await http.get("/ok", headers=headers)
                assert response.status_code == 200, headers
        await assert_healthy(served.server, served.port, headers=served.headers)


def test_a_remote_client_needs_a_key_unless_explicitly_allowed():
    """Tests listen on loopback only, so the remote side is a unit test (and see the
    next test for the same through a server that believes its client is remote)."""
    remote = ("203.0.113.9", 40000)
    plain = Request("GET", "/ok", "", [(b"host", b"localhost")], remote, "r-1")
    keyed = Request("GET", "/ok", "", [(b"host", b"localhost"), (b"authorization", f"Bearer {KEY}".encode())],
                    remote, "r-2")
    with pytest.raises(HttpError) as refused:
        Access("").authenticate(plain, client_is_loopback=False)
    assert refused.value.http_status == 403
    Access("").authenticate(plain, client_is_loopback=True, same_user=True)
    with pytest.raises(HttpError) as other_user:  # loopback, but not tern's own OS user
        Access("").authenticate(plain, client_is_loopback=True)
    assert other_user.value.http_status == 401
    Access("", allow_unauthenticated_remote=True).authenticate(plain, client_is_loopback=False)
    Access(KEY).authenticate(keyed, client_is_loopback=False)
    with pytest.raises(HttpError) as missing:
        Access(KEY).authenticate(plain, client_is_loopback=False)
    assert missing.value.http_status == 401
    in_query = Request("GET", "/ok", f"api_key={KEY}", [(b"host", b"localhost")], remote, "r-3")
    with pytest.raises(HttpError) as queried:
        Access("", allow_unauthenticated_remote=True).authenticate(in_query, client_is_loopback=False)
    assert queried.value.http_status == 401


@pytest.mark.parametrize("allow_remote", [False, True])
async def test_a_server_that_sees_a_remote_client_without_a_key(nursery, monkeypatch, allow_remote):
    monkeypatch.setattr(server_module, "is_loopback", lambda host: False)
    with trio.fail_after(10):
        served = await start_server(nursery, access=Access("", allow_unauthenticated_remote=allow_remote))
        async with httpx.AsyncClient(base_url=served.url) as http:
            response = await http.get("/ok")
        if allow_remote:
            assert response.status_code == 200
            await assert_healthy(served.server, served.port)
        else:
            assert response.status_code == 403 and response.json()["error"]["status"] == 403
            await wait_settled(served.server)


async def test_dns_rebinding_host_and_origin_are_refused(nursery):
    with trio.fail_after(10):
        served = await start_server(nursery)
        async with httpx.AsyncClient(base_url=served.url) as http:
            for headers in [{"Host": "evil.example"}, {"Host": "evil.example:80"},
                            {"Origin": "http://evil.example"}, {"Origin": "null"}]:
                response = await http.get("/ok", headers=headers)
                assert response.status_code == 403, headers
            assert (await http.get("/ok", headers={"Host": "localhost:1"})).status_code == 200
        await assert_healthy(served.server, served.port)


# --- Rate limit -----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_rate_limit_answers_429_with_retry_after(nursery):
    with trio.fail_after(10):
        clock = FakeClock()
        served = await start_server(nursery, limiter=RateLimiter(1, 2, clock=clock))
        async with httpx.AsyncClient(base_url=served.url) as http:
            assert [(await http.get("/ok")).status_code for _ in range(2)] == [200, 200]
            limited = await http.get("/ok")
            assert limited.status_code == 429 and limited.json()["error"]["status"] == 429
            retry_after = int(limited.headers["retry-after"])  # whole seconds, rounded up
            assert 1 <= retry_after <= 2
            assert (await http.get("/nope")).status_code == 429  # refused before routing
            clock.now += 1.0  # one cell back
            assert (await http.get("/ok")).status_code == 200
            assert (await http.get("/ok")).status_code == 429
        clock.now += 10
        await assert_healthy(served.server, served.port)


FLOOD = """
import socket, sys, threading
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
data = b"GET /ok HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n" * int(sys.argv[2])
threading.Thread(target=sock.sendall, args=(data,), daemon=True).start()
seen = 0
while seen < int(sys.argv[2]):
    chunk = sock.recv(1 << 20)
    if not chunk:
        break
    seen += chunk.count(b"HTTP/1.1 200")
print(seen)
"""


async def test_a_pipelining_flood_does_not_starve_other_clients(nursery):
    """Direct reads and writes skip trio's scheduler; the server must still yield. The
    flood comes from another process, so it can keep the socket buffers full."""
    import subprocess
    import sys

    with trio.fail_after(30):
        served = await start_server(nursery)
        flood = subprocess.Popen([sys.executable, "-c", FLOOD, str(served.port), "20000"], stdout=subprocess.PIPE)
        try:
            await trio.sleep(0.3)  # the flood is under way
            waits = []
            for _ in range(5):
                started = trio.current_time()
                other = await RawClient.connect(served.port)
                await other.send(request("GET", "/ok"))
                assert (await other.response()).status == 200
                waits.append(trio.current_time() - started)
                await other.aclose()
            assert max(waits) < 0.2, f"a second client waited {max(waits):.2f} s"
            seen = await trio.to_thread.run_sync(flood.communicate)
            assert int(seen[0]) == 20000
        finally:
            flood.kill()
        await assert_healthy(served.server, served.port)
