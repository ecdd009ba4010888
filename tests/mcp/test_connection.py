"""The sans-IO MCP client connection, without sockets: the opening for each probe
style, what every discover answer means, the Streamable HTTP headers, the session id,
and the re-initialize-once decision."""

import pytest
from msgspec import UNSET

from runtime.errors import ConnectionLost, ProtocolError, RpcError, TernTimeout
from runtime.mcp.client.connection import (
    DISCOVER, INITIALIZE, NO_ANSWER, PING, Legacy, McpConnection,
)
from runtime.mcp.protocol import HANDSHAKE_VERSIONS, META_VERSION, MODERN_VERSION, ServerInfo, modern_meta, with_meta
from runtime.wire import jsonrpc

DISCOVER_RESULT = {"supportedVersions": [MODERN_VERSION], "serverInfo": {"name": "srv", "version": "1"},
                   "capabilities": {"tools": {}}}
INITIALIZE_RESULT = {"protocolVersion": "2025-06-18", "serverInfo": {"name": "old", "version": "2"},
                     "capabilities": {}}


def connection(probe="sequential", choice="auto"):
    conn = McpConnection(probe)
    conn.opening(choice)
    return conn


# --- Opening ------------------------------------------------------------------------------

@pytest.mark.parametrize("probe, choice, first", [
    ("parallel", "auto", (DISCOVER, PING)),
    ("sequential", "auto", (DISCOVER,)),
    ("initialize", "auto", (INITIALIZE,)),
    ("parallel", MODERN_VERSION, (DISCOVER,)),
    ("initialize", MODERN_VERSION, (DISCOVER,)),
    ("parallel", "2025-03-26", (INITIALIZE,)),
    ("sequential", "2025-03-26", (INITIALIZE,)),
])
def test_what_goes_first(probe, choice, first):
    conn = McpConnection(probe)
    assert conn.opening(choice) == first
    assert conn.probing == (choice == "auto")


def test_opening_params():
    conn = connection()
    assert conn.params(DISCOVER)["_meta"][META_VERSION] == MODERN_VERSION
    assert conn.params(INITIALIZE)["protocolVersion"] == HANDSHAKE_VERSIONS[0]
    assert conn.params(PING) is UNSET
    assert connection(choice="2025-03-26").params(INITIALIZE)["protocolVersion"] == "2025-03-26"


def test_probe_a_modern_server():
    info = connection().discover_answer(DISCOVER_RESULT)
    assert isinstance(info, ServerInfo)
    assert (info.era, info.version, info.name, info.server_version) == ("modern", MODERN_VERSION, "srv", "1")


@pytest.mark.parametrize("error", [RpcError(-32601, "method not found"), ProtocolError("HTTP 400"),
                                   TernTimeout("no answer in 5 s")])
def test_probe_refused_means_legacy(error):
    answer = connection().discover_answer(error=error)
    assert isinstance(answer, Legacy) and str(error) in answer.reason


@pytest.mark.parametrize("result", [None, [], {"supportedVersions": ["2025-11-25"]}])
def test_probe_unusable_result_means_legacy(result):
    answer = connection("parallel").discover_answer(result)
    assert isinstance(answer, Legacy) and "unusable" in answer.reason


def test_probe_no_answer_means_legacy():
    assert connection("parallel").discover_answer(NO_ANSWER) == Legacy("no answer")


def test_probe_lost_connection_is_an_error():
    with pytest.raises(ConnectionLost):
        connection().discover_answer(error=ConnectionLost("gone"))


@pytest.mark.parametrize("error", [RpcError(-32601, "method not found"), TernTimeout("slow")])
def test_pinned_modern_fails_instead_of_falling_back(error):
    with pytest.raises(type(error)):
        connection(choice=MODERN_VERSION).discover_answer(error=error)
    with pytest.raises(ProtocolError):
        connection(choice=MODERN_VERSION).discover_answer({"supportedVersions": ["2025-11-25"]})


def test_late_discover_answer():
    conn = connection("parallel")
    assert conn.discover_answer(DISCOVER_RESULT, late=True).era == "modern"
    with pytest.raises(ProtocolError):
        conn.discover_answer([], late=True)  # late, nothing else to fall back on


def test_late_discover_only_after_a_refused_initialize_of_a_parallel_probe():
    refused = RpcError(-32601, "method not found")
    assert connection("parallel").awaits_late_discover(refused)
    assert connection("parallel").awaits_late_discover(ProtocolError("bad version"))
    assert not connection("parallel").awaits_late_discover(ConnectionLost("gone"))
    assert not connection("parallel").awaits_late_discover(TernTimeout("slow"))
    assert not connection("sequential").awaits_late_discover(refused)
    assert not connection("parallel", "2025-11-25").awaits_late_discover(refused)


def test_initialize_answer_and_version_mismatch():
    info = connection().initialize_answer(INITIALIZE_RESULT)
    assert (info.era, info.version, info.name) == ("handshake", "2025-06-18", "old")
    with pytest.raises(ProtocolError, match="does not speak"):
        connection().initialize_answer({**INITIALIZE_RESULT, "protocolVersion": "1999-01-01"})
    with pytest.raises(ProtocolError, match="not the pinned 2025-11-25"):
        connection(choice="2025-11-25").initialize_answer(INITIALIZE_RESULT)


def test_negotiated_sets_the_meta_of_the_modern_era_only():
    conn = connection()
    conn.negotiated(MODERN_VERSION, "modern")
    assert (conn.era, conn.version, conn.meta) == ("modern", MODERN_VERSION, modern_meta(MODERN_VERSION))
    conn.negotiated("2025-06-18", "handshake")
    assert (conn.era, conn.version, conn.meta) == ("handshake", "2025-06-18", None)


