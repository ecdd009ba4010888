"""MCP boot with 5 stdio servers: tern's all-ready time against each server's own handshake.

    .venv/bin/python bench/mcp_boot.py [--runs 7] [--warmup 1] [--scenario real|latency|both|tern-mcp]

Scenarios (default both, each printed as its own tables):
- real: server-everything, server-filesystem, server-memory (npm, under node), the
  official Python SDK server (tests/fixtures/sdk_mcp_server.py, in .peers/mcp-venv) and
  tests/fixtures/fake_mcp_server.py (stdlib, under this venv's python). Their start-up is
  CPU-bound, so on a small machine the bare concurrent boot already exceeds the target.
- latency: five tests/fixtures/fake_mcp_server.py with ``--init-delay`` 0.1 .. 0.5 s. They
  sleep, not compute, before answering initialize, so there is no CPU contention and the
  ratio isolates tern's own orchestration overhead. The fake server ignores
  ``server/discover`` (a silent legacy server): "auto" pays ping + PING_GRACE_SECS.

Variants, interleaved round by round:
- own handshake: a bare trio client per server, alone: spawn, one ``initialize`` line,
  read the answer (timed here), ``notifications/initialized``, kill. No tern code. Run
  with the same cleared environment tern gives a server; its CPU (user + sys) is shown.
- CPU floor: the five servers' own start-up CPU over the machine's CPUs.
- bare, all 5 at once: the same five bare clients started together; the floor for any
  concurrent boot on this machine (the servers compete for CPU while starting).
- tern auto: McpSupervisor with ``protocol = "auto"`` (as users configure it), from
  start until every server is "ready" (negotiated *and* tools listed).
- tern pinned: the same with ``protocol = "2025-11-25"`` (no era probe).

Target (issue: MCP client): all ready within 1.3x the slowest server's own handshake.

Scenario tern-mcp (not part of "both"): tern as the server. Spawn ``tern mcp`` and time
until its initialize answer, on each CPython 3.10-3.13 found, from dist/tern.pyz (warm
cache, an empty venv of that Python) and from a venv with the runtime dependencies
(``python -m runtime mcp``; venvs as bench/start.py makes them). Target (issue: daily
use): the pyz <= 0.25 s median, and within 1.3x of the venv.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from runtime.config import McpServerEntry, StdioTransport  # noqa: E402
from runtime.mcp.client.session import PING_GRACE_SECS  # noqa: E402
from runtime.mcp.client.supervisor import McpSupervisor  # noqa: E402
from tests import peers  # noqa: E402

TARGET = 1.3
FIXTURES = ROOT / "tests" / "fixtures"
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "bench-baseline", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def real_servers(tmp: Path) -> dict:
    """name -> (argv, env names passed through)."""
    npm, node = peers.npm_servers(), str(peers.node())
    os.environ["MEMORY_FILE_PATH"] = str(tmp / "memory.jsonl")
    (tmp / "files").mkdir(exist_ok=True)
    return {
        "everything": ([node, str(npm["server-everything"]), "stdio"], []),
        "filesystem": ([node, str(npm["server-filesystem"]), str(tmp / "files")], []),
        "memory": ([node, str(npm["server-memory"])], ["MEMORY_FILE_PATH"]),
        "sdk": ([str(peers.mcp_sdk_python()), str(FIXTURES / "sdk_mcp_server.py")], []),
        "fake": ([sys.executable, str(FIXTURES / "fake_mcp_server.py")], []),
    }


def latency_servers() -> dict:
    """Five idle fake servers that answer initialize after 0.1 .. 0.5 s."""
    fake = [sys.executable, str(FIXTURES / "fake_mcp_server.py"), "--init-delay"]
    return {f"fake-{ms}ms": (fake + [f"{ms / 1000}"], []) for ms in (100, 200, 300, 400, 500)}


def clean_env(names: list) -> dict:
    """The environment tern gives a stdio server (PATH, HOME, temp dirs + the entry's ``env``).
    The bare client uses it too: e.g. NODE_EXTRA_CA_CERTS alone adds ~50 ms to each node start."""
    return {k: os.environ[k] for k in ("PATH", "HOME", "TMP", "TEMP", "TMPDIR", *names) if k in os.environ}


async def own_handshake(argv: list, env: list, full_env: dict | None = None, cwd: str | None = None) -> float:
    """Seconds from spawn to the initialize answer, with a bare client."""
    started = time.perf_counter()
    proc = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, env=full_env or clean_env(env), cwd=cwd)
    try:
        await proc.stdin.send_all(json.dumps(INITIALIZE).encode() + b"\n")
        buf = b""
        while True:
            while b"\n" not in buf:
                data = await proc.stdout.receive_some(65536)
                if not data:
                    raise SystemExit(f"{argv}: exited before answering initialize")
                buf += data
            line, buf = buf.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == 0:
                break
        elapsed = time.perf_counter() - started
        if "result" not in message:
            raise SystemExit(f"{argv}: initialize failed: {message}")
        await proc.stdin.send_all(json.dumps(INITIALIZED).encode() + b"\n")
        return elapsed
    finally:
        proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()


async def bare_all(specs: dict) -> float:
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for argv, env in specs.values():
            nursery.start_soon(own_handshake, argv, env)
    return time.perf_counter() - started


async def tern_boot(specs: dict, protocol: str) -> tuple:
    """(seconds until all ready, {server: (seconds until that one was ready, version)})."""
    entries = [McpServerEntry(name=name, transport=StdioTransport(command=argv[0], args=argv[1:]),
                              env=env, protocol=protocol, restart="never")
               for name, (argv, env) in specs.items()]
    async with trio.open_nursery() as nursery:
        supervisor = McpSupervisor(entries)
        t0 = time.monotonic()
        started = time.perf_counter()
        await nursery.start(supervisor.run)
        await supervisor.wait_settled()
        elapsed = time.perf_counter() - started
        statuses = supervisor.statuses()
        bad = [f"{s.name}: {s.state} {s.last_error}" for s in statuses if s.state != "ready"]
        if bad:
            raise SystemExit(f"tern ({protocol}) did not get every server ready: {bad}")
        each = {s.name: (s.ready_since - t0, s.protocol_version) for s in statuses}
        await supervisor.aclose()
    return elapsed, each


def measure(specs: dict, runs: int, warmup: int) -> dict:
    """Every variant, interleaved round by round; the kept rounds' samples."""
    r = {"own": {name: [] for name in specs}, "cpu": {name: [] for name in specs},
         "together": [], "tern": {"auto": [], "2025-11-25": []}, "versions": {}}
    r["tern_each"] = {p: {name: [] for name in specs} for p in r["tern"]}
    for round_no in range(warmup + runs):
        keep = round_no >= warmup
        for name, (argv, env) in specs.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds = trio.run(own_handshake, argv, env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if keep:
                r["own"][name].append(seconds)
                r["cpu"][name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        seconds = trio.run(bare_all, specs)
        if keep:
            r["together"].append(seconds)
        for protocol in r["tern"]:
            seconds, each = trio.run(tern_boot, specs, protocol)
            if keep:
                r["tern"][protocol].append(seconds)
                for name, (s, version) in each.items():
                    r["tern_each"][protocol][name].append(s)
                    r["versions"].setdefault(protocol, {})[name] = version
    return r


def report(title: str, r: dict, runs: int, auto_label: str) -> None:
    own, cpu, tern, tern_each = r["own"], r["cpu"], r["tern"], r["tern_each"]
    med = statistics.median
    ms = lambda seconds: f"{seconds * 1000:.0f}"  # noqa: E731
    slowest_name = max(own, key=lambda n: med(own[n]))
    slowest = med(own[slowest_name])
    print(f"\n### {title} ({runs} runs, median; {os.cpu_count()} CPUs)\n")
    print("| variant | all ready ms | ratio to slowest own handshake | target |")
    print("|---|---:|---:|---:|")
    print(f"| slowest own handshake ({slowest_name}) | {ms(slowest)} | 1.00x | |")
    floor = sum(med(c) for c in cpu.values()) / (os.cpu_count() or 1)
    print(f"| CPU floor: servers' start-up CPU / {os.cpu_count()} CPUs | {ms(floor)} | {floor / slowest:.2f}x | |")
    together = med(r["together"])
    print(f"| bare clients, all 5 at once | {ms(together)} | {together / slowest:.2f}x | |")
    for protocol, label in (("auto", auto_label),
                            ("2025-11-25", 'tern, protocol = "2025-11-25" (no probe)')):
        ratio = med(tern[protocol]) / slowest
        verdict = "ok" if ratio <= TARGET else "MISSED"
        print(f"| {label} | {ms(med(tern[protocol]))} | {ratio:.2f}x | {TARGET}x {verdict} |")
    print("\nPer server (ms, median). tern columns: from supervisor start until that server was ready"
          " (probe/initialize + tools/list), all five booting together.\n")
    print("| server | own handshake | min | max | its CPU | tern auto | auto negotiated | tern pinned |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for name in own:
        print(f"| {name} | {ms(med(own[name]))} | {ms(min(own[name]))} | {ms(max(own[name]))} | {ms(med(cpu[name]))} "
              f"| {ms(med(tern_each['auto'][name]))} | {r['versions']['auto'][name]} "
              f"| {ms(med(tern_each['2025-11-25'][name]))} |")


def tern_mcp(runs: int, warmup: int, pyz: Path) -> None:
    """``tern mcp`` spawn -> initialize answer, pyz (warm) against venv, per Python."""
    import shutil

    from start import PYTHONS, deps_venv, empty_venv, find_python

    if not pyz.is_file():
        raise SystemExit(f"{pyz} is missing: run `python3 build_pyz.py` first")
    med = statistics.median
    rows = []
    with tempfile.TemporaryDirectory(prefix="tern-mcp-boot-") as tmp:
        scratch = Path(tmp)
        for version in PYTHONS:
            python = find_python(version)
            if python is None:
                print(f"(no CPython {version} here: skipped)")
                continue
            venv_python = deps_venv(python, version)
            pyz_python = empty_venv(python, scratch / f"empty-{version}")
            env = {"PATH": os.environ.get("PATH", ""), "HOME": str(scratch), "TERN_CACHE_DIR": str(scratch / "cache")}
            sides = {"venv": ([venv_python, "-m", "runtime", "mcp", "--standalone"], str(ROOT)),
                     "pyz": ([pyz_python, "-I", str(pyz), "mcp", "--standalone"], str(scratch))}
            samples: dict = {side: [] for side in sides}
            for round_no in range(warmup + runs):
                for side, (argv, cwd) in sides.items():
                    seconds = trio.run(own_handshake, argv, [], env, cwd)
                    if round_no >= warmup:
                        samples[side].append(seconds)
            rows.append((version, med(samples["venv"]), med(samples["pyz"])))
        shutil.rmtree(scratch / "cache", ignore_errors=True)
    print(f"\n### tern mcp: spawn -> initialize answer ({runs} runs, median, warm cache)\n")
    print("| Python | venv ms | pyz ms | pyz / venv | target |")
    print("|---|---:|---:|---:|---|")
    for version, venv, pyz_s in rows:
        verdict = "ok" if pyz_s <= 0.25 and pyz_s / venv <= TARGET else "MISSED"
        print(f"| {version} | {venv * 1000:.0f} | {pyz_s * 1000:.0f} | {pyz_s / venv:.2f}x "
              f"| <= 250 ms and <= {TARGET}x {verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--scenario", choices=("real", "latency", "both", "tern-mcp"), default="both")
    parser.add_argument("--pyz", default=str(ROOT / "dist" / "tern.pyz"), help="tern-mcp: the pyz (dist/tern.pyz)")
    args = parser.parse_args()
    if args.scenario == "tern-mcp":
        tern_mcp(args.runs, args.warmup, Path(args.pyz).resolve())
        return
    if args.scenario in ("real", "both"):
        with tempfile.TemporaryDirectory(prefix="tern-boot-") as tmp:
            r = measure(real_servers(Path(tmp)), args.runs, args.warmup)
        report("MCP boot, 5 real stdio servers", r, args.runs,
               'tern, protocol = "auto" (+1 probe round trip)')
    if args.scenario in ("latency", "both"):
        r = measure(latency_servers(), args.runs, args.warmup)
        report("MCP boot, 5 idle fake servers, --init-delay 0.1 .. 0.5 s (no CPU contention)", r, args.runs,
               f'tern, protocol = "auto" (silent servers: + ping round trip + {PING_GRACE_SECS} s grace)')
    print('\nNote: protocol = "auto" on stdio sends server/discover + ping first; a handshake-era server'
          " that answers discover with an error costs one extra round trip, one that ignores it costs"
          f" the ping round trip plus a {PING_GRACE_SECS} s grace (PING_GRACE_SECS) before initialize.")


if __name__ == "__main__":
    main()
