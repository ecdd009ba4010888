"""Budgets of agents and of keys: messages a minute, model tokens an hour, tool calls a run.

Why in the kernel: every way to an agent (the HTTP API, A2A, the MCP server's
``tern_agent_*`` tools, another agent's ``agent_send``) goes through ``Agents.send``,
so one count there holds whichever door a caller uses. A budget bounds one tern
process; it is not shared with other terns, nor kept across a restart.

- ``requests_per_minute``: messages ``Agents.send`` took in the last 60 s. A message
  over it is refused before any work starts and is not counted (so a caller that keeps
  knocking is not kept out for longer). ``admit`` is the same check without counting,
  for servers that must refuse before they create work (an A2A task).
- ``tokens_per_hour``: model tokens in the last hour, as the endpoint reports them
  (``usage``) or, when it reports none, as ``kernel.llm`` estimates them. A model turn
  *reserves* its estimate before it runs (``reserve``: the prompt's size plus the
  model's ``max_tokens``) while anything is left, and settles to what it used after
  (``settle``), so turns running at once cannot overshoot: the hour's use stays within
  the limit plus one turn's reserve, however many messages arrive together.
- A key (``[[server.keys]]`` ``requests_per_minute`` and ``tokens_per_hour``) has the same
  budgets across every agent it reaches: its messages and its runs' tokens count there
  too (``Caller`` carries them), so no key spends more than its own share.
- ``max_tool_calls_per_run``: the run's ``LoopGuard`` cap (the pipeline sets it);
  here only the sentence the model reads and the count of refusals.

Windows slide, held in slots: a window of W seconds is at most ``SLOTS`` + 1
``[slot, amount]`` pairs, each slot W / ``SLOTS`` long, so memory stays the same
whatever the traffic. An amount counts until the end of its slot plus W: never less
than W (the limit holds over any W seconds), at most one slot more (0.5 s for the
minute, 30 s for the hour). The clock is injectable (trio's by default, so tests on
trio's virtual clock get virtual windows).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any
from collections.abc import Callable, Iterable, Iterator

import trio

from runtime.config import AgentConfig
from runtime.errors import BudgetExceeded

__all__ = ["Budgets", "Reservation", "Window", "REQUESTS", "TOKENS", "TOOL_CALLS", "SLOTS"]

REQUESTS, TOKENS, TOOL_CALLS = "requests_per_minute", "tokens_per_hour", "max_tool_calls_per_run"
SLOTS = 120


class Window:
    """A sliding sum over the last ``width`` seconds, in at most ``slots`` + 1 slots."""

    __slots__ = ("limit", "width", "slot", "used", "reserved", "_slots")

    def __init__(self, limit: int, width: float, slots: int = SLOTS) -> None:
        self.limit = limit
        self.width = width
        self.slot = width / slots
        self.used = 0
        self.reserved = 0  # held by turns running now (``Budgets.reserve``), counted as used until they settle
        self._slots: deque[list[Any]] = deque()  # [slot index, amount], oldest first

    def _ends(self, index: int) -> float:
        return (index + 1) * self.slot + self.width

    def _expire(self, now: float) -> None:
        slots = self._slots
        while slots and self._ends(slots[0][0]) <= now:
            self.used -= slots.popleft()[1]

    def current(self, now: float) -> int:
        self._expire(now)
        return self.used

    def add(self, now: float, amount: int) -> None:
        self._expire(now)
        index = math.floor(now / self.slot)
        slots = self._slots
        if slots and slots[-1][0] >= index:  # the same slot (or a clock that stepped back)
            slots[-1][1] += amount
        else:
            slots.append([index, amount])
        self.used += amount

    def wait(self, now: float, need: int = 1) -> float:
        """Seconds until ``need`` more fits under the limit: 0 when it fits now."""
        self._expire(now)
        excess = self.used + self.reserved + need - self.limit
        if excess <= 0:
            return 0.0
        for index, amount in self._slots:
            excess -= amount
            if excess <= 0:
                return max(self._ends(index) - now, 0.0)
        return self.width  # need alone is over the limit: a full window is the honest answer


def _seconds(wait: float) -> int:
    """Whole seconds, rounded up, at least 1 (as Retry-After says it)."""
    return max(1, math.ceil(wait))


class _Budget:
    """One agent's or one key's windows."""

    __slots__ = ("requests", "tokens", "tool_calls", "exceeded")

    def __init__(self, requests_per_minute: int, tokens_per_hour: int, max_tool_calls_per_run: int = 0) -> None:
        self.requests = Window(requests_per_minute, 60.0) if requests_per_minute > 0 else None
        self.tokens = Window(tokens_per_hour, 3600.0) if tokens_per_hour > 0 else None
        self.tool_calls = max(max_tool_calls_per_run, 0)
        self.exceeded = {name: 0 for name, on in ((REQUESTS, self.requests), (TOKENS, self.tokens),
                                                  (TOOL_CALLS, self.tool_calls)) if on}


class Reservation:
    """A model turn's hold on token windows (its agent's, its key's), until it settles."""

    __slots__ = ("windows", "amount")

    def __init__(self, windows: list[Window], amount: int) -> None:
        self.windows, self.amount = windows, amount


