"""Memory tools: small key/value notes an agent keeps across runs, in SQLite.

One file, ``<state dir>/memory.sqlite3``, table ``memory(scope, key, value, updated)``.
The scope is the calling agent's name, so agents do not read each other's notes; a
call with ``shared: true`` (or a call with no agent, e.g. an operator's ``tern call``)
uses the scope ``"shared"`` that every agent can reach.

Each call opens its own connection in a worker thread and closes it: sqlite3 is
blocking and its connections are bound to a thread, and a memory call is rare enough
that the open costs nothing worth caching. Calls in one process take turns (a lock):
switching a new file to WAL fails with "database is locked" under concurrent opens,
and the busy timeout does not cover that. WAL mode and the busy timeout cover other
processes using the same state directory.
SQL is parameterised only; LIKE patterns escape ``%``, ``_`` and the escape itself.
A file that is not a database is moved aside and a fresh one started
(``runtime.storage``); a write that fails (the disk is full) is that call's error.
"""

from __future__ import annotations

import datetime
import json
import os
import sqlite3
import threading
import time
from typing import Any
from collections.abc import Callable

import trio

from runtime.errors import ToolRefused
from runtime.ports import Tool, ToolContext, ToolResult
from runtime.kernel.registry import ToolRegistry
from runtime.storage import open_db

__all__ = ["MEMORY_TOOLS", "register_memory_tools", "memory_store", "memory_recall", "memory_list", "like_pattern"]

DB_NAME = "memory.sqlite3"
SHARED = "shared"
MAX_KEY_CHARS = 200
MAX_VALUE_CHARS = 100_000
BUSY_TIMEOUT_SECS = 5.0

_LOCK = threading.Lock()  # one memory call at a time in this process (see the module docstring)

_SCHEMA = """CREATE TABLE IF NOT EXISTS memory (
    scope TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY (scope, key))"""


