"""The tracing API the rest of tern calls: ``with tracing.span(name, kind, attrs) as s:``.

Off (no ``[telemetry] otlp_endpoint``) the module-level tracer is None: ``span`` returns
one shared object whose methods do nothing, ``extract`` and ``inject`` return at once,
and ``runtime.telemetry`` is never imported, so a call pays a function call and a
global read. On, the exporter shell (``runtime.net.telemetry_export``) installs a
``Tracer``: spans are started, bounded and masked by the sans-IO ``Recorder``, and
queued (encoded) when they end; the shell drains the queue.

The current span's context lives in a ``ContextVar`` (trio copies the context into each
task it starts), so a tool call, an MCP request or an A2A call finds its parent without
new parameters, and log lines can carry its trace id.

Trace context from peers is read, and sent on, only when telemetry is on: off costs
nothing, and a tern that records nothing is not in the trace anyway.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

from runtime import log

__all__ = ["INTERNAL", "SERVER", "CLIENT", "span", "enabled", "extract", "inject", "meta", "trace_id", "install",
           "uninstall", "Tracer"]

INTERNAL, SERVER, CLIENT = 1, 2, 3  # OTLP's SpanKind numbers
_current: ContextVar[Any] = ContextVar("tern_span_context", default=None)  # a telemetry SpanContext
_tracer: Tracer | None = None


class _Noop:
    """What ``span`` gives when telemetry is off (or a span is not recorded): does nothing."""

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
         parent: Any = None) -> Any:
    """A context manager for one span, the current one inside it. ``parent``: a remote
    context from ``extract`` (else the current span's). An exception leaving the block
    marks the span as an error (``error.type`` its class name)."""
    tracer = _tracer
    if tracer is None:
        return _NOOP
    return _Active(tracer, name, kind, attributes, parent)


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
    """Starts and ends spans with the sans-IO core; ``queue.put`` encodes an ended span.
    ``wake`` (the shell's) is called when a full batch waits. The Recorder is rebuilt
    when a secret was registered since, so a new secret is masked at once."""

    def __init__(self, sampler: Any, queue: Any, wake: Any = None) -> None:
        from runtime.telemetry import context, spans

        self._context = context
        self._spans = spans
        self.sampler = sampler
        self.queue = queue
        self.wake = wake
        self._version = -1
        self.recorder = self._recorder()

    def _recorder(self) -> Any:
        self._version = log.secrets_version()
        return self._spans.Recorder(self.sampler, known_secrets=log.registered_secrets())

    def start(self, name: str, kind: int, parent: Any) -> Any:
        if self._version != log.secrets_version():
            self.recorder = self._recorder()
        return self.recorder.start(name, self._spans.SpanKind(kind), time.time_ns(), parent)

    def end(self, span: Any, error: str = "") -> None:
        status = self._spans.StatusCode
        self.recorder.end(span, time.time_ns(), status.ERROR if error else status.UNSET, error)
        if self.queue.put(span) and self.wake is not None and self.queue.ready:
            self.wake()

    def extract(self, traceparent: object, tracestate: object) -> Any:
        return self._context.extract(traceparent, tracestate)

    def carrier(self, context: Any) -> dict[str, str]:
        out = {"traceparent": self._context.format_traceparent(context)}
        if context.state:
            out["tracestate"] = self._context.format_tracestate(context.state)
        return out


class _Active:
    __slots__ = ("_tracer", "_name", "_kind", "_attributes", "_parent", "_span", "_token", "_failed")
    recording = True

    def __init__(self, tracer: Tracer, name: str, kind: int, attributes: dict[str, object] | None,
                 parent: Any) -> None:
        self._tracer, self._name, self._kind, self._attributes, self._parent = tracer, name, kind, attributes, parent
        self._failed = ""

    def __enter__(self) -> _Active:
        tracer = self._tracer
        parent = self._parent if self._parent is not None else _current.get()
        self._span = span = tracer.start(self._name, self._kind, parent)
        if self._attributes and span.recording:
            tracer.recorder.update(span, self._attributes)
        self._token = _current.set(span.context)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            _current.reset(self._token)
        except ValueError:  # left in another context (an async generator's): nothing to restore
            pass
        if exc_type is not None:
            self.error(exc_type.__name__, str(exc) or exc_type.__name__)
        self._tracer.end(self._span, self._failed)

    def set(self, key: str, value: object) -> None:
        if self._span.recording:
            self._tracer.recorder.set(self._span, key, value)

    def update(self, attributes: dict[str, object]) -> None:
        if self._span.recording:
            self._tracer.recorder.update(self._span, attributes)

    def rename(self, name: str) -> None:
        """A better name learnt after the start (an HTTP request's route)."""
        if self._span.recording:
            self._span.name = self._tracer.recorder.text(name, self._tracer.recorder.limits.max_name_chars)

    def error(self, kind: str, message: str = "") -> None:
        """Marks the span failed (``error.type`` = ``kind``) when it ends: an exception, or a
        failure that is an answer (a tool's error result, an HTTP 500)."""
        self.set("error.type", kind)
        self._failed = message or kind


def install(tracer: Tracer) -> None:
    global _tracer
    _tracer = tracer
    log.set_trace_source(trace_id)


def uninstall() -> None:
    global _tracer
    _tracer = None
    log.set_trace_source(None)