class Budgets:
    """The budgets of the configured agents that have any (the others cost nothing), and
    of the keys whose callers carry any (made at their first message)."""

    def __init__(self, agents: Iterable[AgentConfig], *, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or trio.current_time
        self._agents = {a.name: _Budget(a.requests_per_minute, a.tokens_per_hour, a.max_tool_calls_per_run)
                        for a in agents
                        if a.requests_per_minute > 0 or a.tokens_per_hour > 0 or a.max_tool_calls_per_run > 0}
        self._keys: dict[str, _Budget] = {}  # bounded by the configured keys that have budgets

    def _of(self, name: str, who: Any) -> list[tuple[str, _Budget]]:
        """The budgets a message to ``name`` from ``who`` counts against: the agent's, the key's."""
        found = []
        budget = self._agents.get(name)
        if budget is not None:
            found.append((f"agent {name!r}", budget))
        if who is not None and (who.requests_per_minute > 0 or who.tokens_per_hour > 0):
            key = self._keys.get(who.name)
            if key is None or (key.requests and key.requests.limit) != (who.requests_per_minute or None) \
                    or (key.tokens and key.tokens.limit) != (who.tokens_per_hour or None):
                key = self._keys[who.name] = _Budget(who.requests_per_minute, who.tokens_per_hour)
            found.append((f"key {who.name!r}", key))
        return found

    def admit(self, name: str, who: Any = None) -> None:
        """Raise ``BudgetExceeded`` if ``who`` may not send ``name`` a message now (the
        agent's or the key's messages this minute, or tokens this hour, are spent);
        counts nothing."""
        budgets = self._of(name, who)
        if not budgets:
            return
        now = self._clock()
        for label, budget in budgets:
            if budget.requests is not None:
                wait = budget.requests.wait(now)
                if wait:
                    budget.exceeded[REQUESTS] += 1
                    limit = budget.requests.limit
                    raise BudgetExceeded(f"{label} has had its {limit} message{'s' if limit != 1 else ''} in the "
                                         f"last minute (requests_per_minute); try again in {_seconds(wait)} s", wait)
        self._check_tokens(budgets, now)

    def take(self, name: str, who: Any = None) -> None:
        """``admit``, then count the message."""
        self.admit(name, who)
        now = self._clock()
        for _, budget in self._of(name, who):
            if budget.requests is not None:
                budget.requests.add(now, 1)

    def _check_tokens(self, budgets: list[tuple[str, _Budget]], now: float) -> None:
        for label, budget in budgets:
            window = budget.tokens
            if window is None:
                continue
            wait = window.wait(now)
            if wait:
                budget.exceeded[TOKENS] += 1
                held = f" (and {window.reserved} held by turns running now)" if window.reserved else ""
                raise BudgetExceeded(f"{label} has used {window.current(now)} model tokens in the last hour{held}, "
                                     f"its budget being {window.limit} (tokens_per_hour); try again in "
                                     f"{_seconds(wait)} s", wait)

    def reserve(self, name: str, who: Any, estimate: Callable[[], int]) -> Reservation:
        """Before a model turn: ``BudgetExceeded`` when the hour's tokens are spent (or
        held by turns running now); else hold ``estimate()`` tokens (asked only when a
        token budget applies) until ``settle``."""
        budgets = self._of(name, who)
        windows = [budget.tokens for _, budget in budgets if budget.tokens is not None]
        if not windows:
            return Reservation([], 0)
        now = self._clock()
        self._check_tokens(budgets, now)
        amount = max(estimate(), 1)
        for window in windows:
            window.reserved += amount
        return Reservation(windows, amount)

    def settle(self, reservation: Reservation, tokens: int) -> None:
        """After a model turn (or its failure): release the hold and count what it used."""
        now = self._clock()
        for window in reservation.windows:
            window.reserved -= reservation.amount
            if tokens > 0:
                window.add(now, tokens)
        reservation.windows = []  # settled once

    def watch_run(self, name: str, guard: Any) -> None:
        """Give a run's loop guard (``kernel.guards.LoopGuard``, capped by the pipeline at
        the agent's ``max_tool_calls_per_run``) the sentence that names the budget, and
        count each call it refuses for it."""
        budget = self._agents.get(name)
        if budget is None or not budget.tool_calls:
            return

        def refused() -> None:
            budget.exceeded[TOOL_CALLS] += 1

        guard.cap_reason = (f"agent {name!r} has made the {budget.tool_calls} tool calls its budget allows in one run "
                            "(max_tool_calls_per_run); stop calling tools and answer with what you have")
        guard.on_cap = refused

    # --- What shows: /api/status and /metrics --------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Per agent with a budget: each budget's limit, use in its window now (a run's
        tool calls have no window) and how often it was exceeded."""
        now = self._clock()
        report: dict[str, Any] = {}
        for name, budget in self._agents.items():
            entry: dict[str, Any] = {}
            for key, window in ((REQUESTS, budget.requests), (TOKENS, budget.tokens)):
                if window is not None:
                    entry[key] = {"limit": window.limit, "used": window.current(now),
                                  "window_secs": int(window.width), "exceeded": budget.exceeded[key]}
            if budget.tool_calls:
                entry[TOOL_CALLS] = {"limit": budget.tool_calls, "exceeded": budget.exceeded[TOOL_CALLS]}
            report[name] = entry
        return report

    def exceeded_samples(self) -> Iterator[tuple[tuple[str, str], float]]:
        """``((agent, budget), times exceeded)``: configured names only, so the labels are bounded."""
        for name, budget in self._agents.items():
            for key, count in budget.exceeded.items():
                yield (name, key), float(count)

    def used_samples(self) -> Iterator[tuple[tuple[str, str], float]]:
        """``((agent, budget), use in the window now)`` for the windowed budgets."""
        now = self._clock()
        for name, budget in self._agents.items():
            for key, window in ((REQUESTS, budget.requests), (TOKENS, budget.tokens)):
                if window is not None:
                    yield (name, key), float(window.current(now))

    def limit_samples(self) -> Iterator[tuple[tuple[str, str], float]]:
        for name, budget in self._agents.items():
            for key, limit in ((REQUESTS, budget.requests and budget.requests.limit),
                               (TOKENS, budget.tokens and budget.tokens.limit), (TOOL_CALLS, budget.tool_calls)):
                if limit:
                    yield (name, key), float(limit)
