"""The trigger runner: one task per schedule or watch, and every run of every trigger.

``fire`` is the one way a run starts (a schedule's tick, a watch's files, a webhook, ``tern
triggers fire``): it applies the trigger's overlap policy at once (``skip``: one run at a
time; ``queue``: one at a time and at most ``max_queued`` waiting; ``parallel``: at most
``max_parallel`` at once), records the run and returns its id; the run goes on in the
runner's nursery. A run renders the message, sends it to the agent through the normal
path (``Agents.send``: budgets, the pipeline's approvals and audit) with nobody to ask,
as a caller (``Caller``) acting for someone, never above them: a schedule's, a watch's
and a signed webhook's run acts for the identity the trigger names (``run_as``: the owner
by default, or a key's name), an unsigned webhook's for the key that posted it, and a run
fired from the API for its caller; each is audited as ``trigger:NAME`` with that key. The
kernel's door (``kernel.door``) decides at ``fire`` whether that caller may reach the
agent. An approval a run needs waits in the queue and is denied at the governance
timeout; a run is bounded by ``timeout_secs``, recorded (``runs.RunStore``) and its
reply delivered to the trigger's sink. ``max_failures`` failed runs in a row pause the
trigger (an event, a log line, the listings) until ``resume``; a paused trigger starts no run.
"""

from __future__ import annotations

import math
import os
import secrets
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

import trio

from runtime.config import Config, TriggerConfig
from runtime.errors import ConfigError, Forbidden, TernError, TriggerBusy, TriggerPaused, UnknownTrigger
from runtime.kernel.door import OWNER, enter_agent
from runtime.kernel.triggers.runs import STOPPED, RunStore
from runtime.log import get_logger
from runtime.ports import Caller

if TYPE_CHECKING:
    from runtime.kernel.kernel import Kernel

__all__ = ["TriggerRunner", "MAX_PATHS_PER_RUN", "RESTART_SECS"]

log = get_logger("triggers")

MAX_PATHS_PER_RUN = 100  # a watch's run names at most this many files; the rest are counted in a last entry
RESTART_SECS = 60.0  # a schedule or watch task that failed unexpectedly is started again after this


def new_run_id() -> str:
    return "run_" + secrets.token_hex(8)


def capacity(trigger: TriggerConfig) -> int:
    """How many runs of ``trigger`` may be admitted at once (running or waiting)."""
    if trigger.overlap == "queue":
        return 1 + trigger.max_queued
    return trigger.max_parallel if trigger.overlap == "parallel" else 1


class _State:
    """A trigger's runs in this process: those running, those waiting (first in, first
    run: trio does not start tasks in order), failures in a row."""

    def __init__(self, trigger: TriggerConfig, saved: dict[str, Any]) -> None:
        self.running = 0
        self.slots = trigger.max_parallel if trigger.overlap == "parallel" else 1
        self.waiting: deque[tuple[str, str, str, Any]] = deque()  # (run id, rendered message, source, caller)
        self.failures = int(saved["failures"])
        self.paused = bool(saved["paused"])
        self.paused_reason = str(saved["paused_reason"])

    @property
    def active(self) -> int:
        return self.running + len(self.waiting)


