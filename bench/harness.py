"""Side-by-side benchmark harness: run each variant of a case several times, interleaved,
and print medians and ratios as a Markdown table.

Interleaving (A, B, A, B, ...) rather than all-A-then-all-B keeps drift in machine
load from favouring one side. Peak RSS is per child process, read with ``os.wait4``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence

__all__ = ["Variant", "Result", "run_commands", "print_table", "status_kib"]


@dataclass
class Variant:
    """One side of a comparison: a command line, and an optional per-run setup."""

    label: str
    argv: Sequence[str]
    env: dict | None = None
    cwd: str | None = None
    before_each: Callable[[], None] | None = None


@dataclass
class Result:
    label: str
    seconds: list = field(default_factory=list)
    rss_kib: list = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.seconds) * 1000

    @property
    def median_rss_mib(self) -> float:
        return statistics.median(self.rss_kib) / 1024


def _run_once(variant: Variant) -> tuple:
    if variant.before_each:
        variant.before_each()
    started = time.perf_counter()
    proc = subprocess.Popen(variant.argv, env=variant.env, cwd=variant.cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{variant.label}: exit {proc.returncode}: {stderr.strip()[:500]}")
    return elapsed, usage.ru_maxrss  # KiB on Linux


def run_commands(variants: Sequence[Variant], runs: int = 11, warmup: int = 2) -> list:
    """Run every variant ``runs`` times, interleaved, after ``warmup`` unmeasured rounds."""
    results = [Result(v.label) for v in variants]
    for round_no in range(warmup + runs):
        for variant, result in zip(variants, results):
            seconds, rss = _run_once(variant)
            if round_no >= warmup:
                result.seconds.append(seconds)
                result.rss_kib.append(rss)
    return results


def print_table(title: str, results: Sequence[Result], baseline: int = 0) -> None:
    """Markdown table: median time and RSS, and the time ratio to ``results[baseline]``."""
    base = results[baseline].median_ms
    print(f"\n### {title}\n")
    print("| variant | median ms | min ms | max ms | peak RSS MiB | time ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r.label} | {r.median_ms:.1f} | {min(r.seconds) * 1000:.1f} | {max(r.seconds) * 1000:.1f} "
              f"| {r.median_rss_mib:.1f} | {r.median_ms / base:.2f}x |")


def status_kib(pid: int, *fields: str) -> dict:
    """Memory figures of a running process from ``/proc/<pid>/status`` (Linux), in KiB:
    ``status_kib(pid, "VmRSS", "VmHWM")`` -> ``{"VmRSS": ..., "VmHWM": ...}``."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in fields:
                found[name] = int(value.split()[0])
    missing = set(fields) - set(found)
    if missing:
        raise RuntimeError(f"no {', '.join(sorted(missing))} in /proc/{pid}/status")
    return found