def like_pattern(text: str) -> str:
    """A LIKE pattern matching ``text`` literally anywhere (escape character: backslash)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _scope(arguments: dict[str, Any], context: ToolContext) -> str:
    return SHARED if arguments.get("shared", False) or not context.agent else context.agent


def _when(updated: float) -> str:
    return datetime.datetime.fromtimestamp(updated, datetime.timezone.utc).replace(microsecond=0).isoformat()


def _connect(context: ToolContext) -> sqlite3.Connection:
    if not context.state_dir:
        raise ToolRefused("memory is unavailable: tern has no state directory")
    return open_db(os.path.join(context.state_dir, DB_NAME), _SCHEMA, timeout=BUSY_TIMEOUT_SECS,
                   isolation_level=None)


def _tool(sync: Callable[[sqlite3.Connection, dict[str, Any], str], ToolResult]) -> Callable[..., Any]:
    """An async handler running ``sync`` with a fresh connection in a worker thread."""

    def guarded(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        try:
            with _LOCK:
                return _run(sync, arguments, context)
        except ToolRefused as exc:
            return ToolResult(str(exc), is_error=True)
        except (sqlite3.Error, OSError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return ToolResult(f"memory error: {detail}", is_error=True)

    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await trio.to_thread.run_sync(guarded, arguments, context)

    handler.__name__ = handler.__qualname__ = sync.__name__.lstrip("_")
    return handler


def _run(sync: Callable[[sqlite3.Connection, dict[str, Any], str], ToolResult], arguments: dict[str, Any],
         context: ToolContext) -> ToolResult:
    db = _connect(context)
    try:
        return sync(db, arguments, _scope(arguments, context))
    finally:
        db.close()


def _store(db: sqlite3.Connection, arguments: dict[str, Any], scope: str) -> ToolResult:
    key, value = arguments["key"], arguments["value"]
    db.execute("INSERT OR REPLACE INTO memory (scope, key, value, updated) VALUES (?, ?, ?, ?)",
               (scope, key, value, time.time()))
    return ToolResult(f"stored {key!r} in {scope!r} memory")


def _recall(db: sqlite3.Connection, arguments: dict[str, Any], scope: str) -> ToolResult:
    key, query = arguments.get("key"), arguments.get("query")
    limit = arguments.get("limit", 20)
    if key is not None and query is not None:
        raise ToolRefused("give key (exact) or query (substring), not both")
    if key is not None:
        row = db.execute("SELECT value, updated FROM memory WHERE scope = ? AND key = ?", (scope, key)).fetchone()
        if row is None:
            return ToolResult(f"nothing stored under {key!r} in {scope!r} memory")
        return ToolResult(row[0], structured={"key": key, "value": row[0], "updated": _when(row[1])})
    if query is not None:
        pattern = like_pattern(query)
        rows = db.execute("SELECT key, value, updated FROM memory WHERE scope = ? AND "
                          "(key LIKE ? ESCAPE '\\' OR value LIKE ? ESCAPE '\\') ORDER BY updated DESC, key LIMIT ?",
                          (scope, pattern, pattern, limit)).fetchall()
    else:
        rows = db.execute("SELECT key, value, updated FROM memory WHERE scope = ? ORDER BY updated DESC, key LIMIT ?",
                          (scope, limit)).fetchall()
    found = [{"key": k, "value": v, "updated": _when(u)} for k, v, u in rows]
    if not found:
        return ToolResult(f"nothing in {scope!r} memory matches {query!r}" if query is not None
                          else f"{scope!r} memory is empty", structured=[])
    return ToolResult(json.dumps(found, ensure_ascii=False, indent=1), structured=found)


def _list(db: sqlite3.Connection, arguments: dict[str, Any], scope: str) -> ToolResult:
    limit = arguments.get("limit", 100)
    rows = db.execute("SELECT key, updated FROM memory WHERE scope = ? ORDER BY key LIMIT ?", (scope, limit)).fetchall()
    total = db.execute("SELECT count(*) FROM memory WHERE scope = ?", (scope,)).fetchone()[0]
    if not rows:
        return ToolResult(f"{scope!r} memory is empty", structured=[])
    lines = [f"{key}\t{_when(updated)}" for key, updated in rows]
    if total > len(rows):
        lines.append(f"[{total - len(rows)} more]")
    return ToolResult("\n".join(lines), structured=[{"key": k, "updated": _when(u)} for k, u in rows])


memory_store = _tool(_store)
memory_recall = _tool(_recall)
memory_list = _tool(_list)

_SHARED_ARG = {"type": "boolean", "description": "Use the memory shared by all agents instead of your own."}
_KEY = {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS}

MEMORY_TOOLS: list[tuple[Tool, Any]] = [
    (Tool("memory_store", "Remember a value under a key (replacing any earlier value), across runs.",
          {"type": "object", "properties": {
              "key": _KEY, "value": {"type": "string", "maxLength": MAX_VALUE_CHARS}, "shared": _SHARED_ARG},
           "required": ["key", "value"], "additionalProperties": False}), memory_store),
    (Tool("memory_recall", "Recall remembered values: by exact key, or by query (a substring of keys or values, "
          "case-insensitive for ASCII), or the most recent ones.",
          {"type": "object", "properties": {
              "key": _KEY, "query": {"type": "string", "minLength": 1, "maxLength": 1000},
              "shared": _SHARED_ARG, "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
           "additionalProperties": False}), memory_recall),
    (Tool("memory_list", "List remembered keys with when each was last updated (UTC).",
          {"type": "object", "properties": {
              "shared": _SHARED_ARG, "limit": {"type": "integer", "minimum": 1, "maximum": 1000}},
           "additionalProperties": False}), memory_list),
]


def register_memory_tools(registry: ToolRegistry) -> None:
    for tool, handler in MEMORY_TOOLS:
        registry.register(tool, handler)
