"""Opaque list cursors for the MCP server's paginated lists (tools, resources, templates,
prompts): an offset in url-safe base64 JSON, checked on the way back in."""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from runtime.errors import RpcError
from runtime.wire.jsonrpc import INVALID_PARAMS

__all__ = ["page", "encode_cursor", "decode_cursor"]


def page(items: list[Any], params: dict[str, Any], size: int, key: str) -> dict[str, Any]:
    """``{key: items[cursor:cursor+size]}``, with ``nextCursor`` when more follow."""
    start = decode_cursor(params.get("cursor"))
    if start > len(items):
        raise RpcError(INVALID_PARAMS, "invalid cursor")
    end = start + size
    result: dict[str, Any] = {key: items[start:end]}
    if end < len(items):
        result["nextCursor"] = encode_cursor(end)
    return result


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode({"o": offset})).decode("ascii")


def decode_cursor(cursor: Any) -> int:
    if cursor is None:
        return 0
    if not isinstance(cursor, str) or len(cursor) > 256:
        raise RpcError(INVALID_PARAMS, "invalid cursor")
    try:
        offset = msgspec.json.decode(base64.urlsafe_b64decode(cursor.encode("ascii")))["o"]
    except Exception:
        raise RpcError(INVALID_PARAMS, "invalid cursor") from None
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise RpcError(INVALID_PARAMS, "invalid cursor")
    return offset
