"""One trace across two terns and an MCP server, as a collector sees it.

tern A (``tern a2a send``) -> tern B (``tern serve``: an A2A task whose llm agent, on the
scripted model, calls a tool) -> an MCP server on the official Python SDK, which joins
the trace from ``_meta.traceparent`` and exports its own span with the OpenTelemetry
SDK. All three export to one collector; the official ``opentelemetry-proto`` decodes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import trio

from tests import peers
from tests.mcp.server_harness import tern_env
from tests.scripted_llm import ScriptedLLM
from tests.telemetry.collector import Collector
from tests.test_cli import ROOT

SERVER = ROOT / "tests" / "fixtures" / "otel_mcp_server.py"
SERVER_KIND, CLIENT_KIND, INTERNAL_KIND = 2, 3, 1


def completion(message: dict, finish: str, prompt: int, completion: int) -> dict:
    return {"json": {"choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
                     "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                               "total_tokens": prompt + completion}}}


def start_llm(llm: ScriptedLLM) -> None:
    threading.Thread(target=trio.run, args=(llm.serve,), daemon=True).start()
    deadline = time.monotonic() + 10
    while not llm.url:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def serve(config, log, tmp_path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "runtime", "--config", str(config), "--log-level", "info",
                                "--log-format", "json", "serve"], stdin=subprocess.DEVNULL, stdout=log.open("w"),
                               stderr=subprocess.STDOUT, env=tern_env(tmp_path), cwd=ROOT)
    deadline = time.monotonic() + 30
    while "serving on " not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return process, log.read_text().split("serving on ", 1)[1].split()[0].strip("\",}")


def spans_by_service(views: list[dict]) -> list[dict]:
    out = []
    for view in views:
        for rs in view["resource_spans"]:
            service = dict((k, v[1]) for k, v in rs["resource"])["service.name"]
            for ss in rs["scope_spans"]:
                for span in ss["spans"]:
                    span["service"] = service
                    span["attrs"] = {k: v[1] for k, v in span["attributes"]}
                    out.append(span)
    return out


def test_one_trace_spans_two_terns_and_an_sdk_mcp_server(tmp_path, decode_otlp):
    sdk_python = peers.require(peers.mcp_otel_python)
    llm = ScriptedLLM(
        completion({"content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "mcp_sdk_add", "arguments": '{"a": 2, "b": 3}'}}]}, "tool_calls", 11, 7),
        completion({"content": "the sum is 5"}, "stop", 20, 4),
    )
    start_llm(llm)
    with Collector() as collector:
        b_config = tmp_path / "b.toml"
        b_config.write_text(
            f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{tmp_path / "b-state"}"\n'
            '[a2a]\nenabled = true\ndefault_agent = "adder"\n'
            f'[telemetry]\notlp_endpoint = "{collector.url}"\nservice_name = "tern-b"\n'
            '[[agents]]\nname = "adder"\nkind = "llm"\ntools = ["mcp_sdk_add"]\n'
            f'[agents.model]\nbase_url = "{llm.url}"\nmodel = "scripted-model"\n'
            '[[mcp_servers]]\nname = "sdk"\ntimeout_secs = 60\n'
            f'[mcp_servers.transport]\ntype = "stdio"\ncommand = "{sdk_python}"\n'
            f'args = ["{SERVER}", "{collector.url}/v1/traces"]\n')
        a_config = tmp_path / "a.toml"
        a_config.write_text(f'[state]\ndir = "{tmp_path / "a-state"}"\n'
                            f'[telemetry]\notlp_endpoint = "{collector.url}/v1/traces"\nservice_name = "tern-a"\n')
        b_log = tmp_path / "b.log"
        process, url = serve(b_config, b_log, tmp_path)
        try:
            done = subprocess.run([sys.executable, "-m", "runtime", "--config", str(a_config), "a2a", "send", url,
                                   "add 2 and 3"], capture_output=True, text=True, timeout=120,
                                  env=tern_env(tmp_path), cwd=ROOT)
            assert done.returncode == 0, done.stderr[-3000:]
            assert "the sum is 5" in done.stdout
        finally:
            process.terminate()
            process.wait(20)
        views = decode_otlp(*collector.bodies)
    spans = spans_by_service(views)
    services = {s["service"] for s in spans}
    assert services == {"tern-a", "tern-b", "sdk-mcp-server"}, services
    by_id = {s["span_id"]: s for s in spans}

    root = next(s for s in spans if s["service"] == "tern-a" and s["name"] == "a2a SendMessage")
    assert root["kind"] == CLIENT_KIND and root["parent_span_id"] == ""
    trace = root["trace_id"]
    in_trace = [s for s in spans if s["trace_id"] == trace]

    def chain(span: dict) -> list[str]:
        names = []
        while span is not None:
            names.append(f'{span["service"]}:{span["name"]}')
            span = by_id.get(span["parent_span_id"])
        return names

    http = next(s for s in in_trace if s["service"] == "tern-b" and s["name"] == "POST /a2a/{agent}")
    assert http["kind"] == SERVER_KIND and http["parent_span_id"] == root["span_id"]
    assert http["flags"] & 0x300 == 0x300  # OTLP: has-is-remote, is-remote: the parent came from a peer
    assert http["attrs"]["http.route"] == "/a2a/{agent}" and http["attrs"]["http.response.status_code"] == 200

    chats = [s for s in in_trace if s["name"] == "chat scripted-model"]
    assert len(chats) == 2 and all(s["kind"] == CLIENT_KIND for s in chats)
    first = min(chats, key=lambda s: s["start_time_unix_nano"])
    assert first["attrs"]["gen_ai.operation.name"] == "chat"
    assert first["attrs"]["gen_ai.request.model"] == "scripted-model"
    assert int(first["attrs"]["gen_ai.usage.input_tokens"]) == 11  # int64 values arrive as strings (JSON view)
    assert int(first["attrs"]["gen_ai.usage.output_tokens"]) == 7
    assert first["attrs"]["gen_ai.response.finish_reasons"] == [["string_value", "tool_calls"]]

    sdk = next(s for s in spans if s["service"] == "sdk-mcp-server" and s["name"] == "tools/call add")
    assert sdk["trace_id"] == trace and sdk["kind"] == SERVER_KIND
    assert chain(sdk) == ["sdk-mcp-server:tools/call add", "tern-b:tools/call add", "tern-b:execute_tool mcp_sdk_add",
                          "tern-b:invoke_agent adder", "tern-b:a2a.task adder", "tern-b:POST /a2a/{agent}",
                          "tern-a:a2a SendMessage"]
    client = by_id[sdk["parent_span_id"]]
    assert client["kind"] == CLIENT_KIND and client["attrs"]["mcp.method.name"] == "tools/call"
    tool = by_id[client["parent_span_id"]]
    assert tool["kind"] == INTERNAL_KIND and tool["attrs"]["gen_ai.tool.type"] == "extension"
    assert chain(first)[1:] == ["tern-b:invoke_agent adder", "tern-b:a2a.task adder", "tern-b:POST /a2a/{agent}",
                                "tern-a:a2a SendMessage"]

    lines = [json.loads(line) for line in b_log.read_text().splitlines() if line.startswith("{")]
    traced = [line for line in lines if line.get("trace_id") == trace]
    assert any(line["logger"] == "tern.http.access" and "/a2a" in line["message"] for line in traced), lines[-20:]
