"""The schedule trigger's trio shell: sleep until the next run, call ``fire``, repeat.

It sleeps in chunks of at most a minute and reads the wall clock after each, so a host
that was suspended, or a clock set forward, is noticed within a minute: a run found more
than ``LATE_SECS`` late counts as missed and goes through the catch-up policy once (never
a burst of every slot passed). ``fire`` is awaited; slots that pass while it runs are
skipped, so the scheduler never piles calls up (the runner's overlap policy decides what
a busy trigger does, and its ``fire`` returns at once).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Awaitable, Callable

import trio

from runtime.kernel.triggers.clock import WallClock
from runtime.kernel.triggers.schedule import Schedule
from runtime.log import get_logger

__all__ = ["run_schedule", "MAX_SLEEP_SECS", "LATE_SECS"]

MAX_SLEEP_SECS = 60.0
LATE_SECS = 60.0
_log = get_logger("triggers.schedule")


async def run_schedule(schedule: Schedule, *, clock: WallClock, last_fire: dt.datetime | None, catch_up: str,
                       catch_up_limit: int, fire: Callable[[dt.datetime], Awaitable[None]],
                       rng: random.Random | None = None) -> None:
    """Run ``fire(scheduled_utc)`` at each run of ``schedule``; never returns. ``last_fire`` is the
    previous run's scheduled time (from the runs store), None for a trigger that never ran."""
    rng = rng or random.Random()
    now = clock.now()
    last = now if last_fire is None else min(last_fire, now)
    last = await _catch_up(schedule, last, now, catch_up, catch_up_limit, fire)
    while True:
        due = schedule.next_fire(last)
        target = due + dt.timedelta(seconds=schedule.jitter(rng))
        now = await _sleep_until(clock, target)
        if (now - target).total_seconds() > LATE_SECS:
            last = await _catch_up(schedule, last, now, catch_up, catch_up_limit, fire)
            continue
        await fire(due)
        last = due
        now = clock.now()
        if schedule.next_fire(last) <= now:  # fire outlasted the next slot: skip, do not pile up
            last = now


async def _sleep_until(clock: WallClock, target: dt.datetime) -> dt.datetime:
    """Sleep until the wall clock reads ``target``, re-reading it at least once a minute."""
    while True:
        now = clock.now()
        left = (target - now).total_seconds()
        if left <= 0:
            return now
        await trio.sleep(min(left, MAX_SLEEP_SECS))


async def _catch_up(schedule: Schedule, last: dt.datetime, now: dt.datetime, catch_up: str, limit: int,
                    fire: Callable[[dt.datetime], Awaitable[None]]) -> dt.datetime:
    """Fire the runs missed in (last, now] under the policy; the new ``last``."""
    if schedule.next_fire(last) > now:
        return last
    runs = schedule.missed(last, now, catch_up, limit)
    _log.info("schedule missed runs since %s; catch_up=%s fires %d", last.isoformat(), catch_up, len(runs))
    for scheduled in runs:
        await fire(scheduled)
    return now
