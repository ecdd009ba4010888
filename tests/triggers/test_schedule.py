"""Schedules: intervals, jitter, and the runs missed while tern was down under each
catch-up policy, with bounded work after a year of downtime."""

from __future__ import annotations

import datetime as dt
import random
import time
from zoneinfo import ZoneInfo

import pytest

from runtime.errors import ConfigError
from runtime.kernel.triggers.cron import parse_cron
from runtime.kernel.triggers.schedule import Schedule, parse_every

UTC = dt.timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("5m", 300), ("1h30m", 5400), ("2h", 7200), ("1d", 86400), ("1s", 1), ("366d", 366 * 86400),
    ("1d2h3m4s", 93784), (" 10M ", 600), ("3600s", 3600),
])
def test_parse_every(text, seconds):
    assert parse_every(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "367d", "90", "5 m", "1.5h", "-5m", "5m1h", "1w", "s", "h",
                                  "9" * 50 + "s", "1h\n2h", "1h;rm"])
def test_parse_every_refuses(text):
    with pytest.raises(ConfigError) as caught:
        parse_every(text)
    assert "\n" not in str(caught.value)


def test_a_schedule_has_exactly_one_of_cron_and_every():
    with pytest.raises(ConfigError):
        Schedule()
    with pytest.raises(ConfigError):
        Schedule(cron=parse_cron("@daily"), every=60.0)


def test_every_is_elapsed_time_across_daylight_saving():
    schedule = Schedule(every=3600.0, tz=BERLIN)
    before = at(2026, 10, 24, 23, 30)  # 01:30 CEST; the clock falls back at 01:00 UTC
    assert schedule.next_fire(before) == before + dt.timedelta(hours=1)
    assert schedule.next_fire(schedule.next_fire(before)) == before + dt.timedelta(hours=2)


def test_cron_next_fire_reads_the_zone():
    schedule = Schedule(cron=parse_cron("0 7 * * *"), tz=BERLIN)
    assert schedule.next_fire(at(2026, 1, 5, 0, 0)) == at(2026, 1, 5, 6, 0)  # 07:00 CET
    assert schedule.next_fire(at(2026, 7, 5, 0, 0)) == at(2026, 7, 5, 5, 0)  # 07:00 CEST


def test_jitter_is_uniform_within_its_bound_from_the_given_random():
    schedule = Schedule(every=60.0, jitter_secs=30.0)
    values = [schedule.jitter(random.Random(seed)) for seed in range(200)]
    assert all(0.0 <= value <= 30.0 for value in values)
    assert min(values) < 3.0 and max(values) > 27.0
    assert schedule.jitter(random.Random(7)) == schedule.jitter(random.Random(7))
    assert Schedule(every=60.0).jitter(random.Random(1)) == 0.0


LAST = at(2026, 1, 1, 0, 0)


@pytest.mark.parametrize(("catch_up", "limit", "expected"), [
    ("none", 10, []),
    ("one", 10, [at(2026, 1, 1, 3, 0)]),
    ("all", 10, [at(2026, 1, 1, 1, 0), at(2026, 1, 1, 2, 0), at(2026, 1, 1, 3, 0)]),
    ("all", 2, [at(2026, 1, 1, 2, 0), at(2026, 1, 1, 3, 0)]),  # the latest ones kept
    ("all", 0, []),
])
@pytest.mark.parametrize("kind", ["every", "cron"])
def test_missed_runs_under_each_policy(kind, catch_up, limit, expected):
    schedule = Schedule(every=3600.0) if kind == "every" else Schedule(cron=parse_cron("@hourly"))
    assert schedule.missed(LAST, at(2026, 1, 1, 3, 30), catch_up, limit) == expected


def test_nothing_missed_when_the_next_run_is_still_ahead_or_the_clock_went_back():
    schedule = Schedule(cron=parse_cron("@daily"))
    assert schedule.missed(LAST, at(2026, 1, 1, 23, 0), "all", 10) == []
    assert schedule.missed(LAST, LAST - dt.timedelta(days=3), "all", 10) == []


def test_an_unknown_catch_up_policy_is_refused():
    with pytest.raises(ConfigError, match="catch_up"):
        Schedule(every=60.0).missed(LAST, at(2026, 1, 2), "everything", 10)


@pytest.mark.parametrize("schedule", [Schedule(every=1.0), Schedule(cron=parse_cron("* * * * *"), tz=BERLIN),
                                      Schedule(cron=parse_cron("* 7 * * *"), tz=BERLIN)],
                         ids=["every-1s", "cron-every-minute", "cron-clustered"])
def test_a_year_of_downtime_is_bounded_work(schedule):
    now = LAST + dt.timedelta(days=365, hours=5, seconds=30)
    started = time.perf_counter()
    latest = schedule.missed(LAST, now, "all", 50)
    one = schedule.missed(LAST, now, "one", 50)
    assert time.perf_counter() - started < 1.0
    assert len(latest) == 50 and latest == sorted(latest) and latest[-1] <= now
    assert one == latest[-1:]
    assert schedule.next_fire(latest[-1]) > now  # nothing later was left out
    for earlier, later in zip(latest, latest[1:]):
        assert schedule.next_fire(earlier) == later  # and nothing in between


def test_a_yearly_cron_after_years_down_finds_each_missed_year():
    schedule = Schedule(cron=parse_cron("@yearly"), tz=BERLIN)
    missed = schedule.missed(at(2020, 6, 1), at(2026, 6, 1), "all", 3)
    assert [moment.astimezone(BERLIN).year for moment in missed] == [2024, 2025, 2026]
