"""Supervises every configured MCP server: connect, watch, restart, report.

Each server is its own task in one nursery, so boot connects them all at once and a
slow or broken server delays nobody. A connection that ends (crash, EOF, unreachable
host) has already failed its in-flight calls (the session does that at once); the
supervisor then restarts it with exponential backoff (0.5 s, 1 s, 2 s ... capped at
30 s). ``max_restarts`` bounds *consecutive* failures: a connection that stayed ready
for ``STABLE_SECS`` resets the budget, so a server that crashes once a day is not
given up on after five days.

A call to a tool of a server that is still making its first connection waits for it,
up to that server's ``timeout_secs``, rather than failing at once: right after boot
(``tern mcp --standalone``, an agent's first turn) the tools are known to be coming.
A restarting or failed server still fails a call at once with its state.

``reconcile`` applies a reloaded config: a server whose entry is unchanged keeps its
connection (the same process), a changed one is reconnected, a removed one stopped
and a new one started. ``restart`` revives a server (a failed one that used up
``max_restarts``, or a running one on demand) with a fresh restart budget.

The tool list of a ready server is kept current (``notifications/tools/list_changed``
triggers a debounced re-list; a 2026-07-28 server sends it on the
``subscriptions/listen`` stream ``McpClient.listen`` holds open) and filtered by ``tools_include`` / ``tools_exclude``
globs, which match the tool's own name or its ``mcp_{server}_{tool}`` name, casefolded
and with ``-`` and ``_`` the same (``delete_*`` excludes ``Delete-Repo`` too).

Each listing is checked against ``tern.lock`` (``mcp.client.lock``) under the server's
``lock`` mode: a tool whose definition drifted, or that the lock does not name, is held
back (``enforce``: not offered, not callable; ``unlocked`` in its status) and put to a
person through ``approve_tools`` (the kernel's approvals); once approved it is pinned in
the file and offered. A server whose source (package, executable) changed is not
started under ``enforce``. Every finding is an ``mcp.lock`` event.
"""

from __future__ import annotations

import time
from typing import Any, Literal
from collections.abc import Callable

import msgspec
import trio

from runtime.config import Config, McpServerEntry, masked, oauth_of
from runtime.config.dump import mask_urls
from runtime.errors import ConnectionLost, TernError, UnknownTool, single_leaf
from runtime.log import get_logger
from runtime.mcp import names as mcp_names
from runtime.mcp.client.client import McpClient, make_transport
from runtime.mcp.client.lock import LockStore, ToolCheck, check_tools, source_change, source_of
from runtime.mcp.protocol import CallResult, McpTool
from runtime.ports import Tool, ToolResult

__all__ = ["McpSupervisor", "McpToolSource", "ServerStatus", "State", "McpToolEntry", "servers_report",
           "UnknownServer", "ServerDisabled"]

log = get_logger("mcp")

State = Literal["connecting", "ready", "restarting", "failed", "stopped", "disabled", "needs_auth"]
LOGIN_POLL_SECS = 2.0  # how often a server in needs_auth looks for the token `tern auth login` saves
STABLE_SECS = 60.0
REFRESH_DEBOUNCE_SECS = 0.1


class UnknownServer(TernError):
    """No MCP server of that name is configured."""

    http_status = 404


class ServerDisabled(TernError):
    """The MCP server is configured with ``enabled = false``."""

    http_status = 409


class ServerStatus(msgspec.Struct):
    """What ``tern mcp servers`` and ``GET /api/mcp/servers`` show for one server."""

    name: str
    transport: str
    state: State = "connecting"
    last_error: str = ""
    restarts: int = 0
    tool_count: int = 0
    protocol_version: str = ""
    era: str = ""
    server_name: str = ""
    ready_since: float | None = None
    pid: int | None = None  # a stdio server's process while connected
    lock: str = "off"  # the tern.lock mode in force: off, warn or enforce
    unlocked: dict[str, str] = msgspec.field(default_factory=dict)  # tool -> drifted | new (enforce: held back)


