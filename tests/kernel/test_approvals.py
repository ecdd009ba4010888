"""The policy and the approval stage of the pipeline, in one process on trio's virtual
clock: verdicts, waiting, deciding, scopes, limits, expiry and cancellation. The same
requests answered from other processes are in tests/test_approvals.py."""

from __future__ import annotations

from functools import partial

import trio

from runtime.config import AccessTier, AgentConfig, ApprovalRule, Config, GovernanceConfig, ModelConfig, StateConfig
from runtime.errors import ApprovalClosed, UnknownApproval
from runtime.kernel.approvals import Approvals
from runtime.kernel.audit import AuditLog
from runtime.kernel.pipeline import ToolPipeline
from runtime.kernel.policy import Policy
from runtime.kernel.registry import ToolRegistry
from runtime.ports import Tool, ToolResult

import pytest

OBJECT = {"type": "object"}
READ = Tool("look", "", OBJECT, annotations={"readOnlyHint": True})
SAFE_WRITE = Tool("note", "", OBJECT, annotations={"readOnlyHint": False, "destructiveHint": False})
DESTROY = Tool("wipe", "", OBJECT, annotations={"destructiveHint": True})
SILENT = Tool("mcp_srv_thing", "", OBJECT, source="mcp")  # a server that annotates nothing


def agent(name: str = "bot", **fields) -> AgentConfig:
    return AgentConfig(name=name, kind="llm", tools=["*"], **fields)


def policy(*rules: ApprovalRule, tiers: tuple[AccessTier, ...] = ()) -> Policy:
    return Policy(Config(governance=GovernanceConfig(rules=list(rules), tiers=list(tiers))))


# --- the policy ----------------------------------------------------------------------------


def test_default_asks_for_shell_scripts_and_destructive_tools_only():
    p = policy()
    shell = Tool("shell_exec", "", OBJECT)
    assert p.verdict(agent(), shell).decision == "ask"
    assert p.verdict(agent(), Tool("script_run", "", OBJECT)).decision == "ask"
    assert p.verdict(agent(), DESTROY).decision == "ask"
    for tool in (READ, SAFE_WRITE, SILENT):
        assert p.verdict(agent(), tool).decision == "allow", tool.name
    assert p.verdict(None, shell).decision == "ask"  # the operator is asked too


def test_first_matching_rule_wins_and_globs_are_normalised():
    p = policy(ApprovalRule(tool="shell-exec", decision="allow", agent="ops*"),
               ApprovalRule(tool="shell_*", decision="deny"),
               ApprovalRule(tool="*", decision="ask", agent="bot"))
    shell = Tool("shell_exec", "", OBJECT)
    assert p.verdict(agent("ops-1"), shell).decision == "allow"
    denied = p.verdict(agent("bot"), shell)
    assert denied.decision == "deny" and "#2" in denied.reason
    assert p.verdict(agent("bot"), READ).decision == "ask"
    assert p.verdict(agent("other"), READ).decision == "allow"
    assert p.verdict(None, shell).decision == "deny"  # "*" matches the operator


def test_an_agent_glob_other_than_star_never_matches_the_operator():
    p = policy(ApprovalRule(tool="look", decision="deny", agent="b*"))
    assert p.verdict(agent("bot"), READ).decision == "deny"
    assert p.verdict(None, READ).decision == "allow"


def test_tiers_narrow_and_read_spec_defaults():
    p = policy(ApprovalRule(tool="*", decision="allow"), tiers=(AccessTier(name="notes", tools=["note", "look"]),))
    reader, writer = agent(access_tier="read"), agent(access_tier="tier_2_write_limited")
    full = agent(access_tier="full")
    assert p.verdict(reader, READ).decision == "allow"
    for tool in (SAFE_WRITE, DESTROY, SILENT):
        verdict = p.verdict(reader, tool)
        assert verdict.decision == "deny" and "read access tier" in verdict.reason
    assert p.verdict(writer, SAFE_WRITE).decision == "allow"
    assert p.verdict(writer, DESTROY).decision == "ask"  # a rule may not allow it for a write tier
    assert p.verdict(writer, SILENT).decision == "ask"  # no annotations: destructive, as the spec reads it
    assert p.verdict(full, DESTROY).decision == "allow"
    custom = agent(access_tier="notes")
    assert p.verdict(custom, SAFE_WRITE).decision == "allow"
    assert p.verdict(custom, DESTROY).decision == "deny"


