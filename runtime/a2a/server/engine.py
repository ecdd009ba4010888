"""One task engine under every A2A dialect: task life cycles, the bounded store, and
ordered events to every subscriber.

- A message starts a task, or continues one that waits for input (``taskId``; the
  ``contextId``, if given, must be the task's). The agent work runs in the engine's
  nursery under the task's own cancel scope, so ``cancel`` really stops it.
- Running work may put a question to the client and wait (``TaskReport.ask``: a tool
  call's approval): the task is input-required while the work goes on, and the
  client's next message on it is the answer, handed to the work rather than starting
  new work; the task is working again once it is answered (or the question is moot).
- The outcome of the agent work (``Outcome``) picks the next state: completed with an
  artifact, input-required (multi-turn), failed or rejected with a message.
- Events go to every subscriber in order through a bounded channel each; a subscriber
  that stops reading is dropped, never waited for, so one slow client cannot stall a
  task or other clients.
- Every state change follows :data:`TRANSITIONS`; any other is a bug in tern and
  raises :class:`IllegalTransition` (the task keeps its state).
- The store keeps at most ``max_tasks`` tasks and ``max_store_bytes`` bytes, and one
  task at most ``max_task_bytes`` (a task's bytes: its messages, artifacts and status
  as JSON, counted as each is added, never by re-encoding the task). Room is made by
  evicting terminal tasks oldest first; when live tasks fill it, new work is refused
  (:class:`StoreFull`) rather than growing without bound. A message that would take
  its task past ``max_task_bytes`` is refused (:class:`TaskTooLarge`: history is what
  the client was told was kept, so it is never truncated behind its back); agent
  output that would is not kept, the task fails saying why.
- At most ``max_subscribers`` streams follow one task; one more is refused
  (:class:`TooManySubscribers`).
- With ``shared`` (``[state] store = "postgres"``, ``shared.py``) several nodes share
  the tasks: this node holds a task only while it runs its work, answers for every
  other from the database, and acknowledges a send or a cancel only once it is written.
"""

from __future__ import annotations

import inspect
import time
from collections import OrderedDict
from typing import Any
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import trio

from runtime import tracing
from runtime.a2a import protocol
from runtime.a2a.model import (INTERRUPTED, Artifact, ArtifactEvent, Event, Message, StatusEvent, Task, new_id)
from runtime.errors import RpcError, StorageError, TernError
from runtime.config.keys import OWNER_NAMES
from runtime.ports import Caller
from runtime.wire.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

__all__ = [
    "TaskEngine",
    "Outcome",
    "TaskReport",
    "A2aError",
    "TaskNotFound",
    "TaskNotCancelable",
    "StoreFull",
    "TaskTooLarge",
    "TooManySubscribers",
    "StorageUnavailable",
    "InvalidTaskRequest",
    "UnsupportedOperation",
    "IllegalTransition",
    "TRANSITIONS",
    "Answer",
]

SUBSCRIBER_EVENTS = 256
TASK_OVERHEAD = 512  # bytes a task counts for besides its ids and messages (field names, state, times)
_size_encoder = msgspec.json.Encoder()


def size_of(item: Message | Artifact | None) -> int:
    """Bytes ``item`` counts for in its task's budget: its JSON encoding."""
    return 0 if item is None else len(_size_encoder.encode(item))

_AFTER_LIVE = frozenset(
    {"submitted", "working", "input-required", "auth-required", "completed", "canceled", "failed", "rejected"}
)
#: Which state may follow which. A task is born submitted; while its work runs it may
#: report submitted or working (again) and ends in any state; a task waiting for its
#: client is continued (submitted) or canceled, or, when running work asked the question
#: (``TaskReport.ask``), works again once it is answered; a terminal task never moves again.
TRANSITIONS: dict[str, frozenset[str]] = {
    "submitted": _AFTER_LIVE,
    "working": _AFTER_LIVE,
    "input-required": frozenset({"submitted", "working", "canceled"}),
    "auth-required": frozenset({"submitted", "canceled"}),
    "completed": frozenset(),
    "canceled": frozenset(),
    "failed": frozenset(),
    "rejected": frozenset(),
}


class A2aError(RpcError):
    """An A2A error: an ``RpcError`` whose code its class names (``protocol.ERRORS``
    names each code), so every binding answers it as it answers any RpcError."""

    code = INTERNAL_ERROR

    def __init__(self, message: str, data: object = None) -> None:
        super().__init__(type(self).code, message, data)
        self.http_status = protocol.http_status(self.code)  # A2A's own table: 404 for TaskNotFound, ...


