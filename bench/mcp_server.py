"""MCP server over stdio: `tern mcp` (the one-file app) against the official Python SDK's
MCPServer, side by side in one run. From the repository root:

    python3 bench/mcp_server.py [--runs 7] [--calls 2000] [--sdk-calls 300] [--rounds 3] [--json]

(Without trio importable, it re-runs itself under .venv/bin/python; the servers are
started with the plain CPython 3.11 interpreter, ``--python``.) dist/tern.pyz is built
with ``python3 build_pyz.py`` if missing; the SDK's venv comes from tests/peers.py
(``.peers/mcp-venv``, installed on first use).

The two servers, both on stdio (NDJSON), each exposing one echo tool:
- tern: ``python3 dist/tern.pyz mcp --standalone`` (an in-process kernel, never a relay),
  with XDG_STATE_HOME (or --state-dir), XDG_CONFIG_HOME and TERN_CACHE_DIR in a temp dir and a temp cwd,
  so it reads the bundled config and touches nothing under ~; tool ``tern_agent_echo``.
- SDK: ``MCPServer("demo")`` with ``@mcp.tool() def echo(message: str) -> str``, written
  to a temp file and run by the SDK venv's python; ``mcp.run()`` (stdio).

Measures (rounds interleaved tern, SDK, tern, SDK, ... so machine drift favours neither):
1. spawn -> initialize answer: from Popen until the answer line to one ``initialize``
   (protocolVersion 2025-11-25) arrives; median of --runs (after one warm-up round,
   which also fills tern's extraction cache).
2. memory: after initialize, notifications/initialized and an answered tools/list,
   VmRSS and VmHWM from /proc/<pid>/status of the spawned server (the python process
   itself, for both); median of the same runs.
3. tools/call echo with tern's own client (runtime.mcp.client.client.McpClient, protocol pinned
   to 2025-11-25, as bench/mcp_stdio.py does): each call timed alone, median over
   --calls sequential calls x --rounds connections (after 200 warm-up calls); the same
   client against the SDK server (--sdk-calls per round) for the SDK column.
4. tools/call echo with the official SDK client (``mcp.Client``, under trio, as in
   bench/sdk_client_calls.py): against `tern mcp` and against MCPServer, median over
   --sdk-calls x --rounds, with mode="legacy" (initialize handshake) and mode="auto"
   (server/discover first; both servers then speak 2026-07-28).

Targets (issue: MCP server): spawn -> initialize <= 0.25 s; RSS <= 35 MiB; tern's client
<= 0.3 ms per call; the SDK client's per-call time against tern <= 0.5x that against MCPServer.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

try:
    import msgspec  # noqa: F401  (tern's runtime needs it, and trio)
    import trio
except ImportError:  # plain python3 without the dev venv: re-run under the venv
    if VENV_PYTHON.exists() and os.environ.get("TERN_BENCH_REEXEC") != "1":
        os.environ["TERN_BENCH_REEXEC"] = "1"
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), *sys.argv])
    raise SystemExit("bench/mcp_server.py needs trio and msgspec: run it with .venv/bin/python")

sys.path.insert(0, str(ROOT))
from runtime.config import McpServerEntry, StdioTransport  # noqa: E402
from runtime.mcp.client.client import McpClient  # noqa: E402
from tests import peers  # noqa: E402
from harness import status_kib  # noqa: E402  (bench/ is sys.path[0] when a bench runs)

PROTOCOL = "2025-11-25"
TERN_TOOL = "tern_agent_echo"
SDK_TOOL = "echo"
WARMUP_CALLS = 200
SDK_WARMUP_CALLS = 30
TARGET_INIT_S = 0.25
TARGET_RSS_MIB = 35.0
TARGET_CALL_MS = 0.3
TARGET_SDK_RATIO = 0.5

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": PROTOCOL, "capabilities": {},
                         "clientInfo": {"name": "bench-mcp-server", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

SDK_SERVER = '''\
"""The official SDK's MCPServer with one echo tool (written by bench/mcp_server.py)."""
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("demo")


@mcp.tool()
def echo(message: str) -> str:
    """Reply with the message."""
    return message


if __name__ == "__main__":
    mcp.run()
'''

# Run in the SDK venv: the official client calling one tool, each call timed alone
# (the loop of bench/sdk_client_calls.py, parameterised by server, tool and mode).
SDK_CLIENT = '''\
import json, sys, time
import anyio
from mcp import Client, StdioServerParameters

