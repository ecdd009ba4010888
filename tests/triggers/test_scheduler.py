"""The schedule loop on trio's autojump clock: a wall clock driven by trio time (plus the
jumps a test makes) runs simulated days in no real time."""

from __future__ import annotations

import datetime as dt
import random
from zoneinfo import ZoneInfo

import pytest
import trio

from runtime.kernel.triggers.clock import WallClock
from runtime.kernel.triggers.cron import parse_cron
from runtime.kernel.triggers.schedule import Schedule
from runtime.kernel.triggers.scheduler import MAX_SLEEP_SECS, run_schedule

UTC = dt.timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
HOUR = dt.timedelta(hours=1)


class Host:
    """A wall clock at ``epoch`` when trio time is 0; ``suspend`` moves it on with no trio time passing."""

    def __init__(self, epoch: dt.datetime) -> None:
        self.epoch = epoch
        self.skew = dt.timedelta(0)
        self.started = trio.current_time()
        self.clock = WallClock(self.now)
        self.fired: list[tuple[dt.datetime, dt.datetime]] = []  # (scheduled, wall time of the call)

    def now(self) -> dt.datetime:
        return self.epoch + self.skew + dt.timedelta(seconds=trio.current_time() - self.started)

    def suspend(self, by: dt.timedelta) -> None:
        self.skew += by

    async def fire(self, scheduled: dt.datetime) -> None:
        self.fired.append((scheduled, self.clock.now()))

    def scheduled(self) -> list[dt.datetime]:
        return [scheduled for scheduled, _ in self.fired]


async def run_for(seconds: float, schedule: Schedule, host: Host, *, last_fire: dt.datetime | None = None,
                  catch_up: str = "none", limit: int = 10, fire=None, rng: random.Random | None = None,
                  during=None) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_schedule(schedule, clock=host.clock, last_fire=last_fire, catch_up=catch_up,
                                                catch_up_limit=limit, fire=fire or host.fire, rng=rng))
        if during is not None:
            await during()
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


START = dt.datetime(2026, 1, 5, 0, 0, 30, tzinfo=UTC)


async def test_every_fires_on_time_over_simulated_days(autojump_clock):
    host = Host(START)
    await run_for(3 * 86400 + 1, Schedule(every=5400.0), host)
    assert host.scheduled() == [START + dt.timedelta(seconds=5400 * k) for k in range(1, 49)]
    assert all(wall == scheduled for scheduled, wall in host.fired)