def test_config_check_reports_unknown_tiers_and_rules_that_match_nothing():
    model = ModelConfig(model="m")
    config = Config(agents=[agent("a", access_tier="tier_9", model=model),
                            agent("b", access_tier="tier_1_read", model=model)],
                    governance=GovernanceConfig(rules=[ApprovalRule(tool="mcp_github_*", decision="ask"),
                                                       ApprovalRule(tool="shel_exec", decision="deny"),
                                                       ApprovalRule(tool="time_now", decision="deny")]))
    from runtime.config.checks import find_problems

    p = Policy(config)
    assert find_problems(config) == ['agents[0].access_tier: "tier_9" is not a tier (known: full, read, '
                                     'tier_1_read, tier_2_write_limited, tier_3_full_access, tier_4_policy, write)']
    assert p.unmatched_rules(["time_now", "shell_exec"], ["github"]) == [
        "governance.rules[1]: tool 'shel_exec' matches no tool"]


# --- the stage in the pipeline -----------------------------------------------------------------


class Harness:
    def __init__(self, tmp_path, *rules: ApprovalRule, timeout: float = 300.0, max_pending: int = 5) -> None:
        self.calls: list[dict] = []
        registry = ToolRegistry()

        async def wipe(arguments, context) -> ToolResult:
            self.calls.append(arguments)
            return ToolResult("wiped")

        async def look(arguments, context) -> ToolResult:
            return ToolResult("seen")

        registry.register(DESTROY, wipe)
        registry.register(READ, look)
        config = Config(state=StateConfig(dir=str(tmp_path)),
                        governance=GovernanceConfig(rules=list(rules), approval_timeout_secs=timeout,
                                                    max_pending_per_agent=max_pending))
        self.audit = AuditLog(tmp_path / "audit.jsonl")
        self.events: list[tuple[str, dict]] = []
        self.pipeline = ToolPipeline(registry, config, audit=self.audit)
        self.approvals = Approvals(tmp_path / "approvals.sqlite3", timeout_secs=timeout,
                                   max_pending_per_agent=max_pending, audit=self.audit,
                                   publish=lambda kind, data: self.events.append((kind, data)),
                                   redact=self.pipeline.redact_obj)
        self.pipeline.approvals = self.approvals

    async def pending(self, count: int = 1) -> list:
        while len(listed := await self.approvals.list()) < count:
            await trio.sleep(0.01)
        return listed

    def records(self, kind: str) -> list[dict]:
        import json

        return [r for r in map(json.loads, (self.audit.path).read_text().splitlines()) if r["kind"] == kind]


