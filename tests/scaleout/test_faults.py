"""Every class of error a statement can raise, injected into every background loop of
the shared task store and into the listener, on a real PostgreSQL (issue #33): the node
keeps serving, the one item is failed or retried, and a line says so.

The fault sits in the connection: a statement whose SQL holds a marker raises the
driver's exception instead of running, on a connection that stays good, as PostgreSQL's
own refusals do. Before #33 the pool re-raised these raw and the loops caught only
tern's storage error: each of them stopped the node.
"""

from __future__ import annotations

import contextlib
import logging

import psycopg
import pytest
import trio

from runtime.a2a.model import text_of
from runtime.pg import Database
from tests.scaleout.test_tasks_shared import STARTED, STOPPED, Node, msg, until

#: One of each class (NumericValueOutOfRange is what the bigint overflow of #33 raised).
ERRORS = [psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError, psycopg.OperationalError,
          psycopg.errors.NumericValueOutOfRange]


class _Fault:
    def __init__(self, marker: str, error: type[Exception]) -> None:
        self.marker, self.error, self.left, self.hits = marker, error, 1, 0


class _Conn:
    """A psycopg connection whose statements may trip a fault."""

    def __init__(self, conn, db: Faulty) -> None:
        self._conn, self._db = conn, db

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def execute(self, sql, params=None, **kwargs):
        self._db.trip(str(sql))
        return self._conn.execute(sql, params, **kwargs)

    def notifies(self, **kwargs):
        self._db.trip("notifies")
        return self._conn.notifies(**kwargs)


class Faulty(Database):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.faults: list[_Fault] = []

    def connect(self, *, autocommit: bool = False):
        return _Conn(super().connect(autocommit=autocommit), self)

    def arm(self, marker: str, error: type[Exception]) -> _Fault:
        """The next statement with ``marker`` in its SQL raises ``error`` (once)."""
        fault = _Fault(marker, error)
        self.faults.append(fault)
        return fault

    def trip(self, sql: str) -> None:
        for fault in self.faults:
            if fault.left and fault.marker in sql:
                fault.left -= 1
                fault.hits += 1
                raise fault.error(f"injected {fault.error.__name__}")


class FaultyNode(Node):
    def __init__(self, url: str, name: str, lease_secs: float = 15.0) -> None:
        super().__init__(url, name, lease_secs)
        self.db = self.listener.db = self.shared.db = Faulty(url, pool_size=4)


@contextlib.asynccontextmanager
async def cluster(url: str, lease_secs: float = 15.0):
    nodes = [FaultyNode(url, f"node-{i}", lease_secs) for i in range(2)]
    async with trio.open_nursery() as nursery:
        for node in nodes:
            await nursery.start(node.run)
        with trio.fail_after(30):
            while not all(node.listener.connected for node in nodes):
                await trio.sleep(0.05)
        yield nodes
        nursery.cancel_scope.cancel()


async def tripped(fault: _Fault, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not fault.hits:
            await trio.sleep(0.02)


async def said(caplog, text: str, error: type[Exception]) -> None:
    """A line with ``text`` names the injected error (within 5 s: it is logged after the
    statement's thread returns)."""
    def found() -> bool:
        return any(text in r.getMessage() and f"injected {error.__name__}" in r.getMessage()
                   or text in r.getMessage() and error.__name__ in (r.exc_text or "") for r in caplog.records)

    with trio.move_on_after(5):
        while not found():
            await trio.sleep(0.02)
    assert found(), [r.getMessage() for r in caplog.records][-10:]
    caplog.clear()


async def serves(node: Node) -> None:
    """The node answers a send, and its database work, after the fault; its write is
    committed before the next fault is armed (a write batched with the next test's task
    would let a one-shot fault be spent on the batch and the retry of each alone pass)."""
    task = await node.engine.send("echo", msg("still here?"))
    done = await node.engine.wait(task.id)
    assert done.state == "completed"
    with trio.fail_after(10):
        await node.shared.flush(task.id)


async def started(node: Node, task_id: str) -> None:
    """The work runs, and what it reported is written (so the cancel that follows is
    heard, not met by a write of its own)."""
    with trio.fail_after(10):
        await STARTED.setdefault(task_id, trio.Event()).wait()
    await node.shared.flush(task_id)


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.INFO)
    return caplog


async def test_the_writer_fails_the_one_task_it_cannot_save(pg_url, logs) -> None:
    async with cluster(pg_url) as (a, b):
        for error in ERRORS:
            task = await a.engine.send("chunks", msg("chunks 5"))  # written; its chunks follow in the background
            fault = a.db.arm("WITH t AS (UPDATE a2a_tasks", error)
            await tripped(fault)
            await until(lambda: _state(b, task.id, "failed"))
            failed = await b.engine.find(task.id)
            assert "tern could not save this task on node node-0" in text_of(failed.status_message.parts)
            assert a.engine.peek(task.id) is None  # let go here too: its work stopped
            await said(logs, f"task {task.id} cannot be saved", error)
            await serves(a)


