"""The span model's bounds and masking, the ids and the sampler: hostile values (10,000
attributes, 1 MB strings, values of no OTLP kind, secrets) leave a bounded span."""

from __future__ import annotations

import time

import pytest

from runtime.telemetry.context import RANDOM, SAMPLED, SpanContext, extract
from runtime.telemetry.sampling import Sampler
from runtime.telemetry.spans import Limits, Recorder, SpanKind, StatusCode, new_span_id, new_trace_id

SECRET = "sk-live-0123456789abcdef"
PARENT = extract("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=1")


def recorder(**limits) -> Recorder:
    return Recorder(Sampler(1.0), Limits(**limits), known_secrets=[SECRET])


def test_ids_are_random_and_never_zero():
    traces = {new_trace_id() for _ in range(1000)}
    spans = {new_span_id() for _ in range(1000)}
    assert len(traces) == len(spans) == 1000
    assert all(len(t) == 16 and any(t) for t in traces) and all(len(s) == 8 and any(s) for s in spans)


def test_a_root_span_starts_a_trace_and_a_child_continues_its_remote_parent():
    r = recorder()
    root = r.start("invoke_agent echo", SpanKind.INTERNAL, 10)
    assert root.parent_id == b"" and not root.parent_remote
    assert root.context.flags == SAMPLED | RANDOM and not root.context.remote
    child = r.start("tools/call x", SpanKind.SERVER, 11, PARENT)
    assert child.context.trace_id == PARENT.trace_id and child.context.span_id != PARENT.span_id
    assert child.parent_id == PARENT.span_id and child.parent_remote
    assert child.context.state == (("rojo", "1"),) and child.context.sampled
    grandchild = r.start("execute_tool x", SpanKind.INTERNAL, 12, child.context)
    assert grandchild.parent_id == child.context.span_id and not grandchild.parent_remote


def test_an_unsampled_span_propagates_its_context_and_records_nothing():
    unsampled = SpanContext(PARENT.trace_id, PARENT.span_id, RANDOM, remote=True)
    r = recorder()
    span = r.start("tools/call x", SpanKind.SERVER, 1, unsampled)
    assert not span.recording and span.context.flags == RANDOM
    assert span.context.trace_id == PARENT.trace_id
    r.set(span, "gen_ai.tool.name", "x")
    r.event(span, "retry", 2)
    assert span.attributes == {} and span.events == []


def test_values_of_every_otlp_kind_are_kept():
    r = recorder()
    span = r.start("s", SpanKind.CLIENT, 1)
    r.update(span, {"s": "text", "b": False, "i": -5, "f": 0.5, "strs": ["a", "b"], "ints": (1, 2),
                    "bools": [True, False], "floats": [1.5], "empty": []})
    assert span.attributes == {"s": "text", "b": False, "i": -5, "f": 0.5, "strs": ("a", "b"), "ints": (1, 2),
                               "bools": (True, False), "floats": (1.5,), "empty": ()}
    assert span.dropped_attributes == 0
    r.set(span, "i", 6)  # a later value replaces the earlier one
    assert span.attributes["i"] == 6 and len(span.attributes) == 9


@pytest.mark.parametrize(("key", "value"), [
    ("none", None), ("dict", {"a": 1}), ("bytes", b"x"), ("object", object()),
    ("mixed", [1, "a"]), ("bool-and-int", [True, 1]), ("nested", [[1]]), ("array-of-none", [None]),
    ("huge-int", 1 << 63), ("tiny-int", -(1 << 63) - 1), ("huge-int-in-array", [1, 1 << 64]),
    ("", "empty key"), (7, "a key that is no string"), ("k" * 257, "a key over 256 characters"),
])
def test_an_attribute_of_no_otlp_kind_is_dropped_and_counted(key, value):
    r = recorder()
    span = r.start("s", SpanKind.INTERNAL, 1)
    r.set(span, key, value)
    assert span.attributes == {} and span.dropped_attributes == 1


def test_ten_thousand_attributes_leave_the_first_128_and_a_count():
    r = recorder()
    span = r.start("s", SpanKind.INTERNAL, 1)
    t0 = time.perf_counter()
    r.update(span, {f"k{i}": i for i in range(10_000)})
    assert time.perf_counter() - t0 < 2.0
    assert list(span.attributes) == [f"k{i}" for i in range(128)]
    assert span.dropped_attributes == 10_000 - 128


