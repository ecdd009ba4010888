"""The commands that work on the state without a daemon (``tern approvals``, ``approve``,
``deny``, ``conversations``) open the configured store here: the state directory's
SQLite file, or with ``[state] store = "postgres"`` the shared database (so a decision
made here wakes the call waiting on any node). The store's methods are async: the
work runs under trio, with a pool of one connection that is closed at the end."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["run_on_store"]

T = TypeVar("T")


def run_on_store(config: Any, make: Callable[[Any], Any], work: Callable[[Any], Awaitable[T]]) -> T:
    """``work(make(db))`` under trio; ``db`` is None with SQLite. A database that cannot
    be reached is one line (``DatabaseUnavailable``)."""
    import trio

    async def main() -> T:
        db = None
        if config.state.store == "postgres":
            from runtime.pg.pool import Database, resolve_url

            db = Database(resolve_url(config.state.postgres_url), pool_size=1, name="tern-cli")
            await db.open()
        try:
            store = make(db)
            await store.start()
            return await work(store)
        finally:
            if db is not None:
                db.close()

    return trio.run(main)
