"""``tern run`` and ``tern chat``: talk to an agent from the command line.

With a daemon on the state directory they go through its API (``cli/remote.py``): the
reply streams from ``POST /api/agents/{name}/stream`` and the run shows in ``tern
events``. Otherwise (or with ``--standalone``) a kernel boots in this process. Either
way the text streams to stdout, each tool call shows on stderr as it starts and ends
(``--quiet``: not), and a call that needs approval is asked inline on a terminal.

Chat: the context id is shown at the start (``--context ID`` resumes it); ``/help``,
``/new``, ``/exit``. Ctrl-C at the prompt leaves at once (exit 130); Ctrl-C during a
reply cancels that reply (in the daemon too: hanging up cancels the run) and returns to
the prompt.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from runtime.cli.common import Commands, TextOut, print_json, with_kernel
from runtime.cli.remote import add_standalone

if TYPE_CHECKING:  # the type only: the kernel is imported when a command runs
    from runtime.kernel.kernel import Kernel

CHAT_HELP = """commands:
  /help   this list
  /new    start a new conversation (a new context id)
  /exit   leave (also /quit, Ctrl-D, or Ctrl-C at the prompt)
Ctrl-C while a reply comes cancels that reply."""


def add_commands(commands: Commands) -> None:
    run = commands.add("run", cmd_run, "send an agent one message and print its reply")
    run.add_argument("agent", help="the agent's name (see [[agents]] in the config)")
    run.add_argument("message", help="the message ('-' reads it from stdin)")
    run.add_argument("--context", metavar="ID", help="continue this conversation (default: a new one)")
    run.add_argument("--json", action="store_true", help="print the reply as JSON (agent, context_id, text)")
    run.add_argument("-q", "--quiet", action="store_true", help="do not show tool calls on stderr")
    run.add_argument("--no-wait", action="store_true",
                     help="a call that needs a person's approval fails at once, its request denied and named (for "
                          "scripts: nothing waits approval_timeout_secs)")
    add_standalone(run)
    chat = commands.add("chat", cmd_chat, "talk with an agent interactively (replies streamed, history kept)")
    chat.add_argument("agent", help="the agent's name")
    chat.add_argument("--context", metavar="ID", help="continue this conversation (its id is shown at the start)")
    chat.add_argument("-q", "--quiet", action="store_true", help="do not show tool calls on stderr")
    add_standalone(chat)


def _daemon(args: argparse.Namespace) -> Any:
    from runtime.cli.remote import find_daemon
    from runtime.config import load_config

    return find_daemon(args, load_config(getattr(args, "config", None)).config)


def _finish(reply: dict[str, Any], out: TextOut, as_json: bool) -> None:
    if as_json:
        print_json(reply)
    elif not out.pieces:
        print(reply["text"])
    else:
        out.end_line()


def cmd_run(args: argparse.Namespace) -> int:
    """One message to one agent; the reply streams to stdout as it comes (exit 1 if the
    agent cannot answer: an AgentError, reported by ``_report``)."""
    message = sys.stdin.read() if args.message == "-" else args.message
    daemon = _daemon(args)
    out = TextOut(enabled=not args.json)
    if daemon is not None:
        reply = _send_through(daemon, args.agent, message, args.context, out, args.quiet, args.no_wait)
        _finish(reply, out, args.json)
        return 0

    async def work(kernel: Kernel) -> int:
        import msgspec

        reply = await _send_here(kernel, args.agent, message, args.context, out, args.quiet, args.no_wait)
        _finish(msgspec.to_builtins(reply), out, args.json)
        return 0

    return with_kernel(args, work)


def _send_through(daemon: Any, agent: str, message: str, context_id: str | None, out: TextOut,
                  quiet: bool, no_wait: bool = False) -> dict[str, Any]:
    from runtime.cli.remote import follow, quote_path

    body: dict[str, Any] = {"message": message}
    if context_id:
        body["context_id"] = context_id
    stream = daemon.stream(f"/api/agents/{quote_path(agent)}/stream", body)
    try:
        return follow(daemon, stream, out, quiet=quiet, no_wait=no_wait)
    finally:
        stream.close()


async def _send_here(kernel: Kernel, agent: str, message: str, context_id: str | None, out: TextOut,
                     quiet: bool, no_wait: bool = False) -> Any:
    from runtime.cli.approvals import terminal_ask

    return await kernel.agents.send(agent, message, context_id=context_id, on_text=out,
                                    ask=terminal_ask(kernel.approvals, before=out.end_line, no_wait=no_wait),
                                    on_tool=lambda event: out.tool(event, quiet))


# --- chat -------------------------------------------------------------------------------


class _Chat:
    """What both chat loops share: the context, the banner, the slash commands."""

    def __init__(self, args: argparse.Namespace) -> None:
        import os

        self.agent = args.agent
        self.quiet = args.quiet
        self.context_id = args.context or os.urandom(16).hex()
        self.resumed = bool(args.context)

    def banner(self, history: list[dict[str, Any]] | None = None) -> None:
        """Who, which context, how to come back; when resuming, the last exchange (so the
        person knows where they left off)."""
        from runtime.cli.conversations import printable

        how = "resuming" if self.resumed else "new conversation"
        if self.resumed:
            how += f" ({len(history or [])} messages so far)"
        for message in (history or [])[-2:]:
            who = "you" if message["role"] == "user" else message["agent"]
            line = " ".join(str(message["content"]).split())
            print(f"{who}: {printable(line[:197] + '...' if len(line) > 200 else line)}", file=sys.stderr)
        print(f"tern: chatting with {self.agent}; {how}, context {self.context_id}\n"
              f"tern: resume later with: tern chat {self.agent} --context {self.context_id}\n"
              "tern: /help for commands; Ctrl-D, /exit or Ctrl-C at the prompt to leave", file=sys.stderr, flush=True)

    def take(self, line: str | None) -> str:
        """What a line from the prompt asks for: "leave" (end of input, ``/exit``),
        "next" (a slash command done here, or an empty line) or "send" (a message)."""
        if line is None:
            return "leave"
        word = line.strip()
        if word in ("/exit", "/quit"):
            return "leave"
        if word == "/help":
            print(CHAT_HELP, file=sys.stderr, flush=True)
        elif word == "/new":
            import os

            self.context_id, self.resumed = os.urandom(16).hex(), False
            print(f"tern: new conversation, context {self.context_id}", file=sys.stderr, flush=True)
        elif word.startswith("/") and " " not in word:
            print(f"tern: no command {word}; /help lists them", file=sys.stderr, flush=True)
        elif word:
            return "send"
        return "next"


def _prompt() -> str | None:
    """The next line from the person; None at end of input. Ctrl-C is not caught here:
    at the prompt it leaves (exit 130)."""
    try:
        return input("> ")
    except EOFError:
        print(file=sys.stderr)
        return None


def _prompt_in_thread() -> str | None:
    """:func:`_prompt` in a helper thread, waited for in short slices. CPython checks for
    signals only between reads: a Ctrl-C that lands after the prompt is printed but before
    the read starts would wait for the next key. Waiting here sees it within 0.2 s. Only on
    a terminal: there input() reads below Python's file locks, so a thread still reading when
    tern exits cannot hold up the interpreter's shutdown."""
    import queue
    import threading

    from runtime.cli.remote import start_without_signals

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return _prompt()

    answer: queue.Queue[tuple[bool, Any]] = queue.Queue(1)

    def read() -> None:
        try:
            answer.put((True, _prompt()))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as it is
            answer.put((False, exc))

    start_without_signals(threading.Thread(target=read, name="tern-prompt", daemon=True))
    while True:
        try:
            done, value = answer.get(timeout=0.2)
        except queue.Empty:
            continue
        if done:
            return value
        raise value


