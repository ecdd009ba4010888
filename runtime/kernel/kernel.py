"""The kernel as one object: boot it in a nursery, then use its registry.

Boot never waits for MCP servers: they connect in the background, and their tools
appear in the registry as each becomes ready. State changes go to the event bus
(``GET /api/events``, ``tern events``).

``reload`` applies a changed config to the running kernel (``tern reload``, SIGHUP to
``tern serve``): agents, tools, governance, security and MCP servers (an unchanged
server keeps its connection). The objects stay the same ones, so everything holding
them (the MCP and A2A servers, the HTTP routes) sees the new settings at once, and a
call already running finishes under the settings it started with. Some sections
cannot change in a running process (``RESTART_ONLY``): their running values are kept
and the reload says which changed.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any

import trio

from runtime.config import Config
from runtime.config.checks import missing_key_warnings
from runtime.kernel.builtins import register_builtins
from runtime.kernel.tools_mcp import register_mcp_feature_tools
from runtime.kernel.agents import Agents
from runtime.kernel.content import KernelContent
from runtime.kernel.audit import AuditLog
from runtime.kernel.conversations import Conversations
from runtime.kernel.events import EventBus
from runtime.kernel.pipeline import ToolPipeline
from runtime.kernel.registry import ToolRegistry
from runtime.ports import ToolResult
from runtime.kernel.tools_agents import register_agent_tools
from runtime.log import get_logger
from runtime.mcp.client.supervisor import McpSupervisor

__all__ = ["Kernel", "RESTART_ONLY"]

# What a reload keeps: the listener and its access rules are built once ([server]), files
# are open in the state directory ([state]), and [a2a]'s routes, task store and peer
# connections exist from the start, as does POST /mcp ([mcp_server] enabled).
RESTART_ONLY = ("server", "state", "a2a")
MCP_SERVER_RESTART_ONLY = ("enabled", "max_sessions", "session_idle_secs")  # the route and its session table

log = get_logger("kernel")


class Kernel:
    def __init__(self, config: Config, *, lock_path: Path | None = None) -> None:
        """``lock_path``: the MCP servers' ``tern.lock`` (beside the config file: a bad
        one stops the boot with its one line); None: no lock file (the bundled config)."""
        from runtime.mcp.client.lock import LockStore
        from runtime.net.guard import AddressPolicy

        self.config = config
        for warning in missing_key_warnings(config):  # at boot, not at the first 401 from the model
            log.warning("%s", warning)
        self.events = EventBus()
        self.started = time.time()
        #: [state] store = "postgres": the database every shared store uses, and the node's one
        #: LISTEN connection (opened in run(): a database that cannot be reached stops the boot
        #: with one line). None with the SQLite default.
        self.db: Any = None
        self.listener: Any = None
        self.node_id = config.state.node_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        if config.state.store == "postgres":
            from runtime.pg.listen import Listener
            from runtime.pg.pool import Database, resolve_url

            self.db = Database(resolve_url(config.state.postgres_url), pool_size=config.state.pool_size)
            self.listener = Listener(self.db)
        self.mcp = McpSupervisor(config.mcp_servers, policy=AddressPolicy.from_security(config.security),
                                 on_event=self.events.publish, state_dir=config.state.dir,
                                 lock=LockStore(lock_path, [entry.name for entry in config.mcp_servers]))
        self.registry = ToolRegistry([self.mcp.source()])
        self.content = KernelContent(self.mcp)  # what the MCP server re-exports: files, upstream resources, prompts
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
                                   publish=self.events.publish, redact=self.pipeline.redact_obj,
                                   db=self.db, listener=self.listener, node_id=self.node_id,
                                   lease_secs=config.state.lease_secs,
                                   max_pending_per_caller=governance.max_pending_per_caller,
                                   max_kept_per_caller=governance.max_kept_per_caller,
                                   retention_days=governance.approval_retention_days,
                                   self_approval=self._self_approval)
        self.pipeline.approvals = self.approvals
        from runtime.kernel.approval_links import KEY_FILE, ApprovalLinks
        from runtime.kernel.notify import Notifier

        #: the one-time links of [[governance.notify]] (minted here, redeemed by the daemon's /approve route)
        self.approval_links = ApprovalLinks(state / KEY_FILE if state else None, self.approvals)
        self.approvals.notify = Notifier(lambda: self.config, self.approval_links, audit=audit)
        from runtime.kernel.elicitation import person_answers
        from runtime.kernel.sampling_answer import SamplingAnswers

        sampling = SamplingAnswers(lambda: self.config, self.pipeline, self.approvals)  # [mcp_servers.sampling]
        self.mcp.on_input = person_answers(self.approvals, self.pipeline.redact_obj, sampling)  # servers' questions
        from runtime.kernel.mcp_lock import approver

        self.mcp.approve_tools = approver(self.approvals, self.pipeline.redact_obj)  # tern.lock: held tools
        self.conversations = Conversations(state / "conversations.sqlite3" if state else None, db=self.db) \
            if state or self.db is not None else None
        self.agents = Agents(config, self.pipeline, self.conversations)
        self.agents.publish = self.events.publish  # "agent.message" and "model.call"
        register_agent_tools(self.registry, lambda: self.agents)
        register_mcp_feature_tools(self.registry, lambda: self.mcp, lambda: self.config.agents)
        #: A key's name to its Caller (a trigger's run_as): the daemon's key table's ``by_name``,
        #: set by the host that holds the keys (None: no keys, so no run_as but the owner).
        self.callers: Any = None
        self.external: Any = None  # [a2a] external_agents: a2a_* tools and the remote agents' peers
        if config.a2a.external_agents:
            from runtime.a2a.client.external import ExternalAgents, register_tools
            from runtime.net.guard import AddressPolicy as Policy

            self.external = ExternalAgents(config, Policy.from_security(config.security), on_event=self.events.publish)
            register_tools(self.registry, self.external)
            self.agents.remote = self.external.send

    def _self_approval(self, origin: str) -> bool:
        """Whether a caller without the scope ``approvals`` may answer its own run's
        request, by the way that run came in (read live: a reload applies)."""
        if origin == "a2a":
            return self.config.a2a.caller_may_approve
        if origin == "mcp":
            return self.config.mcp_server.caller_may_approve
        return False

    def reload(self, config: Config) -> dict[str, Any]:
        """Apply ``config`` (already loaded and checked) in place; returns what changed:
        ``agents`` and ``mcp_servers`` (``added``, ``removed``, ``changed``, ``kept``), and
        ``not_applied`` (settings of ``RESTART_ONLY`` sections that differ, kept as they run)."""
        import msgspec

        from runtime.net.guard import AddressPolicy

        old = self.config
        not_applied = [f"[{section}] {key}" for section in RESTART_ONLY
                       for key in _changed_fields(getattr(old, section), getattr(config, section))]
        kept = {key: getattr(old.mcp_server, key) for key in MCP_SERVER_RESTART_ONLY}
        not_applied += [f"[mcp_server] {key}" for key, value in kept.items()
                        if getattr(config.mcp_server, key) != value]
        config = msgspec.structs.replace(config, server=old.server, state=old.state, a2a=old.a2a,
                                         mcp_server=msgspec.structs.replace(config.mcp_server, **kept))
        self.mcp.policy = AddressPolicy.from_security(config.security)
        servers = self.mcp.reconcile(config.mcp_servers)
        self.mcp.lock.configured = [entry.name for entry in config.mcp_servers]
        self.mcp.recheck_lock()  # a server's lock mode may have changed, or tern.lock did
        fresh = ToolRegistry()
        register_builtins(fresh, config)
        register_agent_tools(fresh, lambda: self.agents)
        register_mcp_feature_tools(fresh, lambda: self.mcp, lambda: self.config.agents)
        if self.external is not None:
            from runtime.a2a.client.external import register_tools

            register_tools(fresh, self.external)
        self.registry.adopt_builtins(fresh)
        self.pipeline.reconfigure(config)
        self.approvals.timeout_secs = config.governance.approval_timeout_secs
        self.approvals.max_pending = config.governance.max_pending_per_agent
        self.approvals.max_pending_per_caller = config.governance.max_pending_per_caller
        self.approvals.max_kept_per_caller = config.governance.max_kept_per_caller
        self.approvals.retention_secs = config.governance.approval_retention_days * 86400
        self.agents.reconfigure(config)
        self.config = config
        report = {"agents": _compare({a.name: a for a in old.agents}, {a.name: a for a in config.agents}),
                  "mcp_servers": servers, "not_applied": not_applied}
        self.events.publish("config.reloaded", report)
        return report

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; ``task_status.started()`` once booted (servers still connecting)."""
        try:
            async with trio.open_nursery() as nursery:
                if self.db is not None:
                    await self.db.open()
                    await nursery.start(self.listener.run)
                    await self.conversations.start()
                await nursery.start(self.approvals.run)
                await nursery.start(self.mcp.run)
                if self.external is not None:
                    await nursery.start(self.external.run)
                if self.pipeline.audit is not None:
                    nursery.start_soon(self._checkpoints, self.pipeline.audit)
                task_status.started()
        finally:
            if self.pipeline.audit is not None:
                self.pipeline.audit.checkpoint()  # at the end: the last records signed too
            if self.db is not None:
                self.db.close()

    @staticmethod
    async def _checkpoints(audit: AuditLog) -> None:
        """Sign the audit log's head every ``CHECKPOINT_EVERY_SECS`` while records are
        unsigned (the log's own cadence covers a busy log; this one a quiet one)."""
        from runtime.kernel.audit import CHECKPOINT_EVERY_SECS

        while True:
            await trio.sleep(CHECKPOINT_EVERY_SECS)
            audit.checkpoint()

    async def call_tool(self, name: str, arguments: Any = None, *, timeout_secs: Any = None,
                        caller: str = "", run: Any = None) -> ToolResult:
        """A tool call through the pipeline (guards, audit, metrics, the event)."""
        return await self.pipeline.call(name, arguments, run=run, timeout_secs=timeout_secs, caller=caller)


def _changed_fields(old: Any, new: Any) -> list[str]:
    return [name for name in old.__struct_fields__ if getattr(old, name) != getattr(new, name)]


def _compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[str]]:
    return {"added": [n for n in new if n not in old], "removed": [n for n in old if n not in new],
            "changed": [n for n in new if n in old and old[n] != new[n]],
            "kept": [n for n in new if n in old and old[n] == new[n]]}
