"""Trace context sent by tern's MCP client over Streamable HTTP: the
``traceparent`` header and ``params._meta.traceparent`` of a ``tools/call`` both name
that request's own CLIENT span, a child of the caller's span; with telemetry off
neither is sent (a scripted server records what arrives)."""

from __future__ import annotations

import trio

from runtime import tracing
from runtime.config.schema import TelemetryConfig
from runtime.mcp.client.client import McpClient
from runtime.net.telemetry_export import Exporter
from tests.mcp.test_http_hostile import body, entry, handshake_then, rpc, serve
from tests.telemetry.collector import Collector


def recording(seen: list):
    async def call(message):
        return 200, {"Content-Type": "application/json"}, body(rpc(message, {"content": [{"type": "text",
                                                                                         "text": "ok"}]}))
    mcp = handshake_then(call)

    async def handler(method, headers, message):
        if message and message.get("method") == "tools/call":
            seen.append((headers, message))
        return await mcp(method, headers, message)
    return handler


async def test_streamable_http_sends_the_request_span_in_header_and_meta(nursery):
    seen: list = []
    url = await serve(recording(seen), nursery)
    with Collector() as collector:
        exporter = Exporter(TelemetryConfig(otlp_endpoint=collector.url), delay_secs=60)
        async with trio.open_nursery() as inner:
            await inner.start(exporter.run)
            client = await McpClient.connect(entry(url), nursery)
            with tracing.span("caller", tracing.INTERNAL):
                caller = tracing.meta()["traceparent"]
                await client.call_tool("x", {})
            await client.aclose()
            inner.cancel_scope.cancel()
    (headers, message), = seen
    sent = message["params"]["_meta"]["traceparent"]
    assert headers["traceparent"] == sent
    version, trace, span, flags = sent.split("-")
    assert (version, flags) == ("00", "03") and trace == caller.split("-")[1] and span != caller.split("-")[2]
    assert exporter.exported == 3  # the initialize request's, the caller's and the tools/call's


async def test_off_sends_no_trace_context(nursery):
    seen: list = []
    client = await McpClient.connect(entry(await serve(recording(seen), nursery)), nursery)
    with tracing.span("caller"):
        await client.call_tool("x", {})
    await client.aclose()
    (headers, message), = seen
    assert "traceparent" not in headers and "traceparent" not in message["params"].get("_meta", {})
