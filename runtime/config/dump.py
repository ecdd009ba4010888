"""tern's one TOML writer, and masking secrets for display.

``masked`` turns a Config into plain data with every literal secret replaced;
``dump_toml`` renders plain data as a TOML document that ``parse_config`` reads back
unchanged (``tern config show``). The pieces it is made of (``toml_string``,
``toml_key``, ``toml_value``, ``toml_line``) also write ``tern mcp import``'s output,
which lays out its tables by hand.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from runtime.config.schema import Config

__all__ = ["SECRET_MASK", "masked", "mask_url_password", "dump_toml", "toml_string", "toml_key", "toml_value",
           "toml_line"]

SECRET_MASK = "********"
_ENV_REFERENCE = re.compile(r"^(?:[^$]*\$\{[A-Za-z_][A-Za-z0-9_]*\}[^$]*)+$")


def mask_url_password(url: str) -> str:
    """``postgresql://tern:s3cret@db/tern`` shown as ``postgresql://tern:********@db/tern``
    (a ``${VAR}`` in its place stays: it names where the password comes from)."""
    match = re.match(r"^([a-z]+://[^:/@]*:)([^@]*)(@.*)$", url)
    if match is None or _ENV_REFERENCE.match(match.group(2)):
        return url
    return match.group(1) + SECRET_MASK + match.group(3)


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
        if isinstance(node, str) and key == "postgres_url":
            return mask_url_password(node)
        return node

    data = walk(msgspec.to_builtins(config), "")
    for entry in data.get("server", {}).get("keys", []):  # [[server.keys]] key = "...": a literal key
        if entry.get("key"):
            entry["key"] = SECRET_MASK
    return data


def dump_toml(data: dict[str, Any]) -> str:
    """Render plain config data as TOML (tables, arrays of tables, inline small maps)."""

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
                lines.append(toml_line(key, value))
        for key, value in nested:
            name = f"{prefix}{toml_key(key)}"
            if isinstance(value, list):
                for item in value:
                    lines.extend(["", f"[[{name}]]"])
                    emit(item, name + ".")
            else:
                lines.extend(["", f"[{name}]"])
                emit(value, name + ".")

    emit(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


# --- The pieces, shared with the MCP importer ---------------------------------------------

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_SPECIAL = re.compile(r'["\\\x00-\x1f\x7f]')
_SURROGATE = re.compile("[\ud800-\udfff]")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_string(text: str) -> str:
    """A TOML basic string: readable (non-ASCII as is), control characters escaped.

    Raises ValueError for text TOML cannot hold at all (a lone UTF-16 surrogate, which
    JSON from another program may carry).
    """
    if _SURROGATE.search(text):
        raise ValueError("a string contains an unpaired UTF-16 surrogate, which TOML cannot hold")
    body = _SPECIAL.sub(lambda m: _ESCAPES.get(m.group(0)) or f"\\u{ord(m.group(0)):04X}", text)
    return f'"{body}"'


def toml_key(key: str) -> str:
    """A key, bare when TOML allows it, else quoted."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: Any) -> str:
    """A value on one line: arrays and tables inline (None, which TOML lacks, as "")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if value is None:
        return '""'
    return toml_string(value) if isinstance(value, str) else repr(value)


def toml_line(key: str, value: Any, width: int | None = None) -> str:
    """``key = value``; with ``width``, an array whose line would be longer than that
    goes one item a line instead (easier to read and edit by hand)."""
    line = f"{toml_key(key)} = {toml_value(value)}"
    if width is None or len(line) <= width or not isinstance(value, list):
        return line
    return "\n".join([f"{toml_key(key)} = ["] + [f"    {toml_value(v)}," for v in value] + ["]"])
