"""A2A tasks shared by several tern nodes in PostgreSQL (``[state] store = "postgres"``;
docs/scale-out.md): any node answers for any task.

- A task's row holds its snapshot (the msgspec JSON of the ``Task``) and what queries
  need (owner, context, state, the node running its work, a ``version``); its events
  are rows numbered ``seq`` 1, 2, ... Every write is a compare-and-swap on the version
  it read (a stale snapshot never overwrites a newer state): the version moves by the
  number of events written with it, in one transaction with a ``pg_notify`` on
  ``tern_a2a`` (``task <id> <version>``).
- The node running a task's work holds it in its engine and writes what changes,
  batched (one statement per task; several tasks in one transaction): a send or a
  cancel is answered only once written (``flush``). A write refused because another
  node changed the task (a cancel, the reaper) makes this node adopt that state: its
  work stops, its streams end, its pending writes go.
- Every other node answers from the database: ``load``, ``list`` (filtered and paged in
  SQL), ``cancel`` (one transaction; the running node hears the notify and stops the
  work), ``follow`` (a stream: the events after a version, read again on each notify
  and after each reconnect of the listener), ``forward`` (an answer to a question of
  work running elsewhere goes through ``a2a_inbox`` to that node, which answers it).
- Leases: each node renews its row in ``tern_nodes`` every ``lease_secs / 5`` for
  ``lease_secs * 4 / 5``, and every node reaps as often: the live tasks of a node whose
  lease ran out are failed (``FOR UPDATE SKIP LOCKED``: two reapers never both write)
  within ``lease_secs`` of its death, while a live node's lease always has
  ``lease_secs * 3 / 5`` to run. A clean stop fails this node's own live tasks at once,
  and so does a start under a node id whose tasks a killed process left. A start under
  the id of a node still running (its lease renewed while the new one watches) is
  refused: two processes under one id would fail each other's work.
- Retention: at most ``max_tasks`` terminal tasks stay (the oldest go); ``counts`` is
  refreshed from the database every few seconds.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from runtime.a2a.model import INTERRUPTED, ArtifactEvent, Event, Message, StatusEvent, Task
from runtime.a2a.server.engine import (SUBSCRIBER_EVENTS, A2aError, StorageUnavailable, TaskNotCancelable,
                                       TaskNotFound, TooManySubscribers, UnsupportedOperation)
from runtime.errors import ConfigError, StorageError
from runtime.log import get_logger
from runtime.wire.retry import Backoff
from runtime.pg.pool import StatementFailed
from runtime.ports import Caller

__all__ = ["SharedTasks", "STEPS", "CHANNEL"]

log = get_logger("tern.a2a.shared")
CHANNEL = "tern_a2a"
FORWARD_SECS = 30.0  # how long a node waits for another to take an answer to its work's question
FOLLOW_POLL_SECS = 10.0  # a stream on another node's task re-reads at least this often (a notify wakes it at once)
EVENTS_PER_READ = 200
PRUNE_SECS = 30.0
GATHER_SECS = 0.005
#: Renewals (and reaper passes) per lease; a lease is taken for all but the last round, so a
#: dead node's lease runs out and the next pass reaps it within ``lease_secs`` of its death.
LEASE_ROUNDS = 5
REAP_BATCH = 100  # tasks a reaper fails in one transaction
RETRY_SECS = (0.25, 0.5, 1.0, 2.0, 5.0)

#: The ``a2a`` component's migrations (``Database.migrate``): append, never edit.
STEPS = [
    "CREATE TABLE a2a_tasks (id text PRIMARY KEY, owner text NOT NULL, context_id text NOT NULL, "
    "agent text NOT NULL, state text NOT NULL, terminal boolean NOT NULL, asking boolean NOT NULL, "
    "node text NOT NULL DEFAULT '', version bigint NOT NULL, updated double precision NOT NULL, body text NOT NULL)",
    "CREATE INDEX a2a_tasks_updated ON a2a_tasks (updated DESC)",
    "CREATE INDEX a2a_tasks_context ON a2a_tasks (context_id, updated DESC)",
    "CREATE INDEX a2a_tasks_live ON a2a_tasks (node) WHERE NOT terminal",
    "CREATE TABLE a2a_task_events (task_id text NOT NULL REFERENCES a2a_tasks (id) ON DELETE CASCADE, "
    "seq bigint NOT NULL, kind text NOT NULL, body text NOT NULL, PRIMARY KEY (task_id, seq))",
    "CREATE TABLE a2a_push_configs (task_id text NOT NULL REFERENCES a2a_tasks (id) ON DELETE CASCADE, "
    "id text NOT NULL, body text NOT NULL, PRIMARY KEY (task_id, id))",
    "CREATE TABLE a2a_inbox (id bigserial PRIMARY KEY, task_id text NOT NULL, node text NOT NULL, "
    "caller text NOT NULL, message text NOT NULL, done boolean NOT NULL DEFAULT false, result text, "
    "error_code integer, error text, created timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE tern_nodes (id text PRIMARY KEY, lease_until timestamptz NOT NULL, "
    "started timestamptz NOT NULL DEFAULT now())",
]

_encode = msgspec.json.Encoder().encode
_task = msgspec.json.Decoder(Task)
_message = msgspec.json.Decoder(Message)
_decoders = {"status": msgspec.json.Decoder(StatusEvent), "artifact": msgspec.json.Decoder(ArtifactEvent)}

_COLUMNS = "state = %(state)s, terminal = %(terminal)s, asking = %(asking)s, node = %(node)s, " \
           "version = %(new)s, updated = %(updated)s, body = %(body)s"
_EVENTS = ("e AS (INSERT INTO a2a_task_events (task_id, seq, kind, body) SELECT t.id, %(old)s + u.ord, u.k, u.b "
           "FROM t, unnest(%(kinds)s::text[], %(bodies)s::text[]) WITH ORDINALITY AS u(k, b, ord)) "
           f"SELECT pg_notify('{CHANNEL}', %(note)s) FROM t")
_UPDATE = f"WITH t AS (UPDATE a2a_tasks SET {_COLUMNS} WHERE id = %(id)s AND version = %(old)s RETURNING id), " \
          + _EVENTS
_INSERT = ("WITH t AS (INSERT INTO a2a_tasks (id, owner, context_id, agent, state, terminal, asking, node, version, "
           "updated, body) VALUES (%(id)s, %(owner)s, %(context_id)s, %(agent)s, %(state)s, %(terminal)s, "
           "%(asking)s, %(node)s, %(new)s, %(updated)s, %(body)s) ON CONFLICT (id) DO NOTHING RETURNING id), "
           + _EVENTS)


class _Pending:
    """What changed in one task since its last write: the newest snapshot and the events."""

    __slots__ = ("row", "events")

    def __init__(self) -> None:
        self.row: dict[str, Any] | None = None
        self.events: list[tuple[str, str]] = []


def _kind(event: Event) -> str:
    return "status" if isinstance(event, StatusEvent) else "artifact"


def _decode(version: int, body: str) -> Task:
    task = _task.decode(body)
    task.version = version
    return task


def _ended(conn: Any, task_id: str, version: int, body: str, state: str, text: str | None) -> Task:
    """Move a locked row's task to a final ``state`` (in ``conn``'s transaction): the
    snapshot, its one status event, and the notify."""
    task = _decode(version, body)
    task.state, task.asking, task.timestamp = state, False, time.time()
    task.status_message = Message(role="agent", parts=[{"text": text}], context_id=task.context_id,
                                  task_id=task.id) if text else None
    event = StatusEvent(task_id=task.id, context_id=task.context_id, state=state, message=task.status_message,
                        timestamp=task.timestamp, final=True)
    task.version = version + 1
    row = {"id": task.id, "state": state, "terminal": True, "asking": False, "node": "", "new": version + 1,
           "updated": task.timestamp, "body": _encode(task).decode(), "old": version, "kinds": ["status"],
           "bodies": [_encode(event).decode()], "note": f"task {task.id} {version + 1}"}
    conn.execute(_UPDATE, row)
    return task


class SharedTasks:
    """The engine's window on the tasks every node shares (``TaskEngine.shared``)."""

    def __init__(self, db: Any, listener: Any, node_id: str, *, lease_secs: float = 15.0, max_tasks: int = 1000,
                 max_subscribers: int = 32) -> None:
        self.db = db
        self.listener = listener
        self.node_id = node_id
        self.lease_secs = lease_secs
        self.max_tasks = max_tasks
        self.max_subscribers = max_subscribers
        self.engine: Any = None  # the TaskEngine (attach)
        self.counts: dict[str, int] = {}  # every node's tasks by state, as last counted
        self.on_hold: list[Callable[[str], Awaitable[None]]] = []  # this node takes a task, or its push configs moved
        self.on_release: list[Callable[[str], None]] = []  # this node lets a task go
        self._versions: dict[str, int] = {}  # tasks this node holds -> their version in the database
        self._pending: dict[str, _Pending] = {}
        self._inflight: dict[str, int] = {}  # tasks with a write on its way -> the version it writes
        self._settled = trio.Event()  # set (and replaced) whenever a write ends
        self._wake = trio.Event()
        self._watchers: dict[str, set[trio.Event]] = {}  # "task <id>" / "inbox <id>" -> who waits on it
        self._followers: dict[str, int] = {}  # streams on other nodes' tasks, per task
        self._check: set[str] = set()  # tasks this node holds that another node changed
        self._checking = trio.Event()
        self._inbox_send, self._inbox = trio.open_memory_channel[int | None](256)
        self._nursery: trio.Nursery | None = None

    def attach(self, engine: Any) -> None:
        self.engine = engine
        engine.shared = self

    # --- Running ---------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        await self.db.migrate("a2a", STEPS)
        await self._claim()
        # A process before this one under the same node id (a restart) left its live tasks: their work is gone.
        left = await self.db.run(self._fail_live, self.node_id, f"tern restarted on node {self.node_id} while this "
                                 "task was running; the task's work was lost")
        if left:
            log.warning("a2a: %d tasks this node was running before it restarted failed", left)
        await self._renew()
        unfollow = self.listener.follow(CHANNEL, self._heard)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                nursery.start_soon(self._checker)
                nursery.start_soon(self._answerer)
                nursery.start_soon(self._keeper)
                task_status.started()
        finally:
            unfollow()
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await self._stop()

    async def _claim(self) -> None:
        """Refuse to start under a node id a live process holds: its lease, renewed every
        ``lease_secs / 5``, moves while this one watches (a killed process's does not, so a
        restart under its id goes on, at most 1.5 renewal periods later)."""
        def read(conn: Any) -> tuple[Any, bool] | None:
            return conn.execute("SELECT lease_until, lease_until > now() FROM tern_nodes WHERE id = %s",
                                (self.node_id,)).fetchone()

        first = await self.db.run(read)
        if first is None or not first[1]:
            return
        log.info("a2a: node id %s has a lease; waiting to see whether a live node renews it", self.node_id)
        await trio.sleep(self.lease_secs / LEASE_ROUNDS * 1.5)
        again = await self.db.run(read)
        if again is not None and again[0] != first[0]:
            raise ConfigError(f"[state] node_id {self.node_id!r} is held by another running node (its lease was "
                              "renewed just now): give each node its own id (on Kubernetes: a StatefulSet, or the "
                              "pod name; the default is unique per process)")

    async def _stop(self) -> None:
        """A clean stop: what is pending is written, and this node's live tasks fail at once
        (their work stops with this process) rather than wait for a reaper."""
        try:
            await self.flush()
        except A2aError:
            pass
        try:
            failed = await self.db.run(self._fail_live, self.node_id, "tern stopped while this task was running on "
                                       f"node {self.node_id}; the task's work was lost")
            await self.db.run(lambda conn: conn.execute("DELETE FROM tern_nodes WHERE id = %s", (self.node_id,)))
        except StorageError as exc:
            log.warning("a2a: could not release this node's tasks at stop (%s); other nodes fail them once its "
                        "lease runs out", exc)
            return
        if failed:
            log.info("a2a: %d running tasks failed as tern stopped", failed)

    @staticmethod
    def _fail_live(conn: Any, node: str, text: str, lease_secs: float | None = None) -> int:
        """Fail the live tasks of ``node`` (None and ``lease_secs``: of every node whose lease ran out)."""
        if lease_secs is None:
            rows = conn.execute("SELECT id, version, body, node FROM a2a_tasks WHERE NOT terminal AND node = %s "
                                "FOR UPDATE", (node,)).fetchall()
        else:
            rows = conn.execute(
                "SELECT t.id, t.version, t.body, t.node FROM a2a_tasks t LEFT JOIN tern_nodes n ON n.id = t.node "
                "WHERE NOT t.terminal AND t.node <> '' AND (n.lease_until IS NULL OR n.lease_until < now()) "
                "ORDER BY t.updated LIMIT %s FOR UPDATE OF t SKIP LOCKED", (REAP_BATCH,)).fetchall()
        for task_id, version, body, owner_node in rows:
            _ended(conn, task_id, version, body, "failed", text.replace("{node}", owner_node))
        return len(rows)

    async def _keeper(self) -> None:
        """Renew this node's lease, reap the tasks of nodes whose lease ran out, count
        the tasks, and prune the oldest terminal ones."""
        pruned = 0.0
        period = self.lease_secs / LEASE_ROUNDS
        due = trio.current_time()
        while True:
            due += period  # rounds keep their pace whatever a round's queries take
            try:
                await self._renew()
                reaped = 0
                while True:  # in passes of REAP_BATCH tasks, each its own transaction
                    passed = await self.db.run(
                        self._fail_live, None, f"node {{node}} stopped answering (no lease renewal for "
                        f"{self.lease_secs:g} s); the task's work was lost", self.lease_secs)
                    reaped += passed
                    if passed < REAP_BATCH:
                        break
                if reaped:
                    log.warning("a2a: %d tasks of nodes that stopped answering failed", reaped)
                self.counts = dict(await self.db.run(
                    lambda conn: conn.execute("SELECT state, count(*) FROM a2a_tasks GROUP BY state").fetchall()))
                if time.monotonic() - pruned > PRUNE_SECS:
                    pruned = time.monotonic()
                    await self.db.run(self._prune, self.max_tasks)
            except Exception as exc:  # a statement refused, a row unreadable: logged; the next round tries again
                _trouble("a lease and reaper round", exc)
            due = max(due, trio.current_time())  # a round that overran starts the next at once
            await trio.sleep_until(due)

    async def _renew(self) -> None:
        await self.db.run(lambda conn: conn.execute(
            "INSERT INTO tern_nodes (id, lease_until) VALUES (%s, now() + make_interval(secs => %s)) "
            "ON CONFLICT (id) DO UPDATE SET lease_until = excluded.lease_until",
            (self.node_id, self.lease_secs * (LEASE_ROUNDS - 1) / LEASE_ROUNDS)))

    @staticmethod
    def _prune(conn: Any, keep: int) -> None:
        conn.execute("DELETE FROM a2a_tasks WHERE id IN (SELECT id FROM a2a_tasks WHERE terminal "
                     "ORDER BY updated DESC OFFSET %s)", (keep,))
        conn.execute("DELETE FROM a2a_inbox WHERE created < now() - interval '10 minutes'")
        conn.execute("DELETE FROM tern_nodes WHERE lease_until < now() - interval '1 hour'")

    # --- What the engine reports (this node's tasks) -----------------------------------------

    async def hold(self, task: Task) -> None:
        """This node runs ``task`` now, from the version it read (its push configs load first)."""
        self._versions[task.id] = task.version
        for load in self.on_hold:
            await load(task.id)

    def forget(self, task_id: str) -> None:
        """This node no longer holds the task: nothing of it is written any more."""
        self._pending.pop(task_id, None)
        if self._versions.pop(task_id, None) is not None:
            for release in self.on_release:
                release(task_id)

    def event(self, task: Task, event: Event) -> None:
        self._pending.setdefault(task.id, _Pending()).events.append((_kind(event), _encode(event).decode()))

    def changed(self, task: Task, *, running: bool) -> None:
        pending = self._pending.setdefault(task.id, _Pending())
        pending.row = {"id": task.id, "owner": task.owner, "context_id": task.context_id, "agent": task.agent,
                       "state": task.state, "terminal": task.terminal, "asking": task.asking,
                       "node": self.node_id if running else "", "updated": task.timestamp,
                       "body": _encode(task).decode()}
        self._wake.set()

    async def _writer(self) -> None:
        """Writes what running work reports, gathered for ``GATHER_SECS`` (its events
        then go in one write; a send or a cancel does not wait for this: it flushes)."""
        backoff = Backoff(ladder=RETRY_SECS)
        while True:
            await self._wake.wait()
            await trio.sleep(GATHER_SECS)
            self._wake = trio.Event()
            try:
                await self.flush()
            except Exception as exc:  # the store away (logged by the pool), or worse: tried again, later
                if not isinstance(exc, A2aError):
                    log.exception("a2a: writing tasks failed; tried again")
                await trio.sleep(backoff.next())
                self._wake.set()
            else:
                backoff.reset()

    async def flush(self, task_id: str | None = None) -> None:
        """Everything reported before this call (of ``task_id``, when given) is written (or
        adopted from a newer state another node wrote) when it returns;
        ``StorageUnavailable`` if it cannot be. Writes of different tasks go at once, each
        on its own connection; one task's writes go one after another (each swaps the
        version the last one wrote)."""
        wanted = {t for t, p in self._pending.items() if p.row is not None} | self._inflight.keys()
        if task_id is not None:
            wanted &= {task_id}
        while wanted:
            ready = {t: p for t, p in self._pending.items() if t not in self._inflight and p.row is not None
                     and (task_id is None or t == task_id)}
            if ready:
                await self._write(ready)
            if not wanted & (self._inflight.keys() | {t for t, p in self._pending.items() if p.row is not None}):
                return
            if not ready:
                await self._settled.wait()

    async def _write(self, batch: dict[str, _Pending]) -> None:
        items = []
        for task_id, pending in batch.items():
            del self._pending[task_id]
            old = self._versions.get(task_id)
            items.append({**pending.row, "old": old or 0, "insert": old is None,
                          "new": (old or 0) + max(1, len(pending.events)), "note": "",
                          "kinds": [k for k, _ in pending.events], "bodies": [b for _, b in pending.events]})
            items[-1]["note"] = f"task {task_id} {items[-1]['new']}"
        self._inflight.update((item["id"], item["new"]) for item in items)
        try:
            try:
                # one task's write is one statement, atomic by itself: no BEGIN and COMMIT round trips
                lost = await self.db.run(_write, items, transaction=len(items) > 1)
            except StatementFailed as exc:
                lost = await self._alone(items, exc)
        except StorageError as exc:
            for task_id, pending in batch.items():  # kept for the retry, before what came meanwhile
                if self.engine.peek(task_id) is None:
                    continue  # let go meanwhile (a send that failed): never written later
                later = self._pending.get(task_id)
                if later is not None:
                    pending.events += later.events
                    pending.row = later.row or pending.row
                self._pending[task_id] = pending
            raise StorageUnavailable(f"tasks cannot be saved right now ({exc})") from None
        finally:
            for task_id in batch:
                del self._inflight[task_id]
            self._settled.set()
            self._settled = trio.Event()
        for item in items:
            held = self.engine.peek(item["id"])
            if item["id"] not in lost and held is not None:
                self._versions[item["id"]] = held.version = item["new"]
        for task_id, row in lost.items():
            self._adopt(task_id, row)

    async def _alone(self, items: list[dict[str, Any]], exc: StatementFailed) -> dict[str, tuple[int, str] | None]:
        """A write PostgreSQL refused: each task written alone, and a task refused alone
        fails (its last stored state, failed; a task never stored is let go), so one bad
        task neither stops the node nor holds back the others."""
        lost: dict[str, tuple[int, str] | None] = {}
        for item in items:
            try:
                if len(items) == 1:
                    raise exc
                lost.update(await self.db.run(_write, [item], transaction=False))
            except StatementFailed as refused:
                log.error("a2a: task %s cannot be saved (%s); it fails", item["id"], refused)
                text = f"tern could not save this task on node {self.node_id} ({refused.sqlstate or 'refused'})"
                try:
                    lost[item["id"]] = await self.db.run(_fail_one, item["id"], text)
                except StorageError as again:
                    log.error("a2a: task %s could not be failed either (%s); this node lets it go", item["id"], again)
                    lost[item["id"]] = None
        return lost

    def _adopt(self, task_id: str, row: tuple[int, str] | None) -> None:
        self.forget(task_id)
        self.engine.adopt(task_id, _decode(*row) if row is not None else None)

    # --- Hearing other nodes -----------------------------------------------------------------

    def _heard(self, payload: str | None) -> None:
        """A notify on ``tern_a2a`` (None: the listener (re)connected: anything may have changed)."""
        if payload is None:
            for waiting in self._watchers.values():
                for event in waiting:
                    event.set()
            self._check.update(self._versions)
            self._checking.set()
            try:
                self._inbox_send.send_nowait(None)
            except trio.WouldBlock:
                pass
            if self._nursery is not None:  # a push config set while this node was not listening
                for task_id in list(self._versions):
                    for load in self.on_hold:
                        self._nursery.start_soon(self._quietly, load, task_id)
            return
        words = payload.split(" ")
        if len(words) != 3:
            return
        kind, name, number = words
        for event in self._watchers.get(f"{kind} {name if kind != 'inbox' else number}", ()):
            event.set()
        # A version up to the one this node is writing is that write's own notify, or the
        # write that made it lose, which ``_write`` adopts: neither needs a read.
        if not _counter(number):
            return  # not a number PostgreSQL's bigint holds: no node of tern sent it
        if kind == "task" and name in self._versions \
                and int(number) > max(self._versions[name], self._inflight.get(name, 0)):
            self._check.add(name)
            self._checking.set()
        elif kind == "inbox" and name == self.node_id:
            try:
                self._inbox_send.send_nowait(int(number))
            except trio.WouldBlock:
                pass  # full: the sweep after the listener's next reconnect finds it
        elif kind == "answered":
            for event in self._watchers.get(f"inbox {name}", ()):
                event.set()
        elif kind == "push" and name in self._versions and self._nursery is not None:
            for load in self.on_hold:
                self._nursery.start_soon(self._quietly, load, name)

    async def _quietly(self, load: Callable[[str], Awaitable[None]], task_id: str) -> None:
        try:
            await load(task_id)
        except Exception as exc:  # a store away, a config unreadable: the task runs on without them
            log.warning("a2a: could not load the push configs of task %s (%s)", task_id, exc)

    async def _checker(self) -> None:
        """Tasks this node holds that another node wrote: adopt the newer state."""
        while True:
            await self._checking.wait()
            self._checking = trio.Event()
            ids, self._check = list(self._check), set()
            try:
                rows = await self.db.run(lambda conn: conn.execute(
                    "SELECT id, version, body FROM a2a_tasks WHERE id = ANY(%s)", (ids,)).fetchall())
                for task_id, version, body in rows:
                    if task_id in self._inflight:  # the row may be this node's own write, not yet counted
                        self._check.add(task_id)
                        self._checking.set()
                    elif task_id in self._versions and version > self._versions[task_id]:
                        self._adopt(task_id, (version, body))
            except Exception as exc:  # the database away, a statement refused: read again in a second
                _trouble("reading tasks other nodes changed", exc)
                self._check.update(ids)
                await trio.sleep(1.0)
                self._checking.set()

    async def _watch(self, key: str, timeout: float) -> None:
        """Until a notify about ``key`` (or the listener reconnects), or ``timeout``."""
        event = trio.Event()
        self._watchers.setdefault(key, set()).add(event)
        try:
            with trio.move_on_after(timeout):
                await event.wait()
        finally:
            waiting = self._watchers.get(key)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._watchers[key]

    # --- Answering for other nodes' tasks ----------------------------------------------------

    async def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await self.db.run(fn, *args)
        except StorageError as exc:
            raise StorageUnavailable(f"tasks cannot be read right now ({exc})") from None

    async def load(self, task_id: str) -> Task | None:
        """The task as the database has it (None: there is none)."""
        found = await self.load_row(task_id)
        return found[0] if found is not None else None

    async def fresh(self, task_id: str) -> Task | None:
        """A task this node holds, if another node wrote a newer state of it (adopted
        here first, so a read right after another node's cancel sees the cancel); None:
        this node's copy is the newest."""
        await self.flush(task_id)
        row = await self._read(lambda conn: conn.execute("SELECT version, body FROM a2a_tasks WHERE id = %s",
                                                         (task_id,)).fetchone())
        if row is None or task_id in self._inflight or task_id not in self._versions \
                or row[0] <= self._versions[task_id]:
            return None  # (a write of this node's on its way: its own compare-and-swap finds out)
        self._adopt(task_id, row)
        return _decode(*row)

    async def load_row(self, task_id: str) -> tuple[Task, str] | None:
        """The task as the database has it, and the node running its work ("": none)."""
        row = await self._read(lambda conn: conn.execute("SELECT version, body, node FROM a2a_tasks WHERE id = %s",
                                                         (task_id,)).fetchone())
        return (_decode(row[0], row[1]), row[2]) if row is not None else None

    async def list(self, *, context_id: str | None, state: str | None, owner: str | None, offset: int,
                   limit: int | None) -> tuple[list[Task], int]:
        await self.flush()  # this node's own latest changes are in what it lists
        where = " AND ".join(clause for clause, value in (("context_id = %(context_id)s", context_id),
                                                           ("state = %(state)s", state),
                                                           ("owner = %(owner)s", owner)) if value is not None)
        where = f"WHERE {where}" if where else ""
        params = {"context_id": context_id, "state": state, "owner": owner, "offset": offset, "limit": limit}

        def query(conn: Any) -> tuple[list[tuple[int, str]], int]:
            total = conn.execute(f"SELECT count(*) FROM a2a_tasks {where}", params).fetchone()[0]
            rows = conn.execute(f"SELECT version, body FROM a2a_tasks {where} ORDER BY updated DESC, id "
                                "LIMIT %(limit)s OFFSET %(offset)s", params).fetchall()
            return rows, total

        rows, total = await self._read(query)
        return [_decode(*row) for row in rows], total

    async def cancel(self, task_id: str, who: Caller | None) -> Task:
        """Cancel a task this node does not hold, in one transaction; the node running its
        work hears of it and stops the work."""

        def cancel(conn: Any) -> Task | str | None:
            row = conn.execute("SELECT owner, terminal, state, version, body FROM a2a_tasks WHERE id = %s FOR UPDATE",
                               (task_id,)).fetchone()
            if row is None or who is not None and not who.owns(row[0]):
                return None
            if row[1]:
                return row[2]
            return _ended(conn, task_id, row[3], row[4], "canceled", None)

        try:
            done = await self.db.run(cancel)
        except StorageError as exc:
            raise StorageUnavailable(f"the task cannot be canceled right now ({exc})") from None
        if done is None:
            raise TaskNotFound(f"task {task_id!r} not found (it never existed, or was evicted)")
        if isinstance(done, str):
            raise TaskNotCancelable(f"task {task_id} is already {done}")
        return done

    async def wait(self, task_id: str) -> Task:
        """Until a task this node does not hold is terminal or waits for its client."""
        while True:
            task = await self.load(task_id)
            if task is None:
                raise TaskNotFound(f"task {task_id!r} not found")
            if task.terminal or task.state in INTERRUPTED:
                return task
            await self._watch(f"task {task_id}", FOLLOW_POLL_SECS)

    async def follow(self, task_id: str, after: int | None) -> trio.MemoryReceiveChannel[Event]:
        """A stream of the events of a task another node runs, after version ``after``."""
        task = await self.load(task_id)
        if task is None:
            raise TaskNotFound(f"task {task_id!r} not found (it never existed, or was evicted)")
        if self._followers.get(task_id, 0) >= self.max_subscribers:
            raise TooManySubscribers(
                f"task {task_id} already has {self._followers[task_id]} streams following it on this node (the "
                f"limit is {self.max_subscribers}, [a2a] max_subscribers_per_task); close one or poll GetTask")
        send, receive = trio.open_memory_channel[Event](SUBSCRIBER_EVENTS)
        since = task.version if after is None else after
        if task.terminal and since >= task.version:
            send.close()
        else:
            assert self._nursery is not None
            self._followers[task_id] = self._followers.get(task_id, 0) + 1
            self._nursery.start_soon(self._follow, task_id, since, send)
        return receive

    async def _follow(self, task_id: str, since: int, send: trio.MemorySendChannel[Event]) -> None:
        def read(conn: Any, after: int) -> tuple[list[tuple[int, str, str]], bool]:
            rows = conn.execute("SELECT seq, kind, body FROM a2a_task_events WHERE task_id = %s AND seq > %s "
                                "ORDER BY seq LIMIT %s", (task_id, after, EVENTS_PER_READ)).fetchall()
            row = conn.execute("SELECT terminal, version FROM a2a_tasks WHERE id = %s", (task_id,)).fetchone()
            return rows, row is None or row[0] and row[1] <= (rows[-1][0] if rows else after)

        try:
            async with send:
                while True:
                    try:
                        rows, over = await self.db.run(read, since)
                    except StatementFailed as exc:
                        log.warning("a2a: a stream on task %s ends: its events cannot be read (%s)", task_id, exc)
                        return
                    except StorageError:
                        rows, over = [], False  # the listener's reconnect wakes this stream to catch up
                    for seq, kind, body in rows:
                        event = _decoders[kind].decode(body)
                        send.send_nowait(event)  # too slow (full) or gone: the stream ends, never waited for
                        since = seq
                        if isinstance(event, StatusEvent) and event.final:
                            return
                    if over:
                        return
                    if len(rows) < EVENTS_PER_READ:
                        await self._watch(f"task {task_id}", FOLLOW_POLL_SECS)
                        if not send.statistics().open_receive_channels:
                            return
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:  # an event unreadable: this stream ends, the node serves on
            log.exception("a2a: a stream on task %s failed", task_id)
        finally:
            left = self._followers.get(task_id, 1) - 1
            if left > 0:
                self._followers[task_id] = left
            else:
                self._followers.pop(task_id, None)

    # --- Push configs ----------------------------------------------------------------------------

    async def push_rows(self, task_id: str) -> list[str]:
        return [body for (body,) in await self._read(lambda conn: conn.execute(
            "SELECT body FROM a2a_push_configs WHERE task_id = %s ORDER BY id", (task_id,)).fetchall())]

    async def put_push(self, task_id: str, config_id: str, body: str, most: int) -> None:
        """Store a config (replacing one of the same id); the node running the task hears of it."""
        from runtime.a2a.server.engine import InvalidTaskRequest

        def put(conn: Any) -> bool:
            conn.execute("SELECT 1 FROM a2a_tasks WHERE id = %s FOR UPDATE", (task_id,))  # one writer per task
            count = conn.execute("SELECT count(*) FILTER (WHERE id <> %s) FROM a2a_push_configs WHERE task_id = %s",
                                 (config_id, task_id)).fetchone()[0]
            if count >= most:
                return False
            conn.execute("INSERT INTO a2a_push_configs (task_id, id, body) VALUES (%s, %s, %s) ON CONFLICT "
                         "(task_id, id) DO UPDATE SET body = excluded.body", (task_id, config_id, body))
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"push {task_id} 0"))
            return True

        if not await self._read(put):
            raise InvalidTaskRequest(f"task {task_id} has {most} webhooks already")

    async def delete_push(self, task_id: str, config_id: str) -> None:
        def delete(conn: Any) -> None:
            conn.execute("DELETE FROM a2a_push_configs WHERE task_id = %s AND id = %s", (task_id, config_id))
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"push {task_id} 0"))

        await self._read(delete)

    # --- Questions of work on another node -------------------------------------------------------

    async def forward(self, task: Task, message: Message, caller: str) -> Task:
        """``message`` answers the question of ``task``'s work, which runs on another node:
        that node takes it (``_answerer``); the answer (the task, or its error) comes back
        through the inbox row within ``FORWARD_SECS``."""

        def put(conn: Any) -> tuple[int, str] | None:
            row = conn.execute("INSERT INTO a2a_inbox (task_id, node, caller, message) SELECT id, node, %s, %s "
                               "FROM a2a_tasks WHERE id = %s AND asking AND NOT terminal AND node <> '' "
                               "RETURNING id, node", (caller, _encode(message).decode(), task.id)).fetchone()
            if row is not None:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"inbox {row[1]} {row[0]}"))
            return row

        put_row = await self._read(put)
        if put_row is None:
            raise UnsupportedOperation(f"task {task.id} no longer waits for an answer; read it again")
        inbox_id = put_row[0]
        deadline = trio.current_time() + FORWARD_SECS
        while trio.current_time() < deadline:
            await self._watch(f"inbox {inbox_id}", min(2.0, max(deadline - trio.current_time(), 0)))
            row = await self._read(lambda conn: conn.execute(
                "SELECT done, result, error_code, error FROM a2a_inbox WHERE id = %s", (inbox_id,)).fetchone())
            if row is not None and row[0]:
                if row[1] is not None:
                    return _task.decode(row[1])
                error = A2aError(row[3] or "the answer was refused")
                error.code = row[2] or error.code
                raise error
        raise UnsupportedOperation(f"node {put_row[1]}, which runs task {task.id}, did not take the answer within "
                                   f"{FORWARD_SECS:g} s; try again")

    async def _answerer(self) -> None:
        """Answers other nodes forwarded to questions of work running here."""
        async for inbox_id in self._inbox:
            try:
                await self._answer_inbox(inbox_id)
            except Exception as exc:  # logged; a sweep of this node's open inbox rows a second later retries it
                _trouble("taking a forwarded answer", exc)
                await trio.sleep(1.0)
                try:
                    self._inbox_send.send_nowait(None)
                except trio.WouldBlock:
                    pass  # full: a sweep is queued already

    async def _answer_inbox(self, inbox_id: int | None) -> None:
        from runtime.a2a.dialects import BadMessage
        from runtime.errors import RpcError
        from runtime.wire.jsonrpc import INVALID_PARAMS

        rows = await self.db.run(lambda conn: conn.execute(
            "SELECT id, task_id, caller, message FROM a2a_inbox WHERE node = %s AND NOT done AND (%s::bigint IS NULL "
            "OR id = %s) ORDER BY id LIMIT 100", (self.node_id, inbox_id, inbox_id)).fetchall())
        for row_id, task_id, caller, body in rows:
            result, code, error = None, None, None
            try:
                with trio.fail_after(FORWARD_SECS):  # the forwarding node stops waiting then anyway
                    task = await self.engine.answer(task_id, _message.decode(body), caller)
                result = _encode(task).decode()
            except trio.TooSlowError:
                code, error = UnsupportedOperation.code, f"the answer to task {task_id} was not taken in time"
            except BadMessage as exc:
                code, error = INVALID_PARAMS, str(exc)
            except RpcError as exc:
                code, error = exc.code, exc.message
            except msgspec.DecodeError:
                code, error = INVALID_PARAMS, "the forwarded message is not readable"

            def done(conn: Any, row_id: int = row_id, result: Any = result, code: Any = code,
                     error: Any = error) -> None:
                conn.execute("UPDATE a2a_inbox SET done = true, result = %s, error_code = %s, error = %s "
                             "WHERE id = %s", (result, code, error, row_id))
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"answered {row_id} 0"))

            await self.db.run(done)


