"""Finding, reading and decoding config.toml into a checked Config.

Search order (first hit wins): ``--config PATH``, ``$TERN_CONFIG``, ``./config.toml``,
the user config directory (``~/.config/tern/config.toml`` and platform equivalents),
then the default bundled with tern. Relative paths inside a file resolve against the
file's directory; inside the bundled default, against the state directory.

``config.toml`` is a common name (a Hugo site, an editor's workspace), and tern is run
from any directory, often by a desktop assistant. So a ``./config.toml`` that does not
look like tern's is skipped with a one-line warning, and the search goes on; a named
file (``--config``, ``$TERN_CONFIG``) and the user config directory's are always
tern's and checked strictly. Looks like tern's: it has a section only tern uses
(``agents``, ``mcp_servers``, ``mcp_server``, ``a2a``, ``governance``, ``scripts``), or
only sections tern has whose contents decode as tern's (``[server] port = 8080`` is
some other server's; an empty file is tern's). So a typo inside a real tern config
still stops tern with its one line.

Bounds: a file over ``MAX_CONFIG_BYTES`` is refused before it is parsed (never read
whole), and so is one nested deeper than ``wire.depth.MAX_DEPTH`` (the one nesting bound
tern reads anything with: tables, inline tables and arrays alike), with one line each,
never an ``internal error`` from a recursion further on.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from runtime.config.checks import client_cert_problems, find_problems
from runtime.config.schema import Config, StdioTransport
from runtime.config.sentences import explain, toml_syntax
from runtime.errors import ConfigError
from runtime.log import get_logger
from runtime.wire.depth import MAX_DEPTH

__all__ = [
    "BUNDLED_LABEL",
    "MAX_CONFIG_BYTES",
    "LoadedConfig",
    "bundled_config_text",
    "find_config",
    "foreign_config",
    "load_config",
    "parse_config",
    "user_config_dir",
    "user_state_dir",
]


MAX_CONFIG_BYTES = 1024 * 1024  # a config of a thousand agents is a few hundred KiB


class LoadedConfig(NamedTuple):
    """A validated config and where it came from (``label`` is what messages show)."""

    config: Config
    label: str
    path: Path | None


def user_config_dir() -> Path:
    """The per-user config directory, following each platform's convention."""
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming") / "tern"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "tern"
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "tern"


def user_state_dir() -> Path:
    """The per-user state directory: the default for ``[state] dir``."""
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "tern" / "State"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "tern" / "state"
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "tern"


BUNDLED_LABEL = "<bundled config.toml>"
TERN_ONLY_SECTIONS = frozenset({"agents", "mcp_servers", "mcp_server", "a2a", "governance", "scripts"})
_TERN_HEADER = re.compile(r"^\s*\[\[?\s*(" + "|".join(sorted(TERN_ONLY_SECTIONS)) + r")\s*[\].]", re.M)

log = get_logger("config")


def bundled_config_text() -> str:
    """The default config shipped with tern (in the pyz or the wheel, else the checkout)."""
    from importlib.resources import files

    try:
        return (files("runtime") / "default_config.toml").read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        checkout = Path(__file__).resolve().parents[2] / "config.toml"
        return checkout.read_text(encoding="utf-8")


_SKIPPED_SAID: set[str] = set()  # foreign config.toml files this process has already said it skips


def find_config(explicit: str | None = None) -> Path | None:
    """The config file to use, or None for the bundled default.

    An explicitly named file (flag or ``$TERN_CONFIG``) must exist; the implicit
    locations are only tried.
    """
    named = explicit or os.environ.get("TERN_CONFIG")
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            source = "--config" if explicit else "TERN_CONFIG"
            raise ConfigError(f"{named}: no such config file (from {source})")
        return path
    local = Path("config.toml")
    if local.is_file():
        why = foreign_config(local)
        if not why:
            return local
        if str(local.resolve()) not in _SKIPPED_SAID:  # a command may look more than once: say it once
            _SKIPPED_SAID.add(str(local.resolve()))
            log.warning("skipping %s: not a tern config (%s); name it with --config to use it", local.resolve(), why)
    user = user_config_dir() / "config.toml"
    return user if user.is_file() else None


def foreign_config(path: Path) -> str:
    """Why ``path`` does not look like a tern config, or "" if it does (see the module
    docstring). A file that cannot be read is tern's: loading it says what is wrong."""
    try:
        text = _read_text(path)
    except (OSError, UnicodeDecodeError, ConfigError):
        return ""
    try:
        raw = _toml_loads(text)
    except ConfigError:
        return ""  # too deep: tern's or not, loading it says so
    except ValueError as exc:
        return "" if _TERN_HEADER.search(text) else f"not TOML tern can read: {toml_syntax(str(exc))}"
    keys = set(raw)
    if keys & TERN_ONLY_SECTIONS:
        return ""
    unknown = sorted(keys - set(Config.__struct_fields__))
    if unknown:
        shown = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        return f"tern has no {shown}"
    try:  # only sections other programs use too ([server], [security], [tools], [state]): are they tern's?
        msgspec.convert(raw, Config, strict=True)
    except msgspec.ValidationError as exc:
        return explain(str(exc), raw)
    return ""


