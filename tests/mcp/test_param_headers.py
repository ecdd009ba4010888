"""Presets with an ``input_schema`` and the 2026-07-28 ``Mcp-Param-*`` header checks
(runtime.mcp.param_headers, wired into ``POST /mcp``): the sans-IO rules, the config
checks on ``x-mcp-header`` marks, and hostile header/body pairs over real HTTP."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from runtime.config import load_config
from runtime.errors import ConfigError
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from runtime.mcp import param_headers
from tests.mcp.server_harness import META, MODERN, initialize, request, write_config

BOTH = "application/json, text/event-stream"
REGION = {"type": "object", "required": ["region", "query"], "additionalProperties": False,
          "properties": {"region": {"type": "string", "x-mcp-header": "Region"},
                         "priority": {"type": "integer", "x-mcp-header": "Priority"},
                         "urgent": {"type": "boolean", "x-mcp-header": "Urgent"},
                         "query": {"type": "string"}}}
PRESET = """
[[mcp_server.presets]]
name = "by_region"
tool = "tern_agent_echo"
input_schema = { type = "object", required = ["region", "query"], additionalProperties = false, properties = { \
region = { type = "string", "x-mcp-header" = "Region" }, priority = { type = "integer", "x-mcp-header" = "Priority" }, \
urgent = { type = "boolean", "x-mcp-header" = "Urgent" }, query = { type = "string" } } }

