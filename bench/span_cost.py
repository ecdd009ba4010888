"""What two spans cost in one process: tern's tracing against the official OpenTelemetry
Python SDK, the same work side by side. From the repo root:

    python bench/span_cost.py [--calls 20000] [--rounds 5]

One "call" is the spans of an echo call through ``tern mcp``: a SERVER span ``tools/call
echo`` with three attributes (one of them different each call) and, inside it, an
INTERNAL ``invoke_agent echo`` with two. Both sides record every span and turn it into
OTLP protobuf bytes: tern drains its raw spans through its encoder (masking, bounds,
the cached attribute bytes); the SDK's ``BatchSpanProcessor`` hands batches of 2,048 to
an exporter that encodes them with the SDK's own ``encode_spans`` and sends nothing.
Reported: CPU microseconds per call (the process, all threads: the SDK encodes in its
worker thread), the median over the rounds, and the ratio.

Why this exists: issue 18 asks telemetry on to cost at most 5% of an echo call through
``tern mcp`` (about 157 us here, so 8 us for its two spans). This shows the floor in
CPython: what the spans cost with nothing else running.

Last figures (2-core dev box, 2026-11-25, two runs): tern 11.3-12.3 us per call, the
OpenTelemetry SDK 1.45.2 93.6-103.9 us: tern about 8x cheaper, and still above 8 us.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TERN = textwrap.dedent("""
    import json, sys, time
    from runtime import tracing
    from runtime.telemetry.batch import BatchQueue
    from runtime.telemetry.otlp import OtlpEncoder
    from runtime.telemetry.sampling import Sampler
    calls, rounds = int(sys.argv[1]), int(sys.argv[2])
    queue = BatchQueue(OtlpEncoder({"service.name": "bench"}, "bench", "0"), max_spans=8192, max_bytes=4 << 20,
                       batch_spans=2048, batch_bytes=1 << 20)
    tracer = tracing.Tracer(Sampler(1.0), queue, max_spans=8192, max_bytes=4 << 20, batch_spans=2048)
    tracing.install(tracer)
    out = []
    for _ in range(rounds):
        start = time.process_time()
        for i in range(calls):
            with tracing.span("tools/call echo", tracing.SERVER, {"mcp.method.name": "tools/call",
                              "gen_ai.tool.name": "echo", "jsonrpc.request.id": str(i)}):
                with tracing.span("invoke_agent echo", tracing.INTERNAL, {"gen_ai.operation.name": "invoke_agent",
                                  "gen_ai.agent.name": "echo"}):
                    pass
            if len(tracer.raw) >= 2048:
                tracer.drain(4096)
                while (batch := queue.take()) is not None:
                    pass
        tracer.drain(1 << 20)
        while queue.take() is not None:
            pass
        out.append((time.process_time() - start) / calls * 1e6)
    print(json.dumps(out))
""")

SDK = textwrap.dedent("""
    import json, sys, time
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    calls, rounds = int(sys.argv[1]), int(sys.argv[2])

    class Encoding(SpanExporter):
        def export(self, spans):
            encode_spans(spans).SerializeToString()
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Encoding(), max_queue_size=8192, max_export_batch_size=2048))
    tracer = provider.get_tracer("bench")
    out = []
    for _ in range(rounds):
        start = time.process_time()
        for i in range(calls):
            with tracer.start_as_current_span("tools/call echo", kind=trace.SpanKind.SERVER, attributes={
                    "mcp.method.name": "tools/call", "gen_ai.tool.name": "echo", "jsonrpc.request.id": str(i)}):
                with tracer.start_as_current_span("invoke_agent echo", attributes={
                        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "echo"}):
                    pass
        provider.force_flush()
        out.append((time.process_time() - start) / calls * 1e6)
    print(json.dumps(out))
""")


def run(python: str, code: str, calls: int, rounds: int, env: dict[str, str] | None = None) -> list[float]:
    done = subprocess.run([python, "-c", code, str(calls), str(rounds)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from tests import peers

    sdk_python = str(peers.mcp_otel_python())
    tern = statistics.median(run(sys.executable, TERN, args.calls, args.rounds, {"PYTHONPATH": str(ROOT)}))
    sdk = statistics.median(run(sdk_python, SDK, args.calls, args.rounds))
    print(f"{'per call (2 spans), CPU':<34}{'us':>8}")
    print(f"{'tern tracing':<34}{tern:>8.1f}")
    print(f"{'OpenTelemetry SDK (encode_spans)':<34}{sdk:>8.1f}")
    print(f"{'SDK / tern':<34}{sdk / tern:>8.2f}x")


if __name__ == "__main__":
    main()
