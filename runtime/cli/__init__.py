"""The ``tern`` command line: argument parsing and human output only.

One module per command group (``config``, ``serve``, ``mcp``, ``auth``, ``setup``, ``daemon``, ``agents``,
``conversations``, ``approvals``, ``keys``, ``scripts``, ``a2a``, ``audit``, ``tools``, ``triggers``, ``imports``,
``cache``, ``completion``), each adding
its own subcommands with their handlers. The modules import nothing heavy at their top; every handler imports what it
needs, so ``tern version`` loads nothing but argparse and these modules, and ``tern mcp``
does not pay for the HTTP stack. Errors reach the user as one line on stderr
(``tern: ...``) with a meaningful exit code: 2 for a bad config or command line, 130 for
Ctrl-C; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn
from collections.abc import Sequence

from runtime import __version__
from runtime.cli import (a2a, agents, approvals, audit, auth, cache, completion, config, conversations, daemon, imports,
                         install, keys, mcp, scripts, serve, setup, tools, triggers)
from runtime.cli.common import Commands, Handler

__all__ = ["main", "build_parser"]

# the order of `tern --help`
GROUPS = (config, serve, mcp, auth, setup, daemon, agents, conversations, approvals, keys, scripts, a2a, audit, tools,
          triggers, imports, cache, completion, install)


def _common_options() -> argparse.ArgumentParser:
    """Options accepted both before and after the subcommand (``tern -v x`` and ``tern x -v``)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS,
                        help="config file (default: $TERN_CONFIG, ./config.toml, the user config dir, "
                             "then the bundled default)")
    common.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=argparse.SUPPRESS,
                        help="log verbosity on stderr (default: warning; debug logs every protocol message)")
    common.add_argument("--log-format", choices=("text", "json"), default=argparse.SUPPRESS,
                        help="log line format (default: text)")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks for errors")
    common.add_argument("--url", metavar="URL", default=argparse.SUPPRESS,
                        help="the daemon to talk to (default: $TERN_URL, else the one on this config's state "
                             "directory); its key from $TERN_API_KEY or the config's api_key_env")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog="tern", parents=[common],
        description="tern: an edge agent runtime that speaks MCP and A2A, client and server.")
    parser.add_argument("--version", action="version", version=f"tern {__version__}")
    commands = Commands(parser.add_subparsers(dest="command", metavar="COMMAND"), common)
    commands.add("version", cmd_version, "print tern's version")
    for group in GROUPS:
        group.add_commands(commands)
    return parser


def cmd_version(args: argparse.Namespace) -> int:
    print(f"tern {__version__}")
    return 0


# --- Entry point ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run one tern command and exit with its status."""
    args = build_parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        build_parser().print_help(sys.stderr)
        sys.exit(2)
    if handler is not cmd_version:
        from runtime.log import setup_logging

        setup_logging(getattr(args, "log_level", "warning"), getattr(args, "log_format", "text"))
    try:
        code = handler(args)
        sys.stdout.flush()  # here, where a closed pipe is still ours to answer (not at interpreter exit)
        sys.exit(code)
    except KeyboardInterrupt:
        print("tern: interrupted", file=sys.stderr)
        sys.exit(130)
    except BaseException as exc:  # noqa: BLE001 - the one place errors become exit codes
        if isinstance(exc, SystemExit):
            raise
        sys.exit(_report(exc, debug))


def _reader_left() -> int:
    """The reader of stdout went away (``tern status | head -1``): that is how a pipe
    ends, not an error. Point stdout at /dev/null so the exit's flush cannot fail, and
    exit 0."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def _report(exc: BaseException, debug: bool) -> int:
    """Print an error as one line (plus traceback with --debug); return the exit code."""
    from runtime.errors import TernError, single_leaf

    leaf = single_leaf(exc)
    if isinstance(leaf, BrokenPipeError):
        return _reader_left()
    if isinstance(leaf, KeyboardInterrupt):
        print("tern: interrupted", file=sys.stderr)
        return 130
    if debug:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    from runtime.log import clean  # an error often quotes a peer (a server's error_description): escaped

    if isinstance(leaf, TernError):
        print(f"tern: {clean(str(leaf))}", file=sys.stderr)
        return leaf.exit_code
    print(f"tern: internal error: {type(leaf).__name__}: {clean(str(leaf))}"
          f"{'' if debug else ' (run with --debug for the traceback)'}", file=sys.stderr)
    return 70
