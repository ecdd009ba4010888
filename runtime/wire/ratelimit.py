"""Per-key rate limiting with GCRA (the generic cell rate algorithm), sans-IO.

Why GCRA and not a token bucket with a refill timer: it is the same limit (sustained
``rate_per_sec``, bursts of up to ``burst`` cells at once) but the whole state of a key
is one float, its theoretical arrival time (TAT), and a check is one dict lookup and
some arithmetic. A key whose TAT is in the past has a full bucket, exactly like a key
never seen, so it carries no state and can be forgotten at no cost to correctness:
that is what keeps memory bounded when clients come from many addresses.

With emission interval ``T = 1 / rate_per_sec``, a request of cost ``c`` moves the TAT
to ``max(TAT, now) + c*T`` and is allowed when that is at most ``burst*T`` ahead of now.

Time comes from an injectable clock, so tests drive it and the server pays nothing
for it beyond calling ``time.monotonic``.
"""

from __future__ import annotations

import time
from itertools import islice
from collections.abc import Callable

__all__ = ["RateLimiter"]

# A thousandth of a cell of slack, so float rounding in the running TAT (large
# monotonic times, many small additions) never refuses the last cell of a burst.
# It does not accumulate: it loosens the limit by at most 0.001 cell in any window.
_SLACK_CELLS = 1e-3


class RateLimiter:
    """GCRA per key: ``check(key, cost)`` is 0.0 when allowed, else seconds to wait.

    ``rate_per_sec <= 0`` means unlimited. At most ``max_keys`` keys hold state; see
    ``_sweep`` for what happens beyond that.
    """

    __slots__ = (
        "_unlimited",
        "_interval",
        "_max_cost",
        "_tolerance",
        "_slack",
        "_max_keys",
        "_target",
        "_clock",
        "_tats",
    )

    def __init__(
        self,
        rate_per_sec: float,
        burst: int,
        *,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._unlimited = not rate_per_sec > 0  # also catches NaN
        if not self._unlimited and not burst >= 1:
            raise ValueError(f"a rate limit needs a burst of at least 1, not {burst!r}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, not {max_keys!r}")
        interval = 0.0 if self._unlimited else 1.0 / rate_per_sec
        self._interval = interval
        self._max_cost = burst + _SLACK_CELLS  # any more can never pass
        # How far ahead of now a TAT may run; also an empty bucket's time to fill.
        self._tolerance = burst * interval
        self._slack = _SLACK_CELLS * interval
        self._max_keys = max_keys
        self._target = max_keys * 9 // 10  # a sweep leaves this many keys at most
        self._clock = clock
        self._tats: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._tats)

    def check(self, key: str, cost: float = 1.0) -> float:
        """0.0 if ``key`` may spend ``cost`` cells now (and it is recorded), else the
        seconds until it may (nothing recorded; round up for ``Retry-After``).

        A cost above ``burst`` can never pass. Rather than infinity (which no header
        can carry) it gets ``burst / rate_per_sec``, the time an empty bucket takes to
        fill: the longest wait any request that can pass is ever told, so a client
        that retries is paced like any other and not invited to spin.
        """
        if self._unlimited:
            return 0.0
        now = self._clock()
        tats = self._tats
        tat = tats.get(key)
        new = (now if tat is None or tat < now else tat) + cost * self._interval
        wait = new - now - self._tolerance
        if wait > self._slack:
            return wait if cost <= self._max_cost else self._tolerance
        tats[key] = new
        if tat is None and len(tats) > self._max_keys:
            self._sweep(now)
        return 0.0

    def peek(self, key: str, cost: float = 1.0) -> float:
        """What ``check`` would answer, recording nothing (a look before work whose
        outcome decides whether it is spent: a webhook's failures)."""
        if self._unlimited:
            return 0.0
        now = self._clock()
        tat = self._tats.get(key)
        wait = (now if tat is None or tat < now else tat) + cost * self._interval - now - self._tolerance
        return wait if wait > self._slack else 0.0

    def _sweep(self, now: float) -> None:
        """Drop idle keys; if more than 90% of ``max_keys`` remain, drop the
        oldest-inserted down to 90%.

        Idle keys (TAT in the past) lose nothing by going. Dropping a busy key resets
        it to a full bucket, so a flood of addresses can at worst hand some early
        keys a fresh burst, never grow memory. Always ending at or below 90% puts the
        next sweep at least ``max_keys / 10`` new keys away: amortised O(1) a check.
        """
        tats = {k: t for k, t in self._tats.items() if t > now}
        excess = len(tats) - self._target
        if excess > 0:
            tats = dict(islice(tats.items(), excess, None))
        self._tats = tats
