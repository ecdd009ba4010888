"""``GET /ready``: can this node serve requests now? For Kubernetes' readiness probe and a
load balancer's health check, which stop sending a node work while its store is down and
send it again when the store is back (``/health`` is liveness: the process answers).

With ``[state] store = "postgres"`` the database must answer ``SELECT 1`` within 2 s
(``Database.check``); with SQLite the state directory must take a new file. The route is
public, so the answer says which store failed and nothing more (no host, path or driver
text): the node's log has the detail. One check runs at a time and its answer is reused
for a second, so a flood of probes costs the store at most one query a second.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import trio

from runtime.log import get_logger

__all__ = ["Readiness"]

log = get_logger("ready")


def _write_probe(state: Path) -> None:
    """Create, write and remove a small file in the state directory (a worker thread)."""
    fd, name = tempfile.mkstemp(prefix=".ready-", dir=state)
    try:
        os.write(fd, b"ready\n")
    finally:
        os.close(fd)
        os.unlink(name)


class Readiness:
    """The readiness of one node's store; ``await check()`` is None when ready, else a reason."""

    def __init__(self, db: Any, state_dir: str, *, timeout: float = 2.0, reuse_secs: float = 1.0) -> None:
        self.db = db  # runtime.pg.Database, or None with the SQLite store
        self.state_dir = Path(state_dir) if state_dir else None
        self.timeout = timeout
        self.reuse_secs = reuse_secs
        self._lock = trio.Lock()
        self._checked_at = -float("inf")
        self._reason: str | None = None

    async def check(self) -> str | None:
        async with self._lock:
            if trio.current_time() - self._checked_at >= self.reuse_secs:
                reason, detail = await self._probe()
                if reason != self._reason:
                    if reason is None:
                        log.info("ready again")
                    else:
                        log.warning("not ready: %s", detail)
                self._reason, self._checked_at = reason, trio.current_time()
            return self._reason

    async def _probe(self) -> tuple[str | None, str]:
        """(the public reason or None, the log's detail)."""
        if self.db is not None:
            try:
                await self.db.check(timeout=self.timeout)
            except Exception as exc:  # whatever keeps the database from answering means "not ready"
                return "the PostgreSQL store does not answer", str(exc)
            return None, ""
        if self.state_dir is None:  # a node with nothing on disk (tests' bare Config)
            return None, ""
        try:
            with trio.fail_after(self.timeout):
                await trio.to_thread.run_sync(_write_probe, self.state_dir, abandon_on_cancel=True)
        except trio.TooSlowError:
            reason = f"the state directory did not take a write within {self.timeout:g} s"
            return reason, f"{reason}: {self.state_dir}"
        except OSError as exc:
            reason = f"the state directory cannot be written ({exc.strerror or type(exc).__name__})"
            return reason, f"{reason}: {self.state_dir}"
        return None, ""
