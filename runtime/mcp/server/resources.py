"""The resources tern's MCP server offers: agents' workspace files, read-only, and the
resources of connected MCP servers it re-exports (a gateway).

- An agent offers the files of its workspace that its ``resources`` globs match
  (nothing by default) as ``tern://agent/{agent}/{path}``, and the template
  ``tern://agent/{agent}/{+path}``. A URI is decoded, then checked lexically (no empty,
  ``.`` or ``..`` segment, so ``%2e%2e`` climbs nowhere) and against that agent's globs;
  the file is opened by the kernel the way the file tools open one (``ContentPort``:
  beneath the workspace, never through a symlink) and refused above ``max_resource_bytes``.
- ``[mcp_server] upstream`` names connected ``[[mcp_servers]]`` whose resources and
  templates are listed as they are (their URIs unchanged) and read through them. A
  subscription to one is passed on to its server; a server that cannot subscribe
  (FastMCP; every 2026-07-28 server) has its resource watched by tern instead: read
  every few seconds, a change in what it reads is an update.

Reads answer text when the bytes are UTF-8 without NUL, else a base64 blob. A URI nobody
offers is "Resource not found" with ``data.uri``: -32002 in the handshake era, -32602 in
2026-07-28 (SEP-2164).
"""

from __future__ import annotations

import base64
import fnmatch
import mimetypes
from typing import Any
from urllib.parse import quote, unquote

from runtime.config import AgentConfig, Config
from runtime.errors import RpcError, TernError, ToolRefused
from runtime.log import get_logger
from runtime.ports import ContentPort
from runtime.wire.jsonrpc import INVALID_PARAMS

__all__ = ["Resources", "URI_PREFIX", "RESOURCE_NOT_FOUND", "MAX_URI_CHARS", "not_found"]

log = get_logger("mcp.server")

URI_PREFIX = "tern://agent/"
RESOURCE_NOT_FOUND = -32002  # the handshake era's code; 2026-07-28 uses -32602
MAX_URI_CHARS = 4096
MAX_FILES_PER_AGENT = 1000  # listed (a read is not limited to the listed ones)
MAX_LISTED = 10_000  # resources or templates from all sources together
MAX_UPSTREAM_PAGES = 20
MAX_WATCHED = 1024  # upstream URIs tern watches itself, for every client together
UPSTREAM_ERRORS = (TernError,)  # RpcError (its answer), TernTimeout, ConnectionLost


def not_found(uri: str, *, modern: bool) -> RpcError:
    return RpcError(INVALID_PARAMS if modern else RESOURCE_NOT_FOUND, "Resource not found", {"uri": uri})


def agent_uri(agent: str, path: str) -> str:
    return URI_PREFIX + quote(agent, safe="") + "/" + quote(path, safe="/")


def check_uri(uri: Any) -> str:
    if not isinstance(uri, str) or not uri:
        raise RpcError(INVALID_PARAMS, "params.uri (a string) is required")
    if len(uri) > MAX_URI_CHARS:
        raise RpcError(INVALID_PARAMS, f"params.uri is longer than {MAX_URI_CHARS} characters")
    return uri


