"""What the command modules share: the subcommand helper, JSON output, a kernel
booted for one command (``with_kernel``), and how a run's output reaches a person
(``TextOut``, ``tool_line``), the same whether the run is in-process or in the daemon.
Imports nothing heavy at module level, so ``tern version`` stays lean."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, TypeVar
from collections.abc import Awaitable, Callable

if TYPE_CHECKING:  # the type only: the kernel is imported when a command runs
    from runtime.kernel.kernel import Kernel

__all__ = ["Commands", "Handler", "needs_subcommand", "with_kernel", "print_json", "status_line", "all_ready",
           "TextOut", "tool_line", "MCP_PATIENCE_SECS"]

MCP_PATIENCE_SECS = 0.5  # an in-process command waiting longer than this for MCP servers says which

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
    attempt is over, run ``work(kernel)``, and shut everything down again. A wait past
    ``MCP_PATIENCE_SECS`` names the servers on stderr (a person should not stare at a
    silent terminal while npx downloads a server), unless ``--quiet``."""
    import trio

    from runtime.config import load_config
    from runtime.host.traces import traces
    from runtime.kernel.kernel import Kernel

    from runtime.mcp.client.lock import lock_path

    loaded = load_config(getattr(args, "config", None))
    config = loaded.config

    async def main() -> T:
        import sys

        kernel = Kernel(config, lock_path=lock_path(loaded.path))
        kernel.mcp.approve_tools = None  # one command's kernel: a held tool is not put to a person (it names them)
        async with traces(config), trio.open_nursery() as nursery:
            await nursery.start(kernel.run)
            await kernel.mcp.wait_settled(MCP_PATIENCE_SECS)
            waiting = [s.name for s in kernel.mcp.statuses() if s.state == "connecting"]
            if waiting and not getattr(args, "quiet", False):
                print(f"tern: waiting for MCP server{'s' if len(waiting) > 1 else ''} {', '.join(waiting)} "
                      "(a running `tern serve` keeps them connected)", file=sys.stderr, flush=True)
            await kernel.mcp.wait_settled()
            for status in kernel.mcp.statuses():
                if status.unlocked and status.lock == "enforce" and not getattr(args, "quiet", False):
                    held = ", ".join(f"{name} ({state})" for name, state in sorted(status.unlocked.items()))
                    print(f"tern: MCP server '{status.name}' holds back {held}: not as tern.lock pins them; a "
                          f"running `tern serve` asks a person to approve them, or pin them with `tern mcp lock "
                          f"{status.name}`", file=sys.stderr, flush=True)
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
    unlocked = getattr(status, "unlocked", None)
    if unlocked:  # tern.lock: drifted or new tools (held back under lock = "enforce")
        verb = "offered anyway" if getattr(status, "lock", "") == "warn" else "held for approval"
        parts.append(f"{verb}: " + ", ".join(f"{name} {state}" for name, state in sorted(unlocked.items())))
    line = ", ".join(parts)
    return f"{line}: {status.last_error}" if status.last_error and status.state != "ready" else line


def all_ready(kernel: Kernel) -> bool:
    return all(s.state in ("ready", "disabled") for s in kernel.mcp.statuses())


class TextOut:
    """A run's text on stdout as it comes, remembering whether the last piece ended its
    line (so a tool line on stderr starts on a line of its own, and the reply ends with
    one newline)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.pieces = 0
        self.mid_line = False

    def __call__(self, piece: str) -> None:
        if not piece:
            return
        self.pieces += 1
        if self.enabled:
            import sys

            sys.stdout.write(piece)
            sys.stdout.flush()
            self.mid_line = not piece.endswith("\n")

    def end_line(self) -> None:
        if self.mid_line:
            import sys

            sys.stdout.write("\n")
            sys.stdout.flush()
            self.mid_line = False

    def tool(self, event: dict[str, Any], quiet: bool = False) -> None:
        """Show a tool call's start or end on stderr (not with ``--quiet``)."""
        if quiet:
            return
        import sys

        self.end_line()
        print(tool_line(event), file=sys.stderr, flush=True)


def tool_line(event: dict[str, Any]) -> str:
    """One line for a person: ``[tool] NAME ARGS`` as a call starts, ``[tool] NAME: OUTCOME
    in DURATION`` (and why, if it failed) as it ends. Peer text is escaped."""
    from runtime.log import clean

    name = str(event.get("tool", "?"))
    if event.get("phase") == "start":
        return clean(f"[tool] {name} {event.get('arguments', '')}")
    ms = event.get("ms")
    took = "" if not isinstance(ms, (int, float)) else f" in {ms / 1000:.1f} s" if ms >= 1000 else f" in {ms:.0f} ms"
    error = str(event.get("error") or "").strip().splitlines()
    return clean(f"[tool] {name}: {event.get('outcome', '?')}{took}{': ' + error[0][:160] if error else ''}")
