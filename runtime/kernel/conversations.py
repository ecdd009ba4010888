"""Conversations: each ``context_id``'s messages, in SQLite in the state directory, or
with ``[state] store = "postgres"`` in the table ``conversation_messages`` every node
shares (a follow-up on any node sees the whole history; the SQL is written once for
both engines, ``kernel.sql``).

On SQLite every append is its own committed transaction (WAL, ``synchronous=NORMAL``), so a
restart or a ``kill -9`` of tern loses no message that was acknowledged (only a power
loss can take the last moments; FULL cost 2 ms an exchange, measured). Appends and reads
run on the event loop on one connection kept open (0.03 ms, less than a thread hop);
the WAL checkpoint, which does fsync, runs in a worker thread every CHECKPOINT_EVERY
appends, after dropping the least recently used conversations beyond ``max_contexts``.
History is bounded per context in count and in bytes; the oldest messages go first.
A write that fails (the disk is full) raises :class:`StorageError` for that exchange
only; reads go on, and writes succeed again once there is room. A file that is not a
database is moved aside at open (``runtime.storage``) and a fresh one started.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec
import trio

from runtime.errors import StorageError
from runtime.kernel.sql import PgSql, Sql, SqliteSql
from runtime.log import get_logger
from runtime.config.keys import OWNER_NAMES
from runtime.ports import Caller
from runtime.storage import failed, open_db

__all__ = ["Conversations", "Message"]

log = get_logger("tern.conversations")

MAX_MESSAGES = 200
MAX_BYTES = 1024 * 1024
CHECKPOINT_EVERY = 200
MAX_CONTEXTS = 10_000  # conversations kept; the least recently used go first
_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    context_id TEXT NOT NULL,
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL,
    agent TEXT NOT NULL,
    content TEXT NOT NULL,
    time REAL NOT NULL,
    owner TEXT NOT NULL DEFAULT 'admin'
);
CREATE INDEX IF NOT EXISTS messages_by_context ON messages (context_id, seq);
"""
# A file made before keys had owners lacks the column: its conversations become the admin's.
_ADD_OWNER = "ALTER TABLE messages ADD COLUMN owner TEXT NOT NULL DEFAULT 'admin'"
#: PostgreSQL (component "conversations"): append steps, never edit a shipped one.
PG_STEPS = ["""
CREATE TABLE conversation_messages (
    context_id text NOT NULL, seq bigserial PRIMARY KEY, role text NOT NULL, agent text NOT NULL,
    content text NOT NULL, time double precision NOT NULL, owner text NOT NULL DEFAULT 'admin');
CREATE INDEX conversation_messages_by_context ON conversation_messages (context_id, seq);
"""]
_DROP_OLDEST = ("DELETE FROM {table} WHERE context_id NOT IN (SELECT context_id FROM {table} "
                "GROUP BY context_id ORDER BY MAX(seq) DESC LIMIT ?)")
# Each key past its share loses its own least recently used first, so one key's traffic
# does not push the others' conversations out of the global bound.
_OVER_SHARE = (f"SELECT owner FROM {{table}} WHERE owner NOT IN {OWNER_NAMES!r} GROUP BY owner "
               "HAVING count(DISTINCT context_id) > ?")
_DROP_OWNERS_OLDEST = ("DELETE FROM {table} WHERE owner = ? AND context_id NOT IN (SELECT context_id FROM {table} "
                       "WHERE owner = ? GROUP BY context_id ORDER BY MAX(seq) DESC LIMIT ?)")


class Message(msgspec.Struct, frozen=True):
    role: str  # "user" or "agent"
    agent: str
    content: str
    time: float


