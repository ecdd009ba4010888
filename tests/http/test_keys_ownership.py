"""Conversations and approvals belong to the key that made them; the key's name (never
the key) is in the access log and the audit log; an old conversations file's rows
become the admin's."""

from __future__ import annotations

import json
import logging
import sqlite3
from functools import partial

import pytest
import trio

from runtime.config.keys import Caller
from runtime.errors import UnknownApproval
from runtime.kernel.approvals import Approvals
from runtime.kernel.conversations import Conversations
from tests.http.keyed import ADMIN, KEYS, client, start

ALICE = Caller("alice", frozenset({"message", "tasks"}))
BOB = Caller("bob", frozenset({"message", "tasks"}))
OPS = Caller("ops", frozenset({"approvals"}))


@pytest.fixture
async def served(nursery, tmp_path):
    return await start(nursery, tmp_path)


async def test_conversations_are_their_owners(served):
    node, url = served
    store = node.kernel.conversations
    await store.append("ctx-alice", Conversations.message("user", "echo", "secret plans"), owner="alice")
    async with client(url, "alice") as alice, client(url, "bob") as bob, client(url, "admin") as admin:
        assert [c["context_id"] for c in (await alice.get("/api/conversations")).json()["conversations"]] == \
            ["ctx-alice"]
        assert (await bob.get("/api/conversations")).json()["conversations"] == []
        assert [c["context_id"] for c in (await admin.get("/api/conversations")).json()["conversations"]] == \
            ["ctx-alice"]
        theirs, never = await bob.get("/api/conversations/ctx-alice"), await bob.get("/api/conversations/ctx-nope")
        assert theirs.status_code == never.status_code == 404
        assert theirs.json()["error"]["message"].replace("ctx-alice", "ID") == \
            never.json()["error"]["message"].replace("ctx-nope", "ID")
        assert (await bob.delete("/api/conversations/ctx-alice")).status_code == 404
        for route in ("message", "stream"):  # going on with another's conversation: not found
            resumed = await bob.post(f"/api/agents/echo/{route}", json={"message": "and?", "context_id": "ctx-alice"})
            assert resumed.status_code == 404 and "ctx-alice" in resumed.text, route
        assert (await alice.get("/api/conversations/ctx-alice")).json()["messages"][0]["content"] == "secret plans"
        # an A2A task in another's context fails with the same sentence; it never reads the history
        sent = await bob.post("/a2a/echo", headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}],
                                   "contextId": "ctx-alice"}}})
        task = sent.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_FAILED" and "no conversation" in json.dumps(task)
        assert (await admin.delete("/api/conversations/ctx-alice")).status_code == 200
    assert await store.history("ctx-alice") == []


async def test_an_old_conversations_file_becomes_the_admins(tmp_path):
    """A file from before keys (no owner column) is migrated: its rows are the admin's."""
    path = tmp_path / "conversations.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE messages (context_id TEXT NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                     "role TEXT NOT NULL, agent TEXT NOT NULL, content TEXT NOT NULL, time REAL NOT NULL);"
                     "INSERT INTO messages (context_id, role, agent, content, time) "
                     "VALUES ('old', 'user', 'a', 'hi', 1);")
    db.commit()
    db.close()
    store = Conversations(path)
    assert await store.owner("old") == "admin"
    assert await store.list(who=ALICE) == [] and await store.history("old", who=ALICE) == []
    assert [c["context_id"] for c in await store.list(who=Caller("admin", frozenset({"admin"})))] == ["old"]
    await store.append("new", Conversations.message("user", "a", "mine"), owner="alice")
    assert [c["context_id"] for c in await store.list(who=ALICE)] == ["new"]


async def test_approvals_are_answered_by_their_key_or_the_approvals_scope(nursery, autojump_clock):
    """A key sees its own runs' requests; it answers one only where the way its run came in
    lets callers decide for themselves (``self_approval``: here A2A's switch), and the
    scope ``approvals`` answers any."""
    approvals = Approvals(None, timeout_secs=60, self_approval=lambda origin: origin == "a2a")
    ended: dict[str, str] = {}

    async def ask(key: str, tool: str) -> None:
        ended[key] = (await approvals.request("bot", tool, {}, "d-" + tool, key=key, origin="a2a")).state

    nursery.start_soon(ask, "alice", "shell_exec")
    nursery.start_soon(ask, "bob", "file_write")
    with trio.fail_after(5):
        while len(await approvals.list()) < 2:
            await trio.sleep(0.01)
    mine = {a.tool: a for a in await approvals.list()}
    assert [a.tool for a in await approvals.list(who=ALICE)] == ["shell_exec"]
    assert {a.tool for a in await approvals.list(who=OPS)} == {"shell_exec", "file_write"}
    bobs = mine["file_write"].id
    with pytest.raises(UnknownApproval) as theirs:
        await approvals.get(bobs, ALICE)
    with pytest.raises(UnknownApproval) as never:
        await approvals.get("ap_never", ALICE)
    assert str(theirs.value).replace(bobs, "ID") == str(never.value).replace("ap_never", "ID")
    with pytest.raises(UnknownApproval):
        await approvals.decide(bobs, True, who=ALICE)
    await approvals.decide(mine["shell_exec"].id, True, by="alice", who=ALICE)
    await approvals.decide(bobs, False, by="ops", who=OPS)
    with trio.fail_after(5):
        while len(ended) < 2:
            await trio.sleep(0.01)
    assert ended == {"alice": "approved", "bob": "denied"}


async def test_the_logs_name_the_key_never_the_key_itself(served, caplog):
    node, url = served
    caplog.set_level(logging.INFO, logger="tern.http.access")
    async with client(url, "alice") as alice, client(url, "admin") as admin:
        assert (await alice.post("/api/agents/echo/message", json={"message": "hi"})).status_code == 200
        assert (await admin.get("/api/status")).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "tern.http.access"]
    assert any("/api/agents/echo/message 200" in line and line.endswith(" alice") for line in lines), lines
    assert any("/api/status 200" in line and line.endswith(" admin") for line in lines), lines
    audit = node.kernel.pipeline.audit
    records = [json.loads(line) for line in audit.path.read_text().splitlines()]
    sent = [r for r in records if r.get("kind") == "agent_message" or r.get("event") == "agent_message"]
    assert sent and sent[-1]["key"] == "alice", records[-3:]
    everything = audit.path.read_text() + "\n".join(lines)
    assert KEYS["alice"] not in everything and ADMIN not in everything


def test_an_old_approvals_file_becomes_the_admins(tmp_path):
    """A file from before keys (no key_name column) gains it: its requests are the admin's."""
    path = tmp_path / "approvals.sqlite3"
    Approvals(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX requests_by_key")  # an index on it came later too
    db.execute("ALTER TABLE requests DROP COLUMN key_name")
    db.execute("INSERT INTO requests (id, agent, tool, arguments, digest, caller, context_id, created, expires, state, "
               "owner) VALUES ('ap_old', 'bot', 'shell_exec', '{}', 'd', 'agent:bot', '', 1, 2, 'denied', 'x')")
    db.commit()
    db.close()
    approvals = Approvals(path)
    assert trio.run(approvals.get, "ap_old").key == "admin"
    assert trio.run(partial(approvals.list, None, who=ALICE)) == []
    assert [a.id for a in trio.run(partial(approvals.list, None, who=OPS))] == ["ap_old"]
    with pytest.raises(UnknownApproval):
        trio.run(approvals.get, "ap_old", ALICE)
