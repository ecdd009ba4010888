"""The checks a type cannot express: unique names, formats, cross references.

Each problem is a sentence that starts with its key path (``agents[1].name: ...``);
the loader prefixes the file and reports the first one.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import msgspec

from runtime.config.schema import (
    AgentConfig, Config, McpAsk, McpPreset, PeerAuth, SamplingConfig, StdioTransport,
)
from runtime.config.sentences import shorten
from runtime.config.shell_policy import rule_problems

__all__ = ["MIN_KEY_CHARS", "SCRIPT_NAME", "client_cert_problems",
           "find_problems", "find_warnings", "key_warning", "missing_key_warnings",
           "parse_listen"]

MIN_KEY_CHARS = 16
#: A script's name: a file directly in ``[scripts] dir`` (no path, no leading dot, no "..").
SCRIPT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_SHA256_HEX = re.compile(r"[0-9A-Fa-f]{64}")


def key_warning(key: str) -> str | None:
    """A sentence if the API key is short enough to guess (never the key itself).
    A warning, not an error: a short key still beats none, and tests use them."""
    if key and len(key) < MIN_KEY_CHARS:
        return (f"the API key is {len(key)} characters long; use at least {MIN_KEY_CHARS} random ones "
                "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return None


def missing_key_warnings(config: Config) -> list[str]:
    """llm agents whose ``api_key_env`` names a variable that is not set: the model would
    get no key at all, and a hosted API answers 401; webhook triggers whose ``secret_env``
    is not set: every delivery would be refused, and nothing said until the first one.
    Warnings, not errors: a local model needs no key, and the variable may be set for the
    daemon but not for ``config check``."""
    models = [f'agents[{i}].model.api_key_env: "{agent.model.api_key_env}" is not set, so no key is sent '
              f"to {agent.model.base_url}" for i, agent in enumerate(config.agents)
              if agent.model is not None and agent.model.provider == "openai" and agent.model.api_key_env
              and not os.environ.get(agent.model.api_key_env)]
    hooks = [f'triggers[{i}].secret_env: "{trigger.secret_env}" is not set, so every delivery to '
             f"/hooks/{trigger.name} is refused (503) until it is" for i, trigger in enumerate(config.triggers)
             if trigger.kind == "webhook" and trigger.secret_env and not os.environ.get(trigger.secret_env)]
    notify = [f'governance.notify[{i}].{field}: "{getattr(channel, field)}" is not set, so the {channel.kind} '
              f"channel {channel.name} cannot {'sign' if field == 'secret_env' else 'log in'}"
              for i, channel in enumerate(config.governance.notify)
              for field in ("secret_env", "token_env", "password_env")
              if getattr(channel, field) and not os.environ.get(getattr(channel, field))]
    return models + hooks + notify


def _runnable(command: str, cwd: str = "") -> bool:
    """Whether ``command`` names a program tern could start: a path (against ``cwd``)
    that is an executable file, or a name found on PATH."""
    if os.sep in command or (os.altsep and os.altsep in command):
        path = os.path.join(cwd or os.getcwd(), os.path.expanduser(command))
        return os.path.isfile(path) and os.access(path, os.X_OK)
    return shutil.which(command) is not None


def find_warnings(config: Config) -> list[str]:
    """What is legal but probably wrong, one sentence each, for ``tern config check``:
    unset key variables and programs that are not installed (yet: a server may be
    installed after the config is written, so never an error)."""
    warnings = missing_key_warnings(config)
    warnings += [f'server.keys[{i}].key_env: "{key.key_env}" is not set, so tern serve will not start'
                 for i, key in enumerate(config.server.keys) if key.key_env and not os.environ.get(key.key_env)]
    for i, server in enumerate(config.mcp_servers):
        transport = server.transport
        if server.enabled and isinstance(transport, StdioTransport) and transport.command.strip() \
                and not _runnable(transport.command, transport.cwd):
            warnings.append(f'mcp_servers[{i}].transport.command: "{shorten(transport.command)}" is not on PATH '
                            f"(MCP server {server.name} will fail to start until it is installed)")
    for i, agent in enumerate(config.agents):
        if agent.kind == "command" and agent.command and not _runnable(agent.command[0]):
            warnings.append(f'agents[{i}].command: "{shorten(agent.command[0])}" is not on PATH '
                            f"(agent {agent.name} will fail until it is installed)")
    return warnings


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


def find_problems(config: Config) -> list[str]:
    """Every problem found, in file order (empty when the config is sound)."""
    problems: list[str] = []
    try:
        parse_listen(config.server.listen)
    except ValueError as exc:
        problems.append(f"server.listen: {exc}")
    if config.server.api_key and config.server.api_key_env:
        problems.append("server: set api_key or api_key_env, not both")
    if bool(config.server.tls_cert) != bool(config.server.tls_key):
        problems.append("server: tls_cert and tls_key go together")
    problems += _key_problems(config.server)
    problems += _positive(config.server, "server", ("max_body_bytes", "max_header_bytes", "max_connections",
                                                    "request_head_timeout_secs", "keep_alive_timeout_secs",
                                                    "write_timeout_secs", "rate_limit_burst"))
    if config.server.max_connections_per_client < 0:
        problems.append("server.max_connections_per_client: expected 0 (no cap) or more, "
                        f"got {config.server.max_connections_per_client}")
    if not 0 <= config.server.client_ipv6_prefix <= 128:
        problems.append(f"server.client_ipv6_prefix: expected 0 to 128, got {config.server.client_ipv6_prefix}")
    if config.server.rate_limit_per_sec < 0:
        problems.append(f"server.rate_limit_per_sec: expected 0 (off) or more, got {config.server.rate_limit_per_sec}")
    problems += _state_problems(config)
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
            for key in ("writable", "readable"):
                problems += [f'{where}.transport.{key}[{j}]: expected a path, got "{shorten(path)}"'
                             for j, path in enumerate(getattr(transport, key)) if not path.strip() or "\x00" in path]

        else:
            problems += _url_problem(transport.url, f"{where}.transport.url")
            if transport.oauth is not None:
                problems += _oauth_problems(transport.oauth, f"{where}.transport.oauth")
            problems += _client_cert_pair(transport, f"{where}.transport")
        if server.sampling is not None:
            problems += _sampling_problems(server.sampling, f"{where}.sampling", config.agents)
    for i, agent in enumerate(config.a2a.external_agents):
        problems += _url_problem(agent.url, f"a2a.external_agents[{i}].url")
        problems += _client_cert_pair(agent, f"a2a.external_agents[{i}]")
        if agent.auth is not None:
            problems += _peer_auth_problems(agent.auth, f"a2a.external_agents[{i}].auth", card=True)
        if agent.card_jwks_url:
            problems += _url_problem(agent.card_jwks_url, f"a2a.external_agents[{i}].card_jwks_url")
        if agent.card_jwks_url and agent.card_public_key:
            problems.append(f"a2a.external_agents[{i}]: set card_public_key (a pinned key) or card_jwks_url "
                            "(a trusted key set), not both")
    for i, hook in enumerate(config.a2a.push_webhooks):
        where = f"a2a.push_webhooks[{i}]"
        problems += _url_problem(hook.url_prefix, f"{where}.url_prefix")
        problems += _client_cert_pair(hook, where)
        if hook.auth is not None:
            problems += _peer_auth_problems(hook.auth, f"{where}.auth", card=False)
    problems += _duplicates([a.name for a in config.a2a.external_agents], "a2a.external_agents", "name")
    if config.a2a.public_url:
        problems += _url_problem(config.a2a.public_url, "a2a.public_url")
    problems += _positive(config.a2a, "a2a", ("max_tasks", "max_task_bytes", "max_store_bytes",
                                              "max_subscribers_per_task"))
    if config.a2a.max_task_bytes > config.a2a.max_store_bytes:
        problems.append("a2a.max_task_bytes: must not be more than a2a.max_store_bytes")
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
        for budget in ("requests_per_minute", "tokens_per_hour", "max_tool_calls_per_run"):
            if getattr(agent, budget) < 0:
                problems.append(f"{where}.{budget}: expected 0 (no limit) or more, got {getattr(agent, budget)}")
    problems += _positive(config.tools, "tools", ("timeout_secs", "max_result_chars", "max_calls_per_run"))
    problems += rule_problems(config.tools.shell_allowlist, config.tools.shell_rules, config.tools.shell_sandbox)
    problems += [f'tools.shell_sandbox_paths[{i}]: expected a directory path, got "{shorten(path)}"'
                 for i, path in enumerate(config.tools.shell_sandbox_paths) if not path.strip() or "\x00" in path]
    problems += _mcp_server_problems(config)
    problems += _governance_problems(config)
    problems += _notify_problems(config)
    problems += _scripts_problems(config)
    problems += _telemetry_problems(config)
    problems += _trigger_problems(config)
    return problems


def _key_problems(server: msgspec.Struct) -> list[str]:
    """``[[server.keys]]`` and mTLS: names, one source per key, known scopes."""
    from runtime.config.keys import NAME_PATTERN, OWNER_NAMES, SCOPES

    problems = _duplicates([k.name for k in server.keys], "server.keys", "name")
    for i, key in enumerate(server.keys):
        where = f"server.keys[{i}]"
        if not NAME_PATTERN.fullmatch(key.name) or key.name in OWNER_NAMES:
            problems.append(f'{where}.name: expected 1-64 of a-z 0-9 _ . - (not "admin" or "local"), got {key.name!r}')
        sources = [n for n in ("key_env", "key", "key_sha256") if getattr(key, n)]
        if len(sources) > 1 or not sources and not key.tls_subject:
            problems.append(f"{where}: set exactly one of key_env, key, key_sha256 (or only tls_subject)")
        if key.key_sha256 and not re.fullmatch(r"[0-9a-fA-F]{64}", key.key_sha256):
            problems.append(f"{where}.key_sha256: expected 64 hex digits (the SHA-256 of the key)")
        unknown = sorted(set(key.scopes) - set(SCOPES))
        if unknown:
            problems.append(f"{where}.scopes: unknown {', '.join(unknown)}; expected some of {', '.join(SCOPES)}")
    if (server.tls_client_ca or server.tls_client_required) and not server.tls_cert:
        problems.append("server: tls_client_ca and tls_client_required need tls_cert and tls_key (a TLS listener)")
    if server.tls_client_required and not server.tls_client_ca:
        problems.append("server: tls_client_required needs tls_client_ca")
    if bool(server.operator_group) != bool(server.operator_token_file):
        problems.append("server: operator_group and operator_token_file go together (the group that may read "
                        "the file, and where the daemon writes it)")
    elif server.operator_token_file and not server.operator_token_file.startswith("/"):
        shown = shorten(server.operator_token_file)
        problems.append(f'server.operator_token_file: expected an absolute path, got "{shown}"')
    return problems


def _telemetry_problems(config: Config) -> list[str]:
    telemetry = config.telemetry
    problems = _url_problem(telemetry.otlp_endpoint, "telemetry.otlp_endpoint") if telemetry.otlp_endpoint else []
    if not 0.0 <= telemetry.sampling_ratio <= 1.0:
        problems.append(f"telemetry.sampling_ratio: expected 0 to 1, got {telemetry.sampling_ratio}")
    if not telemetry.service_name.strip():
        problems.append("telemetry.service_name: must not be empty")
    problems += _positive(telemetry, "telemetry", ("max_queue_spans", "max_queue_bytes", "batch_spans",
                                                   "export_timeout_secs"))
    return problems


MAX_TRIGGER_MESSAGE_CHARS = 16 * 1024  # as kernel.triggers.template.MAX_TEMPLATE_CHARS, which renders it
_TRIGGER_NAME = re.compile(r"[a-z0-9_-]{1,64}")
_EVERY = re.compile(r"(?=\d)(?:\d{1,6}d)?(?:\d{1,6}h)?(?:\d{1,6}m)?(?:\d{1,8}s)?")  # as schedule.parse_every
_CRON_NAMES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
#: Fields that only one kind of trigger reads: set on another kind, they would be silently ignored.
_KIND_FIELDS = {"schedule": ("cron", "every"), "webhook": ("secret_env", "timestamp_header"), "watch": ("path",)}


def _relative_inside(path: str) -> bool:
    """A path relative to a workspace that cannot leave it by its spelling ("..", absolute, NUL)."""
    parts = re.split(r"[\\/]", path)
    return bool(path.strip()) and not path.startswith(("/", "\\", "~")) and ".." not in parts and "\x00" not in path \
        and not re.match(r"[A-Za-z]:", path)


def _trigger_problems(config: Config) -> list[str]:
    """``[[triggers]]``: names, the agent, one schedule, a zone that exists, a watch path
    inside the workspace, and bounds on every queue, rate and size. The cron expression's
    fields are checked again, fully, when the daemon starts its triggers."""
    from zoneinfo import ZoneInfo

    problems = _duplicates([t.name for t in config.triggers], "triggers", "name")
    agents = {a.name for a in config.agents}
    external = {a.name for a in config.a2a.external_agents}
    for i, trigger in enumerate(config.triggers):
        where = f"triggers[{i}]"
        if not _TRIGGER_NAME.fullmatch(trigger.name):
            problems.append(f'{where}.name: expected 1-64 of a-z 0-9 _ -, got "{shorten(trigger.name)}"')
        if trigger.agent not in agents:
            problems.append(f'{where}.agent: no agent named "{shorten(trigger.agent)}" '
                            f'(agents: {", ".join(sorted(agents)) or "none"})')
        if not trigger.message.strip() or len(trigger.message) > MAX_TRIGGER_MESSAGE_CHARS:
            problems.append(f"{where}.message: expected a template of 1 to {MAX_TRIGGER_MESSAGE_CHARS} characters, "
                            f"got {len(trigger.message)}")
        for kind, fields in _KIND_FIELDS.items():
            problems += [f'{where}.{name}: only used with kind = "{kind}"' for name in fields
                         if kind != trigger.kind and getattr(trigger, name)]
        if trigger.kind == "schedule":
            if bool(trigger.cron) == bool(trigger.every):
                problems.append(f'{where}: a schedule needs exactly one of cron = "..." or every = "..."')
            elif trigger.cron and not (trigger.cron.strip() in _CRON_NAMES or len(trigger.cron.split()) == 5):
                problems.append(f'{where}.cron: expected five fields (minute hour day month weekday) or one of '
                                f'{", ".join(_CRON_NAMES)}, got "{shorten(trigger.cron)}"')
            elif trigger.every and not _EVERY.fullmatch(trigger.every.strip().lower()):
                problems.append(f'{where}.every: expected a duration such as "90s", "5m" or "1h30m", '
                                f'got "{shorten(trigger.every)}"')
            try:
                ZoneInfo(trigger.timezone)
            except (ValueError, OSError, LookupError):
                problems.append(f'{where}.timezone: "{shorten(trigger.timezone)}" is not a time zone name '
                                '(e.g. "UTC", "Europe/Berlin")')
            if not 0 <= trigger.jitter_secs <= 86_400:
                problems.append(f"{where}.jitter_secs: expected 0 to 86400, got {trigger.jitter_secs}")
            if not 1 <= trigger.catch_up_limit <= 1000:
                problems.append(f"{where}.catch_up_limit: expected 1 to 1000, got {trigger.catch_up_limit}")
        elif trigger.kind == "webhook":
            if trigger.secret_env and not _ENV_NAME.fullmatch(trigger.secret_env):
                problems.append(f'{where}.secret_env: expected the name of an environment variable, '
                                f'got "{shorten(trigger.secret_env)}"')
            if trigger.timestamp_header and not _HEADER_NAME.fullmatch(trigger.timestamp_header):
                problems.append(f'{where}.timestamp_header: expected a header name, '
                                f'got "{shorten(trigger.timestamp_header)}"')
            if not 1 <= trigger.replay_window_secs <= 86_400:
                problems.append(f"{where}.replay_window_secs: expected 1 to 86400, got {trigger.replay_window_secs}")
            if not 0 < trigger.max_body_bytes <= config.server.max_body_bytes:
                problems.append(f"{where}.max_body_bytes: expected 1 to server.max_body_bytes "
                                f"({config.server.max_body_bytes}), got {trigger.max_body_bytes}")
            if not 1 <= trigger.rate_limit_per_min <= 100_000:
                problems.append(f"{where}.rate_limit_per_min: expected 1 to 100000, got {trigger.rate_limit_per_min}")
        else:
            if not _relative_inside(trigger.path):
                problems.append(f'{where}.path: expected a directory relative to the agent\'s workspace that stays '
                                f'inside it (no "..", not absolute), got "{shorten(trigger.path)}"')
            if not 0.2 <= trigger.interval_secs <= 3600:
                problems.append(f"{where}.interval_secs: expected 0.2 to 3600, got {trigger.interval_secs}")
            if not 0 <= trigger.debounce_secs <= 3600:
                problems.append(f"{where}.debounce_secs: expected 0 to 3600, got {trigger.debounce_secs}")
            if not 1 <= trigger.max_files <= 1_000_000:
                problems.append(f"{where}.max_files: expected 1 to 1000000, got {trigger.max_files}")
        for name, low, high in (("max_queued", 1, 1000), ("max_parallel", 1, 64), ("max_failures", 1, 1000)):
            if not low <= getattr(trigger, name) <= high:
                problems.append(f"{where}.{name}: expected {low} to {high}, got {getattr(trigger, name)}")
        if not 0 < trigger.timeout_secs <= 86_400:
            problems.append(f"{where}.timeout_secs: expected a number above 0 and at most 86400, "
                            f"got {trigger.timeout_secs}")
        if trigger.sink is not None:
            problems += _sink_problems(trigger.sink, f"{where}.sink", agents | external)
    return problems


def _sink_problems(sink: msgspec.Struct, where: str, agents: set[str]) -> list[str]:
    if sink.kind == "file" and not _relative_inside(sink.path):
        return [f'{where}.path: expected a file path relative to the agent\'s workspace that stays inside it '
                f'(no "..", not absolute), got "{shorten(sink.path)}"']
    if sink.kind == "webhook":
        return _url_problem(sink.url, f"{where}.url")
    if sink.kind == "agent" and sink.agent not in agents:
        return [f'{where}.agent: expected a local agent or an [[a2a.external_agents]] name, '
                f'got "{shorten(sink.agent)}"']
    return []


def _governance_problems(config: Config) -> list[str]:
    from runtime.config.schema import OSSA_TIERS, PRESET_TIERS

    governance = config.governance
    problems = _positive(governance, "governance", ("approval_timeout_secs", "max_pending_per_agent",
                                                    "max_pending_per_caller", "max_kept_per_caller",
                                                    "approval_retention_days"))
    problems += _duplicates([t.name for t in governance.tiers], "governance.tiers", "name")
    for i, rule in enumerate(governance.rules):
        if not 0 <= rule.wait_secs <= 86400 or rule.wait_secs != rule.wait_secs:
            problems.append(f"governance.rules[{i}].wait_secs: expected 0 to 86400 seconds, got {rule.wait_secs}")
        elif rule.wait_secs and rule.decision != "ask":
            problems.append(f'governance.rules[{i}].wait_secs: only used with decision = "ask"')
    for i, tier in enumerate(governance.tiers):
        if tier.name in PRESET_TIERS or tier.name in OSSA_TIERS:
            problems.append(f'governance.tiers[{i}].name: "{tier.name}" is a preset tier; choose another name')
    known = sorted({*PRESET_TIERS, *OSSA_TIERS, *(t.name for t in governance.tiers)})
    for i, agent in enumerate(config.agents):
        if agent.access_tier and agent.access_tier not in known:
            problems.append(f'agents[{i}].access_tier: "{agent.access_tier}" is not a tier '
                            f'(known: {", ".join(known)})')
        for budget in ("requests_per_minute", "tokens_per_hour", "max_tool_calls_per_run"):
            if getattr(agent, budget) < 0:
                problems.append(f"agents[{i}].{budget}: expected 0 (no limit) or more, got {getattr(agent, budget)}")
    return problems


#: Each kind's own fields: set on another kind, they would be silently ignored.
_NOTIFY_FIELDS = {"url": ("webhook", "ntfy"), "secret_env": ("webhook",), "topic": ("ntfy",), "token_env": ("ntfy",),
                  "host": ("smtp",), "username": ("smtp",), "password_env": ("smtp",), "mail_from": ("smtp",),
                  "to": ("smtp",)}
_ADDRESS = re.compile(r"[^@\s<>,;\r\n]{1,64}@[^@\s<>,;\r\n]{1,255}")
_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,64}")  # as ntfy.sh accepts


def _notify_problems(config: Config) -> list[str]:
    """``[[governance.notify]]`` and ``public_url``: names, what each kind needs and no
    field of another kind, secrets named by variables, addresses that cannot smuggle a
    header into a mail, and bounds."""
    governance = config.governance
    problems = _duplicates([c.name for c in governance.notify], "governance.notify", "name")
    if governance.public_url:
        problems += _url_problem(governance.public_url, "governance.public_url")
        if "?" in governance.public_url or "#" in governance.public_url:
            problems.append("governance.public_url: a base URL takes no query or fragment")
    for i, channel in enumerate(governance.notify):
        where = f"governance.notify[{i}]"
        if not _TRIGGER_NAME.fullmatch(channel.name):
            problems.append(f'{where}.name: expected 1-64 of a-z 0-9 _ -, got "{shorten(channel.name)}"')
        problems += [f'{where}.{field}: only used by kind = {" or ".join(kinds)}' for field, kinds
                     in _NOTIFY_FIELDS.items() if getattr(channel, field) and channel.kind not in kinds]
        for field in ("secret_env", "token_env", "password_env"):
            value = getattr(channel, field)
            if value and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
                problems.append(f'{where}.{field}: expected the name of an environment variable, '
                                f'got "{shorten(value)}"')
        if channel.kind in ("webhook", "ntfy") and (channel.url or channel.kind == "webhook"):
            problems += _url_problem(channel.url, f"{where}.url")
        if channel.kind == "ntfy" and not _TOPIC.fullmatch(channel.topic):
            problems.append(f'{where}.topic: expected 1-64 of A-Z a-z 0-9 _ -, got "{shorten(channel.topic)}"')
        if channel.kind == "smtp":
            if not channel.host or not 0 < channel.port < 65536:
                problems.append(f"{where}: an smtp channel needs host and a port of 1-65535")
            if not channel.to or len(channel.to) > 20:
                problems.append(f"{where}.to: expected 1 to 20 addresses")
            for address in [channel.mail_from, *channel.to]:
                if not _ADDRESS.fullmatch(address):
                    problems.append(f'{where}: "{shorten(address)}" is not a mail address (name@host)')
            if bool(channel.username) != bool(channel.password_env):
                problems.append(f"{where}: username and password_env go together")
            if channel.username and channel.tls == "none":
                problems.append(f'{where}: tls = "none" would send the password in the clear; use starttls or '
                                "implicit")
        elif channel.tls != "starttls" or channel.port != 587:
            problems.append(f'{where}: tls and port are only used by kind = "smtp"')
        if not 0 <= channel.after_secs <= 86400 or not 0 < channel.timeout_secs <= 300:
            problems.append(f"{where}: after_secs is 0 to 86400 and timeout_secs above 0 up to 300")
    return problems


def _scripts_problems(config: Config) -> list[str]:
    scripts = config.scripts
    problems = _positive(scripts, "scripts", ("timeout_secs", "max_output_bytes"))
    for name, digest in scripts.allow.items():
        if not SCRIPT_NAME.fullmatch(name):
            problems.append(f"scripts.allow: {json.dumps(shorten(name), ensure_ascii=False)} is not a script name "
                            '(1 to 128 letters, digits, "-", "_" and ".", starting with a letter or digit)')
        elif not _SHA256_HEX.fullmatch(digest):
            problems.append(f"scripts.allow.{name}: expected a SHA-256 as 64 hex characters, "
                            f"got {json.dumps(shorten(digest), ensure_ascii=False)}")
    return problems


MAX_PRESET_SCHEMA_BYTES = 65536


def _preset_schema_problems(where: str, preset: McpPreset) -> list[str]:
    """A preset's ``input_schema``: an object schema of bounded size, sound ``x-mcp-header``
    marks, and for an agent either a template (``{name}`` in its arguments) or no fixed
    arguments at all (its message is then the caller's arguments, in JSON)."""
    from runtime.mcp.param_headers import annotation_problems

    schema = preset.input_schema
    problems = []
    if schema.get("type") != "object":
        problems.append(f'{where}.input_schema: expected type = "object" (MCP tools take an object)')
    if len(json.dumps(schema)) > MAX_PRESET_SCHEMA_BYTES:
        problems.append(f"{where}.input_schema: over {MAX_PRESET_SCHEMA_BYTES} bytes")
    problems += [f"{where}.input_schema.{p}" for p in annotation_problems(schema)]
    templated = any(_PLACEHOLDER.search(value) for value in preset.arguments.values() if isinstance(value, str))
    if preset.tool.startswith("tern_agent_") and preset.arguments and not templated:
        problems.append(f"{where}.arguments: a preset with input_schema sends an agent the caller's arguments as "
                        f"its message unless its arguments name them ({{name}}), so fixed ones would be lost")
    return problems


def _mcp_server_problems(config: Config) -> list[str]:
    from runtime.mcp.names import agent_tool_name

    exposure = config.mcp_server
    problems = _positive(exposure, "mcp_server", ("page_size", "max_sessions", "session_idle_secs",
                                                  "max_resource_bytes"))
    servers = {server.name for server in config.mcp_servers}
    problems += [f'mcp_server.upstream[{i}]: no [[mcp_servers]] entry is named "{name}"'
                 for i, name in enumerate(exposure.upstream) if name not in servers]
    for i, agent in enumerate(config.agents):
        problems += _prompt_problems(agent.prompts, f"agents[{i}].prompts")
    agent_tools = [agent_tool_name(a.name) for a in config.agents]
    names: list[str] = list(agent_tools) if exposure.expose_agents else []
    for i, preset in enumerate(exposure.presets):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", preset.name):
            problems.append(f'mcp_server.presets[{i}].name: expected 1-128 of A-Z a-z 0-9 _ . -, '
                            f'got "{preset.name}"')
        names.append(preset.name)
        properties = preset.input_schema.get("properties")
        for key, value in preset.arguments.items():
            for name in _PLACEHOLDER.findall(value) if isinstance(value, str) else []:
                if not isinstance(properties, dict) or name not in properties:
                    problems.append(f"mcp_server.presets[{i}].arguments.{key}: {{{name}}} is not a property of its "
                                    "input_schema")
        if preset.tool.startswith("tern_agent_") and preset.tool not in agent_tools:
            problems.append(f'mcp_server.presets[{i}].tool: no agent is exposed as "{preset.tool}" '
                            f'(agents: {", ".join(sorted(agent_tools)) or "none"})')
        if preset.input_schema:
            problems += _preset_schema_problems(f"mcp_server.presets[{i}]", preset)
    for i, ask in enumerate(exposure.asks):
        problems += _ask_problems(f"mcp_server.asks[{i}]", ask, agent_tools if exposure.expose_agents else [],
                                  [preset.name for preset in exposure.presets])
        names.append(ask.name)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            problems.append(f'mcp_server: two exposed tools would be named "{name}" (agent names that differ '
                            f'only in "-" and "_", or a preset of that name)')
        seen.add(name)
    return problems


def _prompt_problems(prompts: list, where: str) -> list[str]:
    """``[[agents.prompts]]``: names a client can send, arguments ``{name}`` can name, and
    messages that say something."""
    problems = _duplicates([prompt.name for prompt in prompts], where, "name")
    for j, prompt in enumerate(prompts):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", prompt.name):
            problems.append(f'{where}[{j}].name: expected 1-64 of A-Z a-z 0-9 _ . -, got "{prompt.name}"')
        for k, argument in enumerate(prompt.arguments):
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", argument.name):
                problems.append(f'{where}[{j}].arguments[{k}].name: expected a letter or "_", then letters, digits, '
                                f'"_" or "-" (at most 64), got "{argument.name}"')
        problems += _duplicates([a.name for a in prompt.arguments], f"{where}[{j}].arguments", "name")
        if not prompt.messages:
            problems.append(f"{where}[{j}].messages: a prompt needs at least one message")
        for k, message in enumerate(prompt.messages):
            if not (message.text or message.resource or message.image):
                problems.append(f"{where}[{j}].messages[{k}]: expected text, resource or image")
    return problems


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z_][A-Za-z0-9_]*)?\}")


