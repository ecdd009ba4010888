"""Cron expressions: the fields, names and Vixie's day rule, refused expressions, and
daylight-saving changes in two zones across both 2026 transitions."""

from __future__ import annotations

import datetime as dt
import time
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.errors import ConfigError
from runtime.kernel.triggers.cron import MAX_EXPR_CHARS, parse_cron

UTC = dt.timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def runs(expr: str, start: dt.datetime, count: int, tz: dt.tzinfo = UTC) -> list[dt.datetime]:
    cron, moment, found = parse_cron(expr), start.astimezone(UTC), []
    for _ in range(count):
        moment = cron.next_after(moment, tz)
        found.append(moment)
    return found


def local(moments: list[dt.datetime], tz: dt.tzinfo) -> list[str]:
    return [moment.astimezone(tz).strftime("%Y-%m-%d %H:%M %Z") for moment in moments]


def at(*args: int, tz: dt.tzinfo = UTC) -> dt.datetime:
    return dt.datetime(*args, tzinfo=tz)


@pytest.mark.parametrize(("expr", "start", "expected"), [
    ("*/15 * * * *", at(2026, 1, 1, 10, 7), ["10:15", "10:30", "10:45", "11:00"]),
    ("1-10/4 * * * *", at(2026, 1, 1, 10, 0), ["10:01", "10:05", "10:09", "11:01"]),
    ("5/20 * * * *", at(2026, 1, 1, 10, 0), ["10:05", "10:25", "10:45", "11:05"]),
    ("0,30 9-10 * * *", at(2026, 1, 1, 0, 0), ["09:00", "09:30", "10:00", "10:30"]),
    ("0 0 * * *", at(2026, 1, 1, 0, 0), ["00:00", "00:00", "00:00", "00:00"]),  # strictly after
])
def test_minutes_and_hours(expr, start, expected):
    assert [moment.strftime("%H:%M") for moment in runs(expr, start, 4)] == expected


def test_seconds_in_the_start_still_give_the_next_whole_minute():
    assert runs("* * * * *", at(2026, 1, 1, 10, 0, 30), 1) == [at(2026, 1, 1, 10, 1)]


@pytest.mark.parametrize(("expr", "expected"), [
    ("0 12 * jan,Mar *", ["2026-01-01", "2026-01-02"]),
    ("0 12 1 FEB-apr *", ["2026-02-01", "2026-03-01"]),
    ("0 12 * * mon-WED", ["2026-01-05", "2026-01-06"]),  # 2026-01-01 is a Thursday
    ("0 12 * * 7", ["2026-01-04", "2026-01-11"]),  # 7 is Sunday
    ("0 12 * * 0", ["2026-01-04", "2026-01-11"]),
    ("0 12 * * 5-7", ["2026-01-02", "2026-01-03"]),
    ("0 12 13 * FRI", ["2026-01-02", "2026-01-09"]),  # both restricted: the 13th or any Friday
    ("0 12 */10 * FRI", ["2026-05-01", "2026-07-31"]),  # "*/10" is not restricted: days 1, 11, 21, 31 AND Friday
    ("@monthly", ["2026-02-01", "2026-03-01"]),
    ("@weekly", ["2026-01-04", "2026-01-11"]),
    ("@yearly", ["2027-01-01", "2028-01-01"]),
    ("@ANNUALLY", ["2027-01-01", "2028-01-01"]),
    ("@daily", ["2026-01-02", "2026-01-03"]),
    ("@midnight", ["2026-01-02", "2026-01-03"]),
])
def test_days_months_and_names(expr, expected):
    found = runs(expr, at(2026, 1, 1, 0, 0), 2)
    assert [moment.strftime("%Y-%m-%d") for moment in found] == expected


def test_hourly():
    assert [moment.strftime("%H:%M") for moment in runs("@hourly", at(2026, 1, 1, 10, 0), 3)] == \
        ["11:00", "12:00", "13:00"]


def test_february_29th_is_found_eight_years_away_quickly():
    started = time.perf_counter()
    assert runs("0 0 29 2 *", at(2097, 1, 1), 1) == [at(2104, 2, 29)]
    assert time.perf_counter() - started < 0.5


def test_every_minute_for_a_day_is_cheap():
    started = time.perf_counter()
    found = runs("* * * * *", at(2026, 10, 24, 12, 0), 1440, BERLIN)
    assert time.perf_counter() - started < 2.0
    assert len(set(found)) == 1440 and found == sorted(found)