class McpToolEntry(msgspec.Struct, frozen=True):
    """One MCP tool under its namespaced name."""

    name: str  # mcp_{server}_{tool}
    server: str
    tool: McpTool  # tool.name is the original name, used for the call


class _Server:
    def __init__(self, entry: McpServerEntry) -> None:
        self.entry = entry
        self.status = ServerStatus(entry.name, entry.transport.__struct_config__.tag,  # type: ignore[arg-type]
                                   state="connecting" if entry.enabled else "disabled")
        self.client: McpClient | None = None
        self.tools: list[McpTool] = []
        self.settled = trio.Event()  # the first attempt is over, either way
        self.refresh = trio.Event()
        self.scope = trio.CancelScope()  # its supervising task: cancelled to stop or restart this server
        self.attempt_started = 0.0  # trio time the current connection attempt began
        self.asked_login = False  # a connection ended in AuthRequired (what needs_auth waits on without [oauth])
        self.listed: list[McpTool] = []  # what the server offers (include/exclude applied), before the lock
        self.source: dict[str, str] = {}  # tern.lock's view of what runs it (read at each connection)
        self.nursery: trio.Nursery | None = None  # the live connection's
        self.asking: tuple[frozenset[tuple[str, str]], trio.CancelScope] | None = None  # the approval it waits on
        if not entry.enabled:
            self.settled.set()


def _wanted(entry: McpServerEntry, tool: str) -> bool:
    """Include/exclude globs on the normalised name (``mcp_names.ToolGlobs``)."""
    full = mcp_names.format_mcp_tool_name(entry.name, tool)
    include = mcp_names.tool_globs(entry.tools_include)
    if include and not include.matches(tool, full):
        return False
    return not mcp_names.tool_globs(entry.tools_exclude).matches(tool, full)


