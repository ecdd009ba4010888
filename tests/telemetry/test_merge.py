"""A span that covers an operation (the MCP server's ``tools/call X`` covers the
pipeline's ``execute_tool``) takes that span's attributes and error instead of a child
span: once, only directly under it, and never overwriting what it set itself."""

from __future__ import annotations

from runtime import tracing
from runtime.telemetry.sampling import Sampler


class Queue:
    encoder = None


def tracer() -> tracing.Tracer:
    made = tracing.Tracer(Sampler(1.0), Queue(), max_spans=100, max_bytes=1 << 20, batch_spans=100)
    tracing.install(made)
    return made


def test_the_covered_span_is_merged_once_and_others_stay_children():
    made = tracer()
    try:
        with tracing.span("tools/call x", tracing.SERVER, {"gen_ai.tool.name": "x"}, covers="execute_tool") as outer:
            with tracing.span("chat m", attributes={"gen_ai.tool.name": "m"}, merge="chat"):
                pass  # not what it covers: a child of its own
            with tracing.span("execute_tool agent_send", attributes={"gen_ai.tool.name": "agent_send",
                                                                      "gen_ai.tool.type": "function"},
                              merge="execute_tool") as inner:
                assert inner is outer
                inner.error("denied")
                with tracing.span("execute_tool y", merge="execute_tool") as again:  # a tool inside it: a child
                    assert again is not outer and again.parent is outer
        assert [s.name for s in made.raw] == ["chat m", "execute_tool y", "tools/call x"]
        assert outer.attributes == {"gen_ai.tool.name": "x", "gen_ai.tool.type": "function", "error.type": "denied"}
        assert outer.failed == "denied" and made.raw[0].parent is outer
    finally:
        tracing.uninstall()


def test_merge_without_a_covering_span_starts_a_span():
    made = tracer()
    try:
        with tracing.span("caller", covers="execute_tool"):
            with tracing.span("inner"):  # the covering span is not the current one any more
                with tracing.span("execute_tool x", merge="execute_tool") as span:
                    assert span.name == "execute_tool x" and span.parent.name == "inner"
        assert [s.name for s in made.raw] == ["execute_tool x", "inner", "caller"]
    finally:
        tracing.uninstall()


def test_off_covers_and_merge_cost_nothing():
    with tracing.span("tools/call x", covers="execute_tool") as outer, \
            tracing.span("execute_tool x", merge="execute_tool") as inner:
        assert outer is inner and not outer.recording
