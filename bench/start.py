"""Start-up: `tern version` from the single-file pyz (cold and warm cache) against the
same code from a venv, on every CPython 3.10-3.13 found. Run from the repo root after
`python3 build_pyz.py`:

    .venv/bin/python bench/start.py [--runs 21] [--pythons 3.10,3.11,3.12,3.13] [--command version]

Each Python gets a venv with tern's runtime dependencies installed from build/wheels
(made once, under build/bench-venvs/; `python -m runtime` runs from the repo) and an
empty venv for the pyz, so both sides start the same interpreter with nothing else in
site-packages: only where the code comes from differs.

Targets (issue: daily use): warm pyz within 1.3x of the venv on each Python; the
first run (cold minus warm) is reported, not targeted: it compiles what it imports.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Variant, print_table, run_commands  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
TARGET = 1.3
SETUP_TIMEOUT_SECS = 300


def find_python(version: str) -> str | None:
    """A real CPython ``version`` binary (not a pyenv shim), or None."""
    candidates = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    candidates.append(shutil.which(f"python{version}") or "")
    for candidate in filter(None, candidates):
        try:
            out = subprocess.run([candidate, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out == version:
            return os.path.realpath(candidate)
    return None


def deps_venv(python: str, version: str) -> str:
    """build/bench-venvs/<version>: tern's pinned runtime dependencies, from build/wheels."""
    venv = ROOT / "build" / "bench-venvs" / version
    bin_python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return str(bin_python)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=SETUP_TIMEOUT_SECS)
    lock = (ROOT / ".ci" / "requirements.lock").read_text().split("# [runtime]", 1)[1].split("# [", 1)[0]
    requirements = venv / "requirements.txt"
    requirements.write_text(lock)
    subprocess.run([str(bin_python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--find-links", str(ROOT / "build" / "wheels"), "--no-deps", "-r", str(requirements)],
                   check=True, timeout=SETUP_TIMEOUT_SECS)
    (venv / ".complete").write_text("")
    return str(bin_python)


def empty_venv(python: str, where: Path) -> str:
    subprocess.run([python, "-m", "venv", "--without-pip", str(where)], check=True, timeout=SETUP_TIMEOUT_SECS)
    return str(where / "bin" / "python")


def measure(version: str, python: str, pyz: Path, scratch: Path, runs: int, command: list) -> list:
    venv_python = deps_venv(python, version)
    pyz_python = empty_venv(python, scratch / f"empty-{version}")
    warm_cache, cold_cache = scratch / f"warm-{version}", scratch / f"cold-{version}"
    base_env = {"PATH": os.environ.get("PATH", ""), "HOME": str(scratch)}

    def empty_cold_cache() -> None:
        shutil.rmtree(cold_cache, ignore_errors=True)

    words = " ".join(command)
    variants = [
        Variant(f"{version} venv: python -m runtime {words}", [venv_python, "-m", "runtime", *command],
                env=base_env, cwd=str(ROOT)),
        Variant(f"{version} pyz warm: python -I tern.pyz {words}", [pyz_python, "-I", str(pyz), *command],
                env={**base_env, "TERN_CACHE_DIR": str(warm_cache)}, cwd=str(scratch)),
        Variant(f"{version} pyz cold (empty cache)", [pyz_python, "-I", str(pyz), *command],
                env={**base_env, "TERN_CACHE_DIR": str(cold_cache)}, cwd=str(scratch), before_each=empty_cold_cache),
        Variant(f"{version} baseline: python -I -c pass", [pyz_python, "-I", "-c", "pass"], env=base_env),
    ]
    return run_commands(variants, runs=runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--pythons", default=",".join(PYTHONS), help="versions to measure (default: 3.10-3.13)")
    parser.add_argument("--command", default="version", help="the tern command line to time (default: version)")
    parser.add_argument("--pyz", default=str(ROOT / "dist" / "tern.pyz"), help="the pyz (default: dist/tern.pyz)")
    args = parser.parse_args()
    pyz = Path(args.pyz).resolve()
    if not pyz.is_file():
        raise SystemExit(f"{pyz} is missing: run `python3 build_pyz.py` first")
    scratch = Path(tempfile.mkdtemp(prefix="tern-bench-"))
    summary = []
    try:
        for version in args.pythons.split(","):
            python = find_python(version)
            if python is None:
                print(f"\n(no CPython {version} here: skipped)")
                continue
            results = measure(version, python, pyz, scratch, args.runs, args.command.split())
            print_table(f"tern {args.command}, CPython {version} ({python}), {args.runs} runs", results)
            summary.append((version, *(r.median_ms for r in results)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n### Summary: tern {args.command}, pyz {pyz.stat().st_size / 1e6:.2f} MB, medians of {args.runs} runs\n")
    print("| Python | venv ms | pyz warm ms | warm / venv | target | pyz cold ms | python -c pass ms |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for version, venv, warm, cold, bare in summary:
        verdict = "ok" if warm / venv <= TARGET else "MISSED"
        print(f"| {version} | {venv:.1f} | {warm:.1f} | {warm / venv:.2f}x | <= {TARGET}x {verdict} "
              f"| {cold:.1f} | {bare:.1f} |")


if __name__ == "__main__":
    main()
