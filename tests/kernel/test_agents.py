"""Agents of the kinds in this build (echo, command, tool, llm) and the conversations llm agents keep."""

from __future__ import annotations

import json
import sqlite3
import sys

import pytest
import trio

from runtime.config import AgentConfig, Config, ModelConfig, StateConfig
from runtime.errors import AgentError, UnknownAgent
from runtime.kernel.conversations import Conversations
from runtime.kernel.kernel import Kernel
from tests.processes import gone, pid_in

PY = sys.executable


def kernel(tmp_path, *agents: AgentConfig) -> Kernel:
    return Kernel(Config(agents=list(agents), state=StateConfig(dir=str(tmp_path))))


async def test_echo_keeps_its_context_id_and_is_audited_but_stores_no_conversation(tmp_path):
    """Only agents that read their conversation back (llm) store it: see docs/decisions.md."""
    k = kernel(tmp_path, AgentConfig(name="echo", kind="echo"))
    first = await k.agents.send("echo", "hello")
    second = await k.agents.send("echo", "again", context_id=first.context_id)
    assert (first.text, second.text, second.context_id) == ("hello", "again", first.context_id)
    assert await k.conversations.history(first.context_id) == []
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["context_id"], r["outcome"]) for r in records] == [
        ("agent_message", first.context_id, "ok"), ("agent_message", first.context_id, "ok")]


async def test_an_llm_agents_conversation_is_committed_privately(tmp_path):
    from tests.scripted_llm import ScriptedLLM, whole

    llm = ScriptedLLM(whole("Hi."), whole("Again."))
    async with trio.open_nursery() as nursery:
        await nursery.start(llm.serve)
        k = kernel(tmp_path, AgentConfig(name="bot", kind="llm",
                                         model=ModelConfig(base_url=llm.url, model="m", timeout_secs=5)))
        first = await k.agents.send("bot", "hello")
        await k.agents.send("bot", "and?", context_id=first.context_id)
        nursery.cancel_scope.cancel()
    history = await k.conversations.history(first.context_id)
    assert [(m.role, m.content) for m in history] == [("user", "hello"), ("agent", "Hi."),
                                                      ("user", "and?"), ("agent", "Again.")]
    assert oct((tmp_path / "conversations.sqlite3").stat().st_mode & 0o777) == "0o600"


async def test_command_agent(tmp_path, monkeypatch):
    monkeypatch.setenv("TERN_TEST_SECRET", "do-not-pass-me")
    upper = AgentConfig(name="upper", kind="command", command=["tr", "a-z", "A-Z"])
    env = AgentConfig(
        name="env", kind="command", command=[PY, "-c", "import os, json; print(json.dumps(dict(os.environ)))"]
    )
    slow = AgentConfig(name="slow", kind="command", command=[PY, "-c", "import time; time.sleep(30)"], timeout_secs=0.5)
    fail = AgentConfig(name="fail", kind="command", command=[PY, "-c", "import sys; sys.exit('broken pipe dream')"])
    flood = AgentConfig(name="flood", kind="command", command=[PY, "-c", "print('x' * 100000)"], max_output_bytes=1000)
    k = kernel(tmp_path, upper, env, slow, fail, flood)
    assert (await k.agents.send("upper", "hello")).text == "HELLO"
    assert "TERN_TEST_SECRET" not in json.loads((await k.agents.send("env", "")).text)
    with trio.fail_after(5):
        with pytest.raises(AgentError, match="did not finish within 0.5 s"):
            await k.agents.send("slow", "x")
    with pytest.raises(AgentError, match="exited with code 1: broken pipe dream"):
        await k.agents.send("fail", "x")
    cut = (await k.agents.send("flood", "")).text
    assert cut.startswith("x" * 1000) and cut.endswith("[output cut at 1000 bytes]")


def grandchild_agent(tmp_path, **options) -> AgentConfig:
    """sh starts a sleep that would outlive it, writes its pid, and waits for it."""
    return AgentConfig(
        name="spawner",
        kind="command",
        command=["sh", "-c", f"sleep 300 & echo $! > {tmp_path / 'pid'}; wait"],
        **options,
    )


async def test_a_command_agents_grandchild_dies_with_it_on_timeout(tmp_path):
    k = kernel(tmp_path, grandchild_agent(tmp_path, timeout_secs=1))
    with trio.fail_after(5), pytest.raises(AgentError, match="did not finish within 1 s"):
        await k.agents.send("spawner", "x")
    assert await gone(await pid_in(tmp_path / "pid"))


async def test_a_command_agents_grandchild_dies_with_it_on_cancel(tmp_path):
    k = kernel(tmp_path, grandchild_agent(tmp_path))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(k.agents.send, "spawner", "x")
        grandchild = await pid_in(tmp_path / "pid")
        nursery.cancel_scope.cancel()
    assert await gone(grandchild)


