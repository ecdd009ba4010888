"""The A2A task store's byte budgets and subscriber cap, attacked through HTTP against a
served node (the `start` of test_server with small limits): big messages cannot grow
memory past ``max_store_bytes``, a message past ``max_task_bytes`` is refused, a store
file far over budget boots in bounded memory and time, and followers of one task are
capped. Bounded: tens of requests of at most 3 MB, on 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import sqlite3
import time
import tracemalloc

import httpx
import msgspec
import trio

from runtime.a2a.model import Artifact, Message, Task
from runtime.config import A2aConfig, AgentConfig, Config, StateConfig
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from tests.a2a.test_server import V10, rpc, sse

MB = 1_000_000
MiB = 1024 * 1024


async def serve(nursery, config):
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    node.http_bound = ("127.0.0.1", bound[0][1])
    return node, f"http://127.0.0.1:{bound[0][1]}"


def small_config(tmp_path, **a2a):
    agents = [AgentConfig(name="echo", kind="echo", description="Echoes."),
              AgentConfig(name="sleepy", kind="command", command=["sh", "-c", "sleep 30"])]
    return Config(agents=agents, state=StateConfig(dir=str(tmp_path)),
                  a2a=A2aConfig(enabled=True, default_agent="echo", **a2a))


def message(text):
    """A 1.0 message with a short id (the id counts toward the task's bytes too)."""
    return {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": text}]}


async def held_bytes(node) -> int:
    """What the engine really holds: every stored task as JSON (independent of its own count)."""
    return sum(len(msgspec.json.encode(task)) for task in (await node.a2a.engine.list())[0])


async def test_big_messages_stay_within_the_store_budget(nursery, tmp_path):
    node, url = await serve(nursery, small_config(tmp_path, max_task_bytes=3 * MiB, max_store_bytes=4 * MiB))
    async with httpx.AsyncClient(timeout=30) as client:
        for i in range(40):  # 40 messages of 1 MB, each echoed back (about 2 MB a task)
            sent = (await client.post(url + "/a2a", headers=V10, json=rpc("SendMessage", {
                "message": message(f"{i:03d}" + "x" * MB)}))).json()
            assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", sent["result"]["task"]["status"]
            assert (await held_bytes(node)) <= 4 * MiB
        too_big = (await client.post(url + "/a2a", headers=V10, json=rpc("SendMessage", {
            "message": message("y" * (3 * MB + 200_000))}))).json()
        assert too_big["error"]["code"] == -32602 and "max_task_bytes" in too_big["error"]["message"]
        assert (await client.get(url + "/health")).status_code == 200  # still serving
    assert (await held_bytes(node)) <= node.a2a.engine.bytes <= 4 * MiB  # the count is never below the truth


async def test_live_tasks_filling_the_budget_refuse_new_work(nursery, tmp_path):
    node, url = await serve(nursery, small_config(tmp_path, max_task_bytes=2 * MiB, max_store_bytes=3 * MiB))
    async with httpx.AsyncClient(timeout=30) as client:
        answers = []
        for i in range(5):  # sleepy tasks stay live: they cannot be evicted
            answers.append((await client.post(url + "/a2a/sleepy", headers=V10, json=rpc("SendMessage", {
                "message": message(f"{i}" + "z" * MB), "configuration": {"returnImmediately": True}}))).json())
        refused = [a for a in answers if "error" in a]
        assert len(refused) >= 2 and all("unfinished tasks" in a["error"]["message"] for a in refused)
        assert (await held_bytes(node)) <= node.a2a.engine.bytes <= 3 * MiB
        for answer in answers:
            if "result" in answer:
                task_id = answer["result"]["task"]["id"]
                await client.post(url + "/a2a", headers=V10, json=rpc("CancelTask", {"id": task_id}))


def write_big_store(path, count: int, size: int) -> list[str]:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, body BLOB NOT NULL)")
    ids = []
    for seq in range(count):
        task = Task(id=f"t{seq:04d}", context_id="c", agent="echo", state="completed",
                    history=[Message(role="user", parts=[{"text": "h" * size}])],
                    artifacts=[Artifact(parts=[{"text": "ok"}])])
        db.execute("INSERT INTO tasks VALUES (?, ?, ?)", (task.id, seq, msgspec.json.encode(task)))
        ids.append(task.id)
    db.execute("INSERT INTO tasks VALUES ('huge', 999999, ?)", (b'{"id":"huge"' + b" " * (9 * MiB) + b"}",))
    db.commit()
    db.close()
    return ids


async def test_a_store_over_budget_boots_in_bounded_memory_and_time(nursery, tmp_path):
    store = tmp_path / "a2a_tasks.sqlite3"
    ids = write_big_store(store, 80, MB)  # about 90 MB on disk, against a 4 MiB budget
    assert store.stat().st_size > 80 * MB
    config = small_config(tmp_path, max_task_bytes=2 * MiB, max_store_bytes=4 * MiB, persist_tasks=True)
    tracemalloc.start()
    started = time.monotonic()
    try:
        node = Node(config)  # the store is read here, before anything runs
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MiB, peak
    assert elapsed < 10
    assert node.a2a.engine.bytes <= 4 * MiB
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{bound[0][1]}"
    async with httpx.AsyncClient(timeout=30) as client:
        newest = (await client.post(url + "/a2a", headers=V10, json=rpc("GetTask", {"id": ids[-1]}))).json()
        assert newest["result"]["id"] == ids[-1]  # the newest are kept
        oldest = (await client.post(url + "/a2a", headers=V10, json=rpc("GetTask", {"id": ids[0]}))).json()
        assert oldest["error"]["code"] == -32001  # the oldest were dropped
        huge = (await client.post(url + "/a2a", headers=V10, json=rpc("GetTask", {"id": "huge"}))).json()
        assert huge["error"]["code"] == -32001  # past max_task_bytes: never read
    with trio.fail_after(30):  # the dropped rows' space is given back (VACUUM in the writer thread)
        while store.stat().st_size > 8 * MiB:
            await trio.sleep(0.05)


async def test_subscribers_to_one_task_are_capped(nursery, tmp_path):
    node, url = await serve(nursery, small_config(tmp_path, max_subscribers_per_task=4))
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=20)) as client:
        sent = (await client.post(url + "/a2a/sleepy", headers=V10, json=rpc("SendMessage", {
            "message": message("zzz"), "configuration": {"returnImmediately": True}}))).json()["result"]["task"]
        subscribe = rpc("SubscribeToTask", {"id": sent["id"]})
        async with contextlib.AsyncExitStack() as streams:
            opened = 0
            refused = []
            for _ in range(12):  # three times the cap
                response = await streams.enter_async_context(
                    client.stream("POST", url + "/a2a", headers=V10, json=subscribe))
                if response.headers["content-type"].startswith("text/event-stream"):
                    opened += 1
                else:
                    refused.append(msgspec.json.decode(await response.aread()))
            assert opened == 4 and len(refused) == 8
            assert all("max_subscribers_per_task" in r["error"]["message"] for r in refused)
            assert (await client.get(url + "/health")).status_code == 200
            legacy = sse((await client.post(url + "/a2a", json=rpc("tasks/resubscribe", {"id": sent["id"]}))).text)
            assert len(legacy) == 1  # 0.3 streams answer errors as one event
            legacy = legacy[0]
            assert "max_subscribers_per_task" in legacy["error"]["message"]
        with trio.fail_after(10):  # the followers hung up: their places free up
            while True:
                async with client.stream("POST", url + "/a2a", headers=V10, json=subscribe) as response:
                    if response.headers["content-type"].startswith("text/event-stream"):
                        break
                await trio.sleep(0.05)
        await client.post(url + "/a2a", headers=V10, json=rpc("CancelTask", {"id": sent["id"]}))
        again = await client.post(url + "/a2a/sleepy", headers=V10, json=rpc("SendMessage", {
            "message": message("zzz2"), "configuration": {"returnImmediately": True}}))
        task_id = again.json()["result"]["task"]["id"]
        async with client.stream("POST", url + "/a2a", headers=V10,
                                 json=rpc("SubscribeToTask", {"id": task_id})) as response:
            assert response.headers["content-type"].startswith("text/event-stream")  # a new task: room again
        await client.post(url + "/a2a", headers=V10, json=rpc("CancelTask", {"id": task_id}))
