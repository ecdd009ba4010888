"""The runs store: every trigger run (start, end, outcome, reply) and each trigger's
state (last scheduled fire, failures in a row, paused), in ``<state dir>/triggers.sqlite3``.

Bounded: the last ``KEEP_RUNS`` runs per trigger are kept, a reply is cut at
``MAX_REPLY_BYTES`` and an error at ``MAX_ERROR_CHARS``. Opened through
``runtime.storage`` (a corrupt file is moved aside); a failed write (a full disk) is
logged and counted and never stops a run: the run goes on, its record may be lost.
A run still ``running`` or ``queued`` when the store opens was cut off by a stop of
tern: it is marked failed. Without a state directory the store lives in memory.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

from runtime.log import get_logger

__all__ = ["RunStore", "KEEP_RUNS", "MAX_REPLY_BYTES", "STOPPED", "OUTCOMES"]

log = get_logger("triggers")

KEEP_RUNS = 1000  # per trigger: older runs are deleted as new ones start
MAX_REPLY_BYTES = 64 * 1024
MAX_ERROR_CHARS = 2000
LIST_LIMIT = 1000
STOPPED = "tern stopped during the run"
OUTCOMES = ("queued", "running", "ok", "failed", "timeout", "skipped")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, trigger TEXT NOT NULL, source TEXT NOT NULL,
    started_at REAL NOT NULL, ended_at REAL, outcome TEXT NOT NULL, reply TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '', sink_error TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS runs_trigger ON runs (trigger, seq);
CREATE TABLE IF NOT EXISTS triggers (
    name TEXT PRIMARY KEY, last_fire REAL, failures INTEGER NOT NULL DEFAULT 0,
    paused INTEGER NOT NULL DEFAULT 0, paused_reason TEXT NOT NULL DEFAULT '', paused_at REAL);
"""
_RUN_COLUMNS = ("id", "trigger", "source", "started_at", "ended_at", "outcome", "reply", "error", "sink_error")


def bounded_reply(text: str) -> str:
    """``text`` cut to at most ``MAX_REPLY_BYTES`` of UTF-8 (on a character boundary), marked when cut."""
    data = text.encode("utf-8")
    if len(data) <= MAX_REPLY_BYTES:
        return text
    mark = f"\n[... cut by tern: the reply was {len(data)} bytes]"
    return data[:MAX_REPLY_BYTES - len(mark.encode())].decode("utf-8", "ignore") + mark


class RunStore:
    def __init__(self, path: str | Path | None, *, clock: Callable[[], float] = time.time) -> None:
        from runtime.storage import open_db

        self.clock = clock
        self.write_failures = 0  # writes refused (a full disk): shown by /api/triggers
        if path:
            self._db = open_db(Path(path), _SCHEMA, timeout=5.0, isolation_level=None)
        else:
            self._db = sqlite3.connect(":memory:", isolation_level=None)
            self._db.executescript(_SCHEMA)
        self.recovered = self._write("UPDATE runs SET outcome = 'failed', error = ?, ended_at = ? "
                                     "WHERE outcome IN ('running', 'queued')", (STOPPED, self.clock()))
        if self.recovered:
            log.warning("%d trigger runs were cut off when tern stopped: marked failed", self.recovered)

    def close(self) -> None:
        self._db.close()

    def _write(self, sql: str, params: tuple = ()) -> int:
        """One statement; a refused write is logged and counted, never raised (0 rows)."""
        try:
            return self._db.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            self.write_failures += 1
            log.error("trigger runs store: a write was refused (%s); runs go on unrecorded", exc)
            return 0

    # --- runs -----------------------------------------------------------------------------

    def start(self, run_id: str, trigger: str, source: str, outcome: str = "queued") -> None:
        """Record a new run, and drop the trigger's runs beyond ``KEEP_RUNS``."""
        self._write("INSERT INTO runs (id, trigger, source, started_at, outcome) VALUES (?, ?, ?, ?, ?)",
                    (run_id, trigger, source, self.clock(), outcome))
        self._write("DELETE FROM runs WHERE trigger = ? AND seq <= (SELECT seq FROM runs WHERE trigger = ? "
                    "ORDER BY seq DESC LIMIT 1 OFFSET ?)", (trigger, trigger, KEEP_RUNS))

    def running(self, run_id: str) -> None:
        """A queued run starts now: its start time is when the agent got the message."""
        self._write("UPDATE runs SET outcome = 'running', started_at = ? WHERE id = ?", (self.clock(), run_id))

    def end(self, run_id: str, outcome: str, *, reply: str = "", error: str = "", sink_error: str = "") -> None:
        """The run's end; when the full record does not fit (a full disk), its outcome without the reply."""
        if self._write("UPDATE runs SET outcome = ?, ended_at = ?, reply = ?, error = ?, sink_error = ? WHERE id = ?",
                       (outcome, self.clock(), bounded_reply(reply), error[:MAX_ERROR_CHARS],
                        sink_error[:MAX_ERROR_CHARS], run_id)):
            return
        self._write("UPDATE runs SET outcome = ?, ended_at = ?, error = ? WHERE id = ?",
                    (outcome, self.clock(), (error or "the reply could not be recorded")[:200], run_id))

    def runs(self, trigger: str, limit: int = 50) -> list[dict[str, Any]]:
        """The trigger's runs, newest first, at most ``limit`` (and ``LIST_LIMIT``)."""
        rows = self._db.execute(f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs WHERE trigger = ? ORDER BY seq DESC "
                                "LIMIT ?", (trigger, max(0, min(limit, LIST_LIMIT)))).fetchall()
        return [dict(zip(_RUN_COLUMNS, row)) for row in rows]

    def run(self, run_id: str) -> dict[str, Any] | None:
        row = self._db.execute(f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs WHERE id = ?", (run_id,)).fetchone()
        return dict(zip(_RUN_COLUMNS, row)) if row else None

    # --- per trigger ------------------------------------------------------------------

    def state(self, name: str) -> dict[str, Any]:
        """``{last_fire, failures, paused, paused_reason, paused_at}`` (defaults for a new trigger)."""
        row = self._db.execute("SELECT last_fire, failures, paused, paused_reason, paused_at FROM triggers "
                               "WHERE name = ?", (name,)).fetchone()
        last_fire, failures, paused, reason, paused_at = row or (None, 0, 0, "", None)
        return {"last_fire": last_fire, "failures": failures, "paused": bool(paused), "paused_reason": reason,
                "paused_at": paused_at}

    def _ensure(self, name: str) -> None:
        self._write("INSERT OR IGNORE INTO triggers (name) VALUES (?)", (name,))

    def set_last_fire(self, name: str, when: float) -> None:
        self._ensure(name)
        self._write("UPDATE triggers SET last_fire = ? WHERE name = ?", (when, name))

    def set_failures(self, name: str, failures: int) -> None:
        self._ensure(name)
        self._write("UPDATE triggers SET failures = ? WHERE name = ?", (failures, name))

    def pause(self, name: str, reason: str) -> None:
        self._ensure(name)
        self._write("UPDATE triggers SET paused = 1, paused_reason = ?, paused_at = ? WHERE name = ?",
                    (reason[:MAX_ERROR_CHARS], self.clock(), name))

    def resume(self, name: str) -> None:
        self._ensure(name)
        self._write("UPDATE triggers SET paused = 0, paused_reason = '', paused_at = NULL, failures = 0 "
                    "WHERE name = ?", (name,))
