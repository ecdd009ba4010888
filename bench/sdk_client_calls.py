"""Run inside the mcp SDK venv: the official client calling `add` N times over stdio
against the official MCPServer. Prints seconds per call (median of rounds)."""
import statistics
import sys
import time
import anyio
from mcp import Client, StdioServerParameters

async def main(server, calls, rounds):
    async with Client(StdioServerParameters(command=sys.executable, args=[server]), mode="legacy") as c:
        await c.call_tool("add", {"a": 1, "b": 2})
        per_call = []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(calls):
                await c.call_tool("add", {"a": 1, "b": 2})
            per_call.append((time.perf_counter() - t) / calls)
        print(statistics.median(per_call))

anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), backend="trio")
