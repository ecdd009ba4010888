"""``tern conversations``: the conversations agents keep (llm agents remember theirs),
most recently used first, and ``tern conversations delete ID`` to forget one. Through
the daemon's API when one runs on the state directory, else on the conversations file
directly (no kernel is booted either way)."""

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
        listed = _local_conversations(args).list()
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


def cmd_conversation_delete(args: argparse.Namespace) -> int:
    from runtime.errors import TernError

    daemon = _daemon(args)
    if daemon is not None:
        from runtime.cli.remote import quote_path

        gone = daemon.call("DELETE", f"/api/conversations/{quote_path(args.id)}")["messages"]
    else:
        from runtime.wire.limits import check_id

        check_id(args.id, "the conversation id")
        gone = _local_conversations(args).delete(args.id)
        if not gone:
            raise TernError(f"no conversation has the id {args.id!r} (see `tern conversations`)")
    print(f"deleted conversation {args.id} ({gone} message{'s' if gone != 1 else ''})")
    return 0


def _local_conversations(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from runtime.errors import UsageError
    from runtime.kernel.conversations import Conversations

    config = _config(args)
    if not config.state.dir:
        raise UsageError("no state directory is configured ([state] dir), so there are no conversations")
    return Conversations(Path(config.state.dir) / "conversations.sqlite3")
