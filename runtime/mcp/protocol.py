"""MCP client protocol, sans-IO: what to send in each era and what the answers mean.

Two eras share one model here:

- **handshake** (2024-11-05 ... 2025-11-25): ``initialize`` negotiates a version, then
  ``notifications/initialized``; the session has state.
- **modern** (2026-07-28): no handshake; ``server/discover`` describes the server and
  every request carries ``_meta`` with the protocol version and client capabilities;
  every result carries ``resultType`` (absent means ``"complete"``).

Nothing here does I/O: the trio session (``client.py``) asks this module for messages
and hands it the results.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Literal

import msgspec

from runtime import __version__
from runtime.errors import ProtocolError, RpcError

__all__ = [
    "MODERN_VERSION",
    "HANDSHAKE_VERSIONS",
    "ALL_VERSIONS",
    "META_PREFIX",
    "META_VERSION",
    "META_CAPABILITIES",
    "HEADER_MISMATCH",
    "MISSING_CAPABILITY",
    "UNSUPPORTED_VERSION",
    "NAMED_PARAMS",
    "header_value",
    "header_text",
    "Era",
    "McpTool",
    "CallResult",
    "ServerInfo",
    "client_info",
    "initialize_params",
    "negotiated_version",
    "modern_meta",
    "with_meta",
    "parse_discover",
    "parse_initialize",
    "parse_tools_page",
    "parse_call_result",
    "answer_server_request",
    "content_to_text",
]

MODERN_VERSION = "2026-07-28"
HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
ALL_VERSIONS = (MODERN_VERSION, *HANDSHAKE_VERSIONS)
META_PREFIX = "io.modelcontextprotocol/"
META_VERSION = META_PREFIX + "protocolVersion"
META_CAPABILITIES = META_PREFIX + "clientCapabilities"
HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022
#: Which parameter names a request in the ``Mcp-Name`` header (2026-07-28).
NAMED_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
                "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}  # SEP-2663
_SAFE_HEADER = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?\Z")

Era = Literal["handshake", "modern"]


class _Model(msgspec.Struct, rename="camel", kw_only=True):
    """MCP JSON uses camelCase; unknown members are kept out, never rejected."""


class McpTool(_Model):
    """A tool as a server lists it."""

    name: str
    description: str = ""
    title: str | None = None
    input_schema: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object"})
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    execution: dict[str, Any] | None = None  # ``taskSupport``: whether a call may or must be a task


class CallResult(_Model):
    """The result of ``tools/call``: content items, optional structured content, and
    whether the tool itself failed (``isError``: a tool error for the model to read,
    as opposed to a protocol error)."""

    content: list[dict[str, Any]] = []
    structured_content: Any = None
    is_error: bool = False

    def text(self) -> str:
        """The result as text for an LLM or a terminal."""
        return content_to_text(self.content, self.structured_content)


class ServerInfo(msgspec.Struct, kw_only=True):
    """What the server told us about itself, in either era."""

    version: str
    era: Era
    name: str = ""
    server_version: str = ""
    capabilities: dict[str, Any] = {}
    instructions: str = ""


def client_info() -> dict[str, str]:
    return {"name": "tern", "version": __version__}


CLIENT_CAPABILITIES: dict[str, Any] = {"roots": {"listChanged": False}}


def initialize_params(version: str = HANDSHAKE_VERSIONS[0],
                      capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """Params of ``initialize``: our latest handshake version and what we support."""
    return {"protocolVersion": version, "capabilities": CLIENT_CAPABILITIES if capabilities is None else capabilities,
            "clientInfo": client_info()}


def modern_meta(version: str = MODERN_VERSION, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``_meta`` every modern-era request carries."""
    return {
        f"{META_PREFIX}protocolVersion": version,
        f"{META_PREFIX}clientCapabilities": CLIENT_CAPABILITIES if capabilities is None else capabilities,
        f"{META_PREFIX}clientInfo": client_info(),
    }


def with_meta(params: dict[str, Any] | None, meta: dict[str, Any]) -> dict[str, Any]:
    """``params`` with ``meta`` merged into its ``_meta`` (not mutating the input)."""
    merged = dict(params or {})
    merged["_meta"] = {**merged.get("_meta", {}), **meta}
    return merged


def negotiated_version(result: dict[str, Any], pinned: str | None = None) -> str:
    """The version the server chose in its initialize result, if we can speak it."""
    version = result.get("protocolVersion")
    if not isinstance(version, str) or version not in HANDSHAKE_VERSIONS:
        raise ProtocolError(f"the server chose protocol version {version!r}, which tern does not speak "
                            f"(tern speaks {', '.join(ALL_VERSIONS)})")
    if pinned and version != pinned:
        raise ProtocolError(f"the server answered protocol version {version}, not the pinned {pinned}")
    return version


def parse_initialize(result: Any, pinned: str | None = None) -> ServerInfo:
    if not isinstance(result, dict):
        raise ProtocolError("the initialize result is not an object")
    info = result.get("serverInfo") if isinstance(result.get("serverInfo"), dict) else {}
    return ServerInfo(
        version=negotiated_version(result, pinned), era="handshake",
        name=str(info.get("name", "")), server_version=str(info.get("version", "")),
        capabilities=result.get("capabilities") if isinstance(result.get("capabilities"), dict) else {},
        instructions=str(result.get("instructions") or ""))