@pytest.mark.parametrize(("expr", "problem"), [
    ("0 0 30 2 *", "never fires"),
    ("0 0 31 4,6,9,11 *", "never fires"),
    ("61 * * * *", "61 is out of range 0-59"),
    ("* 24 * * *", "24 is out of range 0-23"),
    ("* * 0 * *", "0 is out of range 1-31"),
    ("* * * 13 *", "13 is out of range 1-12"),
    ("* * * * 8", "8 is out of range 0-7"),
    ("* * * *", "has 4 fields, expected 5"),
    ("* * * * * *", "has 6 fields, expected 5"),
    ("", "has 0 fields"),
    ("1,,2 * * * *", "empty value"),
    ("*/0 * * * *", "step '0'"),
    ("*/x * * * *", "step 'x'"),
    ("5-1 * * * *", "runs backwards"),
    ("1-2-3 * * * *", "not a number"),
    ("MON * * * *", "'MON' is not a number"),
    ("* * * MON *", "'MON' is not a number or a name"),
    ("* * * * JAN", "'JAN' is not a number or a name"),
    ("-1 * * * *", "is not a number"),
    ("\u0661 * * * *", "is not a number"),  # an Arabic-Indic digit: isdigit() but not cron
    ("@every", "unknown name"),
    ("rm -rf / ; echo", "'rm' is not a number"),
    ("0 0 * * *\n\x1b[2J0 0 * * *", "has 10 fields"),  # hostile text stays escaped in the message
])
def test_bad_expressions_are_refused_in_one_line(expr, problem):
    with pytest.raises(ConfigError) as caught:
        parse_cron(expr)
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_long_input_is_refused_before_parsing():
    with pytest.raises(ConfigError, match="longer than"):
        parse_cron("1," * MAX_EXPR_CHARS + "1 * * * *")


def test_next_after_needs_an_aware_time():
    with pytest.raises(ValueError):
        parse_cron("* * * * *").next_after(dt.datetime(2026, 1, 1), UTC)


# Daylight saving in 2026: Berlin springs forward 29 March 02:00 -> 03:00 and falls back
# 25 October 03:00 -> 02:00; New York springs forward 8 March 02:00 -> 03:00 and falls
# back 1 November 02:00 -> 01:00.

def test_berlin_spring_forward_a_skipped_time_fires_once_after_the_gap():
    found = runs("30 2 * * *", at(2026, 3, 28, 0, 0, tz=BERLIN), 3, BERLIN)
    assert local(found, BERLIN) == ["2026-03-28 02:30 CET", "2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST"]


def test_berlin_spring_forward_every_quarter_hour_fires_once_at_the_gap_end():
    found = runs("*/15 * * * *", at(2026, 3, 29, 1, 30, tz=BERLIN), 4, BERLIN)
    assert local(found, BERLIN) == ["2026-03-29 01:45 CET", "2026-03-29 03:00 CEST",
                                    "2026-03-29 03:15 CEST", "2026-03-29 03:30 CEST"]
    assert found[1] - found[0] == dt.timedelta(minutes=15)


def test_berlin_fall_back_a_repeated_time_fires_once_at_its_first_occurrence():
    found = runs("30 2 * * *", at(2026, 10, 24, 0, 0, tz=BERLIN), 3, BERLIN)
    assert local(found, BERLIN) == ["2026-10-24 02:30 CEST", "2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"]


@pytest.mark.parametrize(("tz", "start"), [(BERLIN, at(2026, 10, 24, 22, 0)), (NEW_YORK, at(2026, 11, 1, 2, 0))])
def test_hourly_across_fall_back_runs_once_per_real_hour(tz, start):
    found = runs("@hourly", start, 6, tz)
    assert [later - earlier for earlier, later in zip(found, found[1:])] == [dt.timedelta(hours=1)] * 5
    assert found[0] == start + dt.timedelta(hours=1)
    walls = local(found, tz)
    assert len(set(walls)) == 6 and len({wall[:16] for wall in walls}) == 5  # one wall hour shown twice


@pytest.mark.parametrize(("tz", "start"), [(BERLIN, at(2026, 3, 28, 22, 0)), (NEW_YORK, at(2026, 3, 8, 4, 0))])
def test_hourly_across_spring_forward_runs_once_per_real_hour(tz, start):
    found = runs("@hourly", start, 6, tz)
    assert [later - earlier for earlier, later in zip(found, found[1:])] == [dt.timedelta(hours=1)] * 5


