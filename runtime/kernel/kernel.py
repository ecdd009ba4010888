"""The kernel as one object: boot it in a nursery, then use its registry.

Boot never waits for MCP servers: they connect in the background, and their tools
appear in the registry as each becomes ready. State changes go to the event bus
(``GET /api/events``, ``tern events``).
"""

from __future__ import annotations

import time
from typing import Any

import trio

from runtime.config import Config
from runtime.kernel.builtins import register_builtins
from runtime.kernel.events import EventBus
from runtime.kernel.registry import ToolRegistry, ToolResult
from runtime.mcp.supervisor import McpSupervisor

__all__ = ["Kernel"]


class Kernel:
    def __init__(self, config: Config) -> None:
        from runtime.net.guard import AddressPolicy

        self.config = config
        self.events = EventBus()
        self.started = time.time()
        self.mcp = McpSupervisor(config.mcp_servers, policy=AddressPolicy.from_security(config.security),
                                 on_event=self.events.publish)
        self.registry = ToolRegistry(self.mcp)
        register_builtins(self.registry)
        self.tool_observers: list[Any] = []  # callables (tool, outcome, seconds), e.g. metrics

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; ``task_status.started()`` once booted (servers still connecting)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.mcp.run)
            task_status.started()

    async def call_tool(self, name: str, arguments: Any = None, *, timeout_secs: Any = None,
                        caller: str = "") -> ToolResult:
        """A tool call with its event and metrics (the guarded pipeline wraps this later)."""
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await self.registry.call(name, arguments, timeout_secs=timeout_secs)
            outcome = "tool_error" if result.is_error else "ok"
            return result
        finally:
            seconds = time.perf_counter() - started
            for observe in self.tool_observers:
                observe(name, outcome, seconds)
            self.events.publish("tool.call", {"tool": name, "outcome": outcome, "ms": round(seconds * 1000, 3),
                                              "caller": caller})

    async def aclose(self) -> None:
        await self.mcp.aclose()
