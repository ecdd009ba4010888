"""Optional task persistence (``[a2a] persist_tasks``): tasks in SQLite in the state
directory, so they survive a restart.

The engine reports every change synchronously; the store encodes the task at once (a
snapshot: later changes cannot tear it) and a writer task commits what piled up in one
transaction off the event loop (WAL, ``synchronous=NORMAL``: a crash can lose at most
the last moments, never corrupt the file). Evicted tasks are deleted the same way. At
boot the engine loads what is there, in insertion order; a task that was still running
comes back failed (its work died with the old process).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import trio

from runtime.a2a.model import Task

__all__ = ["TaskStore"]

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

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.path.exists():
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        db = sqlite3.connect(self.path, timeout=10.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(_SCHEMA)
        return db

    def load(self) -> list[Task]:
        db = self._connect()
        try:
            rows = db.execute("SELECT id, seq, body FROM tasks ORDER BY seq").fetchall()
        finally:
            db.close()
        tasks = []
        for task_id, seq, body in rows:
            try:
                tasks.append(_decoder.decode(body))
            except msgspec.DecodeError:
                continue  # a row from a newer or broken build: skip it, keep the rest
            self._seq[task_id] = seq
            self._next_seq = max(self._next_seq, seq + 1)
        return tasks

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
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                await self.flush()
        finally:
            with trio.CancelScope(shield=True):
                await self.flush()  # shutting down: what changed last is kept too

    async def flush(self) -> None:
        """Everything changed before this call is on disk when it returns: one writer at a
        time, so a flush never returns while another's batch is still being written."""
        async with self._writing:
            if not self._pending:
                return
            batch, self._pending = self._pending, {}
            rows = [(task_id, self._seq.get(task_id, 0), body) for task_id, body in batch.items()]
            await trio.to_thread.run_sync(self._write, rows)

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