async def test_a_call_waits_for_approval_and_runs_once_approved(tmp_path, autojump_clock):
    h = Harness(tmp_path)
    results = []

    async def call():
        results.append(await h.pipeline.call("wipe", {"disk": "/dev/x"}, run=h.pipeline.run(agent()), caller="t"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        [waiting] = await h.pending()
        seen = (waiting.agent, waiting.tool, waiting.arguments, waiting.caller)
        assert seen == ("bot", "wipe", {"disk": "/dev/x"}, "t")
        assert h.calls == []
        started = trio.current_time()
        await h.approvals.decide(waiting.id, True, by="alice", channel="test")
    assert trio.current_time() - started == 0  # woken at once, not at the next poll
    assert results[0].text == "wiped" and h.calls == [{"disk": "/dev/x"}]
    resolved = h.records("approval_resolved")[0]
    assert (resolved["decided_by"], resolved["channel"], resolved["outcome"]) == ("alice", "test", "approved")
    assert [kind for kind, _ in h.events] == ["approval_requested", "approval_resolved"]
    assert h.records("tool_call")[0]["outcome"] == "ok"


async def test_denied_and_expired_calls_are_tool_errors_the_run_survives(tmp_path, autojump_clock):
    h = Harness(tmp_path, timeout=30)
    run = h.pipeline.run(agent())
    outcome = []

    async def call():
        outcome.append(await h.pipeline.call("wipe", {}, run=run))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        [waiting] = await h.pending()
        await h.approvals.decide(waiting.id, False, reason="not today", by="bob", channel="test")
    assert outcome[0].is_error and f"bob denied it (approval {waiting.id}, test): not today" in outcome[0].text
    started = trio.current_time()
    expired = await h.pipeline.call("wipe", {"again": 1}, run=run)
    assert trio.current_time() - started == pytest.approx(30)
    assert expired.is_error and "expired (nobody answered in time)" in expired.text
    assert (await h.pipeline.call("look", {}, run=run)).text == "seen"  # the run goes on
    calls = h.records("tool_call")
    assert [r["outcome"] for r in calls] == ["rejected", "expired", "ok"]
    assert "bob denied it" in calls[0]["error"] and "expired" in calls[1]["error"] and "error" not in calls[2]
    with pytest.raises(ApprovalClosed, match="already expired"):
        await h.approvals.decide((await h.approvals.list("expired"))[0].id, True)
    with pytest.raises(UnknownApproval):
        await h.approvals.decide("ap_nothere", True)


async def test_always_and_args_scopes_persist(tmp_path, autojump_clock):
    h = Harness(tmp_path)

    async def answered(arguments, scope, approve=True):
        async with trio.open_nursery() as nursery:
            results = []
            call = h.pipeline.call("wipe", arguments, run=h.pipeline.run(agent()))
            nursery.start_soon(_append, results, call)
            [waiting] = await h.pending()
            await h.approvals.decide(waiting.id, approve, scope=scope)
        return results[0]

    await answered({"n": 1}, "args")
    with trio.fail_after(1):  # the same arguments again: no question
        assert (await h.pipeline.call("wipe", {"n": 1}, run=h.pipeline.run(agent()))).text == "wiped"
    assert (await answered({"n": 2}, "always")).text == "wiped"
    with trio.fail_after(1):
        assert (await h.pipeline.call("wipe", {"n": 3}, run=h.pipeline.run(agent()))).text == "wiped"
    # another agent is still asked
    with trio.move_on_after(1) as scope:
        await h.pipeline.call("wipe", {"n": 4}, run=h.pipeline.run(agent("other")))
    assert scope.cancelled_caught
    assert await h.approvals.forget_rules(agent="bot") == 2


async def _append(results, awaitable):
    results.append(await awaitable)


async def test_too_many_pending_are_denied_at_once(tmp_path, autojump_clock):
    h = Harness(tmp_path, max_pending=2)
    async with trio.open_nursery() as nursery:
        for i in range(2):
            nursery.start_soon(partial(h.pipeline.call, "wipe", {"i": i}, run=h.pipeline.run(agent())))
        await h.pending(2)
        started = trio.current_time()
        third = await h.pipeline.call("wipe", {"i": 3}, run=h.pipeline.run(agent()))
        assert trio.current_time() == started
        assert third.is_error and "already has 2 tool calls waiting for approval" in third.text
        other = []
        nursery.start_soon(_append, other, h.pipeline.call("wipe", {}, run=h.pipeline.run(agent("other"))))
        await h.pending(3)  # the limit is per agent
        nursery.cancel_scope.cancel()


async def test_cancelling_the_run_ends_the_wait_and_expires_the_request(tmp_path, autojump_clock):
    h = Harness(tmp_path)
    run = h.pipeline.run(agent())
    results = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_append, results, h.pipeline.call("wipe", {}, run=run))
        [waiting] = await h.pending()
        run.cancel()
    assert results[0].is_error and "cancelled by its caller" in results[0].text
    assert (await h.approvals.get(waiting.id)).state == "expired"
    assert (await h.approvals.get(waiting.id)).reason == "the caller stopped waiting"
    assert h.calls == []


async def test_the_callers_ask_runs_and_is_cancelled_when_another_channel_decides(tmp_path, autojump_clock):
    h = Harness(tmp_path)
    asked, cancelled = [], []

    async def ask(approval):
        asked.append(approval.id)
        try:
            await trio.sleep_forever()
        finally:
            cancelled.append(approval.id)

    async def broken(approval):
        raise RuntimeError("the channel broke")

    for callback in (ask, broken):
        results = []
        async with trio.open_nursery() as nursery:
            call = h.pipeline.call("wipe", {}, run=h.pipeline.run(agent(), ask=callback))
            nursery.start_soon(_append, results, call)
            [waiting] = await h.pending()
            await trio.sleep(1)
            await h.approvals.decide(waiting.id, True)
        assert results[0].text == "wiped"
    assert asked == cancelled and len(asked) == 1


async def test_the_ask_can_decide_itself(tmp_path, autojump_clock):
    h = Harness(tmp_path)

    async def ask(approval):
        await h.approvals.decide(approval.id, True, by="the-client", channel="mcp")

    result = await h.pipeline.call("wipe", {}, run=h.pipeline.run(agent(), ask=ask))
    assert result.text == "wiped"


async def test_secrets_in_arguments_are_redacted_in_the_request(tmp_path, autojump_clock):
    from runtime.log import register_secret

    register_secret("sk-approval-secret-123")
    h = Harness(tmp_path)
    async with trio.open_nursery() as nursery:
        secret = {"token": "sk-approval-secret-123"}
        nursery.start_soon(partial(h.pipeline.call, "wipe", secret, run=h.pipeline.run(agent())))
        [waiting] = await h.pending()
        assert "sk-approval-secret-123" not in str(waiting.arguments)
        assert "sk-approval-secret-123" not in (tmp_path / "approvals.sqlite3").read_bytes().decode("latin-1")
        nursery.cancel_scope.cancel()


async def test_requests_of_a_gone_process_expire_at_boot(tmp_path, autojump_clock):
    import sqlite3

    h = Harness(tmp_path)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(h.pipeline.call, "wipe", {}, run=h.pipeline.run(agent())))
        [waiting] = await h.pending()
        db = sqlite3.connect(tmp_path / "approvals.sqlite3")
        db.execute("UPDATE requests SET owner = '999999999:1'")  # as if a crashed tern had asked
        db.commit()
        again = Approvals(tmp_path / "approvals.sqlite3")
        assert (await again.get(waiting.id)).state == "expired"
        assert (await again.get(waiting.id)).reason == "tern stopped while it waited"
        nursery.cancel_scope.cancel()


