"""The span model: what one span records, and the bounds and masking every value goes through.

Attribute values come from peers (tool names, model names, error text), so a ``Recorder``
bounds them before they are kept: at most ``max_attributes`` per span (and per event),
strings cut to ``max_value_chars``, arrays to ``max_array_items`` and the same total of
characters, at most ``max_events`` events. What does not fit is counted in the span's
``dropped_*`` fields, as OTLP reports it. Every string (keys, names, values, status
messages) first goes through ``runtime.redact`` with tern's known secrets, so no secret
reaches a collector; masking happens before the cut, so a cut never leaves part of a
secret behind.

A span that is not sampled still has a context to propagate (the next hop must see the
same trace, unsampled) but records nothing and is never queued.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Iterable, Mapping

import msgspec

from runtime.redact import MIN_SECRET_LEN, REDACTED, Redactor
from runtime.telemetry.context import RANDOM, SAMPLED, SpanContext
from runtime.telemetry.sampling import Sampler

__all__ = [
    "AttrValue",
    "SpanKind",
    "StatusCode",
    "Event",
    "Span",
    "Limits",
    "Recorder",
    "new_trace_id",
    "new_span_id",
]

AttrValue = str | bool | int | float | tuple  # a tuple holds items of one of the four kinds
_INT64 = (-(1 << 63), (1 << 63) - 1)


class SpanKind(enum.IntEnum):
    """OTLP's numbers (``opentelemetry.proto.trace.v1.Span.SpanKind``)."""

    INTERNAL = 1
    SERVER = 2
    CLIENT = 3
    PRODUCER = 4
    CONSUMER = 5


class StatusCode(enum.IntEnum):
    """OTLP's numbers (``opentelemetry.proto.trace.v1.Status.StatusCode``)."""

    UNSET = 0
    OK = 1
    ERROR = 2


class Event(msgspec.Struct, gc=False):
    time_ns: int
    name: str
    attributes: dict[str, AttrValue] = {}
    dropped_attributes: int = 0


class Span(msgspec.Struct):
    """One operation. ``context`` is what the span hands its children and the next hop."""

    context: SpanContext
    name: str
    kind: SpanKind
    start_ns: int
    parent_id: bytes = b""  # empty for a root span
    parent_remote: bool = False
    end_ns: int = 0
    attributes: dict[str, AttrValue] = {}
    dropped_attributes: int = 0
    events: list[Event] = []
    dropped_events: int = 0
    status: StatusCode = StatusCode.UNSET
    status_message: str = ""

    @property
    def recording(self) -> bool:
        return self.context.sampled


def new_trace_id() -> bytes:
    """16 random bytes, never all zero (all-zero ids are invalid)."""
    while True:
        value = secrets.token_bytes(16)
        if any(value):
            return value


def new_span_id() -> bytes:
    """8 random bytes, never all zero."""
    while True:
        value = secrets.token_bytes(8)
        if any(value):
            return value


class Limits(msgspec.Struct, frozen=True):
    """The bounds of one span (OpenTelemetry's defaults for counts; values are bounded too)."""

    max_attributes: int = 128
    max_event_attributes: int = 32
    max_events: int = 128
    max_value_chars: int = 4096  # a string value, and the sum of an array's strings
    max_array_items: int = 128
    max_key_chars: int = 256  # a longer key is dropped, not cut: a cut key would mean something else
    max_name_chars: int = 256  # span and event names, status messages


