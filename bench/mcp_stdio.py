"""MCP client over stdio: per-call round trip and concurrency, side by side.

    .venv/bin/python bench/mcp_stdio.py [--calls 500] [--rounds 7]

Variants (the same echo server, bench/echo_server.py, for the first two):
- bare trio loop: write one request line, read one response line; no JSON-RPC layer.
- tern McpClient.call_tool: the full client (session, waiters, parsing, result model).
- official SDK Client -> official SDK MCPServer (both in the SDK's venv, .peers/).
And 100 concurrent calls on one connection to a server that sleeps 50 ms per call.

Targets (issue: MCP client): tern within 2x of the bare loop; 100 x 50 ms in < 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from runtime.config import McpServerEntry, StdioTransport  # noqa: E402
from runtime.mcp.client.client import McpClient  # noqa: E402

ECHO = str(ROOT / "bench" / "echo_server.py")


def entry(*args: str) -> McpServerEntry:
    return McpServerEntry(name="echo", transport=StdioTransport(command=sys.executable, args=[ECHO, *args]),
                          protocol="2025-11-25")


async def bare_loop(calls: int, rounds: int) -> float:
    proc = await trio.lowlevel.open_process([sys.executable, ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    buf = b""

    async def roundtrip(message: dict) -> bytes:
        nonlocal buf
        await proc.stdin.send_all(json.dumps(message).encode() + b"\n")
        while b"\n" not in buf:
            buf += await proc.stdout.receive_some(65536)
        line, buf = buf.split(b"\n", 1)
        return line

    await roundtrip({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}})
    per_call = []
    for _ in range(rounds):
        started = time.perf_counter()
        for i in range(calls):
            await roundtrip({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                             "params": {"name": "echo", "arguments": {"message": "hi"}}})
        per_call.append((time.perf_counter() - started) / calls)
    await proc.stdin.aclose()
    await proc.wait()
    return statistics.median(per_call)


async def tern_client(calls: int, rounds: int) -> float:
    async with trio.open_nursery() as nursery:
        client = await McpClient.connect(entry(), nursery)
        await client.call_tool("echo", {"message": "warm"})
        per_call = []
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(calls):
                await client.call_tool("echo", {"message": "hi"})
            per_call.append((time.perf_counter() - started) / calls)
        await client.aclose()
        nursery.cancel_scope.cancel()
    return statistics.median(per_call)


async def concurrent(n: int = 100, sleep_ms: int = 50) -> float:
    async with trio.open_nursery() as nursery:
        client = await McpClient.connect(entry("--sleep-ms", str(sleep_ms)), nursery)
        started = time.perf_counter()
        async with trio.open_nursery() as calls:
            for _ in range(n):
                calls.start_soon(client.call_tool, "echo", {"message": "hi"})
        elapsed = time.perf_counter() - started
        await client.aclose()
        nursery.cancel_scope.cancel()
    return elapsed


def sdk(calls: int, rounds: int) -> float | None:
    sdk_python = ROOT / ".peers" / "mcp-venv" / "bin" / "python"
    if not sdk_python.exists():
        return None
    out = subprocess.run([str(sdk_python), str(ROOT / "bench" / "sdk_client_calls.py"),
                          str(ROOT / "tests" / "fixtures" / "sdk_mcp_server.py"), str(calls // 5), str(rounds)],
                         capture_output=True, text=True, timeout=600, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    bare = trio.run(bare_loop, args.calls, args.rounds)
    tern = trio.run(tern_client, args.calls, args.rounds)
    sdk_call = sdk(args.calls, args.rounds)
    together = statistics.median(trio.run(concurrent) for _ in range(5))
    print(f"\n### MCP tools/call over stdio ({args.calls} sequential calls x {args.rounds} rounds, median)\n")
    print("| variant | ms per call | ratio to bare loop |")
    print("|---|---:|---:|")
    print(f"| bare trio loop, same echo server | {bare * 1000:.3f} | 1.00x |")
    print(f"| tern McpClient.call_tool | {tern * 1000:.3f} | {tern / bare:.2f}x |")
    if sdk_call is not None:
        print(f"| official SDK Client -> SDK MCPServer | {sdk_call * 1000:.3f} | {sdk_call / bare:.2f}x |")
    print(f"\n100 concurrent calls to a 50 ms server on one connection: {together:.3f} s (target < 0.5 s)")


if __name__ == "__main__":
    main()
