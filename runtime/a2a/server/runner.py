"""How an A2A task runs a tern agent, through the kernel's ``AgentPort``: the message
goes to the agent as text, in the conversation named by the task's contextId, and the
reply completes the task. A tool call of the run that waits for a person's approval
shows on the task (``asking.py``). ``A2aService`` holds the engine, push notifier and
optional store that the composition root starts, and the agents' ``admit`` that the
bindings ask before a task is created (a spent budget is refused with no task at all). A
budget spent between that check and the agent's turn (two callers at once) rejects the
task with the budget's sentence."""

from __future__ import annotations

from typing import Any

import trio

from runtime.wire.depth import loads as json_loads
from runtime.a2a.dialects import BadMessage, parse_part
from runtime.a2a.server.engine import Outcome, TaskReport
from runtime.a2a.model import Artifact, Message, Task, text_of
from runtime.config import Config
from runtime.ports import AgentPort, ApprovalPort, EventPort

FINAL_STATES = {"completed", "input-required", "auth-required", "failed", "rejected"}

__all__ = ["agent_runner", "A2aService"]


def agent_runner(agents: AgentPort, approvals: ApprovalPort | None = None, *, caller_may_approve: bool = False,
                 lent: dict[str, tuple[Any, Any]] | None = None) -> Any:
    """The engine's runner: a task's message goes to the tern agent as text, in the
    conversation named by the task's contextId. A command agent with ``a2a_events``
    drives the task itself (``events_agent``). A tool call that waits for approval is
    shown on the task, and with ``caller_may_approve`` put to the caller, who decides
    through ``approvals`` (``asking.approval_asker``). A task another protocol started
    (``mcp_tasks.py``) runs with the ``ask`` and ``sample`` that caller lent it
    (``lent``, by task id) instead."""
    from runtime.a2a.server.asking import approval_asker
    from runtime.errors import AgentError, BudgetExceeded, Forbidden, UnknownAgent

    async def run(task: Task, message: Message, report: TaskReport) -> Outcome:
        agent = agents.get(task.agent)
        if agent.kind == "command" and agent.a2a_events:
            return await _events_agent(agents, task, message, report)
        report.working()
        ask, sample = (lent or {}).get(task.id, (None, None))
        if ask is None:
            ask = approval_asker(task, report, approvals, caller_may_approve=caller_may_approve)
        try:
            lent_model = {"sample": sample} if sample is not None else {}
            reply = await agents.send(task.agent, text_of(message.parts), context_id=task.context_id, ask=ask,
                                      owner=report.who, new_context=report.new_context, **lent_model)
        except (BudgetExceeded, Forbidden) as exc:
            return Outcome(state="rejected", text=str(exc))
        except (AgentError, UnknownAgent) as exc:
            return Outcome(state="failed", text=str(exc))
        return Outcome(state="completed", text=reply.text)

    return run


async def _events_agent(agents: AgentPort, task: Task, message: Message, report: TaskReport) -> Outcome:
    """A command agent speaking JSON Lines (docs/a2a-events.md): events as it works, the
    outcome on its last line. It learns which message and task from ``TERN_A2A_*``."""
    from runtime.errors import AgentError, BudgetExceeded, Forbidden

    env = {"TERN_A2A_MESSAGE_ID": message.message_id, "TERN_A2A_TASK_ID": task.id,
           "TERN_A2A_CONTEXT_ID": task.context_id, "TERN_A2A_DIALECT": task.dialect or ""}
    last: dict[str, Any] = {}
    problems: list[str] = []

    def on_line(line: str) -> None:
        line = line.strip()
        if not line:
            return
        try:
            event = json_loads(line)
        except ValueError:
            problems.append(f"not JSON: {line[:80]}")
            return
        if not isinstance(event, dict):
            problems.append(f"not an object: {line[:80]}")
            return
        try:
            if event.get("event") == "status":
                report.status(
                    str(event.get("state")), event.get("text") if isinstance(event.get("text"), str) else None
                )
            elif event.get("event") == "artifact":
                report.artifact(
                    _artifact(event.get("artifact")),
                    append=bool(event.get("append")),
                    last_chunk=bool(event.get("lastChunk", True)),
                )
            else:
                last.clear()
                last.update(event)
        except BadMessage as exc:
            problems.append(str(exc))

    try:
        await agents.send(task.agent, text_of(message.parts), context_id=task.context_id, on_text=on_line, env=env,
                          owner=report.who)
    except (BudgetExceeded, Forbidden) as exc:
        return Outcome(state="rejected", text=str(exc))
    except AgentError as exc:
        return Outcome(state="failed", text=str(exc))
    if last.get("message"):
        try:
            parts = [parse_part(p, i) for i, p in enumerate(last.get("parts") or [{"text": str(last.get("text", ""))}])]
        except BadMessage as exc:
            return Outcome(state="failed", text=f"the agent's reply is not valid A2A: {exc}")
        return Outcome(reply=Message(role="agent", parts=parts))
    state = last.get("state")
    if state not in FINAL_STATES:
        why = "; ".join(problems[-3:]) or "its last line names no final state"
        return Outcome(state="failed", text=f"the agent ended without an outcome ({why})", status_text=True)
    try:
        artifacts = [_artifact(a) for a in last.get("artifacts") or []]
    except BadMessage as exc:
        return Outcome(state="failed", text=f"the agent's artifacts are not valid A2A: {exc}", status_text=True)
    return Outcome(state=state, text=str(last.get("text") or ""), artifacts=artifacts, status_text=True)