async def test_a_command_agent_leaves_no_child_behind_when_it_exits(tmp_path):
    k = kernel(
        tmp_path,
        AgentConfig(name="daemonizer", kind="command", command=["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"]),
    )
    grandchild = int((await k.agents.send("daemonizer", "")).text)
    assert await gone(grandchild)


async def test_tool_agent(tmp_path):
    clock = AgentConfig(name="clock", kind="tool", tool="time_now")
    k = kernel(tmp_path, clock)
    assert (await k.agents.send("clock", "")).text.startswith("20")
    with pytest.raises(AgentError, match="invalid arguments for time_now"):
        await k.agents.send("clock", '{"zone": "UTC"}')  # a JSON object is the arguments: checked
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["kind"], r.get("caller"), r["outcome"]) for r in records] == [
        ("tool_call", "agent:clock", "ok"),
        ("agent_message", None, "ok"),
        ("tool_call", "agent:clock", "invalid"),
        ("agent_message", None, "error"),
    ]


async def test_unknown_agent_and_a_remote_agent_without_its_peer(tmp_path):
    k = kernel(tmp_path, AgentConfig(name="far", kind="remote", remote="peer"))
    with pytest.raises(UnknownAgent, match="no agent named 'ghost'"):
        await k.agents.send("ghost", "hi")
    with pytest.raises(AgentError, match="no \\[\\[a2a.external_agents\\]\\] entry named 'peer'"):
        await k.agents.send("far", "hi")


async def test_history_is_bounded(tmp_path):
    store = Conversations(tmp_path / "c.sqlite3", max_messages=5, max_bytes=45)  # 10-byte messages: 4 fit
    for i in range(10):
        await store.append("ctx", Conversations.message("user", "a", f"message {i:02d}"))
    assert [m.content for m in await store.history("ctx")] == [f"message {i:02d}" for i in (6, 7, 8, 9)]
    with sqlite3.connect(tmp_path / "c.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM messages").fetchone() == (4,)


async def test_count_bound(tmp_path):
    store = Conversations(tmp_path / "c.sqlite3", max_messages=3)
    for i in range(10):
        await store.append("ctx", Conversations.message("user", "a", str(i)))
    await store.append("other", Conversations.message("user", "a", "kept"))
    assert [m.content for m in await store.history("ctx")] == ["7", "8", "9"]
    assert [m.content for m in await store.history("other")] == ["kept"]


async def test_agent_tools(tmp_path):
    relay = AgentConfig(name="relay", kind="tool", tool="agent_send", description="forwards")
    echo = AgentConfig(name="echo", kind="echo", description="repeats")
    k = kernel(tmp_path, relay, echo)
    listed = await k.call_tool("agent_list")
    assert "relay (tool): forwards" in listed.text and "echo (echo): repeats" in listed.text
    reply = await k.agents.send("relay", '{"agent": "echo", "message": "via relay"}')
    assert reply.text == "via relay"
    with pytest.raises(AgentError, match="cannot send a message to itself"):
        await k.agents.send("relay", '{"agent": "relay", "message": "loop"}')
    with pytest.raises(AgentError, match="no agent named 'ghost'"):
        await k.agents.send("relay", '{"agent": "ghost", "message": "x"}')


async def test_agent_send_depth_is_capped(tmp_path):
    # n0 -> n1 -> n2 -> n3 -> e: tool agents forwarding the message inside their message.
    k = kernel(
        tmp_path,
        *(AgentConfig(name=f"n{i}", kind="tool", tool="agent_send") for i in range(4)),
        AgentConfig(name="e", kind="echo"),
    )

    def chain(*names: str) -> str:
        message = "hi"
        for name in reversed(names):
            message = json.dumps({"agent": name, "message": message})
        return message

    assert (await k.agents.send("n0", chain("n1", "e"))).text == "hi"  # two sends deep: fine
    with pytest.raises(AgentError, match="already 3 sends deep"):
        await k.agents.send("n0", chain("n1", "n2", "n3", "e"))


async def test_the_number_of_conversations_is_bounded(tmp_path):
    from runtime.kernel import conversations

    store = Conversations(tmp_path / "c.sqlite3", max_contexts=3)
    for i in range(conversations.CHECKPOINT_EVERY):  # the housekeeping runs every CHECKPOINT_EVERY appends
        await store.append(f"ctx{i % 5}", Conversations.message("user", "a", f"m{i}"))
    with sqlite3.connect(tmp_path / "c.sqlite3") as db:
        kept = {row[0] for row in db.execute("SELECT DISTINCT context_id FROM messages")}
    last = {f"ctx{i % 5}" for i in range(conversations.CHECKPOINT_EVERY - 3, conversations.CHECKPOINT_EVERY)}
    assert kept == last  # the three most recently used
