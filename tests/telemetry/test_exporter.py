"""The exporter shell against a real loopback collector (real time, short): what it sends
and with which headers, what it does with 500, 429 and a collector that never answers,
that callers are never slowed and the queue never grows past its bound, the flush at
shutdown, that no secret leaves, and the current span in log lines."""

from __future__ import annotations

import logging
import time

import pytest
import trio

from runtime import log, tracing
from runtime.config.schema import TelemetryConfig
from runtime.net.telemetry_export import MAX_RETRY_AFTER_SECS, Exporter, traces_url
from runtime.wire.retry import retry_after
from tests.telemetry.collector import Collector

SECRET = "collector-token-7f3a9c"


def spans_of(views: list[dict]) -> list[dict]:
    return [s for v in views for rs in v["resource_spans"] for ss in rs["scope_spans"] for s in ss["spans"]]


async def run_spans(exporter: Exporter, count: int, **attrs: object) -> float:
    """Ends ``count`` spans through the public API; the slowest one's seconds."""
    slowest = 0.0
    for i in range(count):
        started = time.perf_counter()
        with tracing.span(f"op {i}", tracing.INTERNAL, dict(attrs)):
            pass
        slowest = max(slowest, time.perf_counter() - started)
    return slowest


def test_traces_url():
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/v1/traces") == "http://c:4318/v1/traces"
    assert traces_url("https://c/otlp") == "https://c/otlp/v1/traces"


@pytest.mark.parametrize("value, seconds", [(None, 1.0), ("2", 2.0), ("0", 0.0), ("-5", 0.0), ("3600", 5.0),
                                            ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("nan", 1.0), ("inf", 1.0)])
def test_retry_after_is_bounded(value, seconds):
    """The exporter's reading of Retry-After (the one in wire.retry): at most 5 s, 1 s if unreadable."""
    assert retry_after(value, default=1.0, most=MAX_RETRY_AFTER_SECS) == seconds


async def test_batches_reach_the_collector_with_headers_and_nothing_secret(decode_otlp, monkeypatch):
    monkeypatch.setenv("OTEL_TOKEN", SECRET)
    with Collector() as collector:
        exporter = Exporter(TelemetryConfig(otlp_endpoint=collector.url, service_name="unit",
                                            headers={"Authorization": "Bearer ${OTEL_TOKEN}"}, batch_spans=4),
                            delay_secs=60)
        async with trio.open_nursery() as nursery:
            await nursery.start(exporter.run)
            assert log.secrets_version() and SECRET in log.registered_secrets()
            with tracing.span("GET /a2a/{agent}", tracing.SERVER, {"url.path": f"/x?token={SECRET}"}) as outer:
                outer.set("gen_ai.tool.name", f"tool-{SECRET}")
                with tracing.span("child", tracing.INTERNAL):
                    headers: dict[str, str] = {}
                    tracing.inject(headers)
            await run_spans(exporter, 2)  # 4 spans: a full batch, sent without waiting for the delay
            with trio.fail_after(10):
                while not collector.bodies:
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    assert collector.headers[0]["Authorization"] == f"Bearer {SECRET}"
    assert collector.headers[0]["Content-Type"] == "application/x-protobuf"
    assert all(SECRET.encode() not in body for body in collector.bodies)
    (view,) = decode_otlp(*collector.bodies)
    assert view["same_bytes"]
    resource = dict((k, v[1]) for k, v in view["resource_spans"][0]["resource"])
    assert resource["service.name"] == "unit"
    spans = {s["name"]: s for s in spans_of([view])}
    assert set(spans) == {"GET /a2a/{agent}", "child", "op 0", "op 1"}
    outer, child = spans["GET /a2a/{agent}"], spans["child"]
    assert child["parent_span_id"] == outer["span_id"] and child["trace_id"] == outer["trace_id"]
    assert headers["traceparent"] == f"00-{child['trace_id']}-{child['span_id']}-03"
    attrs = {k: v[1] for k, v in outer["attributes"]}
    assert attrs == {"url.path": "/x?token=[redacted]", "gen_ai.tool.name": "tool-[redacted]"}
    assert exporter.exported == 4 and exporter.dropped == 0
    assert not tracing.enabled()  # uninstalled at the end


@pytest.mark.parametrize("status, requests", [(500, 1), (400, 1), (429, 2), (503, 2)])
async def test_a_refused_batch_is_retried_only_when_retryable_then_counted_lost(status, requests):
    with Collector(status, retry_after="0") as collector:
        exporter = Exporter(TelemetryConfig(otlp_endpoint=collector.url, batch_spans=3), delay_secs=60)
        async with trio.open_nursery() as nursery:
            await nursery.start(exporter.run)
            await run_spans(exporter, 3)
            with trio.fail_after(10):
                while exporter.failed == 0:
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    assert collector.requests == requests
    assert exporter.failed == 1 and exporter.dropped == 3 and exporter.exported == 0
    assert dict(exporter.samples()) == {("exported",): 0.0, ("dropped",): 3.0}


