"""Namespacing MCP tools as ``mcp_{server}_{tool}``.

Why the care: LLM APIs cap tool names at 64 characters of ``[a-zA-Z0-9_-]``, server and
tool names contain hyphens, and ``a-b`` and ``a_b`` normalise to the same thing. So:

- names are lowercased and every character outside ``[a-z0-9_]`` becomes ``_``;
- a name longer than 64 characters keeps its first 55 and ends in ``_`` plus 8 hex
  digits of a SHA-256 over the original server and tool names (deterministic, and two
  long names that share a prefix still differ);
- when two different (server, tool) pairs would get the same name, *both* get the
  hashed suffix and the collision is reported, so neither silently shadows the other
  and the result does not depend on which server connected first;
- the original tool name is always kept for the call itself (``ToolName.tool``).

Tool globs (``tools_include``/``tools_exclude``, an agent's ``tools``, ``[mcp_server]
tools``) decide what may be called, so they match a *normalised* name (``ToolGlobs``):
casefolded, with ``-`` and ``_`` the same. ``delete_*`` names ``delete-repo`` and
``Delete_Repo`` too: an exclude list cannot be dodged by spelling, and an allow list
names a tool however its server spells it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from typing import NamedTuple
from collections.abc import Iterable

__all__ = [
    "agent_tool_name",
    "MAX_TOOL_NAME",
    "ToolName",
    "normalize",
    "format_mcp_tool_name",
    "is_mcp_tool",
    "extract_mcp_server",
    "assign_names",
    "glob_key",
    "ToolGlobs",
    "tool_globs",
]

MAX_TOOL_NAME = 64
PREFIX = "mcp_"
_OUTSIDE = re.compile(r"[^a-z0-9_]")


class ToolName(NamedTuple):
    """A namespaced tool: the name agents see and the server/tool it calls."""

    name: str
    server: str
    tool: str


def normalize(part: str) -> str:
    """Lowercase, with every character outside ``[a-z0-9_]`` turned into ``_``."""
    return _OUTSIDE.sub("_", part.lower())


def _digest(server: str, tool: str) -> str:
    return hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]


def _with_suffix(base: str, server: str, tool: str) -> str:
    return f"{base[: MAX_TOOL_NAME - 9]}_{_digest(server, tool)}"


def format_mcp_tool_name(server: str, tool: str) -> str:
    """``mcp_{server}_{tool}``, normalised, at most 64 characters."""
    name = f"{PREFIX}{normalize(server)}_{normalize(tool)}"
    return name if len(name) <= MAX_TOOL_NAME else _with_suffix(name, server, tool)


def is_mcp_tool(name: str) -> bool:
    """Whether a tool name is in the MCP namespace."""
    return name.startswith(PREFIX)


def extract_mcp_server(name: str, servers: Iterable[str]) -> str | None:
    """The configured server a namespaced tool name belongs to, or None.

    Matches the longest normalised server prefix, so server ``a-b`` wins over ``a``
    for ``mcp_a_b_x``. The registry resolves names exactly; this is for names that
    come from elsewhere (an LLM, a log line).
    """
    if not is_mcp_tool(name):
        return None
    best: str | None = None
    for server in servers:
        prefix = f"{PREFIX}{normalize(server)}_"
        if name.startswith(prefix) and len(name) > len(prefix):
            if best is None or len(normalize(server)) > len(normalize(best)):
                best = server
    return best


def assign_names(pairs: Iterable[tuple[str, str]]) -> tuple[list[ToolName], list[list[ToolName]]]:
    """Names for every (server, tool) pair, and the groups that collided.

    Returns ``(names, collisions)``: each colliding group lists the pairs that would
    have shared one name; every member was given a hash-suffixed name instead.
    """
    unique = list(dict.fromkeys(pairs))
    by_name: dict[str, list[tuple[str, str]]] = {}
    for server, tool in unique:
        by_name.setdefault(format_mcp_tool_name(server, tool), []).append((server, tool))
    names: list[ToolName] = []
    collisions: list[list[ToolName]] = []
    for name, group in by_name.items():
        if len(group) == 1:
            names.append(ToolName(name, *group[0]))
            continue
        renamed = [ToolName(_with_suffix(name, s, t), s, t) for s, t in group]
        names.extend(renamed)
        collisions.append(renamed)
    return names, collisions


def agent_tool_name(agent: str) -> str:
    """The MCP tool tern's MCP server exposes an agent as: ``tern_agent_{name}``, with
    ``-`` as ``_``."""
    return "tern_agent_" + agent.replace("-", "_")


def glob_key(name: str) -> str:
    """A tool name or glob as tool globs compare them: casefolded, ``-`` as ``_``."""
    return name.casefold().replace("-", "_")


class ToolGlobs:
    """A list of tool globs compiled once into one regular expression over ``glob_key``
    names (fnmatch syntax: ``*``, ``?``, ``[...]``)."""

    __slots__ = ("patterns", "_match")

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        keys = [fnmatch.translate(glob_key(pattern)) for pattern in self.patterns]
        self._match = re.compile("|".join(keys)).match if keys else None

    def matches(self, *names: str) -> bool:
        """Whether any glob names any of ``names``."""
        match = self._match
        return match is not None and any(match(glob_key(name)) is not None for name in names)

    def __bool__(self) -> bool:
        return bool(self.patterns)


_GLOB_CACHE: dict[int, tuple[list[str], ToolGlobs]] = {}
_GLOB_CACHE_MAX = 1024


def tool_globs(patterns: list[str]) -> ToolGlobs:
    """``ToolGlobs`` for a config's list, compiled once per list object (config lists
    are never changed in place: the config is frozen), so a check on every call costs a
    dict lookup, not a compile."""
    cached = _GLOB_CACHE.get(id(patterns))
    if cached is not None and cached[0] is patterns:
        return cached[1]
    if len(_GLOB_CACHE) >= _GLOB_CACHE_MAX:
        _GLOB_CACHE.clear()
    globs = ToolGlobs(patterns)
    _GLOB_CACHE[id(patterns)] = (patterns, globs)  # the list is kept alive, so its id is not reused
    return globs
