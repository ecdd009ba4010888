"""Chaos: 2,000 tasks through HAProxy to three real nodes on one PostgreSQL while one node
after another is killed with SIGKILL (with everything it started) and restarted every few
seconds, and a few subscribers follow tasks through it all. Afterwards every acknowledged
task is in a final state (none lost, none stuck), no message made two tasks, and every
subscriber saw its task's events in order.

To keep it under a few minutes on two cores, ``[state] lease_secs`` is 3 (15 by default):
a dead node's live tasks are failed by another node within 3 s. Each task is the ``steps``
agent with 0.05 s pauses (three statuses, then done: alive ~0.2 s), sent without waiting
(``returnImmediately``) at most 40 a second (~50 s in all: some eight kills land), so a killed
node always has some work in flight. A send whose
answer was lost with its node is not acknowledged and is sent again with a new message id
(what a client does); the duplicate check counts tasks per message id. Each start of a node
is a new node id (a Deployment's new pod); a node that comes back under its old id is the
last test."""

from __future__ import annotations

import itertools
import json
import time

import httpx
import pytest
import trio

from tests import peers
from tests.haproxy import haproxy_bin
from tests.scaleout.cluster import Cluster
from tests.scaleout.test_cluster import V10, rpc, said


TASKS = 2000
SENDERS = 12
RATE = 40.0  # sends per second at most: 2,000 tasks take ~50 s, a dozen kills
SUBSCRIBERS = 4
KILL_EVERY_SECS = 3.0
DOWN_SECS = 1.0
LEASE_SECS = 3.0
FINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
ORDER = ["step 1", "step 2", "step 3", "done"]


def in_order(seen: list[tuple[str, str]]) -> bool:
    """Statuses as a subscriber saw them across reconnects: never back to an earlier step
    (a reconnect's snapshot may repeat the last one), nothing after a final state."""
    position, ended = -1, False
    for state, text in seen:
        if ended:
            return False
        if text in ORDER:
            now = ORDER.index(text)
            if now < position:
                return False
            position = now
        ended = state in FINAL
    return ended


