"""JSON-RPC 2.0 messages: build and encode the outgoing side, parse and check the incoming.

Both MCP and A2A speak JSON-RPC 2.0, so this is the one place that knows its rules.
It is sans-IO: bytes in, message objects out (and back), no transport.

Outgoing messages are msgspec Structs whose ``"jsonrpc": "2.0"`` member is the Struct
tag, so it is always encoded (first) and cannot be set wrong. Incoming bytes are
decoded once into a loose Struct whose fields are all ``Any`` and default to ``UNSET``
(so an absent ``id`` is told apart from ``"id": null``), then checked by hand: that is
both faster and gives better error messages than a tagged union. A message that breaks
the rules raises :class:`InvalidMessage` carrying the error to answer with and the
request id when one could be recovered.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec import UNSET

from runtime.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RpcError
from runtime.wire.depth import MAX_DEPTH, too_deep

__all__ = [
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INVALID_PARAMS",
    "INTERNAL_ERROR",
    "RequestId",
    "Request",
    "Notification",
    "Response",
    "ErrorObject",
    "ErrorResponse",
    "Message",
    "InvalidMessage",
    "BatchNotSupported",
    "encode",
    "parse",
    "error_response",
    "error_answer",
    "sniff_id",
]


RequestId = int | str


class _Message(msgspec.Struct, tag_field="jsonrpc", tag="2.0"):
    """Base of every message: the tag writes ``"jsonrpc":"2.0"`` into each encoding."""


class Request(_Message):
    """A call that expects a response with the same ``id``."""

    id: RequestId
    method: str
    params: Any = UNSET


class Notification(_Message):
    """A call without ``id``: nobody answers it."""

    method: str
    params: Any = UNSET


class Response(_Message):
    """A successful answer to the request with this ``id``."""

    id: RequestId
    result: Any


class ErrorObject(msgspec.Struct):
    """The ``error`` member of an error response."""

    code: int
    message: str
    data: Any = UNSET


class ErrorResponse(_Message):
    """A failed answer; ``id`` is None when the request's id could not be read."""

    id: RequestId | None
    error: ErrorObject


Message = Request | Notification | Response | ErrorResponse


class InvalidMessage(RpcError):
    """An incoming message broke JSON-RPC; answer with ``to_response()``.

    ``id`` is the request id when it could be recovered, else None.
    """

    def __init__(self, code: int, message: str, id: RequestId | None = None) -> None:
        super().__init__(code, message)
        self.id = id

    def to_response(self) -> ErrorResponse:
        return error_answer(self.id, self)


class BatchNotSupported(InvalidMessage):
    """The peer sent a (non-empty) JSON array: a batch, which tern does not serve."""

    def __init__(self) -> None:
        super().__init__(INVALID_REQUEST, "batch requests are not supported")


class _Loose(msgspec.Struct):
    """Any JSON object; absent members stay UNSET."""

    jsonrpc: Any = UNSET
    id: Any = UNSET
    method: Any = UNSET
    params: Any = UNSET
    result: Any = UNSET
    error: Any = UNSET


_encoder = msgspec.json.Encoder()
_loose_decoder = msgspec.json.Decoder(_Loose)
_any_decoder = msgspec.json.Decoder()
_NOT_UTF8 = "Parse error: the message is not valid UTF-8"


def encode(msg: Message) -> bytes:
    """Compact JSON for ``msg``; it never contains a raw newline byte."""
    return _encoder.encode(msg)


def error_response(
    id: RequestId | None, code: int, message: str, data: Any = UNSET
) -> ErrorResponse:
    """An error response to the request ``id`` (None if it could not be read)."""
    return ErrorResponse(id, ErrorObject(code, message, data))


def error_answer(id: RequestId | None, error: RpcError) -> ErrorResponse:
    """The error response that answers request ``id`` with ``error`` (no ``data``
    member when it has none): the one way a server turns an RpcError into JSON-RPC."""
    return error_response(id, error.code, error.message, UNSET if error.data is None else error.data)


def _is_id(value: Any) -> bool:
    # bool is a subclass of int but not a valid id.
    return type(value) is int or type(value) is str


def _invalid(detail: str, id: RequestId | None = None) -> InvalidMessage:
    return InvalidMessage(INVALID_REQUEST, f"Invalid Request: {detail}", id)


