"""Tool pipeline overhead per call of a no-op built-in tool (target: median <= 50 us),
with every guard on: capability check, schema validation, loop guard, taint check,
timeout, truncation, redaction, taint labelling, audit record (to a temp file).

    .venv/bin/python bench/pipeline.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime.config import AgentConfig, Config, StateConfig  # noqa: E402
from runtime.kernel.audit import AuditLog  # noqa: E402
from runtime.kernel.pipeline import ToolPipeline  # noqa: E402
from runtime.ports import Tool, ToolResult  # noqa: E402
from runtime.kernel.registry import ToolRegistry  # noqa: E402

NOOP = Tool("noop", "does nothing", {"type": "object", "properties": {"n": {"type": "integer"}}})
RESULT = ToolResult("ok")


async def noop(arguments: dict, context) -> ToolResult:
    return RESULT


async def measure(calls: int, state: Path) -> tuple[list[float], list[float]]:
    registry = ToolRegistry()
    registry.register(NOOP, noop)
    pipeline = ToolPipeline(registry, Config(state=StateConfig(dir=str(state))), audit=AuditLog(state / "audit.jsonl"))
    agent = AgentConfig(name="bench", kind="echo", tools=["noop"])
    direct, piped = [], []
    for i in range(calls):
        run = pipeline.run(agent)  # a fresh run per call: the loop guard never trips
        t0 = time.perf_counter()
        await registry.call("noop", {"n": i})
        t1 = time.perf_counter()
        await pipeline.call("noop", {"n": i}, run=run)
        t2 = time.perf_counter()
        direct.append(t1 - t0)
        piped.append(t2 - t1)
    return direct, piped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        direct, piped = trio.run(measure, args.calls, Path(tmp))
    us = lambda xs: statistics.median(xs) * 1e6  # noqa: E731
    print(f"\n### Tool pipeline, no-op built-in ({args.calls} calls, median)\n")
    print("| path | us per call | target |")
    print("|---|---:|---|")
    print(f"| registry.call (no guards) | {us(direct):.1f} | |")
    print(
        f"| pipeline.call (every guard + audit) | {us(piped):.1f} | <= 50 us: {'ok' if us(piped) <= 50 else 'MISS'} |"
    )
    print(f"| pipeline overhead | {us(piped) - us(direct):.1f} | |")


if __name__ == "__main__":
    main()