class Resources:
    """Listing and reading, recomputed on each request (files and servers come and go)."""

    def __init__(self, config: Config, content: ContentPort | None) -> None:
        self.content = content
        #: upstream URI -> the server tern reads it from to watch it itself (that server
        #: cannot subscribe: FastMCP, any 2026-07-28 server); shared by every client
        self.watched: dict[str, str] = {}
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        self.agents = {agent.name: agent for agent in config.agents if agent.resources}
        self.upstream = list(dict.fromkeys(config.mcp_server.upstream))
        self.max_bytes = max(1, config.mcp_server.max_resource_bytes)

    # --- Agents' workspace files -------------------------------------------------------

    def agent_path(self, uri: str) -> tuple[AgentConfig, str] | None:
        """(the agent, the relative path) a ``tern://agent/`` URI names and its globs allow;
        None for anything else."""
        if not uri.startswith(URI_PREFIX):
            return None
        name, _, encoded = uri[len(URI_PREFIX):].partition("/")
        agent = self.agents.get(unquote(name))
        path = unquote(encoded)
        segments = path.split("/")
        if agent is None or "\x00" in path or any(s in ("", ".", "..") for s in segments):
            return None
        return (agent, path) if allowed(agent, path) else None

    async def files(self, agent: AgentConfig, limit: int = MAX_FILES_PER_AGENT) -> list[str]:
        if self.content is None:
            return []
        try:
            paths = await self.content.list_files(agent.workspace, limit * 10)
        except (OSError, ToolRefused) as exc:
            log.warning("listing agent %s's workspace failed: %s", agent.name, exc)
            return []
        return [path for path in paths if allowed(agent, path)][:limit]

    # --- Listing -----------------------------------------------------------------------

    async def listing(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = []
        for agent in self.agents.values():
            for path in await self.files(agent):
                listed.append({"uri": agent_uri(agent.name, path), "name": path,
                               "title": f"{path} ({agent.name})",
                               "description": f"{path} in the workspace of the tern agent {agent.name}",
                               "mimeType": _mime(path)})
        seen = {entry["uri"] for entry in listed}
        for server in await self.offering("resources"):
            for entry in await self.upstream_list(server, "resources/list", "resources"):
                if isinstance(entry.get("uri"), str) and entry["uri"] not in seen:
                    seen.add(entry["uri"])
                    listed.append(entry)
        return listed[:MAX_LISTED]

    async def templates(self) -> list[dict[str, Any]]:
        listed = [{"uriTemplate": URI_PREFIX + quote(agent.name, safe="") + "/{+path}",
                   "name": f"{agent.name}-files",
                   "description": f"A file of the tern agent {agent.name}'s workspace that matches "
                                  f"{', '.join(agent.resources)}"}
                  for agent in self.agents.values()]
        for server in await self.offering("resources"):
            listed.extend(entry for entry in await self.upstream_list(server, "resources/templates/list",
                                                                       "resourceTemplates")
                          if isinstance(entry.get("uriTemplate"), str))
        return listed[:MAX_LISTED]

    async def offering(self, capability: str) -> list[str]:
        """The re-exported servers that are connected and declare ``capability`` (servers
        still making their first connection are waited for, within their timeouts)."""
        if self.content is None or not self.upstream:
            return []
        await self.content.upstream_settled()
        found = []
        for server in self.upstream:
            capabilities = self.content.upstream_capabilities(server)
            if capabilities is not None and capabilities.get(capability) is not None:
                found.append(server)
        return found

    async def upstream_list(self, server: str, method: str, key: str) -> list[dict[str, Any]]:
        """Every entry a server lists, following its cursors (bounded); a failing server
        lists nothing (logged), so one server down never breaks the whole list."""
        assert self.content is not None
        entries: list[dict[str, Any]] = []
        cursor: Any = None
        seen: set[str] = set()
        try:
            for _ in range(MAX_UPSTREAM_PAGES):
                result = await self.content.upstream_request(server, method, {"cursor": cursor} if cursor else None)
                page = result.get(key) if isinstance(result, dict) else None
                entries.extend(entry for entry in page or [] if isinstance(entry, dict))
                cursor = result.get("nextCursor")
                if not isinstance(cursor, str) or cursor in seen or len(entries) >= MAX_LISTED:
                    break
                seen.add(cursor)
        except UPSTREAM_ERRORS as exc:
            log.warning("MCP server '%s': %s failed: %s", server, method, exc)
        return entries[:MAX_LISTED]

    # --- Reading -----------------------------------------------------------------------

    async def read(self, uri: str, *, modern: bool) -> dict[str, Any]:
        found = self.agent_path(uri)
        if found is not None:
            return {"contents": [await self.read_file(found[0], found[1], uri, modern=modern)]}
        if not uri.startswith(URI_PREFIX):
            for server in await self.offering("resources"):
                result = await self._upstream_read(server, uri)
                if result is not None:
                    return result
        raise not_found(uri, modern=modern)

    async def read_file(self, agent: AgentConfig, path: str, uri: str, *, modern: bool) -> dict[str, Any]:
        """One workspace file as resource contents (text or blob)."""
        if self.content is None:
            raise not_found(uri, modern=modern)
        try:
            data = await self.content.read_file(agent.workspace, path, self.max_bytes)
        except (ToolRefused, OSError) as exc:
            if "No such file" in str(exc) or isinstance(exc, FileNotFoundError):
                raise not_found(uri, modern=modern) from None
            raise RpcError(INVALID_PARAMS, f"cannot read {path}: {exc}", {"uri": uri}) from None
        return contents(uri, path, data)

    async def _upstream_read(self, server: str, uri: str) -> dict[str, Any] | None:
        """The server's answer when it has ``uri``; None when it says not found or fails."""
        assert self.content is not None
        try:
            result = await self.content.upstream_request(server, "resources/read", {"uri": uri})
        except UPSTREAM_ERRORS as exc:
            log.debug("MCP server '%s': resources/read %s: %s", server, uri, exc)
            return None
        items = result.get("contents") if isinstance(result, dict) else None
        if not isinstance(items, list) or not items:
            return None
        return {"contents": [item for item in items if isinstance(item, dict)]}

    async def exists(self, uri: str) -> str | None:
        """Where ``uri`` lives for a subscription: "tern" (an allowed workspace path), an
        upstream server's name (it accepted the subscription, or it cannot subscribe but
        reads ``uri``: then tern watches it, see ``watched``), or None. tern advertises
        ``resources.subscribe``, so every resource it re-exports must be subscribable."""
        if self.agent_path(uri) is not None:
            return "tern"
        if uri.startswith(URI_PREFIX) or self.content is None:
            return None
        readable = []
        for server in await self.offering("resources"):
            capabilities = self.content.upstream_capabilities(server) or {}
            if isinstance(capabilities.get("resources"), dict) and capabilities["resources"].get("subscribe"):
                try:
                    await self.content.upstream_request(server, "resources/subscribe", {"uri": uri})
                    return server
                except UPSTREAM_ERRORS:
                    continue  # it can subscribe and refused: it does not have it
            readable.append(server)
        for server in readable:
            if await self._upstream_read(server, uri) is not None:
                if uri not in self.watched and len(self.watched) >= MAX_WATCHED:
                    del self.watched[next(iter(self.watched))]  # the oldest is looked at no more
                self.watched[uri] = server
                return server
        return None

    async def watch_stamp(self, uri: str) -> Any:
        """What a watched upstream resource reads as now (a digest of its contents; None if
        it cannot be read), to compare with the last look."""
        import hashlib

        import msgspec

        server = self.watched.get(uri)
        result = await self._upstream_read(server, uri) if server is not None else None
        return None if result is None else hashlib.sha256(msgspec.json.encode(result)).hexdigest()


def allowed(agent: AgentConfig, path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, glob) for glob in agent.resources)


def contents(uri: str, path: str, data: bytes) -> dict[str, Any]:
    mime = _mime(path)
    if b"\x00" not in data:
        try:
            return {"uri": uri, "mimeType": mime, "text": data.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {"uri": uri, "mimeType": mime if mime != "text/plain" else "application/octet-stream",
            "blob": base64.b64encode(data).decode("ascii")}


def _mime(path: str) -> str:
    return mimetypes.guess_type(path, strict=False)[0] or "text/plain"
