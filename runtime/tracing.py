"""The tracing API the rest of tern calls: ``with tracing.span(name, kind, attrs) as s:``.

Off (no ``[telemetry] otlp_endpoint``) the module-level tracer is None: ``span`` returns
one shared object whose methods do nothing, ``extract`` and ``inject`` return at once,
and ``runtime.telemetry`` is never imported, so a call pays a function call and a
global read. On, the exporter shell (``runtime.net.telemetry_export``) installs a
``Tracer``: an ended span is kept raw in a bounded queue, and the shell's task later
bounds, masks and encodes it (the sans-IO ``RawEncoder``), off the call path.

The current span's context lives in a ``ContextVar`` (trio copies the context into each
task it starts), so a tool call, an MCP request or an A2A call finds its parent without
new parameters, and log lines can carry its trace id.

Trace context from peers is read, and sent on, only when telemetry is on: off costs
nothing, and a tern that records nothing is not in the trace anyway.
"""

from __future__ import annotations

from contextvars import ContextVar
from random import getrandbits as _getrandbits
from time import time_ns as _time_ns
from typing import Any, ClassVar

import msgspec

from runtime import log

__all__ = ["INTERNAL", "SERVER", "CLIENT", "span", "enabled", "extract", "inject", "meta", "trace_id", "install",
           "uninstall", "Tracer"]

INTERNAL, SERVER, CLIENT = 1, 2, 3  # OTLP's SpanKind numbers
_current: ContextVar[Any] = ContextVar("tern_span_context", default=None)  # a telemetry SpanContext
_tracer: Tracer | None = None


class _Noop:
    """What ``span`` gives when telemetry is off: one shared object that does nothing."""

    __slots__ = ()
    recording = False

    def __enter__(self) -> _Noop:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: object) -> None:
        pass

    def update(self, attributes: dict[str, object]) -> None:
        pass

    def error(self, kind: str, message: str = "") -> None:
        pass

    def rename(self, name: str) -> None:
        pass


_NOOP = _Noop()


def span(name: str, kind: int = INTERNAL, attributes: dict[str, object] | None = None, *,
         parent: Any = None, covers: str | None = None, merge: str | None = None) -> Any:
    """A context manager for one span, the current one inside it. ``parent``: a remote
    context from ``extract`` (else the current span's). An exception leaving the block
    marks the span as an error (``error.type`` its class name).

    ``covers``: the operation of a span this one stands for, one level down (the MCP
    server's ``tools/call X`` covers the pipeline's ``execute_tool``: the conventions make
    them one span). A span opened with ``merge=`` an operation the current span covers
    starts nothing: its attributes go to the current span (where it has none of the same
    key: the covering span names things as its caller did), and ``as`` gives that span."""
    tracer = _tracer
    if tracer is None:
        return _NOOP
    if merge is not None:
        current = _current.get()
        if type(current) is _Active and current.covers == merge:
            current.covers = None  # once: a tool called inside it is a span of its own
            return _Merged(current, attributes)
    return _Active(tracer, name, kind, attributes if attributes is not None else {}, parent, covers)


def enabled() -> bool:
    """Whether traces are on: a caller checks it before gathering what only a span needs."""
    return _tracer is not None


def extract(traceparent: object, tracestate: object = None) -> Any:
    """A peer's trace context (a ``SpanContext``), or None (off, absent or invalid)."""
    if _tracer is None or traceparent is None:
        return None
    return _tracer.extract(traceparent, tracestate)


def inject(headers: dict[str, str]) -> None:
    """Adds ``traceparent`` (and ``tracestate``) for the current span to ``headers``."""
    if _tracer is not None:
        context = _current.get()
        if context is not None:
            headers.update(_tracer.carrier(context))


def meta() -> dict[str, str] | None:
    """The current span's context as MCP ``params._meta`` keys, or None."""
    if _tracer is None:
        return None
    context = _current.get()
    return None if context is None else _tracer.carrier(context)


def trace_id() -> str:
    """The current trace id in hex, or "" (for log lines)."""
    context = _current.get()
    return "" if context is None else context.trace_id.hex()


class Tracer:
    """Spans on the call path cost a few microseconds: a span draws its ids (Python's
    ``random``, as OpenTelemetry's SDK does: ids must be unique, not secret), a root asks
    the sampler; an ended, sampled span (the ``_Active`` itself: it is its own context
    and record) waits in ``raw``, a deque bounded in spans and in an estimate of its
    bytes, and is dropped, counted, past either (``_Active.__exit__``, inline: it runs on
    every call). ``drain`` does the rest off the call path, from the exporter's task: the
    sans-IO ``RawEncoder`` bounds, masks and encodes (its cache rebuilt when a secret was
    registered since) into ``queue``. ``wake`` (the shell's) is called when a batch waits."""

    _OVERHEAD = 256  # bytes of a raw span besides its strings, about

    def __init__(self, sampler: Any, queue: Any, *, max_spans: int, max_bytes: int, batch_spans: int,
                 wake: Any = None) -> None:
        from collections import deque

        from runtime.telemetry import context, raw, spans

        self._context = context
        self._spans = spans
        self._raw = raw
        self.sampler = sampler
        self.queue = queue
        self.max_spans, self.max_bytes, self.batch_spans = max_spans, max_bytes, batch_spans
        self.wake = wake
        self.raw: deque[_Active] = deque()
        self.raw_bytes = 0
        self.dropped = 0  # ended spans with no room in the raw queue
        self._version = -1
        self._encoder: Any = None

    def drain(self, limit: int) -> int:
        """Bounds, masks and encodes up to ``limit`` raw spans into ``queue``; how many. The
        encoder (its cache of masked pieces) is rebuilt when a secret was registered since."""
        if self._version != log.secrets_version():
            self._version = log.secrets_version()
            recorder = self._spans.Recorder(self.sampler, known_secrets=log.registered_secrets())
            self._encoder = self._raw.RawEncoder(recorder, self.queue.encoder)
        encode, put, raw = self._encoder.encode, self.queue.put_encoded, self.raw
        done = 0
        while raw and done < limit:
            s = raw.popleft()
            self.raw_bytes -= s.size
            put(encode(s.name, s.kind, s, s.parent, s.start, s.end, s.attributes, s.failed))
            done += 1
        return done

    def extract(self, traceparent: object, tracestate: object) -> Any:
        return self._context.extract(traceparent, tracestate)

    def carrier(self, context: Any) -> dict[str, str]:
        out = {"traceparent": self._context.format_traceparent(context)}
        if context.state:
            out["tracestate"] = self._context.format_tracestate(context.state)
        return out


