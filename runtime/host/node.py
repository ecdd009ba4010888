"""One tern node as the daemon runs it: the kernel, the A2A server's moving parts when
``[a2a] enabled``, and the MCP server behind ``POST /mcp`` when ``[mcp_server]
enabled``. This is where the kernel's objects are handed to the protocol servers as
ports; ``tern mcp`` and the CLI commands build their own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from runtime.config import Config
from runtime.kernel.kernel import Kernel

__all__ = ["Node"]


class Node:
    def __init__(self, config: Config, *, serve_a2a: bool = True, lock_path: Path | None = None) -> None:
        """``serve_a2a``: this node answers A2A tasks (with ``[a2a] enabled``): the task
        engine, push notifier and store exist only then. ``lock_path``: the MCP servers'
        tern.lock (``Kernel``)."""
        self.config = config
        self.kernel = Kernel(config, lock_path=lock_path)
        self.a2a: Any = None  # an A2aService
        if serve_a2a and config.a2a.enabled:
            from runtime.a2a.server.runner import A2aService

            self.a2a = A2aService(config, self.kernel.agents, self.kernel.approvals, events=self.kernel.events,
                                  db=self.kernel.db, listener=self.kernel.listener, node_id=self.kernel.node_id)
        self.mcp_server: Any = None  # an McpServer: its own nursery holds 2026-07-28 calls between requests
        if config.mcp_server.enabled:
            from runtime.mcp.server.dispatch import McpServer

            kernel = self.kernel
            tasks = None
            if self.a2a is not None:  # MCP's tasks extension starts A2A tasks: one task engine
                from runtime.a2a.server.mcp_tasks import McpTaskBridge

                tasks = McpTaskBridge(self.a2a)
            self.mcp_server = McpServer(config, kernel.pipeline, kernel.events, approvals=kernel.approvals,
                                        content=kernel.content, tasks=tasks)
        self.access: Any = None  # the daemon's httpd Access: a reload swaps its keys
        self.triggers: Any = None  # a TriggerRunner, with [[triggers]] configured
        if config.triggers:
            from runtime.kernel.triggers.runner import TriggerRunner

            self.triggers = TriggerRunner(self.kernel)
        self.http_bound: tuple[str, int] | None = None  # once the daemon listens: the cards' fallback URL
        self.a2a_endpoint: Any = None  # the A2A routes, once mounted (host/api.py)
        self.config_path: Path | None = None  # the file the daemon was started with (None: the bundled default)
        #: the daemon's reload (``daemon.reload_config``), for ``POST /api/config/reload``; None: not a daemon
        self.reload_from_file: Callable[[], dict[str, Any]] | None = None
        from runtime.host.activity import open_store

        #: what ran, who asked, what it cost: the dashboard's history (host/activity.py)
        self.activity = open_store(config.state.dir)
        #: the node's nursery once it runs, for work that outlives a request (an MCP server's OAuth login)
        self.nursery: trio.Nursery | None = None

    def reload(self, config: Config) -> dict[str, Any]:
        """Apply a changed config (``Kernel.reload``: what it keeps and why), then show
        the new agents to the MCP server's exposure and the A2A cards."""
        kept = self.config.triggers
        report = self.kernel.reload(config)
        if config.triggers != kept:  # the runner's tasks and bounds are built at start: kept, and named
            import msgspec

            self.kernel.config = msgspec.structs.replace(self.kernel.config, triggers=kept)
            report["not_applied"].append("[[triggers]]")
        self.config = self.kernel.config
        if self.mcp_server is not None:
            self.mcp_server.exposure.reconfigure(self.config)
            self.mcp_server.catalog.reconfigure(self.config)
            settings = self.config.mcp_server
            self.mcp_server.page_size = max(1, settings.page_size)
            self.mcp_server.caller_may_approve = settings.caller_may_approve
            if settings.instructions:
                self.mcp_server.instructions = settings.instructions
        if self.a2a_endpoint is not None:
            self.a2a_endpoint.reconfigure(self.config)
        return report

    async def _record_activity(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from runtime.host.activity import audit_rows, record_events

        audit = self.kernel.pipeline.audit
        if audit is not None:  # what ran while no daemon did (tern run, tern call): read once, at start
            try:
                since = self.activity.newest() + 1.0  # its own records trail its events by a moment
                self.activity.add(await trio.to_thread.run_sync(audit_rows, audit.path, since), "audit")
            except OSError as exc:
                from runtime.log import get_logger

                get_logger("activity").warning("the audit log could not be read for the history: %s", exc)
        await record_events(self.kernel.events, self.activity, task_status=task_status)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; ``task_status.started()`` once booted (MCP servers still connecting)."""
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            await nursery.start(self.kernel.run)
            await nursery.start(self._record_activity)
            if self.a2a is not None:
                await nursery.start(self.a2a.run)
            if self.mcp_server is not None:
                await nursery.start(self.mcp_server.run)
            if self.triggers is not None:
                await nursery.start(self.triggers.run)
            task_status.started()
