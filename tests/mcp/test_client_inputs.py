"""The client's sans-IO answers to what servers ask and declare: MRTR results and
retries, elicitation defaults (SEP-1034), ``x-mcp-header`` declarations and the
``Mcp-Param-*`` headers (SEP-2243), and the one version retry (-32022). Hostile shapes
included: each must be refused with a clear error, never crash or loop."""

import base64

import pytest

from runtime.errors import ProtocolError, RpcError
from runtime.mcp.client import inputs
from runtime.mcp.client.connection import McpConnection
from runtime.mcp.param_headers import checked, headers_for
from runtime.mcp.protocol import MODERN_VERSION, McpTool, modern_meta, parse_discover, with_meta
from runtime.wire import jsonrpc

ASK = {"confirm": {"method": "elicitation/create", "params": {"message": "ok?", "requestedSchema": {}}}}


# --- MRTR -------------------------------------------------------------------------------

@pytest.mark.parametrize("result", [{"content": []}, {"resultType": "complete"}, None, []])
def test_a_complete_result_asks_nothing(result):
    assert inputs.input_requests(result) is None


def test_input_requests_are_read():
    parsed = inputs.input_requests({"resultType": "input_required", "inputRequests": ASK, "requestState": "s"})
    assert parsed == {"confirm": ("elicitation/create", {"message": "ok?", "requestedSchema": {}})}


@pytest.mark.parametrize("result, text", [
    ({"resultType": "input_required"}, "without inputRequests"),
    ({"resultType": "input_required", "inputRequests": {}}, "without inputRequests"),
    ({"resultType": "input_required", "inputRequests": {str(i): ASK["confirm"] for i in range(9)}}, "at most 8"),
    ({"resultType": "input_required", "inputRequests": {"x": {"method": "tools/call"}}}, "tools/call"),
    ({"resultType": "input_required", "inputRequests": {"x": "elicitation/create"}}, "None"),
    ({"resultType": "input_required", "inputRequests": ASK, "requestState": {"a": 1}}, "requestState"),
    ({"resultType": "input_required", "inputRequests": ASK, "requestState": "x" * 70000}, "requestState"),
])
def test_malformed_input_requests_are_refused(result, text):
    with pytest.raises(ProtocolError, match=text):
        inputs.input_requests(result)


def test_the_retry_echoes_the_state_and_keeps_the_params():
    params = {"name": "t", "arguments": {"a": 1}}
    answers = {"confirm": {"action": "accept", "content": {}}}
    retry = inputs.retry_params(params, {"requestState": "opaque\u00e9"}, answers)
    assert retry == {**params, "inputResponses": answers, "requestState": "opaque\u00e9"}
    again = inputs.retry_params(retry, {}, answers)  # a later round without state drops the old one
    assert again == {**params, "inputResponses": answers}
    assert params == {"name": "t", "arguments": {"a": 1}}


# --- Elicitation defaults ----------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "default": "John"}, "age": {"type": "integer", "default": 30},
    "score": {"type": "number", "default": 9.5}, "ok": {"type": "boolean", "default": True},
    "status": {"type": "string", "enum": ["a", "b"], "default": "a"},
    "bad_enum": {"type": "string", "enum": ["a"], "default": "z"}, "wrong": {"type": "integer", "default": "x"},
    "bool_as_int": {"type": "integer", "default": True}, "odd_type": {"type": ["string"], "default": "q"},
    "none": {"type": "string"}}}


def test_defaults_fill_what_the_person_left_out():
    answer = inputs.with_defaults(SCHEMA, {"action": "accept", "content": {"name": "Ann"}})
    assert answer["content"] == {"name": "Ann", "age": 30, "score": 9.5, "ok": True, "status": "a"}


@pytest.mark.parametrize("answer", [{"action": "decline"}, {"action": "cancel"}])
def test_defaults_never_turn_a_refusal_into_an_answer(answer):
    assert inputs.with_defaults(SCHEMA, answer) == answer


def test_capabilities_declare_only_what_can_be_answered():
    assert inputs.capabilities(False, False) == {"roots": {"listChanged": False}}
    assert set(inputs.capabilities(True, True)) == {"roots", "elicitation", "sampling"}
    assert inputs.capabilities(True, False)["elicitation"] == {"form": {}, "url": {}}  # a person opens URLs


# --- x-mcp-header ------------------------------------------------------------------------

