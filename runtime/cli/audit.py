"""``tern audit``: read the audit log (one JSON line per tool call and agent message) and
check its hash chain."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from runtime.cli.common import Commands, needs_subcommand
from runtime.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path


def add_commands(commands: Commands) -> None:
    audit = commands.add("audit", needs_subcommand, "read and check the audit log (one JSON line per tool call)")
    group = commands.group(audit, "audit_command")
    tail = group.add("tail", cmd_audit_tail, "print the last audit records")
    tail.add_argument("-n", type=int, default=20, metavar="N", help="how many records (default 20)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new records as they come")
    verify = group.add("verify", cmd_audit_verify,
                       "check the audit log's hash chain: exit 0 if intact, 1 naming the first record that is not")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")


def _log_path(args: argparse.Namespace) -> Path:
    from pathlib import Path

    from runtime.config import load_config

    return Path(load_config(getattr(args, "config", None)).config.state.dir) / "audit.jsonl"


def cmd_audit_verify(args: argparse.Namespace) -> int:
    """Walk every file of the log, oldest first, and recompute each record's chain value."""
    import msgspec

    from runtime.cli.common import print_json
    from runtime.kernel.audit import log_files, verify_log

    path = _log_path(args)
    if not log_files(path):
        raise UsageError(f"no audit log yet at {path}")
    report = verify_log(path)
    if args.json:
        print_json({"summary": report.summary(), **msgspec.to_builtins(report)})
        return 0 if report.ok else 1
    print(report.summary())
    for problem in report.problems[1:10]:
        print(f"  also: {problem.message}")
    if report.problem_count > 10:
        print(f"  ... and {report.problem_count - 10} more")
    if report.stopped:
        print("  checking stopped at the last of these: the records after it cannot be linked to the ones before")
    return 0 if report.ok else 1


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
