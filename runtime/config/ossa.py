"""Importing an OSSA agent manifest (``tern import ossa``): TOML blocks to append to
config.toml, plus warnings. Sans-IO: manifest text in, ``(toml, warnings)`` out.

An OSSA manifest describes an agent to the runtime that hosts it: the MCP servers to
provision, the governance to enforce, the lifecycle to manage. tern is such a runtime,
so the manifest becomes an agent tern *runs*, and each part lands where tern keeps it:

- ``agent`` -> one ``[[agents]]`` entry, named after the last part of ``agent.id``
  (``bluefly/code-review-agent`` -> ``code-review-agent``). The rest of the identity (the
  whole id, the display name, version and type) describes the agent without asking tern
  to do anything, so it is kept in a comment above the entry rather than warned about.
  The entry is ``kind = "llm"``, the one kind that calls tools; the manifest does not
  say which model, so ``[agents.model]`` is left for the user to fill in (a warning).
- ``agent.access_tier`` -> tern's tiers: tier_1_read "read", tier_2_write_limited
  "write", tier_3_full_access "full"; tier_4_policy "full" with a warning (tern has no
  policy tier). A missing tier comes from ``agent.type`` by OSSA's type table; an
  unknown one, or none at all, becomes "read": governance that cannot be read fails
  closed, and the warning says what to change.
- ``capabilities.mcp_servers`` -> ``[[mcp_servers]]`` with ``tools`` as
  ``tools_include``, and the agent's ``tools`` allowlist is exactly those tools
  (``mcp_{server}_{tool}``; every tool of a server that lists none): the agent gets what
  its manifest declares and nothing more, not even tern's built-in tools. The manifest
  names a transport but not what to run or where, so each server is written
  ``enabled = false`` with a placeholder that cannot start anything by accident (a path
  that does not exist, a ``.invalid`` host), and a warning per server says what to fill in.
- ``capabilities.a2a``: ``skills`` go on the agent (tern's card for it lists them).
  ``agent_card_url`` is where the agent is deployed today; tern does not need it to run
  the agent, but a user may rather call that deployment, so it becomes a disabled
  ``[[a2a.external_agents]]`` entry: one line to change.
- ``governance.requires_approval_for`` -> ``[[governance.rules]]`` asking a person, for
  this agent only. OSSA names actions, tern's rules match tool names: an action that is
  one of the manifest's MCP tools or one of tern's built-in tools becomes that tool; any
  other name a glob on the tool names that contain it (``*production_deployment*``), with
  a warning, since which tool performs that action is not known here. Asking too often is
  the safe mistake. ``rate_limits`` become the agent's budgets.
- ``lifecycle``: a tern agent is not a process of its own; the processes tern supervises
  for it are its MCP servers, so ``restart_policy`` and ``max_restarts`` apply to them
  (tern counts every end of an MCP server's connection as a failure, so OSSA's "always"
  and "unless-stopped" behave as tern's "on-failure").

Everything tern cannot honour gets one warning naming the field, unknown fields too.
Input that is not a manifest (not JSON, over ``MAX_MANIFEST_BYTES``, nested too deep, no
``agent`` object, a field of the wrong type) is a ConfigError: one line, no TOML.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any, NamedTuple
from collections.abc import Iterable

from runtime.config.dump import toml_line, toml_string
from runtime.config.sentences import json_kind
from runtime.errors import ConfigError
from runtime.mcp.names import format_mcp_tool_name, glob_key, normalize
from runtime.wire.depth import MAX_DEPTH, too_deep

__all__ = ["MAX_MANIFEST_BYTES", "OssaImport", "import_ossa", "too_large"]

#: A manifest is a few KiB; the bound keeps a wrong file (a log, an image) from being read whole.
MAX_MANIFEST_BYTES = 1024 * 1024

TIERS = {"tier_1_read": "read", "tier_2_write_limited": "write", "tier_3_full_access": "full",
         "tier_4_policy": "full"}

#: OSSA's nine agent types and the access tier each has (the seed's Table 4.1).
TYPE_TIERS = {
    "analyzer": "tier_1_read", "reviewer": "tier_2_write_limited", "executor": "tier_3_full_access",
    "orchestrator": "tier_2_write_limited", "monitor": "tier_1_read", "guardian": "tier_4_policy",
    "planner": "tier_1_read", "specialist": "tier_2_write_limited", "bridge": "tier_2_write_limited",
}

_VERSIONS = re.compile(r"0\.3(?:\.\d+)?")  # what this importer was written against (0.3.3)
_TRANSPORTS = {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamable_http": "http", "sse": "sse"}
_RESTART = {"on-failure": "on-failure", "always": "on-failure", "unless-stopped": "on-failure",
            "never": "never", "no": "never"}
_MAX_INT = 2**63 - 1  # what TOML (and the config's integers) can hold
_WIDTH = 100  # an array longer than this goes one item a line


class OssaImport(NamedTuple):
    """``toml``: the blocks, ready to append to a config; ``agent``: the tern name the
    agent was given; ``warnings``: one line each, naming the field, section by section."""

    toml: str
    agent: str
    warnings: list[str]


def import_ossa(text: str, label: str = "<input>", builtin_tools: Iterable[str] = ()) -> OssaImport:
    """Convert an OSSA manifest into tern TOML.

    ``builtin_tools`` are the names of tern's own tools, which an approval action may
    name directly. Raises ConfigError (one line, starting with ``label``) for input
    that is not a manifest.
    """
    return _Importer(label, set(builtin_tools)).run(_load(text, label))


def too_large(label: str) -> str:
    """The sentence for a manifest over ``MAX_MANIFEST_BYTES`` (a reader that stops
    there says it too)."""
    return f"{label}: larger than {MAX_MANIFEST_BYTES // 1024} KiB, which no OSSA manifest needs"


# --- Reading ----------------------------------------------------------------------------


def _load(text: str, label: str) -> dict[str, Any]:
    if len(text) > MAX_MANIFEST_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_MANIFEST_BYTES:
        raise ConfigError(too_large(label))
    text = text[1:] if text.startswith("\ufeff") else text
    if too_deep(text):
        raise ConfigError(f"{label}: invalid JSON: nested more than {MAX_DEPTH} levels deep")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{label}: line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from None
    except ValueError as exc:  # NaN, Infinity
        raise ConfigError(f"{label}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a JSON object (an OSSA manifest), got {json_kind(data)}")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _shown(value: str) -> str:
    """Text from the manifest as a warning shows it: quoted, control characters escaped."""
    try:
        shown = json.dumps(value, ensure_ascii=False)
        shown.encode("utf-8")
        return shown
    except UnicodeEncodeError:  # a lone surrogate
        return json.dumps(value)


class _Fields:
    """One JSON object of the manifest, read field by field with its key path; what is
    left unread at the end was not understood (``unread``)."""

    def __init__(self, importer: _Importer, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise importer.error(path, f"expected an object, got {json_kind(value)}")
        self.importer, self.data, self.path, self.read = importer, value, path, set()

    def where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str) -> Any:
        """The raw value (None when absent or null)."""
        self.read.add(key)
        return self.data.get(key)

    def text(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            return ""
        return self.importer.text(value, self.where(key))

    def object(self, key: str) -> _Fields | None:
        value = self.get(key)
        return None if value is None else _Fields(self.importer, value, self.where(key))

    def array(self, key: str) -> list[Any]:
        value = self.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.importer.error(self.where(key), f"expected an array, got {json_kind(value)}")
        return value

    def names(self, key: str) -> list[str]:
        """An array of non-empty strings, duplicates dropped."""
        found: dict[str, None] = {}
        for i, item in enumerate(self.array(key)):
            name = self.importer.text(item, f"{self.where(key)}[{i}]")
            if not name.strip():
                raise self.importer.error(f"{self.where(key)}[{i}]", "expected a name, got an empty string")
            found[name] = None
        return list(found)

    def count(self, key: str) -> int | None:
        """A whole number from 0 to what TOML holds."""
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_INT:
            raise self.importer.error(self.where(key), f"expected a whole number 0 or more, got {_describe(value)}")
        return value

    def seconds(self, key: str) -> float | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise self.importer.error(self.where(key), f"expected a number of seconds, got {_describe(value)}")
        return value

    def flag(self, key: str) -> bool | None:
        value = self.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.importer.error(self.where(key), f"expected true or false, got {json_kind(value)}")
        return value

    def unread(self) -> list[str]:
        """The paths of the keys not read, each quoted unless it is a plain name (a key
        is anyone's text: a newline in it must not start a line of its own)."""
        return [self.where(key if re.fullmatch(r"[A-Za-z0-9_$@-]+", key) else _shown(key))
                for key in self.data if key not in self.read]


def _describe(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return json_kind(value)
    return repr(value) if abs(value) <= _MAX_INT else "a number too large for TOML"


# --- Converting -------------------------------------------------------------------------


class _Server(NamedTuple):
    name: str  # the tern name
    transport: str
    tools: list[str]


class _Importer:
    """One manifest's conversion: the warnings found so far and the blocks written."""

    def __init__(self, label: str, builtin_tools: set[str]) -> None:
        self.label = label
        self.builtins = {glob_key(name): name for name in builtin_tools}
        self.warnings: list[str] = []

    def error(self, path: str, why: str) -> ConfigError:
        return ConfigError(f"{self.label}: {path}: {why}")

    def warn(self, path: str, why: str) -> None:
        self.warnings.append(f"{path}: {why}")

    def text(self, value: Any, path: str) -> str:
        """A string TOML can hold."""
        if not isinstance(value, str):
            raise self.error(path, f"expected a string, got {json_kind(value)}")
        try:
            toml_string(value)
        except ValueError as exc:
            raise self.error(path, str(exc)) from None
        return value

    def run(self, data: dict[str, Any]) -> OssaImport:
        top = _Fields(self, data, "")
        self._version(top)
        agent = top.object("agent")
        if agent is None:
            raise self.error("agent", "missing: an OSSA manifest describes one agent there")
        capabilities = top.object("capabilities")
        governance = top.object("governance")
        lifecycle = top.object("lifecycle")
        name, header = self._identity(agent)
        description = agent.text("description") or agent.text("name")
        tier = self._tier(agent)
        self._unknown(agent)

        servers: list[_Server] = []
        skills: list[str] = []
        card_url = ""
        if capabilities is not None:
            servers = self._servers(capabilities)
            a2a = capabilities.object("a2a")
            if a2a is not None:
                skills = a2a.names("skills")
                card_url = self._card_url(a2a)
                self._unknown(a2a)
            self._unknown(capabilities)

        rate_limits: dict[str, int] = {}
        approvals: list[str] = []
        if governance is not None:
            self._autonomy(governance)
            approvals = self._approvals(governance, servers)
            if governance.flag("audit_log") is False:
                self.warn(governance.where("audit_log"), "false is not honoured: tern audits every tool call")
            rate_limits = self._rate_limits(governance)
            self._unknown(governance)

        restart, max_restarts = self._lifecycle(lifecycle, servers)
        self._unknown(top)
        self.warn("agent", "the manifest does not say which model runs the agent: set [agents.model] model "
                           "(and base_url) before using it")

        blocks = [self._agent_block(name, header, description, tier, servers, rate_limits, skills)]
        blocks += [self._server_block(server, restart, max_restarts) for server in servers]
        blocks += [self._rule_block(name, tool, first=i == 0) for i, tool in enumerate(approvals)]
        if card_url:
            blocks.append(self._external_block(name, card_url))
        return OssaImport("\n".join(blocks), name, self.warnings)

    # --- top level and identity ---

    def _version(self, top: _Fields) -> None:
        version = top.text("ossa_version")
        if not version:
            self.warn("ossa_version", "missing; read as OSSA 0.3.3")
        elif not _VERSIONS.fullmatch(version):
            self.warn("ossa_version", f"{_shown(version)} is not a version this importer knows (0.3.x); "
                                      "read as OSSA 0.3.3, so check the result")

    def _identity(self, agent: _Fields) -> tuple[str, str]:
        """The tern name and the comment that keeps the rest of the identity."""
        ident, display = agent.text("id"), agent.text("name")
        version, kind = agent.text("version"), agent.text("type")
        if not ident.strip() and not display.strip():
            raise self.error("agent", "needs an id or a name to name the agent after")
        source = ident.rsplit("/", 1)[-1]
        name = _agent_name(source)
        if not name:
            name = _agent_name(display.lower())
            after = "after agent.name" if name else "(neither its id nor its name has letters tern names allow)"
            name = name or "ossa-agent"
            self.warn("agent.id", f'{"missing" if not ident else "no tern name in " + _shown(ident)}; '
                                  f'the agent is named "{name}" {after}')
        elif name != source:
            self.warn("agent.id", f'{_shown(source)} is not a tern agent name (letters, digits, "-", "_" and "."); '
                                  f'the agent is named "{name}"')
        if kind and kind.lower() not in TYPE_TIERS:
            self.warn("agent.type", f"{_shown(kind)} is not one of OSSA's nine agent types; kept as a comment only")
        parts = [f"agent {toml_string(ident or display)}"
                 + (f" ({toml_string(display)})" if display and ident else "")]
        parts += [f"version {toml_string(version)}"] if version else []
        parts += [f"type {toml_string(kind)}"] if kind else []
        return name, "# From an OSSA manifest: " + ", ".join(parts)

    def _tier(self, agent: _Fields) -> str:
        """tern's tier, with one warning when it is not the manifest's own tier_1..3."""
        tier = agent.text("access_tier")
        kind = agent.text("type").lower()
        narrowest = 'the agent is "read", the narrowest tier: change access_tier if it needs more'
        if not tier and kind not in TYPE_TIERS:
            self.warn("agent.access_tier", f"missing; {narrowest}")
            return "read"
        why = ""
        if not tier:
            tier = TYPE_TIERS[kind]
            why = f'missing; {tier} is the tier of OSSA type "{kind}"'
        mapped = TIERS.get(tier)
        if mapped is None:
            self.warn("agent.access_tier", f"{_shown(tier)} is not an OSSA tier (tier_1_read, tier_2_write_limited, "
                                           f"tier_3_full_access, tier_4_policy); {narrowest}")
            return "read"
        if tier == "tier_4_policy":
            why = (why + ", and " if why else "tier_4_policy: ") + "tern has no policy tier"
            self.warn("agent.access_tier", f'{why}; the agent is "full" (every tool its tools allow), and '
                                           "[[governance.rules]] are the policy")
        elif why:
            self.warn("agent.access_tier", f'{why}, so the agent is "{mapped}"')
        return mapped

    # --- capabilities ---

    def _servers(self, capabilities: _Fields) -> list[_Server]:
        servers: list[_Server] = []
        used: set[str] = set()
        for i, item in enumerate(capabilities.array("mcp_servers")):
            entry = _Fields(self, item, f"{capabilities.where('mcp_servers')}[{i}]")
            source = entry.text("name")
            if not source.strip():
                raise self.error(entry.where("name"), "missing: each MCP server needs a name")
            name = _server_name(source, used)
            if name != source:
                self.warn(entry.where("name"), f'{_shown(source)} is written as "{name}" (tern server names use '
                                               'letters, digits, "-" and "_", once each)')
            used.add(name)
            transport = entry.text("transport")
            kind = _TRANSPORTS.get(transport.lower())
            tools = entry.names("tools")
            self._unknown(entry)
            if not transport:
                kind = "stdio"
                self.warn(entry.where("transport"), 'missing; written as "stdio"')
            elif kind is None:
                self.warn(entry.where("transport"), f'{_shown(transport)} is not a transport tern speaks (stdio, '
                                                    f'http, sse); server "{name}" and its tools were left out')
                continue
            what = "command" if kind == "stdio" else "url"
            self.warn(f"capabilities.mcp_servers[{i}]", f'the manifest does not say how to start server "{name}": '
                                                        f'it is written disabled; set its {what}, then remove '
                                                        '"enabled = false"')
            servers.append(_Server(name, kind, tools))
        return servers

    def _card_url(self, a2a: _Fields) -> str:
        url = a2a.text("agent_card_url")
        if url and not re.match(r"(?i)^https?://[^/\s]+", url):
            self.warn(a2a.where("agent_card_url"), f"{_shown(url)} is not an http:// or https:// URL; left out")
            return ""
        if url:
            self.warn(a2a.where("agent_card_url"), "tern runs the agent itself and serves its card; the deployment "
                                                   "at this URL is written as a disabled [[a2a.external_agents]] "
                                                   "entry, to enable if tern should call it instead")
        return url

    # --- governance ---

    def _approvals(self, governance: _Fields, servers: list[_Server]) -> list[str]:
        """Tool globs, one a rule, for the actions a person must approve."""
        tools: dict[str, list[str]] = {}
        for server in servers:
            for tool in server.tools:
                tools.setdefault(glob_key(tool), []).append(format_mcp_tool_name(server.name, tool))
        globs: dict[str, None] = {}
        where = governance.where("requires_approval_for")
        for i, action in enumerate(governance.names("requires_approval_for")):
            key = glob_key(action)
            if key in tools:
                globs.update(dict.fromkeys(tools[key]))
            elif key in self.builtins:
                globs[self.builtins[key]] = None
            else:
                glob = f"*{_literal(action)}*"
                globs[glob] = None
                self.warn(f"{where}[{i}]", f"{_shown(action)} is not a tool tern knows; the rule asks before any "
                                           f'tool whose name contains it ("{glob}"): change it to the tools that '
                                           "perform this action")
        return list(globs)

    def _rate_limits(self, governance: _Fields) -> dict[str, int]:
        limits = governance.object("rate_limits")
        if limits is None:
            return {}
        found = {}
        for key in ("requests_per_minute", "tokens_per_hour"):
            value = limits.count(key)
            if value == 0:
                self.warn(limits.where(key), "0 means no limit in tern; left out")
            elif value is not None:
                found[key] = value
        self._unknown(limits)
        return found

    def _autonomy(self, governance: _Fields) -> None:
        level = governance.get("max_autonomy_level")
        if level is not None:
            if isinstance(level, bool) or not isinstance(level, (int, float, str)):
                raise self.error(governance.where("max_autonomy_level"), f"expected a level, got {json_kind(level)}")
            self.warn(governance.where("max_autonomy_level"), "not honoured: OSSA defines no scale for it and tern "
                                                              "has no autonomy levels; access_tier and the approval "
                                                              "rules are what bound this agent")

    # --- lifecycle ---

    def _lifecycle(self, lifecycle: _Fields | None, servers: list[_Server]) -> tuple[str, int | None]:
        if lifecycle is None:
            return "", None
        policy = lifecycle.text("restart_policy")
        restart = _RESTART.get(policy.lower(), "")
        max_restarts = lifecycle.count("max_restarts")
        if policy and not restart:
            self.warn(lifecycle.where("restart_policy"), f"{_shown(policy)} is not a policy tern knows "
                                                         "(on-failure, always, never); left out")
        for key, used in (("restart_policy", restart), ("max_restarts", max_restarts)):
            if used not in ("", None) and not servers:
                self.warn(lifecycle.where(key), "not honoured: tern applies it to the agent's MCP servers "
                                                "(the agent is not a process of its own), and it has none")
        if lifecycle.seconds("health_check_interval") is not None:
            self.warn(lifecycle.where("health_check_interval"), "not honoured: tern watches its MCP servers' "
                                                                "processes and connections itself, with no interval")
        if lifecycle.seconds("graceful_shutdown_timeout") is not None:
            self.warn(lifecycle.where("graceful_shutdown_timeout"), "not honoured: tern has one shutdown grace for "
                                                                    "the whole daemon ([server] shutdown_grace_secs)")
        self._unknown(lifecycle)
        return restart, max_restarts

    def _unknown(self, fields: _Fields) -> None:
        for path in fields.unread():
            self.warn(path, "not an OSSA field tern knows; ignored")

    # --- TOML ---

    def _agent_block(self, name: str, header: str, description: str, tier: str, servers: list[_Server],
                     rate_limits: dict[str, int], skills: list[str]) -> str:
        tools = []
        for server in servers:
            tools += [format_mcp_tool_name(server.name, t) for t in server.tools] or \
                [f"mcp_{normalize(server.name)}_*"]
        lines = [header, "[[agents]]", _line("name", name), _line("kind", "llm")]
        if description:
            lines.append(_line("description", description))
        lines.append(_line("access_tier", tier))
        lines.append(_line("tools", list(dict.fromkeys(tools))))
        lines += [_line(key, value) for key, value in rate_limits.items()]
        lines += ["[agents.model]", "# the manifest does not say which model: name one (and its base_url)",
                  _line("model", "")]
        for skill in skills:
            lines += ["[[agents.skills]]", _line("id", skill), _line("name", skill)]
        return "\n".join(lines) + "\n"

    def _server_block(self, server: _Server, restart: str, max_restarts: int | None) -> str:
        lines = [f"# the manifest does not say how to start {server.name}: set the "
                 f"{'command' if server.transport == 'stdio' else 'url'}, then remove enabled = false",
                 "[[mcp_servers]]", _line("name", server.name), _line("enabled", False)]
        if restart:
            lines.append(_line("restart", restart))
        if max_restarts is not None:
            lines.append(_line("max_restarts", max_restarts))
        if server.tools:
            lines.append(_line("tools_include", [_literal(tool) for tool in server.tools]))
        lines += ["[mcp_servers.transport]", _line("type", server.transport)]
        if server.transport == "stdio":
            lines.append(_line("command", f"/path/to/{server.name}"))
        else:
            lines.append(_line("url", f"https://{server.name.lower().replace('_', '-')}.invalid/mcp"))
        return "\n".join(lines) + "\n"

    def _rule_block(self, agent: str, tool: str, first: bool) -> str:
        lines = ["# governance.requires_approval_for: a person approves these calls"] if first else []
        lines += ["[[governance.rules]]", _line("tool", tool), _line("decision", "ask"), _line("agent", agent)]
        return "\n".join(lines) + "\n"

    def _external_block(self, agent: str, url: str) -> str:
        return "\n".join([
            "# capabilities.a2a.agent_card_url: the deployed agent; enable this to call it from tern",
            "[[a2a.external_agents]]", _line("name", agent), _line("url", url), _line("enabled", False),
        ]) + "\n"


def _agent_name(source: str) -> str:
    """A valid tern agent name made of ``source`` ("" when nothing is left): ASCII, with
    accents dropped rather than the letters ("Ünïcode" -> "Unicode")."""
    ascii_only = unicodedata.normalize("NFKD", source).encode("ascii", "ignore").decode()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", ascii_only).strip("-_.")
    return name[:64].rstrip("-_.")


def _server_name(source: str, used: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", source).strip("-") or "server"
    unique, n = name, 2
    while unique in used:
        unique, n = f"{name}-{n}", n + 1
    return unique


def _literal(name: str) -> str:
    """A glob that matches ``name`` itself, even when it holds ``*``, ``?`` or ``[``."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def _line(key: str, value: Any) -> str:
    return toml_line(key, value, width=_WIDTH)