class TaskNotFound(A2aError):
    code = protocol.TASK_NOT_FOUND


class TaskNotCancelable(A2aError):
    code = protocol.TASK_NOT_CANCELABLE


class UnsupportedOperation(A2aError):
    code = protocol.UNSUPPORTED_OPERATION


class InvalidTaskRequest(A2aError):
    code = INVALID_PARAMS


class StoreFull(A2aError):
    code = INTERNAL_ERROR


class TaskTooLarge(A2aError):
    """The message would take its task past ``[a2a] max_task_bytes``."""

    code = INVALID_PARAMS


class TooManySubscribers(A2aError):
    code = INTERNAL_ERROR


class StorageUnavailable(A2aError, StorageError):
    """Tasks cannot be saved right now (the disk is full): new work waits for space. It is
    the one "storage down" (a ``StorageError``), said in A2A's terms."""

    code = INTERNAL_ERROR

    def __init__(self, message: str, data: object = None) -> None:
        super().__init__(message, data)
        self.http_status = StorageError.http_status  # 503 wherever plain HTTP says it


class IllegalTransition(TernError):
    """A bug: tern tried to move a task to a state :data:`TRANSITIONS` does not allow."""


class Outcome(msgspec.Struct, kw_only=True):
    """What a piece of agent work ended in. By default ``text`` becomes the completed
    task's artifact (or the status message of any other state); with ``status_text``
    it is the status message whatever the state, and only ``artifacts`` are artifacts."""

    state: str = "completed"  # completed | input-required | auth-required | failed | rejected
    text: str = ""
    artifacts: list[Artifact] = []
    status_text: bool = False
    reply: Message | None = None  # answer with a Message instead of a task (1.0/0.3 allow it)


class TaskReport:
    """What a runner may tell while it works: status updates and artifact chunks, which
    go out as the task's events in order."""

    def __init__(self, engine: TaskEngine, entry: _Entry) -> None:
        self._engine, self._entry = engine, entry

    @property
    def who(self) -> Caller | None:
        """The caller whose message this turn answers (None: one trusted with every right,
        as the engine was called without a caller)."""
        return self._entry.who

    @property
    def new_context(self) -> bool:
        """This turn created the task with a context id tern minted for it: no
        conversation can have that id yet, so there is no owner to look up."""
        return self._entry.new_context

    def status(self, state: str, text: str | None = None) -> None:
        task = self._entry.task
        if state not in ("submitted", "working") or (state == task.state and not text):
            return  # final states come with the Outcome; a repeat says nothing
        if self._entry.answer is not None:
            return  # the client is being asked: the task stays input-required until that ends
        self._engine._set(self._entry, state, _agent_text(text, task) if text else None)

    def working(self) -> None:
        self.status("working")

    @property
    def asking(self) -> bool:
        """A question of this work's is open (``ask``)."""
        return self._entry.answer is not None

    def ask(self, question: Message, answer: Answer) -> bool:
        """Put ``question`` to the client while the work waits for something only a
        person can give (a tool call's approval): the task goes to input-required with
        it, and the client's next message on the task goes to ``answer`` instead of
        starting new work. ``answer(message, caller)`` raises an ``A2aError`` (or ``BadMessage``)
        for a message it cannot take (the task stays input-required and the message is
        not kept), or returns the text of the working status the task goes back to.
        False, and nothing changes, when the task cannot be asked now: a question is
        already open, the task has ended, or the question does not fit its budget."""
        entry = self._entry
        if entry.answer is not None or entry.task.state not in ("submitted", "working"):
            return False
        try:
            self._engine._ask(entry, question, answer)
        except A2aError:
            return False
        return True

    def resume(self, text: str | None = None) -> None:
        """The open question is moot (answered elsewhere, or no longer needed): the task
        works again, with ``text`` as its status message. Nothing happens when no question
        is open (the client's answer already resumed it) or the task has ended."""
        entry = self._entry
        if entry.answer is None:
            return
        self._engine._close_question(entry)
        if entry.task.state == "input-required":
            self._engine._set(entry, "working", _agent_text(text, entry.task) if text else None)

    def artifact(self, artifact: Artifact, *, append: bool = False, last_chunk: bool = True) -> None:
        """A chunk: with ``append`` its parts extend the artifact of the same id."""
        task = self._entry.task
        self._engine._grow(self._entry, size_of(artifact), "the agent's artifact")
        if task.state != "working":
            self.working()
        existing = next((a for a in task.artifacts if a.artifact_id == artifact.artifact_id), None) if append else None
        if existing is not None:
            existing.parts.extend(artifact.parts)
            index = task.artifacts.index(existing)
        else:
            task.artifacts.append(
                Artifact(
                    parts=list(artifact.parts),
                    artifact_id=artifact.artifact_id,
                    name=artifact.name,
                    description=artifact.description,
                    metadata=artifact.metadata,
                )
            )
            index = len(task.artifacts) - 1
        self._engine._emit(
            self._entry,
            ArtifactEvent(
                task_id=task.id,
                context_id=task.context_id,
                artifact=artifact,
                append=append,
                last_chunk=last_chunk,
                index=index,
            ),
        )


