"""The ``tern`` command line: argument parsing and human output only.

Every command imports what it needs inside its own function, so ``tern version`` loads
nothing but this module and argparse, and ``tern mcp`` does not pay for the HTTP stack.
Errors reach the user as one line on stderr (``tern: ...``) with a meaningful exit code:
2 for a bad config or command line, 130 for Ctrl-C; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, NoReturn, Sequence, Union

from runtime import __version__

__all__ = ["main", "build_parser"]

Handler = Callable[[argparse.Namespace], int]


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
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog="tern", parents=[common],
        description="tern: an edge agent runtime that speaks MCP and A2A, client and server.")
    parser.add_argument("--version", action="version", version=f"tern {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, handler: Handler, help_text: str,
                parent: Any = commands) -> argparse.ArgumentParser:
        sub = parent.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    command("version", cmd_version, "print tern's version")

    config = command("config", _needs_subcommand, "check or show the configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    check = command("check", cmd_config_check, "validate a config file and summarise it", config_commands)
    check.add_argument("path", nargs="?", help="the file to check (default: the one tern would use)")
    show = command("show", cmd_config_show, "print the effective config, secrets masked", config_commands)
    show.add_argument("--json", action="store_true", help="print JSON instead of TOML")

    serve = command("serve", cmd_serve, "run the daemon: kernel, MCP client connections, HTTP API, A2A")
    serve.add_argument("--listen", metavar="HOST:PORT", help="override [server] listen")
    mcp = command("mcp", cmd_mcp, "serve tern's agents as MCP tools over stdio (for desktop assistants and IDEs)")
    mcp.add_argument("--standalone", action="store_true",
                     help="serve from an in-process kernel even when a tern daemon is running "
                          "(default: relay to the daemon)")
    mcp_commands = mcp.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND")
    servers = command("servers", _lazy("cmd_mcp_servers"),
                      "connect every configured MCP server and show its state and last error", mcp_commands)
    servers.add_argument("--json", action="store_true", help="print JSON")
    imported = command("import", _lazy("cmd_mcp_import"),
                       "convert a Claude Desktop / Cursor / VS Code mcpServers JSON file to [[mcp_servers]] TOML",
                       mcp_commands)
    imported.add_argument("file", help="the JSON file ('-' for stdin)")

    command("status", _lazy("cmd_status"), "show the running daemon's state (from its discovery file)")
    events = command("events", _lazy("cmd_events"), "print the running daemon's events as they happen")
    events.add_argument("--json", action="store_true", help="one JSON object per line (default: readable lines)")

    run = command("run", _lazy("cmd_run"), "send an agent one message and print its reply")
    run.add_argument("agent", help="the agent's name (see [[agents]] in the config)")
    run.add_argument("message", help="the message ('-' reads it from stdin)")
    run.add_argument("--context", metavar="ID", help="continue this conversation (default: a new one)")
    run.add_argument("--json", action="store_true", help="print the reply as JSON (agent, context_id, text)")

    chat = command("chat", _lazy("cmd_chat"), "talk with an agent interactively (replies streamed, history kept)")
    chat.add_argument("agent", help="the agent's name")
    chat.add_argument("--context", metavar="ID", help="continue this conversation")

    a2a = command("a2a", _needs_subcommand, "talk to an A2A agent: read its card, send it a message, get or "
                                            "cancel a task (any dialect: 0.1, 0.3, 1.0)")
    a2a_commands = a2a.add_subparsers(dest="a2a_command", metavar="SUBCOMMAND")
    a2a_discover = command("discover", _lazy("cmd_a2a_discover", "cli_a2a"),
                           "read an agent's card: name, dialect, endpoint, skills", a2a_commands)
    a2a_send = command("send", _lazy("cmd_a2a_send", "cli_a2a"), "send an agent one message and print its reply",
                       a2a_commands)
    a2a_get = command("get", _lazy("cmd_a2a_get", "cli_a2a"), "show a task: its state and reply", a2a_commands)
    a2a_cancel = command("cancel", _lazy("cmd_a2a_cancel", "cli_a2a"), "cancel a task", a2a_commands)
    for sub in (a2a_discover, a2a_send, a2a_get, a2a_cancel):
        sub.add_argument("url", metavar="URL", help="where the agent's card is: http://host:port, the agent's "
                                                    "URL, or the card's URL")
        if sub is a2a_send:
            sub.add_argument("message", help="the message ('-' reads it from stdin)")
        elif sub is not a2a_discover:
            sub.add_argument("task_id", metavar="TASK_ID", help="the task's id")
        sub.add_argument("--header", action="append", metavar="'NAME: VALUE'",
                         help="send this header with every request, e.g. 'Authorization: Bearer ...' (repeatable)")
        sub.add_argument("--dialect", choices=("0.1", "0.3", "1.0"), help="speak this A2A version "
                                                                          "(default: what the card says)")
        sub.add_argument("--timeout", type=float, metavar="SECS",
                         help="how long to wait (default: [a2a] discovery_timeout_secs, 30 s; a send 300 s)")
        sub.add_argument("--json", action="store_true", help="print JSON")
    a2a_send.add_argument("--stream", action="store_true", help="print the task's events as they come")
    a2a_send.add_argument("--context", metavar="ID", help="continue this conversation (contextId)")
    a2a_send.add_argument("--task", metavar="ID", help="answer this task (one that waits for input)")

    audit = command("audit", _needs_subcommand, "read the audit log (one JSON line per tool call)")
    audit_commands = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND")
    tail = command("tail", _lazy("cmd_audit_tail"), "print the last audit records", audit_commands)
    tail.add_argument("-n", type=int, default=20, metavar="N", help="how many records (default 20)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new records as they come")

    tools = command("tools", _lazy("cmd_tools"), "connect the configured MCP servers and list every tool")
    tools.add_argument("--json", action="store_true", help="print JSON")
    call = command("call", _lazy("cmd_call"), "call one tool and print its result (exit 1 if it fails)")
    call.add_argument("tool", help="the tool name, e.g. mcp_filesystem_read_file or time_now")
    call.add_argument("--args", metavar="JSON", default="{}", help="the arguments as a JSON object")
    call.add_argument("--timeout", type=float, metavar="SECS", help="override the server's timeout_secs")
    call.add_argument("--json", action="store_true", help="print the whole result as JSON")

    cache = command("cache", _needs_subcommand, "manage the per-user cache of the single-file build")
    cache_commands = cache.add_subparsers(dest="cache_command", metavar="SUBCOMMAND")
    command("prune", cmd_cache_prune, "remove extracted native bundles this tern no longer uses", cache_commands)
    return parser


# --- Commands ------------------------------------------------------------------------


def _lazy(name: str, module: str = "cli_tools") -> Handler:
    """A handler from ``runtime.<module>``, imported only when that command runs."""
    def handler(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(f"runtime.{module}"), name)(args))

    handler.__name__ = name
    return handler


def cmd_version(args: argparse.Namespace) -> int:
    print(f"tern {__version__}")
    return 0


def _needs_subcommand(args: argparse.Namespace) -> int:
    from runtime.errors import UsageError

    raise UsageError(f"'tern {args.command}' needs a subcommand; see 'tern {args.command} --help'")


def cmd_config_check(args: argparse.Namespace) -> int:
    from runtime.config import load_config

    loaded = load_config(args.path or getattr(args, "config", None))
    config = loaded.config
    agents = ", ".join(a.name for a in config.agents) or "none"
    servers = ", ".join(f"{s.name} ({s.transport.__struct_config__.tag})" for s in config.mcp_servers) or "none"
    peers = ", ".join(a.name for a in config.a2a.external_agents) or "none"
    print(f"{loaded.label}: OK")
    print(f"  agents ({len(config.agents)}): {agents}")
    print(f"  MCP servers ({len(config.mcp_servers)}): {servers}")
    print(f"  A2A peers ({len(config.a2a.external_agents)}): {peers}")
    print(f"  listen: {config.server.listen}   state: {config.state.dir}")
    return 0


def cmd_config_show(args: argparse.Namespace) -> int:
    from runtime.config import dump_toml, load_config, masked

    loaded = load_config(getattr(args, "config", None))
    data = masked(loaded.config)
    if args.json:
        import json

        print(json.dumps(data, indent=2))
    else:
        print(f"# effective config from {loaded.label} (secrets masked)")
        print(dump_toml(data), end="")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import trio

    from runtime.config import load_config
    from runtime.daemon import serve

    config = load_config(getattr(args, "config", None)).config
    trio.run(serve, config, args.listen)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    import trio

    from runtime.config import load_config
    from runtime.mcp.serve_stdio import serve_stdio

    from runtime.errors import UsageError

    config = load_config(getattr(args, "config", None)).config
    if not config.mcp_server.enabled:
        raise UsageError("the MCP server is off in this config ([mcp_server] enabled = false)")
    trio.run(lambda: serve_stdio(config, relay=False if args.standalone else None))
    return 0


def cmd_cache_prune(args: argparse.Namespace) -> int:
    from runtime import _bundle

    if _bundle.running_manifest() is None:
        print("not running from tern.pyz: every extracted bundle counts as stale "
              "(the next pyz run re-extracts its own)")
    removed = _bundle.prune_cache()
    for path in removed:
        print(f"removed {path}")
    print(f"{len(removed)} stale entr{'y' if len(removed) == 1 else 'ies'} removed from {_bundle.cache_root()}")
    return 0


# --- Entry point ------------------------------------------------------------------------


def main(argv: Union[Sequence[str], None] = None) -> NoReturn:
    """Run one tern command and exit with its status."""
    args = build_parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    handler: Union[Handler, None] = getattr(args, "handler", None)
    if handler is None:
        build_parser().print_help(sys.stderr)
        sys.exit(2)
    if handler is not cmd_version:
        from runtime.log import setup_logging

        setup_logging(getattr(args, "log_level", "warning"), getattr(args, "log_format", "text"))
    try:
        sys.exit(handler(args))
    except KeyboardInterrupt:
        print("tern: interrupted", file=sys.stderr)
        sys.exit(130)
    except BaseException as exc:  # noqa: BLE001 - the one place errors become exit codes
        if isinstance(exc, SystemExit):
            raise
        sys.exit(_report(exc, debug))


def _report(exc: BaseException, debug: bool) -> int:
    """Print an error as one line (plus traceback with --debug); return the exit code."""
    from runtime.errors import TernError, single_leaf

    leaf = single_leaf(exc)
    if isinstance(leaf, KeyboardInterrupt):
        print("tern: interrupted", file=sys.stderr)
        return 130
    if debug:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    if isinstance(leaf, TernError):
        print(f"tern: {leaf}", file=sys.stderr)
        return leaf.exit_code
    print(f"tern: internal error: {type(leaf).__name__}: {leaf}"
          f"{'' if debug else ' (run with --debug for the traceback)'}", file=sys.stderr)
    return 70
