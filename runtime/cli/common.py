"""What the command modules share: the subcommand helper, JSON output, and a kernel
booted for one command (``with_kernel``). Imports nothing heavy at module level, so
``tern version`` stays lean."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, TypeVar
from collections.abc import Awaitable, Callable

if TYPE_CHECKING:  # the type only: the kernel is imported when a command runs
    from runtime.kernel.kernel import Kernel

__all__ = ["Commands", "Handler", "needs_subcommand", "with_kernel", "print_json", "status_line", "all_ready"]

T = TypeVar("T")
Handler = Callable[[argparse.Namespace], int]


class Commands:
    """Adds subcommands that accept the common options, each with its handler."""

    def __init__(self, parent: Any, common: argparse.ArgumentParser) -> None:
        self.parent = parent
        self.common = common

    def add(self, name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        sub = self.parent.add_parser(name, parents=[self.common], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    def group(self, parser: argparse.ArgumentParser, dest: str) -> Commands:
        """The subcommands of ``parser`` (``tern mcp servers``, say)."""
        return Commands(parser.add_subparsers(dest=dest, metavar="SUBCOMMAND"), self.common)


def needs_subcommand(args: argparse.Namespace) -> int:
    from runtime.errors import UsageError

    raise UsageError(f"'tern {args.command}' needs a subcommand; see 'tern {args.command} --help'")


def with_kernel(args: argparse.Namespace, work: Callable[[Kernel], Awaitable[T]]) -> T:
    """Boot a kernel for one command, wait until every MCP server's first connection
    attempt is over, run ``work(kernel)``, and shut everything down again."""
    import trio

    from runtime.config import load_config
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


def print_json(data: Any) -> None:
    import msgspec

    print(json.dumps(msgspec.to_builtins(data), indent=2, ensure_ascii=False))


def status_line(status: Any) -> str:
    parts = [status.transport, status.state]
    if status.state == "ready":
        parts.append(f"{status.protocol_version}, {status.tool_count} tools")
    if status.restarts:
        parts.append(f"{status.restarts} restarts")
    line = ", ".join(parts)
    return f"{line}: {status.last_error}" if status.last_error and status.state != "ready" else line


def all_ready(kernel: Kernel) -> bool:
    return all(s.state in ("ready", "disabled") for s in kernel.mcp.statuses())
