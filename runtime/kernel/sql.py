"""One way for a kernel store to run its SQL on either engine (``[state] store``).

A store writes each statement once, with ``?`` placeholders and SQL both engines know
(``INSERT ... ON CONFLICT``), inside a function ``fn(tx)`` that is one transaction:
``tx.execute`` / ``tx.executemany`` return a cursor (``fetchone``, ``fetchall``,
``rowcount``; on PostgreSQL a NUL in a text value is kept as U+FFFD), ``tx.notify``
sends a NOTIFY at commit (nothing on SQLite, where other processes poll the file),
``tx.dialect`` names the engine for the rare statement that differs.

- :class:`SqliteSql`: the one connection of a file in the state directory, used on the
  event loop itself (a local statement costs less than a thread hop), as before.
- :class:`PgSql`: ``runtime.pg.Database``, ``fn`` in a worker thread; an unreachable
  database is ``DatabaseUnavailable`` (503), which passes through as it is.

Any other failure of the engine is a :class:`StorageError` saying ``what`` failed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from runtime.storage import failed

__all__ = ["Sql", "SqliteSql", "PgSql"]

T = TypeVar("T")


class Sql:
    dialect = ""

    async def run(self, fn: Callable[[Any], T], what: str) -> T:  # pragma: no cover - interface
        raise NotImplementedError


class _SqliteTx:
    dialect = "sqlite"

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.db.execute(sql, params)

    def executemany(self, sql: str, rows: list[Any]) -> Any:
        return self.db.executemany(sql, rows)

    def notify(self, channel: str, payload: str) -> None:
        """Other processes on a state directory poll it: nothing to send."""


class SqliteSql(Sql):
    """``fn`` on the event loop in one ``BEGIN IMMEDIATE`` transaction of ``db`` (a
    connection in autocommit mode: ``isolation_level=None``)."""

    dialect = "sqlite"

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def run_sync(self, fn: Callable[[Any], T], what: str) -> T:
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(_SqliteTx(self.db))
            except BaseException:
                self.db.rollback()
                raise
            self.db.commit()
            return result
        except (sqlite3.Error, OSError) as exc:
            raise failed(what, exc) from None

    async def run(self, fn: Callable[[Any], T], what: str) -> T:
        return self.run_sync(fn, what)


class _PgTx:
    dialect = "postgres"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(sql.replace("?", "%s"), _text(params))

    def executemany(self, sql: str, rows: list[Any]) -> Any:
        cursor = self.conn.cursor()
        cursor.executemany(sql.replace("?", "%s"), [_text(row) for row in rows])
        return cursor

    def notify(self, channel: str, payload: str) -> None:
        self.conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))  # sent at commit


def _text(params: Any) -> Any:
    """PostgreSQL's text holds no NUL character (SQLite's does): one in a value is kept
    as U+FFFD (a message that had one still saves; an id that had one matches nothing)."""
    return [value.replace("\x00", "\ufffd") if isinstance(value, str) else value for value in params]


class PgSql(Sql):
    dialect = "postgres"

    def __init__(self, db: Any) -> None:
        self.db = db  # runtime.pg.Database

    async def run(self, fn: Callable[[Any], T], what: str) -> T:
        from runtime.pg.pool import StatementFailed

        try:
            return await self.db.run(lambda conn: fn(_PgTx(conn)))
        except StatementFailed as exc:  # the statement's own error (DatabaseUnavailable passes as it is)
            raise failed(what, exc.error) from None
