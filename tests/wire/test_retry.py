"""One backoff and one ``Retry-After`` reading for every loop that retries a peer."""

from __future__ import annotations

import time
from email.utils import formatdate

import pytest

from runtime.wire.retry import Backoff, retry_after


def test_a_backoff_doubles_to_its_bound_and_starts_again_after_a_success():
    backoff = Backoff(0.5, 4.0)
    assert [backoff.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.next() == 0.5 and backoff.failures == 1


def test_a_ladder_repeats_its_last_step():
    backoff = Backoff(ladder=(0.1, 0.25, 1.0))
    assert [backoff.next() for _ in range(5)] == [0.1, 0.25, 1.0, 1.0, 1.0]


def test_a_long_outage_does_not_overflow():
    backoff = Backoff(1.0, 30.0)
    for _ in range(5000):
        pause = backoff.next()
    assert pause == 30.0


@pytest.mark.parametrize("header, expected", [
    (None, 7.0), ("", 7.0), ("  3 ", 3.0), ("1.5", 1.5), ("-4", 0.0), ("100000", 60.0),
    ("nan", 7.0), ("inf", 7.0), ("soon", 7.0), ("Wed, 99 Foo 2015 07:28:00 GMT", 7.0),
])
def test_retry_after_reads_seconds_within_bounds(header, expected):
    assert retry_after(header, default=7.0, most=60.0) == expected


def test_retry_after_reads_an_http_date():
    assert 8.0 <= retry_after(formatdate(time.time() + 10, usegmt=True), default=0.0, most=60.0) <= 10.0
    assert retry_after(formatdate(time.time() - 100, usegmt=True), default=5.0, most=60.0) == 0.0  # past: at once
