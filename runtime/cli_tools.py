"""CLI commands for people debugging their MCP config: ``tern tools``, ``tern call``,
``tern mcp servers`` and ``tern mcp import``.

Each boots the kernel from the config, waits until every server's first connection
attempt is over (bounded by the largest ``timeout_secs``), does its one thing, and
shuts everything down again (subprocesses included).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Awaitable, Callable, TypeVar

import msgspec

from runtime.config import Config, load_config, masked
from runtime.errors import UsageError

__all__ = ["cmd_tools", "cmd_call", "cmd_mcp_servers", "cmd_mcp_import", "servers_report"]

T = TypeVar("T")


def _with_kernel(args: argparse.Namespace, work: Callable[[Any], Awaitable[T]]) -> T:
    import trio

    from runtime.kernel.kernel import Kernel

    config = load_config(getattr(args, "config", None)).config

    async def main() -> T:
        kernel = Kernel(config)
        async with trio.open_nursery() as nursery:
            await nursery.start(kernel.run)
            await kernel.mcp.wait_settled()
            try:
                return await work(kernel)
            finally:
                nursery.cancel_scope.cancel()

    return trio.run(main)


def _print_json(data: Any) -> None:
    print(json.dumps(msgspec.to_builtins(data), indent=2, ensure_ascii=False))


def _status_line(status: Any) -> str:
    parts = [status.transport, status.state]
    if status.state == "ready":
        parts.append(f"{status.protocol_version}, {status.tool_count} tools")
    if status.restarts:
        parts.append(f"{status.restarts} restarts")
    line = ", ".join(parts)
    return f"{line}: {status.last_error}" if status.last_error and status.state != "ready" else line


def _all_ready(kernel: Any) -> bool:
    return all(s.state in ("ready", "disabled") for s in kernel.mcp.statuses())


def cmd_tools(args: argparse.Namespace) -> int:
    """Every tool with its server and the server's state; exit 1 if a server is not ready."""

    async def work(kernel: Any) -> int:
        tools = kernel.registry.tools()
        statuses = kernel.mcp.statuses()
        if args.json:
            _print_json({"tools": tools, "servers": statuses,
                         "collisions": [[n.name for n in group] for group in kernel.mcp.collisions]})
            return 0 if _all_ready(kernel) else 1
        width = max((len(t.name) for t in tools), default=10) + 2
        builtins = [t for t in tools if t.source == "builtin"]
        print(f"built-in ({len(builtins)} tools)")
        for tool in builtins:
            print(f"  {tool.name:<{width}}{_first_line(tool.description)}")
        for status in statuses:
            print(f"MCP server '{status.name}' ({_status_line(status)})")
            for tool in tools:
                if tool.server == status.name:
                    print(f"  {tool.name:<{width}}{_first_line(tool.description)}")
        for group in kernel.mcp.collisions:
            print("collision: " + ", ".join(f"{n.server}/{n.tool} -> {n.name}" for n in group))
        return 0 if _all_ready(kernel) else 1

    return _with_kernel(args, work)


def _first_line(text: str, limit: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def cmd_call(args: argparse.Namespace) -> int:
    """One call; the text result on stdout; exit 1 when the tool reports an error."""
    try:
        arguments = json.loads(args.args)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args is not valid JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise UsageError("--args must be a JSON object, e.g. --args '{\"path\": \"notes.txt\"}'")

    async def work(kernel: Any) -> int:
        result = await kernel.registry.call(args.tool, arguments, timeout_secs=args.timeout)
        if args.json:
            _print_json(result)
        else:
            print(result.text)
        if result.is_error:
            print(f"tern: {args.tool} reported an error", file=sys.stderr)
        return 1 if result.is_error else 0

    return _with_kernel(args, work)


def servers_report(config: Config, supervisor: Any) -> dict[str, Any]:
    """The seed's ``GET /api/mcp/servers`` shape (``configured``, ``connected``), with
    each server's state, last error and restart count added."""
    by_server: dict[str, list[dict[str, str]]] = {}
    for entry in supervisor.tools():
        description = f"[MCP:{entry.server}] {entry.tool.description}".rstrip()
        by_server.setdefault(entry.server, []).append({"name": entry.name, "description": description})
    connected = []
    for status in supervisor.statuses():
        tools = by_server.get(status.name, [])
        connected.append({"name": status.name, "tools_count": len(tools), "tools": tools,
                          "connected": status.state == "ready", "state": status.state,
                          "last_error": status.last_error, "restarts": status.restarts,
                          "protocol_version": status.protocol_version})
    return {"configured": masked(config).get("mcp_servers", []), "connected": connected}


def cmd_mcp_servers(args: argparse.Namespace) -> int:
    async def work(kernel: Any) -> int:
        if args.json:
            _print_json(servers_report(kernel.config, kernel.mcp))
        else:
            statuses = kernel.mcp.statuses()
            if not statuses:
                print("no [[mcp_servers]] in the config")
            for status in statuses:
                print(f"{status.name}: {_status_line(status)}")
        return 0 if _all_ready(kernel) else 1

    return _with_kernel(args, work)


def cmd_mcp_import(args: argparse.Namespace) -> int:
    """Print the TOML on stdout (append it to config.toml); warnings go to stderr."""
    from runtime.mcp.importer import import_mcp_json

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
