import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.wire.ratelimit import RateLimiter


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def limiter(rate, burst, **kwargs):
    clock = FakeClock()
    return RateLimiter(rate, burst, clock=clock, **kwargs), clock


# --- the limit -------------------------------------------------------------------------


def test_burst_passes_then_the_next_is_refused_with_the_right_retry():
    rl, _ = limiter(10, 5)
    assert [rl.check("a") for _ in range(5)] == [0.0] * 5
    assert rl.check("a") == pytest.approx(0.1)


def test_waiting_the_retry_lets_the_request_through():
    rl, clock = limiter(4, 2)
    rl.check("a")
    rl.check("a")
    wait = rl.check("a")
    assert wait == pytest.approx(0.25)
    clock.advance(wait / 2)
    assert rl.check("a") == pytest.approx(wait / 2)
    clock.advance(wait / 2)
    assert rl.check("a") == 0.0
    assert rl.check("a") > 0


def test_a_refused_request_is_not_recorded():
    rl, clock = limiter(1, 1)
    assert rl.check("a") == 0.0
    for _ in range(100):
        assert rl.check("a") == pytest.approx(1.0)
    clock.advance(1.0)
    assert rl.check("a") == 0.0


def test_the_bucket_refills_at_the_rate():
    rl, clock = limiter(10, 5)
    for _ in range(5):
        rl.check("a")
    clock.advance(0.3)  # three cells back
    assert [rl.check("a") for _ in range(3)] == [0.0] * 3
    assert rl.check("a") > 0
    clock.advance(100)  # never more than the burst
    assert [rl.check("a") for _ in range(5)] == [0.0] * 5
    assert rl.check("a") > 0


@pytest.mark.parametrize("rate, burst", [(10, 5), (3, 1), (100, 20), (0.5, 2), (1000, 1000)])
def test_sustained_rate_matches_within_one_request(rate, burst):
    rl, clock = limiter(rate, burst)
    seconds, step = 60, 0.001
    allowed = 0
    for _ in range(round(seconds / step)):
        while rl.check("a") == 0.0:
            allowed += 1
        clock.advance(step)
    assert abs(allowed - (burst + rate * seconds)) <= 1


def test_burst_passes_at_a_large_monotonic_time():
    # Float rounding in the running TAT must not refuse the last cell of a burst.
    clock = FakeClock(now=3.0e7)  # about a year of uptime
    rl = RateLimiter(1000, 1000, clock=clock)
    assert all(rl.check("a") == 0.0 for _ in range(1000))
    assert rl.check("a") > 0


def test_cost_scales_the_cells_used():
    rl, clock = limiter(10, 10)
    assert rl.check("a", 5) == 0.0
    assert rl.check("a", 5) == 0.0
    assert rl.check("a", 5) == pytest.approx(0.5)
    assert rl.check("a", 1) == pytest.approx(0.1)
    clock.advance(0.2)
    assert rl.check("a", 2) == 0.0
    assert rl.check("a", 0.5) == pytest.approx(0.05)


def test_a_cost_above_the_burst_never_passes_and_gets_a_finite_retry():
    rl, clock = limiter(10, 5)
    for _ in range(3):
        wait = rl.check("a", 6)
        assert wait == pytest.approx(0.5)  # burst / rate: an empty bucket's time to fill
        assert math.isfinite(wait)
        clock.advance(wait)
    assert len(rl) == 0  # nothing recorded
    assert rl.check("a", 5) == 0.0  # a cost of exactly the burst fits a full bucket


def test_keys_are_isolated():
    rl, _ = limiter(1, 2)
    assert rl.check("a") == rl.check("a") == 0.0
    assert rl.check("a") > 0
    assert rl.check("b") == rl.check("b") == 0.0
    assert rl.check("b") > 0
    assert rl.check("c") == 0.0


@pytest.mark.parametrize("rate", [0, -1, 0.0, float("nan")])
def test_a_non_positive_rate_is_unlimited(rate):
    rl, _ = limiter(rate, 0)
    assert all(rl.check("a", 1000) == 0.0 for _ in range(10_000))
    assert len(rl) == 0


