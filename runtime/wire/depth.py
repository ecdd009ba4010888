"""A bound on JSON nesting, checked on the raw bytes before anything decodes them.

Why: msgspec and the json module both recurse per level and raise ``RecursionError``
near Python's recursion limit (about 1000 levels, less inside a deep stack), which no
decoding caller expected, and a document just under that limit blows up the next
recursive walk (encode, redact, copy) instead. No peer has a reason to nest deeper
than ``MAX_DEPTH``, so deeper input is refused as a parse error at every boundary.

Cost: a message with at most ``MAX_DEPTH`` opening brackets cannot be too deep, and
counting them is two C-speed ``bytes.count`` calls, which is all most messages pay.
Only a message with more brackets gets the scan: escapes and strings dropped with
``replace`` and ``split``, the brackets kept by ``translate``, then one ``replace`` pass a
level (all C loops).
"""

from __future__ import annotations

import json
from typing import Any

from runtime.errors import ProtocolError

__all__ = ["MAX_DEPTH", "JsonTooDeep", "too_deep", "check_depth", "loads"]

MAX_DEPTH = 128

_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")


class JsonTooDeep(ProtocolError, ValueError):
    """JSON nested deeper than ``MAX_DEPTH``: a parse error (a ValueError, like any
    other malformed JSON, so callers that catch that need no change)."""


def too_deep(data: bytes | bytearray | memoryview | str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``data`` nests arrays and objects more than ``limit`` deep."""
    if type(data) is str:
        if data.count("[") + data.count("{") <= limit:
            return False
        data = data.encode("utf-8", "replace")
    elif type(data) is not bytes:
        data = bytes(data)
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    if b"\\" in data:  # escapes live only in strings; drop them, then no quote is escaped
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(data.split(b'"')[::2]).translate(_SQUARE, _NOT_BRACKET)  # outside strings
    for level in range(limit + 1):
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            # No pair left: ``]...][...[``, whose opening run a decoder would still descend.
            return level + shorter.count(b"[") > limit
        brackets = shorter
    return True


def check_depth(data: bytes | bytearray | memoryview | str, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`JsonTooDeep` if ``data`` nests more than ``limit`` deep."""
    if too_deep(data, limit):
        raise JsonTooDeep(f"JSON nested more than {limit} levels deep")


def loads(data: bytes | bytearray | str) -> Any:
    """``json.loads`` with the depth bound: a ValueError for input too deep."""
    check_depth(data)
    return json.loads(data)
