"""PostgreSQL under trio, for the state several tern nodes share (``[state] store =
"postgres"``; docs/scale-out.md).

The driver is psycopg 3, synchronous, in worker threads: asyncio-only drivers do not
run under trio, and a thread per query on a bounded pool is cheap next to a network
round trip. psycopg is an optional extra (``pip install 'tern[postgres]'``), imported
only when a PostgreSQL store is configured, so the SQLite default and the pyz carry
nothing of it.

- :class:`~runtime.pg.pool.Database`: the pool (``run`` a function in one transaction),
  migrations under an advisory lock, readiness, and one clear line for a database that
  cannot be reached.
- :class:`~runtime.pg.listen.Listener`: LISTEN/NOTIFY on one connection, reconnecting by
  itself; a follower is told when it may have missed something (catch up by reading).
"""

from runtime.pg.pool import Database, DatabaseUnavailable, describe

__all__ = ["Database", "DatabaseUnavailable", "describe"]
