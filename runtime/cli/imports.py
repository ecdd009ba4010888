"""``tern import``: another format's description of an agent as tern config
(``tern import ossa MANIFEST``). The conversion is ``runtime.config.ossa``; this module
only reads the file, writes the result and prints the warnings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runtime.cli.common import Commands, needs_subcommand
from runtime.errors import ConfigError, UsageError


def add_commands(commands: Commands) -> None:
    group = commands.add("import", needs_subcommand, "turn another format's agent description into tern config")
    sub = commands.group(group, "import_command")
    ossa = sub.add("ossa", cmd_import_ossa,
                   "convert an OSSA agent manifest (manifest.json) into [[agents]], [[mcp_servers]] and "
                   "[[governance.rules]] TOML")
    ossa.add_argument("manifest", help="the manifest JSON file ('-' for stdin)")
    ossa.add_argument("--output", "-o", metavar="PATH",
                      help="write the TOML to PATH, a new file, instead of stdout (it is checked to load first)")
    ossa.add_argument("--append", action="store_true",
                      help="with --output: add to the end of PATH, an existing config, if the result still loads")


def cmd_import_ossa(args: argparse.Namespace) -> int:
    """Print the TOML on stdout, or write it with --output; warnings go to stderr."""
    from runtime.config.ossa import import_ossa

    if args.append and not args.output:
        raise UsageError("--append needs --output PATH: the config to add the agent to")
    label = "<stdin>" if args.manifest == "-" else args.manifest
    text = _read_manifest(args.manifest, label)
    result = import_ossa(text, label, _builtin_tools())
    if not args.output:
        _warn(result.warnings)
        print(result.toml, end="")
        return 0
    path = Path(args.output)
    existing = _existing(path, args.append)
    prefix = "" if not existing else existing + ("\n" if existing.endswith("\n") else "\n\n")
    warnings = result.warnings + _check(prefix, result.toml, path)
    _warn(warnings)
    try:
        with path.open("a" if args.append else "x", encoding="utf-8") as handle:
            handle.write(prefix[len(existing):] + result.toml)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f'{path}: {"added" if existing else "wrote"} agent "{result.agent}"; '
          f"check it with: tern config check {path}")
    return 0


def _read_manifest(name: str, label: str) -> str:
    """At most ``MAX_MANIFEST_BYTES`` of UTF-8 (one more, to know the file is too large)."""
    from runtime.config.ossa import MAX_MANIFEST_BYTES as limit, too_large

    try:
        if name == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(name, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {label}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ConfigError(too_large(label))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {label}: not UTF-8 text (byte {exc.start})") from None


def _builtin_tools() -> list[str]:
    """tern's own tool names, as the kernel registers them (an approval may name one)."""
    from runtime.config import Config
    from runtime.kernel.builtins import register_builtins
    from runtime.kernel.registry import ToolRegistry
    from runtime.kernel.tools_agents import register_agent_tools
    from runtime.kernel.tools_shell import shell_exec_tool

    registry = ToolRegistry()
    register_builtins(registry, Config())
    register_agent_tools(registry, lambda: None)
    return [tool.name for tool in registry.tools()] + [shell_exec_tool([]).name]


def _existing(path: Path, append: bool) -> str:
    """The text already at ``path`` ("" for a new file); refuses to replace a file."""
    if not path.exists():
        return ""
    if not append:
        raise UsageError(f"{path} already exists; add --append to add the agent to it")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"cannot read {path}: it is not UTF-8 text") from None


def _check(prefix: str, toml: str, path: Path) -> list[str]:
    """Refuse (ConfigError, nothing written) unless the file with the import loads, and
    warn when approval rules already in it come first: the first matching rule wins."""
    from runtime.config import parse_config

    label = f"{path} with the import added" if prefix else str(path)
    before = parse_config(prefix, str(path), path.resolve().parent).governance.rules if prefix else []
    parse_config(prefix + toml, label, path.resolve().parent)
    if not before or "[[governance.rules]]" not in toml:
        return []
    return [f"governance.rules: {path} has {len(before)} rules before the imported ones and the first matching "
            "rule wins; move the imported ones up if an earlier rule also matches their tools"]


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        print(f"tern: warning: {warning}", file=sys.stderr)
