"""OpenTelemetry traces, sans-IO: W3C Trace Context (``context``), the span model and its
bounds (``spans``), the sampler (``sampling``), the OTLP/HTTP protobuf encoder written by
hand so tern needs no protobuf (``otlp``), the bounded batch queue a trio shell drains
(``batch``) and the semantic-convention names (``semconv``). See docs/tracing.md.

Nothing here does I/O or reads a clock: callers pass the time in nanoseconds.
"""
