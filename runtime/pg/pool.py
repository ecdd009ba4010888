"""A bounded pool of psycopg connections, used from trio through worker threads.

``Database.run(fn, *args)`` borrows a connection, runs ``fn(conn, *args)`` in a worker
thread inside one transaction (committed when ``fn`` returns, rolled back when it
raises), and gives the connection back. With ``transaction=False`` each statement
commits on its own (the connections are in autocommit): for a call of one statement,
which PostgreSQL runs atomically anyway, that saves the BEGIN and COMMIT round trips.
At most ``pool_size`` threads talk to the database at once; every call has a time limit
(``statement_timeout`` on the server, and a trio deadline around the thread, so a silent
network cannot hang tern).

A connection the server dropped (a restart, a failover) is thrown away with every idle
one beside it, and the call is tried once more on a fresh connection when the dead one
had been idle: a statement that never reached the server is safe to send again. Any
other failure to reach the database is a :class:`DatabaseUnavailable` whose text is one
line naming the server, never the password; the caller answers it as a 503 and tern
keeps serving, reconnecting on the next call.

Migrations: ``migrate(component, steps)`` applies each component's numbered steps that
are not yet in ``tern_migrations``, under a transaction-scoped advisory lock, so several
nodes booting at once apply each step exactly once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from runtime.errors import StorageError
from runtime.log import get_logger

__all__ = ["Database", "DatabaseUnavailable", "StatementFailed", "describe", "driver", "where", "resolve_url"]

log = get_logger("pg")
T = TypeVar("T")
#: pg_advisory_xact_lock key of migrations: "tern" in ASCII.
MIGRATION_LOCK = 0x7465726E
_MIGRATIONS_TABLE = ("CREATE TABLE IF NOT EXISTS tern_migrations (component text NOT NULL, version integer NOT NULL, "
                     "applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (component, version))")


class DatabaseUnavailable(StorageError):
    """PostgreSQL cannot be reached, refused tern, or did not answer in time: this call
    fails (503); tern keeps serving and reconnects on the next one."""


class StatementFailed(StorageError):
    """PostgreSQL refused one statement (its data, a constraint, a range): the call fails,
    the connection stays good. ``error`` is the driver's exception, ``sqlstate`` its code."""

    def __init__(self, message: str, error: BaseException) -> None:
        super().__init__(message)
        self.error = error
        self.sqlstate: str | None = getattr(error, "sqlstate", None)


def resolve_url(url: str, environ: Any = None) -> str:
    """``[state] postgres_url`` with each ``${VAR}`` taken from tern's environment (an unset
    one is a configuration error); the password is registered as a secret, so no log line
    can show it."""
    import os

    from runtime.errors import ConfigError
    from runtime.log import register_secret

    env = os.environ if environ is None else environ

    def lookup(match: re.Match[str]) -> str:
        if match.group(1) not in env:
            raise ConfigError(f"[state] postgres_url needs ${{{match.group(1)}}}, "
                              "which is not set in tern's environment")
        return env[match.group(1)]

    resolved = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lookup, url)
    if not resolved.startswith(("postgresql://", "postgres://")):  # the driver's error would quote it, password and all
        raise ConfigError(f"[state] postgres_url {url} does not give a postgresql:// URL")
    password = re.match(r"^[a-z]+://[^:/@]*:([^@]*)@", resolved)
    if password and password.group(1):
        register_secret(password.group(1))
    return resolved


def driver() -> Any:
    """The psycopg module, or a clear error saying how to get it."""
    try:
        import psycopg
    except ImportError:
        raise DatabaseUnavailable('[state] store = "postgres" needs the psycopg driver: '
                                  "pip install 'tern[postgres]' (or 'psycopg[binary]')") from None
    return psycopg


def where(url: str) -> str:
    """``host:port/dbname`` of a URL, without user or password."""
    match = re.match(r"^[a-z]+://(?:[^@/]*@)?([^/?]*)(?:/([^?]*))?", url)
    if match is None:
        return "(an unreadable postgres_url)"
    host = match.group(1) or "localhost"
    return f"{host}/{match.group(2) or ''}"


