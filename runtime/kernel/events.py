"""The kernel's event bus: MCP server state changes, tool calls, task transitions.

Publishing never blocks and never fails: each subscriber has a bounded queue, and a
subscriber too slow to keep up loses events (counted, and told so in the next event
it gets) rather than slowing the kernel down or growing memory.
"""

from __future__ import annotations

import time
from typing import Any
from collections.abc import Iterable

import trio

__all__ = ["EventBus", "Subscription"]

QUEUE_EVENTS = 256


class Subscription:
    def __init__(self, bus: EventBus, size: int, kinds: frozenset[str] | None = None) -> None:
        self._bus = bus
        self.kinds = kinds  # None: every event
        self._send, self.receive = trio.open_memory_channel[dict[str, Any]](size)
        self.dropped = 0

    def offer(self, event: dict[str, Any]) -> None:
        if self.dropped:
            event = {**event, "dropped_before": self.dropped}
        try:
            self._send.send_nowait(event)
            self.dropped = 0
        except trio.WouldBlock:
            self.dropped += 1

    async def next(self) -> dict[str, Any]:
        return await self.receive.receive()

    def close(self) -> None:
        self._bus._subscribers.discard(self)
        self._send.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class EventBus:
    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()
        self.published = 0

    def publish(self, kind: str, data: dict[str, Any] | None = None) -> None:
        """Send ``{"type": kind, "time": ..., **data}`` to every subscriber (sync, never blocks)."""
        self.published += 1
        if not self._subscribers:
            return
        event = {"type": kind, "time": time.time(), **(data or {})}
        for subscription in list(self._subscribers):
            if subscription.kinds is None or kind in subscription.kinds:
                subscription.offer(event)

    @property
    def listening(self) -> bool:
        """Whether anyone subscribes: a publisher whose event costs work to build (the
        tool pipeline's, per call) skips it while nobody would read it."""
        return bool(self._subscribers)

    def subscribe(self, size: int = QUEUE_EVENTS, *, kinds: Iterable[str] | None = None) -> Subscription:
        """A bounded queue of events; with ``kinds``, of those types only (a watcher that
        wants MCP server changes is not woken by every tool call)."""
        subscription = Subscription(self, size, frozenset(kinds) if kinds is not None else None)
        self._subscribers.add(subscription)
        return subscription
