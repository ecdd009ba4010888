"""``tern tools`` and ``tern call``: every tool an agent can call, and one call through
the pipeline: through the daemon's API when one runs on the state directory (its MCP
servers are connected already, and the call shows in ``tern events``), else from a
kernel booted for the command (MCP servers connected first)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from types import SimpleNamespace

from runtime.cli.common import Commands, all_ready, print_json, status_line, with_kernel
from runtime.cli.remote import add_standalone
from runtime.errors import UsageError

if TYPE_CHECKING:  # the type only: the kernel is imported when a command runs
    from runtime.kernel.kernel import Kernel


def add_commands(commands: Commands) -> None:
    tools = commands.add("tools", cmd_tools, "connect the configured MCP servers and list every tool")
    tools.add_argument("--json", action="store_true", help="print JSON")
    add_standalone(tools)
    call = commands.add("call", cmd_call, "call one tool and print its result (exit 1 if it fails)")
    call.add_argument("tool", help="the tool name, e.g. mcp_filesystem_read_file or time_now")
    call.add_argument("--args", metavar="JSON", default="{}", help="the arguments as a JSON object")
    call.add_argument("--timeout", type=float, metavar="SECS", help="override the server's timeout_secs")
    call.add_argument("--json", action="store_true", help="print the whole result as JSON")
    call.add_argument("--no-wait", action="store_true",
                      help="a call that needs a person's approval fails at once, its request denied and named (for "
                          "scripts: nothing waits approval_timeout_secs)")
    add_standalone(call)


def _daemon(args: argparse.Namespace) -> Any:
    from runtime.cli.remote import find_daemon
    from runtime.config import load_config

    return find_daemon(args, load_config(getattr(args, "config", None)).config)


def cmd_tools(args: argparse.Namespace) -> int:
    """Every tool with its server and the server's state; exit 1 if a server is not ready."""
    daemon = _daemon(args)
    if daemon is not None:
        listing = daemon.call("GET", "/api/tools")
        if args.json:
            print_json(listing)
        else:
            _print_tools([SimpleNamespace(**t) for t in listing["tools"]],
                         [SimpleNamespace(**s) for s in listing["servers"]], listing["collisions"])
        return 0 if all(s["state"] in ("ready", "disabled") for s in listing["servers"]) else 1

    async def work(kernel: Kernel) -> int:
        tools = kernel.registry.tools()
        statuses = kernel.mcp.statuses()
        collisions = [[n.name for n in group] for group in kernel.mcp.collisions]
        if args.json:
            print_json({"tools": tools, "servers": statuses, "collisions": collisions})
        else:
            _print_tools(tools, statuses, collisions)
        return 0 if all_ready(kernel) else 1

    return with_kernel(args, work)


def _print_tools(tools: list[Any], statuses: list[Any], collisions: list[list[str]]) -> None:
    width = max((len(t.name) for t in tools), default=10) + 2
    builtins = [t for t in tools if t.source == "builtin"]
    print(f"built-in ({len(builtins)} tools)")
    for tool in builtins:
        print(f"  {tool.name:<{width}}{_first_line(tool.description)}")
    for status in statuses:
        print(f"MCP server '{status.name}' ({status_line(status)})")
        for tool in tools:
            if tool.server == status.name:
                print(f"  {tool.name:<{width}}{_first_line(tool.description)}")
    by_name = {t.name: t for t in tools}
    for group in collisions:
        shown = [f"{by_name[n].server}/{by_name[n].original_name} -> {n}" if n in by_name else n for n in group]
        print("collision: " + ", ".join(shown))


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

    daemon = _daemon(args)
    if daemon is not None:
        from runtime.cli.common import TextOut
        from runtime.cli.remote import follow, quote_path

        stream = daemon.stream(f"/api/tools/{quote_path(args.tool)}/call",
                               {"arguments": arguments, "timeout_secs": args.timeout})
        try:
            return _show_result(args, follow(daemon, stream, TextOut(), quiet=True, no_wait=args.no_wait))
        finally:
            stream.close()

    async def work(kernel: Kernel) -> int:
        import msgspec

        from runtime.cli.approvals import terminal_ask

        run = kernel.pipeline.run(ask=terminal_ask(kernel.approvals, no_wait=args.no_wait))
        result = await kernel.call_tool(args.tool, arguments, timeout_secs=args.timeout, caller="cli", run=run)
        return _show_result(args, msgspec.to_builtins(result))

    return with_kernel(args, work)


def _show_result(args: argparse.Namespace, result: dict[str, Any]) -> int:
    if args.json:
        print_json(result)
    else:
        print(result["text"])
    if result["is_error"]:
        print(f"tern: {args.tool} reported an error", file=sys.stderr)
    return 1 if result["is_error"] else 0
