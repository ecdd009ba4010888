"""``tern serve`` with traces on, against hostile input and a collector that never answers:
calls keep their speed, the queue stays at its bound and ``/metrics`` counts the drops;
trace context that breaks the spec (oversized, malformed, wrong JSON types in MCP
``_meta``) starts a new trace and never fails a request; no secret (the API key, in a
tool argument, a URL query, an MCP server's header and URL) reaches the collector."""

from __future__ import annotations

import re
import time

import httpx

from tests.telemetry.collector import Collector
from tests.telemetry.test_trace_e2e import serve

SECRET = "sk-test-9c1e77b2d4"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


def config(tmp_path, endpoint: str, extra: str = "") -> object:
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\napi_key_env = "TRACE_TEST_KEY"\nrate_limit_per_sec = 0\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n'
                    f'[telemetry]\notlp_endpoint = "{endpoint}"\n{extra}'
                    '[[agents]]\nname = "echo"\nkind = "echo"\n'
                    '[[mcp_servers]]\nname = "down"\nrestart = "never"\n'
                    f'[mcp_servers.transport]\ntype = "http"\nurl = "http://127.0.0.1:9/mcp?key={SECRET}"\n'
                    '[mcp_servers.transport.headers]\nX-Key = "${TRACE_TEST_KEY}"\n')
    return path


def started(tmp_path, endpoint: str, extra: str = "") -> tuple:
    import os

    os.environ["TRACE_TEST_KEY"] = SECRET  # tern_env copies the environment; the key is read from it
    try:
        return serve(config(tmp_path, endpoint, extra), tmp_path / "serve.log", tmp_path)
    finally:
        del os.environ["TRACE_TEST_KEY"]


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert match, text
    return float(match.group(1))


