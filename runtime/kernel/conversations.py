"""Conversations: each ``context_id``'s messages, in SQLite in the state directory.

Every append is its own committed transaction (WAL, ``synchronous=NORMAL``), so a
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

import msgspec
import trio

from runtime.log import get_logger
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


class Message(msgspec.Struct, frozen=True):
    role: str  # "user" or "agent"
    agent: str
    content: str
    time: float


class Conversations:
    def __init__(
        self,
        path: str | Path,
        *,
        max_messages: int = MAX_MESSAGES,
        max_bytes: int = MAX_BYTES,
        max_contexts: int = MAX_CONTEXTS,
    ) -> None:
        self.path = Path(path)
        self.max_contexts = max_contexts
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._db: sqlite3.Connection | None = None
        self._appends = 0

    def _connect(self) -> sqlite3.Connection:
        """The one connection, opened on first use, used from the event loop's thread."""
        if self._db is None:
            db = open_db(self.path, _SCHEMA, timeout=10.0, check_same_thread=False)
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run off the event loop (append)
            if "owner" not in {row[1] for row in db.execute("PRAGMA table_info(messages)")}:
                db.execute(_ADD_OWNER)
            self._db = db
        return self._db

    def _append(self, context_id: str, messages: list[Message], owner: str) -> None:
        db = self._connect()
        with db:  # one transaction: both sides of an exchange, or neither
            db.executemany(
                "INSERT INTO messages (context_id, role, agent, content, time, owner) VALUES (?, ?, ?, ?, ?, ?)",
                [(context_id, m.role, m.agent, m.content, m.time, owner) for m in messages],
            )
            self._trim(db, context_id)

    def _trim(self, db: sqlite3.Connection, context_id: str) -> None:
        rows = db.execute(
            "SELECT seq, length(CAST(content AS BLOB)) FROM messages WHERE context_id = ? ORDER BY seq DESC",
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
            db.execute("DELETE FROM messages WHERE context_id = ? AND seq <= ?", (context_id, cut))

    def _history(self, context_id: str, limit: int) -> list[Message]:
        rows = (
            self._connect()
            .execute(
                "SELECT role, agent, content, time FROM messages WHERE context_id = ? ORDER BY seq DESC LIMIT ?",
                (context_id, limit),
            )
            .fetchall()
        )
        return [Message(*row) for row in reversed(rows)]

    def owner(self, context_id: str) -> str | None:
        """Whose conversation it is (the key name that started it); None: there is none."""
        try:
            row = self._connect().execute("SELECT owner FROM messages WHERE context_id = ? LIMIT 1",
                                          (context_id,)).fetchone()
        except (sqlite3.Error, OSError) as exc:
            raise failed("the conversation could not be read", exc) from None
        return row[0] if row else None

    def visible(self, context_id: str, who: Caller | None) -> bool:
        """Whether ``who`` may see (or go on with) ``context_id``: its own, one that does
        not exist yet, or any for an admin (None: any)."""
        if who is None:
            return True
        owner = self.owner(context_id)
        return owner is None or who.owns(owner)

    async def append(self, context_id: str, *messages: Message, owner: str = "admin") -> None:
        # On the event loop itself: a WAL commit without fsync is ~0.03 ms, far less than a
        # hop to a worker thread. The one slow part, the checkpoint (it fsyncs), runs in a
        # worker thread on its own connection every CHECKPOINT_EVERY appends.
        try:
            self._append(context_id, list(messages), owner)
        except (sqlite3.Error, OSError) as exc:
            raise failed("the conversation was not saved", exc) from None
        self._appends += 1
        if self._appends % CHECKPOINT_EVERY == 0:
            try:
                await trio.to_thread.run_sync(self._checkpoint)
            except (sqlite3.Error, OSError) as exc:
                log.warning("conversations: housekeeping of %s failed (%s); retried later", self.path, exc)

    async def history(self, context_id: str, limit: int = MAX_MESSAGES, who: Caller | None = None) -> list[Message]:
        """The last ``limit`` messages, oldest first; none when ``who`` may not see it."""
        if not self.visible(context_id, who):
            return []
        try:
            return self._history(context_id, limit)
        except (sqlite3.Error, OSError) as exc:
            raise failed("the conversation could not be read", exc) from None

    def list(self, limit: int = 500, who: Caller | None = None) -> list[dict[str, object]]:
        """The conversations, most recently used first (at most ``limit``): id, agent (of
        the last message), message count, first and last time, and the opening user
        message cut to 80 characters (what a person recognises a conversation by).
        Only ``who``'s own when given (an admin's: all)."""
        mine = who is not None and not who.allows("admin")
        try:
            rows = self._connect().execute(
                "SELECT context_id, count(*), min(time), max(time), max(seq) FROM messages "
                f"{'WHERE owner = ? ' if mine else ''}GROUP BY context_id "
                "ORDER BY max(seq) DESC LIMIT ?", (*((who.name,) if mine else ()), limit)).fetchall()
            listed = []
            for context_id, count, first, last, newest in rows:
                agent = self._db.execute("SELECT agent FROM messages WHERE seq = ?", (newest,)).fetchone()  # type: ignore[union-attr]
                opening = self._db.execute(  # type: ignore[union-attr]
                    "SELECT content FROM messages WHERE context_id = ? AND role = 'user' ORDER BY seq LIMIT 1",
                    (context_id,)).fetchone()
                text = " ".join((opening[0] if opening else "").split())
                listed.append({"context_id": context_id, "agent": agent[0] if agent else "", "messages": count,
                               "first": first, "last": last, "preview": text[:77] + "..." if len(text) > 80 else text})
            return listed
        except (sqlite3.Error, OSError) as exc:
            raise failed("the conversations could not be read", exc) from None

    def delete(self, context_id: str, who: Caller | None = None) -> int:
        """Forget one conversation; how many messages went (0: there was none, or not
        one ``who`` may see)."""
        if not self.visible(context_id, who):
            return 0
        try:
            db = self._connect()
            with db:
                return db.execute("DELETE FROM messages WHERE context_id = ?", (context_id,)).rowcount
        except (sqlite3.Error, OSError) as exc:
            raise failed("the conversation was not deleted", exc) from None

    def _checkpoint(self) -> None:
        """Housekeeping off the event loop: drop the least recently used conversations
        beyond ``max_contexts`` (every A2A task or MCP call without a context starts
        one), then checkpoint the WAL."""
        db = sqlite3.connect(self.path, timeout=10.0)
        try:
            with db:
                db.execute(
                    "DELETE FROM messages WHERE context_id NOT IN (SELECT context_id FROM messages "
                    "GROUP BY context_id ORDER BY MAX(seq) DESC LIMIT ?)",
                    (self.max_contexts,),
                )
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            db.close()

    @staticmethod
    def message(role: str, agent: str, content: str) -> Message:
        return Message(role, agent, content, round(time.time(), 6))
