"""Error sentences: a msgspec validation message becomes one line a person can act on.

msgspec says ``Expected `int`, got `str` - at `$.server.max_body_bytes```; people read
``server.max_body_bytes: expected an integer, got "big"``. Unknown keys get a "did you
mean", bad choices list the allowed values, and values under secret-bearing keys are
never echoed. Array indices in key paths count from 0.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Union

import msgspec

from runtime.config.schema import Config

__all__ = ["explain", "json_kind", "shorten", "toml_syntax"]

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def toml_syntax(message: str) -> str:
    """A TOML parser's message as ``line L, column C: TOML syntax error: ...``."""
    found = _TOML_POSITION.search(message)
    if found:
        where = f"line {found.group(1)}, column {found.group(2)}"
        return f"{where}: TOML syntax error: {message[: found.start()]}"
    return f"TOML syntax error: {message}"


# ^keys$: everything under [[server.keys]] (a key may be written there)
_SECRET_KEY = re.compile(r"(?i)(api_key$|token|secret|password|authorization|^headers$|^keys$)")
_MSGSPEC_ERROR = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_PATH_PART = re.compile(r"\.([A-Za-z0-9_\-]+)|\[(\d+)\]|\[\'([^']*)\'\]")


def explain(message: str, raw: dict[str, Any]) -> str:
    """Turn a msgspec validation message into ``key.path: expected X, got Y``."""
    match = _MSGSPEC_ERROR.match(message)
    assert match is not None  # the pattern matches any string
    what, path_text = match.group("what"), match.group("path") or ""
    parts: list[str | int] = []
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


def _dotted(parts: list[str | int]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _value_at(parts: list[str | int], raw: Any) -> Any:
    node = raw
    for part in parts:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _describe(value: Any, parts: list[str | int]) -> str:
    if any(isinstance(p, str) and _SECRET_KEY.search(p) for p in parts):
        return "a value (not shown: secret)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{shorten(value)}"'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def shorten(text: str, limit: int = 60) -> str:
    """A value cut for display: a bad value is quoted, never pasted whole."""
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


def _type_at(parts: list[str | int], raw: Any) -> Any:
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


def _has(node: Any, part: str | int) -> bool:
    return part in node if isinstance(node, dict) else isinstance(part, int) and part < len(node)


def _concrete(tp: Any, node: Any) -> Any:
    """Resolve Optional[X] to X and a tagged union to the member the raw tag names."""
    import types
    import typing

    if typing.get_origin(tp) in (Union, types.UnionType):  # Optional[X] and X | None alike
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


def _choices_at(parts: list[str | int], raw: Any) -> list[str]:
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


def json_kind(value: Any) -> str:
    """What a JSON value is, for "expected an object, got a string"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string"}.get(type(value), "a number")
