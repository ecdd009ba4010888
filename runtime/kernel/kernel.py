"""The kernel as one object: boot it in a nursery, then use its registry.

Boot never waits for MCP servers: they connect in the background, and their tools
appear in the registry as each becomes ready. State changes go to the event bus
(``GET /api/events``, ``tern events``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import trio

from runtime.config import Config
from runtime.kernel.builtins import register_builtins
from runtime.kernel.agents import Agents
from runtime.kernel.audit import AuditLog
from runtime.kernel.conversations import Conversations
from runtime.kernel.events import EventBus
from runtime.kernel.pipeline import ToolPipeline
from runtime.kernel.registry import ToolRegistry
from runtime.ports import ToolResult
from runtime.kernel.tools_agents import register_agent_tools
from runtime.mcp.client.supervisor import McpSupervisor

__all__ = ["Kernel"]


class Kernel:
    def __init__(self, config: Config) -> None:
        from runtime.net.guard import AddressPolicy

        self.config = config
        self.events = EventBus()
        self.started = time.time()
        self.mcp = McpSupervisor(config.mcp_servers, policy=AddressPolicy.from_security(config.security),
                                 on_event=self.events.publish)
        self.registry = ToolRegistry([self.mcp.source()])
        register_builtins(self.registry, config)
        self.tool_observers: list[Any] = []  # (tool, outcome, seconds): metrics
        audit = AuditLog(Path(config.state.dir) / "audit.jsonl") if config.state.dir else None
        self.pipeline = ToolPipeline(self.registry, config, audit=audit, observers=self.tool_observers)
        self.pipeline.events = self.events  # "tool.call": tool, agent, caller, outcome, ms, arguments
        state = Path(config.state.dir) if config.state.dir else None
        from runtime.kernel.approvals import Approvals

        governance = config.governance
        self.approvals = Approvals(state / "approvals.sqlite3" if state else None,
                                   timeout_secs=governance.approval_timeout_secs,
                                   max_pending_per_agent=governance.max_pending_per_agent, audit=audit,
                                   publish=self.events.publish, redact=self.pipeline.redact_obj)
        self.pipeline.approvals = self.approvals
        self.conversations = Conversations(state / "conversations.sqlite3") if state else None
        self.agents = Agents(config, self.pipeline, self.conversations)
        self.agents.publish = self.events.publish  # "agent.message" and "model.call"
        register_agent_tools(self.registry, lambda: self.agents)
        self.external: Any = None  # [a2a] external_agents: a2a_* tools and the remote agents' peers
        if config.a2a.external_agents:
            from runtime.a2a.client.external import ExternalAgents, register_tools
            from runtime.net.guard import AddressPolicy as Policy

            self.external = ExternalAgents(config, Policy.from_security(config.security), on_event=self.events.publish)
            register_tools(self.registry, self.external)
            self.agents.remote = self.external.send

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; ``task_status.started()`` once booted (servers still connecting)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.mcp.run)
            if self.external is not None:
                await nursery.start(self.external.run)
            task_status.started()

    async def call_tool(self, name: str, arguments: Any = None, *, timeout_secs: Any = None,
                        caller: str = "", run: Any = None) -> ToolResult:
        """A tool call through the pipeline (guards, audit, metrics, the event)."""
        return await self.pipeline.call(name, arguments, run=run, timeout_secs=timeout_secs, caller=caller)