class McpSupervisor:
    """Start ``run`` in a nursery; it returns at once (``task_status``) and keeps the
    servers connected until cancelled or ``aclose``-d."""

    def __init__(self, entries: list[McpServerEntry], *, policy: Any = None, roots: list[str] | None = None,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None,
                 backoff_base: float = 0.5, backoff_max: float = 30.0, state_dir: str = "",
                 lock: LockStore | None = None) -> None:
        self._servers = {entry.name: _Server(entry) for entry in entries}
        self.policy = policy
        self.state_dir = state_dir  # where OAuth tokens live
        self.roots = roots
        self.on_event = on_event  # (kind, data): state changes, for the kernel's event bus
        #: server name -> the session's ``on_input`` (who answers that server's questions);
        #: None: elicitation and sampling are refused and not declared
        self.on_input: Callable[[str], Any] | None = None
        self.lock = lock if lock is not None else LockStore(None)
        #: (server, [ToolCheck.shown()...]) -> whether a person approved those definitions; None:
        #: nobody to ask, so held tools wait for `tern mcp lock`
        self.approve_tools: Callable[[str, list[dict[str, Any]]], Any] | None = None
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._tools: dict[str, McpToolEntry] = {}
        self.collisions: list[list[mcp_names.ToolName]] = []
        self._cancel = trio.CancelScope()
        self._nursery: trio.Nursery | None = None

    # --- Queries ------------------------------------------------------------------------

    def statuses(self) -> list[ServerStatus]:
        return [server.status for server in self._servers.values()]

    def status(self, name: str) -> ServerStatus:
        return self._servers[name].status

    def tools(self) -> list[McpToolEntry]:
        return list(self._tools.values())

    def tool(self, name: str) -> McpToolEntry | None:
        return self._tools.get(name)

    async def wait_settled(self, timeout_secs: float | None = None) -> None:
        """Wait until every server's first connection attempt is over (ready or not)."""
        with trio.move_on_after(self._settle_timeout() if timeout_secs is None else timeout_secs):
            for server in self._servers.values():
                await server.settled.wait()

    def _settle_timeout(self) -> float:
        return max((s.entry.timeout_secs for s in self._servers.values()), default=0.0) + 5.0

    # --- Calls --------------------------------------------------------------------------

    async def wait_for(self, name: str) -> McpToolEntry | None:
        """The tool ``name``, waiting while its server makes its first connection (up to
        the server's ``timeout_secs``); None if it is not there once that is over, or its
        server is in any other state."""
        entry = self._tools.get(name)
        if entry is not None:
            return entry
        owner = self.owner(name)
        if owner is None:
            return None
        server = self._servers[owner]
        if server.status.state == "connecting":  # the deadline is the attempt's, so waiting twice costs no more
            with trio.move_on_at(server.attempt_started + server.entry.timeout_secs):
                await server.settled.wait()
        return self._tools.get(name)

    async def call(self, name: str, arguments: dict[str, Any] | None = None, *,
                   timeout_secs: float | None = None,
                   on_progress: Callable[[dict[str, Any]], None] | None = None,
                   on_task: Callable[[dict[str, Any]], None] | None = None) -> CallResult:
        """Call a namespaced tool. A server still connecting for the first time is waited
        for (``wait_for``); one that is restarting or failed fails at once, with its state.
        A call that runs as a task upstream is an ``mcp.task`` event at each status."""
        entry = self._tools.get(name)
        if entry is None:
            entry = await self.wait_for(name)
        if entry is None:
            owner = self.owner(name)
            if owner is None or self._servers[owner].status.state == "ready":
                raise UnknownTool(f"no tool named {name!r}")
            raise self._not_ready(owner)
        handle = self._servers[entry.server]
        client = handle.client
        if client is None or handle.status.state != "ready":
            raise self._not_ready(entry.server)
        on_event = self.on_event

        def task_moved(state: dict[str, Any]) -> None:
            if on_event is not None:
                on_event("mcp.task", {"server": entry.server, "tool": name, **state})
            if on_task is not None:
                on_task(state)

        return await client.call_tool(entry.tool.name, arguments, timeout_secs=timeout_secs,
                                      on_progress=on_progress, on_task=task_moved)

    def capabilities(self, server: str) -> dict[str, Any] | None:
        """A connected server's capabilities (what it said it serves); None when it is not ready."""
        found = self._servers.get(server)
        client = found.client if found is not None else None
        return dict(client.info.capabilities) if client is not None else None

    async def request(self, server: str, method: str, params: dict[str, Any] | None = None) -> Any:
        """One request to a connected server, within its ``timeout_secs`` (a gateway's
        ``resources/read`` or ``prompts/get``); its error answers raise RpcError."""
        found = self._servers.get(server)
        if found is None:
            raise UnknownServer(f"no MCP server named {server!r}")
        if found.client is None:
            raise self._not_ready(server)
        return await found.client.session.request(method, params)

    def owner(self, name: str) -> str | None:
        """The configured server a namespaced name belongs to, ready or not (so a call
        to a restarting server's tool says so, instead of "no such tool")."""
        entry = self._tools.get(name)
        return entry.server if entry else mcp_names.extract_mcp_server(name, self._servers)

    def _set_state(self, server: _Server, state: State, *, force: bool = False) -> None:
        if force or server.status.state != state:
            server.status.state = state
            if self.on_event is not None and self._servers.get(server.entry.name) is server:
                self.on_event("mcp.server", msgspec.structs.asdict(server.status))

    def client(self, name: str, feature: str) -> McpClient:
        """The live client of server ``name`` for ``feature`` ("resources" or "prompts"),
        which the server's ``tools_include``/``tools_exclude`` globs govern as if it were
        a tool of that name (``mcp_{server}_resources``). UnknownServer, ToolRefused or
        ConnectionLost (not ready) otherwise."""
        from runtime.errors import ToolRefused

        server = self._servers.get(name)
        if server is None:
            raise UnknownServer(f"no MCP server is called {name!r}")
        if not _wanted(server.entry, feature):
            raise ToolRefused(f"MCP server '{name}' does not allow its {feature} (tools_include/tools_exclude)")
        if server.client is None:
            raise self._not_ready(name)
        return server.client

    def _not_ready(self, server: str) -> ConnectionLost:
        status = self._servers[server].status
        detail = f" ({status.last_error})" if status.last_error else ""
        return ConnectionLost(f"MCP server '{server}' is {status.state}{detail}")

    def source(self) -> McpToolSource:
        return McpToolSource(self)

    # --- Supervision --------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self._cancel:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    for server in self._servers.values():
                        if server.entry.enabled:
                            self._start(server)
                    task_status.started()
                    await trio.sleep_forever()  # until cancelled, even if every server failed
        finally:
            self._nursery = None
            for server in self._servers.values():
                if server.status.state not in ("disabled", "failed"):
                    self._set_state(server, "stopped")
                server.settled.set()

    async def aclose(self) -> None:
        self._cancel.cancel()

    def _start(self, server: _Server) -> None:
        assert self._nursery is not None, "the supervisor is not running"
        server.scope = trio.CancelScope()
        server.attempt_started = trio.current_time()  # a call may wait for it before its task runs
        self._nursery.start_soon(self._supervise, server)

    def reconcile(self, entries: list[McpServerEntry]) -> dict[str, list[str]]:
        """Apply a reloaded config's servers (see the module docstring); returns the names
        ``added``, ``removed``, ``changed`` and ``kept``."""
        old, new = self._servers, {entry.name: entry for entry in entries}
        report: dict[str, list[str]] = {"added": [], "removed": [], "changed": [], "kept": []}
        servers: dict[str, _Server] = {}
        for name, entry in new.items():
            current = old.get(name)
            if current is not None and current.entry == entry:
                servers[name] = current
                report["kept"].append(name)
                continue
            if current is not None:
                self._stop(current)
            servers[name] = _Server(entry)
            report["changed" if current is not None else "added"].append(name)
        for name, current in old.items():
            if name not in new:
                self._stop(current)
                report["removed"].append(name)
        self._servers = servers
        self._rename()
        for name in report["added"] + report["changed"]:
            server = servers[name]
            if server.entry.enabled and self._nursery is not None:
                self._start(server)
            elif not server.entry.enabled and self.on_event is not None:
                self.on_event("mcp.server", msgspec.structs.asdict(server.status))
        return report

    def _stop(self, server: _Server) -> None:
        """End a server's supervising task (its connection closes, its calls fail) and
        forget its tools."""
        server.scope.cancel()
        server.tools = []
        server.status.tool_count = 0

    def restart(self, name: str) -> ServerStatus:
        """Reconnect one server now with a fresh restart budget: a failed one is revived,
        a running one is closed and connected again. Raises ``UnknownServer``, or
        ``ServerDisabled`` for a disabled one."""
        server = self._servers.get(name)
        if server is None:
            known = ", ".join(self._servers) or "none configured"
            raise UnknownServer(f"no MCP server named {name!r} (servers: {known})")
        if not server.entry.enabled:
            raise ServerDisabled(f"MCP server '{name}' is disabled in the config (enabled = false)")
        if self._nursery is None:
            raise TernError("the MCP supervisor is not running")
        self._stop(server)
        fresh = _Server(server.entry)
        fresh.status.restarts = server.status.restarts
        fresh.status.last_error = server.status.last_error
        self._servers = {key: (fresh if key == name else value) for key, value in self._servers.items()}
        self._rename()
        log.warning("MCP server '%s': restarting on request (it was %s)", name, server.status.state)
        self._start(fresh)
        return fresh.status

    async def _supervise(self, server: _Server) -> None:
        with server.scope:
            try:
                await self._supervise_one(server)
            finally:
                server.settled.set()  # a call waiting for it stops waiting
        if server.scope.cancelled_caught and self._servers.get(server.entry.name) is not server:
            server.status.state = "stopped"  # replaced or removed: no event, its successor reports

    async def _supervise_one(self, server: _Server) -> None:
        entry, status = server.entry, server.status
        failures = 0
        while True:
            await self._await_login(server)
            refused = await self._source_refused(server)
            if refused:
                status.last_error = refused
                self._set_state(server, "failed")
                log.error("MCP server '%s' not started: %s", entry.name, refused)
                return
            server.attempt_started = trio.current_time()
            self._set_state(server, "connecting" if failures == 0 and status.restarts == 0 else "restarting")
            error = await self._connection(server)
            status.last_error = error
            server.settled.set()
            if self._login_needed(server):
                continue  # refused and not refreshable: wait for a person, not a restart
            if status.ready_since is not None and time.monotonic() - status.ready_since >= STABLE_SECS:
                failures = 0
            status.ready_since = None
            failures += 1
            if entry.restart == "never" or failures > entry.max_restarts:
                self._set_state(server, "failed")
                log.error("MCP server '%s' failed: %s%s", entry.name, error,
                          "" if entry.restart == "never" else f" (gave up after {entry.max_restarts} restarts)")
                return
            delay = min(self.backoff_base * 2 ** (failures - 1), self.backoff_max)
            status.restarts += 1
            self._set_state(server, "restarting", force=True)  # now with the error and count
            log.warning("MCP server '%s' is down (%s); restarting in %.1f s", entry.name, error, delay)
            await trio.sleep(delay)

    def _login_needed(self, server: _Server) -> bool:
        """A server that logs in with a person's authorization code and has no token: one
        with an ``[oauth]`` table from the start, any other HTTP server once it has asked."""
        entry = server.entry
        oauth = oauth_of(entry.transport)
        if oauth is None or oauth.grant != "authorization_code" or not self.state_dir:
            return False  # (no state dir: tokens live in the transport's memory only)
        if getattr(entry.transport, "oauth", None) is None and not server.asked_login:
            return False
        from runtime.mcp.client.oauth.store import TokenStore

        return TokenStore(self.state_dir).tokens(entry.transport.url) is None

    async def _await_login(self, server: _Server) -> None:
        """State ``needs_auth`` (with the command to run) until a token appears: the
        daemon never opens a browser; ``tern auth login`` saves the token it polls for."""
        if not self._login_needed(server):
            return
        from runtime.mcp.client.oauth.shell import login_hint

        server.status.last_error = login_hint(server.entry.name)
        self._set_state(server, "needs_auth")
        log.warning("%s", server.status.last_error)
        server.settled.set()  # a call waiting for it fails at once, with the hint
        while self._login_needed(server):
            await trio.sleep(LOGIN_POLL_SECS)
        log.info("MCP server '%s': a login appeared; connecting", server.entry.name)

    async def _connection(self, server: _Server) -> str:
        """One connection's life: connect, list tools, serve until it ends. Returns why it ended."""
        entry = server.entry
        server.refresh = trio.Event()

        def notified(method: str, params: Any) -> None:
            # A listen stream's acknowledgement too: events are not replayed, so what
            # changed before it was open (or while it was down) is found by listing again.
            if method in ("notifications/tools/list_changed", "notifications/subscriptions/acknowledged"):
                server.refresh.set()
            elif method == "notifications/resources/updated" and self.on_event is not None and \
                    isinstance(params, dict) and isinstance(params.get("uri"), str):  # for the MCP server's subscribers
                self.on_event("mcp.resource", {"server": entry.name, "uri": params["uri"][:4096]})
            elif method in ("notifications/resources/list_changed", "notifications/prompts/list_changed") and \
                    self.on_event is not None:
                self.on_event("mcp.catalog", {"server": entry.name, "list": method.split("/")[1]})

        client: McpClient | None = None
        transport = make_transport(entry, self.policy, state_dir=self.state_dir)
        try:
            async with trio.open_nursery() as nursery:
                client = await McpClient.connect(entry, nursery, roots=self.roots, on_notification=notified,
                                                 policy=self.policy, transport=transport,
                                                 on_input=self.on_input(entry.name) if self.on_input else None,
                                                 input_methods=_input_methods(entry))
                try:
                    await self._list(server, client)
                    info = client.info
                    status = server.status
                    status.last_error, status.ready_since = "", time.monotonic()
                    status.protocol_version, status.era, status.server_name = info.version, info.era, info.name or ""
                    status.pid = getattr(client.session.transport, "pid", None)
                    self._set_state(server, "ready")
                    server.client = client
                    server.nursery = nursery
                    self._check_lock(server)  # held tools are put to a person in this nursery
                    server.settled.set()
                    nursery.start_soon(self._refresher, server, client)
                    nursery.start_soon(client.listen)  # 2026-07-28: list_changed rides subscriptions/listen
                    await client.closed.wait()
                finally:
                    server.client = None
                    server.nursery = None
                    server.asking = None  # its task ends with this nursery: the request expires
                    server.status.pid = None
                    if server.status.state == "ready":
                        self._set_state(server, "restarting")
                    self._set_tools(server, [])
                    await client.aclose()
                    nursery.cancel_scope.cancel()
        except Exception as exc:  # one server's failure must never take down the others
            leaf = single_leaf(exc)
            if getattr(transport, "login_required", False):
                server.asked_login = True
            return str(leaf) or type(leaf).__name__
        if getattr(transport, "login_required", False):
            server.asked_login = True  # a login revoked while connected
        closed = client.session.close_reason if client is not None else None
        return str(closed) if closed is not None else "the connection ended"

    async def _refresher(self, server: _Server, client: McpClient) -> None:
        while True:
            await server.refresh.wait()
            await trio.sleep(REFRESH_DEBOUNCE_SECS)  # a burst of notifications: one re-list
            server.refresh = trio.Event()
            try:
                await self._list(server, client)
            except Exception as exc:
                log.warning("MCP server '%s': re-listing tools failed: %s", server.entry.name, single_leaf(exc))
            else:
                if self.on_event is not None:
                    self.on_event("mcp.tools", {"server": server.entry.name, "tools": server.status.tool_count})

    async def _list(self, server: _Server, client: McpClient) -> None:
        tools = [tool for tool in await client.list_tools() if _wanted(server.entry, tool.name)]
        server.listed = tools
        self._check_lock(server)
        log.info("MCP server '%s': %d tools", server.entry.name, len(tools))

    def listed(self, name: str) -> list[McpTool]:
        """What a ready server offers (include/exclude applied), held tools too: what
        ``tern mcp lock`` pins."""
        server = self._servers.get(name)
        return list(server.listed) if server is not None else []

    # --- tern.lock ----------------------------------------------------------------------

    async def _source_refused(self, server: _Server) -> str:
        """Read what runs the server (an executable is hashed in a thread); under
        ``enforce`` a source that moved from the lock's is the sentence that stops it."""
        self.lock.refresh()
        mode = self.lock.mode(server.entry)
        server.status.lock = mode
        if mode == "off":
            return ""
        server.source = await trio.to_thread.run_sync(source_of, server.entry)
        locked = self.lock.server(server.entry.name)
        moved = source_change(locked.source, server.source) if locked is not None else ""
        if not moved:
            return ""
        self._lock_event(server, "source_changed", detail=moved)
        if mode == "warn":
            log.warning("MCP server '%s': %s (tern.lock, lock = \"warn\")", server.entry.name, moved)
            return ""
        return f"{moved}; check it, then run `tern mcp lock {server.entry.name}` to pin it (tern.lock)"

    def recheck_lock(self) -> None:
        """Apply the lock file again to every connected server (it changed on disk, or
        the config did)."""
        self.lock.refresh()
        for server in self._servers.values():
            if server.client is not None:
                self._check_lock(server)

    def _check_lock(self, server: _Server) -> None:
        """Offer the listed tools the lock lets through; put the rest to a person."""
        entry, status = server.entry, server.status
        self.lock.refresh()
        mode = self.lock.mode(entry)
        status.lock = mode
        if mode == "off":
            status.unlocked = {}
            self._set_tools(server, server.listed)
            self._stop_asking(server)
            return
        checks = check_tools(self.lock.server(entry.name), server.listed)
        unlocked = {name: check.state for name, check in checks.items() if check.state != "locked"}
        changed = unlocked != status.unlocked
        status.unlocked = unlocked
        offered = server.listed if mode == "warn" else [t for t in server.listed if t.name not in unlocked]
        self._set_tools(server, offered)
        if unlocked and changed:
            listing = ", ".join(f"{name} ({state})" for name, state in sorted(unlocked.items()))
            if mode == "warn":
                log.warning("MCP server '%s': tools not as tern.lock pins them, offered anyway (lock = \"warn\"): %s",
                            entry.name, listing)
            else:
                log.warning("MCP server '%s': tools held back until a person approves them (tern.lock): %s",
                            entry.name, listing)
            self._lock_event(server, "warned" if mode == "warn" else "held", tools=unlocked)
        if mode != "enforce" or not unlocked:
            self._stop_asking(server)
            return
        self._ask(server, [checks[name] for name in sorted(unlocked)])

    def _stop_asking(self, server: _Server) -> None:
        if server.asking is not None:
            server.asking[1].cancel()
            server.asking = None

    def _ask(self, server: _Server, held: list[ToolCheck]) -> None:
        """One approval request per server for what is held now; a request for another
        set (the server changed again) is withdrawn first."""
        key = frozenset((check.tool, check.sha256) for check in held)
        if server.asking is not None and server.asking[0] == key:
            return
        self._stop_asking(server)
        if self.approve_tools is None or server.nursery is None:
            return
        scope = trio.CancelScope()
        server.asking = (key, scope)
        server.nursery.start_soon(self._await_approval, server, held, scope)

    async def _await_approval(self, server: _Server, held: list[ToolCheck], scope: trio.CancelScope) -> None:
        name = server.entry.name
        with scope:
            try:
                approved = await self.approve_tools(name, [check.shown() for check in held])  # type: ignore[misc]
            except Exception as exc:  # the store is away: the tools stay held; a reconnect asks again
                log.warning("MCP server '%s': could not ask to approve its tools: %s", name, single_leaf(exc))
                return
            if server.asking is not None and server.asking[1] is scope:
                server.asking = None
            tools = [check.tool for check in held]
            if not approved:
                log.warning("MCP server '%s': %s not approved; held back until the server changes or reconnects",
                            name, ", ".join(tools))
                self._lock_event(server, "not_approved", tools={t: server.status.unlocked.get(t, "") for t in tools})
                return
            try:
                await trio.to_thread.run_sync(self.lock.approve, name, server.source, held)
                written = ""
            except OSError as exc:
                written = f"tern.lock not written ({exc.strerror or exc}): the approval holds until tern stops"
                log.error("MCP server '%s': %s", name, written)
            log.info("MCP server '%s': %s approved and pinned in tern.lock", name, ", ".join(tools))
            self._lock_event(server, "approved", tools={t: "locked" for t in tools},
                             **({"detail": written} if written else {}))
            if self._servers.get(name) is server:
                self._check_lock(server)
                if self.on_event is not None:
                    self.on_event("mcp.tools", {"server": name, "tools": server.status.tool_count})

    def _lock_event(self, server: _Server, action: str, **data: Any) -> None:
        if self.on_event is not None and self._servers.get(server.entry.name) is server:
            self.on_event("mcp.lock", {"server": server.entry.name, "mode": server.status.lock, "action": action,
                                       **data})

    def _set_tools(self, server: _Server, tools: list[McpTool]) -> None:
        server.tools = tools
        server.status.tool_count = len(tools)
        self._rename()

    def _rename(self) -> None:
        """Namespaced names for all servers' tools together: collisions across servers
        (server ``a_b`` tool ``c`` against server ``a`` tool ``b_c``) are caught too."""
        by_pair = {(s.entry.name, t.name): t for s in self._servers.values() for t in s.tools}
        assigned, collisions = mcp_names.assign_names(by_pair)
        for group in collisions:
            if group not in self.collisions:
                log.warning("MCP tool names collide: %s; each was given a distinct suffixed name",
                            ", ".join(f"{n.server}/{n.tool} -> {n.name}" for n in group))
        self.collisions = collisions
        self._tools = {n.name: McpToolEntry(n.name, n.server, by_pair[(n.server, n.tool)]) for n in assigned}


