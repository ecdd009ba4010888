"""The trigger runner on trio's autojump clock: overlap policies and their bounds, the run
timeout, pausing after failures in a row and resuming, schedules that fire and skip, an
approval a triggered run waits for (nobody answers: denied at the governance timeout),
and the runs store's bounds, crash recovery, corrupt file and full disk.

The agent is a real ``tool`` agent through the real pipeline; its tool (``work``) sleeps
``secs`` of trio time and fails when asked to, so every duration below is exact."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import trio

from runtime.config import AgentConfig, Config, StateConfig, TriggerConfig
from runtime.config.checks import find_problems
from runtime.config.schema import ApprovalRule, GovernanceConfig
from runtime.errors import ConfigError, TriggerBusy, TriggerPaused, UnknownTrigger
from runtime.kernel.kernel import Kernel
from runtime.kernel.triggers.clock import WallClock
from runtime.kernel.triggers.runner import TriggerRunner
from runtime.kernel.triggers.runs import KEEP_RUNS, MAX_REPLY_BYTES, STOPPED, RunStore
from runtime.ports import Tool, ToolResult

WORK = Tool("work", "sleeps secs, then fails if asked", {"type": "object", "properties": {
    "secs": {"type": "number"}, "fail": {"type": "boolean"}}})
MESSAGE = '{"secs": {{ body.secs }}, "fail": {{ body.fail }}}'
EPOCH = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


async def work(arguments: dict, context) -> ToolResult:
    await trio.sleep(arguments.get("secs", 0))
    if arguments.get("fail"):
        return ToolResult("it broke", is_error=True)
    return ToolResult(f"worked {arguments.get('secs', 0)} s")


def hook(name: str = "hook", **fields) -> TriggerConfig:
    return TriggerConfig(name=name, agent="worker", kind="webhook", message=MESSAGE, **fields)


def make(tmp_path, *triggers: TriggerConfig, governance: GovernanceConfig | None = None) -> TriggerRunner:
    config = Config(agents=[AgentConfig(name="worker", kind="tool", tool="work"),
                            AgentConfig(name="echo", kind="echo")],
                    state=StateConfig(dir=str(tmp_path)), triggers=list(triggers),
                    governance=governance or GovernanceConfig())
    assert find_problems(config) == []
    kernel = Kernel(config)
    kernel.registry.register(WORK, work)
    store = RunStore(tmp_path / "triggers.sqlite3", clock=lambda: EPOCH.timestamp() + trio.current_time())
    return TriggerRunner(kernel, store, wall_clock=WallClock(lambda: EPOCH + dt.timedelta(seconds=trio.current_time())))


def body(secs: float = 5, fail: bool = False) -> dict:
    return {"body": {"secs": secs, "fail": fail}}


async def ended(runner: TriggerRunner, run_id: str) -> dict:
    while (run := runner.store.run(run_id))["outcome"] in ("queued", "running"):
        await trio.sleep(0.01)
    return run


async def test_skip_refuses_a_second_run_while_one_goes(tmp_path, autojump_clock):
    runner = make(tmp_path, hook())
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        first = runner.fire("hook", body(), source="webhook")
        assert first.startswith("run_") and len(first) == 20
        with pytest.raises(TriggerBusy, match="has a run going"):
            runner.fire("hook", body(), source="webhook")
        run = await ended(runner, first)
        assert (run["outcome"], run["reply"], run["source"]) == ("ok", "worked 5 s", "webhook")
        assert run["ended_at"] - run["started_at"] == pytest.approx(5, abs=0.1)
        second = runner.fire("hook", body(1), source="manual")  # free again
        assert (await ended(runner, second))["outcome"] == "ok"
        nursery.cancel_scope.cancel()
    assert [r["id"] for r in runner.store.runs("hook")] == [second, first]  # newest first, nothing refused recorded


async def test_queue_runs_one_at_a_time_and_holds_at_most_max_queued(tmp_path, autojump_clock):
    runner = make(tmp_path, hook(overlap="queue", max_queued=2))
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        start = trio.current_time()
        ids = [runner.fire("hook", body(), source="webhook") for _ in range(3)]
        with pytest.raises(TriggerBusy, match="2 waiting"):
            runner.fire("hook", body(), source="webhook")
        assert [runner.store.run(i)["outcome"] for i in ids] == ["queued"] * 3  # none has started yet
        waiting = runner._states["hook"].waiting  # what a queued run holds: its rendered, bounded message
        assert [len(message) for _, message, _, _ in waiting] == [len('{"secs": 5, "fail": false}')] * 2  # 1 started
        ends = []
        for run_id in ids:
            await ended(runner, run_id)
            ends.append(round(trio.current_time() - start))
        assert ends == [5, 10, 15]  # in order, one at a time
        nursery.cancel_scope.cancel()


async def test_parallel_runs_at_most_max_parallel_at_once(tmp_path, autojump_clock):
    runner = make(tmp_path, hook(overlap="parallel", max_parallel=3))
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        start = trio.current_time()
        ids = [runner.fire("hook", body(), source="webhook") for _ in range(3)]
        with pytest.raises(TriggerBusy, match="3 runs going"):
            runner.fire("hook", body(), source="webhook")
        assert runner.describe("hook")["active"] == 3
        for run_id in ids:
            assert (await ended(runner, run_id))["outcome"] == "ok"
        assert trio.current_time() - start == pytest.approx(5, abs=0.1)  # together, not one after another
        nursery.cancel_scope.cancel()


async def test_a_run_is_bounded_by_timeout_secs(tmp_path, autojump_clock):
    runner = make(tmp_path, hook(timeout_secs=10))
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        run = await ended(runner, runner.fire("hook", body(10_000), source="webhook"))
        nursery.cancel_scope.cancel()
    assert run["outcome"] == "timeout" and "timeout_secs (10 s)" in run["error"]
    assert run["ended_at"] - run["started_at"] == pytest.approx(10, abs=0.1)


async def test_failures_in_a_row_pause_the_trigger_until_it_is_resumed(tmp_path, autojump_clock):
    runner = make(tmp_path, hook(max_failures=3))
    with runner.kernel.events.subscribe(kinds=["trigger.paused", "trigger.run"]) as events:
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.run)
            for fail in (True, True, False, True, True):  # a success in between starts the count again
                await ended(runner, runner.fire("hook", body(1, fail), source="webhook"))
            assert runner.describe("hook")["failures"] == 2 and not runner.describe("hook")["paused"]
            last = await ended(runner, runner.fire("hook", body(1, True), source="webhook"))
            assert last["outcome"] == "failed" and "it broke" in last["error"]
            listed = runner.describe("hook")
            assert listed["paused"] and "3 failed runs in a row" in listed["paused_reason"]
            with pytest.raises(TriggerPaused, match="tern triggers resume hook"):
                runner.fire("hook", body(1), source="webhook")
            runner.resume("hook")
            assert (await ended(runner, runner.fire("hook", body(1), source="webhook")))["outcome"] == "ok"
            nursery.cancel_scope.cancel()
        seen = []
        while True:
            try:
                seen.append(events.receive.receive_nowait())
            except trio.WouldBlock:
                break
    paused = [e for e in seen if e["type"] == "trigger.paused"]
    assert len(paused) == 1 and paused[0]["trigger"] == "hook" and paused[0]["failures"] == 3
    ends = [e["outcome"] for e in seen if e["type"] == "trigger.run" and e["state"] == "ended"]
    assert ends == ["failed", "failed", "ok", "failed", "failed", "failed", "ok"]
    # the pause is kept in the store: a restarted daemon finds the trigger still paused
    again = TriggerRunner(runner.kernel, RunStore(tmp_path / "triggers.sqlite3"))
    assert not again.describe("hook")["paused"]  # it was resumed above
    runner.store.pause("hook", "test")
    with pytest.raises(TriggerPaused):
        TriggerRunner(runner.kernel, RunStore(tmp_path / "triggers.sqlite3")).fire("hook", {}, source="manual")


async def test_a_schedule_fires_on_time_and_a_busy_one_records_skipped_runs(tmp_path, autojump_clock):
    every = TriggerConfig(name="tick", agent="worker", kind="schedule", every="10s",
                          message='{"secs": 25, "fail": false}')
    runner = make(tmp_path, every)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        assert runner.describe("tick")["next_fire"] == (EPOCH + dt.timedelta(seconds=10)).timestamp()
        await trio.sleep(61)
        nursery.cancel_scope.cancel()
    runs = list(reversed(runner.store.runs("tick")))
    # ticks at 10, 20, ... 60: a 25 s run starting at 10 and at 40; the ticks in between are skipped
    assert [(r["outcome"], round(r["started_at"] - EPOCH.timestamp())) for r in runs] == [
        ("ok", 10), ("skipped", 20), ("skipped", 30), ("failed", 40), ("skipped", 50), ("skipped", 60)]
    assert runs[1]["source"] == "schedule" and "overlap" in runs[1]["error"]
    assert runs[3]["error"] == STOPPED  # cancelled mid-run at 61 s: said at once, not only at the next boot
    assert runner.store.state("tick")["last_fire"] == (EPOCH + dt.timedelta(seconds=60)).timestamp()
    assert runner.describe("tick")["next_fire"] == (EPOCH + dt.timedelta(seconds=70)).timestamp()  # from the last


async def test_a_triggered_runs_approval_waits_for_nobody_and_is_denied_at_the_timeout(tmp_path, autojump_clock):
    governance = GovernanceConfig(rules=[ApprovalRule(tool="work", decision="ask")], approval_timeout_secs=120)
    runner = make(tmp_path, hook(timeout_secs=600), governance=governance)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        start = trio.current_time()
        run_id = runner.fire("hook", body(1), source="webhook")
        await trio.sleep(1)
        [waiting] = await runner.kernel.approvals.list("pending")  # in the queue, where a person could answer it
        assert (waiting.agent, waiting.tool) == ("worker", "work")
        run = await ended(runner, run_id)
        assert trio.current_time() - start == pytest.approx(120, abs=0.1)
        nursery.cancel_scope.cancel()
    assert run["outcome"] == "failed" and "expired" in run["error"]
    assert (await runner.kernel.approvals.get(waiting.id)).state == "expired"
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    [message] = [r for r in records if r["kind"] == "agent_message"]
    assert (message["caller"], message["context_id"], message["outcome"]) == ("trigger:hook", run_id, "error")


async def test_unknown_triggers_and_a_message_of_hostile_json(tmp_path, autojump_clock):
    runner = make(tmp_path, TriggerConfig(name="say", agent="echo", kind="webhook",
                                          message="got {{ body.text }} for {{ trigger }}"))
    with pytest.raises(UnknownTrigger, match="no trigger named 'nope'"):
        runner.fire("nope", {}, source="manual")
    assert runner.webhook("say") is not None and runner.webhook("nope") is None
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        hostile = runner.fire("say", {"body": {"text": "{{ run_id }} é" * 30_000}}, source="webhook")
        run = await ended(runner, hostile)
        nursery.cancel_scope.cancel()
    assert run["outcome"] == "ok" and run["reply"].startswith("got {{ run_id }} é")  # one pass: not re-rendered
    assert len(run["reply"].encode()) <= MAX_REPLY_BYTES and run["reply"].endswith("bytes]")


def test_the_store_keeps_the_last_runs_and_recovers_from_a_crash(tmp_path):
    store = RunStore(tmp_path / "triggers.sqlite3")
    for n in range(KEEP_RUNS + 5):
        store.start(f"run_{n:016x}", "t", "manual")
        store.end(f"run_{n:016x}", "ok")
    store.start("run_other", "u", "manual")
    store.running("run_other")
    kept = store.runs("t", 5000)
    assert len(kept) == KEEP_RUNS and kept[0]["id"] == f"run_{KEEP_RUNS + 4:016x}"
    store.close()
    reopened = RunStore(tmp_path / "triggers.sqlite3")  # as if tern was killed during run_other
    assert reopened.recovered == 1
    assert (reopened.run("run_other")["outcome"], reopened.run("run_other")["error"]) == ("failed", STOPPED)


def test_a_corrupt_store_is_moved_aside_and_a_full_disk_loses_records_not_runs(tmp_path):
    (tmp_path / "triggers.sqlite3").write_bytes(b"not a database" * 100)
    store = RunStore(tmp_path / "triggers.sqlite3")
    assert list(tmp_path.glob("triggers.sqlite3.corrupt-*"))
    store._db.execute("PRAGMA max_page_count = 1")  # the file cannot grow: as a full disk
    store.start("run_a", "t", "manual")
    store.end("run_a", "ok", reply="x" * MAX_REPLY_BYTES)
    assert store.write_failures == 1  # the reply did not fit; the outcome did
    run = store.run("run_a")
    assert (run["outcome"], run["reply"], run["error"]) == ("ok", "", "the reply could not be recorded")
    for n in range(200):  # nothing fits any more: every write is refused, none raises
        store.start(f"run_{n}", "t", "manual")
    assert store.write_failures > 1


async def test_a_watch_starts_a_run_with_the_new_files_and_refuses_a_link_out(tmp_path):
    """Real time: the watcher scans in a worker thread, which an autojump clock would time out."""
    watch = TriggerConfig(name="inbox", agent="echo", kind="watch", path="inbox", interval_secs=0.2,
                          debounce_secs=0.2, message="new: {{ paths }}")
    runner = make(tmp_path / "state", watch)
    root = runner.watch_root(watch)
    assert root == (tmp_path / "state" / "workspaces" / "echo" / "inbox").resolve()
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        await trio.sleep(0.5)  # the first scan is the baseline
        (root / "a.txt").write_text("hello")
        with trio.fail_after(20):
            while not runner.store.runs("inbox"):
                await trio.sleep(0.05)
            run = await ended(runner, runner.store.runs("inbox")[0]["id"])
        nursery.cancel_scope.cancel()
    assert (run["source"], run["outcome"], run["reply"]) == ("watch", "ok", 'new: ["a.txt"]')
    outside = tmp_path / "outside"
    outside.mkdir()
    (root.parent / "out").symlink_to(outside)
    with pytest.raises(ConfigError, match="leads out of the workspace"):
        runner.watch_root(TriggerConfig(name="out", agent="echo", kind="watch", path="out", message="x"))
    homeless = TriggerRunner(Kernel(Config(agents=[AgentConfig(name="echo", kind="echo")], triggers=[watch])))
    with pytest.raises(ConfigError, match="no workspace to watch in"):
        homeless.watch_root(watch)


def test_a_cron_the_parser_refuses_stops_the_start_naming_the_entry(tmp_path):
    bad = TriggerConfig(name="bad", agent="echo", kind="schedule", cron="61 * * * *", message="x")
    config = Config(agents=[AgentConfig(name="echo", kind="echo")], state=StateConfig(dir=str(tmp_path)),
                    triggers=[bad])
    with pytest.raises(ConfigError, match=r"triggers\[0\]\.cron: .*61"):
        TriggerRunner(Kernel(config))


async def test_the_reply_goes_to_the_sink_and_a_refused_sink_counts_as_a_failure(tmp_path, autojump_clock):
    from runtime.config import TriggerSink

    filed = TriggerConfig(name="filed", agent="echo", kind="webhook", message="report {{ body.n }}",
                          sink=TriggerSink(kind="file", path="reports/{{ trigger }}-{{ run_id }}.md"))
    blocked = TriggerConfig(name="blocked", agent="echo", kind="webhook", message="x", max_failures=1,
                            sink=TriggerSink(kind="webhook", url="http://169.254.169.254/latest/meta-data"))
    runner = make(tmp_path, filed, blocked)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        good = await ended(runner, runner.fire("filed", {"body": {"n": 7}}, source="webhook"))
        bad = await ended(runner, runner.fire("blocked", {}, source="webhook"))
        nursery.cancel_scope.cancel()
    written = tmp_path / "workspaces" / "echo" / "reports" / f"filed-{good['id']}.md"
    assert (good["outcome"], good["sink_error"], written.read_text()) == ("ok", "", "report 7")
    assert bad["outcome"] == "ok" and "169.254.169.254" in bad["sink_error"]  # the agent answered; delivery failed
    assert runner.describe("blocked")["paused"]  # a reply that never arrives is a failure like any other


async def test_a_watch_that_cannot_start_is_reported_and_tried_again_a_minute_later(tmp_path, autojump_clock):
    watch = TriggerConfig(name="out", agent="echo", kind="watch", path="out", message="{{ paths }}")
    runner = make(tmp_path, watch)
    workspace = tmp_path / "workspaces" / "echo"
    workspace.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (workspace / "out").symlink_to(tmp_path / "elsewhere")
    with runner.kernel.events.subscribe(kinds=["trigger.error"]) as events:
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.run)
            first = await events.next()
            started = trio.current_time()
            second = await events.next()
            assert trio.current_time() - started == pytest.approx(60)
            nursery.cancel_scope.cancel()
    assert first["trigger"] == "out" and "leads out of the workspace" in first["error"] and second == {
        **first, "time": second["time"]}
    assert runner.store.runs("out") == []


async def test_a_triggered_run_spends_the_agents_budget_like_any_message(tmp_path, autojump_clock):
    config = Config(agents=[AgentConfig(name="echo", kind="echo", requests_per_minute=2)],
                    state=StateConfig(dir=str(tmp_path)), triggers=[
                        TriggerConfig(name="say", agent="echo", kind="webhook", message="hi", overlap="parallel")])
    runner = TriggerRunner(Kernel(config))
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        outcomes = [(await ended(runner, runner.fire("say", {}, source="webhook")))["outcome"] for _ in range(3)]
        nursery.cancel_scope.cancel()
    assert outcomes == ["ok", "ok", "failed"]
    assert "requests_per_minute" in runner.store.runs("say")[0]["error"]
