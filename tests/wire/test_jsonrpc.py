import json
import subprocess
import sys
from pathlib import Path

import msgspec
from msgspec import UNSET
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.errors import ProtocolError, RpcError
from runtime.wire import jsonrpc
from runtime.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    BatchNotSupported,
    ErrorObject,
    ErrorResponse,
    InvalidMessage,
    Notification,
    Request,
    Response,
    encode,
    error_response,
    parse,
    sniff_id,
)


def invalid(data: bytes) -> InvalidMessage:
    with pytest.raises(InvalidMessage) as info:
        parse(data)
    return info.value


def test_standard_codes():
    assert (PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR) == (
        -32700,
        -32600,
        -32601,
        -32602,
        -32603,
    )


# --- encode -------------------------------------------------------------------------


def test_encode_request_has_jsonrpc_first_and_omits_unset_params():
    assert encode(Request(1, "ping")) == b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    assert (
        encode(Request("a", "tools/call", {"name": "x"}))
        == b'{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"}}'
    )


def test_encode_notification_response_and_errors():
    assert encode(Notification("initialized")) == b'{"jsonrpc":"2.0","method":"initialized"}'
    assert encode(Notification("n", [1, 2])) == b'{"jsonrpc":"2.0","method":"n","params":[1,2]}'
    assert encode(Response(7, None)) == b'{"jsonrpc":"2.0","id":7,"result":null}'
    assert encode(Response(7, {"ok": True})) == b'{"jsonrpc":"2.0","id":7,"result":{"ok":true}}'
    assert (
        encode(error_response(None, PARSE_ERROR, "Parse error"))
        == b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'
    )
    assert (
        encode(ErrorResponse(3, ErrorObject(-32000, "boom", {"why": "x"})))
        == b'{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"boom","data":{"why":"x"}}}'
    )


def test_error_response_helper_builds_the_struct():
    assert error_response(5, METHOD_NOT_FOUND, "no such method") == ErrorResponse(
        5, ErrorObject(-32601, "no such method")
    )
    assert error_response("x", -1, "m", data=None).error.data is None


def test_encode_never_contains_a_raw_newline():
    out = encode(Request(1, "m", {"text": "a\nb\r\nc\u2028", "k\n": ["\n"]}))
    assert b"\n" not in out and b"\r" not in out
    assert json.loads(out)["params"] == {"text": "a\nb\r\nc\u2028", "k\n": ["\n"]}


@pytest.mark.parametrize(
    "msg",
    [
        Request(1, "tools/call", {"name": "echo", "arguments": {"s": "é☃"}}),
        Request("id-1", "tools/list"),
        Request(0, "m", [1, "two", None]),
        Request(-5, "m", {}),
        Notification("notifications/initialized"),
        Notification("n", {"a": 1.5}),
        Response(1, {"tools": []}),
        Response("s", None),
        Response(2, [1, 2]),
        ErrorResponse(1, ErrorObject(-32601, "Method not found")),
        ErrorResponse(None, ErrorObject(-32700, "Parse error", {"byte": 3})),
        ErrorResponse("q", ErrorObject(-1, "x", None)),
    ],
)
def test_round_trip(msg):
    assert parse(encode(msg)) == msg


def test_parse_returns_plain_python_values():
    msg = parse(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,{"b":null}]}}')
    assert type(msg) is Request
    assert msg.params == {"a": [1, {"b": None}]} and type(msg.params) is dict


def test_parse_ignores_unknown_members_and_whitespace():
    msg = parse(b' \n{ "jsonrpc" : "2.0", "method": "m", "extra": {"id": 9} }\r\n')
    assert msg == Notification("m")


def test_big_integer_id_is_kept_exactly():
    big = 2**80
    assert parse(b'{"jsonrpc":"2.0","id":%d,"method":"m"}' % big) == Request(big, "m")


# --- notification vs id null -----------------------------------------------------------


def test_absent_id_is_a_notification():
    msg = parse(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"id":3}}')
    assert msg == Notification("notifications/cancelled", {"id": 3})


