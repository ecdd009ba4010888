"""``Mcp-Param-*`` headers (2026-07-28, SEP-2243), sans-IO: a tool may mark arguments
with ``x-mcp-header`` in its input schema, and every ``tools/call`` of it then carries
each such argument as ``Mcp-Param-{Name}``, so a gateway can route on it unread.

A declaration tern cannot honour exactly makes the whole tool unusable (the spec says
the client MUST exclude it): a header name that is empty or not a token (space, colon,
control or non-ASCII characters), a name used twice (case-insensitively), or one on a
property that is not a string, integer or boolean. Values are sent as the body has
them: integers in decimal, booleans as ``true``/``false``, strings as they are when
printable ASCII without edge whitespace, else ``=?base64?...?=``; a null or absent
argument sends no header.
"""

from __future__ import annotations

import re
from typing import Any

from runtime.errors import ProtocolError
from runtime.mcp.protocol import header_value

__all__ = ["declared_headers", "param_headers"]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # RFC 9110 token characters
_TYPES = ("string", "integer", "boolean")
MAX_HEADERS = 32


def declared_headers(input_schema: Any) -> dict[str, str]:
    """The tool's ``x-mcp-header`` declarations (argument -> header suffix).
    ProtocolError, saying which rule it breaks, for a declaration to refuse."""
    properties = input_schema.get("properties") if isinstance(input_schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    declared: dict[str, str] = {}
    seen: set[str] = set()
    for argument, schema in properties.items():
        if not isinstance(schema, dict) or "x-mcp-header" not in schema:
            continue
        name = schema["x-mcp-header"]
        if not isinstance(name, str) or not name:
            raise ProtocolError(f"x-mcp-header of {argument!r} is empty or not a string")
        if not _TOKEN.match(name):
            raise ProtocolError(f"x-mcp-header {name[:40]!r} of {argument!r} is not a header name")
        if schema.get("type") not in _TYPES:
            raise ProtocolError(f"x-mcp-header {name!r} is on {argument!r} of type {schema.get('type')!r}; "
                                f"only {', '.join(_TYPES)} may be mirrored")
        if name.lower() in seen:
            raise ProtocolError(f"x-mcp-header {name!r} is declared twice")
        seen.add(name.lower())
        declared[argument] = name
    if len(declared) > MAX_HEADERS:
        raise ProtocolError(f"{len(declared)} x-mcp-header declarations (at most {MAX_HEADERS})")
    return declared


def param_headers(declared: dict[str, str], arguments: Any) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers for one call's ``arguments``."""
    if not isinstance(arguments, dict):
        return {}
    headers: dict[str, str] = {}
    for argument, name in declared.items():
        value = arguments.get(argument)
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = str(int(value)) if float(value).is_integer() else repr(value)
        elif isinstance(value, str):
            text = value
        else:
            continue  # the body's value does not match the declared type: the server will refuse the call
        headers[f"Mcp-Param-{name}"] = header_value(text) if text else ""
    return headers
