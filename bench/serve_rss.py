"""Memory of one ``tern serve`` under a small load, with the PostgreSQL store and with the SQLite
default: the figure deploy/k8s/ sizes the pods' memory from (docs/scale-out.md "Sizing").
From the repo root:

    .venv/bin/python bench/serve_rss.py [--secs 30] [--clients 4] [--pyz dist/tern.pyz]

About 1.5 minutes with the defaults. A real PostgreSQL (Debian's, ``initdb`` in a temp dir,
tests/pg.py) runs for the PostgreSQL node; psycopg must be importable by the Python that
runs tern (the ``postgres`` extra).

Each store gets a fresh node (``--pyz``: the single file, as the container image runs it;
default ``python -m runtime``) with an ``echo`` agent, ``[a2a] enabled`` and ``[mcp_server]
enabled``, rate limiting off. Load: ``--clients`` threads, each on its own keep-alive
connection, for ``--secs`` seconds, each loop an A2A ``SendMessage`` (blocking, to the echo
agent), a ``tools/list`` on ``POST /mcp``, a ``GET /api/status`` and a ``GET /ready`` (the
probes Kubernetes sends). Reported, from ``/proc/<pid>/status``: VmRSS after boot, VmRSS at
the end, the peak (VmHWM), threads at the end, requests served.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import status_kib  # noqa: E402
from tests.pg import PgServer  # noqa: E402

CONFIG = """[server]
rate_limit_per_sec = 0
[state]
dir = "{state}"
{store}
[a2a]
enabled = true
default_agent = "echo"
[mcp_server]
enabled = true
[[agents]]
name = "echo"
kind = "echo"
"""
SEND = ('{{"jsonrpc":"2.0","id":{n},"method":"SendMessage","params":{{"message":{{"messageId":"m-{t}-{n}",'
        '"role":"ROLE_USER","parts":[{{"text":"hello"}}]}}}}}}')
MCP_INIT = ('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
            '"capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}')
MCP_LIST = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(scratch: Path, name: str, store: str, pyz: str | None) -> tuple[subprocess.Popen, int]:
    config = scratch / f"{name}.toml"
    config.write_text(CONFIG.format(state=scratch / f"state-{name}", store=store))
    port = _free_port()
    program = [sys.executable, pyz] if pyz else [sys.executable, "-m", "runtime"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["TERN_CACHE_DIR"] = str(scratch / "cache")
    proc = subprocess.Popen([*program, "--config", str(config), "serve", "--listen", f"127.0.0.1:{port}"],
                            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "serving on " in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, port
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"tern ({name}) did not start: {line.strip()}{proc.stderr.read()[-2000:]}")


def _client(port: int, tag: int, until: float, counts: list[int], errors: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    json_headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    mcp = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "MCP-Protocol-Version": "2025-06-18"}

    def call(method: str, path: str, body: str | None = None, headers: dict | None = None) -> bytes:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: HTTP {response.status}: {data[:200]!r}")
        if path == "/mcp" and "Mcp-Session-Id" not in mcp and response.getheader("Mcp-Session-Id"):
            mcp["Mcp-Session-Id"] = response.getheader("Mcp-Session-Id")
        return data

    n = 0
    try:
        call("POST", "/mcp", MCP_INIT, mcp)
        while time.monotonic() < until:
            n += 1
            sent = call("POST", "/a2a/echo", SEND.format(n=n, t=tag), json_headers)
            if b"TASK_STATE_COMPLETED" not in sent:
                raise RuntimeError(f"SendMessage: {sent[:200]!r}")
            call("POST", "/mcp", MCP_LIST, mcp)
            call("GET", "/api/status")
            if json.loads(call("GET", "/ready")) != {"status": "ready"}:
                raise RuntimeError("not ready")
            counts[tag] += 4
    except Exception as exc:  # noqa: BLE001 - reported, the run goes on
        errors.append(f"client {tag}: {exc}")
    finally:
        conn.close()


def measure(scratch: Path, name: str, store: str, secs: float, clients: int, pyz: str | None) -> dict:
    proc, port = _start(scratch, name, store, pyz)
    try:
        time.sleep(1.0)
        boot = status_kib(proc.pid, "VmRSS")["VmRSS"]
        counts, errors = [0] * clients, []
        until = time.monotonic() + secs
        threads = [threading.Thread(target=_client, args=(port, t, until, counts, errors)) for t in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        end = status_kib(proc.pid, "VmRSS", "VmHWM", "Threads")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if errors:
        raise SystemExit(f"{name}: {errors[0]}")
    return {"store": name, "boot": boot / 1024, "end": end["VmRSS"] / 1024, "peak": end["VmHWM"] / 1024,
            "threads": end["Threads"], "requests": sum(counts), "rps": sum(counts) / secs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--secs", type=float, default=30.0, help="seconds of load per store (default 30)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections (default 4)")
    parser.add_argument("--pyz", help="run this tern.pyz instead of python -m runtime")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tern-rss-") as tmp:
        scratch = Path(tmp)
        pg_root = Path(tempfile.mkdtemp(prefix="tern-rss-pg-"))  # not under the 0700 scratch: postgres reads it
        pg = PgServer.start(pg_root)
        try:
            url = pg.create_database("tern")
            rows = [measure(scratch, "sqlite", 'store = "sqlite"', args.secs, args.clients, args.pyz),
                    measure(scratch, "postgres", f'store = "postgres"\npostgres_url = "{url}"', args.secs,
                            args.clients, args.pyz)]
        finally:
            pg.stop()
            shutil.rmtree(pg_root, ignore_errors=True)
    print(f"tern serve ({'pyz' if args.pyz else 'python -m runtime'}), {args.clients} clients x {args.secs:g} s, "
          f"Python {sys.version.split()[0]}\n")
    print("| store | RSS after boot | RSS at the end | peak RSS | threads | requests/s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['store']} | {row['boot']:.1f} MiB | {row['end']:.1f} MiB | {row['peak']:.1f} MiB | "
              f"{row['threads']} | {row['rps']:.0f} |")


if __name__ == "__main__":
    main()
