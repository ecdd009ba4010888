"""MCP tool annotations for tern's own built-in tools, in one table.

The policy and the access tiers read the same hints from tern's tools as from an MCP
server's (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``, ``openWorldHint``),
and ``tern mcp`` shows them to clients. A built-in registered without annotations of
its own gets its row here; a name not listed gets none (the policy then reads it as
MCP's defaults do: not read-only, possibly destructive).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BUILTIN_ANNOTATIONS"]

_READ = {"readOnlyHint": True, "openWorldHint": False}

BUILTIN_ANNOTATIONS: dict[str, dict[str, Any]] = {
    "time_now": _READ,
    "file_read": {**_READ, "idempotentHint": True},
    "file_list": {**_READ, "idempotentHint": True},
    "file_search": {**_READ, "idempotentHint": True},
    "file_write": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": False},
    "memory_store": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
    "memory_recall": {**_READ, "idempotentHint": True},
    "memory_list": {**_READ, "idempotentHint": True},
    "web_fetch": {"readOnlyHint": True, "openWorldHint": True},
    "shell_exec": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True},
    "agent_list": _READ,
    "agent_send": {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": True},
    "script_list": _READ,
    "script_reload": {**_READ, "idempotentHint": True},
    "script_run": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True},
}
