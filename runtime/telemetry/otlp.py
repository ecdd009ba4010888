"""OTLP/HTTP in protobuf, encoded by hand: tern sends traces without depending on protobuf.

The protobuf wire format is small: a field is a tag (``number << 3 | wire type``, a
varint) then a varint, eight little-endian bytes (``fixed64``), four (``fixed32``) or a
varint length and that many bytes (strings, bytes, nested messages). This module writes
``ExportTraceServiceRequest`` (opentelemetry-proto ``collector/trace/v1``) with the
fields tern fills; the tests decode its bytes with the official ``opentelemetry-proto``
package and compare every field.

Each span is encoded once, when it ends (``OtlpEncoder.span``); a batch is those bytes
wrapped in the resource and scope prefix (``OtlpEncoder.request``), so the exporter only
concatenates. ``AnyValue`` is a ``oneof``: its field is written even when it holds the
default (``0``, ``false``, ``""``), or a reader would see no value at all. Text that is
not valid UTF-8 (a lone surrogate from a peer's JSON) is written with ``?`` in its place:
a collector refuses a whole request over one invalid string.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from runtime.telemetry.context import SpanContext, format_tracestate
from runtime.telemetry.spans import AttrValue, Event, Span, StatusCode

__all__ = ["CONTENT_TYPE", "TRACES_PATH", "RETRYABLE_STATUSES", "OtlpEncoder", "span_bytes", "name_field",
           "key_field", "attribute_field",
           "string_attribute_field"]

CONTENT_TYPE = "application/x-protobuf"
TRACES_PATH = "/v1/traces"
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})  # OTLP/HTTP: retry these (after Retry-After); drop the rest

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_U64 = (1 << 64) - 1
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # Span.flags bits 8 and 9 (SpanFlags)
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]  # most lengths, tags and counts
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack
_pack_double = struct.Struct("<d").pack


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    value &= _U64  # a negative int64 is its two's complement: ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


# ExportTraceServiceRequest.resource_spans=1; ResourceSpans.resource=1 .scope_spans=2; Resource.attributes=1;
# ScopeSpans.scope=1 .spans=2; InstrumentationScope.name=1 .version=2; KeyValue.key=1 .value=2
_T1, _T2 = _tag(1, _LEN), _tag(2, _LEN)
# AnyValue: string_value=1 bool_value=2 int_value=3 double_value=4 array_value=5; ArrayValue.values=1
_ANY_STR, _ANY_BOOL, _ANY_INT, _ANY_DOUBLE, _ANY_ARRAY = (
    _tag(1, _LEN), _tag(2, _VARINT), _tag(3, _VARINT), _tag(4, _FIXED64), _tag(5, _LEN))
# Span fields
_S_TRACE_ID, _S_SPAN_ID, _S_STATE, _S_PARENT, _S_NAME = (_tag(n, _LEN) for n in (1, 2, 3, 4, 5))
_S_KIND, _S_START, _S_END, _S_ATTR = _tag(6, _VARINT), _tag(7, _FIXED64), _tag(8, _FIXED64), _tag(9, _LEN)
_S_DROPPED_ATTRS, _S_EVENT, _S_DROPPED_EVENTS = _tag(10, _VARINT), _tag(11, _LEN), _tag(12, _VARINT)
_S_STATUS, _S_FLAGS = _tag(15, _LEN), _tag(16, _FIXED32)
# Event: time_unix_nano=1 name=2 attributes=3 dropped_attributes_count=4; Status: message=2 code=3
_E_TIME, _E_NAME, _E_ATTR, _E_DROPPED = _tag(1, _FIXED64), _tag(2, _LEN), _tag(3, _LEN), _tag(4, _VARINT)
_ST_MESSAGE, _ST_CODE = _tag(2, _LEN), _tag(3, _VARINT)
_TRACE_ID_PREFIX, _SPAN_ID_PREFIX = _S_TRACE_ID + _varint(16), _S_SPAN_ID + _varint(8)  # ids have fixed lengths
_PARENT_PREFIX = _S_PARENT + _varint(8)
_START_TAG, _END_TAG = _S_START[0], _S_END[0]
_pack_times = struct.Struct("<BQBQ").pack  # start and end: each a one-byte tag and a fixed64


def _any_value(value: AttrValue) -> bytes:
    if type(value) is str:  # the most common kind first
        return _field(_ANY_STR, _utf8(value))
    if isinstance(value, bool):
        return _ANY_BOOL + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return _ANY_INT + _varint(value)
    if isinstance(value, float):
        return _ANY_DOUBLE + _pack_double(value)
    if isinstance(value, str):
        return _field(_ANY_STR, _utf8(value))
    return _field(_ANY_ARRAY, b"".join(_field(_T1, _any_value(item)) for item in value))


def _attributes(tag: bytes, attributes: Mapping[str, AttrValue]) -> bytes:
    return b"".join(_field(tag, key_field(key) + _field(_T2, _any_value(value))) for key, value in attributes.items())


def _event(event: Event) -> bytes:
    out = _E_TIME + _pack_fixed64(event.time_ns) + _field(_E_NAME, _utf8(event.name))
    out += _attributes(_E_ATTR, event.attributes)
    if event.dropped_attributes:
        out += _E_DROPPED + _varint(event.dropped_attributes)
    return out


def _span(span: Span) -> bytes:
    attributes = b"".join(attribute_field(key_field(key), value) for key, value in span.attributes.items())
    return span_bytes(span.context, span.parent_id, span.parent_remote, name_field(span.name), span.kind,
                      span.start_ns, span.end_ns, attributes, span.dropped_attributes,
                      b"".join(_field(_S_EVENT, _event(event)) for event in span.events), span.dropped_events,
                      span.status, span.status_message)


def name_field(name: str) -> bytes:
    """A span's name as its field (``Span.name``): a piece ``span_bytes`` takes, cacheable."""
    return _field(_S_NAME, _utf8(name))


