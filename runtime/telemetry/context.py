"""W3C Trace Context: the ``traceparent`` and ``tracestate`` values, parsed and formatted.

Both arrive from peers (HTTP headers, A2A requests, MCP ``_meta``), so parsing is strict
and never raises: a value that breaks the grammar is dropped (``None`` or an empty
state) and the caller starts a trace of its own, as the spec says.

- ``traceparent`` version ``00`` is exactly ``00-<32 hex>-<16 hex>-<2 hex>``, lowercase,
  with neither id all zeros. A higher version (``01``-``fe``) is read the way the spec
  asks: the same four fields, then the end or a dash before fields we do not know; only
  the sampled bit of its flags is kept. Version ``ff`` is invalid. tern always sends
  version ``00``, with only the flags it knows (sampled, random).
- ``tracestate``: at most 32 members of ``key=value`` in the spec's grammar, keys unique.
  Any invalid member, a duplicate key or more than 32 members drops the whole value (a
  partial list would misreport what the sender meant); a value over 512 characters is
  cut the spec's way (members over 128 characters first, then from the right).
"""

from __future__ import annotations

import re

import msgspec

__all__ = [
    "SAMPLED",
    "RANDOM",
    "MAX_STATE_MEMBERS",
    "MAX_STATE_CHARS",
    "SpanContext",
    "parse_traceparent",
    "parse_tracestate",
    "extract",
    "format_traceparent",
    "format_tracestate",
]

SAMPLED = 0x01
RANDOM = 0x02  # Trace Context level 2: the trace id's right 7 bytes are random
_KNOWN_FLAGS = SAMPLED | RANDOM
MAX_STATE_MEMBERS = 32
MAX_STATE_CHARS = 512  # what the spec asks every vendor to propagate
_STATE_LONG_MEMBER = 128  # cut first when over MAX_STATE_CHARS
MAX_PARENT_CHARS = 256  # a future version may add fields; a longer value is not read
MAX_STATE_INPUT_CHARS = 32 * 515  # 32 members at the grammar's longest, with separators

_PARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.ASCII | re.DOTALL)
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
_KEY_CHARS = r"[a-z0-9_\-*/]"
_KEY = re.compile(rf"[a-z]{_KEY_CHARS}{{0,255}}|[a-z0-9]{_KEY_CHARS}{{0,240}}@[a-z]{_KEY_CHARS}{{0,13}}", re.ASCII)
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]", re.ASCII)


class SpanContext(msgspec.Struct, frozen=True, gc=False):
    """What crosses a process boundary: the trace, the span, its flags and the vendors' state."""

    trace_id: bytes  # 16 bytes, not all zero
    span_id: bytes  # 8 bytes, not all zero
    flags: int = 0
    state: tuple[tuple[str, str], ...] = ()
    remote: bool = False  # parsed from a peer rather than made here

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)


def parse_traceparent(value: object) -> SpanContext | None:
    """The context a ``traceparent`` value names, or None when it breaks the spec."""
    if not isinstance(value, str) or len(value) > MAX_PARENT_CHARS:
        return None
    match = _PARENT.fullmatch(value)
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    trace_id, span_id = bytes.fromhex(trace_hex), bytes.fromhex(span_hex)
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    flags = int(flags_hex, 16) & (_KNOWN_FLAGS if version == "00" else SAMPLED)
    return SpanContext(trace_id, span_id, flags, remote=True)


def parse_tracestate(value: object) -> tuple[tuple[str, str], ...]:
    """The members of a ``tracestate`` value (several headers joined with ``,``), or ``()``
    when it is invalid in any part."""
    if not isinstance(value, str) or len(value) > MAX_STATE_INPUT_CHARS:
        return ()
    members: list[tuple[str, str]] = []
    seen: set[str] = set()
    for item in value.split(","):
        item = item.strip(" \t")
        if not item:
            continue  # empty members are allowed
        key, sep, val = item.partition("=")
        if not sep or key in seen or len(members) == MAX_STATE_MEMBERS:
            return ()
        if _KEY.fullmatch(key) is None or _VALUE.fullmatch(val) is None:
            return ()
        seen.add(key)
        members.append((key, val))
    return _bounded(members)


def _bounded(members: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """At most MAX_STATE_CHARS once formatted: long members go first, then from the right."""

    def size(items: list[tuple[str, str]]) -> int:
        return sum(len(k) + 1 + len(v) for k, v in items) + max(len(items) - 1, 0)

    if size(members) > MAX_STATE_CHARS:
        members = [(k, v) for k, v in members if len(k) + 1 + len(v) <= _STATE_LONG_MEMBER]
        while size(members) > MAX_STATE_CHARS:
            members.pop()
    return tuple(members)


def extract(traceparent: object, tracestate: object = None) -> SpanContext | None:
    """A remote parent from the two values (a ``tracestate`` is read only beside a valid
    ``traceparent``, as the spec says)."""
    context = parse_traceparent(traceparent)
    if context is None:
        return None
    state = parse_tracestate(tracestate) if tracestate is not None else ()
    return msgspec.structs.replace(context, state=state) if state else context


def format_traceparent(context: SpanContext) -> str:
    return f"00-{context.trace_id.hex()}-{context.span_id.hex()}-{context.flags & _KNOWN_FLAGS:02x}"


def format_tracestate(state: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{key}={value}" for key, value in state)
