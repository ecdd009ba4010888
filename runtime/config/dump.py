"""Writing config as TOML for people (``tern config show``), with secrets masked.

``masked`` turns a Config into plain data with every literal secret replaced;
``dump_toml`` renders plain data as TOML that ``parse_config`` reads back unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from runtime.config.schema import Config

__all__ = ["SECRET_MASK", "masked", "dump_toml"]

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
