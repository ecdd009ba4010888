"""LISTEN/NOTIFY on one connection per node, for every store that wants to hear what
other nodes changed.

A follower registers a callback for a channel (``follow``). The callback runs in trio
with each payload, and with ``None`` whenever the follower may have missed something:
once its channel is being listened to (after it followed, and after every reconnect).
On ``None`` a follower reads what it follows again (its catch-up read); so nothing is
lost to a dropped connection or a database restart, only delayed.

The connection is polled from a worker thread for at most ``poll_secs`` at a time, so
shutting down never waits on it; a broken connection is retried with a growing pause.
Payloads are what the notifying store put there (ids: a NOTIFY carries 8000 bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from runtime.log import get_logger
from runtime.wire.retry import Backoff
from runtime.pg.pool import Database, DatabaseUnavailable, describe, driver

__all__ = ["Listener", "Follower"]

log = get_logger("pg.listen")
Follower = Callable[[str | None], None]
RETRY_SECS = (0.1, 0.25, 0.5, 1.0, 2.0)


class Listener:
    def __init__(self, db: Database, *, poll_secs: float = 0.5) -> None:
        self.db = db
        self.poll_secs = poll_secs
        self._followers: dict[str, list[Follower]] = {}
        self.connected = False

    def follow(self, channel: str, callback: Follower) -> Callable[[], None]:
        """Call ``callback`` with each payload on ``channel``; returns the unfollow. A new
        channel is listened to within ``poll_secs`` (its followers then get ``None``)."""
        if not channel.isidentifier():
            raise ValueError(f"not a channel name: {channel!r}")
        followers = self._followers.setdefault(channel, [])
        followers.append(callback)

        def unfollow() -> None:
            if callback in followers:
                followers.remove(callback)

        return unfollow

    def _tell(self, channel: str, payload: str | None) -> None:
        for callback in list(self._followers.get(channel, ())):
            try:
                callback(payload)
            except Exception:
                log.exception("listener: a follower of %s failed", channel)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        backoff = Backoff(ladder=RETRY_SECS)
        while True:
            conn = None
            try:
                conn = await trio.to_thread.run_sync(lambda: self.db.connect(autocommit=True), abandon_on_cancel=True)
                listening: set[str] = set()
                if backoff.failures:
                    log.warning("listener: connected to PostgreSQL again; followers catch up")
                backoff.reset()
                while True:
                    fresh = [c for c in self._followers if c not in listening]
                    if fresh:
                        await trio.to_thread.run_sync(_listen, conn, fresh, abandon_on_cancel=True)
                        listening.update(fresh)
                        for channel in fresh:
                            self._tell(channel, None)  # listened to from now on: read what came before
                    self.connected = True  # only now: a notify sent after this is heard
                    notes = await trio.to_thread.run_sync(_poll, conn, self.poll_secs, abandon_on_cancel=True)
                    for channel, payload in notes:
                        self._tell(channel, payload)
            except (DatabaseUnavailable, OSError) as exc:
                self._lost(backoff.failures, str(exc))
            except Exception as exc:  # whatever a statement raises: this connection goes, a new one listens
                if isinstance(exc, driver().Error):
                    self._lost(backoff.failures, describe(exc, self.db.url))
                else:
                    log.exception("listener: failed; reconnecting")
            finally:
                self.connected = False
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
            await trio.sleep(backoff.next())

    def _lost(self, failures: int, why: str) -> None:
        if failures == 0:
            log.warning("listener: %s; reconnecting (streams on other nodes' tasks catch up then)", why)


def _listen(conn: Any, channels: list[str]) -> None:
    for channel in channels:
        conn.execute(f'LISTEN "{channel}"')


def _poll(conn: Any, wait: float) -> list[tuple[str, str]]:
    """What arrived within ``wait`` seconds: back at the first, with whatever came with it."""
    notes = [(n.channel, n.payload) for n in conn.notifies(timeout=wait, stop_after=1)]
    if notes:
        notes += [(n.channel, n.payload) for n in conn.notifies(timeout=0.001)]
    return notes