def test_null_id_in_a_request_is_invalid():
    err = invalid(b'{"jsonrpc":"2.0","id":null,"method":"m"}')
    assert (err.code, err.id) == (INVALID_REQUEST, None)


def test_null_id_in_an_error_response_is_allowed():
    msg = parse(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}')
    assert msg == ErrorResponse(None, ErrorObject(-32700, "Parse error"))


def test_null_id_in_a_result_response_is_invalid():
    err = invalid(b'{"jsonrpc":"2.0","id":null,"result":1}')
    assert (err.code, err.id) == (INVALID_REQUEST, None)


def test_response_without_id_is_invalid():
    assert invalid(b'{"jsonrpc":"2.0","result":1}').code == INVALID_REQUEST
    assert invalid(b'{"jsonrpc":"2.0","error":{"code":1,"message":"m"}}').code == INVALID_REQUEST


def test_null_result_is_a_response():
    assert parse(b'{"jsonrpc":"2.0","id":4,"result":null}') == Response(4, None)


# --- invalid messages ----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   ",
        b"{",
        b'{"jsonrpc":"2.0",',
        b"{'jsonrpc':'2.0'}",
        b'{"jsonrpc":"2.0","id":1,"method":"m"} trailing',
        b"nul",
        b"\xff\xfe",
        b'{"jsonrpc":"2.0","id":1,"method":"\xff"}',
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"\xc3":1}}',
        b'{"jsonrpc":"2.0","id":1,"method":"m","unknown":"\xed\xa0\x80"}',
        b'{"jsonrpc":"2.0","id":1,"method":"m","\xff":1}',
        b"[1,",
        b"[{]",
    ],
)
def test_parse_error(data):
    err = invalid(data)
    assert err.code == PARSE_ERROR
    assert err.id is None
    assert err.message.startswith("Parse error")
    assert not isinstance(err, BatchNotSupported)


@pytest.mark.parametrize("data", [b"1", b'"s"', b"null", b"true", b"3.5"])
def test_json_that_is_not_an_object(data):
    err = invalid(data)
    assert (err.code, err.id) == (INVALID_REQUEST, None)


def test_empty_batch_is_invalid_request():
    err = invalid(b" [ ] ")
    assert (err.code, err.message, err.id) == (INVALID_REQUEST, "Invalid Request", None)
    assert not isinstance(err, BatchNotSupported)


def test_batch_is_not_supported():
    err = invalid(b'[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"}]')
    assert isinstance(err, BatchNotSupported)
    assert (err.code, err.message, err.id) == (
        INVALID_REQUEST,
        "batch requests are not supported",
        None,
    )
    assert isinstance(invalid(b"[1]"), BatchNotSupported)


