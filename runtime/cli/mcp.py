"""``tern mcp``: tern's agents as MCP tools over stdio; ``tern mcp servers``,
``tern mcp import`` and ``tern mcp lock`` (tern.lock: docs/mcp-lock.md) for people
setting up their MCP servers."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from runtime.cli.common import Commands, all_ready, print_json, status_line, with_kernel
from runtime.cli.remote import add_standalone
from runtime.errors import UsageError

if TYPE_CHECKING:  # the type only: the kernel is imported when a command runs
    from runtime.kernel.kernel import Kernel


def add_commands(commands: Commands) -> None:
    mcp = commands.add("mcp", cmd_mcp, "serve tern's agents as MCP tools over stdio (for desktop assistants and IDEs)")
    mcp.add_argument("--standalone", action="store_true", default=argparse.SUPPRESS,
                     help="serve from an in-process kernel even when a tern daemon is running "
                          "(default: relay to the daemon)")
    sub = commands.group(mcp, "mcp_command")
    servers = sub.add("servers", cmd_mcp_servers,
                      "connect every configured MCP server and show its state and last error")
    servers.add_argument("--json", action="store_true", help="print JSON")
    add_standalone(servers)
    imported = sub.add("import", cmd_mcp_import,
                       "convert a Claude Desktop / Cursor / VS Code mcpServers JSON file to [[mcp_servers]] TOML")
    imported.add_argument("file", help="the JSON file ('-' for stdin)")
    locking = sub.add("lock", cmd_mcp_lock,
                      "connect the MCP servers and pin their sources and tool definitions in tern.lock "
                      "(beside the config): a tool that changes later waits for a person's approval")
    locking.add_argument("names", nargs="*", metavar="NAME",
                         help="only these servers (the others keep what the file pins); default: every enabled one")
    restart = sub.add("restart", cmd_mcp_restart,
                      "reconnect one MCP server of the running daemon (a failed one is revived)")
    restart.add_argument("name", help="the MCP server's name")
    restart.add_argument("--timeout", type=float, default=60.0, metavar="SECS",
                         help="how long to wait for it to be ready (default: 60; 0: do not wait)")


def cmd_mcp(args: argparse.Namespace) -> int:
    import trio

    from runtime.config import load_config
    from runtime.host.mcp_stdio import serve_stdio

    from runtime.errors import UsageError

    loaded = load_config(getattr(args, "config", None))
    config = loaded.config
    if not config.mcp_server.enabled:
        raise UsageError("the MCP server is off in this config ([mcp_server] enabled = false)")
    trio.run(lambda: serve_stdio(config, relay=False if getattr(args, "standalone", False) else None,
                                 config_path=loaded.path))
    return 0


def cmd_mcp_servers(args: argparse.Namespace) -> int:
    """Through the daemon when one runs (its servers, as they are now), else connect them here."""
    from types import SimpleNamespace

    from runtime.cli.remote import find_daemon
    from runtime.config import load_config

    daemon = find_daemon(args, load_config(getattr(args, "config", None)).config)
    if daemon is not None:
        if args.json:
            print_json(daemon.call("GET", "/api/mcp/servers"))
            return 0 if all(s["state"] in ("ready", "disabled") for s in daemon.call("GET", "/api/tools")["servers"]) \
                else 1
        statuses = daemon.call("GET", "/api/tools")["servers"]
        if not statuses:
            print("no [[mcp_servers]] in the config")
        for status in statuses:
            print(f"{status['name']}: {status_line(SimpleNamespace(**status))}")
        return 0 if all(s["state"] in ("ready", "disabled") for s in statuses) else 1

    from runtime.mcp.client.supervisor import servers_report

    async def work(kernel: Kernel) -> int:
        if args.json:
            print_json(servers_report(kernel.config, kernel.mcp))
        else:
            statuses = kernel.mcp.statuses()
            if not statuses:
                print("no [[mcp_servers]] in the config")
            for status in statuses:
                print(f"{status.name}: {status_line(status)}")
        return 0 if all_ready(kernel) else 1

    return with_kernel(args, work)


def cmd_mcp_import(args: argparse.Namespace) -> int:
    """Print the TOML on stdout (append it to config.toml); warnings go to stderr."""
    from runtime.config.mcp_import import import_mcp_json

    if args.file == "-":
        text, label = sys.stdin.read(), "<stdin>"
    else:
        try:
            with open(args.file, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise UsageError(f"cannot read {args.file}: it is not UTF-8 text") from None
        label = args.file
    result = import_mcp_json(text, label)
    for warning in result.warnings:
        print(f"tern: warning: {warning}", file=sys.stderr)
    print(result.toml, end="" if result.toml.endswith("\n") else "\n")
    return 0


def cmd_mcp_lock(args: argparse.Namespace) -> int:
    """Connect the servers here (never through a daemon: it holds changed tools back,
    and the lock pins what the servers offer), then write tern.lock atomically. Exit 1
    when a server could not be locked (it keeps what the file had for it)."""
    import msgspec
    import trio

    from runtime.config import load_config
    from runtime.errors import ConfigError
    from runtime.mcp.client import lock as mcp_lock
    from runtime.mcp.client.supervisor import McpSupervisor
    from runtime.net.guard import AddressPolicy

    loaded = load_config(getattr(args, "config", None))
    config, path = loaded.config, mcp_lock.lock_path(loaded.path)
    if path is None:
        raise UsageError("tern.lock sits beside a config file, and this is the bundled default: name one with "
                         "--config (or $TERN_CONFIG)")
    configured = {entry.name: entry for entry in config.mcp_servers}
    unknown = [name for name in args.names if name not in configured]
    if unknown:
        raise UsageError(f"no MCP server named {', '.join(map(repr, unknown))} in {loaded.label} "
                         f"(servers: {', '.join(configured) or 'none configured'})")
    try:
        old = mcp_lock.read_lock(path) or mcp_lock.LockFile()
    except ConfigError as exc:
        if args.names:
            raise
        print(f"tern: warning: {exc}: replacing it", file=sys.stderr)
        old = mcp_lock.LockFile()
    entries = [entry for entry in config.mcp_servers if entry.enabled and (not args.names or entry.name in args.names)]

    async def connect() -> tuple[McpSupervisor, dict[str, Any]]:
        supervisor = McpSupervisor(entries, policy=AddressPolicy.from_security(config.security),
                                   state_dir=config.state.dir)
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            await supervisor.wait_settled()
            statuses = {status.name: msgspec.structs.replace(status) for status in supervisor.statuses()}
            nursery.cancel_scope.cancel()
        return supervisor, statuses

    supervisor, statuses = trio.run(connect)
    servers = {name: entry for name, entry in old.servers.items() if name in configured}
    failed = 0
    for entry in entries:
        status = statuses[entry.name]
        if status.state != "ready":
            failed += 1
            kept = " (tern.lock keeps what it had for it)" if entry.name in servers else ""
            print(f"tern: {entry.name}: not locked: it is {status.state}"
                  f"{': ' + status.last_error if status.last_error else ''}{kept}", file=sys.stderr)
            continue
        tools = {}
        for tool in supervisor.listed(entry.name):
            shape = mcp_lock.definition(tool)
            tools[tool.name] = mcp_lock.LockedTool(mcp_lock.digest(shape), shape)
        source = mcp_lock.source_of(entry)
        servers[entry.name] = mcp_lock.LockedServer(source, tools)
        print(f"{entry.name}: {len(tools)} tools, {_source_line(source)}")
        unpinned = _unpinned(source)
        if unpinned:
            print(f"tern: warning: {entry.name}: {unpinned}", file=sys.stderr)
    dropped = [name for name in old.servers if name not in configured]
    if dropped:
        print(f"tern: dropped {', '.join(dropped)} from tern.lock: not in the config", file=sys.stderr)
    try:
        mcp_lock.write_lock(path, mcp_lock.LockFile(mcp_lock.FORMAT, servers))
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"wrote {path} ({len(servers)} servers); a running daemon applies it at `tern reload`")
    return 1 if failed else 0


def _source_line(source: dict[str, str]) -> str:
    if source.get("kind") == "command":
        return f"command {source.get('path')} (sha256 {source.get('sha256', '')[:12]}...)"
    if source.get("kind") == "url":
        return f"remote {source.get('url')}"
    return f"{source.get('kind')} package {source.get('package')}"


def _unpinned(source: dict[str, str]) -> str:
    """A package spec without a version: the next release runs, and only its tools' definitions are checked."""
    package = source.get("package", "")
    if source.get("kind") == "npm" and "@" not in package.lstrip("@"):
        return f"the package {package} names no version: pin it ({package}@VERSION) so a new release is not run"
    if source.get("kind") == "pypi" and not any(mark in package for mark in ("==", "@")):
        return f"the package {package} names no version: pin it ({package}==VERSION) so a new release is not run"
    return ""


