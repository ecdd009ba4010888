"""``tern config check|show``: validate and print the configuration."""

from __future__ import annotations

import argparse
import sys

from runtime.cli.common import Commands, needs_subcommand


def add_commands(commands: Commands) -> None:
    config = commands.add("config", needs_subcommand, "check or show the configuration")
    sub = commands.group(config, "config_command")
    check = sub.add("check", cmd_config_check, "validate a config file and summarise it")
    check.add_argument("path", nargs="?", help="the file to check (default: the one tern would use)")
    show = sub.add("show", cmd_config_show, "print the effective config, secrets masked")
    show.add_argument("--json", action="store_true", help="print JSON instead of TOML")


def cmd_config_check(args: argparse.Namespace) -> int:
    from runtime.config import load_config
    from runtime.config.checks import key_warning
    from runtime.host.daemon import api_key

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
    weak = key_warning(api_key(config))
    if weak:
        print(f"warning: {weak}", file=sys.stderr)
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
