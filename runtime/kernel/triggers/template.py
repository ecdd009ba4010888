"""A trigger's message template: ``{{ body.a.b }}``, ``{{ body.items.0 }}``, ``{{ paths }}``.

Deliberately not a template language. A placeholder is a dotted path looked up in plain
JSON values (dict keys and list indexes only, never attributes), because the values come
from whoever can reach a webhook: nothing in them may run, loop or reach Python objects.
Rendering is one pass, so a value that itself contains ``{{ x }}`` stays literal text.
Everything is bounded: the template's size, a path's depth and the output's size.
"""

from __future__ import annotations

import json
import re
from typing import Any

from runtime.errors import ConfigError

__all__ = ["render", "MAX_TEMPLATE_CHARS", "MAX_OUTPUT_CHARS", "MAX_PATH_DEPTH", "TRUNCATED"]

MAX_TEMPLATE_CHARS = 16 * 1024  # a message template longer than this is refused
MAX_OUTPUT_CHARS = 64 * 1024  # a rendered message is cut here and marked
MAX_PATH_DEPTH = 32  # a deeper placeholder renders empty, like a missing value
TRUNCATED = "\n[... truncated by tern: the message passed 65536 characters]"

# A placeholder: a dotted path, whitespace inside the braces optional. The bounded,
# brace-free body keeps the scan linear on hostile templates.
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}\s]{1,512})\s*\}\}")
_INDEX = re.compile(r"[0-9]{1,9}")
_MISSING = object()


def render(template: str, context: dict[str, Any]) -> str:
    """``template`` with each placeholder replaced by its value in ``context``.

    A missing value renders empty; a string as itself; anything else (null included) as
    compact JSON.
    """
    if len(template) > MAX_TEMPLATE_CHARS:
        raise ConfigError(f"a trigger message template is {len(template)} characters; the limit is "
                          f"{MAX_TEMPLATE_CHARS}")
    out: list[str] = []
    size = 0
    last = 0
    for match in _PLACEHOLDER.finditer(template):
        out.append(template[last:match.start()])
        out.append(_text(_lookup(context, match.group(1))))
        size += match.start() - last + len(out[-1])
        last = match.end()
        if size > MAX_OUTPUT_CHARS:
            break
    else:
        out.append(template[last:])
    text = "".join(out)
    if len(text) > MAX_OUTPUT_CHARS:
        return text[:MAX_OUTPUT_CHARS - len(TRUNCATED)] + TRUNCATED
    return text


def _lookup(value: Any, path: str) -> Any:
    """The value at ``path`` (``a.b.0``), or ``_MISSING`` when any step is missing."""
    steps = path.split(".")
    if len(steps) > MAX_PATH_DEPTH:
        return _MISSING
    for step in steps:
        if type(value) is dict:
            if step not in value:
                return _MISSING
            value = value[step]
        elif type(value) is list and _INDEX.fullmatch(step) and int(step) < len(value):
            value = value[int(step)]
        else:
            return _MISSING
    return value


def _text(value: Any) -> str:
    if value is _MISSING:
        return ""
    if type(value) is str:
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (RecursionError, ValueError):  # nesting too deep to write, or a float the JSON lacks
        return "[too deeply nested to show]"