class Recorder:
    """Starts, fills and ends spans within ``limits``, masking ``known_secrets``."""

    def __init__(self, sampler: Sampler, limits: Limits = Limits(), known_secrets: Iterable[str] = ()) -> None:
        self.sampler = sampler
        self.limits = limits
        kept = tuple(s for s in known_secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LEN)
        self._redactor = Redactor(kept, mask=REDACTED, min_len=MIN_SECRET_LEN)
        self._longest = max(map(len, kept), default=0)

    def start(self, name: str, kind: SpanKind, now_ns: int, parent: SpanContext | None = None) -> Span:
        """A span under ``parent`` (a new trace without one), sampled as the sampler says."""
        trace_id = parent.trace_id if parent is not None else new_trace_id()
        flags = SAMPLED if self.sampler.sampled(parent, trace_id) else 0
        name = self.text(name, self.limits.max_name_chars)
        if parent is None:
            return Span(SpanContext(trace_id, new_span_id(), flags | RANDOM), name, kind, now_ns)
        context = SpanContext(trace_id, new_span_id(), (parent.flags & ~SAMPLED) | flags, parent.state)
        return Span(context, name, kind, now_ns, parent_id=parent.span_id, parent_remote=parent.remote)

    def set(self, span: Span, key: str, value: object) -> None:
        """Sets one attribute (a later value for the same key replaces the earlier one)."""
        if span.recording:
            span.dropped_attributes += self._put(span.attributes, key, value, self.limits.max_attributes)

    def update(self, span: Span, attributes: Mapping[str, object]) -> None:
        for key, value in attributes.items():
            self.set(span, key, value)

    def event(self, span: Span, name: str, now_ns: int, attributes: Mapping[str, object] = {}) -> None:
        if not span.recording:
            return
        if len(span.events) >= self.limits.max_events:
            span.dropped_events += 1
            return
        event = Event(now_ns, self.text(name, self.limits.max_name_chars))
        for key, value in attributes.items():
            event.dropped_attributes += self._put(event.attributes, key, value, self.limits.max_event_attributes)
        span.events.append(event)

    def end(self, span: Span, now_ns: int, status: StatusCode = StatusCode.UNSET, message: str = "") -> None:
        """Ends the span; a message is kept only with an ERROR status, as OTLP asks."""
        span.end_ns = max(now_ns, span.start_ns)
        span.status = status
        if status is StatusCode.ERROR and message:
            span.status_message = self.text(message, self.limits.max_name_chars)

    def text(self, value: str, limit: int) -> str:
        """``value`` masked, then cut to ``limit`` characters. Only the part that can reach the
        cut is masked: a secret overlapping the first ``limit`` characters lies wholly
        within the first ``limit + longest`` of them."""
        if len(value) < MIN_SECRET_LEN:  # too short to hold a secret (an id, a count)
            return value[:limit]
        return self._redactor.redact(value[: limit + self._longest])[:limit]

    def key(self, key: object) -> str | None:
        """An attribute's key as kept (masked), or None when it is dropped (not a string,
        empty, too long)."""
        if not isinstance(key, str) or not key or len(key) > self.limits.max_key_chars:
            return None
        return self._redactor.redact(key)

    def _put(self, into: dict[str, AttrValue], key: object, value: object, max_count: int) -> int:
        """1 if the attribute was dropped (no room, a bad key or a value of no OTLP kind), else 0."""
        key = self.key(key)
        kept = self.value(value) if key is not None else None
        if kept is None or (key not in into and len(into) >= max_count):
            return 1
        into[key] = kept  # type: ignore[index]
        return 0

    def value(self, value: object) -> AttrValue | None:
        """An attribute's value as kept (strings masked and cut, arrays bounded), or None
        when it is of no OTLP kind."""
        if type(value) is str:  # the most common kind first
            return self.text(value, self.limits.max_value_chars)
        if isinstance(value, (bool, float)):
            return value
        if isinstance(value, int):
            return value if _INT64[0] <= value <= _INT64[1] else None
        if isinstance(value, str):
            return self.text(value, self.limits.max_value_chars)
        if isinstance(value, (list, tuple)):
            return self._array(value)
        return None

    def _array(self, items: list | tuple) -> tuple | None:
        """Items of one kind (bool, int, float or str), at most ``max_array_items`` and
        ``max_value_chars`` characters in all; mixed kinds are no OTLP array: None."""
        kinds = {_kind(v) for v in items[: self.limits.max_array_items]}
        if len(kinds) > 1 or None in kinds:
            return None
        kept: list = []
        room = self.limits.max_value_chars
        for item in items[: self.limits.max_array_items]:
            if isinstance(item, str):
                if room <= 0:
                    break
                item = self.text(item, room)
                room -= len(item)
            elif isinstance(item, int) and not isinstance(item, bool) and not _INT64[0] <= item <= _INT64[1]:
                return None
            kept.append(item)
        return tuple(kept)


def _kind(value: object) -> type | None:
    for kind in (bool, int, float, str):  # bool first: it is an int too
        if isinstance(value, kind):
            return kind
    return None