async def main(spec):
    params = StdioServerParameters(command=spec["command"], args=spec["args"], env=spec["env"], cwd=spec["cwd"])
    async with Client(params, mode=spec["mode"]) as c:
        for _ in range(spec["warmup"]):
            await c.call_tool(spec["tool"], {"message": "warm"})
        samples = []
        for _ in range(spec["calls"]):
            t = time.perf_counter()
            result = await c.call_tool(spec["tool"], {"message": "hi"})
            samples.append(time.perf_counter() - t)
        if result.is_error or result.content[0].text != "hi":
            raise SystemExit(f"unexpected result: {result}")
        print(json.dumps({"samples": samples, "protocol": c.protocol_version}))

anyio.run(main, json.loads(sys.argv[1]), backend="trio")
'''


class Setup:
    """The temp dir, both servers' command lines and their environment."""

    def __init__(self, python: str, pyz: Path, sdk_python: Path, tmp: Path, state_dir: str = "") -> None:
        self.tmp = tmp
        self.cwd = tmp / "cwd"
        for sub in ("cwd", "state", "config", "cache"):
            (tmp / sub).mkdir()
        sdk_server = tmp / "sdk_echo_server.py"
        sdk_server.write_text(SDK_SERVER)
        (tmp / "sdk_client.py").write_text(SDK_CLIENT)
        self.sdk_python = str(sdk_python)
        self.extra_env = {"XDG_STATE_HOME": state_dir or str(tmp / "state"), "XDG_CONFIG_HOME": str(tmp / "config"),
                          "TERN_CACHE_DIR": str(tmp / "cache")}
        self.env = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR") if k in os.environ} | self.extra_env
        self.servers = {"tern": ([python, str(pyz), "mcp", "--standalone"], TERN_TOOL),
                        "sdk": ([self.sdk_python, str(sdk_server)], SDK_TOOL)}


# --- 1 + 2: spawn -> initialize, memory after tools/list ---------------------------------


class _Lines:
    """Lines from a pipe, read with os.read + select so a deadline holds."""

    def __init__(self, fd: int, label: str) -> None:
        self.fd, self.label, self.buf = fd, label, b""

    def answer(self, want_id: int, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" not in self.buf:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([self.fd], [], [], remaining)[0]:
                    raise SystemExit(f"{self.label}: no answer to request {want_id} in {timeout} s")
                data = os.read(self.fd, 65536)
                if not data:
                    raise SystemExit(f"{self.label}: exited before answering request {want_id}")
                self.buf += data
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == want_id:
                if "result" not in message:
                    raise SystemExit(f"{self.label}: request {want_id} failed: {message}")
                return message


def handshake(setup: Setup, name: str) -> dict:
    """One spawn: seconds to the initialize answer, then memory once tools/list is answered."""
    argv, tool = setup.servers[name]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=setup.env, cwd=setup.cwd, bufsize=0)
    lines = _Lines(proc.stdout.fileno(), name)
    try:
        proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        lines.answer(0)
        seconds = time.perf_counter() - started
        proc.stdin.write((json.dumps(INITIALIZED) + "\n" + json.dumps(TOOLS_LIST) + "\n").encode())
        tools = lines.answer(1)["result"]["tools"]
        if tool not in [t["name"] for t in tools]:
            raise SystemExit(f"{name}: tools/list has no {tool}: {[t['name'] for t in tools]}")
        memory = status_kib(proc.pid, "VmRSS", "VmHWM")
        return {"init_s": seconds, "rss_kib": memory["VmRSS"], "hwm_kib": memory["VmHWM"]}
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def measure_handshakes(setup: Setup, runs: int, warmup: int = 1) -> dict:
    samples = {name: [] for name in setup.servers}
    for round_no in range(warmup + runs):
        for name in setup.servers:
            sample = handshake(setup, name)
            if round_no >= warmup:
                samples[name].append(sample)
    return samples


# --- 3: tern's own client ------------------------------------------------------------------


def entry(setup: Setup, name: str) -> McpServerEntry:
    argv, _ = setup.servers[name]
    return McpServerEntry(name=name, transport=StdioTransport(command=argv[0], args=argv[1:], cwd=str(setup.cwd)),
                          env=list(setup.extra_env), protocol=PROTOCOL)


async def _keep_spawning_thread(period: float = 1.0) -> None:
    """Keep trio's cached worker thread busy now and then.

    tern's StdioTransport spawns with PR_SET_PDEATHSIG, and trio.lowlevel.open_process runs
    Popen in a trio.to_thread worker: the death signal is tied to that *thread*, which
    trio's thread cache ends after 10 s idle (IDLE_TIMEOUT), so the server gets SIGKILL
    about 10 s after it was spawned. A no-op in a thread each second reuses (and so keeps)
    the single idle worker; the per-call path measured is unchanged."""
    while True:
        await trio.to_thread.run_sync(lambda: None)
        await trio.sleep(period)


async def tern_client_calls(setup: Setup, name: str, calls: int) -> list:
    """Seconds per call, each timed alone, over one connection after a warm-up."""
    tool = setup.servers[name][1]
    os.environ.update(setup.extra_env)  # the client passes these names through to the server
    async with trio.open_nursery() as nursery:
        client = await McpClient.connect(entry(setup, name), nursery)
        nursery.start_soon(_keep_spawning_thread)
        for _ in range(WARMUP_CALLS):
            await client.call_tool(tool, {"message": "warm"})
        samples = []
        perf_counter = time.perf_counter
        for _ in range(calls):
            started = perf_counter()
            result = await client.call_tool(tool, {"message": "hi"})
            samples.append(perf_counter() - started)
        if result.is_error or "hi" not in json.dumps(result.content):
            raise SystemExit(f"{name}: unexpected result {result}")
        await client.aclose()
        nursery.cancel_scope.cancel()
    return samples


# --- 4: the official SDK client ------------------------------------------------------------


def sdk_client_calls(setup: Setup, name: str, mode: str, calls: int) -> tuple:
    argv, tool = setup.servers[name]
    spec = {"command": argv[0], "args": argv[1:], "env": setup.env, "cwd": str(setup.cwd), "mode": mode,
            "tool": tool, "calls": calls, "warmup": SDK_WARMUP_CALLS}
    done = subprocess.run([setup.sdk_python, str(setup.tmp / "sdk_client.py"), json.dumps(spec)],
                          capture_output=True, text=True, timeout=300, cwd=setup.cwd)
    if done.returncode != 0:
        raise SystemExit(f"SDK client -> {name} ({mode}): exit {done.returncode}\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["samples"], out["protocol"]


# --- report --------------------------------------------------------------------------------


def _stats(samples: list) -> dict:
    return {"median": statistics.median(samples), "mean": statistics.fmean(samples),
            "min": min(samples), "max": max(samples), "n": len(samples)}


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def report(r: dict, args: argparse.Namespace) -> list:
    """The table's rows: (measure, tern, sdk, ratio, target)."""
    med = statistics.median
    rows = []
    init = {n: med(s["init_s"] for s in r["handshake"][n]) for n in ("tern", "sdk")}
    rows.append((f"spawn -> initialize answer, ms (median of {args.runs})", f"{init['tern'] * 1000:.0f}",
                 f"{init['sdk'] * 1000:.0f}", f"{init['tern'] / init['sdk']:.2f}x",
                 f"tern <= {TARGET_INIT_S * 1000:.0f} ms: {_verdict(init['tern'] <= TARGET_INIT_S)}"))
    rss = {n: med(s["rss_kib"] for s in r["handshake"][n]) / 1024 for n in ("tern", "sdk")}
    rows.append(("VmRSS after tools/list, MiB", f"{rss['tern']:.1f}", f"{rss['sdk']:.1f}",
                 f"{rss['tern'] / rss['sdk']:.2f}x",
                 f"tern <= {TARGET_RSS_MIB:.0f} MiB: {_verdict(rss['tern'] <= TARGET_RSS_MIB)}"))
    hwm = {n: med(s["hwm_kib"] for s in r["handshake"][n]) / 1024 for n in ("tern", "sdk")}
    rows.append(("VmHWM (peak RSS) after tools/list, MiB", f"{hwm['tern']:.1f}", f"{hwm['sdk']:.1f}",
                 f"{hwm['tern'] / hwm['sdk']:.2f}x", ""))
    own = {n: r["tern_client"][n]["median"] * 1000 for n in ("tern", "sdk")}
    rows.append((f"tools/call echo, tern McpClient, ms/call (median of {r['tern_client']['tern']['n']} "
                 f"/ {r['tern_client']['sdk']['n']})", f"{own['tern']:.3f}", f"{own['sdk']:.3f}",
                 f"{own['tern'] / own['sdk']:.2f}x",
                 f"tern <= {TARGET_CALL_MS} ms: {_verdict(own['tern'] <= TARGET_CALL_MS)}"))
    for mode in ("legacy", "auto"):
        sdk = {n: r["sdk_client"][mode][n]["median"] * 1000 for n in ("tern", "sdk")}
        ratio = sdk["tern"] / sdk["sdk"]
        rows.append((f'tools/call echo, SDK Client mode="{mode}", ms/call (median of '
                     f"{r['sdk_client'][mode]['tern']['n']})", f"{sdk['tern']:.3f}", f"{sdk['sdk']:.3f}",
                     f"{ratio:.2f}x", f"<= {TARGET_SDK_RATIO}x: {_verdict(ratio <= TARGET_SDK_RATIO)}"))
    return rows


def print_report(r: dict, args: argparse.Namespace) -> None:
    print(f"\n### MCP server over stdio: `tern mcp` vs the official SDK's MCPServer "
          f"({os.cpu_count()} CPUs, {r['python_version']})\n")
    print("| measure | tern | SDK MCPServer | ratio | target |")
    print("|---|---:|---:|---:|---|")
    for row in report(r, args):
        print("| " + " | ".join(row) + " |")
    print("\nMeans, ms/call (tern / SDK MCPServer): tern McpClient "
          f"{r['tern_client']['tern']['mean'] * 1000:.3f} / {r['tern_client']['sdk']['mean'] * 1000:.3f}; "
          + "; ".join(f'SDK Client "{mode}" {r["sdk_client"][mode]["tern"]["mean"] * 1000:.3f} / '
                      f'{r["sdk_client"][mode]["sdk"]["mean"] * 1000:.3f}' for mode in ("legacy", "auto")))
    print("Negotiated by the SDK Client (tern / SDK MCPServer): "
          + "; ".join(f'"{mode}" {r["protocols"][mode]["tern"]} / {r["protocols"][mode]["sdk"]}'
                      for mode in ("legacy", "auto")))
    print(f"pyz: {r['pyz']} ({r['pyz_mb']:.2f} MB), servers run by {r['python']}, tern's state in "
          f"{r['state_dir']}; wall time {r['wall_s']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="spawns per server for measures 1 and 2")
    parser.add_argument("--calls", type=int, default=2000, help="tern client calls to tern mcp per round")
    parser.add_argument("--sdk-calls", type=int, default=300, help="calls per round against/with the SDK")
    parser.add_argument("--rounds", type=int, default=3, help="connections per client/server pair, interleaved")
    parser.add_argument("--python", default=os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
                        help="interpreter for the pyz (a real binary, not a pyenv shim)")
    parser.add_argument("--pyz", default=str(ROOT / "dist" / "tern.pyz"))
    parser.add_argument("--state-dir", default="",
                        help="tern's XDG_STATE_HOME (default: in the temp dir); e.g. a fresh dir on tmpfs "
                             "(/dev/shm/...) to see the calls without fsync")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON instead of the table")
    args = parser.parse_args()

    wall = time.perf_counter()
    pyz = Path(args.pyz)
    if not pyz.is_file():
        print(f"{pyz} is missing: building it (python3 build_pyz.py)", file=sys.stderr)
        subprocess.run([args.python, str(ROOT / "build_pyz.py"), "--out", str(pyz)], cwd=ROOT, check=True)
    sdk_python = peers.mcp_sdk_python()

    tmp = Path(tempfile.mkdtemp(prefix="tern-bench-mcp-server-"))
    try:
        setup = Setup(args.python, pyz, sdk_python, tmp, args.state_dir)
        r = {"handshake": measure_handshakes(setup, args.runs)}

        own = {"tern": [], "sdk": []}
        for _ in range(args.rounds):
            own["tern"] += trio.run(tern_client_calls, setup, "tern", args.calls)
            own["sdk"] += trio.run(tern_client_calls, setup, "sdk", args.sdk_calls)
        r["tern_client"] = {n: _stats(s) for n, s in own.items()}

        r["sdk_client"], r["protocols"] = {}, {}
        for mode in ("legacy", "auto"):
            calls = {"tern": [], "sdk": []}
            r["protocols"][mode] = {}
            for _ in range(args.rounds):
                for name in calls:
                    samples, protocol = sdk_client_calls(setup, name, mode, args.sdk_calls)
                    calls[name] += samples
                    r["protocols"][mode][name] = protocol
            r["sdk_client"][mode] = {n: _stats(s) for n, s in calls.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    r.update(python=args.python, state_dir=args.state_dir or "a temp dir",
             python_version=f"CPython {sys.version.split()[0]}", pyz=str(pyz),
             pyz_mb=pyz.stat().st_size / 1e6, wall_s=time.perf_counter() - wall)
    if args.json:
        r["table"] = [dict(zip(("measure", "tern", "sdk", "ratio", "target"), row)) for row in report(r, args)]
        print(json.dumps(r, indent=2))
    else:
        print_report(r, args)


if __name__ == "__main__":
    main()
