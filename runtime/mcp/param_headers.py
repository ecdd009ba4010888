"""``Mcp-Param-*`` headers (2026-07-28, SEP-2243): a tool may mark top-level arguments with
``"x-mcp-header": "Name"`` in its ``inputSchema``; a client then mirrors each such value into
an ``Mcp-Param-Name`` header so gateways can route on it without reading the body. The server
must check the two agree, or a proxy could route on one value while the tool acts on another.

Sans-IO: the caller passes a header lookup. Values are compared as the transport encodes
them: a string as is, an integer in decimal, a boolean as ``true``/``false``; a header in
the ``=?base64?...?=`` form is decoded first (strictly: bad padding or characters never
match), and anything else is literal. A value in the body needs its header; a header needs
its value (a null or absent argument sends none).
"""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Callable

from runtime.mcp.protocol import header_text

__all__ = ["declared", "problem", "annotation_problems"]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 tchar: what a header name may hold
HEADER_TYPES = ("string", "integer", "boolean")  # no number: 1.0 and 1 would not compare


def declared(schema: Any) -> dict[str, str]:
    """``{argument: header suffix}`` for the top-level properties marked ``x-mcp-header``."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    return {name: spec["x-mcp-header"] for name, spec in properties.items()
            if isinstance(spec, dict) and isinstance(spec.get("x-mcp-header"), str)}


def problem(schema: Any, arguments: Any, header: Callable[[str], str | None]) -> str:
    """Why the ``Mcp-Param-*`` headers disagree with ``arguments`` ("" when they agree).
    ``header(name)`` returns a request header (case-insensitive, trimmed) or None."""
    marked = declared(schema)
    if not marked:
        return ""
    arguments = arguments if isinstance(arguments, dict) else {}
    for argument, suffix in marked.items():
        value = arguments.get(argument)
        sent = header(f"mcp-param-{suffix.lower()}")
        if value is None:
            if sent is not None:
                return f"header mismatch: Mcp-Param-{suffix} is set but arguments.{argument} is absent"
            continue
        if sent is None:
            return f"header mismatch: Mcp-Param-{suffix} is missing but arguments.{argument} is set"
        text = header_text(sent)
        if text == "\0invalid":
            return f"header mismatch: Mcp-Param-{suffix} is not valid =?base64?...?= (padding or characters)"
        if text != _encoded(value):
            return f"header mismatch: Mcp-Param-{suffix} does not match arguments.{argument}"
    return ""


def _encoded(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int)):
        return str(value)
    return None  # an object, array or float is never mirrored: no header can match it


def annotation_problems(schema: Any) -> list[str]:
    """What is wrong with a schema's ``x-mcp-header`` marks (for config checks): each must
    be a non-empty header token, on a string, integer or boolean property, and unique
    ignoring case."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return []
    problems, seen = [], {}
    for name, spec in properties.items():
        if not isinstance(spec, dict) or "x-mcp-header" not in spec:
            continue
        suffix = spec["x-mcp-header"]
        if not isinstance(suffix, str) or not _TOKEN.fullmatch(suffix):
            problems.append(f'properties.{name}: x-mcp-header must be a header name (letters, digits, '
                            f'!#$%&\'*+.^_`|~-), got {suffix!r}')
            continue
        if spec.get("type") not in HEADER_TYPES:
            problems.append(f"properties.{name}: x-mcp-header is only for {', '.join(HEADER_TYPES)} properties")
        if suffix.lower() in seen:
            problems.append(f"properties.{name}: x-mcp-header {suffix!r} is also on {seen[suffix.lower()]}")
        seen[suffix.lower()] = name
    return problems
