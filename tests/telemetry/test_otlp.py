"""The hand-written OTLP encoder, checked by the official decoder: the bytes tern sends
are parsed by ``opentelemetry-proto`` (a real peer, in ``.peers/otel-venv``) and every
field is compared; protobuf's own serialization of what it parsed gives back our bytes."""

from __future__ import annotations

import math

from runtime.telemetry.context import extract
from runtime.telemetry.otlp import OtlpEncoder
from runtime.telemetry.sampling import Sampler
from runtime.telemetry.spans import Limits, Recorder, SpanKind, StatusCode

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = extract(f"00-{TRACE}-00f067aa0ba902b7-01", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
ENCODER = OtlpEncoder({"service.name": "tern-a", "service.version": "0.1.0"}, "tern", "0.1.0")
T0 = 1_764_000_000_123_456_789  # nanoseconds: needs all 64 bits of fixed64's room


def recorder(**limits) -> Recorder:
    return Recorder(Sampler(1.0), Limits(**limits))


def only_spans(view: dict) -> list[dict]:
    assert view["same_bytes"], "protobuf re-encodes what it parsed differently: a field is unknown or out of order"
    (resource_spans,) = view["resource_spans"]
    (scope_spans,) = resource_spans["scope_spans"]
    return scope_spans["spans"]


def test_every_field_of_a_span_reaches_the_official_decoder(decode_otlp):
    r = recorder()
    span = r.start("chat llama3", SpanKind.CLIENT, T0, PARENT)
    r.update(span, {
        "gen_ai.request.model": "llama3", "gen_ai.usage.input_tokens": 0, "gen_ai.usage.output_tokens": 1234,
        "neg": -1, "min": -(1 << 63), "max": (1 << 63) - 1, "t": True, "f": False, "d": 0.0, "pi": 3.25,
        "inf": math.inf, "empty": "", "unicode": "caf\u00e9 \u2603 \U0001f600", "surrogate": "a\ud800b",
        "gen_ai.response.finish_reasons": ["stop", "length"], "ints": [0, -2, 300], "bools": [False],
        "floats": [-0.5], "none": [],
    })
    r.set(span, "dropped", None)
    r.event(span, "gen_ai.choice", T0 + 5, {"index": 0})
    r.event(span, "bare", T0 + 6)
    r.end(span, T0 + 1_000_000, StatusCode.ERROR, "upstream said 500")

    (view,) = decode_otlp(ENCODER.request([ENCODER.span(span)]))
    (resource_spans,) = view["resource_spans"]
    assert resource_spans["resource"] == [["service.name", ["string_value", "tern-a"]],
                                          ["service.version", ["string_value", "0.1.0"]]]
    assert resource_spans["scope_spans"][0]["scope"] == {"name": "tern", "version": "0.1.0"}
    (got,) = only_spans(view)
    assert got == {
        "trace_id": TRACE, "span_id": span.context.span_id.hex(),
        "trace_state": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", "parent_span_id": "00f067aa0ba902b7",
        "flags": 0x01 | 0x100 | 0x200,  # sampled; has-is-remote; is-remote
        "name": "chat llama3", "kind": 3, "start_time_unix_nano": T0, "end_time_unix_nano": T0 + 1_000_000,
        "attributes": [
            ["gen_ai.request.model", ["string_value", "llama3"]],
            ["gen_ai.usage.input_tokens", ["int_value", 0]],  # a oneof holding its default is still there
            ["gen_ai.usage.output_tokens", ["int_value", 1234]],
            ["neg", ["int_value", -1]], ["min", ["int_value", -(1 << 63)]], ["max", ["int_value", (1 << 63) - 1]],
            ["t", ["bool_value", True]], ["f", ["bool_value", False]],
            ["d", ["double_value", 0.0]], ["pi", ["double_value", 3.25]], ["inf", ["double_value", math.inf]],
            ["empty", ["string_value", ""]],
            ["unicode", ["string_value", "caf\u00e9 \u2603 \U0001f600"]],
            ["surrogate", ["string_value", "a?b"]],  # not valid UTF-8: replaced, or the request is refused
            ["gen_ai.response.finish_reasons",
             ["array_value", [["string_value", "stop"], ["string_value", "length"]]]],
            ["ints", ["array_value", [["int_value", 0], ["int_value", -2], ["int_value", 300]]]],
            ["bools", ["array_value", [["bool_value", False]]]],
            ["floats", ["array_value", [["double_value", -0.5]]]],
            ["none", ["array_value", []]],
        ],
        "dropped_attributes_count": 1,
        "events": [
            {"time_unix_nano": T0 + 5, "name": "gen_ai.choice", "attributes": [["index", ["int_value", 0]]],
             "dropped_attributes_count": 0},
            {"time_unix_nano": T0 + 6, "name": "bare", "attributes": [], "dropped_attributes_count": 0},
        ],
        "dropped_events_count": 0, "links": 0,
        "status": {"code": 2, "message": "upstream said 500", "has": True},
    }


def test_a_root_span_an_unset_status_and_every_kind(decode_otlp):
    r = recorder()
    spans = []
    for kind in SpanKind:
        span = r.start(f"s{kind.value}", kind, T0)
        r.end(span, T0)
        spans.append(span)
    (view,) = decode_otlp(ENCODER.request(ENCODER.span(s) for s in spans))
    got = only_spans(view)
    assert [g["kind"] for g in got] == [1, 2, 3, 4, 5]
    for g, span in zip(got, spans):
        assert g["parent_span_id"] == "" and g["trace_state"] == "" and g["trace_id"] == span.context.trace_id.hex()
        assert g["flags"] == 0x01 | 0x02 | 0x100  # sampled, random; a local root: has-is-remote, not remote
        assert g["status"] == {"code": 0, "message": "", "has": False}
        assert g["start_time_unix_nano"] == g["end_time_unix_nano"] == T0


def test_an_error_message_is_sent_only_with_an_error(decode_otlp):
    r = recorder()
    ok = r.start("ok", SpanKind.INTERNAL, T0)
    r.end(ok, T0 + 1, StatusCode.OK, "ignored")
    (view,) = decode_otlp(ENCODER.request([ENCODER.span(ok)]))
    assert only_spans(view)[0]["status"] == {"code": 1, "message": "", "has": True}


def test_bounds_survive_the_wire(decode_otlp):
    """10,000 attributes and 1 MB values: the request stays small and says what was dropped."""
    r = recorder()
    span = r.start("big", SpanKind.SERVER, T0)
    r.update(span, {f"k{i}": "v" * 1_000_000 if i == 0 else i for i in range(10_000)})
    for i in range(200):
        r.event(span, "e", T0 + i, {f"a{j}": j for j in range(100)})
    r.end(span, T0 + 1)
    body = ENCODER.request([ENCODER.span(span)])
    assert len(body) < 200_000
    (view,) = decode_otlp(body)
    (got,) = only_spans(view)
    assert len(got["attributes"]) == 128 and got["dropped_attributes_count"] == 10_000 - 128
    assert got["attributes"][0] == ["k0", ["string_value", "v" * 4096]]
    assert len(got["events"]) == 128 and got["dropped_events_count"] == 72
    assert all(len(e["attributes"]) == 32 and e["dropped_attributes_count"] == 68 for e in got["events"])


def test_an_empty_request_is_valid(decode_otlp):
    (view,) = decode_otlp(ENCODER.request([]))
    assert only_spans(view) == []
