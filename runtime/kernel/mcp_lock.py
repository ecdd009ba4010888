"""A person approves MCP tool definitions that tern.lock does not pin (``mcp.client.lock``).

The supervisor holds a drifted or new tool back and calls ``approve_tools`` here: one
approval request per server, a new kind (``origin`` ``LOCK_ORIGIN``) in the same store
as tool calls, so ``tern approvals``/``approve``/``deny``, the HTTP API and the
dashboard answer it. Its arguments carry each tool's new digest and a diff of the old
and new definition. It is decided once (never a standing rule), only by a key with the
scope ``approvals``, and waits ``LOCK_WAIT_SECS`` (a changed server may be noticed by a
person hours later); when the server changes again the request is withdrawn and a new
one opened.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Awaitable, Callable

from runtime.log import clean

__all__ = ["LOCK_ORIGIN", "LOCK_WAIT_SECS", "MAX_REQUEST_BYTES", "approver", "is_lock", "describe_lock", "diff_lines"]

LOCK_ORIGIN = "mcp-lock"
LOCK_WAIT_SECS = 7 * 86400.0
MAX_REQUEST_BYTES = 15 * 1024  # the request's arguments as JSON: an approval keeps 16 KiB of them whole


def approver(approvals: Any, redact: Callable[[Any], Any]) -> Callable[[str, list[dict[str, Any]]], Awaitable[bool]]:
    """The supervisor's ``approve_tools``: ``(server, changes)`` -> approved?"""

    async def approve(server: str, changes: list[dict[str, Any]]) -> bool:
        from runtime.kernel.audit import digest

        shown = _bounded(changes)
        arguments = {"server": server, "tools": shown}
        states = ", ".join(f"{c['tool']} ({c['state']})" for c in changes)
        approval = await approvals.request("", f"tern.lock:{server}", redact(arguments),
                                           digest([[c["tool"], c["sha256"]] for c in changes]),
                                           caller=f"mcp:{server}", origin=LOCK_ORIGIN, wait_secs=LOCK_WAIT_SECS,
                                           reason=f"MCP server '{server}' offers tools tern.lock does not pin: "
                                                  f"{states}")
        return approval.state == "approved"

    return approve


def _bounded(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fit the request in ``MAX_REQUEST_BYTES`` of JSON (what a request keeps whole):
    the digests always, each diff cut to an equal share of what is left, saying so."""
    import json

    def size(value: Any) -> int:
        return len(json.dumps(value, ensure_ascii=False).encode())

    bare = [{**change, "diff": ""} for change in changes]
    share = max(0, MAX_REQUEST_BYTES - size(bare)) // max(1, len(changes))
    out = []
    for change in changes:
        diff = change["diff"]
        if size(diff) > share:
            note = "\n... diff cut to fit the request"
            keep = len(diff)
            while keep > 0 and size(diff[:keep] + note) > share:
                keep = keep * 3 // 4 if keep > 64 else 0
            diff = (diff[:keep].rsplit("\n", 1)[0] + note) if keep else note.lstrip("\n")
        out.append({**change, "diff": diff})
    return out


def is_lock(approval: Any) -> bool:
    return getattr(approval, "origin", "") == LOCK_ORIGIN


def describe_lock(approval: Any) -> str:
    """One line: which server's tools wait, and how each changed."""
    arguments = approval.arguments if isinstance(approval.arguments, dict) else {}
    tools = [t for t in arguments.get("tools", []) if isinstance(t, dict)]
    listing = ", ".join(f"{clean(str(t.get('tool', '?')))} ({t.get('state', '?')})" for t in tools)
    server = clean(str(arguments.get("server", approval.tool)))
    return f"MCP server '{server}' changed its tools: {listing or '?'}; approve to offer them and pin them in tern.lock"


def diff_lines(approval: Any) -> list[str]:
    """Each tool's digests and diff, indented, control characters escaped (a server
    wrote the text)."""
    arguments = approval.arguments if isinstance(approval.arguments, dict) else {}
    lines = []
    for tool in arguments.get("tools", []):
        if not isinstance(tool, dict):
            continue
        was = f"sha256 {str(tool.get('was'))[:16]}... -> " if tool.get("was") else "not in tern.lock, sha256 "
        lines.append(f"  {clean(str(tool.get('tool')))} {tool.get('state')}: {was}{str(tool.get('sha256'))[:16]}...")
        lines += [f"    {clean(line)}" for line in str(tool.get("diff", "")).splitlines()]
    return lines
