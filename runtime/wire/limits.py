"""The one bound on ids and names a caller supplies (context, task, message and push
config ids; agent and tool names), for every protocol: HTTP API, MCP, A2A.

An id is stored, echoed, audited and logged; an unbounded one lets a caller fill the
audit log (nine 9 MB context ids rotated away a day of records) or the memory. The
error is an ``RpcError`` with code -32602 (invalid params), so a JSON-RPC server
answers it as is, and an HTTP server answers 400 (it is a ``ProtocolError``).

What the store holds must also be storable: PostgreSQL's text and UTF-8 hold no NUL
character and no lone surrogate (SQLite does), so a string with one is refused here, at
the door, the same on both stores (``check_id``, ``check_name``, ``check_stored`` for
message text and metadata), rather than failing a write after the answer.
"""

from __future__ import annotations

import re
from typing import Any

from runtime.errors import RpcError
from runtime.wire.jsonrpc import INVALID_PARAMS

__all__ = ["MAX_ID_CHARS", "MAX_NAME_CHARS", "MAX_REFERENCES", "LimitExceeded", "check_id", "check_name",
           "check_stored", "unstorable"]

MAX_ID_CHARS = 256  # a UUID is 36; the A2A SDKs' ids are UUIDs or short strings
MAX_NAME_CHARS = 128  # MCP names are at most 64 (tern's own cap); 128 leaves room
MAX_REFERENCES = 64  # ids in one list (an A2A message's referenceTaskIds)
#: What PostgreSQL text (UTF-8) cannot hold: NUL, and surrogates (a lone one is no UTF-8).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class LimitExceeded(RpcError):
    """A caller-supplied id or name is longer than its bound (invalid params, HTTP 400)."""

    def __init__(self, message: str) -> None:
        super().__init__(INVALID_PARAMS, message)


def unstorable(value: str) -> str | None:
    """Why no store can hold ``value`` (None: it can)."""
    found = _UNSTORABLE.search(value)
    if found is None:
        return None
    char = found.group()
    kind = "a NUL character" if char == "\x00" else "a lone surrogate"
    return f"holds {kind} (U+{ord(char):04X}) at index {found.start()}, which tern does not store"


def check_id(value: Any, what: str, error: type[Exception] = LimitExceeded) -> Any:
    """``value`` if it is not a string longer than ``MAX_ID_CHARS`` nor one a store cannot
    hold (other checks are the caller's); ``error`` lets a parser raise its own kind
    (A2A's ``BadMessage``, which servers answer as invalid params and clients as a peer's
    invalid answer)."""
    if isinstance(value, str):
        if len(value) > MAX_ID_CHARS:
            raise error(f"{what} is {len(value)} characters long: ids are at most {MAX_ID_CHARS}")
        if (why := unstorable(value)) is not None:
            raise error(f"{what} {why}")
    return value


def check_name(value: Any, what: str) -> Any:
    """``value`` if it is not a string longer than ``MAX_NAME_CHARS`` nor one a store cannot hold."""
    if isinstance(value, str):
        if len(value) > MAX_NAME_CHARS:
            raise LimitExceeded(f"{what} is {len(value)} characters long: names are at most {MAX_NAME_CHARS}")
        if (why := unstorable(value)) is not None:
            raise LimitExceeded(f"{what} {why}")
    return value


def check_stored(value: Any, what: str, error: type[Exception] = LimitExceeded) -> Any:
    """``value`` (a decoded JSON value: message text, metadata, params) if no string in
    it, key or value, is one a store cannot hold; the error names the first one's path.
    The walk is as deep as the JSON, which the decoder bounds (``wire.depth``)."""
    stack: list[tuple[Any, str]] = [(value, what)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if (why := unstorable(item)) is not None:
                raise error(f"{path} {why}")
        elif isinstance(item, dict):
            for key, inner in item.items():
                if isinstance(key, str) and (why := unstorable(key)) is not None:
                    raise error(f"a key of {path} {why}")
                stack.append((inner, f"{path}.{str(key)[:64]}"))
        elif isinstance(item, list):
            stack.extend((inner, f"{path}[{i}]") for i, inner in enumerate(item))
    return value