def _ask_problems(where: str, ask: McpAsk, agent_tools: list[str], presets: list[str]) -> list[str]:
    """An ``[[mcp_server.asks]]`` entry: names, questions, and every ``{placeholder}``
    naming an argument or an answer given before it is used."""
    problems = []
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", ask.name):
        problems.append(f'{where}.name: expected 1-128 of A-Z a-z 0-9 _ . -, got "{ask.name}"')
    if not ask.questions:
        problems.append(f"{where}.questions: an ask needs at least one question")
    if ask.timeout_secs <= 0:
        problems.append(f"{where}.timeout_secs: expected a number above 0, got {ask.timeout_secs}")
    if ask.send_to and ask.send_to not in agent_tools and ask.send_to not in presets:
        problems.append(f'{where}.send_to: no exposed agent or preset is named "{ask.send_to}"')
    if ask.prompt and (ask.send_to or ask.task != "forbidden"):
        problems.append(f"{where}.prompt: a prompt's reply is its message: it has no send_to and is no task")
    if ask.send_to and ask.task != "forbidden":
        problems.append(f"{where}.task: an ask with send_to asks first, then its send_to call may be the task")
    arguments = set(ask.arguments)
    for name in ask.arguments:
        if not _IDENTIFIER.fullmatch(name):
            problems.append(f'{where}.arguments: "{name}" is not a name (letters, digits, _)')
    keys = [question.key for question in ask.questions]
    for j, question in enumerate(ask.questions):
        at = f"{where}.questions[{j}]"
        if not _IDENTIFIER.fullmatch(question.key) or question.key in arguments or keys.count(question.key) > 1:
            problems.append(f'{at}.key: "{question.key}" must be a name (letters, digits, _) used once, '
                            f"and not an argument's")
        if question.round < 1:
            problems.append(f"{at}.round: expected 1 or more, got {question.round}")
        if question.kind == "url" and not re.fullmatch(r"https://[^\s{}]+|http://(localhost|127\.0\.0\.1)[:/][^\s{}]*",
                                                       question.url):
            problems.append(f'{at}.url: a url question needs an https:// URL (or http:// on localhost), '
                            f'got "{shorten(question.url)}"')
        if question.kind in ("form", "url", "sampling") and not question.message.strip():
            problems.append(f"{at}.message: a {question.kind} question needs a message")
        if question.kind == "form" and not (question.schema.get("type") == "object"
                                            and isinstance(question.schema.get("properties"), dict)):
            problems.append(f'{at}.schema: a form needs an object schema with properties '
                            f'(type = "object", properties = {{ ... }})')
        if question.kind == "sampling" and not 0 < question.max_tokens <= 1_000_000:
            problems.append(f"{at}.max_tokens: expected 1 to 1000000, got {question.max_tokens}")
        earlier = {q.key for q in ask.questions if q.round < question.round}
        for name in _PLACEHOLDER.findall(question.message + question.system):
            if name not in arguments and name not in earlier:
                problems.append(f"{at}.message: {{{name}}} is neither an argument nor an answer of an earlier round")
    for name in _PLACEHOLDER.findall(ask.reply):
        if name not in arguments and name not in keys:
            problems.append(f"{where}.reply: {{{name}}} is neither an argument nor a question's key")
    return problems