def schema(**properties):
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize("properties, text", [
    ({"v": {"type": "string", "x-mcp-header": ""}}, "must be a header name"),
    ({"v": {"type": "string", "x-mcp-header": 7}}, "must be a header name"),
    ({"v": {"type": "object", "x-mcp-header": "Data"}}, "only for string, integer, boolean"),
    ({"v": {"type": "array", "x-mcp-header": "Items"}}, "only"),
    ({"v": {"type": "null", "x-mcp-header": "Nil"}}, "only"),
    ({"v": {"type": "number", "x-mcp-header": "Score"}}, "only"),
    ({"v": {"x-mcp-header": "Untyped"}}, "only"),
    ({"a": {"type": "string", "x-mcp-header": "Region"}, "b": {"type": "string", "x-mcp-header": "region"}}, "also on"),
    ({"v": {"type": "string", "x-mcp-header": "My Region"}}, "must be a header name"),
    ({"v": {"type": "string", "x-mcp-header": "Region:Primary"}}, "must be a header name"),
    ({"v": {"type": "string", "x-mcp-header": "R\u00e9gion"}}, "must be a header name"),
    ({"v": {"type": "string", "x-mcp-header": "Region\t1"}}, "must be a header name"),
    ({"v": {"type": "string", "x-mcp-header": "X\r\nInjected: 1"}}, "must be a header name"),
])
def test_invalid_declarations_are_refused(properties, text):
    with pytest.raises(ProtocolError, match=text):
        checked(schema(**properties))


def test_param_headers_encode_as_the_spec_says():
    declared = checked(schema(
        region={"type": "string", "x-mcp-header": "Region"}, n={"type": "integer", "x-mcp-header": "N"},
        on={"type": "boolean", "x-mcp-header": "On"}, off={"type": "boolean", "x-mcp-header": "Off"},
        text={"type": "string", "x-mcp-header": "Text"}, pad={"type": "string", "x-mcp-header": "Pad"},
        crlf={"type": "string", "x-mcp-header": "CrLf"}, empty={"type": "string", "x-mcp-header": "Empty"},
        gone={"type": "string", "x-mcp-header": "Gone"}, query={"type": "string"}))
    headers = headers_for(declared, {"region": "us west 1", "n": 42, "on": True, "off": False, "text": "\u4e16\u754c",
                                       "pad": " x ", "crlf": "a\r\nb", "empty": "", "gone": None, "query": "SELECT"})
    b64 = {k: "=?base64?" + base64.b64encode(v.encode()).decode() + "?=" for k, v in
           {"Text": "\u4e16\u754c", "Pad": " x ", "CrLf": "a\r\nb"}.items()}
    assert headers == {"Mcp-Param-Region": "us west 1", "Mcp-Param-N": "42", "Mcp-Param-On": "true",
                       "Mcp-Param-Off": "false", "Mcp-Param-Empty": "",
                       **{f"Mcp-Param-{k}": v for k, v in b64.items()}}
    assert headers_for(declared, "not an object") == {}


def modern_connection():
    conn = McpConnection("sequential")
    conn.opening()
    conn.negotiated(MODERN_VERSION, "modern")
    return conn


def test_the_connection_leaves_out_refused_tools_and_mirrors_the_rest():
    conn = modern_connection()
    good = McpTool(name="good", input_schema=schema(region={"type": "string", "x-mcp-header": "Region"}))
    bad = McpTool(name="bad", input_schema=schema(v={"type": "number", "x-mcp-header": "Score"}))
    kept, refused = conn.note_tools([good, bad])
    assert [t.name for t in kept] == ["good"] and refused[0][0] == "bad"
    call = jsonrpc.Request(1, "tools/call", with_meta({"name": "good", "arguments": {"region": "eu"}},
                                                      modern_meta()))
    headers = conn.add_headers({}, call)
    assert headers["Mcp-Param-Region"] == "eu" and headers["Mcp-Name"] == "good"
    other = jsonrpc.Request(2, "tools/call", with_meta({"name": "other", "arguments": {"region": "eu"}},
                                                       modern_meta()))
    assert "Mcp-Param-Region" not in conn.add_headers({}, other)


def test_handshake_era_tools_are_not_judged_by_a_modern_rule():
    conn = McpConnection("sequential")
    conn.opening()
    conn.negotiated("2025-11-25", "handshake")
    tool = McpTool(name="t", input_schema=schema(v={"type": "number", "x-mcp-header": "Score"}))
    assert conn.note_tools([tool]) == ([tool], [])


# --- Version retry and discover ------------------------------------------------------------

@pytest.mark.parametrize("error, retry", [
    (RpcError(-32022, "unsupported", {"supported": [MODERN_VERSION]}), True),
    (RpcError(-32022, "unsupported", {"supported": ["2099-01-01"]}), False),
    (RpcError(-32022, "unsupported", None), False),
    (RpcError(-32601, "not found", {"supported": [MODERN_VERSION]}), False),
    (ProtocolError("x"), False),
])
def test_one_version_retry_only_when_the_server_says_it_speaks_ours(error, retry):
    assert McpConnection.retry_version(error) is retry


@pytest.mark.parametrize("result", [{}, {"supportedVersions": "2026-07-28"}, {"result": "ok"}])
def test_a_discover_answer_without_versions_is_not_modern(result):
    """A handshake-era server that answers any method with ``{}`` is not taken for a modern one."""
    with pytest.raises(ProtocolError):
        parse_discover(result)