def key_field(key: str) -> bytes:
    """An attribute's key as its field (``KeyValue.key``), for ``attribute_field``; cacheable."""
    return _field(_T1, _utf8(key))


def string_attribute_field(key: bytes, value: str) -> bytes:
    """``attribute_field`` for a string value, in fewer steps (most values are strings)."""
    encoded = value.encode("utf-8", "replace")
    n = len(encoded)
    value_field = _ANY_STR + (_ONE_BYTE[n] if n < 0x80 else _varint(n)) + encoded
    n = len(value_field)
    pair = key + _T2 + (_ONE_BYTE[n] if n < 0x80 else _varint(n)) + value_field
    n = len(pair)
    return _S_ATTR + (_ONE_BYTE[n] if n < 0x80 else _varint(n)) + pair


def attribute_field(key: bytes, value: AttrValue) -> bytes:
    """One attribute (``key`` from ``key_field``) as its field (``Span.attributes``): a piece
    ``span_bytes`` takes, cacheable."""
    return _field(_S_ATTR, key + _field(_T2, _any_value(value)))


def span_bytes(context: SpanContext, parent_id: bytes, parent_remote: bool, name: bytes, kind: int, start_ns: int,
               end_ns: int, attributes: bytes, dropped_attributes: int = 0, events: bytes = b"",
               dropped_events: int = 0, status: int = StatusCode.UNSET, status_message: str = "") -> bytes:
    """A ``Span`` message as a ``ScopeSpans.spans`` field, ready to be joined into a request,
    from its pieces, already bounded and masked: ``name`` from ``name_field``,
    ``attributes`` and ``events`` as encoded fields. One join: it runs for every span."""
    span = b"".join((
        _TRACE_ID_PREFIX, context.trace_id, _SPAN_ID_PREFIX, context.span_id,
        _field(_S_STATE, _utf8(format_tracestate(context.state))) if context.state else b"",
        (_PARENT_PREFIX + parent_id if len(parent_id) == 8 else _field(_S_PARENT, parent_id)) if parent_id else b"",
        name, _S_KIND, _varint(kind), _pack_times(_START_TAG, start_ns, _END_TAG, end_ns), attributes,
        _S_DROPPED_ATTRS + _varint(dropped_attributes) if dropped_attributes else b"",
        events,
        _S_DROPPED_EVENTS + _varint(dropped_events) if dropped_events else b"",
        _status(status, status_message) if status != StatusCode.UNSET else b"",
        _S_FLAGS, _pack_fixed32((context.flags & 0xFF) | _HAS_IS_REMOTE | (_IS_REMOTE if parent_remote else 0))))
    n = len(span)
    return _T2 + (_ONE_BYTE[n] if n < 0x80 else bytes((n & 0x7F | 0x80, n >> 7)) if n < 0x4000 else _varint(n)) + span


def _status(status: int, message: str) -> bytes:
    return _field(_S_STATUS, (_field(_ST_MESSAGE, _utf8(message)) if message else b"") + _ST_CODE + _varint(status))


class OtlpEncoder:
    """One process's resource (``service.name`` and the rest) and scope, and the bytes of
    its spans and requests."""

    def __init__(self, resource: Mapping[str, AttrValue], scope_name: str, scope_version: str = "") -> None:
        self._resource = _field(_T1, _attributes(_T1, resource))
        scope = _field(_T1, _utf8(scope_name)) + (_field(_T2, _utf8(scope_version)) if scope_version else b"")
        self._scope = _field(_T1, scope)

    def span(self, span: Span) -> bytes:
        """The span as a ``ScopeSpans.spans`` field, ready to be joined into a request."""
        return _span(span)

    def request(self, spans: Iterable[bytes]) -> bytes:
        """An ``ExportTraceServiceRequest`` holding the encoded ``spans``: the POST body."""
        scope_spans = _field(_T2, self._scope + b"".join(spans))
        return _field(_T1, self._resource + scope_spans)