def _sampling_problems(sampling: SamplingConfig, where: str, agents: list[AgentConfig]) -> list[str]:
    """The model that answers a server's sampling: an llm agent's own endpoint (not the
    MCP client's sampling, which would send the server's prompt back out)."""
    problems = _positive(sampling, where, ("max_tokens", "requests_per_minute"))
    agent = next((a for a in agents if a.name == sampling.agent), None)
    if agent is None or agent.kind != "llm" or agent.model is None:
        problems.append(f'{where}.agent: expected the name of an llm agent (its [agents.model] answers), '
                        f'got "{sampling.agent}"')
    elif agent.model.provider != "openai":
        problems.append(f'{where}.agent: agent "{agent.name}" runs on the MCP client\'s sampling; '
                        "name an agent with an endpoint of its own")
    return problems


def _state_problems(config: Config) -> list[str]:
    state = config.state
    problems = _positive(state, "state", ("pool_size", "lease_secs"))
    if state.store == "postgres":
        if not state.postgres_url:
            problems.append('state.postgres_url: store = "postgres" needs the database\'s URL '
                            '(postgresql://user:${PGPASSWORD}@host:5432/tern)')
        elif not re.match(r"(postgres(ql)?://|\$\{\w+\}$)", state.postgres_url):  # or all of it from one ${VAR}
            problems.append("state.postgres_url: expected a postgresql:// URL (or one ${VAR} holding it)")
    elif state.postgres_url:
        problems.append('state.postgres_url: set only with store = "postgres"')
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