def _counter(number: str) -> bool:
    """A version or inbox id as nodes write them: ASCII digits within a bigint."""
    return number.isascii() and number.isdigit() and len(number) <= 18


def _trouble(doing: str, exc: Exception) -> None:
    """One log line for a background loop's failed round (an unreachable database is
    logged once by the pool; anything else each time, with its trace if it is no
    storage error)."""
    if isinstance(exc, StatementFailed):
        log.warning("a2a: %s failed (%s); tried again", doing, exc)
    elif not isinstance(exc, StorageError):
        log.exception("a2a: %s failed; tried again", doing)


def _fail_one(conn: Any, task_id: str, text: str) -> tuple[int, str] | None:
    """Fail one task from its stored state (None: none stored, or it ended already)."""
    row = conn.execute("SELECT version, body FROM a2a_tasks WHERE id = %s AND NOT terminal FOR UPDATE",
                       (task_id,)).fetchone()
    if row is None:
        return None
    task = _ended(conn, task_id, row[0], row[1], "failed", text)
    return task.version, _encode(task).decode()


def _write(conn: Any, items: list[dict[str, Any]]) -> dict[str, tuple[int, str] | None]:
    """Each task's compare-and-swap write with its events and notify (one transaction);
    the tasks another node changed first, with the row as it is now (None: gone)."""
    lost: dict[str, tuple[int, str] | None] = {}
    for item in items:
        if conn.execute(_INSERT if item["insert"] else _UPDATE, item).fetchone() is None:
            row = conn.execute("SELECT version, body FROM a2a_tasks WHERE id = %s", (item["id"],)).fetchone()
            if row is not None and row[0] == item["new"] and row[1] == item["body"]:
                continue  # this very write, committed by an attempt whose answer was lost (the pool sent it again)
            # a new task's id taken meanwhile is another's task: this node just lets its own go
            lost[item["id"]] = None if item["insert"] else row
    return lost
