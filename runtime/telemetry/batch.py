"""The bounded queue between ended spans and the exporter: a slow or dead collector costs
dropped spans, counted, never memory or a caller's time.

``put`` encodes the span at once (so the queue holds bytes and bounds them exactly) and
drops it, counted, when the queue is at ``max_spans`` or ``max_bytes``, or when the
span alone is larger than a request may be. The exporter (a trio task) waits until
``ready`` or its delay passes, then ``take`` hands it the next request body: the oldest
spans, at most ``batch_spans`` and ``batch_bytes``. A batch the collector refused, or
that could not be sent, is given back to ``lost`` to be counted with the drops.
"""

from __future__ import annotations

from collections import deque

import msgspec

from runtime.telemetry.otlp import OtlpEncoder
from runtime.telemetry.spans import Span

__all__ = ["Batch", "BatchQueue"]


class Batch(msgspec.Struct, frozen=True, gc=False):
    body: bytes  # an ExportTraceServiceRequest
    spans: int


class BatchQueue:
    def __init__(self, encoder: OtlpEncoder, *, max_spans: int = 2048, max_bytes: int = 4 << 20,
                 batch_spans: int = 512, batch_bytes: int = 1 << 20) -> None:
        self.encoder = encoder
        self.max_spans, self.max_bytes = max_spans, max_bytes
        self.batch_spans, self.batch_bytes = batch_spans, batch_bytes
        self._queue: deque[bytes] = deque()
        self.bytes = 0
        self.dropped = 0  # spans never sent: no room, too large, or their batch lost

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def ready(self) -> bool:
        """A full batch is waiting: the exporter need not wait for its delay."""
        return len(self._queue) >= self.batch_spans or self.bytes >= self.batch_bytes

    def put(self, span: Span) -> bool:
        """Queues an ended span. False when it is not queued: unsampled (nothing to send) or
        dropped (counted)."""
        return span.recording and self.put_encoded(self.encoder.span(span))

    def put_encoded(self, encoded: bytes) -> bool:
        """Queues a span already encoded (``OtlpEncoder.span``, ``RawEncoder.encode``); False
        when dropped (counted)."""
        size = len(encoded)
        if len(self._queue) >= self.max_spans or self.bytes + size > self.max_bytes or size > self.batch_bytes:
            self.dropped += 1
            return False
        self._queue.append(encoded)
        self.bytes += size
        return True

    def take(self) -> Batch | None:
        """The next request: the oldest spans within the batch bounds, or None when empty."""
        if not self._queue:
            return None
        if len(self._queue) <= self.batch_spans and self.bytes <= self.batch_bytes:  # all of it: no loop
            taken = list(self._queue)
            self._queue.clear()
            self.bytes = 0
            return Batch(self.encoder.request(taken), len(taken))
        taken = []
        size = 0
        while self._queue and len(taken) < self.batch_spans and size + len(self._queue[0]) <= self.batch_bytes:
            encoded = self._queue.popleft()
            size += len(encoded)
            taken.append(encoded)
        self.bytes -= size
        return Batch(self.encoder.request(taken), len(taken))

    def lost(self, batch: Batch) -> None:
        """Counts a batch that will not be sent (refused, timed out, collector down)."""
        self.dropped += batch.spans
