"""Request label values are a closed set: junk methods and paths cannot grow /metrics.

Before, every distinct method became a series (up to the 1,000-series cap, each label
as long as the header limit allows): a flood of junk methods made /metrics 7.8 MB.
"""

from __future__ import annotations

import random
import string

import trio

from runtime.httpd.access import Access
from runtime.httpd.metrics import Metrics
from runtime.wire.ratelimit import RateLimiter
from runtime.httpd.server import HttpServer
from tests.http.serving import State, build_test_router, small_config

TOKEN = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
CONNECTIONS = 20
PER_CONNECTION = 500  # 10,000 requests in all


async def _flood(port: int, rng: random.Random) -> int:
    requests = []
    for i in range(PER_CONNECTION):
        method = "".join(rng.choice(TOKEN) for _ in range(rng.randint(1, 200)))
        path = "/" + "".join(rng.choice(string.ascii_letters + "/") for _ in range(rng.randint(0, 200)))
        if rng.random() < 0.1:
            method, path = rng.choice(["GET", "POST", "get"]), rng.choice(["/ok", path])
        last = i == PER_CONNECTION - 1
        requests.append(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        f"{'Connection: close' if last else 'X-A: b'}\r\n\r\n".encode())
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    received = bytearray()

    async def read() -> None:  # while sending: neither side may block on a full buffer
        while chunk := await stream.receive_some(65536):
            received.extend(chunk)

    async with stream, trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await stream.send_all(b"".join(requests))
    return received.count(b"HTTP/1.1 ")


async def test_random_methods_and_paths_keep_metrics_small(nursery):
    metrics = Metrics()
    server = HttpServer(small_config(max_connections_per_client=0), build_test_router(State()), Access(""),
                        limiter=RateLimiter(1_000_000, 1_000_000), metrics=metrics)
    port = (await nursery.start(server.serve, "127.0.0.1", 0))[0][1]
    answered = 0

    async def one(seed: int) -> None:
        nonlocal answered
        got = await _flood(port, random.Random(seed))
        answered += got

    with trio.fail_after(120):
        async with trio.open_nursery() as clients:
            for seed in range(CONNECTIONS):
                clients.start_soon(one, seed)
    assert answered == CONNECTIONS * PER_CONNECTION
    text = metrics.render()
    series = [line for line in text.splitlines() if line.startswith("tern_http_requests_total{")]
    assert len(text) < 16_384, len(text)
    assert len(series) <= 20, series
    methods = {line.split('method="', 1)[1].split('"', 1)[0] for line in series}
    assert methods <= {"GET", "POST", "other"}, methods
    server.shutdown()