@pytest.mark.parametrize("burst", [0, 0.5, -1])
def test_a_limit_needs_a_burst_of_one(burst):
    with pytest.raises(ValueError, match="burst"):
        RateLimiter(10, burst)


def test_max_keys_must_be_positive():
    with pytest.raises(ValueError, match="max_keys"):
        RateLimiter(10, 1, max_keys=0)


# --- memory ----------------------------------------------------------------------------


def test_memory_stays_bounded_under_many_busy_keys():
    rl, clock = limiter(1, 5, max_keys=100)
    for i in range(10_000):
        rl.check(f"10.0.{i // 256}.{i % 256}")
        assert len(rl) <= 100
        if i % 7 == 0:
            clock.advance(0.001)  # every key stays busy for far longer than this
    assert len(rl) >= 90  # the sweep leaves 90%, never empties a busy table


def test_memory_stays_bounded_under_many_keys_at_once():
    rl, _ = limiter(1, 5, max_keys=100)
    for i in range(10_000):
        rl.check(str(i))
    assert 90 <= len(rl) <= 100
    # What stays is the most recent keys: the oldest-inserted were dropped.
    assert rl.check("9999", 5) > 0
    assert rl.check("0", 5) == 0.0


def test_idle_keys_are_evicted_and_busy_ones_kept():
    rl, clock = limiter(10, 5, max_keys=100)
    for i in range(60):
        rl.check(f"idle{i}")
    clock.advance(1.0)  # 0.1 s of TAT each: long idle
    for _ in range(5):
        rl.check("busy")
    for i in range(45):
        rl.check(f"new{i}")  # crosses max_keys: one sweep
    assert len(rl) == 1 + 45
    assert rl.check("busy") > 0  # state survived the sweep


def test_idle_eviction_does_not_change_any_answer():
    # Evicting idle keys is lossless: compare against a limiter that never evicts.
    # A cell keeps a key busy for 0.2 s, four steps, so fewer than 9 keys (90% of
    # max_keys) are ever busy and every sweep drops idle keys only.
    small, clock_a = limiter(5, 3, max_keys=10)
    big, clock_b = limiter(5, 3, max_keys=10**9)
    for i in range(5_000):
        key = str(i % 23) if i % 3 else str(i)
        assert small.check(key) == big.check(key)
        clock_a.advance(0.05)
        clock_b.advance(0.05)
        assert len(small) <= 10


# --- properties ------------------------------------------------------------------------

steps = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=2.0),  # dt
        st.sampled_from(["a", "b", "c"]),  # key
        st.sampled_from([0.25, 1, 1, 1, 2, 3, 7]),  # cost
    ),
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(
    rate=st.sampled_from([0.5, 1.0, 3.0, 10.0, 1000.0]),
    burst=st.integers(1, 6),
    start=st.sampled_from([0.0, 1000.0, 3.0e7]),
    steps=steps,
)
def test_no_window_holds_more_than_burst_plus_rate_times_length(rate, burst, start, steps):
    clock = FakeClock(start)
    rl = RateLimiter(rate, burst, clock=clock)
    allowed: list[tuple[float, float]] = []  # (time, cost) for key "a"
    for dt, key, cost in steps:
        clock.advance(dt)
        wait = rl.check(key, cost)
        assert wait >= 0.0 and math.isfinite(wait)
        if wait == 0.0 and key == "a":
            allowed.append((clock.now, cost))
    # The fullest window starts and ends at allowed requests.
    for i, (t0, _) in enumerate(allowed):
        cells = 0.0
        for t1, cost in allowed[i:]:
            cells += cost
            assert cells <= burst + rate * (t1 - t0) + 0.01


@settings(max_examples=300, deadline=None)
@given(
    rate=st.sampled_from([0.5, 1.0, 3.0, 10.0, 1000.0]),
    burst=st.integers(1, 6),
    steps=steps,
)
def test_waiting_the_retry_always_suffices(rate, burst, steps):
    clock = FakeClock()
    rl = RateLimiter(rate, burst, clock=clock)
    for dt, key, cost in steps:
        clock.advance(dt)
        wait = rl.check(key, cost)
        if wait > 0.0 and cost <= burst:
            clock.advance(wait)
            assert rl.check(key, cost) == 0.0