class TriggerRunner:
    """The daemon's triggers (``runtime.ports.TriggerPort``)."""

    def __init__(self, kernel: Kernel, store: RunStore | None = None, *, wall_clock: Any = None,
                 rng: Any = None) -> None:
        """``wall_clock``: what the schedules read (``clock.WallClock``; tests drive one from
        trio's clock); ``rng``: their jitter's random source."""
        self.kernel: Kernel = kernel
        config: Config = kernel.config
        state_dir = config.state.dir
        self.store = store or RunStore(Path(state_dir) / "triggers.sqlite3" if state_dir else None)
        self.triggers = {t.name: t for t in config.triggers}
        self.schedules = {t.name: _schedule_of(t, i) for i, t in enumerate(config.triggers) if t.kind == "schedule"}
        self.wall_clock = wall_clock
        self.rng = rng
        self.observers: list[Callable[[str, str], None]] = []  # (trigger, outcome) per ended run: metrics
        self._states = {name: _State(t, self.store.state(name)) for name, t in self.triggers.items()}
        self._nursery: trio.Nursery | None = None

    # --- the port ---------------------------------------------------------------------

    def webhook(self, name: str) -> TriggerConfig | None:
        trigger = self.triggers.get(name)
        return trigger if trigger is not None and trigger.kind == "webhook" else None

    def identity(self, trigger: TriggerConfig) -> Caller:
        """Who an unattended run acts for: ``run_as`` (a key's name: its scopes and agents),
        else the owner; ``ConfigError`` for a key that no longer exists."""
        if not trigger.run_as:
            return OWNER
        found = self.kernel.callers(trigger.run_as) if self.kernel.callers is not None else None
        if found is None:
            raise ConfigError(f"trigger {trigger.name!r}: run_as names the key {trigger.run_as!r}, which this tern "
                              "does not have (tern keys list)")
        return found

    def fire(self, name: str, context: dict[str, Any], *, source: str, who: Caller | None = None) -> str:
        """Admit a run under the overlap policy and start it; its id (see the module).
        ``who``: the caller it acts for (None: the trigger's ``identity``); ``Forbidden``
        when that caller may not reach the trigger's agent."""
        trigger = self.get(name)
        who = (who if who is not None else self.identity(trigger)).acting(f"trigger:{name}")
        enter_agent(who, trigger.agent)
        state = self._states[name]
        if state.paused:
            raise TriggerPaused(f"trigger {name!r} is paused ({state.paused_reason}); "
                                f"resume it with `tern triggers resume {name}`")
        if state.active >= capacity(trigger):
            raise TriggerBusy(_busy(trigger))
        if self._nursery is None:
            raise TriggerBusy(f"trigger {name!r} cannot run yet: the triggers are not started")
        from runtime.kernel.triggers.template import render

        run_id = new_run_id()
        self.store.start(run_id, name, source)
        try:  # now, so a queued run holds its bounded message, not a webhook's whole body
            message = render(trigger.message, {"time": self._now().isoformat(), **context, "trigger": name,
                                               "run_id": run_id})
        except TernError as exc:
            self.store.end(run_id, "failed", error=str(exc))
            self._ended(trigger, run_id, source, "failed", str(exc))
            return run_id
        state.waiting.append((run_id, message, source, who))
        self._start_waiting(trigger)
        return run_id

    def _start_waiting(self, trigger: TriggerConfig) -> None:
        """Start the waiting runs there are slots for, oldest first."""
        state = self._states[trigger.name]
        while state.waiting and state.running < state.slots and self._nursery is not None:
            run_id, message, source, who = state.waiting.popleft()
            state.running += 1
            self._nursery.start_soon(self._run, trigger, run_id, message, source, who)

    # --- what the API and the CLI read --------------------------------------------------

    def get(self, name: str) -> TriggerConfig:
        trigger = self.triggers.get(name)
        if trigger is None:
            raise UnknownTrigger(f"no trigger named {name!r} (triggers: {', '.join(self.triggers) or 'none'})")
        return trigger

    def listing(self) -> list[dict[str, Any]]:
        """Each trigger with its state, next scheduled fire and last run."""
        return [self.describe(name) for name in self.triggers]

    def describe(self, name: str) -> dict[str, Any]:
        """The trigger's state; every time is a number (Unix seconds) and, beside it, the
        same instant as ISO 8601 with its offset in ``timezone`` (``*_iso``)."""
        trigger = self.get(name)
        state = self._states[name]
        runs = self.runs(name, 1)
        item: dict[str, Any] = {
            "name": name, "kind": trigger.kind, "agent": trigger.agent, "overlap": trigger.overlap,
            "paused": state.paused, "paused_reason": state.paused_reason, "failures": state.failures,
            "max_failures": trigger.max_failures, "active": state.active, "last_run": runs[0] if runs else None,
            "timezone": zone_name(trigger), "next_fire": None, "next_fire_iso": None}
        if trigger.kind == "schedule":
            item["schedule"] = trigger.cron or f"every {trigger.every}"
            if not state.paused:
                item["next_fire"] = self._next_fire(name).timestamp()
                item["next_fire_iso"] = iso_time(item["next_fire"], trigger)
        elif trigger.kind == "webhook":
            item["path"] = f"/hooks/{name}"
        else:
            item["path"] = trigger.path
        return item

    def runs(self, name: str, limit: int = 50) -> list[dict[str, Any]]:
        """A trigger's runs, newest first, with their times as ISO 8601 in its zone too."""
        trigger = self.get(name)
        return [with_iso(run, trigger) for run in self.store.runs(name, limit)]

    def run_record(self, run_id: str) -> dict[str, Any] | None:
        """One run (any trigger's), with its times as ISO 8601 in its trigger's zone too."""
        run = self.store.run(run_id)
        if run is None:
            return None
        trigger = self.triggers.get(run["trigger"])
        return with_iso(run, trigger) if trigger is not None else run

    def _next_fire(self, name: str) -> datetime:
        """The next scheduled fire (before jitter): after the last one while that is recent, else after now."""
        schedule, now = self.schedules[name], self._now()
        last = self.store.state(name)["last_fire"]
        due = schedule.next_fire(datetime.fromtimestamp(last, timezone.utc)) if last is not None else None
        return due if due is not None and due > now else schedule.next_fire(now)

    def resume(self, name: str) -> dict[str, Any]:
        """Unpause a trigger and forget its failures; its description."""
        self.get(name)
        state = self._states[name]
        was = state.paused
        state.paused, state.paused_reason, state.failures = False, "", 0
        self.store.resume(name)
        if was:
            log.warning("trigger %s resumed", name)
            self._publish("trigger.resumed", {"trigger": name})
        return self.describe(name)

    # --- running ----------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run every schedule and watch until cancelled; runs started by ``fire`` live here too."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(trio.sleep_forever)  # webhooks and manual runs need it with no task of its own
            for trigger in self.triggers.values():
                if trigger.kind != "webhook":
                    nursery.start_soon(self._supervise, trigger)
            task_status.started()
        self._nursery = None

    async def _supervise(self, trigger: TriggerConfig) -> None:
        """A schedule's or watch's task; one that fails unexpectedly is logged and started again."""
        while True:
            try:
                if trigger.kind == "schedule":
                    await self._schedule(trigger)
                else:
                    await self._watch(trigger)
                return
            except Exception as exc:  # a bug or an unusable directory must not stop the other triggers
                log.error("trigger %s stopped: %s: %s; starting it again in %.0f s", trigger.name,
                          type(exc).__name__, exc, RESTART_SECS, exc_info=not isinstance(exc, TernError))
                self._publish("trigger.error", {"trigger": trigger.name, "error": str(exc)[:200]})
                await trio.sleep(RESTART_SECS)

    async def _schedule(self, trigger: TriggerConfig) -> None:
        from runtime.kernel.triggers.scheduler import run_schedule

        name = trigger.name
        last = self.store.state(name)["last_fire"]

        async def tick(when: datetime) -> None:
            self.store.set_last_fire(name, when.timestamp())  # a paused trigger's ticks are not caught up later
            self._fire_unattended(trigger, {"time": when.isoformat()}, "schedule")

        await run_schedule(self.schedules[name], clock=self._wall_clock(),
                           last_fire=datetime.fromtimestamp(last, timezone.utc) if last is not None else None,
                           catch_up=trigger.catch_up, catch_up_limit=trigger.catch_up_limit, fire=tick, rng=self.rng)

    async def _watch(self, trigger: TriggerConfig) -> None:
        from runtime.kernel.triggers.watch import watch_dir

        root = self.watch_root(trigger)

        async def changed(paths: list[str]) -> None:
            self._fire_unattended(trigger, {"paths": paths}, "watch")

        await watch_dir(root, interval=trigger.interval_secs, debounce=trigger.debounce_secs,
                        max_files=trigger.max_files, max_paths_per_run=MAX_PATHS_PER_RUN, fire=changed)

    def watch_root(self, trigger: TriggerConfig) -> Path:
        """The watched directory, made if missing; ConfigError when it (or a link on its
        way) leads out of the agent's workspace."""
        agent = self.kernel.agents.get(trigger.agent)
        where = self.kernel.pipeline.run(agent).context.workspace
        if not where:
            raise ConfigError(f"trigger {trigger.name!r}: agent {agent.name!r} has no workspace to watch in "
                              "(set [state] dir or the agent's workspace)")
        workspace = Path(where)
        root = workspace / trigger.path
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        real, inside = os.path.realpath(root), os.path.realpath(workspace)
        if os.path.commonpath([real, inside]) != inside:
            raise ConfigError(f"trigger {trigger.name!r}: path {trigger.path!r} leads out of the workspace of agent "
                              f"{agent.name!r} (through a link): not watched")
        return Path(real)

    def _fire_unattended(self, trigger: TriggerConfig, context: dict[str, Any], source: str) -> None:
        """A schedule's or watch's firing: a paused trigger does nothing; one the overlap
        policy refuses is recorded as a skipped run."""
        try:
            self.fire(trigger.name, context, source=source)
        except (ConfigError, Forbidden) as exc:  # its run_as key is gone, or may not reach the agent
            run_id = new_run_id()
            self.store.start(run_id, trigger.name, source, outcome="failed")
            self.store.end(run_id, "failed", error=str(exc))
            self._ended(trigger, run_id, source, "failed", str(exc))
        except TriggerPaused:
            log.debug("trigger %s is paused: not run", trigger.name)
        except TriggerBusy as exc:
            run_id = new_run_id()
            self.store.start(run_id, trigger.name, source, outcome="skipped")
            self.store.end(run_id, "skipped", error=str(exc))
            self._ended(trigger, run_id, source, "skipped", str(exc))

    async def _run(self, trigger: TriggerConfig, run_id: str, message: str, source: str, who: Caller) -> None:
        state = self._states[trigger.name]
        try:
            if state.paused:  # paused while this run waited in the queue
                why = f"trigger {trigger.name!r} was paused while this run waited"
                self.store.end(run_id, "skipped", error=why)
                self._ended(trigger, run_id, source, "skipped", why)
                return
            await self._execute(trigger, run_id, message, source, who)
        except BaseException:
            if trio.current_effective_deadline() == -math.inf:  # tern is stopping: say so now, not at the next boot
                self.store.end(run_id, "failed", error=STOPPED)
            raise
        finally:
            state.running -= 1
            self._start_waiting(trigger)

    async def _execute(self, trigger: TriggerConfig, run_id: str, message: str, source: str, who: Caller) -> None:
        name = trigger.name
        self.store.running(run_id)
        self._publish("trigger.run", {"trigger": name, "run_id": run_id, "source": source, "state": "started"})
        outcome, reply, error, sink_error = "failed", "", "", ""
        with trio.move_on_after(trigger.timeout_secs) as scope:
            try:
                answer = await self.kernel.agents.send(trigger.agent, message, context_id=run_id,
                                                       caller=f"trigger:{name}", owner=who)
                outcome, reply = "ok", answer.text
            except TernError as exc:
                error = str(exc)
            except Exception as exc:  # a bug: this run fails, the trigger keeps running
                log.error("trigger %s run %s: internal error", name, run_id, exc_info=True)
                error = f"internal error: {type(exc).__name__}"
        if scope.cancelled_caught:
            outcome, error = "timeout", f"the run passed its timeout_secs ({trigger.timeout_secs:g} s)"
        if outcome == "ok" and trigger.sink is not None:
            sink_error = await self._deliver(trigger, run_id, source, reply)
        self.store.end(run_id, outcome, reply=reply, error=error, sink_error=sink_error)
        self._ended(trigger, run_id, source, outcome, error or sink_error)

    async def _deliver(self, trigger: TriggerConfig, run_id: str, source: str, reply: str) -> str:
        """Hand the reply to the trigger's sink; the sentence of what went wrong, or ""."""
        from runtime.kernel.triggers.sinks import deliver

        run = {"id": run_id, "trigger": trigger.name, "source": source, "outcome": "ok"}
        try:
            await deliver(trigger.sink, reply=reply, run=run, trigger=trigger, kernel=self.kernel)
        except TernError as exc:  # SinkError: one line, for the run's sink_error
            return str(exc)
        return ""

    def _ended(self, trigger: TriggerConfig, run_id: str, source: str, outcome: str, error: str) -> None:
        """Count the run (metrics, failures in a row, the pause) and announce its end."""
        name = trigger.name
        state = self._states[name]
        for observe in self.observers:
            observe(name, outcome)
        self._publish("trigger.run", {"trigger": name, "run_id": run_id, "source": source, "state": "ended",
                                      "outcome": outcome, "error": error[:200]})
        if outcome == "skipped":
            return
        if outcome == "ok" and not error:
            if state.failures:
                state.failures = 0
                self.store.set_failures(name, 0)
            return
        state.failures += 1
        self.store.set_failures(name, state.failures)
        if state.failures >= trigger.max_failures and not state.paused:
            state.paused = True
            state.paused_reason = f"{state.failures} failed runs in a row, the last: {error[:300]}"
            self.store.pause(name, state.paused_reason)
            log.warning("trigger %s paused after %d failed runs in a row (the last: %s); "
                        "`tern triggers resume %s` starts it again", name, state.failures, error[:300], name)
            self._publish("trigger.paused", {"trigger": name, "failures": state.failures, "error": error[:200]})

    # --- helpers ----------------------------------------------------------------------

    def _publish(self, kind: str, data: dict[str, Any]) -> None:
        self.kernel.events.publish(kind, data)

    def _wall_clock(self) -> Any:
        if self.wall_clock is None:
            from runtime.kernel.triggers.clock import WallClock

            self.wall_clock = WallClock()
        return self.wall_clock

    def _now(self) -> datetime:
        return self._wall_clock().now()


