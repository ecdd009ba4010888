"""A2A tasks shared by several nodes in one real PostgreSQL (``shared.py``): each node is
a task engine with its own pool and listener and node id, in one trio run."""

from __future__ import annotations

import contextlib

import pytest
import trio

from runtime.a2a.model import ArtifactEvent, Artifact, Message, StatusEvent, text_of
from runtime.a2a.server.engine import (Outcome, TaskEngine, TaskNotCancelable, TaskNotFound, UnsupportedOperation)
from runtime.a2a.server.push import PushNotifier
from runtime.a2a.server.shared import SharedTasks
from runtime.net.guard import AddressPolicy
from tests.a2a.test_push import webhook
from runtime.config.keys import Caller
from runtime.pg import Database
from runtime.pg.listen import Listener

STARTED: dict[str, trio.Event] = {}
STOPPED: set[str] = set()


def msg(text, task_id=None, context_id=None):
    return Message(role="user", parts=[{"text": text}], task_id=task_id, context_id=context_id)


async def scripted(task, message, report):
    """'ask' waits for input, 'hang' runs until cancelled (noted in STOPPED), 'chunks N'
    sends N artifact chunks a tick apart, 'question' asks while it runs, else echo."""
    report.working()
    text = text_of(message.parts)
    STARTED.setdefault(task.id, trio.Event()).set()
    if text == "ask":
        return Outcome(state="input-required", text="which one?")
    if text == "hang":
        try:
            await trio.sleep_forever()
        finally:
            STOPPED.add(task.id)
    if text.startswith("chunks"):
        for i in range(int(text.split()[1])):
            report.artifact(Artifact(parts=[{"text": f"{i} "}], artifact_id="a"), append=i > 0, last_chunk=False)
            await trio.sleep(0.02)
        return Outcome(state="completed", text="done")
    if text == "question":
        answered = trio.Event()
        said: list[str] = []

        def answer(message, caller):
            said.append(f"{text_of(message.parts)} from {caller}")
            answered.set()
            return "thanks"

        report.ask(Message(role="agent", parts=[{"text": "sure?"}]), answer)
        with trio.fail_after(20):
            await answered.wait()
        return Outcome(state="completed", text=said[0])
    return Outcome(state="completed", text=f"echo: {text} on {task.agent}")


class Node:
    def __init__(self, url: str, name: str, lease_secs: float = 15.0) -> None:
        self.db = Database(url, pool_size=4)
        self.listener = Listener(self.db, poll_secs=0.1)
        self.engine = TaskEngine(scripted)
        self.shared = SharedTasks(self.db, self.listener, name, lease_secs=lease_secs)
        self.shared.attach(self.engine)
        self.push = PushNotifier(self.engine, AddressPolicy())
        self.push.share(self.shared)
        self.scope = trio.CancelScope()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with self.scope:
            await self.db.open()
            async with trio.open_nursery() as nursery:
                await nursery.start(self.listener.run)
                await nursery.start(self.engine.run)
                await nursery.start(self.push.run)
                task_status.started()
        self.db.close()


@contextlib.asynccontextmanager
async def cluster(url: str, count: int = 2, **kwargs):
    nodes = [Node(url, f"node-{i}", **kwargs) for i in range(count)]
    async with trio.open_nursery() as nursery:
        for node in nodes:
            await nursery.start(node.run)
        with trio.fail_after(30):
            while not all(node.listener.connected for node in nodes):
                await trio.sleep(0.05)
        yield nodes
        nursery.cancel_scope.cancel()