def cmd_chat(args: argparse.Namespace) -> int:
    """An interactive conversation: one context, replies streamed; Ctrl-D or /exit ends it."""
    daemon = _daemon(args)
    if daemon is not None:
        return _chat_through(daemon, args)
    return _chat_here(args)


def _chat_through(daemon: Any, args: argparse.Namespace) -> int:
    from runtime.errors import TernError

    chat = _Chat(args)
    agents = daemon.call("GET", "/api/agents")["agents"]  # an unknown agent fails before the first prompt
    if chat.agent not in [a["name"] for a in agents]:
        raise TernError(f"no agent named {chat.agent!r} (agents: {', '.join(a['name'] for a in agents) or 'none'})")
    if chat.resumed:
        from runtime.cli.conversations import messages_of

        chat.banner(messages_of(args, chat.context_id, daemon))
    else:
        chat.banner()
    while True:
        line = _prompt_in_thread()  # Ctrl-C here: exit 130
        action = chat.take(line)
        if action == "leave":
            return 0
        if action == "next":
            continue
        out = TextOut()
        try:
            reply = _send_through(daemon, chat.agent, line, chat.context_id, out, chat.quiet)
        except KeyboardInterrupt:  # hanging up (the stream's close) cancelled the run in the daemon
            out.end_line()
            print("tern: reply cancelled", file=sys.stderr, flush=True)
            continue
        except TernError as exc:
            out.end_line()
            print(f"tern: {exc}", file=sys.stderr, flush=True)
            continue
        chat.context_id = reply["context_id"]
        _finish(reply, out, False)


def _chat_here(args: argparse.Namespace) -> int:
    import signal

    import trio

    from runtime.errors import TernError

    chat = _Chat(args)

    async def work(kernel: Kernel) -> int:
        kernel.agents.get(chat.agent)  # an unknown agent fails before the first prompt
        history = None
        if chat.resumed and kernel.conversations is not None:
            import msgspec

            history = msgspec.to_builtins(await kernel.conversations.history(chat.context_id))
        chat.banner(history)
        while True:
            line = await trio.to_thread.run_sync(_prompt, abandon_on_cancel=True)  # Ctrl-C here: exit 130
            action = chat.take(line)
            if action == "leave":
                return 0
            if action == "next":
                continue
            out, reply = TextOut(), None
            with trio.open_signal_receiver(signal.SIGINT) as interrupts:  # Ctrl-C now: cancel this reply only
                async with trio.open_nursery() as nursery:
                    async def cancel_on_interrupt() -> None:
                        async for _ in interrupts:
                            nursery.cancel_scope.cancel()
                            return

                    nursery.start_soon(cancel_on_interrupt)
                    try:
                        reply = await _send_here(kernel, chat.agent, line, chat.context_id, out, chat.quiet)
                    except TernError as exc:
                        out.end_line()
                        print(f"tern: {exc}", file=sys.stderr, flush=True)
                    nursery.cancel_scope.cancel()
            if nursery.cancel_scope.cancelled_caught and reply is None:
                out.end_line()
                print("tern: reply cancelled", file=sys.stderr, flush=True)
                continue
            if reply is not None:
                import msgspec

                chat.context_id = reply.context_id
                _finish(msgspec.to_builtins(reply), out, False)

    return with_kernel(args, work)