@pytest.mark.slow
async def test_two_thousand_tasks_while_nodes_die(pg_server, tmp_path):
    peers.require(haproxy_bin)
    cluster = await trio.to_thread.run_sync(lambda: Cluster(
        tmp_path, pg_server.create_database(), nodes=3, lease_secs=LEASE_SECS,
        a2a_extra="max_tasks = 10000\n", named=False).start())
    acked: dict[str, str] = {}  # message id -> task id
    unacked: list[str] = []  # message ids whose answer never came
    answers: dict[str, int] = {}
    kills: list[str] = []
    followed: dict[str, list[tuple[str, str]]] = {}
    resubscribes = [0]
    ids = itertools.count()
    began = time.monotonic()
    try:
        async with httpx.AsyncClient(headers={**cluster.headers, **V10}, timeout=30,
                                     limits=httpx.Limits(max_connections=SENDERS + SUBSCRIBERS + 4)) as client:

            async def send(text: str) -> str | None:
                message_id = f"chaos-{next(ids)}"
                try:
                    response = await client.post(cluster.url + "/a2a/steps", json=rpc("SendMessage", {
                        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]},
                        "configuration": {"returnImmediately": True}}))
                    body = response.json() if response.status_code == 200 else {}
                except (httpx.TransportError, ValueError):
                    response, body = None, {}
                answers[str(response.status_code if response else "dropped")] = \
                    answers.get(str(response.status_code if response else "dropped"), 0) + 1
                if "result" in body:
                    acked[message_id] = body["result"]["task"]["id"]
                    return body["result"]["task"]["id"]
                unacked.append(message_id)
                await trio.sleep(0.05)
                return None

            tokens_in, tokens = trio.open_memory_channel(0)

            async def pace() -> None:
                while len(acked) < TASKS:
                    await tokens_in.send(None)
                    await trio.sleep(1 / RATE)
                await tokens_in.aclose()

            async def sender() -> None:
                async for _ in tokens:
                    await send("0.05")

            async def subscriber() -> None:
                while len(acked) < TASKS:
                    task_id = await send("0.4")
                    if task_id is not None:
                        followed[task_id] = []
                        with trio.move_on_after(LEASE_SECS * 4 + 10):  # a task that never ends: seen so
                            await follow(task_id, followed[task_id])

            async def follow(task_id: str, seen: list[tuple[str, str]]) -> None:
                """Every status of the task until a final one, resubscribing when a stream ends early."""
                while True:
                    try:
                        async with client.stream("POST", cluster.url + "/a2a/steps",
                                                 json=rpc("SubscribeToTask", {"id": task_id})) as stream:
                            async for line in stream.aiter_lines():
                                if line.startswith(("data:", "{")):  # an event, or a plain JSON-RPC error
                                    seen.append(_status(line.removeprefix("data:")))
                    except httpx.TransportError:
                        pass
                    if seen and seen[-1][0] == "error":
                        # it ended while no stream was open (A2A refuses to follow a finished task): read it
                        got = (await client.post(cluster.url + "/a2a", json=rpc("GetTask", {"id": task_id}))).json()
                        if _state(got.get("result", got)) in FINAL:
                            seen[-1] = (_state(got["result"]), said(got["result"]["status"]))
                    if seen and seen[-1][0] in FINAL | {"error"}:
                        return
                    resubscribes[0] += 1  # the stream ended early: its node died; follow on another
                    await trio.sleep(0.2)

            async def chaos() -> None:
                for node in itertools.cycle(cluster.nodes):
                    await trio.sleep(KILL_EVERY_SECS)
                    if len(acked) >= TASKS:
                        return
                    node.kill()
                    kills.append(f"{node.name}@{time.monotonic() - began:.0f}s")
                    await trio.sleep(DOWN_SECS)
                    await trio.to_thread.run_sync(node.start)

            with trio.fail_after(TASKS / RATE * 2 + 60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(chaos)
                    nursery.start_soon(pace)
                    for _ in range(SUBSCRIBERS):
                        nursery.start_soon(subscriber)
                    for _ in range(SENDERS):
                        nursery.start_soon(sender)
            sent_secs = time.monotonic() - began
            for node in cluster.nodes:  # every node is back before the checks
                if node.process.poll() is not None:
                    await trio.to_thread.run_sync(node.start)
            await trio.to_thread.run_sync(cluster.proxy.wait_up, 3)

            # Every acknowledged task reaches a final state within the lease (plus slack), on any node.
            states: dict[str, dict] = {}

            async def get(task_id: str) -> None:
                answer = (await client.post(cluster.url + "/a2a", json=rpc("GetTask", {"id": task_id}))).json()
                states[task_id] = answer.get("result") or answer

            deadline = trio.current_time() + LEASE_SECS * 4 + 30
            pending = set(acked.values())
            while pending and trio.current_time() < deadline:
                async with trio.open_nursery() as nursery:
                    for task_id in list(pending)[:50]:
                        nursery.start_soon(get, task_id)
                pending = {t for t in pending if t not in states or _state(states[t]) not in FINAL | {"lost"}}
                if pending and all(t in states for t in pending):
                    await trio.sleep(0.5)
            # No message made two tasks: every task the nodes list, by the message that started it.
            per_message: dict[str, list[str]] = {}
            token = ""
            while True:
                page = (await client.post(cluster.url + "/a2a", json=rpc("ListTasks", {
                    "pageSize": 100, "pageToken": token, "historyLength": 1}))).json()["result"]
                for task in page["tasks"]:
                    first = (task.get("history") or [{}])[0].get("messageId", "")
                    per_message.setdefault(first, []).append(task["id"])
                token = page["nextPageToken"]
                if not token:
                    break
    finally:
        await trio.to_thread.run_sync(cluster.stop)

    outcomes: dict[str, int] = {}
    for task in states.values():
        outcomes[_state(task)] = outcomes.get(_state(task), 0) + 1
    print(f"\nchaos: {len(acked)} acknowledged in {sent_secs:.0f} s ({len(unacked)} sends unanswered: {answers}), "
          f"kills {kills}, final states {outcomes}, {len(followed)} followed ({resubscribes[0]} resubscribes)")
    assert len(acked) >= TASKS and len(kills) >= 3
    lost = [t for t in acked.values() if _state(states[t]) == "lost"]
    assert not lost, f"{len(lost)} acknowledged tasks are gone, e.g. {states[lost[0]]}"
    stuck = [t for t in acked.values() if _state(states[t]) not in FINAL]
    assert not stuck, f"{len(stuck)} acknowledged tasks never finished, e.g. {states[stuck[0]]['status']}"
    assert set(acked.values()) <= {t for ts in per_message.values() for t in ts}, "an acknowledged task is not listed"
    duplicated = {m: ts for m, ts in per_message.items() if m.startswith("chaos-") and len(ts) > 1}
    assert not duplicated, duplicated
    assert len(acked.values()) == len(set(acked.values()))
    failed = [t for t in states.values() if t["status"]["state"] == "TASK_STATE_FAILED"]
    assert all(said(t["status"]) for t in failed), "a task failed without saying why"
    disordered = {task_id: seen for task_id, seen in followed.items() if not in_order(seen)}
    assert followed and not disordered, disordered


def test_a_node_back_under_its_own_id_fails_what_it_was_running(pg_server, tmp_path):
    """``[state] node_id`` fixed (a StatefulSet): the node is killed and back before its lease
    runs out, so no other node reaps it; the task its first life ran must fail all the same."""
    peers.require(haproxy_bin)
    with Cluster(tmp_path, pg_server.create_database(), nodes=2, lease_secs=LEASE_SECS) as cluster:
        a, b = cluster.nodes
        with httpx.Client(headers={**cluster.headers, **V10}, timeout=30) as client:
            sent = client.post(a.url + "/a2a/slow", json=rpc("SendMessage", {
                "message": {"messageId": "m-restart", "role": "ROLE_USER", "parts": [{"text": "zzz"}]},
                "configuration": {"returnImmediately": True}})).json()["result"]["task"]
            a.kill()
            a.start()
            deadline = time.monotonic() + LEASE_SECS * 3 + 5
            while (task := client.post(b.url + "/a2a", json=rpc("GetTask", {"id": sent["id"]})).json()["result"])[
                    "status"]["state"] not in FINAL:
                assert time.monotonic() < deadline, f"still {task['status']['state']} after the node came back"
                time.sleep(0.2)
    assert task["status"]["state"] == "TASK_STATE_FAILED" and said(task["status"])


def _state(task: dict) -> str:
    """A GetTask answer's state; "lost" for an error (the task is not found)."""
    return task["status"]["state"] if "status" in task else "lost"


def _status(line: str) -> tuple[str, str]:
    """(state, text) of one event of SubscribeToTask (1.0); an artifact update: ("", ""); an error: ("error", why)."""
    event = json.loads(line)
    if "error" in event:  # the task is not found, or the node cannot follow it
        return "error", event["error"].get("message", "")
    result = event.get("result", {})
    status = (result.get("task") or result.get("statusUpdate") or {}).get("status")
    return (status["state"], said(status)) if status else ("", "")
