"""The trio shell of OpenTelemetry export: builds the sans-IO core from ``[telemetry]``,
installs the tracer, and POSTs batches to the collector from a task of its own.

Callers only keep an ended span raw (``runtime.tracing``); this task waits for a full
batch or ``DELAY_SECS``, then masks, bounds and encodes the spans a chunk at a time and
sends them through the outbound client (SSRF guard, timeouts), one request in flight.
A 429/502/503/504 is retried once after its ``Retry-After`` (at most
``MAX_RETRY_AFTER_SECS``); anything else, a timeout or a connection error loses the
batch, counted with the drops. A dead or slow collector so costs dropped spans, never a
caller's time or memory. On shutdown what is queued gets ``FLUSH_SECS`` to leave.

Imported only when ``otlp_endpoint`` is set.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import trio

from runtime import __version__, tracing
from runtime.config.schema import TelemetryConfig
from runtime.log import get_logger, register_secret
from runtime.net.guard import AddressPolicy
from runtime.net.headers import expand_headers
from runtime.net.outbound import make_client
from runtime.wire.retry import retry_after
from runtime.telemetry import semconv
from runtime.telemetry.batch import Batch, BatchQueue
from runtime.telemetry.otlp import CONTENT_TYPE, RETRYABLE_STATUSES, TRACES_PATH, OtlpEncoder
from runtime.telemetry.sampling import Sampler

__all__ = ["Exporter", "traces_url"]

log = get_logger("telemetry")

DELAY_SECS = 5.0  # a batch that is not full leaves after this long
FLUSH_SECS = 3.0
MAX_RETRY_AFTER_SECS = 5.0
MAX_ANSWER_BYTES = 64 << 10
CHUNK = 32  # spans encoded between two checkpoints: about 1 ms


def traces_url(endpoint: str) -> str:
    """The collector's traces URL: ``endpoint`` as given when it names the path, else
    with ``/v1/traces`` added (as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is read)."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


class Exporter:
    """One process's export: ``await nursery.start(exporter.run)`` installs the tracer and
    sends until cancelled, then flushes and uninstalls."""

    def __init__(self, config: TelemetryConfig, *, delay_secs: float = DELAY_SECS) -> None:
        self.url = traces_url(config.otlp_endpoint)
        self.headers = expand_headers(config.headers, "telemetry")
        for value in self.headers.values():  # a collector's token, literal or not, is a secret
            register_secret(value)
        self.headers["Content-Type"] = CONTENT_TYPE
        self.timeout = config.export_timeout_secs
        self.delay = delay_secs
        encoder = OtlpEncoder({semconv.SERVICE_NAME: config.service_name, semconv.SERVICE_VERSION: __version__,
                               semconv.SERVICE_INSTANCE_ID: f"{os.uname().nodename}:{os.getpid()}"},
                              semconv.SCOPE_NAME, __version__)
        self.queue = BatchQueue(encoder, max_spans=config.max_queue_spans, max_bytes=config.max_queue_bytes,
                                batch_spans=config.batch_spans, batch_bytes=min(1 << 20, config.max_queue_bytes))
        self.tracer = tracing.Tracer(Sampler(config.sampling_ratio), self.queue, max_spans=config.max_queue_spans,
                                     max_bytes=config.max_queue_bytes, batch_spans=config.batch_spans,
                                     wake=self._wake)
        self.exported = 0  # spans the collector took
        self.failed = 0  # requests that lost their batch
        self._ready = trio.Event()
        self._client: httpx.AsyncClient | None = None

    def _wake(self) -> None:
        self._ready.set()

    @property
    def dropped(self) -> int:
        """Spans never sent: no room in a queue, or their batch lost."""
        return self.tracer.dropped + self.queue.dropped

    def samples(self) -> list[tuple[tuple[str, ...], float]]:
        """For ``/metrics``: spans by outcome (exported, dropped)."""
        return [(("exported",), float(self.exported)), (("dropped",), float(self.dropped))]

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        tracing.install(self.tracer)
        try:
            async with make_client(AddressPolicy(), timeout=self.timeout) as client:
                self._client = client
                task_status.started()
                try:
                    while True:
                        if len(self.tracer.raw) < self.queue.batch_spans:  # else a wake came and went
                            with trio.move_on_after(self.delay):
                                await self._ready.wait()
                        self._ready = trio.Event()
                        await self._export()
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(FLUSH_SECS):
                        await self._export(retry=False)
        finally:
            tracing.uninstall()

    async def _export(self, *, retry: bool = True) -> None:
        """The spans ended before this started (not those ending meanwhile: a steady stream
        of calls would keep it running beside them), masked, bounded and encoded ``CHUNK``
        at a time with a checkpoint between chunks, and sent a full batch at a time, then
        the rest. Woken once a batch is full, or after the delay, so this work comes in
        bursts, between which calls pay nothing for it."""
        pending = len(self.tracer.raw)
        while pending > 0:
            done = self.tracer.drain(min(CHUNK, pending))
            if not done:
                break
            pending -= done
            if self.queue.ready:
                await self._send(self.queue.take(), retry=retry)  # type: ignore[arg-type]
            await trio.lowlevel.checkpoint()
        while (batch := self.queue.take()) is not None:
            await self._send(batch, retry=retry)

    async def _send(self, batch: Batch, *, retry: bool = True) -> None:
        """One request (and at most one retry); a batch not taken is counted as lost."""
        assert self._client is not None
        for attempt in range(2 if retry else 1):
            try:
                with trio.fail_after(self.timeout):  # the whole exchange
                    async with self._client.stream("POST", self.url, content=batch.body,
                                                   headers=self.headers) as response:
                        status, header = response.status_code, response.headers.get("retry-after")
                        read = 0  # a short answer is read to its end, so the connection is kept
                        async for chunk in response.aiter_raw():
                            read += len(chunk)
                            if read > MAX_ANSWER_BYTES:
                                break  # a longer one is not: the connection closes with it
            except (httpx.HTTPError, trio.TooSlowError) as exc:
                self._lose(batch, type(exc).__name__)
                return
            if 200 <= status < 300:
                self.exported += batch.spans
                return
            if status not in RETRYABLE_STATUSES or attempt:
                break
            await trio.sleep(retry_after(header, default=1.0, most=MAX_RETRY_AFTER_SECS))
        self._lose(batch, f"HTTP {status}")

    def _lose(self, batch: Batch, why: str) -> None:
        self.failed += 1
        self.queue.lost(batch)
        if self.failed == 1 or self.failed % 100 == 0:  # a down collector is one line now and then, not a flood
            log.warning("traces: %d spans not exported to %s (%s; %d requests failed so far)",
                        batch.spans, self.url, why, self.failed)

