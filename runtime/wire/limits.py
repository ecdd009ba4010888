"""The one bound on ids and names a caller supplies (context, task, message and push
config ids; agent and tool names), for every protocol: HTTP API, MCP, A2A.

An id is stored, echoed, audited and logged; an unbounded one lets a caller fill the
audit log (nine 9 MB context ids rotated away a day of records) or the memory. The
error is an ``RpcError`` with code -32602 (invalid params), so a JSON-RPC server
answers it as is, and an HTTP server answers 400 (it is a ``ProtocolError``).
"""

from __future__ import annotations

from typing import Any

from runtime.errors import RpcError
from runtime.wire.jsonrpc import INVALID_PARAMS

__all__ = ["MAX_ID_CHARS", "MAX_NAME_CHARS", "MAX_REFERENCES", "LimitExceeded", "check_id", "check_name"]

MAX_ID_CHARS = 256  # a UUID is 36; the A2A SDKs' ids are UUIDs or short strings
MAX_NAME_CHARS = 128  # MCP names are at most 64 (tern's own cap); 128 leaves room
MAX_REFERENCES = 64  # ids in one list (an A2A message's referenceTaskIds)


class LimitExceeded(RpcError):
    """A caller-supplied id or name is longer than its bound (invalid params, HTTP 400)."""

    def __init__(self, message: str) -> None:
        super().__init__(INVALID_PARAMS, message)


def check_id(value: Any, what: str, error: type[Exception] = LimitExceeded) -> Any:
    """``value`` if it is not a string longer than ``MAX_ID_CHARS`` (other checks are the
    caller's); ``error`` lets a parser raise its own kind (A2A's ``BadMessage``, which
    servers answer as invalid params and clients as a peer's invalid answer)."""
    if isinstance(value, str) and len(value) > MAX_ID_CHARS:
        raise error(f"{what} is {len(value)} characters long: ids are at most {MAX_ID_CHARS}")
    return value


def check_name(value: Any, what: str) -> Any:
    """``value`` if it is not a string longer than ``MAX_NAME_CHARS``."""
    if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
        raise LimitExceeded(f"{what} is {len(value)} characters long: names are at most {MAX_NAME_CHARS}")
    return value
