"""``tern audit``: read the audit log (one JSON line per tool call and agent message),
check its hash chain and signed checkpoints, and print the public key that checks a copy
elsewhere (docs/audit.md). With a daemon on the state directory, ``tail`` (without
``-f``) and ``verify`` go through its API (``GET /api/audit``, ``/api/audit/verify``:
the daemon reads its own log in a worker thread); ``tail -f`` follows the file itself,
across rotation, either way; ``verify --public-key`` or ``--dir`` reads the files named,
never a daemon's."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from runtime.cli.common import Commands, needs_subcommand
from runtime.cli.remote import add_standalone
from runtime.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path


def add_commands(commands: Commands) -> None:
    audit = commands.add("audit", needs_subcommand, "read and check the audit log (one JSON line per tool call)")
    group = commands.group(audit, "audit_command")
    tail = group.add("tail", cmd_audit_tail, "print the last audit records")
    tail.add_argument("-n", type=int, default=20, metavar="N", help="how many records (default 20)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new records as they come")
    tail.add_argument("--json", action="store_true", help="print the records' raw JSON lines")
    tail.add_argument("--agent", metavar="GLOB", help="only records of these agents (a glob: 'mail*')")
    tail.add_argument("--tool", metavar="GLOB", help="only records of these tools (a glob: 'mcp_github_*')")
    tail.add_argument("--outcome", action="append", metavar="OUTCOME",
                      help="only records with this outcome (ok, denied, tool_error, ...); may be repeated")
    add_standalone(tail)
    verify = group.add("verify", cmd_audit_verify,
                       "check the audit log's hash chain: exit 0 if intact, 1 naming the first record that is not")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument("--public-key", metavar="KEY_OR_FILE",
                        help="check with this public key only (as `tern audit key` prints it, or a file holding it): "
                             "for a copy of the log on another machine, without tern's secret keys")
    verify.add_argument("--dir", metavar="DIR", help="the directory holding the log (audit.jsonl*, audit.checkpoints) "
                                                     "instead of the state directory")
    add_standalone(verify)
    key = group.add("key", cmd_audit_key,
                    "print the public key that signs the audit log's checkpoints (made on first use)")
    add_standalone(key)


def _daemon(args: argparse.Namespace) -> Any:
    from runtime.cli.remote import find_daemon
    from runtime.config import load_config

    return find_daemon(args, load_config(getattr(args, "config", None)).config)


def _log_path(args: argparse.Namespace) -> Path:
    from pathlib import Path

    from runtime.config import load_config

    return Path(load_config(getattr(args, "config", None)).config.state.dir) / "audit.jsonl"


def cmd_audit_key(args: argparse.Namespace) -> int:
    """The signing key's public half, ``ed25519:<hex>``: what ``verify --public-key``
    takes on another machine. The secret half never leaves ``audit-signing.key``."""
    from runtime.crypto import ed25519
    from runtime.kernel.audit import SIGNING_KEY_FILE, load_key
    from runtime.kernel.audit_checkpoints import format_public

    path = _log_path(args)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    seed = load_key(path.with_name(SIGNING_KEY_FILE), create=True, what="audit signing key")
    assert seed is not None
    print(format_public(ed25519.public_key(seed)))
    return 0


def _public_key(text: str) -> bytes:
    """``--public-key``: the key itself, or a file holding it."""
    from pathlib import Path

    from runtime.kernel.audit_checkpoints import BadPublicKey, parse_public

    candidate = Path(text).expanduser()
    if candidate.is_file():
        try:
            text = candidate.read_text(errors="replace")[:1024]
        except OSError as exc:
            raise UsageError(f"cannot read the public key file {candidate}: {exc.strerror or exc}") from None
    try:
        return parse_public(text)
    except BadPublicKey as exc:
        raise UsageError(f"--public-key: {exc}") from None


def cmd_audit_verify(args: argparse.Namespace) -> int:
    """Walk every file of the log, oldest first, recompute each record's hash and chain
    value, and check the signed checkpoints against them."""
    import msgspec

    from runtime.cli.common import print_json
    from runtime.kernel.audit import log_files, verify_log

    public = _public_key(args.public_key) if args.public_key else None
    daemon = None if public is not None or args.dir else _daemon(args)
    if daemon is not None:
        from runtime.kernel.audit_chain import Report

        report = msgspec.convert(daemon.call("GET", "/api/audit/verify", timeout=300.0), Report)
    else:
        if args.dir:
            from pathlib import Path

            path = Path(args.dir).expanduser() / "audit.jsonl"
            if not path.parent.is_dir():
                raise UsageError(f"--dir: {path.parent} is not a directory")
        else:
            path = _log_path(args)
        if not log_files(path):
            raise UsageError(f"no audit log at {path}")
        report = verify_log(path, public)
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
    """The last N records (of every file, newest last); with -f, new ones as they come
    (across rotation: a replaced file is reopened). Printing into a pipe that closed
    (``| head -1``) ends quietly."""
    try:
        return _tail(args)
    except BrokenPipeError:
        _quiet_stdout()
        return 0


def _tail(args: argparse.Namespace) -> int:
    import os
    import time

    from runtime.kernel.audit import RecordFilter, last_records, log_files

    show = _raw if args.json else _human
    daemon = None if args.follow else _daemon(args)
    if daemon is not None:
        from urllib.parse import urlencode

        query = urlencode([("n", max(args.n, 0)), *(("agent", args.agent),) * bool(args.agent),
                           *(("tool", args.tool),) * bool(args.tool), *(("outcome", o) for o in args.outcome or ())])
        for record in daemon.call("GET", f"/api/audit?{query}")["records"]:
            print(show(record.encode() + b"\n"), flush=True)
        return 0
    path = _log_path(args)
    files = log_files(path)
    if not files and not args.follow:
        raise UsageError(f"no audit log yet at {path}")
    keep = RecordFilter(args.agent, args.tool, args.outcome)
    handle = path.open("rb") if path.exists() else None  # opened first: no record slips between history and -f
    inode = os.fstat(handle.fileno()).st_ino if handle is not None else None
    last = last_records(path, args.n, keep, handle)
    for line in last:
        print(show(line), flush=True)
    while args.follow:
        line = handle.readline() if handle is not None else b""
        if line.endswith(b"\n"):
            if keep(line):
                print(show(line), flush=True)
            continue
        if line:  # a record still being written: read it whole next time
            handle.seek(-len(line), os.SEEK_CUR)  # type: ignore[union-attr]
        time.sleep(0.2)
        try:
            current = path.stat().st_ino
        except FileNotFoundError:
            continue
        if current != inode:  # rotated (or first created): read the new file from its start
            if handle is not None:
                for rest in handle:
                    if keep(rest):
                        print(show(rest), flush=True)
                handle.close()
            handle, inode = path.open("rb"), current
    return 0


def _raw(line: bytes) -> str:
    return line.decode("utf-8", "replace").rstrip("\n")


def _human(line: bytes) -> str:
    """One record as a line a person reads: local time with its offset, kind, agent,
    tool, outcome, duration, and the error text if the record has one. Text from the
    record has its control characters escaped, so it cannot rewrite the terminal."""
    from datetime import datetime

    from runtime.kernel.audit import parse_record
    from runtime.log import clean

    record = parse_record(line)
    if record is None:
        return "unreadable line: " + clean(_raw(line))
    moment = record.get("time")
    try:
        when = datetime.fromtimestamp(moment).astimezone().isoformat(timespec="milliseconds")  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):
        when = "(no time)"
    seq = record.get("seq")
    parts = [when, f"#{seq}"] if isinstance(seq, int) else [when]
    parts.append(str(record.get("kind", "?")))
    for key in ("agent", "tool", "outcome"):
        value = record.get(key)
        if value not in (None, ""):
            parts.append(f"{key}={value}")
    if isinstance(record.get("ms"), (int, float)):
        parts.append(f"{record['ms']:g} ms")
    text = " ".join(parts)
    error = record.get("error")
    if error not in (None, ""):
        text += f": {error}"
    return clean(text)


def _quiet_stdout() -> None:
    """stdout's reader is gone: point it at /dev/null, so the interpreter's last flush at
    exit finds nowhere to fail either."""
    import os
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