def servers_report(config: Config, supervisor: Any) -> dict[str, Any]:
    """The seed's ``GET /api/mcp/servers`` shape (``configured``, ``connected``), with
    each server's state, last error and restart count added, and its ``lock`` mode with
    the tools that are not as tern.lock pins them (``unlocked``: tool -> drifted | new)."""
    by_server: dict[str, list[dict[str, str]]] = {}
    for entry in supervisor.tools():
        description = f"[MCP:{entry.server}] {entry.tool.description}".rstrip()
        by_server.setdefault(entry.server, []).append({"name": entry.name, "description": description})
    connected = []
    for status in supervisor.statuses():
        tools = by_server.get(status.name, [])
        connected.append({"name": status.name, "tools_count": len(tools), "tools": tools,
                          "connected": status.state == "ready", "state": status.state,
                          "last_error": mask_urls(status.last_error), "restarts": status.restarts,
                          "protocol_version": status.protocol_version, "pid": status.pid,
                          "lock": status.lock, "unlocked": dict(status.unlocked)})
    return {"configured": masked(config).get("mcp_servers", []), "connected": connected}


class McpToolSource:
    """The supervised servers' tools as the kernel's registry sees them
    (``runtime.ports.ToolSource``)."""

    def __init__(self, supervisor: McpSupervisor) -> None:
        self.supervisor = supervisor

    def tools(self) -> list[Tool]:
        return [_as_tool(entry) for entry in self.supervisor.tools()]

    def get(self, name: str) -> Tool | None:
        entry = self.supervisor.tool(name)
        return None if entry is None else _as_tool(entry)

    def owns(self, name: str) -> bool:
        return self.supervisor.owner(name) is not None

    async def wait_for(self, name: str) -> Tool | None:
        entry = await self.supervisor.wait_for(name)
        return None if entry is None else _as_tool(entry)

    async def call(self, name: str, arguments: dict[str, Any], *,
                   timeout_secs: float | None = None) -> ToolResult:
        ran_as: list[str] = []  # the upstream task's id, if the call became one

        def task_moved(state: dict[str, Any]) -> None:
            ran_as[:] = [state["task"]]

        result = await self.supervisor.call(name, arguments, timeout_secs=timeout_secs, on_task=task_moved)
        return ToolResult(result.text(), result.is_error, result.structured_content, result.content,
                          task=ran_as[0] if ran_as else "")


def _as_tool(entry: McpToolEntry) -> Tool:
    return Tool(entry.name, f"[MCP:{entry.server}] {entry.tool.description}".rstrip(), entry.tool.input_schema,
                source="mcp", server=entry.server, original_name=entry.tool.name,
                annotations=entry.tool.annotations if isinstance(entry.tool.annotations, dict) else None)


def _input_methods(entry: McpServerEntry) -> tuple[str, ...]:
    """What tern answers for this server: forms always (put to a person), sampling only
    when ``[mcp_servers.sampling]`` names the model (else it is not even declared)."""
    return ("elicitation/create", "sampling/createMessage") if entry.sampling is not None else ("elicitation/create",)