def test_a_collector_that_never_answers_slows_no_call_and_the_drops_show_in_metrics(tmp_path):
    with Collector(hang=True) as collector:
        process, url = started(tmp_path, collector.url, "max_queue_spans = 5\nbatch_spans = 2\n"
                                                         "export_timeout_secs = 2\n")
        try:
            auth = {"Authorization": f"Bearer {SECRET}"}
            with httpx.Client(base_url=url, headers=auth, timeout=30) as client:
                times = []
                for i in range(60):
                    started_at = time.perf_counter()
                    answer = client.post("/api/agents/echo/message", json={"message": f"m{i}"})
                    times.append(time.perf_counter() - started_at)
                    assert answer.status_code == 200
                assert collector.requests >= 1  # the exporter is stuck on the hung request meanwhile
                assert max(times) < 1.0 and sorted(times)[30] < 0.1, times  # never the 2 s export timeout
                deadline = time.monotonic() + 20
                while True:
                    text = client.get("/metrics").text
                    if metric(text, "tern_telemetry_export_failures_total") >= 1 or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
            dropped = metric(text, 'tern_telemetry_spans_total{outcome="dropped"}')
            assert dropped >= 60 * 2 - 5 - 2 * 2  # 2 spans a call (HTTP, agent); 5 queued, 2 batches of 2 taken
            assert metric(text, "tern_telemetry_export_failures_total") >= 1
            assert metric(text, 'tern_telemetry_spans_total{outcome="exported"}') == 0
        finally:
            process.terminate()
            process.wait(20)


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def mcp_session(client: httpx.Client) -> None:
    """Initializes a 2025-11-25 session on POST /mcp; its id goes in the client's headers."""
    answer = client.post("/mcp", headers=MCP_HEADERS, json={
        "jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    assert answer.status_code == 200, answer.text
    client.headers["Mcp-Session-Id"] = answer.headers["mcp-session-id"]
    assert client.post("/mcp", headers=MCP_HEADERS, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
                       ).status_code == 202


def mcp_call(client: httpx.Client, msg_id: int, meta: object, headers: dict | None = None) -> dict:
    params: dict = {"name": "tern_agent_echo", "arguments": {"message": f"my key is {SECRET}"}}
    if meta is not None:
        params["_meta"] = meta
    answer = client.post("/mcp", json={"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params},
                         headers={**MCP_HEADERS, **(headers or {})})
    assert answer.status_code == 200, answer.text
    return answer.json() if answer.headers["content-type"].startswith("application/json") else {}


HOSTILE_META = [
    12, "x", ["a"],  # _meta of the wrong type
    {"traceparent": 12}, {"traceparent": {"a": 1}}, {"traceparent": ["00"]}, {"traceparent": None},
    {"traceparent": PARENT.upper()}, {"traceparent": PARENT + "-extra"}, {"traceparent": "ff" + PARENT[2:]},
    {"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"}, {"traceparent": " " + PARENT},
    {"traceparent": PARENT + "x" * 100_000},
]
BAD_STATE = [{"traceparent": PARENT, "tracestate": 7}, {"traceparent": PARENT, "tracestate": "a=1," * 10_000},
             {"traceparent": PARENT, "tracestate": "a=1,a=2"}]  # the parent is good: it joins, without the state


def test_hostile_trace_context_starts_a_new_trace_and_no_secret_leaves(tmp_path, decode_otlp):
    with Collector() as collector:
        process, url = started(tmp_path, collector.url)
        try:
            auth = {"Authorization": f"Bearer {SECRET}"}
            with httpx.Client(base_url=url, headers=auth, timeout=30) as client:
                mcp_session(client)
                for i, meta in enumerate(HOSTILE_META + BAD_STATE):
                    mcp_call(client, i, meta)
                hostile_headers = [{"traceparent": "00-" + "a" * 300}, {"traceparent": PARENT.replace("-01", "-zz")},
                                   {"traceparent": PARENT, "tracestate": "bad state!"},
                                   {"traceparent": (PARENT[:-1] + "\u00e9").encode("latin-1")}]
                for headers in hostile_headers:
                    assert client.get(f"/api/status?q={SECRET}", headers=headers).status_code == 200
                mcp_call(client, 99, {"traceparent": PARENT, "tracestate": "vendor=v1"})  # a valid one joins
                assert client.post("/api/agents/echo/message", json={"message": SECRET},
                                   headers={"traceparent": PARENT}).status_code == 200
        finally:
            process.terminate()
            process.wait(20)
    assert collector.bodies
    assert not any(SECRET.encode() in body for body in collector.bodies)
    spans = [s for v in decode_otlp(*collector.bodies) for rs in v["resource_spans"] for ss in rs["scope_spans"]
             for s in ss["spans"]]
    calls = {int(dict((k, v[1]) for k, v in s["attributes"])["jsonrpc.request.id"]): s
             for s in spans if s["name"] == "tools/call tern_agent_echo"}
    assert sorted(calls) == [*range(len(HOSTILE_META) + len(BAD_STATE)), 99]
    assert not any(s["name"].startswith("execute_tool") for s in spans)  # each tools/call span covers its own
    assert all(dict((k, v[1]) for k, v in s["attributes"])["gen_ai.tool.type"] == "function" for s in calls.values())
    for i, call in calls.items():  # never an error; a refused _meta leaves the span under POST /mcp's trace
        assert call["status"]["code"] == 0
        if i < len(HOSTILE_META):
            assert call["trace_id"] != TRACE, HOSTILE_META[i]
        else:
            assert call["trace_id"] == TRACE and call["parent_span_id"] == "00f067aa0ba902b7"
            assert call["flags"] & 0x300 == 0x300  # a remote parent
            assert call["trace_state"] == ("vendor=v1" if i == 99 else "")
    statuses = [s for s in spans if s["name"] == "GET /api/status"]
    roots = [s for s in statuses if s["parent_span_id"] == ""]
    assert len(statuses) == 4 and len(roots) == 3 and all(s["trace_id"] != TRACE for s in roots)
    (kept,) = [s for s in statuses if s["parent_span_id"]]  # a good traceparent beside a bad tracestate
    assert kept["trace_id"] == TRACE and kept["trace_state"] == ""
    assert all(dict((k, v[1]) for k, v in s["attributes"])["http.route"] == "/api/status" for s in statuses)
    sent = next(s for s in spans if s["name"] == "POST /api/agents/{name}/message" and s["trace_id"] == TRACE)
    assert sent["parent_span_id"] == "00f067aa0ba902b7"
    # The down MCP server's error (its URL, with the key in the query) reached its spans' status, masked
    # (the URL's query values by the client itself, "********"; a secret tern knows anywhere, "[redacted]"):
    failed = [s for s in spans if s["name"] == "initialize" and s["status"]["code"] == 2]
    assert failed and all(("[redacted]" in s["status"]["message"] or "********" in s["status"]["message"])
                          and SECRET not in s["status"]["message"] for s in failed)