def _oauth_problems(oauth: msgspec.Struct, where: str) -> list[str]:
    """What would only fail at the first login: said at load time instead."""
    problems = []
    if oauth.client_metadata_url and not re.match(r"(?i)^https://[^/\s]+/\S+", oauth.client_metadata_url):
        problems.append(f'{where}.client_metadata_url: a Client ID Metadata Document URL is https with a path, '
                        f'got "{shorten(oauth.client_metadata_url)}"')
    if oauth.redirect_uri:
        problems += _url_problem(oauth.redirect_uri, f"{where}.redirect_uri")
    if not 0 <= oauth.redirect_port <= 65535:
        problems.append(f"{where}.redirect_port: expected 0 (any free port) to 65535, got {oauth.redirect_port}")
    if oauth.grant in ("client_credentials", "enterprise_managed") and not oauth.client_id:
        problems.append(f'{where}.client_id: grant = "{oauth.grant}" needs the client_id it was issued')
    if oauth.private_key_file and oauth.grant == "authorization_code":
        problems.append(f'{where}.private_key_file: not used with grant = "authorization_code"')
    asserts = oauth.grant in ("jwt_bearer", "enterprise_managed")
    if asserts and bool(oauth.assertion_file) == bool(oauth.assertion_env):
        problems.append(f'{where}: grant = "{oauth.grant}" reads its JWT from one of assertion_file or assertion_env')
    if not asserts and (oauth.assertion_file or oauth.assertion_env):
        problems.append(f'{where}.assertion_file/assertion_env: only used with grant = "jwt_bearer" or '
                        '"enterprise_managed"')
    if oauth.grant == "enterprise_managed":
        problems += _url_problem(oauth.idp_token_endpoint, f"{where}.idp_token_endpoint")
        if not oauth.idp_client_id:
            problems.append(f'{where}.idp_client_id: grant = "enterprise_managed" needs tern\'s client_id at the IdP')
    elif oauth.idp_token_endpoint or oauth.idp_client_id or oauth.idp_client_secret_env:
        problems.append(f'{where}.idp_*: only used with grant = "enterprise_managed"')
    return problems


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _peer_auth_problems(auth: PeerAuth, where: str, *, card: bool) -> list[str]:
    """``auth`` for a peer: each kind with its own fields and no other's. ``card``: the
    peer's card may name the token endpoint (an A2A agent; a webhook has no card)."""
    problems = []
    if auth.kind == "bearer":
        if not _ENV_NAME.fullmatch(auth.token_env):
            problems.append(f'{where}.token_env: kind = "bearer" needs the name of the variable holding the token')
        extra = [k for k in ("token_url", "client_id", "client_secret_env", "scopes", "audience") if getattr(auth, k)]
        if extra:
            problems.append(f'{where}: {", ".join(extra)} not used with kind = "bearer"')
        return problems
    if auth.token_env:
        problems.append(f'{where}.token_env: not used with kind = "client_credentials"')
    if not auth.client_id:
        problems.append(f'{where}.client_id: kind = "client_credentials" needs the client_id it was issued')
    if not _ENV_NAME.fullmatch(auth.client_secret_env):
        problems.append(f'{where}.client_secret_env: kind = "client_credentials" needs the name of the variable '
                        "holding the client secret")
    if auth.token_url:
        if not re.match(r"(?i)^https://[^/\s]+", auth.token_url) and not _loopback_http(auth.token_url):
            problems.append(f'{where}.token_url: expected an https:// URL (http:// only to loopback), '
                            f'got "{shorten(auth.token_url)}"')
    elif not card:
        problems.append(f"{where}.token_url: needed here (there is no agent card to name it)")
    return problems


