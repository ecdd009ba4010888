"""How tern waits before trying a peer again: one backoff, one reading of ``Retry-After``
(sans-IO: the loops that sleep are trio's, above; this only says how long).

Every loop that talks to something that can be away (a model endpoint, an MCP server's
streams, a webhook, a collector, PostgreSQL) pauses the same way: a pause that grows
after each failure up to a bound, and starts small again once a try succeeds, so a peer
that is down costs a request now and then, not a busy loop, and one that is back is used
at once. The pauses are not randomised: callers are few per peer, and tests on trio's
virtual clock can count them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

__all__ = ["Backoff", "retry_after"]


class Backoff:
    """Pauses between tries: ``first`` doubling up to ``most``, or the steps of a
    ``ladder`` (its last one repeated). ``next()`` is the pause after one more failure;
    ``reset()`` after a success starts from the first again."""

    def __init__(self, first: float = 1.0, most: float = 30.0, *, ladder: Sequence[float] = ()) -> None:
        if ladder and any(step < 0 for step in ladder) or first < 0 or most < first:
            raise ValueError("a backoff's pauses are not negative and grow")
        self.first, self.most, self.ladder = first, most, tuple(ladder)
        self.failures = 0

    def next(self) -> float:
        self.failures += 1
        if self.ladder:
            return self.ladder[min(self.failures, len(self.ladder)) - 1]
        return min(self.first * 2.0 ** min(self.failures - 1, 64), self.most)

    def reset(self) -> None:
        self.failures = 0


def retry_after(value: str | None, *, default: float, most: float) -> float:
    """The seconds a ``Retry-After`` header asks for (RFC 9110: delay-seconds or an
    HTTP-date), within ``[0, most]``; ``default`` when there is none or it cannot be read."""
    if value is None or not (value := value.strip()):
        return default
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime  # only for the rare date form

        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return default
    if not math.isfinite(seconds):
        return default
    return min(max(seconds, 0.0), most)
