"""The PostgreSQL pool, migrations and listener against a real server (tests/pg.py)."""

from __future__ import annotations

import threading

import pytest
import trio

from runtime.pg import Database, DatabaseUnavailable
from runtime.pg.listen import Listener

STEPS = ["CREATE TABLE things (id text PRIMARY KEY, n integer NOT NULL)",
         "ALTER TABLE things ADD COLUMN note text NOT NULL DEFAULT ''"]


async def test_run_commits_and_rolls_back(pg_url: str) -> None:
    db = Database(pg_url, pool_size=2)
    await db.open()
    assert await db.migrate("things", STEPS) == 2
    await db.run(lambda c: c.execute("INSERT INTO things (id, n) VALUES ('a', 1)"))

    def fails(conn) -> None:
        conn.execute("INSERT INTO things (id, n) VALUES ('b', 2)")
        raise ValueError("no")

    with pytest.raises(ValueError):
        await db.run(fails)
    rows = await db.run(lambda c: c.execute("SELECT id, n, note FROM things ORDER BY id").fetchall())
    assert rows == [("a", 1, "")]
    # without a transaction each statement commits on its own: what ran before the error stays
    with pytest.raises(ValueError):
        await db.run(fails, transaction=False)
    rows = await db.run(lambda c: c.execute("SELECT id, n, note FROM things ORDER BY id").fetchall())
    assert rows == [("a", 1, ""), ("b", 2, "")]
    db.close()


async def test_migrations_apply_once_when_nodes_boot_together(pg_url: str) -> None:
    nodes = [Database(pg_url, pool_size=1) for _ in range(4)]
    applied: list[int] = []
    async with trio.open_nursery() as nursery:
        for db in nodes:
            nursery.start_soon(lambda db=db: _append(applied, db.migrate("things", STEPS)))
    assert sorted(applied) == [0, 0, 0, 2]
    versions = await nodes[0].run(lambda c: c.execute(
        "SELECT version FROM tern_migrations WHERE component = 'things' ORDER BY version").fetchall())
    assert versions == [(1,), (2,)]
    # A newer database than this build knows: refused, saying so.
    with pytest.raises(Exception, match="newer than this tern knows"):
        await nodes[0].migrate("things", STEPS[:1])
    for db in nodes:
        db.close()


async def _append(out: list[int], coro) -> None:
    out.append(await coro)


async def test_bounded_pool_and_a_deadline(pg_url: str) -> None:
    db = Database(pg_url, pool_size=2)
    peak, now, lock = [0], [0], threading.Lock()

    def slow(conn) -> None:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        conn.execute("SELECT pg_sleep(0.2)")
        with lock:
            now[0] -= 1

    async with trio.open_nursery() as nursery:
        for _ in range(6):
            nursery.start_soon(db.run, slow)
    assert peak[0] == 2
    with pytest.raises(DatabaseUnavailable, match="no answer within 0.3 s"):
        await db.run(lambda c: c.execute("SELECT pg_sleep(5)"), timeout=0.3)
    db.close()


async def test_wrong_password_and_unreachable_are_one_line(pg_server) -> None:
    url = pg_server.url("postgres", password="wrong-password-123")
    with pytest.raises(DatabaseUnavailable) as info:
        await Database(url).open()
    text = str(info.value)
    assert "\n" not in text and "password authentication failed" in text and "wrong-password-123" not in text
    assert text.startswith(f"PostgreSQL at 127.0.0.1:{pg_server.port}/postgres: ")
    with pytest.raises(DatabaseUnavailable) as info:
        await Database("postgresql://tern:x@127.0.0.1:1/tern", connect_timeout=2).open()
    assert "\n" not in str(info.value) and "127.0.0.1:1/tern" in str(info.value)


async def test_restart_reconnects_and_the_listener_catches_up(pg_server, pg_url: str) -> None:
    db = Database(pg_url, pool_size=2)
    heard: list[str | None] = []
    listener = Listener(db, poll_secs=0.1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        listener.follow("tern_test", heard.append)
        with trio.fail_after(10):
            while None not in heard:  # listening: told to catch up
                await trio.sleep(0.05)
        await db.notify("tern_test", "one")
        with trio.fail_after(10):
            while "one" not in heard:
                await trio.sleep(0.05)
        await trio.to_thread.run_sync(pg_server.restart)
        # The pooled connections died with the server: the next call reconnects by itself.
        assert await db.run(lambda c: c.execute("SELECT 41 + 1").fetchone()) == (42,)
        heard.clear()
        with trio.fail_after(15):
            while None not in heard:  # the listener came back and says: catch up
                await trio.sleep(0.05)
        await db.notify("tern_test", "two")
        with trio.fail_after(10):
            while "two" not in heard:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    db.close()
