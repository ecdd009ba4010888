"""``tern conversations``: the conversations agents keep (llm agents remember theirs),
most recently used first, and ``tern conversations delete ID`` to forget one. Through
the daemon's API when one runs on the state directory, else on the conversations file
directly, or the shared database with ``[state] store = "postgres"`` (no kernel is
booted either way)."""

from __future__ import annotations

import argparse
from typing import Any

from runtime.cli.common import Commands, print_json
from runtime.cli.remote import add_standalone


def add_commands(commands: Commands) -> None:
    listing = commands.add("conversations", cmd_conversations,
                           "list conversations (most recent first); 'delete ID' forgets one")
    listing.add_argument("--json", action="store_true", help="print JSON")
    add_standalone(listing)
    sub = commands.group(listing, "conversations_command")
    show = sub.add("show", cmd_conversation_show, "print one conversation's messages")
    show.add_argument("id", help="the conversation's context id")
    show.add_argument("--json", action="store_true", help="print JSON")
    add_standalone(show)
    delete = sub.add("delete", cmd_conversation_delete, "forget one conversation")
    delete.add_argument("id", help="the conversation's context id")
    add_standalone(delete)


def _config(args: argparse.Namespace) -> Any:
    from runtime.config import load_config

    return load_config(getattr(args, "config", None)).config


def _daemon(args: argparse.Namespace) -> Any:
    from runtime.cli.remote import find_daemon

    return find_daemon(args, _config(args))



def cmd_conversations(args: argparse.Namespace) -> int:
    """Every conversation, most recently used first: id, agent, messages, last use, and
    how it began."""
    daemon = _daemon(args)
    if daemon is not None:
        listed = daemon.call("GET", "/api/conversations")["conversations"]
    else:
        listed = _on_conversations(args, lambda store: store.list())
    if args.json:
        print_json({"conversations": listed})
        return 0
    if not listed:
        print("no conversations")
        return 0
    import time

    for item in listed:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(item["last"]))
        print(f"{item['context_id']}  {item['agent']:<12} {item['messages']:>4} messages  {when}  {item['preview']}")
    print("resume with: tern chat AGENT --context ID    forget with: tern conversations delete ID")
    return 0


def messages_of(args: argparse.Namespace, context_id: str, daemon: Any = None) -> list[dict[str, Any]]:
    """A conversation's messages, oldest first (role, agent, content, time); [] if none."""
    from runtime.errors import TernError

    if daemon is not None:
        from runtime.cli.remote import quote_path

        try:
            return daemon.call("GET", f"/api/conversations/{quote_path(context_id)}")["messages"]
        except TernError as exc:
            if getattr(exc, "http_status", 0) == 404:
                return []
            raise
    import msgspec

    from runtime.wire.limits import check_id

    check_id(context_id, "the conversation id")
    return msgspec.to_builtins(_on_conversations(args, lambda store: store.history(context_id)))


def cmd_conversation_show(args: argparse.Namespace) -> int:
    from runtime.errors import TernError

    messages = messages_of(args, args.id, _daemon(args))
    if not messages:
        raise TernError(f"no conversation has the id {args.id!r} (see `tern conversations`)")
    if args.json:
        print_json({"context_id": args.id, "messages": messages})
        return 0
    for message in messages:
        who = "you" if message["role"] == "user" else message["agent"]
        print(f"{who}: {printable(message['content'])}")
    return 0


def cmd_conversation_delete(args: argparse.Namespace) -> int:
    from runtime.errors import TernError

    daemon = _daemon(args)
    if daemon is not None:
        from runtime.cli.remote import quote_path

        gone = daemon.call("DELETE", f"/api/conversations/{quote_path(args.id)}")["messages"]
    else:
        from runtime.wire.limits import check_id

        check_id(args.id, "the conversation id")
        gone = _on_conversations(args, lambda store: store.delete(args.id))
        if not gone:
            raise TernError(f"no conversation has the id {args.id!r} (see `tern conversations`)")
    print(f"deleted conversation {args.id} ({gone} message{'s' if gone != 1 else ''})")
    return 0


def _on_conversations(args: argparse.Namespace, work: Any) -> Any:
    """``await work(conversations)`` on the configured store (the file, or PostgreSQL)."""
    from pathlib import Path

    from runtime.cli.local_store import run_on_store
    from runtime.errors import UsageError
    from runtime.kernel.conversations import Conversations

    config = _config(args)
    if not config.state.dir and config.state.store != "postgres":
        raise UsageError("no state directory is configured ([state] dir), so there are no conversations")
    path = Path(config.state.dir) / "conversations.sqlite3" if config.state.dir else None
    return run_on_store(config, lambda db: Conversations(path, db=db), work)


def printable(text: str) -> str:
    """Stored text as a terminal may show it: lines and tabs kept, every other control
    character escaped (a model's reply cannot move the cursor or recolour the screen)."""
    import re

    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]", _escape, text)


def _escape(match: Any) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
