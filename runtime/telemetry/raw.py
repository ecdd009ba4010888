"""Raw spans (``runtime.tracing``'s ended spans) to OTLP bytes, the pieces that
repeat cached.

Most of a span repeats call after call: its name and attributes such as the tool, agent
and operation names. Masking, bounding and encoding such a piece costs more than the rest
of the span, so the finished bytes of each name, each key and each (key, string value)
are kept in dicts of at most ``MAX_ENTRIES`` (emptied when full; values over
``MAX_CACHED_CHARS`` are not kept), and a span is mostly a join of cached bytes, its ids
and its times. The
cache holds one set of secrets' masking: the tracer makes a new ``RawEncoder`` when a
secret is registered. A span the cache cannot encode exactly as the ``Recorder`` would
(more attributes than the limit, a key a secret changed) takes the Recorder's way.
"""

from __future__ import annotations

from collections.abc import Mapping

from runtime.telemetry.context import SpanContext
from runtime.telemetry.otlp import (OtlpEncoder, attribute_field, key_field, name_field, span_bytes,
                                    string_attribute_field)
from runtime.telemetry.spans import Recorder, Span, SpanKind, StatusCode

__all__ = ["RawEncoder", "MAX_ENTRIES", "MAX_CACHED_CHARS"]

MAX_ENTRIES = 4096
MAX_CACHED_CHARS = 256
_MISS, _SLOW = object(), object()


class RawEncoder:
    """``encode(...)``: one ended span as a ``ScopeSpans.spans`` field, the same bytes as
    the ``Recorder`` and ``OtlpEncoder.span`` give."""

    def __init__(self, recorder: Recorder, encoder: OtlpEncoder) -> None:
        self.recorder = recorder
        self.encoder = encoder
        self._names: dict[str, bytes] = {}
        self._keys: dict[str, object] = {}  # bytes, None (dropped) or _SLOW
        self._attributes: dict[tuple[str, str], bytes] = {}  # the kept fields of (key, string value)

    def encode(self, name: str, kind: int, context: SpanContext, parent: SpanContext | None, start_ns: int,
               end_ns: int, attributes: Mapping[str, object], failed: str) -> bytes:
        recorder = self.recorder
        if len(attributes) > recorder.limits.max_attributes:
            return self._slow(name, kind, context, parent, start_ns, end_ns, attributes, failed)
        cache = self._attributes
        try:  # a span's items are the cache's keys: every attribute cached is one lookup, in C
            fields = list(map(cache.get, attributes.items()))
        except TypeError:  # an unhashable value (an array): each attribute the long way
            fields = [None] * len(attributes)
        dropped = 0
        if None in fields:  # the misses only (often one: an id)
            items = list(attributes.items())
            at = fields.index(None)
            while True:
                key, value = items[at]
                field = self._field(key, value)
                if field is _SLOW:
                    return self._slow(name, kind, context, parent, start_ns, end_ns, attributes, failed)
                if field is None:
                    dropped += 1
                    fields[at] = b""
                else:
                    fields[at] = field
                    if type(value) is str and len(value) <= MAX_CACHED_CHARS:
                        if len(cache) >= MAX_ENTRIES:
                            cache.clear()
                        cache[(key, value)] = field
                try:
                    at = fields.index(None, at + 1)
                except ValueError:
                    break
        encoded_name = self._names.get(name)
        if encoded_name is None:
            encoded_name = name_field(recorder.text(name, recorder.limits.max_name_chars))
            if len(name) <= MAX_CACHED_CHARS:
                if len(self._names) >= MAX_ENTRIES:
                    self._names.clear()
                self._names[name] = encoded_name
        status, message = StatusCode.UNSET, ""
        if failed:
            status, message = StatusCode.ERROR, recorder.text(failed, recorder.limits.max_name_chars)
        return span_bytes(context, parent.span_id if parent is not None else b"", parent is not None and parent.remote,
                          encoded_name, kind, start_ns, end_ns if end_ns > start_ns else start_ns, b"".join(fields),
                          dropped, b"", 0, status, message)

    def _field(self, key: str, value: object) -> object:
        """The attribute's bytes, None when dropped, ``_SLOW`` when a secret changed its key
        (two keys may then mask to one, which the Recorder's dict keeps once)."""
        encoded_key = self._keys.get(key, _MISS)
        if encoded_key is _MISS:
            kept = self.recorder.key(key)
            encoded_key = None if kept is None else _SLOW if kept != key else key_field(key)
            if len(key) <= MAX_CACHED_CHARS:  # longer keys are dropped anyway
                if len(self._keys) >= MAX_ENTRIES:
                    self._keys.clear()
                self._keys[key] = encoded_key
        if encoded_key is None or encoded_key is _SLOW:
            return encoded_key
        if type(value) is str:  # most values: masked, cut, encoded in the fewest steps
            recorder = self.recorder
            return string_attribute_field(encoded_key, recorder.text(value, recorder.limits.max_value_chars))
        kept_value = self.recorder.value(value)
        return None if kept_value is None else attribute_field(encoded_key, kept_value)  # type: ignore[arg-type]

    def _slow(self, name: str, kind: int, context: SpanContext, parent: SpanContext | None, start_ns: int,
              end_ns: int, attributes: Mapping[str, object], failed: str) -> bytes:
        recorder = self.recorder
        span = Span(context, recorder.text(name, recorder.limits.max_name_chars), SpanKind(kind), start_ns,
                    parent_id=parent.span_id if parent is not None else b"",
                    parent_remote=parent is not None and parent.remote)
        recorder.update(span, attributes)
        recorder.end(span, end_ns, StatusCode.ERROR if failed else StatusCode.UNSET, failed)
        return self.encoder.span(span)
