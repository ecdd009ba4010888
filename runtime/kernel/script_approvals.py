"""Which scripts may run: ``[scripts] allow`` in the config, and the approvals an
administrator recorded with ``tern scripts approve`` in ``<state dir>/scripts.sqlite3``.

An approval is of bytes, not of a name: the table ``approvals(name, sha256, approved_at,
approved_by)`` holds the SHA-256 approved last for each name, and a script is approved
only while its current hash is that one, so any edit makes it pending again without
anyone noticing it first. The config's ``allow`` pins a hash the same way.

Each use opens its own connection (sqlite3 is blocking and bound to a thread; the
tools call this from worker threads, the CLI from its own process); calls in one
process take turns, as switching a new file to WAL fails under concurrent opens. A
corrupt file is moved aside (``runtime.storage``): every script is then pending until
approved again, which fails safe.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import NamedTuple

from runtime.errors import StorageError
from runtime.storage import failed, open_db

__all__ = ["DB_NAME", "ALLOWLISTED", "APPROVED", "PENDING", "Approval", "Approvals", "status"]

DB_NAME = "scripts.sqlite3"
ALLOWLISTED, APPROVED, PENDING = "allowlisted", "approved", "pending"
BUSY_TIMEOUT_SECS = 5.0
MAX_ROWS = 100_000  # read at most this many approvals at once

_LOCK = threading.Lock()
_SCHEMA = """CREATE TABLE IF NOT EXISTS approvals (
    name TEXT PRIMARY KEY, sha256 TEXT NOT NULL, approved_at REAL NOT NULL, approved_by TEXT NOT NULL)"""


class Approval(NamedTuple):
    name: str
    sha256: str
    approved_at: float
    approved_by: str


def status(name: str, sha256: str, allow: dict[str, str], approvals: dict[str, Approval]) -> str:
    """``allowlisted`` (the config pins this hash), ``approved`` (the store does) or ``pending``."""
    if allow.get(name, "").lower() == sha256:
        return ALLOWLISTED
    approval = approvals.get(name)
    return APPROVED if approval is not None and approval.sha256 == sha256 else PENDING


class Approvals:
    """The approvals store of one state directory (no state directory: nothing approved)."""

    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, DB_NAME) if state_dir else ""

    def _connect(self) -> sqlite3.Connection:
        return open_db(self.path, _SCHEMA, timeout=BUSY_TIMEOUT_SECS, isolation_level=None)

    def all(self) -> dict[str, Approval]:
        if not self.path:
            return {}
        return {row.name: row for row in self._read("SELECT name, sha256, approved_at, approved_by FROM approvals "
                                                    "ORDER BY name LIMIT ?", (MAX_ROWS,))}

    def get(self, name: str) -> Approval | None:
        if not self.path:
            return None
        rows = self._read("SELECT name, sha256, approved_at, approved_by FROM approvals WHERE name = ?", (name,))
        return rows[0] if rows else None

    def approve(self, name: str, sha256: str, by: str) -> Approval:
        """Record ``sha256`` as the approved content of ``name`` (replacing an earlier one)."""
        approval = Approval(name, sha256, round(time.time(), 3), by)
        self._write("INSERT OR REPLACE INTO approvals (name, sha256, approved_at, approved_by) VALUES (?, ?, ?, ?)",
                    approval, "approval not saved")
        return approval

    def revoke(self, name: str) -> Approval | None:
        """Forget the approval of ``name``; the one there was, or None."""
        approval = self.get(name)
        if approval is not None:
            self._write("DELETE FROM approvals WHERE name = ?", (name,), "approval not revoked")
        return approval

    def _read(self, sql: str, params: tuple[object, ...]) -> list[Approval]:
        try:
            with _LOCK:
                db = self._connect()
                try:
                    return [Approval(*row) for row in db.execute(sql, params).fetchall()]
                finally:
                    db.close()
        except (sqlite3.Error, OSError) as exc:
            raise failed("script approvals cannot be read", exc) from None

    def _write(self, sql: str, params: tuple[object, ...], what: str) -> None:
        if not self.path:
            raise StorageError(f"{what}: tern has no state directory")
        try:
            with _LOCK:
                db = self._connect()
                try:
                    db.execute(sql, params)
                finally:
                    db.close()
        except (sqlite3.Error, OSError) as exc:
            raise failed(what, exc) from None