async def until(predicate, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(0.02)


async def test_any_node_answers_for_any_task(pg_url: str) -> None:
    async with cluster(pg_url) as (a, b):
        task = await a.engine.send("echo", msg("hi"))
        seen = await b.engine.find(task.id)  # acknowledged = written: B reads it at once
        assert seen.id == task.id and seen.state in ("submitted", "working", "completed")
        done = await b.engine.wait(task.id)
        assert done.state == "completed" and done.artifacts[0].parts == [{"text": "echo: hi on echo"}]
        assert a.engine.peek(task.id) is None  # the work ended: A no longer holds it
        alice = Caller("alice", frozenset({"tasks"}))
        mine = await b.engine.send("echo", msg("mine"), who=alice)
        await a.engine.wait(mine.id)
        with pytest.raises(TaskNotFound):
            await a.engine.find(task.id, alice)  # another's: not found, on every node
        listed, total = await a.engine.list(who=alice)
        assert [t.id for t in listed] == [mine.id] and total == 1
        _, total = await b.engine.list()
        assert total == 2
        page, total = await b.engine.list(offset=1, limit=1)
        assert total == 2 and len(page) == 1 and page[0].id == task.id  # newest first
        assert (await a.engine.list(context_id=mine.context_id))[1] == 1
        assert (await a.engine.list(state="completed"))[1] == 2
        with pytest.raises(TaskNotFound):
            await b.engine.find("never-was")


async def test_a_cancel_on_another_node_stops_the_work(pg_url: str) -> None:
    async with cluster(pg_url) as (a, b):
        task = await a.engine.send("hang", msg("hang"))
        with trio.fail_after(10):
            await STARTED.setdefault(task.id, trio.Event()).wait()
        receive = await a.engine.subscribe(task.id)  # a stream on A ends with the cancel made on B
        canceled = await b.engine.cancel(task.id)
        assert canceled.state == "canceled"
        with trio.fail_after(10):
            events = [event async for event in receive]
        assert events[-1].state == "canceled" and events[-1].final
        await until(lambda: _true(task.id in STOPPED))
        assert a.engine.peek(task.id) is None
        with pytest.raises(TaskNotCancelable):
            await a.engine.cancel(task.id)
        assert (await a.engine.find(task.id)).state == "canceled"


async def _true(value: bool) -> bool:
    return value


async def test_a_stale_snapshot_never_overwrites_a_newer_state(pg_url: str) -> None:
    """a2a-python #1188: node A's work finishes after node B canceled its task; A's write
    of "completed", made from the snapshot before the cancel, is refused, and A adopts
    the cancel instead."""
    async with cluster(pg_url) as (a, b):
        gate = trio.Event()

        async def slow(task, message, report):
            report.working()
            with trio.CancelScope(shield=True):  # the work does not notice the cancel in time
                await gate.wait()
            return Outcome(state="completed", text="too late")

        a.engine.runner = slow
        task = await a.engine.send("slow", msg("go"))
        await until(lambda: _state(b, task.id, "working"))
        a.shared._check.clear()
        a.listener._followers.clear()  # A does not hear the cancel: only its own write can find out
        await b.engine.cancel(task.id)
        gate.set()
        await until(lambda: _true(a.engine.peek(task.id) is None))
        final = await b.engine.find(task.id)
        assert final.state == "canceled" and final.artifacts == []
        events = await a.db.run(lambda c: c.execute(
            "SELECT seq, body FROM a2a_task_events WHERE task_id = %s ORDER BY seq", (task.id,)).fetchall())
        seqs = [seq for seq, _ in events]
        assert seqs == sorted(set(seqs))  # each version once (a write with no event moves it by one)
        assert not any("too late" in body for _, body in events)
        assert sum('"canceled"' in body for _, body in events) == 1
        assert events[-1][0] == final.version


async def _state(node: Node, task_id: str, state: str) -> bool:
    return (await node.engine.find(task_id)).state == state


async def test_a_stream_on_another_node_is_in_order_across_a_database_restart(pg_url: str, pg_server) -> None:
    async with cluster(pg_url) as (a, b):
        task = await a.engine.send("chunky", msg("chunks 60"))
        seen = await b.engine.find(task.id)
        receive = await b.engine.subscribe(task.id, after=seen.version)
        got: list = []

        async def read() -> None:
            async for event in receive:
                got.append(event)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)  # until the final event
                await trio.sleep(0.3)
                await trio.to_thread.run_sync(pg_server.restart, 0.5)
        chunks = [e.artifact.parts[0]["text"] for e in got if isinstance(e, ArtifactEvent)]
        before = [part["text"] for artifact in seen.artifacts for part in artifact.parts]  # in the snapshot
        assert before + chunks == [f"{i} " for i in range(60)] + ["done"]  # every event after it, in order, once
        assert isinstance(got[-1], StatusEvent) and got[-1].state == "completed"
        assert (await b.engine.find(task.id)).artifacts[0].parts[59] == {"text": "59 "}


async def test_a_task_waiting_for_its_client_goes_on_on_any_node(pg_url: str) -> None:
    async with cluster(pg_url) as (a, b):
        task = await a.engine.send("echo", msg("ask"))
        assert (await a.engine.wait(task.id)).state == "input-required"
        await until(lambda: _true(a.engine.peek(task.id) is None))
        again = await b.engine.send("echo", msg("the red one", task_id=task.id))
        assert again.id == task.id
        done = await a.engine.wait(task.id)
        assert done.state == "completed" and len(done.history) == 4
        with pytest.raises(UnsupportedOperation, match="completed"):
            await a.engine.send("echo", msg("more", task_id=task.id))


