"""The cached encoder of raw spans gives byte for byte what the ``Recorder`` and
``OtlpEncoder.span`` give (the decoding tests prove those), on first use and from its
cache, for hostile spans too; its cache stays bounded; a secret registered after a value
was cached is masked from then on."""

from __future__ import annotations

import pytest

from runtime import log, tracing
from runtime.telemetry.context import SpanContext, extract
from runtime.telemetry.otlp import OtlpEncoder
from runtime.telemetry.raw import MAX_CACHED_CHARS, MAX_ENTRIES, RawEncoder
from runtime.telemetry.sampling import Sampler
from runtime.telemetry.spans import Recorder, SpanKind, StatusCode

SECRET = "sk-raw-3f9a1c77e0b24d8a"
ENCODER = OtlpEncoder({"service.name": "tern-raw"}, "tern", "0.1.0")
CONTEXT = SpanContext(bytes(range(1, 17)), bytes(range(1, 9)), 1 | 2)
REMOTE = extract("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=00f067aa0ba902b7")
T0 = 1_764_000_000_123_456_789


def reference(recorder: Recorder, name, kind, context, parent, start, end, attributes, failed) -> bytes:
    span = recorder.start(name, SpanKind(kind), start, parent)
    span.context = context  # the raw span's ids, not new ones
    recorder.update(span, attributes)
    recorder.end(span, end, StatusCode.ERROR if failed else StatusCode.UNSET, failed)
    return ENCODER.span(span)


CASES = [
    ("tools/call echo", 2, None, {"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo",
                                  "jsonrpc.request.id": "7"}, ""),
    ("invoke_agent echo", 1, "local", {"gen_ai.agent.name": "echo", "gen_ai.conversation.id": "ab" * 16}, ""),
    ("a2a.task echo", 1, "remote", {"a2a.task.state": "failed", "error.type": "task_failed"}, "task_failed"),
    ("kinds", 3, None, {"t": True, "one": 1, "f": 1.0, "zero": 0, "big": 1 << 70, "neg": -5, "none": None,
                        "list": ["a", "b"], "mixed": ["a", 1], "dict": {"a": 1}, "bytes": b"x", "": "empty key",
                        "k" * 300: "long key", "empty": ""}, ""),
    ("long " + "n" * 400, 1, None, {"long": "v" * 5000, "edge": "e" * MAX_CACHED_CHARS,
                                    "over": "o" * (MAX_CACHED_CHARS + 1)}, "x" * 400),
    (f"secret {SECRET}", 1, None, {"url.path": f"/x?token={SECRET}", "arr": [SECRET, "ok"],
                                   "cut": "c" * 4090 + SECRET}, f"failed with {SECRET}"),
    ("masked keys", 1, None, {f"a.{SECRET}": "1", f"b.{SECRET}"[:2] + SECRET: "2", f"a.{SECRET} ": "3"}, ""),
    ("too many", 1, None, {f"k{i}": f"v{i}" for i in range(200)}, ""),
    ("surrogate \ud800", 1, None, {"s": "a\ud800b", "\udfff": "key"}, ""),
]


@pytest.mark.parametrize("name, kind, parent, attributes, failed", CASES, ids=[c[0][:20] for c in CASES])
def test_raw_spans_encode_as_the_recorder_does_first_and_from_the_cache(name, kind, parent, attributes, failed):
    recorder = Recorder(Sampler(1.0), known_secrets=[SECRET])
    raw = RawEncoder(recorder, ENCODER)
    parent = {"local": CONTEXT, "remote": REMOTE, None: None}[parent]
    context = SpanContext(parent.trace_id if parent else CONTEXT.trace_id, b"\x09" * 8, 1, parent.state if parent
                          else ())
    args = (name, kind, context, parent, T0, T0 + 1500, attributes, failed)
    expected = reference(recorder, *args)
    assert raw.encode(*args) == expected
    assert raw.encode(*args) == expected  # from the cache
    assert SECRET.encode() not in expected
    # an end before the start (a clock step) is clamped as the Recorder does
    assert raw.encode(name, kind, context, parent, T0, T0 - 5, attributes, failed) == reference(
        recorder, name, kind, context, parent, T0, T0 - 5, attributes, failed)


def test_the_cache_is_bounded_in_entries_and_in_what_it_keeps():
    raw = RawEncoder(Recorder(Sampler(1.0)), ENCODER)
    for i in range(3 * MAX_ENTRIES):
        raw.encode(f"op {i}", 1, CONTEXT, None, T0, T0, {"id": str(i), f"key {i}": 1, "long": "x" * 1000 + str(i)},
                   "")
    assert all(0 < len(cache) <= MAX_ENTRIES for cache in (raw._attributes, raw._names, raw._keys))
    assert all(len(value) <= MAX_CACHED_CHARS for _, value in raw._attributes)


def test_a_secret_registered_after_its_value_was_cached_is_masked_from_then_on():
    secret = "late-secret-5b1e0c9d2a"

    class Queue:
        encoder = ENCODER
        encoded: list[bytes] = []

        def put_encoded(self, encoded: bytes) -> bool:
            self.encoded.append(encoded)
            return True

    tracer = tracing.Tracer(Sampler(1.0), Queue(), max_spans=100, max_bytes=1 << 20, batch_spans=100)
    tracing.install(tracer)
    try:
        for _ in range(2):
            with tracing.span(f"call {secret}", attributes={"gen_ai.tool.name": secret}):
                pass
            tracer.drain(10)
        assert secret.encode() in Queue.encoded[-1]  # not a secret yet: kept, and cached
        log.register_secret(secret)
        with tracing.span(f"call {secret}", attributes={"gen_ai.tool.name": secret}):
            pass
        tracer.drain(10)
        assert secret.encode() not in Queue.encoded[-1] and b"[redacted]" in Queue.encoded[-1]
    finally:
        tracing.uninstall()


def test_the_official_decoder_reads_every_cached_span(decode_otlp):
    recorder = Recorder(Sampler(1.0), known_secrets=[SECRET])
    raw = RawEncoder(recorder, ENCODER)
    spans = []
    for name, kind, parent, attributes, failed in CASES * 2:  # the second round from the cache
        parent = {"local": CONTEXT, "remote": REMOTE, None: None}[parent]
        spans.append(raw.encode(name, kind, CONTEXT, parent, T0, T0 + 7, attributes, failed))
    (view,) = decode_otlp(ENCODER.request(spans))
    assert view["same_bytes"]
    decoded = view["resource_spans"][0]["scope_spans"][0]["spans"]
    assert [s["name"] for s in decoded[:2]] == ["tools/call echo", "invoke_agent echo"]
    assert len(decoded) == 2 * len(CASES)
    assert decoded[2]["status"]["code"] == 2 and decoded[2]["parent_span_id"] == REMOTE.span_id.hex()