[[mcp_server.presets]]
name = "tell_echo"
tool = "agent_send"
arguments = { agent = "echo" }
input_schema = { type = "object", required = ["message"], properties = { message = { type = "string" } } }
"""


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def toml_inline(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_inline(v)}" for k, v in value.items()) + " }"
    return json.dumps(value, ensure_ascii=False)  # strings, numbers, booleans: TOML reads JSON's form


def headers_of(values: dict[str, str]):
    lowered = {k.lower(): v for k, v in values.items()}
    return lambda name: lowered.get(name)


# --- sans-IO ------------------------------------------------------------------------


@pytest.mark.parametrize("arguments,headers,problem", [
    ({"region": "eu", "query": "q"}, {"Mcp-Param-Region": "eu"}, ""),
    ({"region": "eu", "query": "q", "priority": 3, "urgent": False},
     {"Mcp-Param-Region": "eu", "Mcp-Param-Priority": "3", "Mcp-Param-Urgent": "false"}, ""),
    ({"region": " ü ", "query": "q"}, {"Mcp-Param-Region": b64(" ü ")}, ""),
    ({"region": "SGVsbG8=", "query": "q"}, {"Mcp-Param-Region": "SGVsbG8="}, ""),  # no wrapper: literal
    ({"region": "=?base64?SGVsbG8=", "query": "q"}, {"Mcp-Param-Region": "=?base64?SGVsbG8="}, ""),  # no ?= suffix
    ({"region": "eu", "query": "q", "priority": None}, {"Mcp-Param-Region": "eu"}, ""),  # null: no header
    ({"region": "eu", "query": "q"}, {}, "Mcp-Param-Region is missing"),
    ({"region": "eu", "query": "q"}, {"Mcp-Param-Region": "us"}, "does not match arguments.region"),
    ({"region": "Hello", "query": "q"}, {"Mcp-Param-Region": "=?base64?SGVsbG8?="}, "not valid"),  # bad padding
    ({"region": "Hello", "query": "q"}, {"Mcp-Param-Region": "=?base64?SGVs!!!bG8=?="}, "not valid"),
    ({"region": "eu", "query": "q"}, {"Mcp-Param-Region": "eu", "Mcp-Param-Priority": "1"},
     "arguments.priority is absent"),
    ({"region": "eu", "query": "q", "priority": 3}, {"Mcp-Param-Region": "eu", "Mcp-Param-Priority": "3.0"},
     "does not match"),
    ({"region": "eu", "query": "q", "urgent": True}, {"Mcp-Param-Region": "eu", "Mcp-Param-Urgent": "True"},
     "does not match"),  # values are case-sensitive
    ({"region": {"nested": 1}, "query": "q"}, {"Mcp-Param-Region": "{}"}, "does not match"),
])
def test_param_header_rules(arguments, headers, problem):
    found = param_headers.problem(REGION, arguments, headers_of(headers))
    assert (problem in found) if problem else found == ""


def test_a_schema_without_marks_asks_for_nothing():
    assert param_headers.problem({"type": "object", "properties": {"a": {"type": "string"}}}, {"a": "x"},
                                 headers_of({})) == ""
    assert param_headers.problem(None, None, headers_of({})) == ""


@pytest.mark.parametrize("spec,problem", [
    ({"type": "string", "x-mcp-header": ""}, "must be a header name"),
    ({"type": "string", "x-mcp-header": "My Region"}, "must be a header name"),
    ({"type": "string", "x-mcp-header": "Region:Primary"}, "must be a header name"),
    ({"type": "string", "x-mcp-header": "Région"}, "must be a header name"),
    ({"type": "string", "x-mcp-header": "Region\t1"}, "must be a header name"),
    ({"type": "number", "x-mcp-header": "Score"}, "only for string, integer, boolean"),
    ({"type": "object", "x-mcp-header": "Data"}, "only for string, integer, boolean"),
])
def test_bad_marks_are_config_errors(spec, problem, tmp_path):
    schema = {"type": "object", "properties": {"value": spec}}
    assert any(problem in p for p in param_headers.annotation_problems(schema))
    extra = ('\n[[mcp_server.presets]]\nname = "p"\ntool = "tern_agent_echo"\n'
             f"input_schema = {toml_inline(schema)}\n")
    with pytest.raises(ConfigError, match=r"mcp_server.presets\[1\].input_schema.properties.value"):
        load_config(str(write_config(tmp_path, extra)))


def test_duplicate_marks_and_agent_arguments_are_config_errors(tmp_path):
    schema = {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "MyField"},
                                               "b": {"type": "string", "x-mcp-header": "myfield"}}}
    assert any("also on a" in p for p in param_headers.annotation_problems(schema))
    extra = ('\n[[mcp_server.presets]]\nname = "p"\ntool = "tern_agent_echo"\narguments = { message = "x" }\n'
             'input_schema = { type = "object" }\n')
    with pytest.raises(ConfigError, match="so fixed ones would be lost"):
        load_config(str(write_config(tmp_path, extra)))
    with pytest.raises(ConfigError, match='expected type = "object"'):
        load_config(str(write_config(tmp_path, '\n[[mcp_server.presets]]\nname = "p"\ntool = "tern_agent_echo"\n'
                                                'input_schema = { type = "string" }\n')))


# --- over HTTP: tern serve's POST /mcp ----------------------------------------------


@pytest.fixture
async def mcp_url(nursery, tmp_path):
    config = load_config(str(write_config(tmp_path, PRESET))).config
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    return f"http://127.0.0.1:{bound[0][1]}/mcp"


async def modern_call(client, url, msg_id, arguments, extra_headers):
    body = request(msg_id, "tools/call", {"name": "by_region", "arguments": arguments, "_meta": META})
    headers = {"Accept": "application/json", "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
               "Mcp-Name": "by_region", **extra_headers}
    return await client.post(url, json=body, headers=headers)


async def test_the_preset_publishes_its_schema_and_sends_the_agent_json(mcp_url):
    async with httpx.AsyncClient() as client:
        response = await client.post(mcp_url, json=initialize(1), headers={"Accept": BOTH})
        session = response.headers["mcp-session-id"]
        headers = {"Accept": "application/json", "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        listed = await client.post(mcp_url, json=request(2, "tools/list"), headers=headers)
        (tool,) = [t for t in listed.json()["result"]["tools"] if t["name"] == "by_region"]
        assert tool["inputSchema"] == REGION
        # The handshake era has no Mcp-Param headers: the body alone decides.
        called = await client.post(mcp_url, json=request(3, "tools/call", {
            "name": "by_region", "arguments": {"query": "q", "region": "eu", "priority": 2}}), headers=headers)
        result = called.json()["result"]
        assert result["isError"] is False
        assert json.loads(result["structuredContent"]["reply"]) == {"priority": 2, "query": "q", "region": "eu"}
        missing = await client.post(mcp_url, json=request(4, "tools/call", {
            "name": "by_region", "arguments": {"region": "eu"}}), headers=headers)
        assert missing.json()["result"]["isError"] is True
        assert "missing query" in missing.json()["result"]["content"][0]["text"]
        extra = await client.post(mcp_url, json=request(5, "tools/call", {
            "name": "by_region", "arguments": {"region": "eu", "query": "q", "shell": "rm"}}), headers=headers)
        assert "unexpected shell" in extra.json()["result"]["content"][0]["text"]


async def test_a_kernel_tool_preset_lays_its_fixed_arguments_over_the_callers(mcp_url):
    async with httpx.AsyncClient() as client:
        response = await client.post(mcp_url, json=initialize(1), headers={"Accept": BOTH})
        headers = {"Accept": "application/json", "Mcp-Session-Id": response.headers["mcp-session-id"],
                   "MCP-Protocol-Version": "2025-11-25"}
        # The caller names another agent: the preset's fixed agent = "echo" wins.
        called = await client.post(mcp_url, json=request(2, "tools/call", {
            "name": "tell_echo", "arguments": {"message": "pinned", "agent": "slow-poke"}}), headers=headers)
        result = called.json()["result"]
        assert result["isError"] is False and result["content"][0]["text"] == "pinned", result
        bad = await client.post(mcp_url, json=request(3, "tools/call", {"name": "tell_echo", "arguments": []}),
                                headers=headers)
        assert bad.json()["error"]["code"] == -32602  # the dispatcher refuses non-object arguments first


async def test_mcp_param_headers_are_checked_against_the_body(mcp_url):
    async with httpx.AsyncClient() as client:
        ok = await modern_call(client, mcp_url, 1, {"region": "Hello", "query": "q"},
                               {"Mcp-Param-Region": b64("Hello")})
        assert ok.status_code == 200 and ok.json()["result"]["isError"] is False, ok.text
        for msg_id, (arguments, headers) in enumerate([
            ({"region": "Hello", "query": "q"}, {}),
            ({"region": "Hello", "query": "q"}, {"Mcp-Param-Region": "=?base64?SGVsbG8?="}),
            ({"region": "Hello", "query": "q"}, {"Mcp-Param-Region": "=?base64?SGVs!!!bG8=?="}),
            ({"region": "eu", "query": "q"}, {"Mcp-Param-Region": "us"}),
            ({"region": "eu", "query": "q", "priority": 1}, {"Mcp-Param-Region": "eu", "Mcp-Param-Priority": "2"}),
        ], start=2):
            refused = await modern_call(client, mcp_url, msg_id, arguments, headers)
            assert refused.status_code == 400, (arguments, headers, refused.text)
            assert refused.json()["error"]["code"] == -32020
            assert refused.json()["id"] == msg_id
        # ...and the server keeps serving.
        again = await modern_call(client, mcp_url, 9, {"region": "eu", "query": "q", "urgent": True},
                                  {"mcp-param-region": "eu", "MCP-PARAM-URGENT": "true"})  # names: any case
        assert again.status_code == 200 and again.json()["result"]["isError"] is False, again.text