async def test_two_nodes_claiming_one_task_one_wins(pg_url: str) -> None:
    async with cluster(pg_url) as (a, b):
        task = await a.engine.send("echo", msg("ask"))
        await a.engine.wait(task.id)
        await until(lambda: _true(a.engine.peek(task.id) is None))
        outcomes: list = []

        async def claim(node: Node, text: str) -> None:
            try:
                outcomes.append(await node.engine.send("echo", msg(text, task_id=task.id)))
            except UnsupportedOperation as exc:
                outcomes.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim, a, "one")
            nursery.start_soon(claim, b, "two")
        assert sum(isinstance(o, UnsupportedOperation) for o in outcomes) == 1, outcomes
        done = await a.engine.wait(task.id)
        assert done.state == "completed" and len(done.history) == 4


async def test_an_answer_to_work_on_another_node_is_forwarded(pg_url: str) -> None:
    async with cluster(pg_url) as (a, b):
        task = await a.engine.send("echo", msg("question"))
        await until(lambda: _asking(b, task.id))
        answered = await b.engine.send("echo", msg("yes", task_id=task.id), caller="a2a:10.0.0.9")
        assert answered.id == task.id and answered.state in ("working", "completed")
        done = await b.engine.wait(task.id)
        assert done.state == "completed" and done.artifacts[0].parts[0]["text"] == "yes from a2a:10.0.0.9"


async def _asking(node: Node, task_id: str) -> bool:
    return (await node.engine.find(task_id)).asking


async def test_a_node_that_stops_renewing_its_lease_has_its_tasks_failed(pg_url: str) -> None:
    async with cluster(pg_url, lease_secs=0.6) as (a, b):
        task = await a.engine.send("hang", msg("hang"))
        await until(lambda: _state(b, task.id, "working"))
        a.shared._stop = _nothing  # A's process "dies": no clean stop
        a.scope.cancel()
        await until(lambda: _true(task.id in STOPPED))
        # B fails it within the lease
        began = trio.current_time()
        await until(lambda: _state(b, task.id, "failed"), timeout=5.0)
        assert trio.current_time() - began < 0.6 + 0.3
        failed = await b.engine.find(task.id)
        assert "node node-0 stopped answering (no lease renewal for 0.6 s)" in text_of(failed.status_message.parts)


async def test_more_live_tasks_than_a_reaper_pass_all_fail_within_the_lease(pg_url: str) -> None:
    """A dead node with 450 live tasks (REAP_BATCH is 100): one round reaps them all."""
    async with cluster(pg_url, lease_secs=1.0) as (a, b):
        tasks = [await a.engine.send("hang", msg("hang")) for _ in range(450)]
        await until(lambda: _state(b, tasks[-1].id, "working"))
        a.shared._stop = _nothing
        a.scope.cancel()
        await until(lambda: _true(all(t.id in STOPPED for t in tasks)))
        began = trio.current_time()

        async def all_failed() -> bool:
            return await b.db.run(lambda conn: conn.execute(
                "SELECT count(*) FROM a2a_tasks WHERE id = ANY(%s) AND state = 'failed'",
                ([t.id for t in tasks],)).fetchone()[0]) == len(tasks)

        await until(all_failed, timeout=5.0)
        assert trio.current_time() - began < 1.0 + 0.5


async def _nothing() -> None:
    return None


async def test_a_clean_stop_fails_its_own_live_tasks(pg_url: str) -> None:
    async with cluster(pg_url) as (a, b):
        task = await a.engine.send("hang", msg("hang"))
        await until(lambda: _state(b, task.id, "working"))
        a.scope.cancel()
        await until(lambda: _state(b, task.id, "failed"), timeout=5.0)
        assert "tern stopped" in text_of((await b.engine.find(task.id)).status_message.parts)


