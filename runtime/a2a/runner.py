"""How A2A plugs into the kernel: a task runs a tern agent (the message goes to the
agent as text, in the conversation named by the task's contextId; the reply completes
the task), and ``build`` makes the engine, push notifier and optional store."""

from __future__ import annotations

import json
from typing import Any

from runtime.a2a.dialects import BadMessage, parse_part
from runtime.a2a.engine import Outcome, TaskReport
from runtime.a2a.model import Artifact, Message, Task, text_of

FINAL_STATES = {"completed", "input-required", "auth-required", "failed", "rejected"}

__all__ = ["agent_runner", "build"]


def agent_runner(kernel: Any) -> Any:
    """The engine's runner: a task's message goes to the tern agent as text, in the
    conversation named by the task's contextId. A command agent with ``a2a_events``
    drives the task itself (``events_agent``)."""
    from runtime.kernel.agents import AgentError, UnknownAgent

    async def run(task: Task, message: Message, report: TaskReport) -> Outcome:
        agent = kernel.agents.get(task.agent)
        if agent.kind == "command" and agent.a2a_events:
            return await _events_agent(kernel, task, message, report)
        report.working()
        try:
            reply = await kernel.agents.send(task.agent, text_of(message.parts), context_id=task.context_id)
        except (AgentError, UnknownAgent) as exc:
            return Outcome(state="failed", text=str(exc))
        return Outcome(state="completed", text=reply.text)

    return run


async def _events_agent(kernel: Any, task: Task, message: Message, report: TaskReport) -> Outcome:
    """A command agent speaking JSON Lines (docs/a2a-events.md): events as it works, the
    outcome on its last line. It learns which message and task from ``TERN_A2A_*``."""
    from runtime.kernel.agents import AgentError

    env = {"TERN_A2A_MESSAGE_ID": message.message_id, "TERN_A2A_TASK_ID": task.id,
           "TERN_A2A_CONTEXT_ID": task.context_id, "TERN_A2A_DIALECT": task.dialect or ""}
    last: dict[str, Any] = {}
    problems: list[str] = []

    def on_line(line: str) -> None:
        line = line.strip()
        if not line:
            return
        try:
            event = json.loads(line)
        except ValueError:
            problems.append(f"not JSON: {line[:80]}")
            return
        if not isinstance(event, dict):
            problems.append(f"not an object: {line[:80]}")
            return
        try:
            if event.get("event") == "status":
                report.status(str(event.get("state")), event.get("text") if isinstance(event.get("text"), str) else None)
            elif event.get("event") == "artifact":
                report.artifact(_artifact(event.get("artifact")), append=bool(event.get("append")),
                                last_chunk=bool(event.get("lastChunk", True)))
            else:
                last.clear()
                last.update(event)
        except BadMessage as exc:
            problems.append(str(exc))

    try:
        await kernel.agents.send(task.agent, text_of(message.parts), context_id=task.context_id, on_text=on_line,
                                 env=env)
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
    artifact = Artifact(parts=[parse_part(p, i) for i, p in enumerate(obj["parts"])], name=obj.get("name"),
                        description=obj.get("description"))
    if obj.get("artifactId"):
        artifact.artifact_id = str(obj["artifactId"])
    return artifact


def build(kernel: Any) -> tuple[Any, Any, Any]:
    """The kernel's A2A parts: the task engine, its push notifier, and the task store
    when ``[a2a] persist_tasks`` (tasks loaded from it before anything runs)."""
    from pathlib import Path

    from runtime.a2a.engine import TaskEngine
    from runtime.a2a.push import PushNotifier
    from runtime.net.guard import AddressPolicy

    config = kernel.config
    store = None
    if config.a2a.persist_tasks and config.state.dir:
        from runtime.a2a.store import TaskStore

        store = TaskStore(Path(config.state.dir) / "a2a_tasks.sqlite3")
    engine = TaskEngine(agent_runner(kernel), max_tasks=config.a2a.max_tasks,
                        on_change=store.changed if store else None, on_evict=store.evicted if store else None)
    if store is not None:
        engine.load(store.load())
    return engine, PushNotifier(engine, AddressPolicy.from_security(config.security)), store