async def test_cron_fires_at_its_local_times_across_spring_forward(autojump_clock):
    host = Host(dt.datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    await run_for(4 * 86400, Schedule(cron=parse_cron("0 7 * * *"), tz=BERLIN), host)
    assert [moment.astimezone(BERLIN).strftime("%d %H:%M %Z") for moment in host.scheduled()] == \
        ["28 07:00 CET", "29 07:00 CEST", "30 07:00 CEST", "31 07:00 CEST"]
    assert host.scheduled()[1] - host.scheduled()[0] == dt.timedelta(hours=23)
    assert all(wall == scheduled for scheduled, wall in host.fired)


async def test_hourly_across_fall_back_runs_once_per_real_hour(autojump_clock):
    host = Host(dt.datetime(2026, 10, 24, 22, 0, 10, tzinfo=UTC))  # 00:00 CEST, 25 October
    await run_for(25 * 3600, Schedule(cron=parse_cron("@hourly"), tz=BERLIN), host)
    fired = host.scheduled()
    assert len(fired) == 25  # the day has 25 hours
    assert [later - earlier for earlier, later in zip(fired, fired[1:])] == [HOUR] * 24


async def test_sleeps_are_chunked_so_the_wall_clock_is_reread(autojump_clock):
    host = Host(START)
    reads = []
    host.clock = WallClock(lambda: reads.append(trio.current_time()) or host.now())
    await run_for(86400 - 60, Schedule(cron=parse_cron("@daily")), host)
    gaps = [later - earlier for earlier, later in zip(reads, reads[1:])]
    assert len(reads) > 1000 and max(gaps) <= MAX_SLEEP_SECS


@pytest.mark.parametrize(("catch_up", "expected_missed"), [("none", 0), ("one", 1), ("all", 3)])
async def test_catch_up_after_a_simulated_downtime(autojump_clock, catch_up, expected_missed):
    host = Host(START)
    last_fire = START - dt.timedelta(days=2, minutes=30)  # 23:30 two days ago; 8 runs of "every 6h" missed
    await run_for(7 * 3600, Schedule(every=6 * 3600.0), host, last_fire=last_fire, catch_up=catch_up, limit=3)
    missed = [last_fire + 6 * HOUR * k for k in range(1, 9)]
    assert host.scheduled()[:expected_missed] == missed[len(missed) - expected_missed:]
    assert all(wall == START for _, wall in host.fired[:expected_missed])  # at once, at start-up
    assert host.scheduled()[expected_missed:] == [START + 6 * HOUR]  # then on the interval again


async def test_cron_catch_up_keeps_the_latest_missed_runs(autojump_clock):
    host = Host(START)
    await run_for(3600, Schedule(cron=parse_cron("0 */4 * * *")), host, last_fire=START - dt.timedelta(days=30),
                  catch_up="all", limit=2)
    assert host.scheduled() == [START.replace(second=0) - 8 * HOUR + 4 * HOUR, START.replace(second=0)]


async def test_a_clock_jump_forward_is_handled_once_not_as_a_burst(autojump_clock):
    for catch_up, caught_up in (("none", []), ("one", [11]), ("all", [9, 10, 11])):  # "all" with limit 3
        host = Host(START)

        async def suspend_midway(host=host):
            await trio.sleep(2 * 3600 + 600)  # after the 01:00 and 02:00 runs, sleeping toward 03:00
            host.suspend(dt.timedelta(hours=9))  # the host slept nine hours: 03:00..11:00 were missed

        await run_for(3 * 3600, Schedule(cron=parse_cron("@hourly")), host, catch_up=catch_up, limit=3,
                      during=suspend_midway)
        hours = [moment.hour for moment in host.scheduled()]
        assert hours == [1, 2, *caught_up, 12, 13, 14], catch_up
        woke = host.epoch + dt.timedelta(hours=9, seconds=2 * 3600 + 600)
        late = [wall - woke for _, wall in host.fired[2:2 + len(caught_up)]]
        assert all(dt.timedelta(0) <= delay <= dt.timedelta(seconds=MAX_SLEEP_SECS) for delay in late)


async def test_a_clock_set_back_does_not_repeat_a_run(autojump_clock):
    host = Host(START)

    async def set_back():
        await trio.sleep(3600)
        host.suspend(-dt.timedelta(minutes=45))

    await run_for(3 * 3600, Schedule(cron=parse_cron("@hourly")), host, during=set_back)
    assert [moment.hour for moment in host.scheduled()] == [1, 2, 3]


async def test_a_slow_fire_does_not_pile_up_calls(autojump_clock):
    host = Host(START)
    running = []

    async def slow(scheduled):
        running.append(scheduled)
        assert len(running) == 1
        await host.fire(scheduled)
        await trio.sleep(25)  # longer than the 10 s interval
        running.remove(scheduled)

    await run_for(100, Schedule(every=10.0), host, fire=slow)
    calls = [wall for _, wall in host.fired]
    # the slots passed during a call are skipped; the next comes one interval after it returns
    assert calls == [START + dt.timedelta(seconds=seconds) for seconds in (10, 45, 80)]


async def test_a_fire_that_returns_at_once_keeps_every_slot(autojump_clock):
    """The runner's fire starts the run in the background: the scheduler sees no delay."""
    host = Host(START)
    async with trio.open_nursery() as runs:
        async def background(scheduled):
            runs.start_soon(trio.sleep, 25)
            await host.fire(scheduled)

        await run_for(105, Schedule(every=10.0), host, fire=background)
    assert host.scheduled() == [START + dt.timedelta(seconds=10 * k) for k in range(1, 11)]


async def test_jitter_delays_the_call_not_the_scheduled_time(autojump_clock):
    host = Host(START)
    await run_for(5 * 3600, Schedule(every=3600.0, jitter_secs=120.0), host, rng=random.Random(3))
    assert host.scheduled() == [START + HOUR * k for k in range(1, 5)]
    delays = [(wall - scheduled).total_seconds() for scheduled, wall in host.fired]
    assert all(0 <= delay <= 120 for delay in delays) and len(set(delays)) == 4