Runner = Callable[[Task, Message, TaskReport], Awaitable[Outcome]]
#: Takes the client's answer to an open question, and who sent it (see ``TaskReport.ask``);
#: a plain function or a coroutine function.
Answer = Callable[[Message, str], Any]


class _Entry:
    __slots__ = ("task", "scope", "subscribers", "changed", "running", "size", "status_size", "answer", "who",
                 "new_context")

    def __init__(self, task: Task, size: int = TASK_OVERHEAD) -> None:
        self.task = task
        self.size = size  # bytes counted against the budgets (status_size included)
        self.status_size = 0  # of the status message that is not in the history
        self.scope: trio.CancelScope | None = None
        self.subscribers: list[trio.MemorySendChannel[Event]] = []
        self.changed = trio.Event()
        self.running = False
        self.answer: Answer | None = None  # the running work asked the client (TaskReport.ask)
        self.who: Caller | None = None  # who sent the message the work now answers
        self.new_context = False  # this turn's context id was minted with the task (TaskReport.new_context)


class TaskEngine:
    def __init__(
        self,
        runner: Runner,
        *,
        max_tasks: int = 1000,
        max_task_bytes: int = 8 * 1024 * 1024,
        max_store_bytes: int = 128 * 1024 * 1024,
        max_subscribers: int = 32,
        on_change: Callable[[Task], None] | None = None,
        on_evict: Callable[[str], None] | None = None,
        max_tasks_per_caller: int = 0,
    ) -> None:
        """``max_tasks_per_caller``: what one key's tasks may hold of the store (0: a tenth
        of ``max_tasks``); past it the key's own oldest finished task goes, never another's."""
        self.runner = runner
        self.max_tasks = max_tasks
        self.max_tasks_per_caller = max_tasks_per_caller or max(1, max_tasks // 10)
        self.max_task_bytes = max_task_bytes
        self.max_store_bytes = max_store_bytes
        self.max_subscribers = max_subscribers
        self.bytes = 0  # of every stored task, kept up to date as tasks grow and go
        #: Why new work is refused right now (the task store cannot write), or None.
        self.refusal: Callable[[], str | None] | None = None
        self.on_change = on_change  # persistence, metrics, the kernel's event bus
        self.on_evict = on_evict
        self.listeners: list[Callable[[Task, Event], None]] = []  # every event of every task (push)
        #: [state] store = "postgres": the tasks every node shares (``shared.SharedTasks``), else None.
        self.shared: Any = None
        self._tasks: OrderedDict[str, _Entry] = OrderedDict()
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.shared is not None:
                await nursery.start(self.shared.run)
            task_status.started()
            await trio.sleep_forever()

    # --- Reading ----------------------------------------------------------------------------

    def peek(self, task_id: str) -> Task | None:
        """This node's copy of the task, or None (with ``shared``: only while it runs here)."""
        entry = self._tasks.get(task_id)
        return entry.task if entry is not None else None

    async def find(self, task_id: str, who: Caller | None = None) -> Task:
        """The task; ``TaskNotFound`` if there is none, or ``who`` (when given) does not own
        it and is no admin: the same error either way, so no caller learns another's ids."""
        entry = self._tasks.get(task_id)
        task = entry.task if entry is not None else None
        if self.shared is not None and task is None:
            task = await self.shared.load(task_id)
        elif self.shared is not None:
            task = await self.shared.fresh(task_id) or task  # another node's cancel is seen here at once
        if task is None or who is not None and not who.owns(task.owner):
            raise TaskNotFound(f"task {task_id!r} not found (it never existed, or was evicted)")
        return task

    def counts(self) -> dict[str, int]:
        """Tasks by state: this node's, or with ``shared`` every node's as last counted."""
        if self.shared is not None:
            return dict(self.shared.counts)
        counts: dict[str, int] = {}
        for entry in self._tasks.values():
            counts[entry.task.state] = counts.get(entry.task.state, 0) + 1
        return counts

    async def list(self, *, context_id: str | None = None, state: str | None = None, who: Caller | None = None,
                   offset: int = 0, limit: int | None = None) -> tuple[list[Task], int]:
        """One page (``offset``, ``limit``) of the tasks, newest status first, and how many
        there are in all; only ``who``'s own when given (an admin's: all)."""
        if self.shared is not None:
            return await self.shared.list(context_id=context_id, state=state,
                                          owner=None if who is None or who.allows("admin") else who.name,
                                          offset=offset, limit=limit)
        found = [
            e.task
            for e in self._tasks.values()
            if (context_id is None or e.task.context_id == context_id) and (state is None or e.task.state == state)
            and (who is None or who.owns(e.task.owner))
        ]
        found.sort(key=lambda t: t.timestamp, reverse=True)
        return found[offset:None if limit is None else offset + limit], len(found)

    def load(self, tasks: list[tuple[Task, int]]) -> None:
        """Tasks from a store that survived a restart, oldest first, each with its
        stored size (a live one there was cut off). What does not fit the budgets
        makes room the usual way: the oldest terminal tasks go."""
        for task, size in tasks:
            if task.id in self._tasks:
                continue
            # a question of running work (an approval) dies with the work: the task was cut off too
            cut_off = not task.terminal and (task.state not in INTERRUPTED or task.asking)
            task.asking = False
            if cut_off:
                old = size_of(task.status_message)
                task.state, task.status_message = (
                    "failed",
                    _agent_text("tern restarted while this task was running", task),
                )
                task.timestamp = time.time()
                size += size_of(task.status_message) - old
            size = max(size, TASK_OVERHEAD)
            try:
                self._check_task_size(task, size, "the stored task")
                self._make_room(size)
            except A2aError:
                if self.on_evict is not None:
                    self.on_evict(task.id)
                continue
            entry = _Entry(task, size)
            entry.status_size = size_of(task.status_message)
            self._tasks[task.id] = entry
            self.bytes += size
            if cut_off and self.on_change is not None:
                self.on_change(task)

    # --- Starting and continuing ------------------------------------------------------------

    async def send(self, agent: str, message: Message, *, task_id: str | None = None, dialect: str = "",
                   caller: str = "", who: Caller | None = None, settle_later: bool = False) -> Task:
        """Start a task for ``message`` (or continue the one its ``task_id`` names) and
        return it; the agent work runs in the background. ``task_id`` names a new task
        (0.1 clients choose their ids); otherwise the engine makes one up. ``caller``
        says who sent it, for an answer to a question of the work's (``TaskReport.ask``);
        ``who`` owns a new task, and may continue only its own (None: the owner "admin").
        With ``shared`` the task is written before this returns, unless ``settle_later``
        (a new task whose caller calls ``settle`` before it answers: one write, not two)."""
        assert self._nursery is not None, "TaskEngine.run() first"
        new = not message.task_id
        if message.task_id:
            entry = self._tasks.get(message.task_id)
            if entry is None and self.shared is not None:
                row = await self.shared.load_row(message.task_id)
                if row is not None and (who is None or who.owns(row[0].owner)):
                    return await self._elsewhere(agent, message, row[0], row[1], caller, who)
            if entry is None or who is not None and not who.owns(entry.task.owner):
                raise TaskNotFound(f"task {message.task_id!r} not found (it never existed, or was evicted)")
            task = entry.task
            if message.context_id and message.context_id != task.context_id:
                raise InvalidTaskRequest(f"contextId {message.context_id!r} is not the context of task {task.id!r}")
            if task.terminal:
                raise UnsupportedOperation(f"task {task.id} is {task.state}; start a new task in its context instead")
            if entry.answer is not None:
                return await self._answer(entry, message, caller)
            if entry.running:
                raise UnsupportedOperation(f"task {task.id} is still working; wait for it or cancel it")
            self._refuse_if_unsaved()
            message.context_id = task.context_id
            message.task_id = task.id
            self._grow(entry, size_of(message), "the message")
            entry.new_context = False
        else:
            if task_id is not None and (task_id in self._tasks
                                        or self.shared is not None and await self.shared.load(task_id) is not None):
                raise InvalidTaskRequest(f"task {task_id!r} exists already")
            self._refuse_if_unsaved()
            message_context = message.context_id
            task = Task(id=task_id or new_id(), context_id=message_context or new_id(), agent=agent, dialect=dialect,
                        owner=who.name if who is not None else "admin")
            message.context_id, message.task_id = task.context_id, task.id
            size = TASK_OVERHEAD + len(task.id) + len(task.context_id) + len(agent) + size_of(message)
            self._check_task_size(task, size, "the message")
            self._share_of(task.owner)
            self._make_room(size)
            entry = _Entry(task, size)
            entry.new_context = not message_context
            self.bytes += size
            self._tasks[task.id] = entry
        task.history.append(message)
        entry.who = who
        entry.running = True
        if task.state != "submitted":
            self._set(entry, "submitted", None)
        else:
            self._changed(entry)
        scope = trio.CancelScope()
        entry.scope = scope
        if self.shared is not None and not (settle_later and new):  # acknowledged once written; then the work
            await self._written(entry)
        self._nursery.start_soon(self._work, entry, message, scope)
        return task

    async def settle(self, task_id: str) -> None:
        """With ``shared``: what this node changed of the task is written (before an answer shows it)."""
        if self.shared is not None:
            await self.shared.flush(task_id)

    async def _elsewhere(self, agent: str, message: Message, task: Task, node: str, caller: str,
                         who: Caller | None) -> Task:
        """With ``shared``: a message on a task this node does not hold. An answer to a
        question of its work goes to the node running it; a task that waits for its
        client is claimed and its next turn runs here (the write of that turn is the
        claim: if another node was faster, it fails)."""
        if message.context_id and message.context_id != task.context_id:
            raise InvalidTaskRequest(f"contextId {message.context_id!r} is not the context of task {task.id!r}")
        if task.terminal:
            raise UnsupportedOperation(f"task {task.id} is {task.state}; start a new task in its context instead")
        if task.asking and node:
            return await self.shared.forward(task, message, caller)
        if node:
            raise UnsupportedOperation(f"task {task.id} is still working; wait for it or cancel it")
        size = TASK_OVERHEAD + sum(size_of(m) for m in task.history) + sum(size_of(a) for a in task.artifacts)
        self._check_task_size(task, size, "the stored task")
        self._make_room(size)
        entry = _Entry(task, size)
        entry.status_size = size_of(task.status_message)
        self._tasks[task.id] = entry
        self.bytes += size
        try:
            await self.shared.hold(task)
            return await self.send(agent, message, caller=caller, who=who)
        except BaseException:
            if not entry.running:
                self.shared.forget(task.id)
                self._drop(entry)
            raise

    async def _written(self, entry: _Entry) -> None:
        """With ``shared``: wait until ``entry``'s changes are in the database; if they
        cannot be written, or another node changed the task meanwhile, the send fails and
        this node lets the task go."""
        task = entry.task
        try:
            await self.shared.flush(task.id)
        except BaseException:
            entry.running, entry.scope = False, None
            self.shared.forget(task.id)  # never told to the client: never written later either
            self._drop(entry)
            raise
        if self._tasks.get(task.id) is not entry:  # adopted a newer state from another node
            entry.running, entry.scope = False, None
            raise UnsupportedOperation(f"task {task.id} was changed on another node meanwhile (it is {task.state} "
                                       "now); read it again")

    def _drop(self, entry: _Entry) -> None:
        """With ``shared``: this node no longer holds the task (its work ended, written)."""
        if self._tasks.get(entry.task.id) is entry:
            del self._tasks[entry.task.id]
            self.bytes -= entry.size
            self.shared.forget(entry.task.id)

    async def answer(self, task_id: str, message: Message, caller: str) -> Task:
        """With ``shared``: another node forwarded ``message`` as the answer to the
        question of this task's work, which runs here."""
        entry = self._tasks.get(task_id)
        if entry is None or entry.answer is None:
            raise UnsupportedOperation(f"task {task_id} no longer waits for an answer; read it again")
        return await self._answer(entry, message, caller)

    def _ask(self, entry: _Entry, question: Message, answer: Answer) -> None:
        """``TaskReport.ask``: the question joins the history and is the status message."""
        task = entry.task
        question.context_id, question.task_id = task.context_id, task.id
        self._grow(entry, size_of(question), "the question")
        task.history.append(question)
        entry.answer, task.asking = answer, True
        self._set(entry, "input-required", question)

    def _close_question(self, entry: _Entry) -> None:
        entry.answer, entry.task.asking = None, False

    async def _answer(self, entry: _Entry, message: Message, caller: str) -> Task:
        """The client's message on a task whose running work asked it something: the
        work takes it (or refuses it, and nothing changes), and the task works again."""
        task, answer = entry.task, entry.answer
        assert answer is not None
        self._refuse_if_unsaved()
        message.context_id, message.task_id = task.context_id, task.id
        added = size_of(message)
        self._grow(entry, added, "the message")
        try:
            text = answer(message, caller)
            if inspect.isawaitable(text):
                text = await text
        except BaseException:
            entry.size -= added
            self.bytes -= added
            raise
        # ``answer`` returned, so the work took this message. The question may have closed
        # meanwhile, most often because of it (the decision woke the waiting call, whose
        # ``resume`` said how it ended): then the task already works again with its own
        # status, or has ended and is left as it ended.
        if task.terminal:
            entry.size -= added
            self.bytes -= added
            return task
        task.history.append(message)
        if entry.answer is answer:
            self._close_question(entry)
            self._set(entry, "working", _agent_text(text, task) if text else None)
        if self.shared is not None:
            await self.shared.flush(task.id)
        return task

    def _refuse_if_unsaved(self) -> None:
        reason = self.refusal() if self.refusal is not None else None
        if reason:
            raise StorageUnavailable(f"tern cannot save tasks right now ({reason}); try again later")

    def _check_task_size(self, task: Task, size: int, what: str) -> None:
        if size > self.max_task_bytes:
            raise TaskTooLarge(
                f"{what} would make task {task.id} {size} bytes; the limit is {self.max_task_bytes} bytes "
                "([a2a] max_task_bytes): send less, or start a new task"
            )

    def _grow(self, entry: _Entry, added: int, what: str) -> None:
        """Count ``added`` bytes into ``entry``'s task before they are added, or raise."""
        self._check_task_size(entry.task, entry.size + added, what)
        self._make_room(added, keep=entry)
        entry.size += added
        self.bytes += added

    def _share_of(self, owner: str) -> None:
        """Hold a key's tasks to its share of the store: at its share, its own oldest
        finished task goes (so one key's traffic never evicts another's); with none
        finished, ``StoreFull`` for that key alone. The owner's tasks are not counted."""
        if owner in OWNER_NAMES or len(self._tasks) < self.max_tasks_per_caller:
            return  # cheap on the hot path: no key can be at its share yet
        theirs = [task_id for task_id, e in self._tasks.items() if e.task.owner == owner]
        if len(theirs) < self.max_tasks_per_caller:
            return
        victim = next((task_id for task_id in theirs if (e := self._tasks[task_id]).task.terminal
                       and not e.subscribers), None)
        if victim is None:
            raise StoreFull(f"the key {owner!r} holds {len(theirs)} unfinished tasks, its share of this tern "
                            f"([a2a] max_tasks_per_caller); try again when some finish")
        self.bytes -= self._tasks.pop(victim).size
        if self.on_evict is not None:
            self.on_evict(victim)

    def _make_room(self, size: int = 0, *, keep: _Entry | None = None) -> None:
        """Evict terminal tasks, oldest first, until one more task (``keep`` is None)
        and ``size`` more bytes fit."""
        while (keep is None and len(self._tasks) >= self.max_tasks) or self.bytes + size > self.max_store_bytes:
            victim = next(
                (task_id for task_id, e in self._tasks.items()
                 if e.task.terminal and not e.subscribers and e is not keep), None
            )
            if victim is None:
                raise StoreFull(
                    f"tern is holding {len(self._tasks)} unfinished tasks of {self.bytes} bytes (the limits are "
                    f"{self.max_tasks} tasks and {self.max_store_bytes} bytes); try again when some finish"
                )
            self.bytes -= self._tasks.pop(victim).size
            if self.on_evict is not None:
                self.on_evict(victim)

    async def _work(self, entry: _Entry, message: Message, scope: trio.CancelScope) -> None:
        task = entry.task
        outcome: Outcome | None = None
        try:
            with scope, tracing.span(f"a2a.task {task.agent}", tracing.INTERNAL,
                                     {"a2a.task.id": task.id, "gen_ai.agent.name": task.agent}) as span:
                try:
                    outcome = await self.runner(task, message, TaskReport(self, entry))
                    self._drop_question(entry)
                    _check(task, outcome.state)  # a runner's impossible outcome fails the task
                except TernError as exc:
                    outcome = Outcome(state="failed", text=str(exc))
                except Exception as exc:  # a bug in an agent kind: the task fails, tern goes on
                    outcome = Outcome(state="failed", text=f"internal error: {type(exc).__name__}")
                span.set("a2a.task.state", outcome.state)
                if outcome.state == "failed":
                    span.error("task_failed")
        finally:
            entry.running = False
            entry.scope = None
            self._drop_question(entry)
        if not (scope.cancel_called or outcome is None):  # else cancel() moved it to canceled already
            self._finish(entry, outcome)
        if self.shared is not None:
            await self._release(entry)

    async def _release(self, entry: _Entry) -> None:
        """With ``shared``: the work ended here; once what it did is written, the task is
        the database's (any node may continue it), unless a new turn began meanwhile."""
        with trio.CancelScope(shield=True):
            with trio.move_on_after(30):
                while True:
                    try:
                        await self.shared.flush(entry.task.id)
                        break
                    except TernError:  # the database is away: the writer keeps it, retrying
                        await trio.sleep(1.0)
        if not entry.running and entry.answer is None:
            self._drop(entry)

    def _drop_question(self, entry: _Entry) -> None:
        """The work ended (or failed) with its question still open: the question is
        moot, and the task is working again so that the outcome can follow."""
        if entry.answer is not None:
            self._close_question(entry)
            if entry.task.state == "input-required":
                self._set(entry, "working", None)

    def _finish(self, entry: _Entry, outcome: Outcome) -> None:
        task = entry.task
        added = size_of(outcome.reply) + sum(size_of(a) for a in outcome.artifacts)
        if outcome.text:
            added += len(outcome.text.encode()) * 2 + TASK_OVERHEAD  # the text may be both artifact and reply
        try:
            self._grow(entry, added, "the agent's answer")
        except A2aError as exc:
            outcome = Outcome(state="failed", text=f"the answer was not kept: {exc}")
        if outcome.reply is not None:
            outcome.reply.context_id, outcome.reply.task_id = task.context_id, task.id
            task.history.append(outcome.reply)
            task.reply = outcome.reply
            self._set(entry, outcome.state, None)
            return
        if outcome.status_text:
            self._add_artifacts(entry, outcome.artifacts)
            status = _agent_text(outcome.text, task) if outcome.text else None
            if status is not None:
                task.history.append(status)
            self._set(entry, outcome.state, status)
            return
        if outcome.state == "completed":
            self._add_artifacts(entry, outcome.artifacts or [Artifact(parts=[{"text": outcome.text}], name="reply")])
            reply = _agent_text(outcome.text, task) if outcome.text else None
            if reply is not None:
                task.history.append(reply)
            self._set(entry, "completed", None)
        else:
            status = _agent_text(outcome.text, task) if outcome.text else None
            if status is not None and outcome.state in INTERRUPTED:
                task.history.append(status)
            self._set(entry, outcome.state, status)

    def _add_artifacts(self, entry: _Entry, artifacts: list[Artifact]) -> None:
        """Append each artifact to the task and tell subscribers, in order."""
        task = entry.task
        for artifact in artifacts:
            task.artifacts.append(artifact)
            self._emit(entry, ArtifactEvent(task_id=task.id, context_id=task.context_id, artifact=artifact,
                                            index=len(task.artifacts) - 1))

    # --- Cancel -----------------------------------------------------------------------------

    async def cancel(self, task_id: str, who: Caller | None = None) -> Task:
        """Cancel the task (``who``, when given, must own it): its work stops, wherever
        it runs. ``TaskNotCancelable`` once it has ended."""
        entry = self._tasks.get(task_id)
        if entry is None and self.shared is not None:
            return await self.shared.cancel(task_id, who)
        if entry is None or who is not None and not who.owns(entry.task.owner):
            raise TaskNotFound(f"task {task_id!r} not found (it never existed, or was evicted)")
        if entry.task.terminal:
            raise TaskNotCancelable(f"task {task_id} is already {entry.task.state}")
        if entry.scope is not None:
            entry.scope.cancel()  # the agent's work stops (a command agent's process is killed)
        self._set(entry, "canceled", None)
        if self.shared is not None:
            await self.shared.flush(task_id)
            if not entry.running:
                self._drop(entry)
        return entry.task

    def adopt(self, task_id: str, task: Task | None) -> None:
        """With ``shared``: another node (a cancel, the reaper of a node that stopped
        answering, a claim) wrote a newer state ``task`` of a task this node holds (None:
        the task is another's or gone): this node takes that state; its work here stops,
        its streams here end, and it lets the task go."""
        entry = self._tasks.get(task_id)
        if entry is None:
            return
        if entry.scope is not None:
            entry.scope.cancel()
        self._close_question(entry)
        if task is not None:
            for field in task.__struct_fields__:
                setattr(entry.task, field, getattr(task, field))
            event = StatusEvent(task_id=task.id, context_id=task.context_id, state=task.state,
                                message=task.status_message, timestamp=task.timestamp, final=True)
            if task.terminal:  # this node's webhooks of the task hear how it ended (the node that ended it does not)
                for listener in self.listeners:
                    listener(entry.task, event)
            for channel in entry.subscribers:
                try:
                    channel.send_nowait(event)
                except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
        for channel in entry.subscribers:
            channel.close()
        entry.subscribers.clear()
        entry.running = False
        entry.changed.set()
        entry.changed = trio.Event()
        self._drop(entry)

    # --- Events -----------------------------------------------------------------------------

    def _set(self, entry: _Entry, state: str, message: Message | None) -> None:
        """The one place a task's state changes."""
        task = entry.task
        _check(task, state)
        status_size = size_of(message)
        if status_size > entry.status_size:
            try:
                self._check_task_size(task, entry.size + status_size - entry.status_size, "the status message")
                self._make_room(status_size - entry.status_size, keep=entry)
            except A2aError:
                message = _agent_text(f"(a status message of {status_size} bytes was not kept: no room)", task)
                status_size = size_of(message)
        entry.size += status_size - entry.status_size
        self.bytes += status_size - entry.status_size
        entry.status_size = status_size
        task.state, task.status_message, task.timestamp = state, message, time.time()
        final = task.terminal or state in INTERRUPTED
        self._emit(
            entry,
            StatusEvent(
                task_id=task.id,
                context_id=task.context_id,
                state=state,
                message=message,
                timestamp=task.timestamp,
                final=final,
            ),
        )
        if final:
            for channel in entry.subscribers:
                channel.close()
            entry.subscribers.clear()

    def _emit(self, entry: _Entry, event: Event) -> None:
        if self.shared is not None:
            self.shared.event(entry.task, event)
        for listener in self.listeners:
            listener(entry.task, event)
        for channel in list(entry.subscribers):
            try:
                channel.send_nowait(event)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                channel.close()  # too slow or gone: dropped, never waited for
                entry.subscribers.remove(channel)
        self._changed(entry)

    def _changed(self, entry: _Entry) -> None:
        entry.changed.set()
        entry.changed = trio.Event()
        if self.shared is not None:
            self.shared.changed(entry.task, running=entry.running)
        if self.on_change is not None:
            self.on_change(entry.task)

    async def subscribe(self, task_id: str, *, after: int | None = None) -> trio.MemoryReceiveChannel[Event]:
        """Every event of the task from now on, until it is final (the channel ends). With
        ``shared``, a task another node runs is followed through the database: its events
        after version ``after`` (the snapshot the caller showed), else after the current one."""
        entry = self._tasks.get(task_id)
        if entry is None and self.shared is not None:
            return await self.shared.follow(task_id, after)
        if entry is None:
            raise TaskNotFound(f"task {task_id!r} not found (it never existed, or was evicted)")
        if len(entry.subscribers) >= self.max_subscribers:  # first forget followers that went away
            entry.subscribers = [s for s in entry.subscribers if s.statistics().open_receive_channels]
        if len(entry.subscribers) >= self.max_subscribers:
            raise TooManySubscribers(
                f"task {task_id} already has {len(entry.subscribers)} streams following it (the limit is "
                f"{self.max_subscribers}, [a2a] max_subscribers_per_task); close one or poll GetTask"
            )
        send, receive = trio.open_memory_channel[Event](SUBSCRIBER_EVENTS)
        if entry.task.terminal:
            send.close()
        else:
            entry.subscribers.append(send)
        return receive

    async def wait(self, task_id: str) -> Task:
        """Until the task is terminal or waits for input (its work ended there, or asks
        while it runs)."""
        entry = self._tasks.get(task_id)
        if entry is None and self.shared is not None:
            return await self.shared.wait(task_id)
        if entry is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        while not (entry.task.terminal or (entry.task.state in INTERRUPTED
                                           and (not entry.running or entry.answer is not None))):
            await entry.changed.wait()
        return entry.task

    async def events(self, task_id: str) -> AsyncIterator[Event]:
        async with await self.subscribe(task_id) as receive:
            async for event in receive:
                yield event


def _check(task: Task, state: str) -> None:
    if state not in TRANSITIONS.get(task.state, ()):
        raise IllegalTransition(f"task {task.id} cannot go from {task.state} to {state}")


def _agent_text(text: str, task: Task | None = None) -> Message:
    message = Message(role="agent", parts=[{"text": text}])
    if task is not None:
        message.context_id, message.task_id = task.context_id, task.id
    return message
