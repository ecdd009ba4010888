"""Which traces are recorded: parent-based, with a ratio for the traces tern starts.

A span with a parent follows it (a sampled parent's children are sampled, an unsampled
parent's are not), so one trace is recorded whole or not at all across terns. A root
span is sampled when its trace id falls under the ratio; the test reads the id's right
8 bytes, so every process with the same ratio decides the same for the same trace.
"""

from __future__ import annotations

from runtime.telemetry.context import SpanContext

__all__ = ["Sampler"]

_SPACE = 1 << 64


class Sampler:
    """``Sampler(0.25).sampled(parent, trace_id)``: the parent's word, else the ratio's."""

    def __init__(self, ratio: float) -> None:
        if not 0.0 <= ratio <= 1.0:  # config checks this first; a bug otherwise
            raise ValueError(f"a sampling ratio is between 0 and 1, not {ratio!r}")
        self.ratio = ratio
        self._bound = round(ratio * _SPACE)

    def sampled(self, parent: SpanContext | None, trace_id: bytes) -> bool:
        if parent is not None:
            return parent.sampled
        return int.from_bytes(trace_id[8:16], "big") < self._bound
