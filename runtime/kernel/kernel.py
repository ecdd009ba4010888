"""The kernel as one object: boot it in a nursery, then use its registry.

Boot never waits for MCP servers: they connect in the background, and their tools
appear in the registry as each becomes ready.
"""

from __future__ import annotations

from typing import Any

import trio

from runtime.config import Config
from runtime.kernel.builtins import register_builtins
from runtime.kernel.registry import ToolRegistry
from runtime.mcp.supervisor import McpSupervisor

__all__ = ["Kernel"]


class Kernel:
    def __init__(self, config: Config) -> None:
        from runtime.net.guard import AddressPolicy

        self.config = config
        self.mcp = McpSupervisor(config.mcp_servers, policy=AddressPolicy.from_security(config.security))
        self.registry = ToolRegistry(self.mcp)
        register_builtins(self.registry)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; ``task_status.started()`` once booted (servers still connecting)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.mcp.run)
            task_status.started()

    async def aclose(self) -> None:
        await self.mcp.aclose()
