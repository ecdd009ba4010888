"""``tern audit tail``: read the audit log (one JSON line per tool call)."""

from __future__ import annotations

import argparse

from runtime.cli.common import Commands, needs_subcommand
from runtime.errors import UsageError


def add_commands(commands: Commands) -> None:
    audit = commands.add("audit", needs_subcommand, "read the audit log (one JSON line per tool call)")
    tail = commands.group(audit, "audit_command").add("tail", cmd_audit_tail, "print the last audit records")
    tail.add_argument("-n", type=int, default=20, metavar="N", help="how many records (default 20)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new records as they come")


def cmd_audit_tail(args: argparse.Namespace) -> int:
    """The last N records of ``<state dir>/audit.jsonl``; with -f, new ones as they come
    (across rotation: a replaced file is reopened)."""
    import os
    import time
    from collections import deque
    from pathlib import Path

    from runtime.config import load_config

    path = Path(load_config(getattr(args, "config", None)).config.state.dir) / "audit.jsonl"
    if not path.exists() and not args.follow:
        raise UsageError(f"no audit log yet at {path}")
    handle = None
    inode = None
    if path.exists():
        handle = path.open("rb")
        inode = os.fstat(handle.fileno()).st_ino
        for line in deque(handle, maxlen=max(args.n, 0)):
            print(line.decode("utf-8", "replace").rstrip("\n"), flush=True)
    while args.follow:
        line = handle.readline() if handle is not None else b""
        if line:
            print(line.decode("utf-8", "replace").rstrip("\n"), flush=True)
            continue
        time.sleep(0.2)
        try:
            current = path.stat().st_ino
        except FileNotFoundError:
            continue
        if current != inode:  # rotated (or first created): read the new file from its start
            if handle is not None:
                for rest in handle:
                    print(rest.decode("utf-8", "replace").rstrip("\n"), flush=True)
                handle.close()
            handle, inode = path.open("rb"), current
    return 0