def test_the_readme_governance_example_loads_and_means_what_it_says(tmp_path):
    """The governance page's example config is real: it loads, and the policy reads it as the prose says."""
    from pathlib import Path

    from runtime.config import parse_config

    section = (Path(__file__).resolve().parents[2] / "docs" / "governance.md").read_text()
    block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    config = parse_config(block + '[agents.model]\nmodel = "m"\n', "README", tmp_path)
    p = Policy(config)
    ops = config.agents[0]
    assert p.verdict(ops, Tool("shell_exec", "", OBJECT)).decision == "ask"
    assert p.verdict(ops, Tool("mcp_github_delete_repo", "", OBJECT, source="mcp")).decision == "deny"
    assert p.verdict(AgentConfig(name="notes", kind="echo"), Tool("file_write", "", OBJECT)).decision == "allow"
    assert (ops.requests_per_minute, ops.tokens_per_hour, ops.max_tool_calls_per_run) == (30, 200000, 20)


async def test_a_rules_wait_secs_bounds_its_requests_wait(tmp_path, autojump_clock):
    """#34 item 8: an ``ask`` rule may wait less than approval_timeout_secs (unattended
    callers fail in seconds, not five minutes)."""
    import trio

    from runtime.config import ApprovalRule, Config, GovernanceConfig, StateConfig
    from runtime.kernel.kernel import Kernel

    kernel = Kernel(Config(state=StateConfig(dir=str(tmp_path)), governance=GovernanceConfig(
        rules=[ApprovalRule(tool="time_now", decision="ask", wait_secs=5)], approval_timeout_secs=300)))
    started = trio.current_time()
    result = await kernel.pipeline.call("time_now", {})
    assert result.is_error and "expired" in result.text
    assert trio.current_time() - started == pytest.approx(5, abs=0.5)