def test_a_megabyte_value_is_cut_and_a_secret_across_the_cut_leaves_nothing_behind():
    r = recorder(max_value_chars=100)
    span = r.start("s", SpanKind.INTERNAL, 1)
    r.set(span, "big", "x" * 1_000_000)
    assert span.attributes["big"] == "x" * 100
    r.set(span, "across", "y" * 95 + SECRET + "z" * 1_000_000)
    assert span.attributes["across"] == "y" * 95 + "[reda"
    r.set(span, "array", ["a" * 60, "b" * 1_000_000, "c"])  # the strings of an array share the bound
    assert span.attributes["array"] == ("a" * 60, "b" * 40)
    r.set(span, "items", list(range(1_000_000)))
    assert span.attributes["items"] == tuple(range(128))


def test_secrets_are_masked_in_keys_values_names_events_and_status():
    r = recorder()
    span = r.start(f"call {SECRET}", SpanKind.CLIENT, 1)
    r.set(span, f"key.{SECRET}", f"Bearer {SECRET}")
    r.set(span, "list", [SECRET, "ok"])
    r.event(span, f"event {SECRET}", 2, {"why": SECRET})
    r.end(span, 3, StatusCode.ERROR, f"401 for {SECRET}")
    assert span.name == "call [redacted]"
    assert span.attributes == {"key.[redacted]": "Bearer [redacted]", "list": ("[redacted]", "ok")}
    assert span.events[0].name == "event [redacted]" and span.events[0].attributes == {"why": "[redacted]"}
    assert span.status_message == "401 for [redacted]"
    assert SECRET not in repr(span)


def test_events_and_their_attributes_are_bounded():
    r = recorder(max_events=3, max_event_attributes=2)
    span = r.start("s", SpanKind.INTERNAL, 1)
    for i in range(10):
        r.event(span, f"e{i}", 2 + i, {"a": 1, "b": 2, "c": 3, "d": None})
    assert [e.name for e in span.events] == ["e0", "e1", "e2"] and span.dropped_events == 7
    assert span.events[0].attributes == {"a": 1, "b": 2} and span.events[0].dropped_attributes == 2


def test_names_and_status_messages_are_bounded():
    r = recorder(max_name_chars=10)
    span = r.start("n" * 1_000_000, SpanKind.INTERNAL, 5)
    r.end(span, 4, StatusCode.ERROR, "m" * 1_000_000)  # a clock that went back: end is not before start
    assert span.name == "n" * 10 and span.status_message == "m" * 10 and span.end_ns == 5


def test_a_status_message_is_kept_only_with_an_error():
    r = recorder()
    span = r.start("s", SpanKind.INTERNAL, 1)
    r.end(span, 2, StatusCode.OK, "fine")
    assert span.status is StatusCode.OK and span.status_message == ""


@pytest.mark.parametrize("ratio", [0.0, 1.0])
def test_a_root_span_follows_the_ratio_and_a_child_its_parent(ratio):
    sampler = Sampler(ratio)
    assert all(sampler.sampled(None, new_trace_id()) is (ratio == 1.0) for _ in range(200))
    sampled = SpanContext(PARENT.trace_id, PARENT.span_id, SAMPLED)
    unsampled = SpanContext(PARENT.trace_id, PARENT.span_id, 0)
    assert sampler.sampled(sampled, PARENT.trace_id) and not sampler.sampled(unsampled, PARENT.trace_id)


def test_the_ratio_reads_the_trace_ids_right_half_so_every_process_agrees():
    sampler = Sampler(0.25)
    bound = 1 << 62
    assert sampler.sampled(None, bytes(8) + (bound - 1).to_bytes(8, "big"))
    assert not sampler.sampled(None, bytes(8) + bound.to_bytes(8, "big"))
    assert sampler.sampled(None, b"\xff" * 8 + bytes(7) + b"\x01")  # the left half does not count
    hits = sum(Sampler(0.5).sampled(None, new_trace_id()) for _ in range(10_000))
    assert 4_700 < hits < 5_300  # six standard deviations either side


@pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan")])
def test_a_ratio_outside_0_to_1_is_refused(ratio):
    with pytest.raises(ValueError, match="between 0 and 1"):
        Sampler(ratio)
