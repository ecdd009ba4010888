"""Importing MCP servers from Claude Desktop, Cursor and VS Code JSON (``tern mcp import``).

The result is a fragment of ``[[mcp_servers]]`` tables to append to config.toml, plus
warnings. Why this is more than a change of format:

- tern never keeps secret values in its config. ``env`` names variables passed through
  from tern's own environment, so literal env values are dropped, and literal secrets
  in auth-like headers become ``${SERVER_HEADER}`` references; each time a warning
  says what to export. ``${env:VAR}`` (VS Code, Cursor) becomes tern's ``${VAR}``.
- The files people paste are loose: VS Code's take comments and trailing commas, some
  are only the name -> server map, each client has its own keys. What cannot be carried
  over is reported, never silently dropped; a server that cannot be expressed at all is
  skipped with a warning. Only input without any servers object is an error.
- The layout is chosen here, not left to ``dump_toml``: the output is meant to be read
  and edited by hand (one table a server, long arrays one item a line). Values are
  written by the config's one TOML writer (``dump``); text from someone else's file
  that TOML cannot hold (a lone surrogate) skips the server.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from runtime.config.itself import runs_tern
from runtime.config.dump import toml_line
from runtime.config.sentences import json_kind
from runtime.errors import ConfigError, TernError

__all__ = ["ImportResult", "import_mcp_json"]


class ImportResult(NamedTuple):
    """``toml``: ``[[mcp_servers]]`` tables in source order ("" if none); ``warnings``:
    one line each, in the order found."""

    toml: str
    warnings: list[str]


class _Skip(TernError):
    """A server that cannot be carried over; the message says why."""


_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamablehttp": "http", "sse": "sse"}
_COMMON_KEYS = ("type", "transport", "env", "disabled", "enabled")
_STDIO_KEYS = ("command", "args", "cwd")
_REMOTE_KEYS = ("url", "serverUrl", "headers")

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFERENCE = re.compile(r"\$\{([^{}]*)\}")
_VARIABLE_REFERENCE = re.compile(r"(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(:-.*)?", re.S)
_SECRET_HEADER = re.compile(r"(?i)auth|token|key|secret|passw|cookie")
_SCHEME = re.compile(r"(?i)(bearer|basic|token|bot)\s+\S.*", re.S)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 9110 token
_URL = re.compile(r"(?i)^https?://[^/\s]+")  # what the config checks accept
_SECRET_QUERY = re.compile(r"(?i)(?:^|&)([^=&]*(?:key|token|secret|passw|auth|sig)[^=&]*)=")


def import_mcp_json(text: str, label: str = "<input>") -> ImportResult:
    """Convert an MCP client's JSON config into tern ``[[mcp_servers]]`` TOML.

    Raises ConfigError (one line, starting with ``label``) when the text is not JSON or
    holds no servers object. Everything else becomes a warning.
    """
    warnings: list[str] = []
    key, servers = _find_servers(_load_json(text, label), label, warnings)
    if not servers:
        warnings.append(f"{key} is empty: no servers to import")
    importer = _Importer()
    blocks = []
    for source_name, spec in servers.items():
        block, found = importer.server(source_name, spec)
        warnings.extend(found)
        if block:
            blocks.append(block)
    return ImportResult("\n".join(blocks), warnings)


# --- Finding the servers -----------------------------------------------------------------


def _load_json(text: str, label: str) -> Any:
    """Strict JSON first; then JSON with comments and trailing commas (VS Code's files)."""
    text = text[1:] if text.startswith("\ufeff") else text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise ConfigError(f"{label}: invalid JSON: nested too deeply") from None
    try:
        return json.loads(_strip_jsonc(text))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{label}: line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(f"{label}: invalid JSON: nested too deeply") from None


def _strip_jsonc(text: str) -> str:
    """Blank out comments and trailing commas, keeping every other character in place
    (so JSON error positions still point into the original text)."""
    out = list(text)
    i, n = 0, len(text)
    in_string = False
    comma = -1
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            in_string = ch != '"'
        elif text.startswith("//", i) or text.startswith("/*", i):
            line = text[i + 1] == "/"
            end = text.find("\n", i) if line else text.find("*/", i + 2)
            end = n if end == -1 else end if line else end + 2
            for j in range(i, end):
                if out[j] not in "\r\n":
                    out[j] = " "
            i = end
            continue
        elif ch == '"':
            in_string, comma = True, -1
        elif ch == ",":
            comma = i
        elif ch in "}]":
            if comma >= 0:
                out[comma] = " "
            comma = -1
        elif ch not in " \t\r\n":
            comma = -1
        i += 1
    return "".join(out)


def _find_servers(data: Any, label: str, warnings: list[str]) -> tuple[str, dict[str, Any]]:
    """The name -> server object and the key it was found under."""
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a JSON object at the top level, got {json_kind(data)}")
    found = [(key, data[key]) for key in ("mcpServers", "servers") if key in data]
    nested = data.get("mcp")
    if not found and isinstance(nested, dict) and "servers" in nested:  # VS Code settings.json
        found = [("mcp.servers", nested["servers"])]
    if found:
        key, servers = found[0]
        if not isinstance(servers, dict):
            raise ConfigError(f"{label}: {key}: expected an object of servers by name, got {json_kind(servers)}")
        for other, _ in found[1:]:
            warnings.append(f"{other} was ignored: only {key} was imported")
        return key, servers
    if data and all(isinstance(v, dict) and any(k in v for k in ("command", "url", "serverUrl"))
                    for v in data.values()):
        return "the top-level object", data
    raise ConfigError(f'{label}: no MCP servers found: expected an object with "mcpServers" '
                      f'(Claude Desktop, Cursor) or "servers" (VS Code)')


# --- One server --------------------------------------------------------------------------


class _Importer:
    """Converts servers one by one; remembers the names and variables already used."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.variables: set[str] = set()

    def server(self, source_name: str, spec: Any) -> tuple[str, list[str]]:
        """The TOML block for one server ("" if skipped) and its warnings."""
        name, why = self._name(source_name)
        shown = json.dumps(source_name, ensure_ascii=False)
        warnings = [f'server {shown} renamed to "{name}" ({why})'] if why else []
        variables: set[str] = set()
        try:
            if not isinstance(spec, dict):
                raise _Skip(f"expected an object, got {json_kind(spec)}")
            block = self._convert(name, spec, warnings, variables)
        except _Skip as exc:
            return "", [f"server {name if name == source_name else shown}: skipped: {exc}"]
        self.names.add(name)
        self.variables |= variables
        return block, warnings

    def _name(self, source: str) -> tuple[str, str]:
        """The tern name and, when it differs from the source, why."""
        why = ""
        name = source
        if not _NAME.fullmatch(source):
            name = re.sub(r"[^A-Za-z0-9_-]+", "-", source).strip("-") or "server"
            why = 'tern server names use letters, digits, "-" and "_"'
        unique, n = name, 2
        while unique in self.names:
            unique, n = f"{name}-{n}", n + 1
        if unique != name:
            why = why or f'"{name}" is already used'
        return unique, why

    def _convert(self, name: str, spec: dict[str, Any], warnings: list[str], variables: set[str]) -> str:
        kind = self._transport_type(name, spec, warnings)
        lines = ["[[mcp_servers]]", _line("name", name)]
        env = self._env(name, spec.get("env", {}), warnings)
        if env:
            lines.append(_line("env", env))
        enabled = _typed(spec, "enabled", bool, True) and not _typed(spec, "disabled", bool, False)
        if not enabled:
            lines.append(_line("enabled", False))
        lines += ["[mcp_servers.transport]", _line("type", kind)]
        if kind == "stdio":
            used = _COMMON_KEYS + _STDIO_KEYS
            command = _typed(spec, "command", str, "")
            if not command.strip():
                raise _Skip("command: expected a program to run")
            if ".." in re.split(r"[\\/]", command):
                raise _Skip('command: a ".." path component is not allowed in tern; use an absolute path')
            args = [_arg(value, i) for i, value in enumerate(_typed(spec, "args", list, []))]
            if runs_tern(command, args):
                raise _Skip("it runs tern itself (the entry `tern setup` wrote): tern's agents are tern's already, "
                            "and a tern that is its own MCP server starts tern after tern")
            cwd = _typed(spec, "cwd", str, "")
            lines.append(_line("command", command))
            if args:
                lines.append(_line("args", args))
            if cwd:
                lines.append(_line("cwd", cwd))
            # contained (docs/sandbox.md): network on, writable only its cwd and the absolute paths
            # its arguments name (server-filesystem's directories: what the user gave it to work on)
            lines.append(_line("sandbox", "auto"))
            paths = [a for a in args if a.startswith(("/", "~/")) and ".." not in a.split("/")]
            if paths:
                lines.append(_line("writable", paths))
            fields = [("command", command)] + [(f"args[{i}]", a) for i, a in enumerate(args)] + [("cwd", cwd)]
            for field, value in fields:
                refs = [m.group(0) for m in _REFERENCE.finditer(value)]
                if refs:
                    warnings.append(f"server {name}: {field} uses {', '.join(refs)}, which tern does not "
                                    "expand there; edit the value in the config")
        else:
            used = _COMMON_KEYS + _REMOTE_KEYS
            if "url" in spec:
                used = tuple(k for k in used if k != "serverUrl")
            url = _typed(spec, "url" if "url" in spec else "serverUrl", str, "")
            if not _URL.match(url):
                raise _Skip("url: expected an http:// or https:// URL")
            headers = self._headers(name, _typed(spec, "headers", dict, {}), warnings, variables)
            lines.append(_line("url", url))
            if headers:
                lines.append(_line("headers", headers))
            refs = [m.group(0) for m in _REFERENCE.finditer(url)]
            if refs:
                warnings.append(f"server {name}: url uses {', '.join(refs)}, which tern does not expand "
                                "there; edit the value in the config")
            secret = _SECRET_QUERY.search(url.split("#")[0].partition("?")[2])
            if secret or re.match(r"(?i)^https?://[^/?#@]*@", url):
                what = f'query parameter "{secret.group(1)}" looks' if secret else "user and password look"
                warnings.append(f"server {name}: the url's {what} like a secret and was copied into the "
                                "config as it is; pass it in a header instead if the server allows")
        if "envFile" in spec:
            warnings.append(f"server {name}: envFile was not read; export its variables in tern's environment "
                            "and add their names to env")
        ignored = [key for key in spec if key not in used and key != "envFile"]
        if ignored:
            warnings.append(f"server {name}: ignored keys tern does not use: {', '.join(ignored)}")
        return "\n".join(lines) + "\n"

    def _transport_type(self, name: str, spec: dict[str, Any], warnings: list[str]) -> str:
        """stdio, http or sse: from ``type``/``transport``, else from command or url."""
        key = "type" if "type" in spec else "transport" if "transport" in spec else ""
        if key:
            raw = spec[key]
            kind = _TYPES.get(raw.lower().replace("_", "-")) if isinstance(raw, str) else None
            if kind is None:
                shown = json.dumps(raw, ensure_ascii=False) if isinstance(raw, str) else json_kind(raw)
                raise _Skip(f"{key}: transport {shown} is not supported (tern speaks stdio, http and sse)")
            return kind
        if "command" in spec:
            return "stdio"
        url = spec.get("url", spec.get("serverUrl"))
        if url is None:
            raise _Skip("neither a command nor a url")
        if isinstance(url, str) and re.search(r"/sse/?$", url.split("?")[0].split("#")[0]):
            warnings.append(f'server {name}: no transport type in the source; chose "sse" because the url '
                            'ends in /sse (set type = "http" if the server speaks Streamable HTTP)')
            return "sse"
        return "http"

    def _env(self, name: str, env: Any, warnings: list[str]) -> list[str]:
        """The variable names; values never leave this function."""
        if not isinstance(env, dict):
            raise _Skip(f"env: expected an object of variables, got {json_kind(env)}")
        names = []
        for key, value in env.items():
            if not key or "=" in key or "\0" in key:
                warnings.append(f"server {name}: env name {json.dumps(key, ensure_ascii=False)} is not a "
                                "variable name; left out")
                continue
            names.append(key)
            whole = _REFERENCE.fullmatch(value) if isinstance(value, str) else None
            inner = _VARIABLE_REFERENCE.fullmatch(whole.group(1)) if whole else None
            if inner and not inner.group(2) and inner.group(1) == key:
                continue
            if inner and not inner.group(2):
                other = inner.group(1)
                warnings.append(f"server {name}: env {key} is set from ${{{other}}} in the source; tern passes "
                                f"{key} through as it is, so export {key} in tern's environment "
                                f'(for example {key}="${other}")')
            elif isinstance(value, str) and "${input:" in value:
                warnings.append(f"server {name}: env {key} came from a VS Code input (inputs are not "
                                f"imported); export {key} in tern's environment")
            else:
                warnings.append(f"server {name}: env {key} had a literal value in the source; export {key} "
                                "in tern's environment (the value was not copied)")
        return names

    def _headers(self, name: str, headers: dict[str, Any], warnings: list[str],
                 variables: set[str]) -> dict[str, str]:
        """Headers with references in tern's ``${VAR}`` form and no literal secrets."""
        out: dict[str, str] = {}
        for header, value in headers.items():
            where = f"server {name}: header {header}"
            if not _HEADER_NAME.fullmatch(header):
                warnings.append(f"server {name}: header name {json.dumps(header, ensure_ascii=False)} is not "
                                "valid in HTTP; left out")
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = json.dumps(value)
            if not isinstance(value, str):
                warnings.append(f"{where}: expected a string, got {json_kind(value)}; left out")
                continue
            if any(c in value for c in "\r\n\0"):
                warnings.append(f"{where}: the value contains a line break or NUL; left out")
                continue
            references = 0

            def convert(match: re.Match[str]) -> str:
                nonlocal references
                inner = match.group(1)
                found = _VARIABLE_REFERENCE.fullmatch(inner)
                if found:
                    references += 1
                    if found.group(2):
                        warnings.append(f"{where}: the default in {match.group(0)} was not copied; export "
                                        f"{found.group(1)} in tern's environment")
                    return "${" + found.group(1) + "}"
                if inner.startswith("input:"):
                    references += 1
                    variable = self._variable(name, header, variables)
                    warnings.append(f"{where} used a VS Code input (inputs are not imported); export "
                                    f"{variable} in tern's environment")
                    return "${" + variable + "}"
                warnings.append(f"{where} uses {match.group(0)}, which tern does not expand; edit the value "
                                "in the config")
                return match.group(0)

            converted = _REFERENCE.sub(convert, value)
            if not references and _SECRET_HEADER.search(header) and value.strip() and "${" not in value:
                variable = self._variable(name, header, variables)
                scheme = _SCHEME.fullmatch(value.strip())
                converted = f"{scheme.group(1)} ${{{variable}}}" if scheme else f"${{{variable}}}"
                warnings.append(f"{where} had a literal value in the source; export {variable} in tern's "
                                f'environment (the value was not copied; the header is now "{converted}")')
            out[header] = converted
        return out

    def _variable(self, server: str, header: str, pending: set[str]) -> str:
        """``SERVER_HEADER``, upper case, unique within this import."""
        base = re.sub(r"[^A-Za-z0-9]+", "_", f"{server}_{header}").strip("_").upper()
        base = base if _VARIABLE.fullmatch(base) else f"MCP_{base}"
        variable, n = base, 2
        while variable in self.variables or variable in pending:
            variable, n = f"{base}_{n}", n + 1
        pending.add(variable)
        return variable


def _typed(spec: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """``spec[key]`` if it has the expected JSON type (null counts as absent)."""
    value = spec.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        words = {str: "a string", list: "an array", dict: "an object", bool: "true or false"}[kind]
        raise _Skip(f"{key}: expected {words}, got {json_kind(value)}")
    return value


def _arg(value: Any, index: int) -> str:
    """An argument as the string a client would pass (numbers and booleans as in JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise _Skip(f"args[{index}]: expected a string, got {json_kind(value)}")


# --- TOML --------------------------------------------------------------------------------

_LINE = 100  # an array longer than this goes one item a line


def _line(key: str, value: Any) -> str:
    """``key = value`` by the config's writer; text TOML cannot hold skips the server."""
    try:
        return toml_line(key, value, width=_LINE)
    except ValueError as exc:
        raise _Skip(str(exc)) from None