def _artifact(obj: Any) -> Artifact:
    if not isinstance(obj, dict) or not isinstance(obj.get("parts"), list):
        raise BadMessage("an artifact needs parts")
    artifact = Artifact(
        parts=[parse_part(p, i) for i, p in enumerate(obj["parts"])],
        name=obj.get("name"),
        description=obj.get("description"),
    )
    if obj.get("artifactId"):
        artifact.artifact_id = str(obj["artifactId"])
    return artifact


class A2aService:
    """The A2A server's moving parts: the task engine, its push notifier, and the task
    store when ``[a2a] persist_tasks`` (tasks loaded from it before anything runs).
    ``approvals`` is how a caller's answer decides a tool call's approval
    (``[a2a] caller_may_approve``); without it a task only shows that it waits. With
    ``db`` (``[state] store = "postgres"``: the kernel's database, its ``listener`` and
    ``node_id``) the tasks are shared with every node on that database (``shared.py``)
    instead, and ``persist_tasks`` does not apply."""

    def __init__(self, config: Config, agents: AgentPort, approvals: ApprovalPort | None = None, *,
                 events: EventPort | None = None, db: Any = None, listener: Any = None,
                 node_id: str = "") -> None:
        from pathlib import Path

        from runtime.a2a.server.engine import TaskEngine
        from runtime.a2a.server.push import PushNotifier
        from runtime.net.guard import AddressPolicy

        self.agents = agents  # the bindings ask its admit() before they create a task
        self.store: Any = None
        if db is None and config.a2a.persist_tasks and config.state.dir:
            from runtime.a2a.server.store import TaskStore

            self.store = TaskStore(Path(config.state.dir) / "a2a_tasks.sqlite3")
        store = self.store
        a2a = config.a2a
        self.lent: dict[str, tuple[Any, Any]] = {}  # task id -> (ask, sample) of tasks MCP started
        self.engine = TaskEngine(
            agent_runner(agents, approvals, caller_may_approve=a2a.caller_may_approve, lent=self.lent),
            max_tasks=a2a.max_tasks, max_tasks_per_caller=a2a.max_tasks_per_caller,
            max_task_bytes=a2a.max_task_bytes,
            max_store_bytes=a2a.max_store_bytes,
            max_subscribers=a2a.max_subscribers_per_task,
            on_change=store.changed if store else None,
            on_evict=self._evicted,
        )
        if db is not None:
            from runtime.a2a.server.shared import SharedTasks

            shared = SharedTasks(db, listener, node_id, lease_secs=config.state.lease_secs, max_tasks=a2a.max_tasks,
                                 max_subscribers=a2a.max_subscribers_per_task)
            shared.attach(self.engine)
        if store is not None:
            self.engine.refusal = store.fault
            self.engine.load(store.load(max_tasks=a2a.max_tasks, max_bytes=a2a.max_store_bytes,
                                        max_task_bytes=a2a.max_task_bytes))
        self.push = PushNotifier(self.engine, AddressPolicy.from_security(config.security), a2a.push_webhooks)
        if db is not None:
            self.push.share(shared)
        if events is not None:  # every task's state changes on the kernel's bus ("a2a.task"; `tern events`)
            self.engine.listeners.append(_publisher(events))

    def _evicted(self, task_id: str) -> None:
        self.lent.pop(task_id, None)
        if self.store is not None:
            self.store.evicted(task_id)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; ``task_status.started()`` once the parts are up."""
        async with trio.open_nursery() as nursery:
            if self.store is not None:
                await nursery.start(self.store.run)
            await nursery.start(self.engine.run)
            await nursery.start(self.push.run)
            task_status.started()


def _publisher(events: EventPort) -> Any:
    """An engine listener that publishes each task transition (not artifact chunks: a
    streaming agent would flood the bus) as one small event: ids, agent, state, and the
    status text cut short."""
    from runtime.a2a.model import StatusEvent

    def publish(task: Task, event: Any) -> None:
        if isinstance(event, StatusEvent):
            text = text_of(event.message.parts)[:200] if event.message is not None else ""
            events.publish("a2a.task", {"task_id": task.id, "context_id": task.context_id, "agent": task.agent,
                                        "state": event.state, "final": event.final, "text": text})

    return publish
