"""HTTP server: tern serve against uvicorn (h11, and httptools + uvloop) and a bare trio + h11
loop, side by side, measured with wrk over keep-alive connections. From the repo root:

    .venv/bin/python bench/http_server.py [--duration 5] [--runs 1] [--variants tern,uvicorn-h11,...]

Cells: GET /health and POST /api/echo (a fixed 1 KB JSON body), at 1 connection (wrk -t1)
and 32 connections (wrk -t2); requests/s and p50/p99 latency from a wrk Lua done() hook.
Every variant is a single process on a free 127.0.0.1 port, warmed up by one uncounted 1 s
wrk run after it starts; with --runs > 1 the variants are interleaved and medians reported.
Variants:
- tern: .venv/bin/python -m runtime serve --config <[server] listen, rate limit out of reach> --listen ...
- uvicorn-h11: bench/asgi_app.py under uvicorn --http h11 --loop asyncio
- uvicorn-standard: the same app under uvicorn --http httptools --loop uvloop
- trio+h11 bare: bench/trio_h11_bare.py, the reference ceiling
uvicorn, httptools and uvloop come from .peers/bench-venv (tests/peers.py: bench_python);
wrk is installed with apt-get when missing and running as root.
Then idle RSS: `tern serve --config config.toml` (the default config), 3 s after it answers.

Targets (issue: HTTP server): tern >= 1.2x uvicorn-h11 requests/s (ratio to uvicorn-standard
reported); p99 <= 8 ms for GET /health at 32 connections; idle RSS of tern serve <= 40 MB.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import peers  # noqa: E402
from harness import status_kib  # noqa: E402  (bench/ is sys.path[0] when a bench runs)

VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
ROUTES = ("GET /health", "POST /api/echo")
CONNS = (1, 32)
THREADS = {1: 1, 32: 2}
TARGET_RATIO, TARGET_P99_MS, TARGET_RSS_MB = 1.2, 8.0, 40.0
H11, STANDARD, TERN, BARE = "uvicorn-h11", "uvicorn-standard", "tern", "trio+h11 bare"
ALL_VARIANTS = (TERN, H11, STANDARD, BARE)
ALIASES = {"tern": TERN, "uvicorn-h11": H11, "uvicorn-standard": STANDARD, "bare": BARE,
           "trio+h11": BARE, "trio+h11 bare": BARE}


def echo_body(size: int = 1024) -> bytes:
    """A fixed JSON document of exactly ``size`` bytes, nested a little like a real request."""
    doc = {"id": "req-0001", "method": "echo", "params": {
        "items": [{"n": i, "name": f"item-{i}", "ok": i % 2 == 0, "score": i * 1.5} for i in range(8)],
        "text": ""}}
    pad = size - len(json.dumps(doc, separators=(",", ":")).encode())
    if pad < 0:
        raise ValueError(f"echo body base is larger than {size} bytes")
    doc["params"]["text"] = ("lorem ipsum dolor sit amet " * 64)[:pad]
    body = json.dumps(doc, separators=(",", ":")).encode()
    assert len(body) == size, len(body)
    return body


DONE_HOOK = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "TERN_BENCH rps=%.3f p50_ms=%.4f p99_ms=%.4f requests=%d errors=%d non2xx=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.requests,
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""
RESULT_LINE = re.compile(r"^TERN_BENCH rps=(\S+) p50_ms=(\S+) p99_ms=(\S+) requests=(\d+) "
                         r"errors=(\d+) non2xx=(\d+)$", re.M)


def write_lua_scripts(scratch: Path) -> dict:
    """One wrk script per route: the done() hook, and for the POST its method, headers and body."""
    body = echo_body().decode()
    assert "]==]" not in body
    get = scratch / "get.lua"
    get.write_text(DONE_HOOK)
    post = scratch / "post.lua"
    post.write_text('wrk.method = "POST"\n'
                    f"wrk.body = [==[{body}]==]\n"
                    'wrk.headers["Content-Type"] = "application/json"\n' + DONE_HOOK)
    return {"GET /health": ("/health", get), "POST /api/echo": ("/api/echo", post)}


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if os.name == "posix" and os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk is missing: apt-get update && apt-get install -y wrk", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "wrk"]):
            done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"`{' '.join(argv)}` failed (exit {done.returncode}):\n"
                                 f"{(done.stdout + done.stderr)[-2000:]}")
        found = shutil.which("wrk")
        if found:
            return found
    raise SystemExit("wrk (https://github.com/wg/wrk) is not on PATH. This bench installs it with apt-get "
                     "only when running as root on Debian/Ubuntu; otherwise install it yourself "
                     "(`sudo apt-get install wrk`, `brew install wrk`, or build it from source) and rerun.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Variant:
    label: str
    command: Callable[[int], list]   # port -> argv
    env: dict | None = None
    cwd: str | None = None


@dataclass
class Cell:
    rps: list = field(default_factory=list)
    p50: list = field(default_factory=list)
    p99: list = field(default_factory=list)
    errors: int = 0
    non2xx: int = 0

    def median(self, name: str) -> float:
        return statistics.median(getattr(self, name))


class Server:
    """One running variant: started on a free port, ready once GET /health answers 200."""

    def __init__(self, variant: Variant, scratch: Path, timeout: float = 30) -> None:
        self.variant, self.port = variant, free_port()
        self.log = scratch / f"{re.sub(r'[^A-Za-z0-9]+', '-', variant.label)}.log"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(variant.command(self.port), env=variant.env, cwd=variant.cwd,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{variant.label}: exited {self.proc.returncode} before answering:\n"
                                   f"{self.log_tail()}")
            if self.answers():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{variant.label}: no answer on 127.0.0.1:{self.port} within "
                                   f"{timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def answers(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                conn.request("GET", "/health")
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


def run_wrk(wrk: str, port: int, path: str, script: Path, conns: int, seconds: int) -> tuple:
    argv = [wrk, f"-t{THREADS.get(conns, min(conns, 2))}", f"-c{conns}", f"-d{seconds}s", "--timeout", "5s",
            "-s", str(script), f"http://127.0.0.1:{port}{path}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    found = RESULT_LINE.search(done.stdout)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"`{' '.join(argv)}` exited {done.returncode}:\n{done.stdout}{done.stderr}")
    rps, p50, p99 = (float(found.group(i)) for i in (1, 2, 3))
    return rps, p50, p99, int(found.group(5)), int(found.group(6))


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("TERN_API_KEY", "TERN_CONFIG")}


def tern_variant(label: str, scratch: Path, config: Path | None = None) -> Variant:
    """``runtime serve`` from the repo's venv; without ``config``, a temp one with [server] listen and
    a rate limit no client of this bench can reach: the default (50/s per address, burst 100)
    would answer nearly every wrk request 429. The limiter still runs its check per request."""
    def argv(port: int) -> list:
        path = config
        if path is None:
            path = scratch / f"tern-{port}.toml"
            path.write_text(f'[server]\nlisten = "127.0.0.1:{port}"\n'
                            "rate_limit_per_sec = 1e9\nrate_limit_burst = 1000\n")
        return [str(VENV_PYTHON), "-m", "runtime", "serve", "--config", str(path), "--listen", f"127.0.0.1:{port}"]
    # No TERN_API_KEY (loopback needs none); state under the scratch dir, not ~/.local/state.
    return Variant(label, argv, env={**clean_env(), "XDG_STATE_HOME": str(scratch / "state")}, cwd=str(ROOT))


def build_variants(scratch: Path, names: list) -> list:
    variants = []
    if TERN in names:
        variants.append(tern_variant(TERN, scratch))
    if H11 in names or STANDARD in names:
        bench_py = str(peers.bench_python())
        uvicorn = [bench_py, "-m", "uvicorn", "asgi_app:app", "--app-dir", str(ROOT / "bench"),
                   "--host", "127.0.0.1", "--workers", "1", "--no-access-log", "--log-level", "warning"]
        if H11 in names:
            variants.append(Variant(H11, lambda port: [*uvicorn, "--port", str(port), "--http", "h11",
                                                       "--loop", "asyncio"], env=clean_env()))
        if STANDARD in names:
            variants.append(Variant(STANDARD, lambda port: [*uvicorn, "--port", str(port), "--http",
                                                            "httptools", "--loop", "uvloop"], env=clean_env()))
    if BARE in names:
        variants.append(Variant(BARE, lambda port: [str(VENV_PYTHON), str(ROOT / "bench" / "trio_h11_bare.py"),
                                                    "--port", str(port)], env=clean_env()))
    order = {name: i for i, name in enumerate(names)}
    return sorted(variants, key=lambda v: order[v.label])


def idle_rss(variant: Variant, scratch: Path, settle: float = 3.0) -> float:
    server = Server(variant, scratch)
    try:
        time.sleep(settle)
        return server.rss_mb()
    finally:
        server.stop()


def fmt_ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value and base else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk cell (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted wrk seconds per server start (default 1)")
    parser.add_argument("--runs", type=int, default=1, help="repetitions, variants interleaved (default 1)")
    parser.add_argument("--variants", default="tern,uvicorn-h11,uvicorn-standard,bare",
                        help="comma-separated subset of: tern, uvicorn-h11, uvicorn-standard, bare")
    parser.add_argument("--no-rss", action="store_true", help="skip the idle RSS measurement")
    args = parser.parse_args()
    try:
        names = [ALIASES[n.strip()] for n in args.variants.split(",") if n.strip()]
    except KeyError as exc:
        raise SystemExit(f"unknown variant {exc}; choose from {', '.join(sorted(ALIASES))}") from None

    wrk = ensure_wrk()
    scratch = Path(tempfile.mkdtemp(prefix="tern-http-bench-"))
    try:
        scripts = write_lua_scripts(scratch)
        variants = build_variants(scratch, names)
        cells = {(v.label, route, c): Cell() for v in variants for route in ROUTES for c in CONNS}
        unavailable: dict = {}
        for _ in range(args.runs):
            for variant in variants:
                if variant.label in unavailable:
                    continue
                try:
                    server = Server(variant, scratch)
                except RuntimeError as exc:
                    unavailable[variant.label] = str(exc)
                    print(f"skipping {exc}", file=sys.stderr)
                    continue
                try:
                    path, script = scripts["POST /api/echo"]
                    run_wrk(wrk, server.port, path, script, 32, args.warmup)
                    for route in ROUTES:
                        path, script = scripts[route]
                        for conns in CONNS:
                            rps, p50, p99, errors, non2xx = run_wrk(wrk, server.port, path, script, conns,
                                                                    args.duration)
                            cell = cells[(variant.label, route, conns)]
                            cell.rps.append(rps)
                            cell.p50.append(p50)
                            cell.p99.append(p99)
                            cell.errors += errors
                            cell.non2xx += non2xx
                finally:
                    server.stop()

        rss = {}
        if not args.no_rss:
            rss_variants = [v for v in variants if v.label in (H11, BARE)]
            if TERN in names:  # the bundled default config.toml, as a user would start it
                rss_variants.insert(0, tern_variant(f"{TERN} serve (default config)", scratch,
                                                    config=ROOT / "config.toml"))
            for variant in rss_variants:
                try:
                    rss[variant.label] = idle_rss(variant, scratch)
                except (RuntimeError, OSError) as exc:
                    rss[variant.label] = None
                    print(f"idle RSS of {variant.label}: unavailable: {exc}", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def value(label: str, route: str, conns: int, name: str) -> float | None:
        cell = cells.get((label, route, conns))
        return cell.median(name) if cell and getattr(cell, name) else None

    wrk_version = subprocess.run([wrk, "--version"], capture_output=True, text=True).stdout.splitlines()
    print(f"python {sys.version.split()[0]}, {wrk_version[0] if wrk_version else 'wrk'}, {os.cpu_count()} CPUs, "
          f"{args.duration:g} s per cell, {args.runs} run(s){' (medians)' if args.runs > 1 else ''}, "
          f"warm-up {args.warmup:g} s per server; POST body: {len(echo_body())} B JSON")
    print("\n### HTTP server over keep-alive (wrk): requests/s and latency\n")
    print("| variant | route | conns | req/s | p50 ms | p99 ms | vs uvicorn-h11 | vs uvicorn-standard | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    problems = []
    for route in ROUTES:
        for conns in CONNS:
            for variant in variants:
                label = variant.label
                rps = value(label, route, conns, "rps")
                if rps is None:
                    print(f"| {label} | {route} | {conns} | n/a | n/a | n/a | n/a | n/a | not run |")
                    continue
                p50, p99 = value(label, route, conns, "p50"), value(label, route, conns, "p99")
                h11, std = value(H11, route, conns, "rps"), value(STANDARD, route, conns, "rps")
                target = ""
                if label == TERN:
                    checks = []
                    if h11:
                        checks.append(f"≥{TARGET_RATIO}x h11: {'ok' if rps / h11 >= TARGET_RATIO else 'MISS'}")
                    if route == "GET /health" and conns == 32:
                        checks.append(f"p99 ≤{TARGET_P99_MS:g} ms: {'ok' if p99 <= TARGET_P99_MS else 'MISS'}")
                    target = "; ".join(checks)
                elif label == BARE:
                    target = "reference (issue: ~1.3x h11)"
                cell = cells[(label, route, conns)]
                if cell.errors or cell.non2xx:
                    target = f"INVALID: {cell.non2xx} non-2xx, {cell.errors} socket errors; {target}"
                    problems.append(f"{label} {route} c={conns}: {cell.errors} socket errors, "
                                    f"{cell.non2xx} non-2xx responses (all runs)")
                print(f"| {label} | {route} | {conns} | {rps:,.0f} | {p50:.2f} | {p99:.2f} | "
                      f"{fmt_ratio(rps, h11)} | {fmt_ratio(rps, std)} | {target} |")
    for reason in unavailable.values():
        lines = reason.splitlines()
        print(f"\nnot measured: {lines[0]}" + (f" {lines[-1].strip()}" if len(lines) > 1 else ""))
    for problem in problems:
        print(f"\nWARNING: {problem}")

    if rss:
        print("\n### Idle RSS (VmRSS 3 s after the first answer)\n")
        print("| process | VmRSS MiB | target |")  # the 40 MB target is read as MiB
        print("|---|---:|---|")
        for label, mib in rss.items():
            target = (f"≤ {TARGET_RSS_MB:g} MB: {'ok' if mib is not None and mib <= TARGET_RSS_MB else 'MISS'}"
                      if label.startswith(TERN) and mib is not None else ("context" if mib is not None else ""))
            print(f"| {label} | {f'{mib:.1f}' if mib is not None else 'n/a'} | {target} |")


if __name__ == "__main__":
    main()
