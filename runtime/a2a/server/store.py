"""Optional task persistence (``[a2a] persist_tasks``): tasks in SQLite in the state
directory, so they survive a restart.

The engine reports every change synchronously; the store encodes the task at once (a
snapshot: later changes cannot tear it) and a writer task commits what piled up in one
transaction off the event loop (WAL, ``synchronous=NORMAL``: a crash can lose at most
the last moments, never corrupt the file). Evicted tasks are deleted the same way. At
boot the engine loads what is there, in insertion order; a task that was still running
comes back failed (its work died with the old process).

Bounded: the boot reads rows newest first, one at a time, and stops at the engine's
budgets (count and bytes); older rows, and rows larger than one task may be, are
deleted, not read (they are what eviction would have removed had tern kept running),
and the file is then vacuumed. A file that is not a database is moved aside
(``runtime.storage``). A write that fails (the disk is full) is kept and retried with
a growing pause; meanwhile :meth:`TaskStore.fault` says why, and the engine refuses
new work (reads go on) until a retry succeeds.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec
import trio

from runtime.a2a.model import Task
from runtime.log import get_logger
from runtime.wire.retry import Backoff
from runtime.storage import open_db

__all__ = ["TaskStore"]

log = get_logger("tern.a2a.store")
RETRY_SECS = (0.5, 1.0, 2.0, 5.0, 10.0)  # pauses between retries of a failed write, the last repeated

_SCHEMA = "CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, body BLOB NOT NULL)"
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Task)


class TaskStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._pending: dict[str, bytes | None] = {}  # id -> snapshot, None = delete
        self._seq: dict[str, int] = {}
        self._next_seq = 0
        self._wake = trio.Event()
        self._writing = trio.Lock()
        self._fault: str | None = None  # why the last write failed, until one succeeds
        self._pruned = False

    def fault(self) -> str | None:
        return self._fault

    def _connect(self) -> sqlite3.Connection:
        db = open_db(self.path, _SCHEMA, timeout=10.0)
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def load(self, *, max_tasks: int, max_bytes: int, max_task_bytes: int) -> list[tuple[Task, int]]:
        """The newest tasks that fit ``max_tasks`` and ``max_bytes`` (oldest first, each
        with its stored size); the rest are deleted from the file, never read."""
        started = time.monotonic()
        try:
            db = self._connect()
        except (sqlite3.Error, OSError) as exc:  # not corrupt (that was moved aside): no room, no access
            self._fault = str(exc)
            log.error("a2a task store: cannot open %s (%s): starting with no stored tasks; new tasks are refused "
                      "until it can be written", self.path, exc)
            self._wake.set()  # the writer retries from the start
            return []
        kept: list[tuple[Task, int]] = []
        total, cutoff, dropped = 0, None, 0
        doomed: list[tuple[str]] = []  # rows too large to be a task, or unreadable
        try:
            rows = db.execute("SELECT id, seq, length(body), CASE WHEN length(body) <= ? THEN body END "
                              "FROM tasks ORDER BY seq DESC", (max_task_bytes,))
            for task_id, seq, size, body in rows:  # one row at a time: a cursor, not fetchall
                self._next_seq = max(self._next_seq, seq + 1)
                if body is None:  # larger than a task may be: never read
                    doomed.append((task_id,))
                    continue
                if len(kept) >= max_tasks or total + size > max_bytes:
                    cutoff = seq
                    break
                try:
                    task = _decoder.decode(body)
                except msgspec.DecodeError:  # a row from a newer or broken build
                    doomed.append((task_id,))
                    continue
                kept.append((task, size))
                total += size
                self._seq[task_id] = seq
            rows.close()
            with db:
                if cutoff is not None:
                    dropped += db.execute("DELETE FROM tasks WHERE seq <= ?", (cutoff,)).rowcount
                db.executemany("DELETE FROM tasks WHERE id = ?", doomed)
                dropped += len(doomed)
        finally:
            db.close()
        if dropped:
            self._pruned = True
            log.warning("a2a task store: %d stored tasks over the limits ([a2a] max_tasks, max_store_bytes, "
                        "max_task_bytes) or unreadable were dropped at boot", dropped)
        log.info("a2a task store: %d tasks (%d bytes) loaded in %.2f s", len(kept), total, time.monotonic() - started)
        kept.reverse()
        return kept

    def changed(self, task: Task) -> None:
        if task.id not in self._seq:
            self._seq[task.id] = self._next_seq
            self._next_seq += 1
        self._pending[task.id] = _encoder.encode(task)
        self._wake.set()

    def evicted(self, task_id: str) -> None:
        self._seq.pop(task_id, None)
        self._pending[task_id] = None
        self._wake.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            if self._pruned:
                await self._vacuum()
            backoff = Backoff(ladder=RETRY_SECS)
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                try:
                    await self.flush()
                except (sqlite3.Error, OSError):
                    await trio.sleep(backoff.next())
                    self._wake.set()  # retry what is still pending
                else:
                    backoff.reset()
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self.flush()  # shutting down: what changed last is kept too
                except (sqlite3.Error, OSError):
                    pass  # flush logged it; the disk is still full

    async def _vacuum(self) -> None:
        """Give back the space of the rows dropped at boot (only the kept rows are copied)."""
        def vacuum() -> None:
            db = self._connect()
            try:
                db.execute("VACUUM")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                db.close()

        try:
            await trio.to_thread.run_sync(vacuum)
        except (sqlite3.Error, OSError) as exc:
            log.warning("a2a task store: could not vacuum %s: %s", self.path, exc)

    async def flush(self) -> None:
        """Everything changed before this call is on disk when it returns: one writer at a
        time, so a flush never returns while another's batch is still being written."""
        async with self._writing:
            if not self._pending and self._fault is None:
                return  # (with a fault, an empty write still probes whether the file works again)
            batch, self._pending = self._pending, {}
            rows = [(task_id, self._seq.get(task_id, 0), body) for task_id, body in batch.items()]
            try:
                await trio.to_thread.run_sync(self._write, rows)
            except (sqlite3.Error, OSError) as exc:
                # Kept for the retry, unless a newer snapshot came in meanwhile.
                self._pending = {**batch, **self._pending}
                if self._fault is None:
                    log.error("a2a task store: cannot write %s (%s): new tasks are refused until it can",
                              self.path, exc)
                self._fault = str(exc)
                raise
            if self._fault is not None:
                log.warning("a2a task store: writing %s again; new tasks are accepted", self.path)
                self._fault = None

    def _write(self, rows: list[tuple[str, int, bytes | None]]) -> None:
        db = self._connect()
        try:
            with db:
                for task_id, seq, body in rows:
                    if body is None:
                        db.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
                    else:
                        db.execute(
                            "INSERT OR REPLACE INTO tasks (id, seq, body) VALUES (?, ?, ?)", (task_id, seq, body)
                        )
        finally:
            db.close()
