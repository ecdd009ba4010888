"""Start-up: `tern version` from the single-file pyz (cold and warm cache) against the
same code from a venv. Run from the repo root after `python3 build_pyz.py`:

    .venv/bin/python bench/start.py [--runs 21] [--python /path/to/python3.11]

Targets (issue: foundation): warm pyz within 1.3x of the venv on CPython 3.11; the
first-run extraction (cold minus warm) at most 50 ms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Variant, print_table, run_commands  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--python", default=os.path.realpath(sys.executable),
                        help="interpreter for the pyz (a real binary, not a pyenv shim)")
    parser.add_argument("--venv-python", default=str(ROOT / ".venv" / "bin" / "python"))
    args = parser.parse_args()
    pyz = ROOT / "dist" / "tern.pyz"
    if not pyz.is_file():
        raise SystemExit("dist/tern.pyz is missing: run `python3 build_pyz.py` first")

    scratch = Path(tempfile.mkdtemp(prefix="tern-bench-"))
    # The pyz runs from an empty venv of the same interpreter, so both sides start the
    # same Python with the same (empty) site-packages: only the code's location differs.
    import venv

    venv.create(scratch / "empty-venv", with_pip=False)
    pyz_python = str(scratch / "empty-venv" / "bin" / "python")
    warm_cache, cold_cache = scratch / "warm", scratch / "cold"
    base_env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "")}

    def empty_cold_cache() -> None:
        shutil.rmtree(cold_cache, ignore_errors=True)

    variants = [
        Variant(
            "venv: python -m runtime version",
            [args.venv_python, "-m", "runtime", "version"],
            env=base_env,
            cwd=str(ROOT),
        ),
        Variant(
            "pyz warm: empty venv, python -I tern.pyz version",
            [pyz_python, "-I", str(pyz), "version"],
            env={**base_env, "TERN_CACHE_DIR": str(warm_cache)},
            cwd=str(scratch),
        ),
        Variant(
            "pyz cold (empty cache): empty venv, python -I tern.pyz version",
            [pyz_python, "-I", str(pyz), "version"],
            env={**base_env, "TERN_CACHE_DIR": str(cold_cache)},
            cwd=str(scratch),
            before_each=empty_cold_cache,
        ),
        Variant("baseline: empty venv python -I -c pass", [pyz_python, "-I", "-c", "pass"], env=base_env),
    ]
    try:
        results = run_commands(variants, runs=args.runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"python: {args.python} ({sys.version.split()[0]}), pyz: {pyz.stat().st_size / 1e6:.2f} MB, runs: {args.runs}"
    )
    print_table("tern version: start-up", results)
    venv, warm, cold = results[0].median_ms, results[1].median_ms, results[2].median_ms
    print(
        f"\nwarm pyz / venv = {warm / venv:.2f}x (target <= 1.3x); "
        f"first-run extraction = {cold - warm:.1f} ms (target <= 50 ms)"
    )


if __name__ == "__main__":
    main()