async def test_the_keeper_retries_its_round(pg_url, logs) -> None:
    async with cluster(pg_url, lease_secs=1.5) as (a, b):
        for marker in ("INSERT INTO tern_nodes", "LEFT JOIN tern_nodes", "GROUP BY state"):  # renew, reap, count
            for error in ERRORS:
                await tripped(a.db.arm(marker, error))
                await said(logs, "a lease and reaper round failed", error)
                await trio.sleep(0.4)  # the next round (every 0.3 s) renews
                alive = await b.db.run(lambda c: c.execute(
                    "SELECT lease_until > now() FROM tern_nodes WHERE id = 'node-0'").fetchone())
                assert alive == (True,)
        await serves(a)
        task = await a.engine.send("hang", msg("hang"))
        await started(a, task.id)
        await trio.sleep(1.6)  # a lease later, no round missed for good: nobody reaped A's task
        assert (await b.engine.find(task.id)).state == "working"
        await b.engine.cancel(task.id)


async def test_the_checker_reads_again(pg_url, logs) -> None:
    async with cluster(pg_url) as (a, b):
        for error in ERRORS:
            task = await a.engine.send("hang", msg("hang"))
            await started(a, task.id)
            fault = a.db.arm("= ANY(", error)
            await b.engine.cancel(task.id)  # A hears it, reads the row (refused once), reads again
            await tripped(fault)
            await until(lambda: _true(task.id in STOPPED))
            await said(logs, "reading tasks other nodes changed failed", error)
            assert a.engine.peek(task.id) is None
        await serves(a)


async def test_the_answerer_takes_the_answer_again(pg_url, logs) -> None:
    async with cluster(pg_url) as (a, b):
        for error in ERRORS:
            task = await a.engine.send("echo", msg("question"))
            await until(lambda: _asking(b, task.id))
            fault = a.db.arm("FROM a2a_inbox WHERE node", error)
            with trio.fail_after(20):
                await b.engine.send("echo", msg("yes", task_id=task.id), caller="a2a:10.0.0.9")
            assert fault.hits == 1
            done = await b.engine.wait(task.id)
            assert done.state == "completed" and done.artifacts[0].parts[0]["text"] == "yes from a2a:10.0.0.9"
            await said(logs, "taking a forwarded answer failed", error)
        await serves(a)


async def test_a_stream_whose_events_cannot_be_read_ends(pg_url, logs) -> None:
    async with cluster(pg_url) as (a, b):
        for error in ERRORS:
            task = await a.engine.send("chunks", msg("chunks 20"))
            fault = b.db.arm("FROM a2a_task_events", error)
            receive = await b.engine.subscribe(task.id)
            with trio.fail_after(10):
                events = [event async for event in receive]  # ends: the stream failed, not the node
            assert fault.hits == 1 and not any(getattr(e, "final", False) for e in events)
            await said(logs, f"a stream on task {task.id} ends", error)
            assert (await b.engine.wait(task.id)).state == "completed"
        await serves(b)


async def test_push_configs_that_cannot_be_loaded_are_logged(pg_url, logs) -> None:
    async with cluster(pg_url) as (a, b):
        for error in ERRORS:
            task = await a.engine.send("hang", msg("hang"))
            await started(a, task.id)
            fault = a.db.arm("FROM a2a_push_configs", error)
            await b.push.set(task.id, {"url": "https://hooks.example/x", "id": "h"}, "1.0")  # A hears, loads
            await tripped(fault)
            await until(lambda: _logged(logs, f"could not load the push configs of task {task.id}"))
            await said(logs, "could not load the push configs", error)
            await b.engine.cancel(task.id)
            await until(lambda: _true(task.id in STOPPED))  # A still hears and stops the work
        await serves(a)


async def test_the_listener_reconnects(pg_url, logs) -> None:
    async with cluster(pg_url) as (a, b):
        for marker in ("notifies", "LISTEN"):
            for i, error in enumerate(ERRORS):
                task = await a.engine.send("hang", msg("hang"))
                await started(a, task.id)
                fault = a.db.arm(marker, error)
                if marker == "LISTEN":  # a new channel makes the listener LISTEN again on its connection
                    a.listener.follow(f"tern_fault_probe_{i}", lambda payload: None)
                await tripped(fault)
                await said(logs, "listener: ", error)
                await until(lambda: _true(a.listener.connected))
                await b.engine.cancel(task.id)
                await until(lambda: _true(task.id in STOPPED))
        await serves(a)


async def _state(node: Node, task_id: str, state: str) -> bool:
    return (await node.engine.find(task_id)).state == state


async def _asking(node: Node, task_id: str) -> bool:
    return (await node.engine.find(task_id)).asking


async def _true(value: bool) -> bool:
    return value


async def _logged(caplog, text: str) -> bool:
    return any(text in r.getMessage() for r in caplog.records)
