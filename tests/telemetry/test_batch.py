"""The batch queue between ended spans and the exporter: bounded in spans and bytes,
every drop counted, batches in order and within their bounds, each a request the
official decoder reads."""

from __future__ import annotations

from runtime.telemetry.batch import BatchQueue
from runtime.telemetry.context import SpanContext
from runtime.telemetry.otlp import OtlpEncoder
from runtime.telemetry.sampling import Sampler
from runtime.telemetry.spans import Limits, Recorder, SpanKind

ENCODER = OtlpEncoder({"service.name": "tern"}, "tern")
RECORDER = Recorder(Sampler(1.0), Limits(max_value_chars=100_000))


def span(name: str = "s", payload: int = 0):
    s = RECORDER.start(name, SpanKind.INTERNAL, 1)
    if payload:
        RECORDER.set(s, "payload", "x" * payload)
    RECORDER.end(s, 2)
    return s


def test_past_max_spans_new_spans_are_dropped_and_counted():
    queue = BatchQueue(ENCODER, max_spans=10, batch_spans=4)
    results = [queue.put(span(f"s{i}")) for i in range(25)]
    assert results == [True] * 10 + [False] * 15
    assert len(queue) == 10 and queue.dropped == 15


def test_past_max_bytes_new_spans_are_dropped_and_counted():
    one = len(ENCODER.span(span(payload=1000)))
    queue = BatchQueue(ENCODER, max_bytes=one * 3 + 200, batch_bytes=one * 3 + 200)
    assert [queue.put(span(payload=1000)) for _ in range(5)] == [True, True, True, False, False]
    assert queue.bytes == one * 3 and queue.dropped == 2
    assert queue.put(span())  # a small one still fits


def test_a_span_larger_than_a_request_is_dropped():
    queue = BatchQueue(ENCODER, batch_bytes=5_000)
    assert not queue.put(span(payload=10_000))
    assert queue.dropped == 1 and len(queue) == 0 and queue.bytes == 0


def test_an_unsampled_span_is_not_queued_nor_counted_as_dropped():
    queue = BatchQueue(ENCODER)
    unsampled = RECORDER.start("s", SpanKind.INTERNAL, 1, SpanContext(b"\x01" * 16, b"\x02" * 8, 0))
    assert not queue.put(unsampled)
    assert len(queue) == 0 and queue.dropped == 0


def test_batches_come_out_oldest_first_within_their_bounds(decode_otlp):
    queue = BatchQueue(ENCODER, batch_spans=4)
    for i in range(10):
        queue.put(span(f"s{i}"))
        assert queue.ready is (i >= 3)
    batches = [queue.take(), queue.take(), queue.take()]
    assert [b.spans for b in batches] == [4, 4, 2] and queue.take() is None
    assert len(queue) == 0 and queue.bytes == 0 and not queue.ready
    views = decode_otlp(*(b.body for b in batches))
    names = [s["name"] for v in views for s in v["resource_spans"][0]["scope_spans"][0]["spans"]]
    assert names == [f"s{i}" for i in range(10)]
    assert all(v["same_bytes"] for v in views)


def test_a_batch_stops_at_its_byte_bound():
    one = len(ENCODER.span(span(payload=1000)))
    queue = BatchQueue(ENCODER, batch_bytes=one * 2 + 1)
    for _ in range(5):
        queue.put(span(payload=1000))
    assert queue.ready
    assert [queue.take().spans for _ in range(3)] == [2, 2, 1]


def test_a_lost_batch_is_counted_with_the_drops():
    queue = BatchQueue(ENCODER)
    for _ in range(3):
        queue.put(span())
    queue.lost(queue.take())
    assert queue.dropped == 3 and len(queue) == 0


def test_the_queue_holds_its_bound_under_a_flood():
    queue = BatchQueue(ENCODER, max_spans=100, max_bytes=50_000)
    for _ in range(5_000):
        queue.put(span(payload=200))
    assert len(queue) <= 100 and queue.bytes <= 50_000
    assert len(queue) + queue.dropped == 5_000