_SAMPLED, _RANDOM = 0x01, 0x02  # the W3C flags (runtime.telemetry.context's, not imported while off)


class _Active(msgspec.Struct, gc=False):
    """A span in progress, and its context for the spans and peers under it (the same
    fields as a ``SpanContext``: ``trace_id``, ``span_id``, ``flags``, ``state``,
    ``remote``): one object a span, kept plainly until the exporter encodes it. Not
    tracked by the garbage collector (it holds no cycle: a span refers to its parent,
    never to a child), so the spans waiting for the exporter make no collections run."""

    tracer: Any
    name: str
    kind: int
    attributes: Any  # the caller's new dict, kept
    parent: Any
    covers: Any
    trace_id: bytes = b""
    span_id: bytes = b""
    flags: int = 0
    state: Any = ()
    start: int = 0
    end: int = 0
    failed: str = ""
    size: int = 0
    recording: int = 0
    token: Any = None
    remote: ClassVar[bool] = False  # made here, not parsed from a peer

    def __enter__(self) -> _Active:
        parent = self.parent
        if parent is None:
            parent = self.parent = _current.get()
        if parent is None:  # a root: a new trace, the sampler decides (an id of 0 is invalid: ``or 1``)
            self.trace_id = trace_id = (_getrandbits(128) or 1).to_bytes(16, "big")
            self.flags = _RANDOM | (_SAMPLED if self.tracer.sampler.sampled(None, trace_id) else 0)
            self.state = ()
        else:  # a child follows its parent (parent-based sampling)
            self.trace_id, self.flags, self.state = parent.trace_id, parent.flags, parent.state
        self.span_id = (_getrandbits(64) or 1).to_bytes(8, "big")
        self.recording = self.flags & _SAMPLED
        self.token = _current.set(self)
        self.start = _time_ns()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.end = _time_ns()
        try:
            _current.reset(self.token)
        except ValueError:  # left in another context (an async generator's): nothing to restore
            pass
        self.token = None
        if not self.recording:
            return
        if exc_type is not None:
            self.error(exc_type.__name__, str(exc) or exc_type.__name__)
        attributes = self.attributes
        size = Tracer._OVERHEAD + len(self.name) + len(self.failed) + 48 * len(attributes)  # keys are short
        try:  # the values' characters: most spans hold only strings, counted in C
            size += len("".join(attributes.values()))
        except TypeError:  # a number or an array among them: strings one by one
            for value in attributes.values():
                if type(value) is str:
                    size += len(value)
        tracer = self.tracer
        raw = tracer.raw
        if len(raw) >= tracer.max_spans or tracer.raw_bytes + size > tracer.max_bytes:
            tracer.dropped += 1
            return
        self.size = size
        raw.append(self)
        tracer.raw_bytes += size
        if len(raw) == tracer.batch_spans and tracer.wake is not None:
            tracer.wake()

    def set(self, key: str, value: object) -> None:
        if self.recording:
            self.attributes[key] = value

    def update(self, attributes: dict[str, object]) -> None:
        if self.recording:
            self.attributes.update(attributes)

    def rename(self, name: str) -> None:
        """A better name learnt after the start (an HTTP request's route)."""
        self.name = name

    def error(self, kind: str, message: str = "") -> None:
        """Marks the span failed (``error.type`` = ``kind``) when it ends: an exception, or a
        failure that is an answer (a tool's error result, an HTTP 500)."""
        self.set("error.type", kind)
        self.failed = message or kind


class _Merged:
    """``span(..., merge=...)`` inside the span that covers it: adds the attributes that
    span lacks and gives it to ``as``; starts, ends and records nothing of its own (an
    exception leaving the block reaches the covering span's own exit)."""

    __slots__ = ("_span", "_attributes")

    def __init__(self, span: _Active, attributes: dict[str, object] | None) -> None:
        self._span, self._attributes = span, attributes

    def __enter__(self) -> _Active:
        span = self._span
        if self._attributes and span.recording:
            span.attributes = {**self._attributes, **span.attributes}  # the covering span's own win
        return span

    def __exit__(self, *exc: object) -> None:
        return None


def install(tracer: Tracer) -> None:
    global _tracer
    _tracer = tracer
    log.set_trace_source(trace_id)


def uninstall() -> None:
    global _tracer
    _tracer = None
    log.set_trace_source(None)
