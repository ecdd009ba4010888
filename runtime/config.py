"""config.toml, decoded straight into msgspec Structs.

Why Structs: the file is checked once at the edge (unknown keys rejected, types exact),
and everything past this module works with typed, immutable values. A bad file gives
one line naming the file, the key path and what was expected, for example::

    config.toml: mcp_servers[1].transport.type: expected "stdio", "http" or "sse", got "tcp"

Array indices in key paths count from 0, the order of the ``[[...]]`` blocks in the
file. Values of secret-bearing keys are never echoed.

Search order (first hit wins): ``--config PATH``, ``$TERN_CONFIG``, ``./config.toml``,
the user config directory (``~/.config/tern/config.toml`` and platform equivalents),
then the default bundled with tern. Relative paths inside a file resolve against the
file's directory; inside the bundled default, against the state directory.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Literal, NamedTuple, Union

import msgspec

from runtime.errors import ConfigError

__all__ = [
    "Config",
    "ServerConfig",
    "McpServerEntry",
    "StdioTransport",
    "HttpTransport",
    "SseTransport",
    "McpServerExposure",
    "A2aConfig",
    "ExternalAgent",
    "AgentConfig",
    "ModelConfig",
    "ToolsConfig",
    "SecurityConfig",
    "StateConfig",
    "LoadedConfig",
    "find_config",
    "load_config",
    "parse_config",
    "bundled_config_text",
    "user_config_dir",
    "user_state_dir",
    "parse_listen",
    "masked",
    "dump_toml",
    "SECRET_MASK",
]

MiB = 1024 * 1024


class _Section(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base of every config table: unknown keys are errors, values are immutable."""


# --- [server] -----------------------------------------------------------------------


class ServerConfig(_Section):
    """The daemon's HTTP server (A2A, POST /mcp, the API)."""

    listen: str = "127.0.0.1:50051"
    api_key: str = ""
    api_key_env: str = ""
    allow_unauthenticated_remote: bool = False
    rate_limit_per_sec: float = 50.0  # per client address; 0 turns rate limiting off
    rate_limit_burst: int = 100
    max_body_bytes: int = 10 * MiB
    max_header_bytes: int = 16 * 1024
    max_connections: int = 1000
    request_head_timeout_secs: float = 10.0
    keep_alive_timeout_secs: float = 5.0
    write_timeout_secs: float = 30.0
    shutdown_grace_secs: float = 10.0
    tls_cert: str = ""
    tls_key: str = ""
    cors_origins: list[str] = []
    allowed_hosts: list[str] = []


# --- [[mcp_servers]] ------------------------------------------------------------------


class StdioTransport(_Section, tag="stdio", tag_field="type"):
    """A local MCP server started as a subprocess; newline-delimited JSON on stdio."""

    command: str
    args: list[str] = []
    cwd: str = ""


class HttpTransport(_Section, tag="http", tag_field="type"):
    """A Streamable HTTP MCP server. Header values may name variables: ``${TOKEN}``."""

    url: str
    headers: dict[str, str] = {}


class SseTransport(_Section, tag="sse", tag_field="type"):
    """A legacy (2024-11-05) HTTP+SSE MCP server."""

    url: str
    headers: dict[str, str] = {}


McpTransport = Union[StdioTransport, HttpTransport, SseTransport]

