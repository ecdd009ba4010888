"""``tern keys add|list|remove``: named, scoped API keys kept hashed in the state dir.

``add`` prints the new key once; only its SHA-256, name, scopes and agents are stored
(``host/keystore.py``). The running daemon reads the store at boot and on reload
(``tern reload``). Keys in the config (``[[server.keys]]``) are listed, not changed here.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from runtime.cli.common import Commands, needs_subcommand, print_json


def add_commands(commands: Commands) -> None:
    keys = commands.add("keys", needs_subcommand, "add, list and remove named API keys and their scopes")
    group = commands.group(keys, "keys_command")
    add = group.add("add", cmd_add, "make a key (printed once; only its hash is kept)")
    add.add_argument("name", help="the key's name, as the audit and access logs show it")
    add.add_argument("--scopes", default="", metavar="S,S",
                     help="comma-separated: message tasks approvals mcp metrics audit events card admin "
                          "(default: message,tasks)")
    add.add_argument("--agents", default="*", metavar="A,A", help="the agents it may message (default: every one)")
    listing = group.add("list", cmd_list, "list the keys: names, scopes, agents (never a key)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    remove = group.add("remove", cmd_remove, "forget a key made with tern keys add")
    remove.add_argument("name")


def _config(args: argparse.Namespace) -> Any:
    from runtime.config import load_config
    from runtime.errors import UsageError

    loaded = load_config(getattr(args, "config", None))
    if not loaded.config.state.dir:
        raise UsageError(f"keys are stored in the state directory: set [state] dir in {loaded.label}")
    return loaded.config


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def cmd_add(args: argparse.Namespace) -> int:
    from runtime.host.keystore import add_key

    key = add_key(_config(args), args.name, _split(args.scopes), _split(args.agents))
    print(key)
    print(f"tern: key {args.name!r} added; it is shown only now. A running daemon takes it at `tern reload`.",
          file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from runtime.host.keystore import describe

    rows = describe(_config(args))
    if args.json:
        print_json({"keys": rows})
        return 0
    if not rows:
        print("no keys: only tern's own OS user may call the daemon (see docs/security-model.md)")
    for row in rows:
        print(f"{row['name']:<24}{','.join(row['scopes']):<32}agents {','.join(row['agents']):<16}{row['source']}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from runtime.host.keystore import remove_key

    remove_key(_config(args), args.name)
    print(f"removed {args.name}; a running daemon forgets it at `tern reload`")
    return 0
