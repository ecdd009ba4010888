"""The wall clock the schedule shell reads, as a value it is handed: in production
``datetime.now(UTC)``; a test builds one from ``trio.current_time()`` plus an epoch (and
any jump it makes), so autojump_clock drives days of wall time in no real time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

__all__ = ["WallClock"]


def _system_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class WallClock:
    """``now()`` is an aware UTC datetime, read afresh each time: the host may have slept."""

    def __init__(self, read: Callable[[], dt.datetime] = _system_now) -> None:
        self._read = read

    def now(self) -> dt.datetime:
        return self._read()