def cmd_mcp_restart(args: argparse.Namespace) -> int:
    """``POST /api/mcp/servers/{name}/restart`` on the running daemon, then wait until the
    server is ready or has failed again; exit 0 only when it is ready."""
    import trio

    from runtime.cli.daemon import _daemon
    from runtime.errors import TernError

    record, headers, _ = _daemon(args)
    base = record["url"]

    async def restart() -> dict:
        import httpx

        from runtime.net.guard import AddressPolicy
        from runtime.net.outbound import make_client

        async with make_client(AddressPolicy(), timeout=10.0) as client:
            try:
                response = await client.post(f"{base}/api/mcp/servers/{args.name}/restart", headers=headers)
                if response.status_code != 200:
                    message = response.json().get("error", {}).get("message", response.text[:200])
                    raise TernError(message)
                status = response.json()
                with trio.move_on_after(max(args.timeout, 0.0)):
                    while status["state"] in ("connecting", "restarting"):
                        await trio.sleep(0.2)
                        listed = (await client.get(f"{base}/api/mcp/servers", headers=headers)).json()
                        status = next(s for s in listed["connected"] if s["name"] == args.name)
            except httpx.HTTPError as exc:
                raise TernError(f"the daemon at {base} does not answer: {exc}") from None
        return status

    status = trio.run(restart)
    error = f": {status['last_error']}" if status.get("last_error") and status["state"] != "ready" else ""
    print(f"{args.name}: {status['state']}{error}")
    return 0 if status["state"] == "ready" else 1
