"""Scale-out: what the shared PostgreSQL store costs one node, and what several nodes behind
HAProxy serve, side by side in one run. From the repo root:

    .venv/bin/python bench/scaleout.py [--requests 1000] [--warmup 50] [--runs 3]
                                       [--duration 10] [--connections 16]

About 2-3 minutes on a 2-core box. Needs Debian's PostgreSQL and HAProxy (the tests'
tests/pg.py and tests/haproxy.py start them; ``.ci/run`` installs both) and wrk (installed
with apt-get when missing and running as root, as bench/http_server.py does).

Measures:
1. Sequential ``SendMessage`` (JSON-RPC 1.0, blocking, an echo agent) on ONE node over one
   keep-alive connection (the raw-socket client of bench/a2a_server.py), after --warmup
   uncounted requests: median and p90 latency and requests/s, for ``[state] store = "sqlite"``
   (the default: tasks in memory, conversations in SQLite) and ``store = "postgres"`` (tasks,
   their events, conversations in one local PostgreSQL 15, fsync on, over loopback TCP).
   Interleaved over --runs runs (sqlite, postgres, sqlite, ...), each a fresh node and, for
   PostgreSQL, a fresh database; medians of the runs. Target: PostgreSQL adds <= 2 ms median.
2. Requests/s through HAProxy (round robin) to 1, 2 and 3 nodes on one database: wrk with
   --connections keep-alive connections for --duration s, each request a SendMessage with its
   own message id (a Lua request hook), after a 2 s warm-up. Every node, HAProxy, PostgreSQL
   and wrk share this machine's cores, so more nodes only help while a core is idle.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from a2a_server import A2A_HEADER, COMPLETED, Client, percentile  # noqa: E402  (bench/ is sys.path[0])
from http_server import DONE_HOOK, RESULT_LINE, ensure_wrk  # noqa: E402

from tests.pg import PgServer  # noqa: E402
from tests.scaleout.cluster import API_KEY, Cluster  # noqa: E402

TARGET_PG_MS = 2.0

NODE_CONFIG = """\
[server]
listen = "127.0.0.1:{port}"
rate_limit_per_sec = 0
[state]
dir = "{state}"
{store}
[a2a]
enabled = true
default_agent = "echo"
[[agents]]
name = "echo"
kind = "echo"
"""

WRK_SCRIPT = """\
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
wrk.headers["Authorization"] = "Bearer %(key)s"
local threads = 0
setup = function(thread) threads = threads + 1; thread:set("tid", threads) end
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, "/a2a", nil, string.format('{"jsonrpc":"2.0","id":%%d,"method":"SendMessage",' ..
    '"params":{"message":{"messageId":"w-%%d-%%d","role":"ROLE_USER","parts":[{"text":"hello"}]}}}', n, tid, n))
end
""" + DONE_HOOK


def body(n: int) -> bytes:
    return (b'{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":{"messageId":"b-%d-%d",'
            b'"role":"ROLE_USER","parts":[{"text":"hello"}]}}}' % (n, os.getpid(), n))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_node(scratch: Path, store: str, pg: PgServer) -> tuple[subprocess.Popen, int]:
    """A fresh ``tern serve`` with the echo agent and the given store; (process, port)."""
    state = Path(tempfile.mkdtemp(dir=scratch))
    port = free_port()
    line = f'store = "postgres"\npostgres_url = "{pg.create_database()}"' if store == "postgres" else ""
    config = state / "config.toml"
    config.write_text(NODE_CONFIG.format(port=port, state=state / "state", store=line))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env.update(PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(state / "xdg"))
    log = state / "serve.log"
    process = subprocess.Popen([sys.executable, "-m", "runtime", "--config", str(config), "serve"], env=env,
                               stdin=subprocess.DEVNULL, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 60
    while "serving on" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{store} node did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return process, port


def sequential(port: int, requests: int, warmup: int) -> dict:
    client = Client(port)
    try:
        latencies = []
        started = None
        for n in range(warmup + requests):
            if n == warmup:
                started = time.perf_counter()
            t0 = time.perf_counter()
            status, answer = client.post("/a2a", body(n), A2A_HEADER)
            if status != 200 or COMPLETED not in answer:
                raise RuntimeError(f"SendMessage #{n}: HTTP {status}: {answer[:300]!r}")
            if n >= warmup:
                latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
    finally:
        client.close()
    latencies.sort()
    return {"p50": statistics.median(latencies) * 1000, "p90": percentile(latencies, 90) * 1000,
            "rps": requests / elapsed}


def balanced(wrk: str, script: Path, cluster: Cluster, connections: int, seconds: int) -> tuple:
    def run(secs: int) -> tuple:
        argv = [wrk, "-t2", f"-c{connections}", f"-d{secs}s", "--timeout", "10s", "-s", str(script),
                f"{cluster.url}/a2a"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=secs + 60)
        found = RESULT_LINE.search(done.stdout)
        if done.returncode != 0 or not found:
            raise RuntimeError(f"wrk exited {done.returncode}: {done.stdout}{done.stderr}")
        return float(found.group(1)), float(found.group(2)), float(found.group(3)), int(found.group(5)), \
            int(found.group(6))

    run(2)
    return run(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk cell")
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    wrk = ensure_wrk()
    pg_root = Path(tempfile.mkdtemp(prefix="tern-pg-"))  # the postgres user reads it: not under a 0700 dir
    scratch = Path(tempfile.mkdtemp(prefix="tern-bench-scaleout-"))
    pg = PgServer.start(pg_root)
    try:
        print(f"PostgreSQL {pg_root} on port {pg.port}; {os.cpu_count()} cores; load average "
              f"{os.getloadavg()[0]:.2f}\n")
        runs: dict[str, list[dict]] = {"sqlite": [], "postgres": []}
        for _ in range(args.runs):
            for store in runs:
                process, port = one_node(scratch, store, pg)
                try:
                    runs[store].append(sequential(port, args.requests, args.warmup))
                finally:
                    process.terminate()
                    process.wait(15)
        print(f"1. Sequential SendMessage on one node ({args.requests} requests, medians of {args.runs} runs)\n")
        print("| store | median ms | p90 ms | requests/s |")
        print("|---|---:|---:|---:|")
        median = {s: {k: statistics.median(r[k] for r in rs) for k in ("p50", "p90", "rps")} for s, rs in runs.items()}
        for store, m in median.items():
            print(f"| {store} | {m['p50']:.2f} | {m['p90']:.2f} | {m['rps']:.0f} |")
        added = median["postgres"]["p50"] - median["sqlite"]["p50"]
        print(f"\nPostgreSQL adds {added:.2f} ms median (target <= {TARGET_PG_MS:g} ms): "
              f"{'met' if added <= TARGET_PG_MS else 'NOT met'}\n")

        script = scratch / "send.lua"
        script.write_text(WRK_SCRIPT % {"key": API_KEY})
        print(f"2. SendMessage through HAProxy, wrk -t2 -c{args.connections} -d{args.duration}s\n")
        print("| nodes | requests/s | p50 ms | p99 ms | errors | non-2xx |")
        print("|---|---:|---:|---:|---:|---:|")
        for count in (1, 2, 3):
            with Cluster(Path(tempfile.mkdtemp(dir=scratch)), pg.create_database(), nodes=count) as cluster:
                rps, p50, p99, errors, non2xx = balanced(wrk, script, cluster, args.connections, args.duration)
            print(f"| {count} | {rps:.0f} | {p50:.1f} | {p99:.1f} | {errors} | {non2xx} |")
    finally:
        pg.stop()
        shutil.rmtree(pg_root, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