def load_config(explicit: str | None = None) -> LoadedConfig:
    """Find, read, decode and validate the config. Raises ConfigError (one line)."""
    path = find_config(explicit)
    if path is None:
        return LoadedConfig(parse_config(bundled_config_text(), BUNDLED_LABEL, None), BUNDLED_LABEL, None)
    label = str(path)
    try:
        text = _read_text(path)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{label}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read: {exc.strerror or exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    config = parse_config(text, label, path.resolve().parent)
    _not_itself(config, label, path)
    return LoadedConfig(config, label, path)


def _not_itself(config: Config, label: str, path: Path) -> None:
    """ConfigError for an ``[[mcp_servers]]`` entry that starts tern on this very config
    (``config.itself``): tern would start tern after tern, each booting the next."""
    from runtime.config.itself import itself
    from runtime.config.schema import StdioTransport

    for i, server in enumerate(config.mcp_servers):
        transport = server.transport
        if isinstance(transport, StdioTransport) and itself(transport.command, transport.args, transport.cwd, path):
            raise ConfigError(f"{label}: mcp_servers[{i}] ({server.name!r}) starts tern on this config: tern would "
                              "start tern after tern without end. Remove it (tern's agents are tern's already; "
                              "`tern mcp` belongs in an assistant's config), or name another config with --config")


def _read_text(path: Path) -> str:
    """The file's text (newlines as ``read_text`` gives them), at most ``MAX_CONFIG_BYTES``
    read: ConfigError (without the label) for a longer one."""
    with open(path, "rb") as file:
        data = file.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"the file is larger than a config may be ({MAX_CONFIG_BYTES // 1024 // 1024} MiB)")
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _toml_loads(text: str) -> dict[str, Any]:
    """tomllib from 3.11; tomli (its origin, a dependency there) on 3.10. A document
    nested deeper than ``MAX_DEPTH`` is a ConfigError (without the label): tomllib
    recurses per inline table or array, and what it builds is walked recursively later."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 in CI
        import tomli as tomllib
    try:
        raw = tomllib.loads(text)
    except RecursionError:
        raise ConfigError(_TOO_DEEP) from None
    if _depth(raw) > MAX_DEPTH:
        raise ConfigError(_TOO_DEEP)
    return raw


_TOO_DEEP = f"tables, inline tables or arrays nested more than {MAX_DEPTH} levels deep"


def _depth(value: Any) -> int:
    """How deep tables and arrays nest in ``value`` (a walk with a stack, not recursion);
    it stops counting past ``MAX_DEPTH``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def parse_config(text: str, label: str, base_dir: Path | None) -> Config:
    """Decode TOML text into a validated Config with relative paths resolved.

    ``base_dir`` is the directory relative paths resolve against; None means the
    state directory (used for the bundled default).
    """
    try:
        raw = _toml_loads(text)
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"{label}: {toml_syntax(str(exc))}") from None
    try:
        config = msgspec.convert(raw, Config, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{label}: {explain(str(exc), raw)}") from None
    for problem in find_problems(config):
        raise ConfigError(f"{label}: {problem}")
    config = _resolve_paths(config, base_dir)
    for problem in client_cert_problems(config):
        raise ConfigError(f"{label}: {problem}")
    return config


def _resolve_paths(config: Config, base_dir: Path | None) -> Config:
    """Make every path in the config absolute, against the file's directory."""
    state_dir = Path(config.state.dir).expanduser() if config.state.dir else user_state_dir()
    if not state_dir.is_absolute():
        state_dir = (base_dir or Path.cwd()) / state_dir
    base = base_dir or state_dir

    def absolute(value: str) -> str:
        if not value:
            return value
        path = Path(value).expanduser()
        return str(path if path.is_absolute() else base / path)

    agents = [
        msgspec.structs.replace(
            agent, workspace=absolute(agent.workspace) or str(state_dir / "workspaces" / agent.name))
        for agent in config.agents
    ]

    def certs(entry: Any) -> Any:  # a client certificate and key, for one peer
        return msgspec.structs.replace(entry, tls_client_cert=absolute(entry.tls_client_cert),
                                       tls_client_key=absolute(entry.tls_client_key))

    def mcp_paths(entry: Any) -> Any:
        transport = entry.transport
        if not isinstance(transport, StdioTransport):
            return msgspec.structs.replace(entry, transport=certs(transport))
        return msgspec.structs.replace(entry, transport=msgspec.structs.replace(
            transport, cwd=absolute(transport.cwd), writable=[absolute(p) for p in transport.writable],
            readable=[absolute(p) for p in transport.readable]))

    servers = [mcp_paths(s) for s in config.mcp_servers]
    a2a = msgspec.structs.replace(config.a2a, external_agents=[certs(a) for a in config.a2a.external_agents],
                                  push_webhooks=[certs(h) for h in config.a2a.push_webhooks])
    server = msgspec.structs.replace(config.server, tls_cert=absolute(config.server.tls_cert),
                                     tls_key=absolute(config.server.tls_key))
    tools = msgspec.structs.replace(config.tools,
                                    shell_sandbox_paths=[absolute(p) for p in config.tools.shell_sandbox_paths])
    scripts = msgspec.structs.replace(config.scripts, dir=absolute(config.scripts.dir))
    external = [msgspec.structs.replace(e, card_public_key=absolute(e.card_public_key))
                if e.card_public_key and not e.card_public_key.lstrip().startswith("{") else e
                for e in a2a.external_agents]  # a pinned key: inline JSON, or a file
    a2a = msgspec.structs.replace(a2a, card_signing_key=absolute(config.a2a.card_signing_key), external_agents=external)
    return msgspec.structs.replace(config, agents=agents, mcp_servers=servers, server=server, tools=tools, a2a=a2a,
                                   scripts=scripts, state=msgspec.structs.replace(config.state, dir=str(state_dir)))
