"""``tern scripts list|approve|revoke``: the administrator's side of approved scripts.

An approval records the SHA-256 of a script's bytes as they are when ``approve`` runs
(``--sha256`` makes it refuse unless they are the bytes you reviewed) in
``<state dir>/scripts.sqlite3``; editing the file makes it pending again. Each approval
and revocation is also an audit record (``script_approved``, ``script_revoked``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from runtime.cli.common import Commands, needs_subcommand, print_json


def add_commands(commands: Commands) -> None:
    scripts = commands.add("scripts", needs_subcommand,
                           "list, approve and revoke the scripts agents may run ([scripts] dir)")
    group = commands.group(scripts, "scripts_command")
    listing = group.add("list", cmd_list, "list the scripts with their sha256 and status")
    listing.add_argument("--json", action="store_true", help="print JSON")
    approve = group.add("approve", cmd_approve, "approve a script's current content (its sha256)")
    approve.add_argument("name", help="the script's file name in [scripts] dir")
    approve.add_argument("--sha256", metavar="HEX",
                         help="refuse unless the script's content has this sha256 (the content you reviewed)")
    revoke = group.add("revoke", cmd_revoke, "revoke a script's approval (it becomes pending)")
    revoke.add_argument("name", help="the script's file name")


def _config(args: argparse.Namespace) -> Any:
    from runtime.config import load_config
    from runtime.errors import UsageError

    loaded = load_config(getattr(args, "config", None))
    if not loaded.config.scripts.dir:
        raise UsageError(f"scripts are off: set [scripts] dir in {loaded.label}")
    return loaded.config


def _who() -> str:
    """The OS user running the command, from the uid (not $USER, which anyone can set)."""
    import getpass
    import os

    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # Windows, or a uid with no passwd entry (a bare container)
        pass
    try:
        return getpass.getuser()
    except (KeyError, OSError, ImportError):
        return f"uid {os.getuid()}"


def _audit(config: Any) -> Any:
    from pathlib import Path

    from runtime.errors import StorageError
    from runtime.kernel.audit import AuditLog

    audit = AuditLog(Path(config.state.dir) / "audit.jsonl")
    if config.security.audit_required and not audit.probe():
        raise StorageError(f"nothing changed: the audit log cannot be written ({audit.error}) "
                           "and [security] audit_required is on")
    return audit


def _recorded(audit: Any, kind: str, **fields: Any) -> None:
    if audit.record(kind, **fields):
        audit.checkpoint()  # this process ends soon: its record is signed before it goes
    else:
        print(f"tern: warning: the audit log {audit.path} could not be written ({audit.error})", file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    import time

    from runtime.kernel.script_files import short
    from runtime.kernel.tools_scripts import Scripts

    config = _config(args)
    found, statuses, approvals = Scripts(config).listing(reload=True)
    rows = []
    for script in found.scripts:
        approval = approvals.get(script.name)
        current = approval is not None and approval.sha256 == script.sha256
        rows.append({"name": script.name, "sha256": script.sha256, "status": statuses[script.name],
                     "approved_at": approval.approved_at if current else None,
                     "approved_by": approval.approved_by if current else None})
    if args.json:
        print_json({"dir": config.scripts.dir, "scripts": rows,
                    "skipped": [{"name": name, "reason": why} for name, why in found.skipped], "more": found.more})
        return 0
    if not rows:
        print(f"no scripts in {config.scripts.dir}")
    width = max((len(name) for name in [*(row["name"] for row in rows), *(n for n, _ in found.skipped)]),
                default=4) + 2
    for row in rows:
        line = f"{row['name']:<{width}}{row['status']:<13}{short(row['sha256'])}"
        if row["approved_at"]:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["approved_at"]))
            line += f"  approved {when} by {row['approved_by']}"
        print(line)
    for name, why in found.skipped:
        print(f"{name:<{width}}skipped: {why}")
    if found.more:
        print(f"[{found.more} more entries not listed]")
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    """Hash the script as it is now, record that hash, audit it; print the hash."""
    import os

    from runtime.errors import ToolRefused, UsageError
    from runtime.kernel.script_approvals import Approvals
    from runtime.kernel.script_files import NoSuchScript, check_name, hash_script, open_directory, with_hint

    config = _config(args)
    name = check_name(args.name)
    expected = (args.sha256 or "").strip().lower()
    if expected and (len(expected) != 64 or any(c not in "0123456789abcdef" for c in expected)):
        raise UsageError("--sha256 takes 64 hex characters")
    fd = open_directory(config.scripts.dir)
    try:
        sha256 = hash_script(fd, name)
    except NoSuchScript as missing:
        raise with_hint(fd, name, missing, see="tern scripts list") from None
    finally:
        os.close(fd)
    if expected and sha256 != expected:
        raise ToolRefused(f"script '{name}' now has sha256 {sha256}, not the one given: nothing approved")
    audit = _audit(config)
    who = _who()
    Approvals(config.state.dir).approve(name, sha256, who)
    _recorded(audit, "script_approved", script=name, sha256=sha256, by=who)
    print(f"approved {name}: sha256 {sha256}")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    from runtime.errors import ToolRefused
    from runtime.kernel.script_approvals import Approvals
    from runtime.kernel.script_files import check_name

    config = _config(args)
    name = check_name(args.name)
    audit = _audit(config)
    revoked = Approvals(config.state.dir).revoke(name)
    if revoked is None:
        raise ToolRefused(f"no approval of script '{name}' is recorded")
    who = _who()
    _recorded(audit, "script_revoked", script=name, sha256=revoked.sha256, by=who)
    print(f"revoked {name}: sha256 {revoked.sha256} is no longer approved")
    if name in config.scripts.allow:
        print(f"note: [scripts] allow in the config still pins a sha256 for {name}")
    return 0