McpProtocol = Literal["auto", "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]


class McpServerEntry(_Section):
    """One external MCP server whose tools become ``mcp_{name}_{tool}``."""

    name: str
    transport: McpTransport
    timeout_secs: float = 30.0
    env: list[str] = []
    enabled: bool = True
    restart: Literal["on-failure", "never"] = "on-failure"
    max_restarts: int = 5
    tools_include: list[str] = []
    tools_exclude: list[str] = []
    protocol: McpProtocol = "auto"


# --- [mcp_server] ------------------------------------------------------------------------


class McpPreset(_Section):
    """A fixed call published as a tool of its own, with no arguments: ``tool`` (an
    exposed name such as ``tern_agent_echo``, or a kernel tool) with ``arguments``."""

    name: str
    tool: str
    arguments: dict[str, Any] = {}
    description: str = ""


class McpServerExposure(_Section):
    """What tern itself exposes as an MCP server (``tern mcp``, ``POST /mcp``).

    Agents are exposed as ``tern_agent_{name}``; kernel tools only when allowlisted
    here by glob. Nothing dangerous is exposed by default.
    """

    enabled: bool = True
    expose_agents: bool = True
    tools: list[str] = []
    presets: list[McpPreset] = []
    instructions: str = ""
    page_size: int = 100
    max_sessions: int = 256  # POST /mcp, handshake era: the least recently used idle one goes first
    session_idle_secs: float = 1800.0


# --- [a2a] -------------------------------------------------------------------------------


class ExternalAgent(_Section):
    """An A2A agent elsewhere, discovered at boot from its card."""

    name: str
    url: str
    enabled: bool = True
    headers: dict[str, str] = {}


class A2aConfig(_Section):
    enabled: bool = False
    listen_path: str = "/a2a"
    public_url: str = ""
    default_agent: str = ""
    max_tasks: int = 1000
    persist_tasks: bool = False
    discovery_timeout_secs: float = 30.0
    external_agents: list[ExternalAgent] = []
    # The card at /.well-known/agent-card.json carries the 0.3 fields (url, protocolVersion,
    # ...) next to the 1.0 ones, as the SDKs serve it; false serves a strict 1.0 card.
    card_03_fields: bool = True


# --- [[agents]] --------------------------------------------------------------------------


class ModelConfig(_Section):
    """An OpenAI-compatible chat completions endpoint (Ollama, llama-server, vLLM...)."""

    base_url: str = "http://127.0.0.1:11434/v1"
    model: str = ""
    api_key_env: str = ""
    temperature: Union[float, None] = None
    max_tokens: Union[int, None] = None
    timeout_secs: float = 120.0


class Skill(_Section):
    """An A2A skill descriptor shown on the agent's card."""

    id: str
    name: str
    description: str = ""
    tags: list[str] = []
    examples: list[str] = []


AgentKind = Literal["llm", "echo", "command", "tool", "remote"]


class AgentConfig(_Section):
    name: str
    kind: AgentKind
    description: str = ""
    tools: list[str] = []
    system_prompt: str = ""
    max_iterations: int = 10
    workspace: str = ""
    model: Union[ModelConfig, None] = None
    skills: list[Skill] = []
    # kind = "command": argv run with the message on stdin.
    command: list[str] = []
    timeout_secs: float = 60.0
    max_output_bytes: int = 1 * MiB
    # kind = "command" under A2A: stdout is JSON Lines of task events (docs/a2a-events.md)
    # and the TERN_A2A_* variables say which message and task it is working on.
    a2a_events: bool = False
    # kind = "tool": the one tool called with the message.
    tool: str = ""
    # kind = "remote": the external A2A agent (name from [[a2a.external_agents]]).
    remote: str = ""
    # Taint policy: may this agent pass untrusted content to sensitive tools?
    allow_tainted_sinks: bool = False


# --- [tools], [security], [state] --------------------------------------------------------


class ToolsConfig(_Section):
    timeout_secs: float = 60.0
    timeouts: dict[str, float] = {}
    max_result_chars: int = 50_000
    max_calls_per_run: int = 50
    shell_exec_enabled: bool = False
    shell_allowlist: list[str] = []
    web_fetch_max_bytes: int = 2 * MiB
    web_fetch_timeout_secs: float = 30.0


class SecurityConfig(_Section):
    """Network and secret policy. Metadata and link-local addresses are always blocked."""

    block_private_networks: bool = False
    block_loopback: bool = False
    web_fetch_allow_private: bool = False
    redact_env: list[str] = []
    redact: list[str] = []


class StateConfig(_Section):
    """Where tern keeps conversations, tasks, audit logs and workspaces."""

    dir: str = ""


class Config(_Section):
    server: ServerConfig = ServerConfig()
    mcp_servers: list[McpServerEntry] = []
    mcp_server: McpServerExposure = McpServerExposure()
    a2a: A2aConfig = A2aConfig()
    agents: list[AgentConfig] = []
    tools: ToolsConfig = ToolsConfig()
    security: SecurityConfig = SecurityConfig()
    state: StateConfig = StateConfig()


class LoadedConfig(NamedTuple):
    """A validated config and where it came from (``label`` is what messages show)."""

    config: Config
    label: str
    path: Union[Path, None]


# --- Locations ---------------------------------------------------------------------------


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


def bundled_config_text() -> str:
    """The default config shipped with tern (in the pyz or the wheel, else the checkout)."""
    from importlib.resources import files

    try:
        return (files("runtime") / "default_config.toml").read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        checkout = Path(__file__).resolve().parent.parent / "config.toml"
        return checkout.read_text(encoding="utf-8")


def find_config(explicit: Union[str, None] = None) -> Union[Path, None]:
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
    for candidate in (Path("config.toml"), user_config_dir() / "config.toml"):
        if candidate.is_file():
            return candidate
    return None


def load_config(explicit: Union[str, None] = None) -> LoadedConfig:
    """Find, read, decode and validate the config. Raises ConfigError (one line)."""
    path = find_config(explicit)
    if path is None:
        return LoadedConfig(parse_config(bundled_config_text(), BUNDLED_LABEL, None), BUNDLED_LABEL, None)
    label = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{label}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read: {exc.strerror or exc}") from None
    return LoadedConfig(parse_config(text, label, path.resolve().parent), label, path)


# --- Decoding ----------------------------------------------------------------------------


def _toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 in CI
        import tomli as tomllib
    return tomllib.loads(text)


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def parse_config(text: str, label: str, base_dir: Union[Path, None]) -> Config:
    """Decode TOML text into a validated Config with relative paths resolved.

    ``base_dir`` is the directory relative paths resolve against; None means the
    state directory (used for the bundled default).
    """
    try:
        raw = _toml_loads(text)
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        message = str(exc)
        found = _TOML_POSITION.search(message)
        if found:
            message = message[: found.start()]
            where = f"line {found.group(1)}, column {found.group(2)}"
            raise ConfigError(f"{label}: {where}: TOML syntax error: {message}") from None
        raise ConfigError(f"{label}: TOML syntax error: {message}") from None
    try:
        config = msgspec.convert(raw, Config, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{label}: {_explain(str(exc), raw)}") from None
    for problem in _semantic_problems(config):
        raise ConfigError(f"{label}: {problem}")
    return _resolve_paths(config, base_dir)


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (IPv6 as ``[::1]:PORT``). Raises ValueError with a reason."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host:
        raise ValueError(f'expected "HOST:PORT", got "{listen}"')
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f'expected a port from 0 to 65535 in "{listen}"')
    return host, int(port_text)


def _semantic_problems(config: Config) -> list[str]:
    """Checks a type cannot express: unique names, formats, cross references."""
    problems: list[str] = []
    try:
        parse_listen(config.server.listen)
    except ValueError as exc:
        problems.append(f"server.listen: {exc}")
    if config.server.api_key and config.server.api_key_env:
        problems.append("server: set api_key or api_key_env, not both")
    if bool(config.server.tls_cert) != bool(config.server.tls_key):
        problems.append("server: tls_cert and tls_key go together")
    problems += _positive(config.server, "server", ("max_body_bytes", "max_header_bytes", "max_connections",
                                                    "request_head_timeout_secs", "keep_alive_timeout_secs",
                                                    "write_timeout_secs", "rate_limit_burst"))
    if config.server.rate_limit_per_sec < 0:
        problems.append(f"server.rate_limit_per_sec: expected 0 (off) or more, got {config.server.rate_limit_per_sec}")
    problems += _duplicates([s.name for s in config.mcp_servers], "mcp_servers", "name")
    for i, server in enumerate(config.mcp_servers):
        where = f"mcp_servers[{i}]"
        if not server.name.strip():
            problems.append(f"{where}.name: must not be empty")
        problems += _positive(server, where, ("timeout_secs",))
        if server.max_restarts < 0:
            problems.append(f"{where}.max_restarts: expected 0 or more, got {server.max_restarts}")
        transport = server.transport
        if isinstance(transport, StdioTransport):
            if not transport.command.strip():
                problems.append(f"{where}.transport.command: must not be empty")
            elif ".." in re.split(r"[\\/]", transport.command):
                problems.append(f'{where}.transport.command: a ".." path component is not allowed, '
                                f'got "{transport.command}"')
        else:
            problems += _url_problem(transport.url, f"{where}.transport.url")
    for i, agent in enumerate(config.a2a.external_agents):
        problems += _url_problem(agent.url, f"a2a.external_agents[{i}].url")
    problems += _duplicates([a.name for a in config.a2a.external_agents], "a2a.external_agents", "name")
    if config.a2a.public_url:
        problems += _url_problem(config.a2a.public_url, "a2a.public_url")
    if not config.a2a.listen_path.startswith("/"):
        problems.append(f'a2a.listen_path: expected a path starting with "/", got "{config.a2a.listen_path}"')
    agent_names = [a.name for a in config.agents]
    problems += _duplicates(agent_names, "agents", "name")
    if config.a2a.default_agent and config.a2a.default_agent not in agent_names:
        problems.append(f'a2a.default_agent: no agent named "{config.a2a.default_agent}"')
    external = {a.name for a in config.a2a.external_agents}
    for i, agent in enumerate(config.agents):
        where = f"agents[{i}]"
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", agent.name):
            problems.append(f'{where}.name: expected letters, digits, "-", "_" or "." (at most 64), '
                            f'got "{agent.name}"')
        if agent.kind == "llm" and agent.model is None:
            problems.append(f"{where}.model: an llm agent needs [agents.model]")
        if agent.kind == "command" and not agent.command:
            problems.append(f"{where}.command: a command agent needs command = [program, args...]")
        if agent.kind == "tool" and not agent.tool:
            problems.append(f"{where}.tool: a tool agent needs the name of its tool")
        if agent.kind == "remote" and agent.remote not in external:
            problems.append(f'{where}.remote: expected the name of an [[a2a.external_agents]] entry, '
                            f'got "{agent.remote}"')
        if agent.max_iterations < 1:
            problems.append(f"{where}.max_iterations: expected 1 or more, got {agent.max_iterations}")
    problems += _positive(config.tools, "tools", ("timeout_secs", "max_result_chars", "max_calls_per_run"))
    problems += _mcp_server_problems(config)
    return problems


def _mcp_server_problems(config: Config) -> list[str]:
    from runtime.mcp.names import agent_tool_name

    exposure = config.mcp_server
    problems = _positive(exposure, "mcp_server", ("page_size", "max_sessions", "session_idle_secs"))
    agent_tools = [agent_tool_name(a.name) for a in config.agents]
    names: list[str] = list(agent_tools) if exposure.expose_agents else []
    for i, preset in enumerate(exposure.presets):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", preset.name):
            problems.append(f'mcp_server.presets[{i}].name: expected 1-128 of A-Z a-z 0-9 _ . -, '
                            f'got "{preset.name}"')
        names.append(preset.name)
        if preset.tool.startswith("tern_agent_") and preset.tool not in agent_tools:
            problems.append(f'mcp_server.presets[{i}].tool: no agent is exposed as "{preset.tool}" '
                            f'(agents: {", ".join(sorted(agent_tools)) or "none"})')
    seen: set[str] = set()
    for name in names:
        if name in seen:
            problems.append(f'mcp_server: two exposed tools would be named "{name}" (agent names that differ '
                            f'only in "-" and "_", or a preset of that name)')
        seen.add(name)
    return problems


def _positive(section: msgspec.Struct, where: str, names: tuple[str, ...]) -> list[str]:
    return [f"{where}.{name}: expected a number above 0, got {getattr(section, name)}"
            for name in names if getattr(section, name) <= 0]


def _duplicates(names: list[str], where: str, key: str) -> list[str]:
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            return [f'{where}[{i}].{key}: "{name}" is already used by {where}[{seen[name]}]']
        seen[name] = i
    return []


def _url_problem(url: str, where: str) -> list[str]:
    if not re.match(r"(?i)^https?://[^/\s]+", url):
        return [f'{where}: expected an http:// or https:// URL, got "{_shorten(url)}"']
    return []


def _resolve_paths(config: Config, base_dir: Union[Path, None]) -> Config:
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
    servers = [
        msgspec.structs.replace(s, transport=msgspec.structs.replace(s.transport, cwd=absolute(s.transport.cwd)))
        if isinstance(s.transport, StdioTransport) and s.transport.cwd else s
        for s in config.mcp_servers
    ]
    server = msgspec.structs.replace(config.server, tls_cert=absolute(config.server.tls_cert),
                                     tls_key=absolute(config.server.tls_key))
    return msgspec.structs.replace(config, agents=agents, mcp_servers=servers, server=server,
                                   state=StateConfig(dir=str(state_dir)))


# --- Error messages ----------------------------------------------------------------------

_SECRET_KEY = re.compile(r"(?i)(api_key$|token|secret|password|authorization|^headers$)")
_MSGSPEC_ERROR = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_PATH_PART = re.compile(r"\.([A-Za-z0-9_\-]+)|\[(\d+)\]|\[\'([^']*)\'\]")


def _explain(message: str, raw: dict[str, Any]) -> str:
    """Turn a msgspec validation message into ``key.path: expected X, got Y``."""
    match = _MSGSPEC_ERROR.match(message)
    assert match is not None  # the pattern matches any string
    what, path_text = match.group("what"), match.group("path") or ""
    parts: list[Union[str, int]] = []
    for key, index, quoted in _PATH_PART.findall(path_text):
        parts.append(int(index) if index else (key or quoted))

    found = re.match(r"Object contains unknown field `(.+)`", what)
    if found:
        key = found.group(1)
        allowed = _field_names(_type_at(parts, raw))
        hint = ""
        if allowed:
            import difflib

            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else f" (expected one of: {', '.join(allowed)})"
        return f"{_dotted(parts + [key])}: unknown key{hint}"

    found = re.match(r"Object missing required field `(.+)`", what)
    if found:
        key = found.group(1)
        if key == "type" and parts and parts[-1] == "transport":
            return f'{_dotted(parts + [key])}: required key is missing (expected "stdio", "http" or "sse")'
        return f"{_dotted(parts + [key])}: required key is missing"

    value = _value_at(parts, raw)
    got = _describe(value, parts)
    if what.startswith(("Invalid enum value", "Invalid value")):
        choices = _choices_at(parts, raw)
        expected = _join_or([f'"{c}"' for c in choices]) if choices else "one of the allowed values"
        return f"{_dotted(parts)}: expected {expected}, got {got}"

    found = re.match(r"Expected `(.+?)`(.*), got `(.+)`", what)
    if found:
        return f"{_dotted(parts)}: expected {_type_words(found.group(1))}{found.group(2)}, got {got}"
    found = re.match(r"Expected `(.+?)`(.*)$", what)
    if found:
        return f"{_dotted(parts)}: expected {_type_words(found.group(1))}{found.group(2)}, got {got}"
    return f"{_dotted(parts)}: {what}"


def _dotted(parts: list[Union[str, int]]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _value_at(parts: list[Union[str, int]], raw: Any) -> Any:
    node = raw
    for part in parts:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _describe(value: Any, parts: list[Union[str, int]]) -> str:
    if any(isinstance(p, str) and _SECRET_KEY.search(p) for p in parts):
        return "a value (not shown: secret)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{_shorten(value)}"'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_words(name: str) -> str:
    return {
        "str": "a string",
        "int": "an integer",
        "float": "a number",
        "bool": "true or false",
        "array": "an array",
        "object": "a table",
        "null": "nothing",
        "str | null": "a string",
        "int | null": "an integer",
        "float | null": "a number",
        "object | null": "a table",
    }.get(name, name)


def _join_or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _type_at(parts: list[Union[str, int]], raw: Any) -> Any:
    """The declared type at a key path, picking tagged-union members by the raw tag."""
    import typing

    current: Any = Config
    node: Any = raw
    for part in parts:
        current = _concrete(current, node)
        if isinstance(part, int):
            args = typing.get_args(current)
            current = args[0] if args else Any
        elif isinstance(current, type) and issubclass(current, msgspec.Struct):
            current = typing.get_type_hints(current).get(part, Any)
        else:
            args = typing.get_args(current)
            current = args[1] if len(args) == 2 else Any
        node = node[part] if isinstance(node, (dict, list)) and _has(node, part) else None
    return _concrete(current, node)


def _has(node: Any, part: Union[str, int]) -> bool:
    return part in node if isinstance(node, dict) else isinstance(part, int) and part < len(node)


def _concrete(tp: Any, node: Any) -> Any:
    """Resolve Optional[X] to X and a tagged union to the member the raw tag names."""
    import typing

    if typing.get_origin(tp) is Union:
        members = [m for m in typing.get_args(tp) if m is not type(None)]
        structs = [m for m in members if isinstance(m, type) and issubclass(m, msgspec.Struct)]
        if len(structs) > 1 and isinstance(node, dict):
            for member in structs:
                if member.__struct_config__.tag == node.get(member.__struct_config__.tag_field):
                    return member
            return structs[0]
        return members[0] if len(members) == 1 else tp
    return tp


def _field_names(tp: Any) -> list[str]:
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return list(tp.__struct_fields__)
    return []


def _choices_at(parts: list[Union[str, int]], raw: Any) -> list[str]:
    """The allowed values at a path: a Literal's values, or a tagged union's tags."""
    import typing

    if parts and parts[-1] == "type":
        parent = _type_at(parts[:-1], raw)
        # The parent resolved through the raw (bad) tag; go back to the declared union.
        container = _type_at(parts[:-2], raw) if len(parts) >= 2 else Config
        hints = typing.get_type_hints(container) if isinstance(container, type) and issubclass(
            container, msgspec.Struct) else {}
        declared = hints.get(parts[-2]) if isinstance(parts[-2], str) else None
        members = typing.get_args(declared) if declared is not None else (parent,)
        tags = [m.__struct_config__.tag for m in members
                if isinstance(m, type) and issubclass(m, msgspec.Struct) and m.__struct_config__.tag]
        if tags:
            return tags
    declared = _type_at(parts, raw)
    if typing.get_origin(declared) is Literal:
        return [str(v) for v in typing.get_args(declared)]
    return []


# --- Display -----------------------------------------------------------------------------

SECRET_MASK = "********"
_ENV_REFERENCE = re.compile(r"^(?:[^$]*\$\{[A-Za-z_][A-Za-z0-9_]*\}[^$]*)+$")


def masked(config: Config) -> dict[str, Any]:
    """The config as plain data with every literal secret replaced by a mask.

    Header values that only reference variables (``Bearer ${TOKEN}``) stay visible:
    they say where the secret comes from without containing it.
    """

    def walk(node: Any, key: str) -> Any:
        if isinstance(node, dict):
            if key == "headers":
                return {k: v if _ENV_REFERENCE.match(v) else SECRET_MASK for k, v in node.items()}
            return {k: walk(v, k) for k, v in node.items()}
        if isinstance(node, list):
            if key == "redact":
                return [SECRET_MASK for _ in node]
            return [walk(v, key) for v in node]
        if isinstance(node, str) and node and key == "api_key":
            return SECRET_MASK
        return node

    return walk(msgspec.to_builtins(config), "")


def dump_toml(data: dict[str, Any]) -> str:
    """Render plain config data as TOML (tables, arrays of tables, inline small maps)."""

    def scalar(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{_toml_key(k)} = {scalar(v)}" for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(scalar(v) for v in value) + "]"
        if value is None:
            return '""'
        return _toml_string(value) if isinstance(value, str) else repr(value)

    def is_table(value: Any) -> bool:
        return isinstance(value, dict) and any(isinstance(v, (dict, list)) for v in value.values()) \
            or isinstance(value, dict) and len(value) > 3

    def table_array(value: Any) -> bool:
        return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)

    lines: list[str] = []

    def emit(table: dict[str, Any], prefix: str) -> None:
        nested = []
        for key, value in table.items():
            if value is None:
                continue
            if (is_table(value) and key not in ("headers", "timeouts")) or table_array(value):
                nested.append((key, value))
            else:
                lines.append(f"{_toml_key(key)} = {scalar(value)}")
        for key, value in nested:
            name = f"{prefix}{_toml_key(key)}"
            if isinstance(value, list):
                for item in value:
                    lines.extend(["", f"[[{name}]]"])
                    emit(item, name + ".")
            else:
                lines.extend(["", f"[{name}]"])
                emit(value, name + ".")

    emit(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_string(text: str) -> str:
    """A TOML basic string. JSON escaping is almost right, but TOML also forbids a raw
    DEL (0x7f), which json.dumps leaves as is."""
    import json

    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)
