"""Cron expressions, sans-IO: parse five fields once, then find the next firing instant by
field arithmetic (whole days skipped by month and day, then hours and minutes from
sorted sets), never by scanning minute after minute.

Syntax is Vixie cron's: minute hour day-of-month month day-of-week; ``*``, lists,
ranges, steps (``*/15``, ``1-10/2``, ``5/15`` = ``5-59/15``), month and weekday names
(any case), 7 = Sunday, and the ``@hourly``-style names. When both day fields are
restricted (neither starts with ``*``), a day matches if either does.

Times are wall-clock times in the schedule's zone; across daylight-saving changes
(docs/triggers-schedules.md): a time the clock skips fires once at the first instant
after the gap; a time the clock shows twice fires once, at its first occurrence, unless
the hour field is ``*``: such a schedule is per real hour and fires in both.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as dt
from dataclasses import dataclass

from runtime.errors import ConfigError

__all__ = ["Cron", "parse_cron", "MAX_EXPR_CHARS"]

MAX_EXPR_CHARS = 200
_SEARCH_YEARS = 9  # Feb 29 can be 8 years away (2096 -> 2104); parse_cron refuses what never fires
_FOLD_REACH = dt.timedelta(hours=3)  # the longest daylight-saving shift looked back over
_UTC = dt.timezone.utc

_NICKNAMES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
_MONTHS = {name: i for i, name in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1)}
_DAYS = {name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
# name, low, high, names
_FIELDS = (("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day-of-month", 1, 31, {}),
           ("month", 1, 12, _MONTHS), ("day-of-week", 0, 7, _DAYS))


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the allowed values of each field, sorted."""

    expr: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    either_day: bool  # both day fields restricted: a day matches if either does
    any_hour: bool  # hour field is "*": per real hour, so a repeated hour fires twice

    def next_after(self, after: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
        """The first firing instant strictly after ``after`` (aware), as an aware UTC datetime."""
        if after.tzinfo is None:
            raise ValueError("next_after needs an aware datetime")
        after = after.astimezone(_UTC)
        start = after.astimezone(tz).replace(tzinfo=None, second=0, microsecond=0)
        if self.any_hour and _near_fall_back(after, tz):
            start -= _FOLD_REACH  # a repeated hour's second occurrences lie behind the wall clock
        best: dt.datetime | None = None
        for wall in self._walls(start):
            instants = _instants(wall, tz, self.any_hour)
            for instant in instants:
                if instant > after and (best is None or instant < best):
                    best = instant
            if instants[0] > after:  # first occurrences only grow from here on
                return best
        raise ConfigError(f"cron {self.expr!r} does not fire within {_SEARCH_YEARS} years")

    def _walls(self, start: dt.datetime):
        """Matching wall-clock times from ``start`` on, in order, for a bounded number of years."""
        day = start.date()
        end = day.replace(year=day.year + _SEARCH_YEARS, day=1)
        first = True
        while day < end:
            if day.month not in self.months:
                day = (day.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
                first = False
                continue
            if self._day_matches(day):
                hours = self.hours[bisect.bisect_left(self.hours, start.hour):] if first else self.hours
                for hour in hours:
                    minutes = self.minutes
                    if first and hour == start.hour:
                        minutes = minutes[bisect.bisect_left(minutes, start.minute):]
                    for minute in minutes:
                        yield dt.datetime(day.year, day.month, day.day, hour, minute)
            day += dt.timedelta(days=1)
            first = False

    def _day_matches(self, day: dt.date) -> bool:
        in_month = day.day in self.days
        in_week = (day.weekday() + 1) % 7 in self.weekdays
        return (in_month or in_week) if self.either_day else (in_month and in_week)


def parse_cron(expr: str) -> Cron:
    """Parse ``expr``; a ``ConfigError`` with one line naming the problem if it is not valid."""
    if len(expr) > MAX_EXPR_CHARS:
        raise ConfigError(f"cron expression is longer than {MAX_EXPR_CHARS} characters")
    text = expr.strip()
    if text.startswith("@"):
        if text.lower() not in _NICKNAMES:
            raise ConfigError(f"cron {expr!r}: unknown name {text!r} (known: {', '.join(_NICKNAMES)})")
        text = _NICKNAMES[text.lower()]
    fields = text.split()
    if len(fields) != 5:
        raise ConfigError(f"cron {expr!r} has {len(fields)} fields, expected 5: "
                          "minute hour day-of-month month day-of-week")
    values = [_parse_field(expr, field, *spec) for field, spec in zip(fields, _FIELDS)]
    weekdays = frozenset(day % 7 for day in values[4])
    cron = Cron(expr=expr, minutes=tuple(sorted(values[0])), hours=tuple(sorted(values[1])),
                days=frozenset(values[2]), months=frozenset(values[3]), weekdays=weekdays,
                either_day=not fields[2].startswith("*") and not fields[4].startswith("*"),
                any_hour=fields[1] == "*")
    if not cron.either_day and not any(day <= _longest(month) for day in cron.days for month in cron.months):
        raise ConfigError(f"cron {expr!r} never fires: no month in it has those days")
    return cron


def _longest(month: int) -> int:
    return calendar.monthrange(2000, month)[1]  # 2000 is a leap year: February has 29 days


def _parse_field(expr: str, field: str, name: str, low: int, high: int, names: dict[str, int]) -> set[int]:
    def fail(problem: str) -> ConfigError:
        return ConfigError(f"cron {expr!r}: {name} field {field!r}: {problem}")

    def number(text: str) -> int:
        value = names.get(text.upper()) if names else None
        if value is None:
            if not text.isdigit() or not text.isascii():
                raise fail(f"{text!r} is not a number" + (" or a name" if names else ""))
            value = int(text)
        if not low <= value <= high:
            raise fail(f"{value} is out of range {low}-{high}")
        return value

    found: set[int] = set()
    for item in field.split(","):
        span, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or not step_text.isascii() or not 1 <= int(step_text) <= high:
                raise fail(f"step {step_text!r} must be a number from 1 to {high}")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            a, _, b = span.partition("-")
            first, last = number(a), number(b)
            if first > last:
                raise fail(f"range {span!r} runs backwards")
        elif span:
            first = number(span)
            last = high if slash else first
        else:
            raise fail("empty value")
        found.update(range(first, last + 1, step))
    return found


def _near_fall_back(after: dt.datetime, tz: dt.tzinfo) -> bool:
    """Is a repeated hour within reach of ``after`` (the clock was or will be set back)?"""
    offsets = [(after + shift).astimezone(tz).utcoffset() for shift in (-_FOLD_REACH, dt.timedelta(0), _FOLD_REACH)]
    return offsets[0] > offsets[1] or offsets[1] > offsets[2]


def _instants(wall: dt.datetime, tz: dt.tzinfo, both: bool) -> tuple[dt.datetime, ...]:
    """The UTC instants a wall-clock time fires at: its one instant; the end of the gap it
    falls in; or the first occurrence of a repeated time (both when ``both``)."""
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    early = first.astimezone(_UTC)
    if first.utcoffset() == second.utcoffset():
        return (early,)
    late = second.astimezone(_UTC)
    if early.astimezone(tz).replace(tzinfo=None) != wall:  # skipped: fold=0 reads it with the old offset
        return (_transition(late, early, tz),)
    return (early, late) if both else (early,)


def _transition(before: dt.datetime, after: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """The first whole second from which ``tz`` uses the offset it has at ``after``."""
    lo, hi = int(before.timestamp()), int(after.timestamp())
    offset = after.astimezone(tz).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if dt.datetime.fromtimestamp(mid, _UTC).astimezone(tz).utcoffset() == offset:
            hi = mid
        else:
            lo = mid
    return dt.datetime.fromtimestamp(hi, _UTC)