def _loopback_http(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return url.lower().startswith("http://") and (host in ("localhost", "::1") or host.startswith("127."))


def _client_cert_pair(entry: msgspec.Struct, where: str) -> list[str]:
    if bool(entry.tls_client_cert) != bool(entry.tls_client_key):
        return [f"{where}: tls_client_cert and tls_client_key go together"]
    return []


def client_cert_problems(config: Config) -> list[str]:
    """Every configured client certificate loads with its key (paths already absolute):
    a missing, unreadable or mismatched file is a config error now, not a failed
    handshake later."""
    import ssl

    entries = [(f"mcp_servers[{i}].transport", s.transport) for i, s in enumerate(config.mcp_servers)
               if not isinstance(s.transport, StdioTransport)]
    entries += [(f"a2a.external_agents[{i}]", a) for i, a in enumerate(config.a2a.external_agents)]
    entries += [(f"a2a.push_webhooks[{i}]", h) for i, h in enumerate(config.a2a.push_webhooks)]
    problems = []
    for where, entry in entries:
        if not entry.tls_client_cert:
            continue
        try:  # an encrypted key would ask for a password on the terminal: a callback refuses instead
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(entry.tls_client_cert, entry.tls_client_key,
                                                                    password=_no_password)
        except (OSError, ssl.SSLError, ValueError) as exc:
            why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            problems.append(f"{where}: cannot load the client certificate {entry.tls_client_cert} with the key "
                            f"{entry.tls_client_key}: {why}")
    return problems


def _no_password() -> bytes:
    raise ValueError("the key is encrypted (tern takes an unencrypted PEM key, readable by it only)")


def _url_problem(url: str, where: str) -> list[str]:
    if not re.match(r"(?i)^https?://[^/\s]+", url):
        return [f'{where}: expected an http:// or https:// URL, got "{shorten(url)}"']
    return []
