"""The sans-IO A2A cores on their own, without sockets: the method, trait and error
tables of protocol.py, the client's card reading and dialect choice (cards.py), and
its request building and answer reading (requests.py) in every dialect."""

from __future__ import annotations

import json

import pytest

from runtime.a2a import protocol
from runtime.a2a.client import requests
from runtime.a2a.client.cards import NoCard, card_urls, read_card, remote
from runtime.a2a.client.requests import A2aClientError
from runtime.a2a.model import Message, StatusEvent, Task
from runtime.wire import jsonrpc

DIALECTS = ["1.0", "0.3", "0.1"]


# --- protocol.py ------------------------------------------------------------------------------


def test_every_method_has_an_operation_and_known_dialects():
    for name, method in protocol.METHODS.items():
        assert method.dialects and set(method.dialects) <= set(protocol.TRAITS), name
    assert protocol.METHODS["tasks/get"].dialect == "0.3" and "0.1" in protocol.METHODS["tasks/get"].dialects
    assert protocol.METHODS["SendMessage"] == protocol.Method("send", ("1.0",))


@pytest.mark.parametrize("dialect,expected", [
    ("1.0", ["SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "SubscribeToTask"]),
    ("0.3", ["message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe"]),
    ("0.1", ["tasks/send", "tasks/sendSubscribe", "tasks/get", "tasks/cancel", "tasks/resubscribe"]),
])
def test_method_for_round_trips_through_the_table(dialect, expected):
    ops = ["send", "stream", "get", "cancel", "resubscribe"]
    assert [protocol.method_for(dialect, op) for op in ops] == expected
    for name, op in zip(expected, ops):
        assert protocol.METHODS[name].op == op and dialect in protocol.METHODS[name].dialects
    with pytest.raises(KeyError):
        protocol.method_for("0.1", "list")


@pytest.mark.parametrize("dialect", ["1.0", "0.3"])
@pytest.mark.parametrize("blocking", [True, False])
def test_blocking_round_trips(dialect, blocking):
    assert protocol.is_blocking(dialect, protocol.blocking_configuration(dialect, blocking)) is blocking


def test_a_send_blocks_unless_told():
    assert protocol.is_blocking("1.0", {}) and protocol.is_blocking("0.3", {}) and protocol.is_blocking("0.1", {})
    assert protocol.blocking_configuration("1.0", False) == {"returnImmediately": True}
    assert not protocol.is_blocking("1.0", {"returnImmediately": 1})  # ProtoJSON reads truthiness
    assert protocol.is_blocking("0.3", {"blocking": 0}) and not protocol.is_blocking("0.3", {"blocking": False})


def test_the_error_table():
    assert protocol.ERROR_NAMES[-32001] == "TaskNotFound" and protocol.ERROR_NAMES[-32601] == "MethodNotFound"
    assert (protocol.http_status(protocol.TASK_NOT_FOUND), protocol.reason(protocol.TASK_NOT_FOUND)) == \
        (404, "TASK_NOT_FOUND")
    assert (protocol.http_status(jsonrpc.INTERNAL_ERROR), protocol.reason(jsonrpc.INTERNAL_ERROR)) == (500, None)
    assert (protocol.http_status(-1), protocol.reason(-1)) == (500, None)  # a code A2A does not name
    for code, kind in protocol.ERRORS.items():
        assert kind.code == code and kind.http in protocol.STATUS_NAMES
    assert len({kind.name for kind in protocol.ERRORS.values()}) == len(protocol.ERRORS)


def test_server_errors_carry_codes_from_the_table():
    from runtime.a2a.server.engine import TaskNotCancelable, TaskNotFound, UnsupportedOperation
    from runtime.a2a.server.push import ConfigNotFound

    names = [protocol.ERROR_NAMES[error.code] for error in (TaskNotFound, TaskNotCancelable, UnsupportedOperation,
                                                             ConfigNotFound)]
    assert names == ["TaskNotFound", "TaskNotCancelable", "UnsupportedOperation", "TaskNotFound"]


# --- cards.py: where the card is and which dialect it asks for -----------------------------------


def test_card_urls():
    assert card_urls("http://h:1") == ["http://h:1/.well-known/agent-card.json", "http://h:1/.well-known/agent.json"]
    assert card_urls("http://h:1/a/b/") == ["http://h:1/a/b/.well-known/agent-card.json",
                                            "http://h:1/a/b/.well-known/agent.json",
                                            "http://h:1/.well-known/agent-card.json", "http://h:1/.well-known/agent.json"]
    assert card_urls("http://h:1/card.json") == ["http://h:1/card.json"]


def test_read_card():
    assert read_card(b'{"name": "x"}', "http://h/c.json", "application/json")["name"] == "x"
    for body, why in ((b"<html>", r"not JSON \(text/html: '<html>'\)"), (b"[1]", "got list"), (b"{}", "has no name")):
        with pytest.raises(NoCard, match=why):
            read_card(body, "http://h/c.json", "text/html; charset=utf-8")


CARD_10 = {"name": "n", "supportedInterfaces": [
    {"url": "http://h/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    {"url": "http://h/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "t1"},
    {"url": "http://h/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}],
    "capabilities": {"streaming": True}, "skills": [{"id": "s"}, "junk"]}


@pytest.mark.parametrize("card,card_url,forced,expected", [
    (CARD_10, "http://h/.well-known/agent-card.json", None, ("1.0", "http://h/v1", "t1")),
    (CARD_10, "http://h/.well-known/agent-card.json", "0.3", ("0.3", "http://h/v03", None)),
    ({"name": "n", "url": "/rpc", "protocolVersion": "0.3.0"}, "http://h/.well-known/agent.json", None,
     ("0.3", "http://h/rpc", None)),  # relative to the card
    ({"name": "n", "url": "http://h/rpc"}, "http://h/.well-known/agent-card.json", None, ("0.3", "http://h/rpc", None)),
    ({"name": "n", "url": "http://h/rpc"}, "http://h/.well-known/agent.json", None, ("0.1", "http://h/rpc", None)),
    ({"name": "n", "url": "http://h/rpc", "preferredTransport": "GRPC",
      "additionalInterfaces": [{"url": "http://h/j", "transport": "JSONRPC"}]}, "http://h/c.json", None,
     ("0.3", "http://h/j", None)),
])
def test_dialect_selection(card, card_url, forced, expected):
    peer = remote(card, card_url, forced)
    assert (peer.dialect, peer.url, peer.tenant) == expected and peer.name == "n"
    if card is CARD_10:
        assert peer.streaming and peer.skills == [{"id": "s"}]


def test_a_card_without_an_endpoint():
    with pytest.raises(A2aClientError, match="names no endpoint tern can use for A2A 0.1: no url"):
        remote({"name": "n"}, "http://h/.well-known/agent.json", None)


# --- requests.py: what goes out ----------------------------------------------------------------


def test_send_requests_in_each_dialect():
    method, params = requests.send_request("1.0", "hi", "ctx", None, False, stream=False)
    assert method == "SendMessage" and params["configuration"] == {"returnImmediately": True}
    assert params["message"]["role"] == "ROLE_USER" and params["message"]["contextId"] == "ctx"
    method, params = requests.send_request("0.3", "hi", None, "t", True, stream=False)
    assert method == "message/send" and params["configuration"] == {"blocking": True}
    assert params["message"]["kind"] == "message" and params["message"]["taskId"] == "t"
    method, params = requests.send_request("0.3", "hi", None, None, True, stream=True)
    assert method == "message/stream" and "configuration" not in params
    method, params = requests.send_request("0.1", "hi", "s", "t1", False, stream=True)
    assert method == "tasks/sendSubscribe" and (params["id"], params["sessionId"]) == ("t1", "s")
    assert params["message"] == {"role": "user", "parts": [{"type": "text", "text": "hi"}]}
    assert requests.send_request("0.1", "hi", None, None, True, stream=False)[1]["id"]  # the client names the task


def test_headers_and_envelope():
    assert requests.headers("1.0", "text/event-stream") == {"Content-Type": "application/json",
                                                            "Accept": "text/event-stream", "A2A-Version": "1.0"}
    assert "A2A-Version" not in requests.headers("0.3", "application/json")
    msg_id, body = requests.envelope("1.0", "t1", "GetTask", {"id": "x"})
    request = jsonrpc.parse(body)
    assert isinstance(request, jsonrpc.Request) and request.id == msg_id
    assert (request.method, request.params) == ("GetTask", {"tenant": "t1", "id": "x"})
    assert jsonrpc.parse(requests.envelope("0.3", "t1", "tasks/get", {"id": "x"})[1]).params == {"id": "x"}


# --- requests.py: reading what comes back ------------------------------------------------------


def read(answer, status=200):
    raw = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
    return requests.read_result(raw, status, "peer", "http://h/rpc", "GetTask")


def test_read_results_and_errors():
    assert read({"jsonrpc": "2.0", "id": "1", "result": {"id": "t"}}) == {"id": "t"}
    assert read({"id": 1, "result": 5}) == 5  # a peer that leaves out "jsonrpc" is read as before
    with pytest.raises(A2aClientError) as error:
        read({"jsonrpc": "2.0", "id": "1", "error": {"code": -32001, "message": "gone", "data": [1]}}, status=404)
    assert str(error.value) == "peer: GetTask: gone (TaskNotFound -32001)"
    assert (error.value.code, error.value.message, error.value.data) == (-32001, "gone", [1])
    with pytest.raises(A2aClientError, match=r"no message \(error 7\)"):
        read({"error": {"code": 7}})
    with pytest.raises(A2aClientError, match="HTTP 401: the agent needs credentials .*: who are you"):
        read({"error": {"message": "who are you"}}, status=401)
    with pytest.raises(A2aClientError, match=r"HTTP 502 from http://h/rpc: '<html>'"):
        read(b"<html>", status=502)
    with pytest.raises(A2aClientError, match="not a JSON-RPC answer: empty"):
        read(b"")
    with pytest.raises(A2aClientError, match="not a JSON-RPC answer"):
        read({"jsonrpc": "2.0", "id": 1})


@pytest.mark.parametrize("dialect", DIALECTS)
def test_read_events_of_each_dialect(dialect):
    from runtime.a2a import dialects

    task = Task(id="t", context_id="c", agent="a", state="working")
    event = requests.parse_event(dialects.wrap_result(dialects.render_task(task, dialect), "task", dialect), "m")
    assert isinstance(event, Task) and (event.id, event.state) == ("t", "working")
    wrapped = dialects.wrap_result(dialects.render_task(task, dialect), "task", dialect)
    assert requests.as_task(wrapped, "m", "p").id == "t"
    done = dialects.render_event(StatusEvent(task_id="t", context_id="c", state="completed", final=True), dialect)
    assert requests.ends_stream(requests.parse_event(done, "m"))
    working = dialects.render_event(StatusEvent(task_id="t", context_id="c", state="working"), dialect)
    assert not requests.ends_stream(requests.parse_event(working, "m"))
    assert requests.ends_stream(Message(role="agent", parts=[{"text": "x"}]))
    with pytest.raises(A2aClientError, match="not valid A2A"):
        requests.parse_event({"role": "user", "parts": []}, "m")


def test_the_seed_rest_fallback():
    assert requests.seed_fallback("0.1", "tasks/get", 404) and not requests.seed_fallback("0.3", "tasks/get", 404)
    assert not requests.seed_fallback("0.1", "tasks/get", 500)
    assert requests.seed_request("http://h/a2a/", "tasks/get", {"id": "a/b"}) == (
        "GET",
        "http://h/a2a/tasks/a%2Fb",
        None,
    )
    verb, url, body = requests.seed_request("http://h/a2a", "tasks/send", {"id": "x", "message": {}})
    assert (verb, url, json.loads(body)) == ("POST", "http://h/a2a/tasks/send", {"id": "x", "message": {}})
    assert requests.read_seed(b'{"id": "x"}', 200, "p", "tasks/get", "u") == {"id": "x"}
    with pytest.raises(A2aClientError, match="HTTP 404 from u: empty"):
        requests.read_seed(b"", 404, "p", "tasks/get", "u")
    with pytest.raises(A2aClientError, match="not JSON from u"):
        requests.read_seed(b"<x>", 200, "p", "tasks/get", "u")
