"""``tern tools`` and ``tern call``: every tool an agent can call, and one call through
the pipeline, from a kernel booted for the command (MCP servers connected first)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from runtime.cli.common import Commands, all_ready, print_json, status_line, with_kernel
from runtime.errors import UsageError

if TYPE_CHECKING:  # the type only: the kernel is imported when a command runs
    from runtime.kernel.kernel import Kernel


def add_commands(commands: Commands) -> None:
    tools = commands.add("tools", cmd_tools, "connect the configured MCP servers and list every tool")
    tools.add_argument("--json", action="store_true", help="print JSON")
    call = commands.add("call", cmd_call, "call one tool and print its result (exit 1 if it fails)")
    call.add_argument("tool", help="the tool name, e.g. mcp_filesystem_read_file or time_now")
    call.add_argument("--args", metavar="JSON", default="{}", help="the arguments as a JSON object")
    call.add_argument("--timeout", type=float, metavar="SECS", help="override the server's timeout_secs")
    call.add_argument("--json", action="store_true", help="print the whole result as JSON")


def cmd_tools(args: argparse.Namespace) -> int:
    """Every tool with its server and the server's state; exit 1 if a server is not ready."""

    async def work(kernel: Kernel) -> int:
        tools = kernel.registry.tools()
        statuses = kernel.mcp.statuses()
        if args.json:
            print_json({"tools": tools, "servers": statuses,
                         "collisions": [[n.name for n in group] for group in kernel.mcp.collisions]})
            return 0 if all_ready(kernel) else 1
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
        for group in kernel.mcp.collisions:
            print("collision: " + ", ".join(f"{n.server}/{n.tool} -> {n.name}" for n in group))
        return 0 if all_ready(kernel) else 1

    return with_kernel(args, work)


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

    async def work(kernel: Kernel) -> int:
        from runtime.cli.approvals import terminal_ask

        run = kernel.pipeline.run(ask=terminal_ask(kernel.approvals))
        result = await kernel.call_tool(args.tool, arguments, timeout_secs=args.timeout, caller="cli", run=run)
        if args.json:
            print_json(result)
        else:
            print(result.text)
        if result.is_error:
            print(f"tern: {args.tool} reported an error", file=sys.stderr)
        return 1 if result.is_error else 0

    return with_kernel(args, work)
