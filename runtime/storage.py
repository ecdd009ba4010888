"""Opening tern's SQLite files so that a broken one never stops tern.

A file that is not a database (garbage, a truncated copy, a newer format) is moved
aside as ``<name>.corrupt-<timestamp>`` (with its ``-wal`` and ``-shm``), with a loud
warning, and a fresh one takes its place: tern boots and keeps serving, and the old
bytes are kept for whoever wants to look at them. Every file is private (0600) from
its first byte. :func:`failed` turns a failed write into a :class:`StorageError`.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from runtime.errors import StorageError
from runtime.log import get_logger

__all__ = ["open_db", "move_aside", "failed", "CORRUPT"]

log = get_logger("tern.storage")

#: What SQLite says when the file is not a database it can use.
CORRUPT = ("file is not a database", "database disk image is malformed", "file is encrypted")


def _create_private(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600))


def move_aside(path: Path, reason: str) -> Path:
    """Rename a broken database (and its WAL and shared-memory files) out of the way."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.replace(path, target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.replace(side, target.with_name(target.name + suffix))
    log.error("%s is not a usable database (%s): moved aside to %s, starting a fresh one", path, reason, target.name)
    return target


def open_db(path: str | Path, setup: str, *, check: bool = True, **connect: object) -> sqlite3.Connection:
    """Connect to ``path`` (WAL), run ``setup`` (the schema); a corrupt file is moved
    aside once and a fresh one made. ``check`` also reads the whole first page of the
    schema (a damaged file can pass the header test)."""
    path = Path(path)
    try:
        return _open(path, setup, check, connect)
    except sqlite3.DatabaseError as exc:
        if not any(text in str(exc) for text in CORRUPT):
            raise
        move_aside(path, str(exc))
    return _open(path, setup, check, connect)


def _open(path: Path, setup: str, check: bool, connect: dict[str, object]) -> sqlite3.Connection:
    _create_private(path)
    db = sqlite3.connect(path, **connect)  # type: ignore[arg-type]
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(setup)
        if check:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        db.close()
        raise
    return db


def failed(what: str, exc: BaseException) -> StorageError:
    """The error a refused write answers with, e.g. "task not saved: database or disk is full"."""
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return StorageError(f"{what}: {detail}")
