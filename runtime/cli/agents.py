"""``tern run`` and ``tern chat``: talk to an agent from the command line."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from runtime.cli.approvals import terminal_ask
from runtime.cli.common import Commands, print_json, with_kernel

if TYPE_CHECKING:  # the type only: the kernel is imported when a command runs
    from runtime.kernel.kernel import Kernel


def add_commands(commands: Commands) -> None:
    run = commands.add("run", cmd_run, "send an agent one message and print its reply")
    run.add_argument("agent", help="the agent's name (see [[agents]] in the config)")
    run.add_argument("message", help="the message ('-' reads it from stdin)")
    run.add_argument("--context", metavar="ID", help="continue this conversation (default: a new one)")
    run.add_argument("--json", action="store_true", help="print the reply as JSON (agent, context_id, text)")
    chat = commands.add("chat", cmd_chat, "talk with an agent interactively (replies streamed, history kept)")
    chat.add_argument("agent", help="the agent's name")
    chat.add_argument("--context", metavar="ID", help="continue this conversation")


def cmd_run(args: argparse.Namespace) -> int:
    """One message to one agent; the reply streams to stdout as it comes (exit 1 if the
    agent cannot answer: an AgentError, reported by ``_report``)."""
    message = sys.stdin.read() if args.message == "-" else args.message

    async def work(kernel: Kernel) -> int:
        streamed: list[str] = []

        def show(piece: str) -> None:
            streamed.append(piece)
            if not args.json:
                sys.stdout.write(piece)
                sys.stdout.flush()

        reply = await kernel.agents.send(args.agent, message, context_id=args.context, on_text=show,
                                         ask=terminal_ask(kernel.approvals))
        if args.json:
            print_json(reply)
        elif not streamed:
            print(reply.text)
        elif not streamed[-1].endswith("\n"):
            print()
        return 0

    return with_kernel(args, work)


def cmd_chat(args: argparse.Namespace) -> int:
    """An interactive conversation: one context, replies streamed; Ctrl-D or /quit ends it."""
    import trio

    from runtime.errors import AgentError

    async def work(kernel: Kernel) -> int:
        kernel.agents.get(args.agent)  # an unknown agent fails before the first prompt
        context_id = args.context
        print(f"chatting with {args.agent} (Ctrl-D or /quit to end)", file=sys.stderr)
        while True:
            try:
                line = await trio.to_thread.run_sync(input, "> ")
            except EOFError:
                print(file=sys.stderr)
                return 0
            if line.strip() in ("/quit", "/exit"):
                return 0
            if not line.strip():
                continue
            streamed: list[str] = []

            def show(piece: str) -> None:
                streamed.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()

            try:
                reply = await kernel.agents.send(args.agent, line, context_id=context_id, on_text=show,
                                                 ask=terminal_ask(kernel.approvals))
            except AgentError as exc:
                print(f"tern: {exc}", file=sys.stderr)
                continue
            context_id = reply.context_id
            if not streamed:
                print(reply.text)
            elif not streamed[-1].endswith("\n"):
                print()

    return with_kernel(args, work)