async def test_push_configs_are_shared_and_each_event_is_posted_once(pg_url: str, nursery) -> None:
    hook, received = await webhook(nursery)
    async with cluster(pg_url, count=3) as (a, b, c):
        task = await a.engine.send("echo", msg("ask"))  # waits for its client: no node runs it
        await a.engine.wait(task.id)
        await until(lambda: _true(a.engine.peek(task.id) is None))
        made = await b.push.set(task.id, {"url": hook, "token": "tok-1", "id": "mine"}, "1.0")
        assert made["id"] == "mine"
        assert [c["id"] for c in await c.push.list(task.id, "1.0")] == ["mine"]
        assert (await a.push.get(task.id, "mine", "1.0"))["url"] == hook
        await c.engine.send("echo", msg("the red one", task_id=task.id))  # C takes it, and its webhook
        await c.engine.wait(task.id)
        with trio.fail_after(10):
            while not received or received[-1][1].get("statusUpdate", {}).get("status", {}).get("state") \
                    != "TASK_STATE_COMPLETED":
                await trio.sleep(0.05)
        await trio.sleep(0.5)  # anything a second node would have sent would be here by now
        kinds = [next(iter(body)) for _, body in received]
        assert kinds == ["statusUpdate", "statusUpdate", "artifactUpdate", "statusUpdate"], kinds
        assert all(headers["x-a2a-notification-token"] == "tok-1" for headers, _ in received)
        await a.push.delete(task.id, "mine")
        assert await b.push.list(task.id, "1.0") == []


async def test_the_database_away_fails_a_send_clearly_and_nothing_half_written(pg_url: str, pg_server) -> None:
    from runtime.a2a.server.engine import StorageUnavailable

    async with cluster(pg_url) as (a, b):
        before = await a.engine.send("echo", msg("before"))
        await b.engine.wait(before.id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, pg_server.restart, 2.0)
            await trio.sleep(0.5)
            with pytest.raises(StorageUnavailable, match="PostgreSQL at 127.0.0.1"):
                await a.engine.send("echo", msg("while away"))
            assert list(a.engine._tasks) == []  # refused: not held, not written later
        with trio.fail_after(30):
            while True:  # the nodes reconnect by themselves
                try:
                    after = await b.engine.send("echo", msg("after"))
                    break
                except StorageUnavailable:
                    await trio.sleep(0.2)
        await a.engine.wait(after.id)
        listed, total = await a.engine.list()
        assert total == 2 and {t.id for t in listed} == {before.id, after.id}
        assert (await b.engine.find(before.id)).state == "completed"  # acknowledged before: kept


async def test_hostile_inputs_to_the_shared_paths(pg_url: str) -> None:
    from runtime.a2a.server.engine import InvalidTaskRequest
    from runtime.a2a.server.push import MAX_CONFIGS_PER_TASK

    async with cluster(pg_url) as (a, b):
        for payload in (None, "", "task", "task x y z", "task id notanumber", "inbox node-0 x", "answered x 0",
                        "push never-was 0", "\x00" * 50):
            a.shared._heard(payload)  # ignored or a harmless re-read: never a crash
        task = await a.engine.send("echo", msg("ask"))
        await a.engine.wait(task.id)
        for i in range(MAX_CONFIGS_PER_TASK):
            await (a if i % 2 else b).push.set(task.id, {"url": f"http://127.0.0.1:9/{i}"}, "1.0")
        with pytest.raises(InvalidTaskRequest, match="webhooks already"):
            await a.push.set(task.id, {"url": "http://127.0.0.1:9/one-more"}, "1.0")
        with pytest.raises(TaskNotFound):
            await b.push.set("never-was", {"url": "http://127.0.0.1:9/x"}, "1.0")
        with pytest.raises(TaskNotFound):
            await b.engine.cancel("never-was")
        with pytest.raises(TaskNotFound):
            await b.engine.subscribe("never-was")
        bob = Caller("bob", frozenset({"tasks"}))
        with pytest.raises(TaskNotFound):  # another's task: not found, for a cancel too
            await b.engine.cancel(task.id, bob)
        with pytest.raises(TaskNotFound):
            await b.engine.send("echo", msg("mine now", task_id=task.id), who=bob)
        # a forwarded answer that is not a message: the forwarding node gets the error back
        await a.db.run(lambda c: c.execute(
            "INSERT INTO a2a_inbox (task_id, node, caller, message) VALUES (%s, 'node-0', 'x', '{not json')",
            (task.id,)))
        await a.shared._answer_inbox(None)
        row = await a.db.run(lambda c: c.execute("SELECT done, error FROM a2a_inbox").fetchone())
        assert row == (True, "the forwarded message is not readable")
        assert (await a.engine.find(task.id)).state == "input-required"


