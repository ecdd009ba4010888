"""``tern config check|show``: validate and print the configuration."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from runtime.cli.common import Commands, needs_subcommand

if TYPE_CHECKING:  # the type only: nothing heavy at import
    from runtime.config import Config


def add_commands(commands: Commands) -> None:
    config = commands.add("config", needs_subcommand, "check or show the configuration")
    sub = commands.group(config, "config_command")
    check = sub.add("check", cmd_config_check, "validate a config file and summarise it")
    check.add_argument("path", nargs="?", help="the file to check (default: the one tern would use)")
    show = sub.add("show", cmd_config_show, "print the effective config, secrets masked")
    show.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    show.add_argument("--secrets", action="store_true",
                      help="show the file's values as they are: MCP servers' args, env and URLs, keys (for the owner)")


def cmd_config_check(args: argparse.Namespace) -> int:
    from runtime.config import load_config
    from runtime.config.checks import find_warnings, key_warning
    from runtime.host.daemon import api_key

    loaded = load_config(args.path or getattr(args, "config", None))
    config = loaded.config
    lock_lines = _lock_lines(loaded.path, config)  # tern.lock: a bad one stops here as it would stop the boot
    sandbox = _sandbox(config, loaded.label)
    agents = ", ".join(a.name for a in config.agents) or "none"
    servers = ", ".join(f"{s.name} ({s.transport.__struct_config__.tag})" for s in config.mcp_servers) or "none"
    peers = ", ".join(a.name for a in config.a2a.external_agents) or "none"
    print(f"{loaded.label}: OK")
    print(f"  agents ({len(config.agents)}): {agents}")
    print(f"  MCP servers ({len(config.mcp_servers)}): {servers}")
    print(f"  A2A peers ({len(config.a2a.external_agents)}): {peers}")
    if config.triggers:
        shown = ", ".join(f"{t.name} ({t.kind} -> {t.agent})" for t in config.triggers)
        print(f"  triggers ({len(config.triggers)}): {shown}")
    print(f"  listen: {config.server.listen}   state: {config.state.dir}   store: {_store(config)}")
    print(f"  sandbox: {sandbox}")
    for line in lock_lines:
        print(line, file=sys.stderr if line.startswith("warning:") else sys.stdout)
    weak = key_warning(api_key(config))
    if weak:
        print(f"warning: {weak}", file=sys.stderr)
    names = _known_tools(config)
    for problem in _unmatched_rules(config, names):
        print(f"warning: {problem} (a typo? rules name tools by glob; `tern tools` lists them)", file=sys.stderr)
    for problem in find_warnings(config) + _unmatched_globs(config, names):
        print(f"warning: {problem}", file=sys.stderr)
    return 0


def _sandbox(config: Config, label: str) -> str:
    """Which sandbox this host gives shell_exec (``[tools] shell_sandbox``) and what it
    holds; ``ConfigError`` when shell_exec is on and the mode gives none."""
    from runtime.errors import ConfigError
    from runtime.kernel.shell_sandbox import load_problem
    from runtime.net.sandbox import choose, describe

    problem = load_problem(config.tools)
    if problem:
        raise ConfigError(f"{label}: {problem}")
    mode = config.tools.shell_sandbox
    kind, reason = choose(mode)
    if kind is None:
        said = 'off ([tools] shell_sandbox = "off")' if mode == "off" else f"none on this host ({reason})"
    else:
        said = describe(kind, extra=tuple(config.tools.shell_sandbox_paths))
    return said + ("" if config.tools.shell_exec_enabled else " (shell_exec is off)")


def _store(config: Config) -> str:
    """``sqlite``, or ``postgres at host:port/db`` (no user or password; a ``${VAR}`` as written)."""
    if config.state.store != "postgres":
        return config.state.store
    from runtime.pg.pool import where

    url = config.state.postgres_url
    return f"postgres at {url if url.startswith('${') else where(url)}"


def _known_tools(config: Config) -> list[str]:
    """Every tool name a glob could mean before MCP servers connect: built-in, agent,
    script and A2A tools."""
    from runtime.kernel.builtins import register_builtins
    from runtime.kernel.registry import ToolRegistry

    registry = ToolRegistry()
    register_builtins(registry, config)
    names = [t.name for t in registry.tools()] + ["agent_list", "agent_send", "script_list", "script_run",
                                                  "script_reload"]
    return names + [f"a2a_{a.name}" for a in config.a2a.external_agents]


def _unmatched_rules(config: Config, names: list[str]) -> list[str]:
    """[[governance.rules]] whose tool glob can match nothing: not a built-in tool, an
    agent or A2A tool, nor a tool a configured MCP server could offer (those are not
    known until it connects, so any ``mcp_{server}_...`` glob counts)."""
    from runtime.kernel.policy import Policy
    from runtime.mcp.names import agent_tool_name

    agent_tools = [agent_tool_name(a.name) for a in config.agents]
    return Policy(config).unmatched_rules(names + agent_tools, [s.name for s in config.mcp_servers])


def _unmatched_globs(config: Config, names: list[str]) -> list[str]:
    """Agents' ``tools`` and ``[mcp_server] tools`` globs that match no tool, by the
    rule ``_unmatched_rules`` uses: a typo there silently hides a tool."""
    from runtime.kernel.policy import could_be_server_tool
    from runtime.mcp.names import ToolGlobs

    servers = [s.name for s in config.mcp_servers]
    lists = [(f"agents[{i}].tools", a.tools) for i, a in enumerate(config.agents)]
    lists.append(("mcp_server.tools", config.mcp_server.tools))
    warnings = []
    for where, patterns in lists:
        for pattern in patterns:
            if ToolGlobs([pattern]).matches(*names) or any(could_be_server_tool(pattern, s) for s in servers):
                continue
            warnings.append(f"{where}: '{pattern}' matches no tool (a typo? `tern tools` lists them)")
    return warnings


def cmd_config_show(args: argparse.Namespace) -> int:
    from runtime.config import dump_toml, load_config, masked

    loaded = load_config(getattr(args, "config", None))
    if getattr(args, "secrets", False):
        import msgspec

        data = msgspec.to_builtins(loaded.config)
    else:
        data = masked(loaded.config)
    if args.json:
        import json

        print(json.dumps(data, indent=2))
    else:
        print(f"# effective config from {loaded.label} ({'secrets shown' if args.secrets else 'secrets masked'})")
        print(dump_toml(data), end="")
    return 0


def _lock_lines(config_path: Any, config: Config) -> list[str]:
    """What tern.lock pins and how each server is held to it (docs/mcp-lock.md);
    ConfigError for a bad file."""
    from runtime.mcp.client.lock import LockStore, lock_path

    path = lock_path(config_path)
    if path is None or not config.mcp_servers:
        return []
    store = LockStore(path)
    modes: dict[str, list[str]] = {}
    for entry in config.mcp_servers:
        modes.setdefault(store.mode(entry), []).append(entry.name)
    shown = "; ".join(f"{mode}: {', '.join(names)}" for mode, names in sorted(modes.items()))
    if store.lock is None:
        return [f"  tern.lock: none ({shown}; `tern mcp lock` pins the servers)"]
    lines = [f"  tern.lock: {len(store.lock.servers)} servers pinned ({shown})"]
    configured = {entry.name for entry in config.mcp_servers}
    lines += [f"warning: {path} pins MCP server '{name}', which the config does not have: ignored "
              "(`tern mcp lock` drops it)" for name in store.lock.servers if name not in configured]
    return lines