@pytest.mark.parametrize(
    ("data", "expected_id"),
    [
        # jsonrpc member missing or wrong
        (b'{"id":1,"method":"m"}', 1),
        (b'{"jsonrpc":"1.0","id":"a","method":"m"}', "a"),
        (b'{"jsonrpc":2.0,"id":2,"method":"m"}', 2),
        (b'{"jsonrpc":null,"method":"m"}', None),
        # method not a string
        (b'{"jsonrpc":"2.0","id":3,"method":5}', 3),
        (b'{"jsonrpc":"2.0","id":3,"method":null}', 3),
        (b'{"jsonrpc":"2.0","method":["m"]}', None),
        # params not object/array
        (b'{"jsonrpc":"2.0","id":4,"method":"m","params":"x"}', 4),
        (b'{"jsonrpc":"2.0","id":4,"method":"m","params":null}', 4),
        (b'{"jsonrpc":"2.0","id":4,"method":"m","params":7}', 4),
        # ids of the wrong type
        (b'{"jsonrpc":"2.0","id":1.0,"method":"m"}', None),
        (b'{"jsonrpc":"2.0","id":true,"method":"m"}', None),
        (b'{"jsonrpc":"2.0","id":false,"result":1}', None),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"m"}', None),
        (b'{"jsonrpc":"2.0","id":[1],"result":1}', None),
        (b'{"jsonrpc":"2.0","id":2.5,"error":{"code":1,"message":"m"}}', None),
        # request carrying result/error
        (b'{"jsonrpc":"2.0","id":5,"method":"m","result":1}', 5),
        (b'{"jsonrpc":"2.0","id":5,"method":"m","error":{"code":1,"message":"m"}}', 5),
        # response with both or neither
        (b'{"jsonrpc":"2.0","id":6,"result":1,"error":{"code":1,"message":"m"}}', 6),
        (b'{"jsonrpc":"2.0","id":"six"}', "six"),
        (b"{}", None),
        # bad error objects
        (b'{"jsonrpc":"2.0","id":7,"error":"boom"}', 7),
        (b'{"jsonrpc":"2.0","id":7,"error":{"message":"m"}}', 7),
        (b'{"jsonrpc":"2.0","id":7,"error":{"code":"1","message":"m"}}', 7),
        (b'{"jsonrpc":"2.0","id":7,"error":{"code":true,"message":"m"}}', 7),
        (b'{"jsonrpc":"2.0","id":7,"error":{"code":1}}', 7),
        (b'{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":null}}', 7),
    ],
)
def test_invalid_request(data, expected_id):
    err = invalid(data)
    assert err.code == INVALID_REQUEST
    assert err.id == expected_id
    assert type(err.id) is type(expected_id)
    assert err.message.startswith("Invalid Request")


def test_invalid_message_is_an_rpc_error_and_answers_itself():
    err = invalid(b'{"jsonrpc":"2.0","id":"r1","method":"m","params":3}')
    assert isinstance(err, RpcError) and isinstance(err, ProtocolError)
    assert err.data is None
    response = err.to_response()
    assert response == ErrorResponse("r1", ErrorObject(INVALID_REQUEST, err.message))
    decoded = json.loads(encode(response))
    assert decoded["id"] == "r1" and decoded["error"]["code"] == -32600
    assert decoded["jsonrpc"] == "2.0"


def test_parse_error_response_encodes_null_id():
    err = invalid(b"{oops")
    assert json.loads(encode(err.to_response()))["id"] is None


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_parse_raises_only_rpc_error_on_arbitrary_bytes(data):
    try:
        parse(data)
    except RpcError as err:
        assert err.code in (PARSE_ERROR, INVALID_REQUEST)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10,
)


_member = st.one_of(
    st.just("2.0"),
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.fixed_dictionaries({"code": st.integers() | st.text(max_size=2), "message": st.text(max_size=3)}),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "x"]),
        _member,
    )
)
def test_parse_raises_only_rpc_error_on_arbitrary_objects(obj):
    data = msgspec.json.encode(obj)
    try:
        msg = parse(data)
    except RpcError as err:
        assert err.code == INVALID_REQUEST
    else:
        if "error" in obj:
            assert type(msg) is ErrorResponse and msg.error.code == obj["error"]["code"]
            return
        # Whatever parsed encodes back to the same members (minus ignored ones).
        ignored = {"x"} if "method" in obj else {"x", "params"}
        expected = {k: v for k, v in obj.items() if k not in ignored}
        assert json.loads(encode(msg)) == json.loads(msgspec.json.encode(expected))


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.integers(), st.text()),
    st.text(min_size=1),
    st.none() | st.dictionaries(st.text(), _json, max_size=3) | st.lists(_json, max_size=3),
)
def test_request_round_trip_property(id, method, params):
    msg = Request(id, method, UNSET if params is None else params)
    assert parse(encode(msg)) == msg