class Conversations:
    """The conversations of a state directory's file, or of every node on one PostgreSQL
    database (``db``; ``start`` creates its tables)."""

    def __init__(
        self,
        path: str | Path | None,
        *,
        max_messages: int = MAX_MESSAGES,
        max_bytes: int = MAX_BYTES,
        max_contexts: int = MAX_CONTEXTS,
        db: Any = None,
    ) -> None:
        self.path = Path(path) if path else None
        self.max_contexts = max_contexts
        self.max_contexts_per_owner = max(1, max_contexts // 10)  # one key's share
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._pg = PgSql(db) if db is not None else None
        self._lite: SqliteSql | None = None
        self._table = "conversation_messages" if db is not None else "messages"
        self._appends = 0

    async def start(self) -> None:
        """PostgreSQL: create or update the tables (at boot, once the database is open)."""
        if self._pg is not None:
            await self._pg.db.migrate("conversations", PG_STEPS)

    @property
    def _sql(self) -> Sql:
        """PostgreSQL, or the file's one connection, opened on first use, used from the event loop."""
        if self._pg is not None:
            return self._pg
        if self._lite is None:
            try:
                db = open_db(self.path, _SCHEMA, timeout=10.0, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run off the event loop (append)
                if "owner" not in {row[1] for row in db.execute("PRAGMA table_info(messages)")}:
                    db.execute(_ADD_OWNER)
            except (sqlite3.Error, OSError) as exc:
                raise failed("the conversations could not be opened", exc) from None
            self._lite = SqliteSql(db)
        return self._lite

    def _trim(self, tx: Any, context_id: str) -> None:
        size_of = "octet_length(content)" if tx.dialect == "postgres" else "length(CAST(content AS BLOB))"
        rows = tx.execute(
            f"SELECT seq, {size_of} FROM {self._table} WHERE context_id = ? ORDER BY seq DESC",
            (context_id,),
        ).fetchall()
        kept, size, cut = 0, 0, None
        for seq, length in rows:
            if kept >= self.max_messages or size + length > self.max_bytes and kept > 0:
                cut = seq
                break
            kept += 1
            size += length
        if cut is not None:
            tx.execute(f"DELETE FROM {self._table} WHERE context_id = ? AND seq <= ?", (context_id, cut))

    async def owner(self, context_id: str) -> str | None:
        """Whose conversation it is (the key name that started it); None: there is none."""
        row = await self._sql.run(lambda tx: tx.execute(
            f"SELECT owner FROM {self._table} WHERE context_id = ? LIMIT 1", (context_id,)).fetchone(),
            "the conversation could not be read")
        return row[0] if row else None

    async def visible(self, context_id: str, who: Caller | None) -> bool:
        """Whether ``who`` may see (or go on with) ``context_id``: its own, one that does
        not exist yet, or any for an admin (None: any)."""
        if who is None:
            return True
        owner = await self.owner(context_id)
        return owner is None or who.owns(owner)

    async def append(self, context_id: str, *messages: Message, owner: str = "admin") -> None:
        """Both sides of an exchange in one transaction, or neither; the context trimmed
        to its bounds. On SQLite on the event loop itself: a WAL commit without fsync is
        ~0.03 ms, far less than a hop to a worker thread."""

        def write(tx: Any) -> None:
            tx.executemany(
                f"INSERT INTO {self._table} (context_id, role, agent, content, time, owner) VALUES (?, ?, ?, ?, ?, ?)",
                [(context_id, m.role, m.agent, m.content, m.time, owner) for m in messages],
            )
            self._trim(tx, context_id)

        await self._sql.run(write, "the conversation was not saved")
        self._appends += 1
        if self._appends % CHECKPOINT_EVERY == 0:
            try:
                await self._housekeeping()
            except (StorageError, sqlite3.Error, OSError) as exc:
                log.warning("conversations: housekeeping failed (%s); retried later", exc)

    async def history(self, context_id: str, limit: int = MAX_MESSAGES, who: Caller | None = None) -> list[Message]:
        """The last ``limit`` messages, oldest first; none when ``who`` may not see it."""
        if not await self.visible(context_id, who):
            return []
        rows = await self._sql.run(lambda tx: tx.execute(
            f"SELECT role, agent, content, time FROM {self._table} WHERE context_id = ? ORDER BY seq DESC LIMIT ?",
            (context_id, limit)).fetchall(), "the conversation could not be read")
        return [Message(*row) for row in reversed(rows)]

    async def list(self, limit: int = 500, who: Caller | None = None) -> list[dict[str, object]]:
        """The conversations, most recently used first (at most ``limit``): id, agent (of
        the last message), message count, first and last time, and the opening user
        message cut to 80 characters (what a person recognises a conversation by).
        Only ``who``'s own when given (an admin's: all)."""
        mine = who is not None and not who.allows("admin")
        table = self._table

        def read(tx: Any) -> list[dict[str, object]]:
            rows = tx.execute(
                f"SELECT context_id, count(*), min(time), max(time), max(seq) FROM {table} "
                f"{'WHERE owner = ? ' if mine else ''}GROUP BY context_id "
                "ORDER BY max(seq) DESC LIMIT ?", (*((who.name,) if mine else ()), limit)).fetchall()  # type: ignore[union-attr]
            listed = []
            for context_id, count, first, last, newest in rows:
                agent = tx.execute(f"SELECT agent FROM {table} WHERE seq = ?", (newest,)).fetchone()
                opening = tx.execute(
                    f"SELECT content FROM {table} WHERE context_id = ? AND role = 'user' ORDER BY seq LIMIT 1",
                    (context_id,)).fetchone()
                text = " ".join((opening[0] if opening else "").split())
                listed.append({"context_id": context_id, "agent": agent[0] if agent else "", "messages": count,
                               "first": first, "last": last, "preview": text[:77] + "..." if len(text) > 80 else text})
            return listed

        return await self._sql.run(read, "the conversations could not be read")

    async def delete(self, context_id: str, who: Caller | None = None) -> int:
        """Forget one conversation; how many messages went (0: there was none, or not
        one ``who`` may see)."""
        if not await self.visible(context_id, who):
            return 0
        return await self._sql.run(lambda tx: tx.execute(
            f"DELETE FROM {self._table} WHERE context_id = ?", (context_id,)).rowcount,
            "the conversation was not deleted")

    async def _housekeeping(self) -> None:
        """Drop each key's least recently used conversations beyond its share
        (``max_contexts_per_owner``), then the least recently used beyond ``max_contexts``
        (every A2A task or MCP call without a context starts one). SQLite: in a worker
        thread on its own connection, then a WAL checkpoint (it fsyncs); PostgreSQL: one transaction."""
        if self._pg is not None:
            await self._pg.run(lambda tx: self._drop_oldest(tx, self._table), "the conversations could not be trimmed")
        else:
            await trio.to_thread.run_sync(self._checkpoint)

    def _checkpoint(self) -> None:
        db = sqlite3.connect(self.path, timeout=10.0)  # type: ignore[arg-type]
        try:
            with db:
                self._drop_oldest(db, "messages")
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            db.close()

    def _drop_oldest(self, tx: Any, table: str) -> None:
        for (owner,) in tx.execute(_OVER_SHARE.format(table=table), (self.max_contexts_per_owner,)).fetchall():
            tx.execute(_DROP_OWNERS_OLDEST.format(table=table), (owner, owner, self.max_contexts_per_owner))
        tx.execute(_DROP_OLDEST.format(table=table), (self.max_contexts,))

    @staticmethod
    def message(role: str, agent: str, content: str) -> Message:
        return Message(role, agent, content, round(time.time(), 6))
