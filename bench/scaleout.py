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
   own message id (a Lua request hook; a Lua response hook counts every answer that is not a
   completed task as failed), after a 2 s warm-up; and the CPU seconds the nodes, PostgreSQL
   (postmaster and backends), HAProxy and wrk used during the run. Every node, HAProxy,
   PostgreSQL and wrk share this machine's cores, so more nodes only help while a core is idle.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
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
wrk.headers["Authorization"] = "Bearer API_KEY"
local threads = {}
setup = function(thread) table.insert(threads, thread); thread:set("tid", #threads) end
local n = 0
bad = 0
response = function(status, headers, body)
  if not string.find(body, "TASK_STATE_COMPLETED", 1, true) then bad = bad + 1 end
end
request = function()
  n = n + 1
  return wrk.format(nil, "/a2a", nil, string.format('{"jsonrpc":"2.0","id":%d,"method":"SendMessage",' ..
    '"params":{"message":{"messageId":"w-%d-%d","role":"ROLE_USER","parts":[{"text":"hello"}]}}}', n, tid, n))
end
""" + DONE_HOOK.replace("done = function(summary, latency, requests)", """done = function(summary, latency, requests)
  local failed = 0
  for _, thread in ipairs(threads) do failed = failed + thread:get("bad") end
  io.write(string.format("TERN_BENCH_FAILED %d\\n", failed))""")


def body(n: int) -> bytes:
    return (b'{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":{"messageId":"b-%d-%d",'
            b'"role":"ROLE_USER","parts":[{"text":"hello"}]}}}' % (n, os.getpid(), n))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_transactions(url: str) -> int:
    """Write transactions committed or begun in the whole server so far: the next
    transaction id (``pg_snapshot_xmax``; reading it takes none). Counted this way, not
    from ``pg_stat_database``, whose counters backends report up to seconds late."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()[0])


def one_node(scratch: Path, store: str, pg: PgServer) -> tuple[subprocess.Popen, int, str]:
    """A fresh ``tern serve`` with the echo agent and the given store; (process, port, database URL)."""
    state = Path(tempfile.mkdtemp(dir=scratch))
    port = free_port()
    url = pg.create_database() if store == "postgres" else ""
    line = f'store = "postgres"\npostgres_url = "{url}"' if url else ""
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
    return process, port, url


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


def cpu_secs(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (``/proc/<pid>/stat``)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def postgres_pids(pg: PgServer) -> list[int]:
    """The postmaster and its children (one backend per pooled connection)."""
    main = int((pg.data / "postmaster.pid").read_text().split()[0])
    children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(int(p.name)) == main]
    return [main, *children]


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, IndexError, ValueError):
        return 0


def balanced(wrk: str, script: Path, cluster: Cluster, pg: PgServer, connections: int, seconds: int) -> dict:
    def run(secs: int) -> dict:
        argv = [wrk, "-t2", f"-c{connections}", f"-d{secs}s", "--timeout", "10s", "-s", str(script),
                f"{cluster.url}/a2a"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=secs + 60)
        found = RESULT_LINE.search(done.stdout)
        failed = re.search(r"^TERN_BENCH_FAILED (\d+)$", done.stdout, re.M)
        if done.returncode != 0 or not found or not failed:
            raise RuntimeError(f"wrk exited {done.returncode}: {done.stdout}{done.stderr}")
        return {"rps": float(found.group(1)), "p50": float(found.group(2)), "p99": float(found.group(3)),
                "errors": int(found.group(5)) + int(found.group(6)), "failed": int(failed.group(1))}

    run(2)
    groups = {"nodes": [n.pid for n in cluster.nodes], "PostgreSQL": postgres_pids(pg),
              "HAProxy": [cluster.proxy.process.pid]}
    before = {name: cpu_secs(pids) for name, pids in groups.items()}
    wrk_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run(seconds)
    wrk_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["cpu"] = {name: cpu_secs(pids) - before[name] for name, pids in groups.items()}
    result["cpu"]["wrk"] = (wrk_after.ru_utime + wrk_after.ru_stime) - (wrk_before.ru_utime + wrk_before.ru_stime)
    return result


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
                process, port, url = one_node(scratch, store, pg)
                try:
                    before = write_transactions(url) if url else 0
                    runs[store].append(sequential(port, args.requests, args.warmup))
                    # the node's own background transactions (lease renewals) are in it too: a handful
                    writes = write_transactions(url) - before if url else 0
                    runs[store][-1]["writes"] = writes / (args.requests + args.warmup)
                finally:
                    process.terminate()
                    process.wait(15)
        print(f"1. Sequential SendMessage on one node ({args.requests} requests, medians of {args.runs} runs)\n")
        print("| store | median ms | p90 ms | requests/s | PostgreSQL write transactions per request |")
        print("|---|---:|---:|---:|---:|")
        median = {s: {k: statistics.median(r[k] for r in rs) for k in ("p50", "p90", "rps", "writes")}
                  for s, rs in runs.items()}
        for store, m in median.items():
            print(f"| {store} | {m['p50']:.2f} | {m['p90']:.2f} | {m['rps']:.0f} | {m['writes']:.1f} |")
        added = median["postgres"]["p50"] - median["sqlite"]["p50"]
        print(f"\nPostgreSQL adds {added:.2f} ms median (target <= {TARGET_PG_MS:g} ms): "
              f"{'met' if added <= TARGET_PG_MS else 'NOT met'}\n")

        script = scratch / "send.lua"
        script.write_text(WRK_SCRIPT.replace("API_KEY", API_KEY))
        print(f"2. SendMessage through HAProxy, wrk -t2 -c{args.connections} -d{args.duration}s\n")
        print("| nodes | requests/s | p50 ms | p99 ms | failed | CPU s: nodes | PostgreSQL | HAProxy | wrk |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for count in (1, 2, 3):
            with Cluster(Path(tempfile.mkdtemp(dir=scratch)), pg.create_database(), nodes=count) as cluster:
                r = balanced(wrk, script, cluster, pg, args.connections, args.duration)
            cpu = r["cpu"]
            print(f"| {count} | {r['rps']:.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['errors'] + r['failed']} | "
                  f"{cpu['nodes']:.1f} | {cpu['PostgreSQL']:.1f} | {cpu['HAProxy']:.1f} | {cpu['wrk']:.1f} |")
        print(f"\n(CPU seconds over the {args.duration} s run; the box has {os.cpu_count()} cores: "
              f"{os.cpu_count() * args.duration} CPU s in all, shared with whatever else runs)")
    finally:
        pg.stop()
        shutil.rmtree(pg_root, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