def describe(exc: BaseException, url: str) -> str:
    """One line for a failed connection or query: the server, then what it said (libpq's
    text has hints on further lines and can name the user; never the password)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    password = re.match(r"^[a-z]+://[^:/@]*:([^@]*)@", url)
    if password and password.group(1):
        text = text.replace(password.group(1), "********")
    if len(text) > 300:
        text = text[:300] + "..."
    return f"PostgreSQL at {where(url)}: {text}"


class Database:
    """One PostgreSQL database, shared by every store of a node."""

    def __init__(self, url: str, *, pool_size: int = 8, connect_timeout: float = 5.0,
                 statement_timeout: float = 10.0, name: str = "tern") -> None:
        self.url = url
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self.statement_timeout = statement_timeout
        self.name = name
        self.timeout = connect_timeout + statement_timeout + 1.0  # a call's own deadline, by default
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._limiter = trio.CapacityLimiter(pool_size)
        self._down: str | None = None  # why the last call could not reach the database
        self._opened = False  # open() succeeded: failures are logged from then on (at boot, the caller says it)

    # --- Connections (worker threads) -----------------------------------------------------

    def connect(self, *, autocommit: bool = False) -> Any:
        """A new connection (in the calling thread): the pool's, and the listener's."""
        psycopg = driver()
        try:
            return psycopg.connect(self.url, autocommit=autocommit, application_name=self.name,
                                   connect_timeout=max(2, round(self.connect_timeout)),
                                   options=f"-c statement_timeout={int(self.statement_timeout * 1000)}")
        except psycopg.Error as exc:
            raise DatabaseUnavailable(describe(exc, self.url)) from None

    def _borrow(self) -> tuple[Any, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self.connect(autocommit=True), False

    def _give_back(self, conn: Any) -> None:
        if conn.closed or conn.broken:
            return
        with self._lock:
            if len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            try:
                conn.close()
            except Exception:
                pass

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...], transaction: bool = True) -> T:
        psycopg = driver()
        for attempt in (1, 2):
            conn, reused = self._borrow()
            try:
                if transaction:
                    with conn.transaction():
                        result = fn(conn, *args)
                else:
                    result = fn(conn, *args)
            except psycopg.Error as exc:
                if not (conn.closed or conn.broken):
                    self._give_back(conn)
                    # the statement's own error (a constraint, bad data): the caller's to answer, as a StorageError
                    raise StatementFailed(describe(exc, self.url), exc) from exc
                conn.close()
                self._drop_idle()  # the server went away: the idle ones are dead too
                if reused and attempt == 1:
                    continue
                raise DatabaseUnavailable(describe(exc, self.url)) from None
            except BaseException:
                if conn.broken or conn.closed:
                    conn.close()
                else:
                    self._give_back(conn)
                raise
            self._give_back(conn)
            return result
        raise AssertionError("unreachable")

    # --- trio side ------------------------------------------------------------------------

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float | None = None,
                  transaction: bool = True) -> T:
        """``fn(conn, *args)`` in a worker thread, in one transaction (or, without
        ``transaction``, each statement on its own), within ``timeout``."""
        limit = self.timeout if timeout is None else timeout
        try:
            with trio.fail_after(limit):
                result = await trio.to_thread.run_sync(self._call, fn, args, transaction, limiter=self._limiter,
                                                       abandon_on_cancel=True)
        except trio.TooSlowError:
            why = f"PostgreSQL at {where(self.url)}: no answer within {limit:g} s"
            if self._opened:
                self._note_down(why)
            raise DatabaseUnavailable(why) from None
        except DatabaseUnavailable as exc:
            if self._opened:
                self._note_down(str(exc))
            raise
        if self._down is not None:
            log.warning("%s: reachable again", f"PostgreSQL at {where(self.url)}")
            self._down = None
        return result

    def _note_down(self, why: str) -> None:
        if self._down is None:
            log.error("%s (tern retries on the next call)", why)
        self._down = why

    async def open(self) -> None:
        """Reach the database once at boot: ``DatabaseUnavailable`` with one line if not.
        A database every role may connect to is named in a warning: any of them could
        LISTEN on tern's channels (task ids, node ids) and NOTIFY them."""
        try:
            public = await self.run(lambda conn: conn.execute(
                "SELECT has_database_privilege('public', current_database(), 'CONNECT')").fetchone()[0])
        finally:
            self._down = None
        self._opened = True
        log.info("store: PostgreSQL at %s", where(self.url))
        if public:
            log.warning("store: every role may connect to the database at %s (CONNECT is granted to PUBLIC), and so "
                        "LISTEN on tern's channels and NOTIFY them: REVOKE CONNECT ON DATABASE ... FROM PUBLIC "
                        "(docs/scale-out.md, The database role)", where(self.url))

    async def check(self, timeout: float = 2.0) -> None:
        """Readiness: raises ``DatabaseUnavailable`` when the database does not answer now."""
        await self.run(lambda conn: conn.execute("SELECT 1").fetchone(), timeout=timeout)

    async def migrate(self, component: str, steps: list[str]) -> int:
        """Apply ``steps`` (step i is version i + 1) that ``component`` lacks; how many ran."""

        def apply(conn: Any) -> int:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute(_MIGRATIONS_TABLE)
            done = conn.execute("SELECT coalesce(max(version), 0) FROM tern_migrations WHERE component = %s",
                                (component,)).fetchone()[0]
            if done > len(steps):
                raise StorageError(f"PostgreSQL at {where(self.url)}: the {component} tables are at version {done}, "
                                   f"newer than this tern knows ({len(steps)}): upgrade tern on this node")
            for version, sql in enumerate(steps[done:], start=done + 1):
                conn.execute(sql)
                conn.execute("INSERT INTO tern_migrations (component, version) VALUES (%s, %s)", (component, version))
            return len(steps) - done

        applied = await self.run(apply, timeout=120.0)
        if applied:
            log.info("store: %s tables migrated to version %d", component, len(steps))
        return applied

    async def notify(self, channel: str, payload: str) -> None:
        await self.run(lambda conn: conn.execute("SELECT pg_notify(%s, %s)", (channel, payload)))

    def close(self) -> None:
        self._drop_idle()