def parse_discover(result: Any) -> ServerInfo:
    """A ``server/discover`` result. Raises ProtocolError if it is not one."""
    if not isinstance(result, dict):
        raise ProtocolError("the server/discover result is not an object")
    versions = result.get("supportedVersions") or result.get("protocolVersions")
    if not isinstance(versions, list):  # e.g. ``{}``: a handshake-era server answering any method
        raise ProtocolError("the server/discover result names no supportedVersions")
    if MODERN_VERSION not in versions:
        raise ProtocolError(f"the server supports {versions[:8]}, not {MODERN_VERSION}")
    info = result.get("serverInfo")
    if not isinstance(info, dict):
        meta = result.get("_meta") if isinstance(result.get("_meta"), dict) else {}
        info = meta.get(f"{META_PREFIX}serverInfo", {})
    info = info if isinstance(info, dict) else {}
    return ServerInfo(
        version=MODERN_VERSION, era="modern",
        name=str(info.get("name", "")), server_version=str(info.get("version", "")),
        capabilities=result.get("capabilities") if isinstance(result.get("capabilities"), dict) else {},
        instructions=str(result.get("instructions") or ""))


def _complete(result: Any, what: str) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise ProtocolError(f"the {what} result is not an object")
    kind = result.get("resultType", "complete")
    if kind != "complete":
        raise ProtocolError(f"the server asked for {kind!r} in answer to {what}, which tern does not "
                            "support (no sampling, elicitation or roots input)")
    return result




def parse_tools_page(result: Any) -> tuple[list[McpTool], str | None]:
    """One page of ``tools/list``: the valid tools and the next cursor.

    A malformed tool entry is skipped rather than failing the whole list: one bad
    tool should not cost the agent the server's other tools.
    """
    result = _complete(result, "tools/list")
    tools: list[McpTool] = []
    for entry in result.get("tools") or []:
        try:
            tool = msgspec.convert(entry, McpTool)
        except msgspec.ValidationError:
            continue
        if tool.name:
            tools.append(tool)
    cursor = result.get("nextCursor")
    return tools, cursor if isinstance(cursor, str) and cursor else None


def parse_call_result(result: Any) -> CallResult:
    result = _complete(result, "tools/call")
    try:
        return msgspec.convert(result, CallResult)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"the tools/call result is malformed: {exc}") from None


def answer_server_request(method: str, params: Any, roots: list[str]) -> Any:
    """The result for a request a server sends us; raises RpcError to refuse it.

    We answer ``ping`` and ``roots/list``; sampling and elicitation are refused with a
    clear error (never silence, which would hang the server's tool call).
    """
    if method == "ping":
        return {}
    if method == "roots/list":
        return {"roots": [{"uri": root if "://" in root else _file_uri(root), "name": root.rstrip("/").split("/")[-1]}
                          for root in roots]}
    if method in ("sampling/createMessage", "elicitation/create"):
        raise RpcError(-32601, f"tern does not support {method}: no model or user is available to the "
                               "MCP client")
    raise RpcError(-32601, f"method not found: {method}")


def _file_uri(path: str) -> str:
    from pathlib import Path

    return Path(path).absolute().as_uri()


def content_to_text(content: list[dict[str, Any]], structured: Any = None) -> str:
    """Render MCP content items as text: text as is, binary as a short description.

    Images and audio are described (type and size), never inlined as base64, so a
    result stays readable and within an LLM's budget.
    """
    parts: list[str] = []
    for item in content:
        kind = item.get("type")
        if kind == "text":
            parts.append(str(item.get("text", "")))
        elif kind in ("image", "audio"):
            data = item.get("data") or ""
            size = len(base64.b64decode(data, validate=False)) if isinstance(data, str) else 0
            parts.append(f"[{kind}: {item.get('mimeType', 'unknown type')}, {size} bytes]")
        elif kind == "resource":
            resource = item.get("resource") if isinstance(item.get("resource"), dict) else {}
            if "text" in resource:
                parts.append(str(resource["text"]))
            else:
                parts.append(f"[resource: {resource.get('uri', '?')} ({resource.get('mimeType', 'binary')})]")
        elif kind == "resource_link":
            label = item.get("name") or item.get("title") or ""
            parts.append(f"[link: {label} {item.get('uri', '?')}]".replace("  ", " "))
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    if not parts and structured is not None:
        parts.append(msgspec.json.encode(structured).decode())
    return "\n".join(parts)


def header_value(text: str) -> str:
    """A header-safe form of ``text``: as is when printable ASCII, else the
    ``=?base64?...?=`` form the 2026-07-28 transport defines for unsafe values."""
    if _SAFE_HEADER.match(text):
        return text
    return "=?base64?" + base64.b64encode(text.encode("utf-8")).decode("ascii") + "?="


def header_text(value: str) -> str:
    """The text a header carries: the ``=?base64?...?=`` form decoded (a form that does
    not decode becomes a value no body can match), anything else as is."""
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return "\0invalid"
    return value