def parse(data: bytes) -> Message:
    """Decode and check one JSON-RPC message.

    Raises :class:`InvalidMessage` (an ``RpcError``): code -32700 for bytes that are
    not JSON (or not UTF-8), -32600 for JSON that is not a valid message, and
    :class:`BatchNotSupported` for a non-empty array.
    """
    if too_deep(data):
        raise InvalidMessage(PARSE_ERROR, f"Parse error: JSON nested more than {MAX_DEPTH} levels deep")
    try:
        msg = _loose_decoder.decode(data)
    except msgspec.ValidationError:
        # Valid-looking JSON that is not an object, or a parse error found late.
        raise _not_an_object(data) from None
    except msgspec.DecodeError as exc:
        raise InvalidMessage(PARSE_ERROR, f"Parse error: {exc}") from None
    except UnicodeDecodeError:
        raise InvalidMessage(PARSE_ERROR, _NOT_UTF8) from None
    if not data.isascii():
        # msgspec skips unknown members without checking their UTF-8; JSON must be UTF-8.
        try:
            data.decode()
        except UnicodeDecodeError:
            raise InvalidMessage(PARSE_ERROR, _NOT_UTF8) from None

    mid = msg.id
    id_ok = _is_id(mid)
    known_id = mid if id_ok else None
    if msg.jsonrpc != "2.0":
        raise _invalid('"jsonrpc" must be "2.0"', known_id)

    method = msg.method
    if method is not UNSET:
        if type(method) is not str:
            raise _invalid('"method" must be a string', known_id)
        params = msg.params
        if params is not UNSET and type(params) is not dict and type(params) is not list:
            raise _invalid('"params" must be an object or an array', known_id)
        if msg.result is not UNSET or msg.error is not UNSET:
            raise _invalid('a request cannot carry "result" or "error"', known_id)
        if mid is UNSET:
            return Notification(method, params)
        if not id_ok:
            raise _invalid('"id" must be a string or an integer')
        return Request(mid, method, params)

    result, error = msg.result, msg.error
    if result is not UNSET and error is not UNSET:
        raise _invalid('a response cannot carry both "result" and "error"', known_id)
    if result is UNSET and error is UNSET:
        raise _invalid('expected "method", "result" or "error"', known_id)
    if mid is UNSET:
        raise _invalid('a response must carry "id"')
    if result is not UNSET:
        if not id_ok:
            raise _invalid('"id" must be a string or an integer')
        return Response(mid, result)
    if not id_ok and mid is not None:
        raise _invalid('"id" must be a string, an integer or null')
    return ErrorResponse(mid, _error_object(error, known_id))


def _error_object(error: Any, id: RequestId | None) -> ErrorObject:
    if type(error) is not dict:
        raise _invalid('"error" must be an object', id)
    code = error.get("code")
    message = error.get("message")
    if type(code) is not int:
        raise _invalid('"error.code" must be an integer', id)
    if type(message) is not str:
        raise _invalid('"error.message" must be a string', id)
    return ErrorObject(code, message, error.get("data", UNSET))


def _not_an_object(data: bytes) -> InvalidMessage:
    try:
        value = _any_decoder.decode(data)
    except msgspec.DecodeError as exc:
        return InvalidMessage(PARSE_ERROR, f"Parse error: {exc}")
    except UnicodeDecodeError:
        return InvalidMessage(PARSE_ERROR, _NOT_UTF8)
    if type(value) is list:
        if not value:
            return InvalidMessage(INVALID_REQUEST, "Invalid Request")
        return BatchNotSupported()
    return _invalid("a message must be a JSON object")


# ---------------------------------------------------------------------------------------
# sniff_id: the id of a message too large to decode, from its first few KiB.

_STRUCTURE = re.compile(rb'["{}\[\]]')  # the only bytes that change depth or string state
_STRING_REST = re.compile(rb'(?:[^"\\]|\\.)*"', re.DOTALL)  # after an opening quote
_WHITESPACE = re.compile(rb"[ \t\r\n]*")
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]*)")
_AFTER_INTEGER = frozenset(b" \t\r\n,}")


def sniff_id(head: bytes) -> RequestId | None:
    """The top-level ``"id"`` of a JSON object from a (maybe truncated) prefix of it.

    Only keys of the outermost object count, so an ``"id"`` inside ``params`` is
    skipped. Returns None when the prefix holds no complete string or integer id.
    """
    pos = _WHITESPACE.match(head).end()
    if head[pos : pos + 1] != b"{":
        return None
    depth = 1
    pos += 1
    while True:
        m = _STRUCTURE.search(head, pos)
        if m is None:
            return None
        char = head[m.start()]
        pos = m.end()
        if char == 0x22:  # '"'
            s = _STRING_REST.match(head, pos)
            if s is None:
                return None  # truncated inside a string
            key_start, pos = pos - 1, s.end()
            if depth != 1:
                continue
            colon = _WHITESPACE.match(head, pos).end()
            if head[colon : colon + 1] != b":":
                continue  # a value, not a key
            if _string_value(head[key_start:pos]) == "id":
                return _id_value(head, _WHITESPACE.match(head, colon + 1).end())
        elif char in b"{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return None  # the object ended without an "id"


def _string_value(raw: bytes) -> str | None:
    if b"\\" not in raw:
        try:
            return raw[1:-1].decode()
        except UnicodeDecodeError:
            return None
    try:
        value = _any_decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    return value if type(value) is str else None


def _id_value(head: bytes, pos: int) -> RequestId | None:
    first = head[pos : pos + 1]
    if first == b'"':
        s = _STRING_REST.match(head, pos + 1)
        return None if s is None else _string_value(head[pos : s.end()])
    m = _INTEGER.match(head, pos)
    if m is None or m.end() >= len(head) or head[m.end()] not in _AFTER_INTEGER:
        return None  # not an integer, or cut off where more digits could follow
    return int(head[pos : m.end()])