def test_new_york_spring_forward_and_fall_back_for_a_fixed_time():
    found = runs("30 2 * * *", at(2026, 3, 7, 12, 0, tz=NEW_YORK), 3, NEW_YORK)
    assert local(found, NEW_YORK) == ["2026-03-08 03:00 EDT", "2026-03-09 02:30 EDT", "2026-03-10 02:30 EDT"]
    found = runs("30 1 * * *", at(2026, 10, 31, 12, 0, tz=NEW_YORK), 3, NEW_YORK)
    assert local(found, NEW_YORK) == ["2026-11-01 01:30 EDT", "2026-11-02 01:30 EST", "2026-11-03 01:30 EST"]


def test_fixed_time_started_inside_the_repeated_hour_does_not_fire_again():
    """Started during the second 01:xx (EST), a 01:45 job already fired at the first one."""
    second_occurrence = at(2026, 11, 1, 6, 10)  # 01:10 EST
    found = runs("45 1 * * *", second_occurrence, 1, NEW_YORK)
    assert local(found, NEW_YORK) == ["2026-11-02 01:45 EST"]


def test_any_hour_started_inside_the_first_occurrence_reaches_the_second():
    first_occurrence = at(2026, 11, 1, 5, 50)  # 01:50 EDT
    found = runs("*/20 * * * *", first_occurrence, 4, NEW_YORK)
    assert local(found, NEW_YORK) == ["2026-11-01 01:00 EST", "2026-11-01 01:20 EST",
                                      "2026-11-01 01:40 EST", "2026-11-01 02:00 EST"]
    assert found[0] - first_occurrence == dt.timedelta(minutes=10)


# -- against a minute-by-minute oracle of the documented rule ----------------------------

def oracle(cron, tz: dt.tzinfo, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """Every firing instant in (start, end] found the slow way: each real minute whose wall
    time matches (a repeated wall time only at its first occurrence, unless the hour is
    "*"), plus the first instant after a gap that skipped a matching wall time."""
    def matches(wall: dt.datetime) -> bool:
        return (wall.minute in cron.minutes and wall.hour in cron.hours and wall.month in cron.months
                and cron._day_matches(wall.date()))

    found = []
    moment = start + dt.timedelta(minutes=1)
    previous = start.astimezone(tz)
    while moment <= end:
        wall = moment.astimezone(tz)
        naive, before = wall.replace(tzinfo=None), previous.replace(tzinfo=None)
        skipped = naive - before > dt.timedelta(minutes=1)
        gap = [before + dt.timedelta(minutes=k) for k in range(1, int((naive - before) / dt.timedelta(minutes=1)))]
        if (matches(naive) and (wall.fold == 0 or cron.any_hour)) or (skipped and any(map(matches, gap))):
            found.append(moment)
        previous = wall
        moment += dt.timedelta(minutes=1)
    return found


# values chosen to land on the transition days (Sundays: 29 March, 25 October, 8 March,
# 1 November, 5 April, 4 October) and hours
FIELD = st.sampled_from(["*", "*/7", "0", "30", "0,15,45", "10-40/10", "59"])
HOUR = st.sampled_from(["*", "*", "*", "*/5", "1", "2", "3", "1-3", "2,14"])
DAY = st.sampled_from(["*", "*", "*/4", "1", "5", "25-31", "4,8"])
WEEKDAY = st.sampled_from(["*", "*", "SUN", "0", "1-5", "6,7"])
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")  # moves its clock by 30 minutes
AROUND_TRANSITIONS = [(BERLIN, at(2026, 3, 28, 12)), (BERLIN, at(2026, 10, 24, 12)),
                      (NEW_YORK, at(2026, 3, 7, 12)), (NEW_YORK, at(2026, 10, 31, 12)),
                      (LORD_HOWE, at(2026, 4, 4, 0)), (LORD_HOWE, at(2026, 10, 3, 0)), (UTC, at(2026, 2, 27, 0))]


@settings(max_examples=100, deadline=None)
@given(minute=FIELD, hour=HOUR, day=DAY, weekday=WEEKDAY, around=st.sampled_from(AROUND_TRANSITIONS))
def test_next_after_agrees_with_the_oracle_around_transitions(minute, hour, day, weekday, around):
    zone, start = around
    cron = parse_cron(f"{minute} {hour} {day} * {weekday}")
    end = start + dt.timedelta(days=2)
    expected = oracle(cron, zone, start, end)
    found, moment = [], start
    while (moment := cron.next_after(moment, zone)) <= end:
        found.append(moment)
    assert found == expected
