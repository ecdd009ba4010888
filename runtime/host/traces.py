"""Traces for one process's life: ``async with traces(config) as exporter:`` exports while
the body runs (``[telemetry] otlp_endpoint`` set) and flushes after it, so the spans of
the body's own shutdown still leave. Off, it imports nothing and yields None."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from runtime.config.schema import Config

__all__ = ["traces"]


@asynccontextmanager
async def traces(config: Config) -> AsyncIterator[Any]:
    if not config.telemetry.otlp_endpoint:
        yield None
        return
    from runtime.net.telemetry_export import Exporter

    exporter = Exporter(config.telemetry)
    async with trio.open_nursery() as nursery:
        await nursery.start(exporter.run)
        try:
            yield exporter
        finally:
            nursery.cancel_scope.cancel()