async def test_a_collector_that_never_answers_slows_no_call_and_grows_no_memory():
    with Collector(hang=True) as collector:
        exporter = Exporter(TelemetryConfig(otlp_endpoint=collector.url, batch_spans=10, max_queue_spans=50,
                                            export_timeout_secs=1.0), delay_secs=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(exporter.run)
            slowest = await run_spans(exporter, 10)  # the first batch leaves, and hangs
            with trio.fail_after(5):
                while collector.requests == 0:
                    await trio.sleep(0.01)
            started = time.perf_counter()
            slowest = max(slowest, await run_spans(exporter, 5000, **{"gen_ai.tool.name": "x" * 200}))
            calls = time.perf_counter() - started
            tracer = exporter.tracer
            assert len(tracer.raw) <= 50 and tracer.raw_bytes <= tracer.max_bytes
            assert len(exporter.queue) <= 50 and exporter.queue.bytes <= exporter.queue.max_bytes
            assert exporter.dropped >= 5000 - 50
            with trio.fail_after(5):  # the hung request times out: its batch is lost, counted
                while exporter.failed == 0:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    assert calls < 5.0 and slowest < 0.5, (calls, slowest)  # never the 1 s export timeout
    assert exporter.dropped >= 5000 - 50 + 10


async def test_shutdown_flushes_what_is_queued_within_its_deadline():
    with Collector() as collector:
        exporter = Exporter(TelemetryConfig(otlp_endpoint=collector.url), delay_secs=60)
        async with trio.open_nursery() as nursery:
            await nursery.start(exporter.run)
            await run_spans(exporter, 7)
            nursery.cancel_scope.cancel()
    assert exporter.exported == 7 and len(collector.bodies) == 1


async def test_shutdown_with_a_dead_collector_ends_within_the_flush_deadline():
    with Collector(hang=True) as collector:
        exporter = Exporter(TelemetryConfig(otlp_endpoint=collector.url, export_timeout_secs=30), delay_secs=60)
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            await nursery.start(exporter.run)
            await run_spans(exporter, 3)
            nursery.cancel_scope.cancel()
    assert time.monotonic() - started < 5  # FLUSH_SECS, not the 30 s export timeout
    assert exporter.exported == 0


async def test_log_lines_carry_the_current_trace_id(capsys):
    with Collector() as collector:
        exporter = Exporter(TelemetryConfig(otlp_endpoint=collector.url), delay_secs=60)
        log.setup_logging("info", "text")
        async with trio.open_nursery() as nursery:
            await nursery.start(exporter.run)
            logging.getLogger("tern.test").info("outside")
            with tracing.span("op", tracing.INTERNAL):
                trace_id = tracing.trace_id()
                logging.getLogger("tern.test").info("inside")
            nursery.cancel_scope.cancel()
    lines = capsys.readouterr().err.splitlines()
    assert any(line.endswith(f"tern.test: inside trace_id={trace_id}") for line in lines), lines
    assert any(line.endswith("tern.test: outside") for line in lines), lines
    assert len(trace_id) == 32


@pytest.mark.parametrize("settings, problem", [
    ({"otlp_endpoint": "ftp://collector"}, "telemetry.otlp_endpoint: expected an http:// or https:// URL"),
    ({"sampling_ratio": 1.5}, "telemetry.sampling_ratio: expected 0 to 1, got 1.5"),
    ({"sampling_ratio": -0.1}, "telemetry.sampling_ratio: expected 0 to 1, got -0.1"),
    ({"service_name": " "}, "telemetry.service_name: must not be empty"),
    ({"max_queue_spans": 0}, "telemetry.max_queue_spans: expected a number above 0, got 0"),
    ({"export_timeout_secs": -1.0}, "telemetry.export_timeout_secs: expected a number above 0, got -1.0"),
])
def test_config_problems(settings, problem):
    from runtime.config.checks import find_problems
    from runtime.config.schema import Config

    problems = find_problems(Config(telemetry=TelemetryConfig(**settings)))
    assert any(p.startswith(problem) for p in problems), problems


def test_an_unset_header_variable_is_a_config_error(monkeypatch):
    from runtime.errors import ConfigError

    monkeypatch.delenv("NO_SUCH_OTEL_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"telemetry: header Authorization needs \$\{NO_SUCH_OTEL_TOKEN\}"):
        Exporter(TelemetryConfig(otlp_endpoint="http://127.0.0.1:4318",
                                 headers={"Authorization": "Bearer ${NO_SUCH_OTEL_TOKEN}"}))
