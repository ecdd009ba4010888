"""When a schedule trigger fires, sans-IO: a cron expression in a time zone, or a fixed
interval of elapsed time (``every``, unaffected by daylight saving); jitter; and which
runs were missed while tern was down, under the trigger's ``catch_up`` policy.

Missed runs are found with bounded work whatever the downtime: intervals by division,
cron by looking back over a window that grows fourfold until it holds enough runs.
"""

from __future__ import annotations

import collections
import datetime as dt
import random
import re
from dataclasses import dataclass

from runtime.errors import ConfigError
from runtime.kernel.triggers.cron import Cron

__all__ = ["Schedule", "parse_every", "CATCH_UP", "MIN_EVERY_SECS", "MAX_EVERY_SECS"]

CATCH_UP = ("none", "one", "all")
MIN_EVERY_SECS = 1.0
MAX_EVERY_SECS = 366 * 86400.0
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_EVERY = re.compile(r"(?:(\d{1,6})d)?(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,8})s)?")
_FIRST_WINDOW = dt.timedelta(minutes=1)


def parse_every(text: str) -> float:
    """``"90s"``, ``"5m"``, ``"1h30m"``, ``"2h"``, ``"1d"`` -> seconds, from 1 s to 366 days."""
    match = _EVERY.fullmatch(text.strip().lower()) if len(text) <= 40 else None
    if match is None or not any(match.groups()):
        raise ConfigError(f"every {text!r} is not an interval like 90s, 5m, 1h30m or 1d")
    seconds = float(sum(int(value) * _UNITS[unit] for value, unit in zip(match.groups(), "dhms") if value))
    if not MIN_EVERY_SECS <= seconds <= MAX_EVERY_SECS:
        raise ConfigError(f"every {text!r} must be from 1s to 366d")
    return seconds


@dataclass(frozen=True)
class Schedule:
    """Exactly one of ``cron`` and ``every`` (seconds); ``tz`` is the zone cron times are read in."""

    cron: Cron | None = None
    every: float | None = None
    tz: dt.tzinfo = dt.timezone.utc
    jitter_secs: float = 0.0

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise ConfigError("a schedule has exactly one of cron and every")

    def next_fire(self, after: dt.datetime) -> dt.datetime:
        """The first run strictly after ``after`` (aware UTC), before jitter."""
        if self.cron is not None:
            return self.cron.next_after(after, self.tz)
        return after + dt.timedelta(seconds=self.every)

    def jitter(self, rng: random.Random) -> float:
        """Seconds to delay one run by, uniform in [0, jitter_secs]: spreads triggers that share a time."""
        return rng.uniform(0.0, self.jitter_secs) if self.jitter_secs > 0 else 0.0

    def missed(self, last_fire: dt.datetime, now: dt.datetime, catch_up: str, limit: int) -> list[dt.datetime]:
        """Runs due in (last_fire, now], oldest first: none, the latest one, or the latest ``limit``."""
        if catch_up not in CATCH_UP:
            raise ConfigError(f"catch_up {catch_up!r} is not one of {', '.join(CATCH_UP)}")
        keep = {"none": 0, "one": 1, "all": max(limit, 0)}[catch_up]
        if keep == 0 or now <= last_fire:
            return []
        if self.every is not None:
            step = dt.timedelta(seconds=self.every)
            count = int((now - last_fire) / step)
            return [last_fire + step * k for k in range(max(count - keep, 0) + 1, count + 1)]
        window = _FIRST_WINDOW
        while True:
            start = max(last_fire, now - window)
            latest = self._runs_between(start, now, keep)
            if len(latest) == keep or start == last_fire:
                return list(latest)
            window *= 4

    def _runs_between(self, start: dt.datetime, end: dt.datetime, keep: int) -> collections.deque[dt.datetime]:
        latest: collections.deque[dt.datetime] = collections.deque(maxlen=keep)
        moment = self.next_fire(start)
        while moment <= end:
            latest.append(moment)
            moment = self.next_fire(moment)
        return latest
