"""Checking tool arguments against a tool's ``inputSchema``.

Why not a full JSON Schema library: MCP servers publish a small subset, the check runs
on every tool call (it must cost microseconds), and a problem must come back as a
sentence the model can fix, not as an exception. So this validator:

- understands ``type`` (one name or a list; ``string number integer boolean object
  array null``), ``properties``, ``required``, ``additionalProperties`` (bool or
  schema), ``enum``, ``const``, ``items`` (one schema), ``minLength``/``maxLength``,
  ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum`` (numeric form),
  ``minItems``/``maxItems``, and the boolean schemas ``true``/``false``;
- ignores every other keyword, including ``$ref``, ``anyOf``, ``oneOf``, ``allOf``,
  ``not``, ``format``, ``pattern``, tuple-form ``items`` and unknown type names: an
  unchecked keyword accepts, so a schema we do not fully understand never blocks a
  call the server itself would take (the server still validates);
- when ``patternProperties`` is present, skips the ``additionalProperties`` check
  rather than reject properties a pattern would have allowed;
- is strict about JSON types: ``integer`` means a JSON integer (``3`` yes, ``3.0``
  no, so a handler can trust ``range(n)``), and a boolean is never a number;
- stops descending below 64 levels of nesting and after 20 problems, so a hostile or
  broken argument cannot make it slow or its answer huge.

Paths read like ``arguments.items[2].name``; keys that are not identifiers are quoted
(``arguments["a b"]``).
"""

from __future__ import annotations

import json
import operator
from typing import Any

__all__ = ["validate", "json_type", "MAX_DEPTH", "MAX_PROBLEMS"]

MAX_DEPTH = 64
MAX_PROBLEMS = 20

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list, tuple),
    "null": (type(None),),
}


class _Stop(Exception):
    """Raised internally once MAX_PROBLEMS problems are collected."""


def json_type(value: Any) -> str:
    """The JSON type name of a Python value (``integer`` for ints, never for bools)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    classes = _TYPES.get(name)
    if classes is None:
        return True  # an unknown type name constrains nothing
    if isinstance(value, bool):
        return name == "boolean"
    return isinstance(value, classes)


def _show(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, TypeError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: ``1 == 1.0`` but ``True != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_json_equal(x, y) for x, y in zip(a, b)))
    return a == b


def _where(path: Any) -> str:
    """A path as text. Below the top, paths are kept as (parent, key) pairs and written
    out only for a problem: most calls have none, and the check runs on every call."""
    if isinstance(path, str):
        return path
    parent, key = path
    if isinstance(key, int):
        return f"{_where(parent)}[{key}]"
    return (
        f"{_where(parent)}.{key}" if key.isidentifier() else f"{_where(parent)}[{json.dumps(key, ensure_ascii=False)}]"
    )


def validate(instance: Any, schema: Any, path: str = "arguments") -> list[str]:
    """Every problem with ``instance`` under ``schema``; an empty list when it is valid."""
    problems: list[str] = []
    try:
        _check(instance, schema, path, 0, problems)
    except _Stop:
        problems.append(f"too many problems; stopped after {MAX_PROBLEMS}")
    return problems


def _add(problems: list[str], message: str) -> None:
    problems.append(message)
    if len(problems) >= MAX_PROBLEMS:
        raise _Stop


def _check(value: Any, schema: Any, path: Any, depth: int, problems: list[str]) -> None:
    if schema is False:
        _add(problems, f"{_where(path)}: no value is allowed here")
        return
    if not isinstance(schema, dict):
        return  # true, or not a schema we understand: accept
    if depth > MAX_DEPTH:
        _add(problems, f"{_where(path)}: nested deeper than {MAX_DEPTH} levels")
        return

    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else (expected,)
        if not (_is_type(value, expected) if isinstance(expected, str) else any(_is_type(value, n) for n in names)):
            wanted = " or ".join(str(n) for n in names)
            _add(problems, f"{_where(path)}: expected {wanted}, got {json_type(value)}")
            return  # the remaining keywords would only repeat the complaint

    if "enum" in schema:
        options = schema["enum"]
        if isinstance(options, list) and not any(_json_equal(value, o) for o in options):
            shown = ", ".join(_show(o, 30) for o in options[:10]) + (", ..." if len(options) > 10 else "")
            _add(problems, f"{_where(path)}: expected one of {shown}, got {_show(value)}")
    if "const" in schema and not _json_equal(value, schema["const"]):
        _add(problems, f"{_where(path)}: expected {_show(schema['const'])}, got {_show(value)}")

    if isinstance(value, str):
        _check_string(value, schema, path, problems)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, schema, path, problems)
    elif isinstance(value, dict):
        _check_object(value, schema, path, depth, problems)
    elif isinstance(value, (list, tuple)):
        _check_array(value, schema, path, depth, problems)


def _check_string(value: str, schema: dict[str, Any], path: Any, problems: list[str]) -> None:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        _add(problems, f"{_where(path)}: expected at least {low} characters, got {len(value)}")
    if isinstance(high, int) and len(value) > high:
        _add(problems, f"{_where(path)}: expected at most {high} characters, got {len(value)}")


def _bound(schema: dict[str, Any], key: str) -> Any:
    bound = schema.get(key)
    return bound if isinstance(bound, (int, float)) and not isinstance(bound, bool) else None


_NUMBER_BOUNDS = (
    ("minimum", operator.lt, "at least"),
    ("maximum", operator.gt, "at most"),
    ("exclusiveMinimum", operator.le, "more than"),
    ("exclusiveMaximum", operator.ge, "less than"),
)


def _check_number(value: float, schema: dict[str, Any], path: Any, problems: list[str]) -> None:
    for key, fails, words in _NUMBER_BOUNDS:
        bound = _bound(schema, key)
        if bound is not None and fails(value, bound):
            _add(problems, f"{_where(path)}: expected {words} {bound}, got {_show(value)}")


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: Any, depth: int, problems: list[str]) -> None:
    required = schema.get("required")
    if isinstance(required, list):
        for name in required:
            if isinstance(name, str) and name not in value:
                _add(problems, f"{_where(path)}: missing required property {_show(name)}")
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        properties = {}
    extra = schema.get("additionalProperties", True)
    if "patternProperties" in schema:
        extra = True
    for key, item in value.items():
        sub = properties.get(key)
        if sub is not None:
            _check(item, sub, (path, str(key)), depth + 1, problems)
        elif extra is False:
            _add(problems, f"{_where(path)}: unexpected property {_show(key)}{_allowed(properties)}")
        elif isinstance(extra, dict):
            _check(item, extra, (path, str(key)), depth + 1, problems)


def _allowed(properties: dict[str, Any]) -> str:
    if not properties:
        return " (no properties are allowed)"
    names = list(properties)
    shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
    return f" (allowed: {shown})"


def _check_array(
    value: list[Any] | tuple[Any, ...], schema: dict[str, Any], path: Any, depth: int, problems: list[str]
) -> None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        _add(problems, f"{_where(path)}: expected at least {low} items, got {len(value)}")
    if isinstance(high, int) and len(value) > high:
        _add(problems, f"{_where(path)}: expected at most {high} items, got {len(value)}")
    items = schema.get("items")
    if isinstance(items, dict) or items is False:
        for index, item in enumerate(value):
            _check(item, items, (path, index), depth + 1, problems)
