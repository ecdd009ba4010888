"""``tern serve``: the daemon (kernel, MCP client connections, HTTP API, A2A)."""

from __future__ import annotations

import argparse

from runtime.cli.common import Commands


def add_commands(commands: Commands) -> None:
    serve = commands.add("serve", cmd_serve, "run the daemon: kernel, MCP client connections, HTTP API, A2A")
    serve.add_argument("--listen", metavar="HOST:PORT", help="override [server] listen")


def cmd_serve(args: argparse.Namespace) -> int:
    import trio

    from runtime.config import load_config
    from runtime.host.daemon import serve

    loaded = load_config(getattr(args, "config", None))
    path = loaded.path.resolve() if loaded.path is not None else None  # re-read on SIGHUP (tern reload)
    trio.run(lambda: serve(loaded.config, args.listen, config_path=path))
    return 0