def zone_name(trigger: TriggerConfig) -> str:
    """The zone a trigger's times are shown in: a schedule's own ``timezone``; UTC for the
    others, which have none (a webhook or a watch fires whenever it is told)."""
    return trigger.timezone if trigger.kind == "schedule" else "UTC"


def iso_time(stamp: float | None, trigger: TriggerConfig) -> str | None:
    """``stamp`` (Unix seconds) as ISO 8601 with the offset of the trigger's zone
    (``2026-03-29T09:00:00+02:00``): a time a person reads never leaves its zone unsaid."""
    if stamp is None:
        return None
    from zoneinfo import ZoneInfo

    return datetime.fromtimestamp(stamp, ZoneInfo(zone_name(trigger))).isoformat(timespec="seconds")


def with_iso(run: dict[str, Any], trigger: TriggerConfig) -> dict[str, Any]:
    """A run record with ``started_iso`` and ``ended_iso`` beside its numbers."""
    return {**run, "started_iso": iso_time(run["started_at"], trigger),
            "ended_iso": iso_time(run["ended_at"], trigger)}


def _busy(trigger: TriggerConfig) -> str:
    if trigger.overlap == "queue":
        return (f"trigger {trigger.name!r} has a run going and {trigger.max_queued} waiting (max_queued): "
                "this one is refused")
    if trigger.overlap == "parallel":
        return f"trigger {trigger.name!r} has {trigger.max_parallel} runs going (max_parallel): this one is refused"
    return f"trigger {trigger.name!r} has a run going (overlap = \"skip\"): this one is skipped"


def _schedule_of(trigger: TriggerConfig, index: int) -> Any:
    """The trigger's ``schedule.Schedule``; a cron expression the load-time check let
    through but the parser refuses is a ConfigError naming the entry."""
    from zoneinfo import ZoneInfo

    from runtime.kernel.triggers.cron import parse_cron
    from runtime.kernel.triggers.schedule import Schedule, parse_every

    try:
        if trigger.cron:
            return Schedule(cron=parse_cron(trigger.cron), tz=ZoneInfo(trigger.timezone),
                            jitter_secs=trigger.jitter_secs)
        return Schedule(every=parse_every(trigger.every), tz=ZoneInfo(trigger.timezone),
                        jitter_secs=trigger.jitter_secs)
    except (ValueError, TernError) as exc:
        raise ConfigError(f"triggers[{index}].{'cron' if trigger.cron else 'every'}: {exc}") from None

