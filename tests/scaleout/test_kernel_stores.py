"""Approvals, approval rules and conversations on both stores: the same tests run on the
SQLite file (two "nodes" are two processes' views of one state directory) and on a real
PostgreSQL (tests/pg.py; two nodes each with their own pool and LISTEN connection).
What only PostgreSQL has (a restart while a request waits, a database that is down, a
node that died) is tested on it alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime.config.keys import Caller
from runtime.errors import ApprovalClosed, Forbidden, StorageError, UnknownApproval, UsageError
from runtime.kernel.approvals import CHANNEL, MAX_ARGUMENT_BYTES, ORPHANED, Approvals, args_digest
from runtime.kernel.conversations import Conversations
from runtime.pg import Database, DatabaseUnavailable
from runtime.wire.jcs import canonicalize
from runtime.pg.listen import Listener

ALICE = Caller("alice", frozenset({"message", "tasks"}))
BOB = Caller("bob", frozenset({"message", "tasks"}))
OPS = Caller("ops", frozenset({"approvals"}))
FORM = {"mode": "form", "message": "Who?", "requestedSchema": {
    "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}


class Store:
    """Makes "nodes" of one store: each its own Approvals / Conversations (and with
    PostgreSQL its own Database and Listener), running in ``nursery``."""

    def __init__(self, kind: str, tmp: Path, url: str | None, pg_server: Any) -> None:
        self.kind, self.tmp, self.url, self.pg_server = kind, tmp, url, pg_server
        self.dbs: list[Database] = []

    async def _db(self, nursery: trio.Nursery) -> tuple[Any, Any]:
        if self.url is None:
            return None, None
        db = Database(self.url, pool_size=4, connect_timeout=2.0)
        await db.open()
        listener = Listener(db, poll_secs=0.1)
        nursery.start_soon(listener.run)
        self.dbs.append(db)
        return db, listener

    async def approvals(self, nursery: trio.Nursery, name: str = "a", **settings: Any) -> Approvals:
        db, listener = await self._db(nursery)
        node = Approvals(self.tmp / "approvals.sqlite3" if db is None else None, db=db, listener=listener,
                         node_id=f"node-{name}", **{"timeout_secs": 60.0, **settings})
        await nursery.start(node.run)
        return node

    async def conversations(self, nursery: trio.Nursery, **bounds: Any) -> Conversations:
        db, _ = await self._db(nursery)
        store = Conversations(self.tmp / "conversations.sqlite3" if db is None else None, db=db, **bounds)
        await store.start()
        return store

    def close(self) -> None:
        for db in self.dbs:
            db.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        made = Store("sqlite", tmp_path, None, None)
    else:
        pg_server = request.getfixturevalue("pg_server")
        made = Store("postgres", tmp_path, pg_server.create_database(), pg_server)
    yield made
    made.close()


async def waiting(node: Approvals, count: int = 1, state: str = "pending") -> list:
    with trio.fail_after(10):
        while len(listed := await node.list(state)) < count:
            await trio.sleep(0.02)
    return listed


async def ask(node: Approvals, out: list, *args: Any, **kwargs: Any) -> None:
    out.append(await node.request(*args, **kwargs))


# --- approvals across nodes -------------------------------------------------------------


async def test_a_call_waiting_on_one_node_resumes_when_another_decides(store: Store) -> None:
    events: list[tuple[str, dict]] = []
    async with trio.open_nursery() as nursery:
        a = await store.approvals(nursery, "a", publish=lambda kind, data: events.append((kind, data)))
        b = await store.approvals(nursery, "b")
        ended: list = []
        nursery.start_soon(ask, a, ended, "bot", "shell_exec", {"argv": ["rm", "x"]}, "d1")
        [pending] = await waiting(b)
        assert (pending.agent, pending.tool, pending.arguments) == ("bot", "shell_exec", {"argv": ["rm", "x"]})
        started = trio.current_time()
        decided = await b.decide(pending.id, True, by="bob", channel="cli")
        assert decided.state == "approved"
        with trio.fail_after(5):
            while not ended:
                await trio.sleep(0.01)
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert ended[0].state == "approved" and ended[0].decided_by == "bob"
    assert took < 1.0, f"the waiting node took {took:.2f} s to see the decision"
    assert [kind for kind, _ in events] == ["approval_requested", "approval_resolved"]  # told its own subscribers


async def test_two_deciders_at_once_one_wins(store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await store.approvals(nursery, "a")
        b = await store.approvals(nursery, "b")
        c = await store.approvals(nursery, "c")
        for round_ in range(5):
            ended: list = []
            nursery.start_soon(ask, a, ended, "bot", "t", {"round": round_}, f"d{round_}")
            [pending] = await waiting(a)
            outcomes: list[str] = []

            async def decide(node: Approvals, approve: bool) -> None:
                try:
                    outcomes.append((await node.decide(pending.id, approve, by=f"n{id(node)}")).state)
                except ApprovalClosed as exc:
                    outcomes.append(f"closed: {exc}")

            async with trio.open_nursery() as race:
                race.start_soon(decide, b, True)
                race.start_soon(decide, c, False)
            with trio.fail_after(5):
                while not ended:
                    await trio.sleep(0.01)
            won = [o for o in outcomes if not o.startswith("closed")]
            assert len(won) == 1 and len(outcomes) == 2, outcomes
            assert ended[0].state == won[0]
            assert "is already" in [o for o in outcomes if o.startswith("closed")][0]
        nursery.cancel_scope.cancel()


async def test_rules_decided_on_one_node_apply_on_every_node(store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await store.approvals(nursery, "a")
        b = await store.approvals(nursery, "b")
        for scope, digest in (("always", "d-any"), ("args", "d-exact")):
            ended: list = []
            nursery.start_soon(ask, a, ended, "bot", f"tool_{scope}", {}, digest)
            [pending] = await waiting(b)
            await b.decide(pending.id, scope == "always", scope=scope, by="ops")
            with trio.fail_after(5):
                while not ended:
                    await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert await a.remembered("bot", "tool_always", "any digest at all") == "allow"
    assert await a.remembered("other-agent", "tool_always", "d-any") is None
    assert await a.remembered("bot", "tool_args", "d-exact") == "deny"
    assert await a.remembered("bot", "tool_args", "d-other") is None
    # A later decision for the same rule replaces it, wherever it is made.
    assert {r["tool"]: r["decision"] for r in await a.rules()} == {"tool_always": "allow", "tool_args": "deny"}
    assert await a.forget_rules(agent="bot", tool="tool_args") == 1
    assert [r["tool"] for r in await b.rules()] == ["tool_always"]


async def test_a_callers_own_rule_applies_to_its_runs_only_on_every_node(store: Store) -> None:
    """A key that may decide for itself makes rules for its own runs: the other node reads
    them for that key alone, a deny for everyone still wins, and each rule names its maker."""
    mcp_bob = Caller("bob", frozenset({"mcp"}), way="mcp")
    async with trio.open_nursery() as nursery:
        a = await store.approvals(nursery, "a", self_approval=lambda origin: origin == "mcp")
        b = await store.approvals(nursery, "b", self_approval=lambda origin: origin == "mcp")
        ended: list = []
        nursery.start_soon(partial(ask, a, ended, "bot", "shell_exec", {}, "d1", key="bob", origin="mcp"))
        [pending] = await waiting(b)
        await b.decide(pending.id, True, scope="always", who=mcp_bob, by="mcp:bob")
        with trio.fail_after(5):
            while not ended:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert await a.remembered("bot", "shell_exec", "d9", "bob") == "allow"
    assert await a.remembered("bot", "shell_exec", "d9", "alice") is None
    assert await a.remembered("bot", "shell_exec", "d9", "admin") is None
    assert [(r["caller"], r["made_by"]) for r in await b.rules()] == [("bob", "bob")]


async def test_a_question_is_answered_on_one_node_and_taken_once_on_another(store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await store.approvals(nursery, "a")
        b = await store.approvals(nursery, "b")
        ended: list = []
        nursery.start_soon(partial(ask, a, ended, "", "mcp_x_elicitation", {"question": "Who?"}, "f", form=FORM))
        [pending] = await waiting(b)
        with pytest.raises(UsageError):
            await b.decide(pending.id, True, answer={"name": 7})  # does not fit the form: still pending
        with pytest.raises(UsageError):
            await b.decide(pending.id, True, scope="always", answer={"name": "Ada"})
        assert (await a.get(pending.id)).state == "pending"
        await b.decide(pending.id, True, answer={"name": "Ada"}, by="ops")
        with trio.fail_after(5):
            while not ended:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert ended[0].state == "approved"
    assert await a.take_answer(pending.id) == {"action": "accept", "content": {"name": "Ada"}}
    assert await b.take_answer(pending.id) is None  # once, whichever node asks again


async def test_ownership_bounds_and_hostile_ids(store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await store.approvals(nursery, "a", max_pending_per_agent=2)
        b = await store.approvals(nursery, "b", max_pending_per_agent=2)
        ended: list = []
        nursery.start_soon(partial(ask, a, ended, "bot", "t1", {"blob": "x" * (200 * 1024)}, "d1",
                                   key="alice"))
        nursery.start_soon(partial(ask, a, ended, "bot", "t2", {}, "d2", key="bob"))
        listed = await waiting(b, 2)
        big = next(x for x in listed if x.tool == "t1")
        assert big.arguments == {"blob": "x" * (200 * 1024)}  # kept whole, its digest the same on every node
        assert big.arguments_sha256 == args_digest(big.arguments) == (await a.get(big.id)).arguments_sha256
        assert await b.whole_arguments(big.id) == canonicalize(big.arguments)
        # Past the bound a call is refused with a sentence, never kept cut.
        huge = await b.request("bot", "t4", {"blob": "x" * MAX_ARGUMENT_BYTES}, "d4")
        assert huge.state == "denied" and not huge.id and f"({MAX_ARGUMENT_BYTES:,})" in huge.reason
        # The third at once is refused (the limit is per agent, counted in the shared store).
        refused = await b.request("bot", "t3", {}, "d3")
        assert refused.state == "denied" and "max_pending_per_agent" in refused.reason
        assert [x.tool for x in await b.list(who=ALICE)] == ["t1"]
        assert {x.tool for x in await b.list(who=OPS)} == {"t1", "t2"}
        bobs = next(x.id for x in listed if x.tool == "t2")
        with pytest.raises(UnknownApproval):
            await b.get(bobs, ALICE)
        with pytest.raises(UnknownApproval):
            await b.decide(bobs, True, who=ALICE)
        for hostile in ("x' OR '1'='1", "ap_%", "ap_?", "\x00", "ä" * 500, ""):
            with pytest.raises(UnknownApproval):
                await b.decide(hostile, True)
        with pytest.raises(UsageError):
            await b.decide(bobs, True, scope="forever")
        with pytest.raises(Forbidden):  # its own, but no way in lets bob decide for himself
            await b.decide(bobs, False, who=BOB)
        await b.decide(bobs, False, who=OPS, reason="r" * 5000)
        assert len((await a.get(bobs)).reason) == 1000
        nursery.cancel_scope.cancel()


async def test_a_request_past_its_time_expires_on_every_node(store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await store.approvals(nursery, "a", timeout_secs=0.5)
        b = await store.approvals(nursery, "b")
        ended: list = []
        nursery.start_soon(ask, a, ended, "bot", "t", {}, "d")
        [pending] = await waiting(b)
        with trio.fail_after(5):
            while not ended:
                await trio.sleep(0.02)
        with pytest.raises(ApprovalClosed, match="already expired"):
            await b.decide(pending.id, True)
        nursery.cancel_scope.cancel()
    assert ended[0].state == "expired" and ended[0].reason == "nobody answered in time"


# --- PostgreSQL only: a restart, a database that is down, a node that died ------------------


@pytest.fixture
def pg_store(tmp_path: Path, pg_server: Any):
    made = Store("postgres", tmp_path, pg_server.create_database(), pg_server)
    yield made
    made.close()


async def test_the_database_restarted_while_a_request_waits(pg_store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await pg_store.approvals(nursery, "a")
        b = await pg_store.approvals(nursery, "b")
        ended: list = []
        nursery.start_soon(ask, a, ended, "bot", "t", {}, "d")
        [pending] = await waiting(b)
        await trio.to_thread.run_sync(pg_store.pg_server.restart, 1.0)
        assert not ended  # the waiting call did not fail for the restart
        started = trio.current_time()
        await b.decide(pending.id, True, by="ops")  # the pool reconnects by itself
        with trio.fail_after(5):
            while not ended:
                await trio.sleep(0.01)
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert ended[0].state == "approved" and took < 1.0, took


async def test_a_decision_while_the_database_is_down_fails_clearly_and_nothing_is_lost(pg_store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await pg_store.approvals(nursery, "a")
        b = await pg_store.approvals(nursery, "b")
        ended: list = []
        nursery.start_soon(ask, a, ended, "bot", "t", {}, "d")
        [pending] = await waiting(b)
        restarted = threading.Event()

        def restart() -> None:
            pg_store.pg_server.restart(3.0)
            restarted.set()

        threading.Thread(target=restart, daemon=True).start()
        with trio.fail_after(30):
            while True:  # until the server is down
                try:
                    await b.get(pending.id)
                except DatabaseUnavailable:
                    break
                await trio.sleep(0.05)
        with pytest.raises(DatabaseUnavailable) as down:
            await b.decide(pending.id, True, by="ops")
        assert isinstance(down.value, StorageError) and down.value.http_status == 503
        assert "\n" not in str(down.value) and str(down.value).startswith("PostgreSQL at ")
        assert not ended  # still waiting
        with trio.fail_after(60):
            while not restarted.is_set():
                await trio.sleep(0.1)
        assert (await b.get(pending.id)).state == "pending"  # nothing was lost, nothing half-decided
        await b.decide(pending.id, False, by="ops", reason="after the outage")
        with trio.fail_after(5):
            while not ended:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert ended[0].state == "denied" and ended[0].reason == "after the outage"


async def test_requests_of_a_node_that_died_expire_and_a_live_ones_do_not(pg_store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await pg_store.approvals(nursery, "a", lease_secs=0.6)
        b = await pg_store.approvals(nursery, "b", lease_secs=0.6)
        ended: list = []
        nursery.start_soon(ask, a, ended, "bot", "t", {}, "d-live")
        [live] = await waiting(b)
        # A request of a node that was killed: nobody marks it alive any more.
        db = pg_store.dbs[1]
        await db.run(lambda c: c.execute(
            "INSERT INTO approval_requests (id, agent, tool, arguments, digest, caller, context_id, created, expires, "
            "state, owner, seen) VALUES ('ap_dead', 'bot', 't', '{}', 'd', '', '', 0, 1e12, 'pending', 'node-gone', "
            "now() - interval '1 minute')"))
        await trio.sleep(2.0)  # more than three lease times
        assert (await b.get("ap_dead")).state == "expired" and (await b.get("ap_dead")).reason == ORPHANED
        assert (await b.get(live.id)).state == "pending" and not ended  # its node marks it alive
        assert a.pending_count() == 1  # as the last sweep counted
        nursery.cancel_scope.cancel()


async def test_hostile_notifies_change_nothing(pg_store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await pg_store.approvals(nursery, "a")
        b = await pg_store.approvals(nursery, "b")
        ended: list = []
        nursery.start_soon(ask, a, ended, "bot", "t", {}, "d")
        [pending] = await waiting(b)
        db = pg_store.dbs[1]
        for payload in ("", "ap_nothere", "'; DROP TABLE approval_requests; --", "x" * 7000, pending.id):
            await db.notify(CHANNEL, payload)  # a NOTIFY of the request itself, undecided: it waits on
        await trio.sleep(0.5)
        assert not ended and (await b.get(pending.id)).state == "pending"
        await b.decide(pending.id, True)
        with trio.fail_after(5):
            while not ended:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert ended[0].state == "approved"


# --- conversations ------------------------------------------------------------------------


async def test_history_written_on_one_node_is_read_on_another(store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await store.conversations(nursery)
        b = await store.conversations(nursery)
        await a.append("ctx-1", Conversations.message("user", "bot", "hello"),
                       Conversations.message("agent", "bot", "hi there"), owner="alice")
        await b.append("ctx-1", Conversations.message("user", "bot", "and again"),
                       Conversations.message("agent", "bot", "yes"), owner="alice")
        assert [m.content for m in await a.history("ctx-1")] == ["hello", "hi there", "and again", "yes"]
        assert [m.content for m in await b.history("ctx-1", limit=2)] == ["and again", "yes"]
        listed = await b.list()
        assert [(c["context_id"], c["messages"], c["preview"]) for c in listed] == [("ctx-1", 4, "hello")]
        # Ownership: another key neither sees nor continues it; an admin sees all.
        assert await b.owner("ctx-1") == "alice"
        assert await b.visible("ctx-1", ALICE) and not await b.visible("ctx-1", BOB)
        assert await b.history("ctx-1", who=BOB) == [] and await b.list(who=BOB) == []
        assert await b.delete("ctx-1", BOB) == 0
        assert await b.visible("ctx-new", BOB)  # one that does not exist yet is anyone's to start
        assert await b.delete("ctx-1", ALICE) == 4
        assert await a.history("ctx-1") == []
        nursery.cancel_scope.cancel()


async def test_history_is_bounded_in_count_and_bytes_whichever_node_writes(store: Store) -> None:
    async with trio.open_nursery() as nursery:
        a = await store.conversations(nursery, max_messages=5, max_bytes=40)  # 9-byte messages: 4 fit
        b = await store.conversations(nursery, max_messages=5, max_bytes=40)
        for n in range(10):
            await (a if n % 2 else b).append("ctx", Conversations.message("user", "bot", f"message-{n}"))
        assert [m.content for m in await a.history("ctx")] == [f"message-{n}" for n in range(6, 10)]
        await a.append("ctx", Conversations.message("user", "bot", "ü" * 30))  # 60 bytes: kept alone (the newest)
        assert [m.content for m in await b.history("ctx")] == ["ü" * 30]
        c = await store.conversations(nursery, max_messages=3)
        for n in range(7):
            await c.append("ctx2", Conversations.message("user", "bot", f"m{n}"))
        assert [m.content for m in await a.history("ctx2")] == ["m4", "m5", "m6"]
        # A NUL (PostgreSQL text holds none: kept as U+FFFD there) and a NUL in an id save and read back.
        await a.append("ctx\x00nul", Conversations.message("user", "bot", "before\x00after"))
        [kept] = await b.history("ctx\x00nul")
        assert kept.content == ("before\x00after" if store.kind == "sqlite" else "before\ufffdafter")
        nursery.cancel_scope.cancel()


# --- the commands, on the shared database ------------------------------------------------


def _tern(config: Path, *args: str, password: str) -> subprocess.CompletedProcess:
    from tests.test_cli import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env.update(PYTHONPATH=str(ROOT), PG_TEST_PASSWORD=password)
    return subprocess.run([sys.executable, "-m", "runtime", *args, "--config", str(config)], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, timeout=60)


def _config(tmp: Path, url: str, password: str) -> Path:
    path = tmp / "config.toml"
    path.write_text(f'[state]\ndir = "{tmp / "state"}"\nstore = "postgres"\n'
                    f'postgres_url = "{url.replace(password, "${PG_TEST_PASSWORD}")}"\n')
    return path


async def test_the_commands_answer_a_call_waiting_on_a_node(pg_store: Store) -> None:
    password = pg_store.pg_server.password
    config = _config(pg_store.tmp, pg_store.url, password)
    tern = partial(_tern, config, password=password)
    async with trio.open_nursery() as nursery:
        a = await pg_store.approvals(nursery, "a")
        talk = await pg_store.conversations(nursery)
        await talk.append("ctx-cli", Conversations.message("user", "bot", "hello from a node"),
                          Conversations.message("agent", "bot", "hi"))
        ended: list = []
        nursery.start_soon(ask, a, ended, "bot", "shell_exec", {"argv": ["rm", "-r", "x"]}, "d")
        [pending] = await waiting(a)
        listed = await trio.to_thread.run_sync(tern, "approvals", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [x["id"] for x in json.loads(listed.stdout)["approvals"]] == [pending.id]
        approved = await trio.to_thread.run_sync(tern, "approve", pending.id, "--always")
        assert approved.returncode == 0 and f"approved {pending.id}" in approved.stdout, approved.stderr
        with trio.fail_after(2):  # heard through the NOTIFY the command's decision sent
            while not ended:
                await trio.sleep(0.01)
        rules = await trio.to_thread.run_sync(tern, "approvals", "--rules", "--json")
        assert [(r["tool"], r["decision"]) for r in json.loads(rules.stdout)["rules"]] == [("shell_exec", "allow")]
        again = await trio.to_thread.run_sync(tern, "deny", pending.id)
        assert again.returncode != 0 and "already approved by cli:" in again.stderr
        never = await trio.to_thread.run_sync(tern, "approve", "ap_' OR 1=1 --")
        assert never.returncode != 0 and "no approval request has the id" in never.stderr
        conversations = await trio.to_thread.run_sync(tern, "conversations", "--json")
        assert [c["preview"] for c in json.loads(conversations.stdout)["conversations"]] == ["hello from a node"]
        shown = await trio.to_thread.run_sync(tern, "conversations", "show", "ctx-cli")
        assert "you: hello from a node" in shown.stdout and "bot: hi" in shown.stdout
        nursery.cancel_scope.cancel()
    assert ended[0].state == "approved" and ended[0].channel == "cli"


def test_the_commands_say_in_one_line_when_the_database_refuses(pg_server: Any, tmp_path: Path) -> None:
    config = _config(tmp_path, pg_server.url("postgres"), pg_server.password)
    wrong = _tern(config, "approvals", password="not-the-password-42")
    assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr
    assert "not-the-password-42" not in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr


# --- two kernels (nodes) booted on one database -------------------------------------------


def _node_config(tmp: Path, url: str, name: str, llm_url: str) -> Any:
    from runtime.config import AgentConfig, Config, ModelConfig, StateConfig

    return Config(agents=[AgentConfig(name="bot", kind="llm", model=ModelConfig(base_url=llm_url, model="m",
                                                                               timeout_secs=5))],
                  state=StateConfig(dir=str(tmp / name), store="postgres", postgres_url=url, node_id=name))


async def test_a_follow_up_on_another_node_sees_the_whole_conversation(pg_store: Store) -> None:
    from runtime.kernel.kernel import Kernel
    from tests.scripted_llm import ScriptedLLM, whole

    llm = ScriptedLLM(whole("Hi, Ada."), whole("You are Ada."))
    async with trio.open_nursery() as nursery:
        await nursery.start(llm.serve)
        a = Kernel(_node_config(pg_store.tmp, pg_store.url, "node-a", llm.url))
        b = Kernel(_node_config(pg_store.tmp, pg_store.url, "node-b", llm.url))
        await nursery.start(a.run)  # each boot applies the migrations it lacks, once
        await nursery.start(b.run)
        first = await a.agents.send("bot", "I am Ada.", owner=ALICE)
        second = await b.agents.send("bot", "Who am I?", context_id=first.context_id, owner=ALICE)
        with pytest.raises(Exception, match="no conversation has the id"):
            await b.agents.send("bot", "and me?", context_id=first.context_id, owner=BOB)
        assert [(m.role, m.content) for m in await a.conversations.history(first.context_id)] == [
            ("user", "I am Ada."), ("agent", "Hi, Ada."), ("user", "Who am I?"), ("agent", "You are Ada.")]
        nursery.cancel_scope.cancel()
    assert second.text == "You are Ada."
    said = [m["content"] for m in llm.requests[1]["messages"] if m["role"] in ("user", "assistant")]
    assert said == ["I am Ada.", "Hi, Ada.", "Who am I?"]  # node B's model turn had node A's exchange
