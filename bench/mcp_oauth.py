"""An authenticated MCP call against an unauthenticated one, after the first.

    .venv/bin/python bench/mcp_oauth.py [--calls 200] [--rounds 5]

Two servers from the official Python SDK on loopback, side by side in one run:
tests/fixtures/sdk_mcp_server.py (no auth) and tests/fixtures/sdk_oauth_server.py
(the SDK's auth components: every request's Bearer token is checked). tern's
``McpClient`` over Streamable HTTP calls ``add`` on each, rounds interleaved; the
OAuth client logs in once (headless) before timing, so what is timed is the steady
state: the token read from memory (a stat of the token file), the header added.

A third variant sends the same token as a static ``headers`` entry to the OAuth server:
the same server work without tern's OAuth session. tern's own share is measured as
its process's CPU time per call (the servers run in other processes), so the
authenticated-against-unauthenticated comparison of what tern spends is not blurred
by the servers' token checks or loopback jitter.
Also timed alone: ``OAuthSession.authorization()``, tern's own cost per request.
Target (issue 17): authenticated no more than unauthenticated after the first call;
the end-to-end ratio includes the SDK server's own token check.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from runtime.config import HttpTransport, McpServerEntry, OAuthConfig  # noqa: E402
from runtime.mcp.client.client import McpClient, make_transport  # noqa: E402
from tests import peers  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], probe: str) -> subprocess.Popen:
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(probe, timeout=1.0)
            return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"{argv[1]} did not start")


class Browser:
    redirect_uri = "http://127.0.0.1:9/callback"

    async def __call__(self, url: str, accept) -> str:
        async with httpx.AsyncClient() as http:
            return accept((await http.get(url)).headers["location"])


CPU: dict[str, float] = {}  # variant -> tern's CPU seconds over its timed calls


async def timed_calls(client: McpClient, calls: int, variant: str = "") -> list[float]:
    out = []
    cpu = time.process_time()
    for i in range(calls):
        started = time.perf_counter()
        await client.call_tool("add", {"a": i, "b": 1})
        out.append(time.perf_counter() - started)
    if variant:
        CPU[variant] = CPU.get(variant, 0.0) + time.process_time() - cpu
    return out


async def main(calls: int, rounds: int, plain_url: str, oauth_url: str, state: str) -> None:
    plain = McpServerEntry(name="plain", transport=HttpTransport(url=plain_url), timeout_secs=30)
    oauth = McpServerEntry(name="oauth", transport=HttpTransport(url=oauth_url, oauth=OAuthConfig()), timeout_secs=30)
    async with trio.open_nursery() as nursery:
        a = await McpClient.connect(plain, nursery)
        transport = make_transport(oauth, state_dir=state, authorizer=Browser())
        b = await McpClient.connect(oauth, nursery, transport=transport)
        await timed_calls(b, 20)  # the login, then warm connections and caches
        token = transport.oauth.current().access_token
        static = McpServerEntry(name="static", transport=HttpTransport(
            url=oauth_url, headers={"Authorization": f"Bearer {token}"}), timeout_secs=30)
        c = await McpClient.connect(static, nursery)
        await timed_calls(a, 20)
        await timed_calls(c, 20)
        times = {"unauthenticated": [], "OAuth (Bearer)": [], "static header": []}
        for _ in range(rounds):
            times["unauthenticated"] += await timed_calls(a, calls, "unauthenticated")
            times["OAuth (Bearer)"] += await timed_calls(b, calls, "OAuth (Bearer)")
            times["static header"] += await timed_calls(c, calls, "static header")
        session = transport.oauth
        started = time.perf_counter()
        for _ in range(10_000):
            await session.authorization()
        per_header = (time.perf_counter() - started) / 10_000
        for client in (a, b, c):
            await client.aclose()
        nursery.cancel_scope.cancel()
    print(f"{'variant':<18} {'calls':>6} {'median ms':>10} {'p90 ms':>8} {'tern CPU us/call':>17}")
    medians = {}
    for name, values in times.items():
        values.sort()
        medians[name] = statistics.median(values)
        p90 = values[int(len(values) * 0.9)]
        print(f"{name:<18} {len(values):>6} {medians[name] * 1000:>10.3f} {p90 * 1000:>8.3f} "
              f"{CPU[name] / len(values) * 1e6:>17.1f}")
    print(f"ratio OAuth / unauthenticated (median): {medians['OAuth (Bearer)'] / medians['unauthenticated']:.3f}")
    print(f"ratio OAuth / the same token as a static header (median): "
          f"{medians['OAuth (Bearer)'] / medians['static header']:.3f}")
    cpu_ratio = CPU["OAuth (Bearer)"] / CPU["unauthenticated"]
    print(f"ratio of tern's CPU per call, OAuth / unauthenticated: {cpu_ratio:.3f}")
    print(f"tern's own cost per request, OAuthSession.authorization(): {per_header * 1e6:.1f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    python = str(peers.require(peers.mcp_sdk_python))
    p1, p2 = free_port(), free_port()
    servers = [start([python, str(FIXTURES / "sdk_mcp_server.py"), "http", str(p1)], f"http://127.0.0.1:{p1}/"),
               start([python, str(FIXTURES / "sdk_oauth_server.py"), str(p2)], f"http://127.0.0.1:{p2}/test/stats")]
    try:
        with tempfile.TemporaryDirectory() as state:
            trio.run(main, args.calls, args.rounds, f"http://127.0.0.1:{p1}/mcp", f"http://127.0.0.1:{p2}/mcp", state)
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