# --- sniff_id ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":42,"method":"m"}', 42),
        (b'{"id":"abc","method":"m"}', "abc"),
        (b'  \r\n{ "id" : -7 , "x": 1}', -7),
        (b'{"id":0}', 0),
        (b'{"method":"m","params":{"id":5,"deep":[{"id":6}]},"id":"outer"}', "outer"),
        (b'{"params":{"id":5},"method":"tools/call","params2":"x"', None),
        (b'{"method":"say \\"id\\": 3","id":9}', 9),
        (b'{"note":"\\"id\\":1","id":2}', 2),
        (b'{"\\u0069d":"escaped-key"}', "escaped-key"),
        (b'{"id":"a\\"b\\u00e9"}', 'a"b\u00e9'),
        (b'{"x":"id","id":3}', 3),
        (b'{"a":["id",{"id":1}],"id":8}', 8),
        (b'{"a":"}","id":4}', 4),
        (b'{"a":"{{{","id":5}', 5),
        (b'{"a":"[","b":"]]]","id":6}', 6),
        (b'{"idx":1,"xid":2,"id":3}', 3),
    ],
)
def test_sniff_id_finds_the_top_level_id(head, expected):
    assert sniff_id(head) == expected
    assert type(sniff_id(head)) is type(expected)


@pytest.mark.parametrize(
    "head",
    [
        b"",
        b"[1,2]",
        b'"id"',
        b"not json",
        b'{"method":"m"}',
        b'{"id":null,"method":"m"}',
        b'{"id":true}',
        b'{"id":1.5}',
        b'{"id":1e3}',
        b'{"id":{"id":1}}',
        b'{"id":[1]}',
        b'{"params":{"id":1}}',
        b'{"params":{"id":1},',
        b"{}",
        b'{"a":1},"id":2',  # after the object closes
    ],
)
def test_sniff_id_returns_none(head):
    assert sniff_id(head) is None


def test_sniff_id_on_truncated_prefixes():
    full = b'{"jsonrpc":"2.0","method":"tools/call","id":12345,"params":{"x":"' + b"y" * 100
    id_at = full.index(b"12345")
    for cut in range(len(full) + 1):
        expected = 12345 if cut > id_at + 5 else None
        assert sniff_id(full[:cut]) == expected, cut


def test_sniff_id_on_truncated_string_id():
    full = b'{"id":"req-\\"7\\"","params":{}}'
    end = full.index(b",")
    for cut in range(len(full) + 1):
        expected = 'req-"7"' if cut >= end else None
        assert sniff_id(full[:cut]) == expected, cut


def test_sniff_id_in_an_oversized_message_head():
    head = (
        b'{"jsonrpc":"2.0","method":"tools/call","params":{"id":"inner","blob":"'
        + b"\\\"id\\\":1," * 500
    )[:4096]
    assert sniff_id(head) is None
    head = b'{"jsonrpc":"2.0","id":"r-9","method":"tools/call","params":{"blob":"' + b"x" * 5000
    assert sniff_id(head[:4096]) == "r-9"


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.integers(), st.text()),
    st.dictionaries(st.text(max_size=5), _json, max_size=3),
    st.booleans(),
)
def test_sniff_id_matches_a_real_decode(id, params, id_first):
    if id_first:
        obj = {"jsonrpc": "2.0", "id": id, "method": "m", "params": params}
    else:
        obj = {"jsonrpc": "2.0", "method": "m", "params": params, "id": id}
    data = msgspec.json.encode(obj)
    assert sniff_id(data) == id
    # Any prefix finds the id or nothing, never a wrong value.
    for cut in range(0, len(data), 7):
        assert sniff_id(data[:cut]) in (None, id)


def test_module_exports():
    assert set(jsonrpc.__all__) <= set(dir(jsonrpc))


def test_package_reexports_exactly_the_public_names():
    import runtime.wire as wire
    from runtime.wire import framing, sse

    expected = set(jsonrpc.__all__) | set(framing.__all__) | set(sse.__all__)
    assert set(wire.__all__) == expected
    assert len(wire.__all__) == len(expected)
    for name in expected:
        assert getattr(wire, name) is getattr(
            jsonrpc if name in jsonrpc.__all__ else framing if name in framing.__all__ else sse, name
        )


def test_wire_does_not_import_trio():
    code = "import sys, runtime.wire; print('trio' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip() == "False"
