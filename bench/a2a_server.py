"""A2A server: tern's A2A 1.0 JSON-RPC endpoint against the official a2a-sdk 1.x Python server
(DefaultRequestHandler + InMemoryTaskStore under starlette/uvicorn), side by side in one run.
From the repo root:

    .venv/bin/python bench/a2a_server.py [--requests 1500] [--warmup 50] [--runs 3] [--pairs 600]
                                         [--tasks 10000] [--max-tasks 1000] [--no-sdk-store]
                                         [--state-base DIR] [--no-sdk]

About 1.5-2 minutes with the defaults on a 2-core box (a first run also installs the SDK's venv).

Measures (every server is one process bound to a free 127.0.0.1 port):
1. Sequential ``SendMessage`` (JSON-RPC, header ``A2A-Version: 1.0``, blocking, a "hello" text
   part) to an echo agent over ONE keep-alive connection, after ``--warmup`` uncounted requests:
   requests/s and median/p99 latency. The client is the same small raw-socket HTTP/1.1 client
   against both servers (no httpx: its own per-request cost would hide server differences).
   Every response is checked for ``TASK_STATE_COMPLETED``. The servers are interleaved over
   --runs runs (tern, sdk, tern, sdk, ...), each run on a fresh process; medians are reported.
   - tern: ``.venv/bin/python -m runtime --config CFG serve --listen 127.0.0.1:PORT`` with an
     ``[[agents]] kind = "echo"`` agent, ``[a2a] enabled``, rate limiting off, state in a temp dir;
     endpoint ``/a2a/echo``.
   - a2a-sdk: the python of ``.peers/a2a-venv`` (tests/peers.py: a2a_sdk_python, installed on
     demand); an echo AgentExecutor (Task first, then TaskUpdater start_work / add_artifact /
     complete), JSON-RPC at ``/``, uvicorn (its default h11 + asyncio, log_level warning).
2. A2A layer overhead (each run, after measure 1, same process): on one connection, alternating,
   ``SendMessage`` (request to completed task) and ``POST /api/echo`` carrying the same JSON bytes
   (a plain HTTP round trip through the same server); the difference of the medians, in ms
   (medians over the runs). For context the same is done on the SDK server, whose inline app
   also gets a plain starlette ``POST /api/echo`` route.
3. Store bound: a fresh tern with ``[a2a] max_tasks = --max-tasks`` gets ``--tasks`` SendMessage
   requests on one connection; VmRSS (``/proc/<pid>/status``) is sampled at 1k, 2k, 4k, 6k, 8k and
   10k tasks. Then ``GetTask`` for the first task (expected: -32001, evicted) and the last (found),
   and the size of tern's state dir (its echo agent keeps each task's exchange as a conversation).
   The SDK server (InMemoryTaskStore, unbounded) gets the same load for context (--no-sdk-store: not).

tern's state dir lives under $TMPDIR by default, a real disk here: tern commits every agent exchange
to its conversations SQLite (fsyncs at WAL checkpoints) and appends to audit.jsonl, which is part of
what is measured (--state-base /dev/shm takes the disk out of the picture).

Targets: tern >= 4x the SDK server's requests/s (1); A2A overhead <= 1 ms (2); RSS growth between
2,000 and 10,000 tasks <= 10 MB (3, read as MiB), with the first task evicted and the last kept.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import peers  # noqa: E402
from harness import status_kib  # noqa: E402  (bench/ is sys.path[0] when a bench runs)

VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
TARGET_RATIO, TARGET_OVERHEAD_MS, TARGET_GROWTH_MB = 4.0, 1.0, 10.0
RSS_POINTS = (1000, 2000, 4000, 6000, 8000, 10000)

SDK_SERVER = r'''
"""a2a-sdk 1.x echo server for bench/a2a_server.py: python THIS PORT (0 = any free port)."""
import asyncio
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Task, TaskState, TaskStatus


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        context_id = task.context_id if task is not None else context.context_id
        if task is None:  # the SDK insists on a Task as a new task's first event
            await event_queue.enqueue_event(Task(id=context.task_id, context_id=context_id,
                                                 status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
        updater = TaskUpdater(event_queue, context.task_id, context_id)
        await updater.start_work()
        await updater.add_artifact(parts=[Part(text=context.get_user_input())], name="echo", last_chunk=True)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        context_id = context.current_task.context_id if context.current_task else context.context_id
        await TaskUpdater(event_queue, context.task_id, context_id).cancel()


async def plain_echo(request: Request) -> Response:  # the plain-HTTP baseline of measure 2
    return Response(await request.body(), media_type="application/json")


def main() -> None:
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the
    # socket's proto says TCP; with proto 0, Nagle + delayed ACK add ~40 ms to every response.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0))
    sock.listen(128)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    card = AgentCard(
        name="sdk-echo", description="a2a-sdk echo", version="1.0.0",
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=base + "/")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes the text", tags=["echo"])])
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
                    + [Route("/api/echo", plain_echo, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))

    async def serve() -> None:
        print(f"listening on {base}", flush=True)
        await server.serve(sockets=[sock])

    asyncio.run(serve())


if __name__ == "__main__":
    main()
'''

TERN_CONFIG = """[server]
rate_limit_per_sec = 0
[a2a]
enabled = true
default_agent = "echo"
max_tasks = {max_tasks}
[[agents]]
name = "echo"
kind = "echo"
[state]
dir = "{state}"
"""


def send_message_body(n: int) -> bytes:
    return (b'{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":{"messageId":"m-%d",'
            b'"role":"ROLE_USER","parts":[{"text":"hello"}]}}}' % (n, n))


def get_task_body(n: int, task_id: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "GetTask", "params": {"id": task_id}},
                      separators=(",", ":")).encode()


# --- A minimal HTTP/1.1 keep-alive client (the same code against both servers) ---------------

class Client:
    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = f"Host: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n".encode()
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def post(self, path: str, body: bytes, extra: bytes = b"") -> tuple:
        """POST ``body``; returns (status, response body). ``extra``: more header lines, CRLF-ended."""
        self.sock.sendall(b"POST %s HTTP/1.1\r\n%s%sContent-Length: %d\r\n\r\n%s"
                          % (path.encode(), self.head, extra, len(body), body))
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            self._fill()
        head, self.buf = self.buf[:end], self.buf[end + 4:]
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, chunked = None, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            return status, self._read_chunked()
        if length is None:
            raise RuntimeError(f"response without Content-Length: {head[:200]!r}")
        while len(self.buf) < length:
            self._fill()
        data, self.buf = self.buf[:length], self.buf[length:]
        return status, data

    def _read_chunked(self) -> bytes:
        out = b""
        while True:
            while b"\r\n" not in self.buf:
                self._fill()
            size_line, self.buf = self.buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(self.buf) < size + 2:
                self._fill()
            out, self.buf = out + self.buf[:size], self.buf[size + 2:]
            if size == 0:
                while not self.buf.startswith(b"\r\n") and b"\r\n\r\n" not in self.buf:
                    self._fill()  # trailers, if any
                self.buf = self.buf[self.buf.find(b"\r\n") + 2:] if self.buf.startswith(b"\r\n") \
                    else self.buf[self.buf.find(b"\r\n\r\n") + 4:]
                return out


# --- Servers ----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("TERN_API_KEY", "TERN_CONFIG")}


class Server:
    """One server process; ``rpc_path`` is its A2A JSON-RPC endpoint."""

    def __init__(self, label: str, argv: list, env: dict, port: int | None, rpc_path: str,
                 ready_path: str, scratch: Path, timeout: float = 60) -> None:
        self.label, self.rpc_path = label, rpc_path
        self.state_dir: Path | None = None
        self.log = scratch / f"{label}-{time.monotonic_ns()}.log"
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(argv, env=env, cwd=str(ROOT), stdin=subprocess.DEVNULL,
                                     stdout=self._log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        self.port = port
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{label}: exited {self.proc.returncode} before answering:\n{self.log_tail()}")
            if self.port is None:  # the SDK server prints the port it bound
                for line in self.log.read_text(errors="replace").splitlines():
                    if line.startswith("listening on http://127.0.0.1:"):
                        self.port = int(line.rsplit(":", 1)[1])
            if self.port is not None and self._answers(ready_path):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{label}: no answer within {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def _answers(self, path: str) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                conn.request("GET", path)
                return conn.getresponse().status == 200
            finally:
                conn.close()
        except OSError:
            return False

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").rstrip().splitlines()[-lines:])
        except OSError:
            return ""

    def rss_mb(self) -> float:
        return status_kib(self.proc.pid, "VmRSS")["VmRSS"] / 1024  # KiB -> MiB

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()


def start_tern(scratch: Path, max_tasks: int = 1000, state_base: Path | None = None) -> Server:
    port = free_port()
    run_dir = Path(tempfile.mkdtemp(prefix="tern-", dir=state_base or scratch))
    config = run_dir / "tern.toml"
    config.write_text(TERN_CONFIG.format(max_tasks=max_tasks, state=run_dir / "state"))
    argv = [str(VENV_PYTHON), "-m", "runtime", "--config", str(config), "serve", "--listen", f"127.0.0.1:{port}"]
    server = Server("tern", argv, {**clean_env(), "XDG_STATE_HOME": str(run_dir)}, port, "/a2a/echo", "/health",
                    scratch)
    server.state_dir = run_dir / "state"
    return server


def start_sdk(scratch: Path, sdk_python: Path) -> Server:
    script = scratch / "a2a_sdk_echo_server.py"
    if not script.exists():
        script.write_text(SDK_SERVER)
    return Server("a2a-sdk", [str(sdk_python), str(script), "0"], clean_env(), None, "/",
                  "/.well-known/agent-card.json", scratch)


# --- Measures ---------------------------------------------------------------------------------

A2A_HEADER = b"A2A-Version: 1.0\r\n"
COMPLETED = b'"TASK_STATE_COMPLETED"'


def send(client: Client, server: Server, n: int) -> bytes:
    status, body = client.post(server.rpc_path, send_message_body(n), A2A_HEADER)
    if status != 200 or COMPLETED not in body:
        raise RuntimeError(f"{server.label}: SendMessage #{n}: HTTP {status}: {body[:300]!r}")
    return body


def percentile(sorted_values: list, q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return sorted_values[min(len(sorted_values), max(1, math.ceil(q / 100 * len(sorted_values)))) - 1]


def throughput(server: Server, requests: int, warmup: int) -> dict:
    client = Client(server.port)
    try:
        first = json.loads(send(client, server, 0))
        task = first["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        assert any(p.get("text") == "hello" for a in task.get("artifacts", []) for p in a.get("parts", [])), task
        for n in range(1, warmup):
            send(client, server, n)
        latencies = []
        clock = time.perf_counter
        started = clock()
        for n in range(warmup, warmup + requests):
            t0 = clock()
            send(client, server, n)
            latencies.append(clock() - t0)
        elapsed = clock() - started
    finally:
        client.close()
    latencies.sort()
    return {"rps": requests / elapsed, "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000, "rss_mb": server.rss_mb()}


def overhead(server: Server, pairs: int, warmup: int) -> dict:
    """Alternate SendMessage and POST /api/echo (same body bytes) on one connection."""
    client = Client(server.port)
    clock = time.perf_counter
    a2a, plain = [], []
    try:
        for n in range(warmup + pairs):
            body = send_message_body(n)
            t0 = clock()
            send(client, server, n)
            t1 = clock()
            status, echoed = client.post("/api/echo", body)
            t2 = clock()
            if status != 200 or echoed != body:
                raise RuntimeError(f"{server.label}: POST /api/echo: HTTP {status}: {echoed[:200]!r}")
            if n >= warmup:
                a2a.append(t1 - t0)
                plain.append(t2 - t1)
    finally:
        client.close()
    a2a_ms, plain_ms = statistics.median(a2a) * 1000, statistics.median(plain) * 1000
    return {"a2a_ms": a2a_ms, "plain_ms": plain_ms, "overhead_ms": a2a_ms - plain_ms,
            "body_bytes": len(send_message_body(warmup + pairs - 1))}


def store_bound(server: Server, tasks: int) -> dict:
    """``tasks`` SendMessage requests on one connection, VmRSS at RSS_POINTS; GetTask first/last."""
    client = Client(server.port)
    points = sorted({p for p in RSS_POINTS if p <= tasks} | {tasks})
    rss = {0: server.rss_mb()}
    first_id = last_id = ""
    started = time.perf_counter()
    try:
        for n in range(1, tasks + 1):
            body = send(client, server, n)
            if n == 1 or n == tasks:
                task_id = json.loads(body)["result"]["task"]["id"]
                first_id, last_id = (task_id, last_id) if n == 1 else (first_id, task_id)
            if n in points:
                rss[n] = server.rss_mb()
        elapsed = time.perf_counter() - started
        lookups = {}
        for which, task_id in (("first", first_id), ("last", last_id)):
            status, body = client.post(server.rpc_path, get_task_body(tasks + 1, task_id), A2A_HEADER)
            answer = json.loads(body)
            if "error" in answer:
                lookups[which] = f"error {answer['error'].get('code')}"
            elif answer.get("result", {}).get("id") == task_id or \
                    answer.get("result", {}).get("task", {}).get("id") == task_id:
                lookups[which] = "found"
            else:
                lookups[which] = f"unexpected: HTTP {status} {body[:120]!r}"
    finally:
        client.close()
    return {"rss": rss, "lookups": lookups, "rps": tasks / elapsed}


# --- Report -----------------------------------------------------------------------------------

def med(results: list, key: str) -> float | None:
    values = [r[key] for r in results if r]
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "n/a"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500,
                        help="measured SendMessage requests per run (default 1500)")
    parser.add_argument("--warmup", type=int, default=50, help="uncounted requests before measuring (default 50)")
    parser.add_argument("--runs", type=int, default=3,
                        help="repetitions of measures 1 and 2, servers interleaved, fresh processes (default 3)")
    parser.add_argument("--pairs", type=int, default=600, help="SendMessage + /api/echo pairs per run (default 600)")
    parser.add_argument("--tasks", type=int, default=10000, help="SendMessage requests in measure 3 (default 10000)")
    parser.add_argument("--max-tasks", type=int, default=1000,
                        help="tern's [a2a] max_tasks in measure 3 (default 1000)")
    parser.add_argument("--no-sdk-store", action="store_true",
                        help="skip measure 3 against the SDK server (context only; ~35 s)")
    parser.add_argument("--state-base", type=Path, default=None,
                        help="make tern's state dirs under this directory (default: the bench's temp dir "
                             "under $TMPDIR); e.g. /dev/shm to take disk fsyncs out of the picture")
    parser.add_argument("--no-sdk", action="store_true", help="tern only")
    args = parser.parse_args()

    sdk_python = None
    if not args.no_sdk:
        try:
            sdk_python = peers.a2a_sdk_python()
        except peers.PeerUnavailable as exc:
            print(f"a2a-sdk server not measured: {exc}", file=sys.stderr)

    scratch = Path(tempfile.mkdtemp(prefix="tern-a2a-bench-"))
    state_base = Path(tempfile.mkdtemp(prefix="tern-a2a-bench-", dir=args.state_base)) if args.state_base else None
    began = time.monotonic()
    results = {"tern": [], "a2a-sdk": []}
    over = {"tern": [], "a2a-sdk": []}
    store = {}
    try:
        starters = [("tern", lambda: start_tern(scratch, state_base=state_base))]
        if sdk_python is not None:
            starters.append(("a2a-sdk", lambda: start_sdk(scratch, sdk_python)))
        for _ in range(args.runs):
            for label, start in starters:
                server = start()
                try:
                    results[label].append(throughput(server, args.requests, args.warmup))
                    over[label].append(overhead(server, args.pairs, args.warmup))  # same warm process
                finally:
                    server.stop()
        server = start_tern(scratch, args.max_tasks, state_base)
        try:
            store["tern"] = store_bound(server, args.tasks)
        finally:
            server.stop()
        store["tern"]["state_kib"] = {f.name: f.stat().st_size / 1024 for f in server.state_dir.iterdir()
                                      if f.is_file()}
        if not args.no_sdk_store and sdk_python is not None:
            server = start_sdk(scratch, sdk_python)
            try:
                store["a2a-sdk"] = store_bound(server, args.tasks)
            finally:
                server.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if state_base is not None:
            shutil.rmtree(state_base, ignore_errors=True)
    total = time.monotonic() - began

    t, s = results["tern"], results["a2a-sdk"]
    t_rps, s_rps = med(t, "rps"), med(s, "rps")
    t_p50, s_p50 = med(t, "p50_ms"), med(s, "p50_ms")
    t_p99, s_p99 = med(t, "p99_ms"), med(s, "p99_ms")
    t_rss, s_rss = med(t, "rss_mb"), med(s, "rss_mb")
    to, so = ({key: med(over[label], key) for key in ("a2a_ms", "plain_ms", "overhead_ms", "body_bytes")}
              if over[label] else None for label in ("tern", "a2a-sdk"))
    ts = store["tern"]
    ss = store.get("a2a-sdk")

    def growth(st: dict | None) -> float | None:
        if not st:
            return None
        rss = st["rss"]
        lo = 2000 if 2000 in rss else min(k for k in rss if k)
        return rss[max(rss)] - rss[lo]

    t_growth, s_growth = growth(ts), growth(ss)
    rps_ok = t_rps is not None and s_rps is not None and t_rps / s_rps >= TARGET_RATIO
    over_ok = to is not None and to["overhead_ms"] <= TARGET_OVERHEAD_MS
    evicted_ok = ts["lookups"].get("first") == "error -32001" and ts["lookups"].get("last") == "found"
    growth_ok = t_growth is not None and t_growth <= TARGET_GROWTH_MB

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; a2a-sdk {peers.A2A_VERSION} under uvicorn "
          f"{peers.UVICORN_VERSION} (h11, asyncio); raw-socket keep-alive client; {args.requests} requests after "
          f"{args.warmup} warm-up, {args.runs} run(s){' (medians)' if args.runs > 1 else ''}; "
          f"{args.pairs} overhead pairs per run; {args.tasks} tasks with max_tasks = {args.max_tasks}; "
          f"{total:.0f} s in all")
    print("\n### A2A server: tern vs a2a-sdk\n")
    print("| measure | tern | a2a-sdk | ratio | target |")
    print("|---|---:|---:|---:|---|")
    print(f"| 1. SendMessage, 1 keep-alive conn: req/s | {fmt(t_rps, ',.0f')} | {fmt(s_rps, ',.0f')} | "
          f"{ratio(t_rps, s_rps)} | ≥ {TARGET_RATIO:g}x: {'ok' if rps_ok else 'MISS'} |")
    print(f"| 1. latency p50 ms | {fmt(t_p50, '.3f')} | {fmt(s_p50, '.3f')} | {ratio(t_p50, s_p50)} | |")
    print(f"| 1. latency p99 ms | {fmt(t_p99, '.3f')} | {fmt(s_p99, '.3f')} | {ratio(t_p99, s_p99)} | |")
    print(f"| 1. VmRSS after the run, MiB | {fmt(t_rss, '.1f')} | {fmt(s_rss, '.1f')} | {ratio(t_rss, s_rss)} | |")
    if to:
        print(f"| 2. SendMessage median ms (alternating) | {to['a2a_ms']:.3f} | "
              f"{fmt(so and so['a2a_ms'], '.3f')} | {ratio(to['a2a_ms'], so and so['a2a_ms'])} | |")
        print(f"| 2. POST /api/echo median ms ({to['body_bytes']} B body) | {to['plain_ms']:.3f} | "
              f"{fmt(so and so['plain_ms'], '.3f')} | {ratio(to['plain_ms'], so and so['plain_ms'])} | |")
        print(f"| 2. A2A layer overhead ms (difference) | {to['overhead_ms']:.3f} | "
              f"{fmt(so and so['overhead_ms'], '.3f')} | {ratio(to['overhead_ms'], so and so['overhead_ms'])} | "
              f"≤ {TARGET_OVERHEAD_MS:g} ms: {'ok' if over_ok else 'MISS'} |")
    for point in sorted(ts["rss"]):
        sdk_value = ss["rss"].get(point) if ss else None
        print(f"| 3. VmRSS MiB at {point:,} tasks | {ts['rss'][point]:.1f} | {fmt(sdk_value, '.1f')} | "
              f"{ratio(ts['rss'][point], sdk_value)} | |")
    print(f"| 3. RSS growth 2,000 → {max(ts['rss']):,} tasks, MiB | {fmt(t_growth, '.1f')} | "
          f"{fmt(s_growth, '.1f')} | | ≤ {TARGET_GROWTH_MB:g} MB: {'ok' if growth_ok else 'MISS'} |")
    print(f"| 3. GetTask first task / last task | {ts['lookups'].get('first')} / {ts['lookups'].get('last')} | "
          f"{(ss['lookups'].get('first') + ' / ' + ss['lookups'].get('last')) if ss else 'n/a'} | | "
          f"evicted / found: {'ok' if evicted_ok else 'MISS'} |")
    print(f"| 3. SendMessage req/s during the store run | {ts['rps']:,.0f} | {fmt(ss and ss['rps'], ',.0f')} | "
          f"{ratio(ts['rps'], ss and ss['rps'])} | |")
    on_disk = ", ".join(f"{name} {kib:,.0f} KiB" for name, kib in sorted(ts["state_kib"].items()))
    print(f"| 3. tern state dir after the store run | {on_disk} | | | |")

    runs = "; ".join(f"{label} " + ", ".join(f"{r['rps']:,.0f}" for r in results[label])
                     for label in ("tern", "a2a-sdk") if results[label])
    print(f"\nPer-run SendMessage req/s (measure 1): {runs}.")
    print("\n### Verdicts\n")
    print(f"- tern ≥ {TARGET_RATIO:g}x the a2a-sdk server's SendMessage requests/s: "
          f"{('PASS' if rps_ok else 'FAIL') if s_rps else 'not measured'} ({ratio(t_rps, s_rps)})")
    print(f"- tern's A2A layer overhead ≤ {TARGET_OVERHEAD_MS:g} ms: {'PASS' if over_ok else 'FAIL'} "
          f"({fmt(to and to['overhead_ms'], '.3f')} ms)")
    print(f"- tern's RSS growth 2,000 → {args.tasks:,} tasks ≤ {TARGET_GROWTH_MB:g} MB with max_tasks = "
          f"{args.max_tasks}: {'PASS' if growth_ok else 'FAIL'} ({fmt(t_growth, '.1f')} MiB)")
    print(f"- first task evicted (GetTask -32001), last found: {'PASS' if evicted_ok else 'FAIL'} "
          f"({ts['lookups'].get('first')} / {ts['lookups'].get('last')})")


if __name__ == "__main__":
    main()
