"""The CLI as a client of the daemon: `tern run echo hi` against a running `tern serve`
side by side with the same command booting its own kernel (`--standalone`). Run from
the repo root:

    .venv/bin/python bench/cli_daemon.py [--runs 21]

Target (issue: daily use): through the daemon <= 0.2 s wall on CPython 3.11. Each
variant is a fresh `python -m runtime` process (wall time and max RSS, medians over the
runs, interleaved); the daemon is one process on a free loopback port with its state in
a temporary directory, started once before the runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Variant, print_table, run_commands  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="tern-bench-"))
    config = scratch / "config.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{scratch / "state"}"\n'
                      '[[agents]]\nname = "echo"\nkind = "echo"\n')
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", ""), "PYTHONPATH": str(ROOT)}
    daemon = subprocess.Popen([args.python, "-m", "runtime", "serve", "--config", str(config)], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while "serving on" not in daemon.stderr.readline():
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("the daemon did not start")
        run = [args.python, "-m", "runtime", "run", "echo", "hi", "--config", str(config)]
        variants = [
            Variant("through the daemon: tern run echo hi", run, env=env, cwd=str(ROOT)),
            Variant("in-process: tern run echo hi --standalone", [*run, "--standalone"], env=env, cwd=str(ROOT)),
            Variant("baseline: tern version", [args.python, "-m", "runtime", "version"], env=env, cwd=str(ROOT)),
        ]
        results = run_commands(variants, runs=args.runs)
    finally:
        daemon.terminate()
        daemon.wait(timeout=15)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"python: {args.python} ({sys.version.split()[0]}), runs: {args.runs}")
    print_table("tern run echo hi", results, baseline=1)
    print(f"\nthrough the daemon: {results[0].median_ms:.0f} ms median (target <= 200 ms)")


if __name__ == "__main__":
    main()