async def test_a_restart_under_the_same_node_id_fails_what_it_left_and_old_tasks_are_pruned(pg_url: str) -> None:
    async with cluster(pg_url, count=1) as (a,):
        done = [await a.engine.send("echo", msg(f"t{i}")) for i in range(4)]
        for task in done:
            await a.engine.wait(task.id)
        task = await a.engine.send("hang", msg("hang"))
        await until(lambda: _state(a, task.id, "working"))
        a.shared._stop = _nothing  # killed: no clean stop
        a.scope.cancel()
    async with cluster(pg_url, count=1) as (again,):  # node-0 again: what it ran before is failed at start
        left = await again.engine.find(task.id)
        assert left.state == "failed" and "tern restarted on node node-0" in text_of(left.status_message.parts)
        await again.db.run(again.shared._prune, 3)
        listed, total = await again.engine.list()
        assert total == 3 and [t.id for t in listed] == [task.id, done[3].id, done[2].id]  # the newest kept
        await until(lambda: _true(again.engine.counts() == {"completed": 2, "failed": 1}))


async def test_a_forwarded_answer_the_running_node_never_takes_times_out(pg_url: str, monkeypatch) -> None:
    from runtime.a2a.server import shared

    monkeypatch.setattr(shared, "FORWARD_SECS", 1.0)
    async with cluster(pg_url) as (a, b):
        task = await a.engine.send("echo", msg("question"))
        await until(lambda: _asking(b, task.id))
        a.shared._inbox_send, unread = trio.open_memory_channel(0)  # A hears nothing of its inbox any more
        with trio.fail_after(10), pytest.raises(UnsupportedOperation, match="did not take the answer within 1 s"):
            await b.engine.send("echo", msg("yes", task_id=task.id))
        assert (await b.engine.find(task.id)).asking  # nothing changed: the question is still open
        await a.engine.cancel(task.id)


async def test_a_node_reaped_while_alive_adopts_the_failure(pg_url: str) -> None:
    async with cluster(pg_url, lease_secs=0.6) as (a, b):
        task = await a.engine.send("hang", msg("hang"))
        await until(lambda: _state(b, task.id, "working"))
        a.shared._renew = _nothing  # A is cut off from renewing (a long pause): B reaps its task
        await a.db.run(lambda c: c.execute("UPDATE tern_nodes SET lease_until = now() WHERE id = 'node-0'"))
        await until(lambda: _true(task.id in STOPPED), timeout=10)  # A hears it and stops the work
        assert a.engine.peek(task.id) is None
        assert "stopped answering" in text_of((await a.engine.find(task.id)).status_message.parts)


async def test_a_write_sent_again_after_its_commit_is_its_own_not_lost(pg_url: str) -> None:
    """The pool sends a statement again when its connection broke (``Database._call``);
    if the first attempt had committed, the second finds its own row: not a lost write
    (which would make the node let go of its task), while another node's row still is."""
    from runtime.a2a.server.shared import STEPS, _write

    db = Database(pg_url, pool_size=1)
    await db.open()
    await db.migrate("a2a", STEPS)

    def item(insert: bool, old: int, new: int, body: str) -> dict:
        return {"id": "t-replay", "owner": "admin", "context_id": "c", "agent": "echo", "state": "working",
                "terminal": False, "asking": False, "node": "n0", "updated": 1.0, "body": body, "old": old,
                "insert": insert, "new": new, "note": f"task t-replay {new}", "kinds": ["status"],
                "bodies": ["{}"]}

    try:
        for attempt in (1, 2):  # the insert, then the same insert again
            assert await db.run(_write, [item(True, 0, 1, '{"v":1}')]) == {}, attempt
        for attempt in (1, 2):  # an update, then the same update again
            assert await db.run(_write, [item(False, 1, 2, '{"v":2}')]) == {}, attempt
        # a write from version 1 that is not the one that won: lost, with the row that won
        assert await db.run(_write, [item(False, 1, 2, '{"v":"other"}')]) == {"t-replay": (2, '{"v":2}')}
        # a new task whose id is another's task: lost, let go
        assert await db.run(_write, [item(True, 0, 1, '{"v":"mine"}')]) == {"t-replay": None}
        events = await db.run(lambda conn: conn.execute(
            "SELECT seq FROM a2a_task_events WHERE task_id = 't-replay' ORDER BY seq").fetchall())
        assert events == [(1,), (2,)]  # each event written once
    finally:
        db.close()