# --- Streamable HTTP headers ----------------------------------------------------------------

def modern_call(name, request_id=1, version=MODERN_VERSION):
    return jsonrpc.Request(request_id, "tools/call", with_meta({"name": name}, modern_meta(version)))


def test_headers_before_negotiation():
    assert connection().add_headers({"Accept": "x"}, None) == {"Accept": "x"}
    probe = jsonrpc.Request(1, DISCOVER, connection().params(DISCOVER))
    assert connection().add_headers({}, probe) == {"Mcp-Method": DISCOVER, "MCP-Protocol-Version": MODERN_VERSION}


def test_modern_headers_name_the_method_and_the_tool():
    conn = connection()
    conn.negotiated(MODERN_VERSION, "modern")
    conn.session_id = "ignored"  # no session in the modern era
    assert conn.add_headers({}, modern_call("add")) == {
        "Mcp-Method": "tools/call", "Mcp-Name": "add", "MCP-Protocol-Version": MODERN_VERSION}
    read = jsonrpc.Request(2, "resources/read", with_meta({"uri": "file:///a b"}, conn.meta))
    assert conn.add_headers({}, read)["Mcp-Name"] == "file:///a b"
    listing = jsonrpc.Request(3, "tools/list", with_meta(None, conn.meta))
    assert "Mcp-Name" not in conn.add_headers({}, listing)
    cancel = jsonrpc.Notification("notifications/cancelled", with_meta({"requestId": 1}, conn.meta))
    assert conn.add_headers({}, cancel)["Mcp-Method"] == "notifications/cancelled"
    assert conn.add_headers({}, jsonrpc.Response(7, {})) == {"MCP-Protocol-Version": MODERN_VERSION}


def test_unsafe_names_go_in_base64():
    conn = connection()
    conn.negotiated(MODERN_VERSION, "modern")
    assert conn.add_headers({}, modern_call("héllo"))["Mcp-Name"] == "=?base64?aMOpbGxv?="
    assert conn.add_headers({}, modern_call("a\r\nX: 1"))["Mcp-Name"].startswith("=?base64?")
    assert conn.add_headers({}, modern_call(" padded "))["Mcp-Name"].startswith("=?base64?")


def test_version_header_follows_the_meta_of_the_message():
    conn = connection()
    conn.negotiated("2025-11-25", "handshake")
    plain = jsonrpc.Request(1, "tools/call", {"name": "add"})
    assert conn.add_headers({}, plain) == {"MCP-Protocol-Version": "2025-11-25"}
    mismatched = modern_call("add", version="2099-01-01")
    assert conn.add_headers({}, mismatched)["MCP-Protocol-Version"] == "2099-01-01"
    broken = jsonrpc.Request(1, "tools/call", {"name": "add", "_meta": {META_VERSION: 5}})
    assert conn.add_headers({}, broken) == {"MCP-Protocol-Version": "2025-11-25"}


# --- Streamable HTTP session ----------------------------------------------------------------

def initialize_request(request_id=1):
    return jsonrpc.Request(request_id, INITIALIZE, connection().params(INITIALIZE))


def handshake_session():
    conn = connection()
    request = initialize_request()
    conn.note_sent(request, jsonrpc.encode(request))
    conn.note_session(INITIALIZE, "s1")
    conn.negotiated("2025-11-25", "handshake")
    return conn


def test_session_id_set_kept_and_echoed():
    conn = connection()
    conn.note_session(INITIALIZE, None)
    assert conn.session_id is None
    conn.note_session("tools/call", "s0")
    assert conn.session_id is None  # only initialize starts a session
    conn = handshake_session()
    conn.note_session("tools/call", "other")
    assert conn.session_id == "s1"
    assert conn.add_headers({}, jsonrpc.Request(2, "tools/list", UNSET)) == {
        "MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": "s1"}
    assert conn.add_headers({}, None)["Mcp-Session-Id"] == "s1"  # GET stream, DELETE


def test_only_initialize_is_kept_for_sending_again():
    conn = connection()
    call = jsonrpc.Request(1, "tools/call", {"name": "add"})
    conn.note_sent(call, jsonrpc.encode(call))
    conn.note_sent(jsonrpc.Notification(INITIALIZE, UNSET), b"{}")
    assert conn.initialize_body is None
    request = initialize_request(9)
    conn.note_sent(request, jsonrpc.encode(request))
    assert conn.initialize_body == jsonrpc.encode(request)


def test_a_404_for_a_session_reinitializes_once():
    conn = handshake_session()
    sent = conn.add_headers({}, jsonrpc.Request(2, "tools/list", UNSET))
    assert conn.on_status(404, sent, retried=False) == "reinitialize"
    assert conn.on_status(404, sent, retried=True) == "read"  # once only
    assert conn.on_status(404, {}, retried=False) == "read"  # no session: a plain 404
    assert conn.on_status(200, sent, retried=False) == "read"
    assert conn.on_status(400, sent, retried=False) == "read"


def test_session_expired_drops_the_session_and_initializes_again():
    conn = handshake_session()
    generation = conn.generation
    assert conn.session_expired(generation) == "initialize"
    assert conn.session_id is None and "Mcp-Session-Id" not in conn.add_headers({}, None)
    conn.note_session(INITIALIZE, "s2")
    conn.reinitialized()
    assert conn.session_id == "s2"
    assert conn.session_expired(generation) == "retry"  # a request of the old session: just send again
    assert conn.session_id == "s2"


def test_session_expired_without_an_initialize_to_send_fails():
    conn = connection()
    conn.note_session(INITIALIZE, "s1")
    assert conn.session_expired(conn.generation) == "fail"
    assert conn.session_id == "s1"
