"""``Mcp-Param-*`` headers (2026-07-28, SEP-2243): a tool may mark top-level arguments with
``"x-mcp-header": "Name"`` in its ``inputSchema``; a client then mirrors each such value into
an ``Mcp-Param-Name`` header so gateways can route on it without reading the body. The server
must check the two agree, or a proxy could route on one value while the tool acts on another.
Both sides are here: tern's client sends them (``checked``, ``headers_for``), tern's server
checks them (``problem``), and the config check refuses bad marks (``annotation_problems``).

Sans-IO: the server passes a header lookup. Values are mirrored one way (``mirrored``): a
string as is (``=?base64?...?=`` when not printable ASCII without edge whitespace), an
integer in decimal (a float with an integral value too, as JSON makes no difference), a
boolean as ``true``/``false``. A received header in the base64 form is decoded first
(strictly: bad padding or characters never match), anything else is literal. A value in
the body needs its header; a header needs its value (a null or absent argument sends none).
"""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Callable

from runtime.errors import ProtocolError
from runtime.mcp.protocol import header_text, header_value

__all__ = ["declared", "checked", "headers_for", "mirrored", "problem", "annotation_problems"]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 tchar: what a header name may hold
HEADER_TYPES = ("string", "integer", "boolean")  # no number: 1.5 has no one decimal spelling
MAX_HEADERS = 32  # a client refuses a tool that would make it send more


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
        if text != mirrored(value):
            return f"header mismatch: Mcp-Param-{suffix} does not match arguments.{argument}"
    return ""


def mirrored(value: Any) -> str | None:
    """The header text of an argument's value; None for what is never mirrored (an
    object, an array, a float with a fraction): no header can match it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int)):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return None


def checked(schema: Any) -> dict[str, str]:
    """A server's tool's marks, for tern's client: ``declared`` once ``annotation_problems``
    finds nothing. ProtocolError naming the first problem otherwise: the spec says the
    client MUST leave such a tool out."""
    problems = annotation_problems(schema)
    if problems:
        raise ProtocolError(problems[0])
    marked = declared(schema)
    if len(marked) > MAX_HEADERS:
        raise ProtocolError(f"{len(marked)} x-mcp-header declarations (at most {MAX_HEADERS})")
    return marked


def headers_for(marked: dict[str, str], arguments: Any) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers tern's client sends with one call's ``arguments``."""
    if not isinstance(arguments, dict):
        return {}
    headers: dict[str, str] = {}
    for argument, suffix in marked.items():
        text = mirrored(arguments.get(argument))
        if text is not None:  # absent, null or not mirrorable: no header (a server refuses the last)
            headers[f"Mcp-Param-{suffix}"] = header_value(text) if text else ""
    return headers


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
