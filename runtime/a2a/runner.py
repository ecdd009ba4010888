"""How A2A plugs into the kernel: a task runs a tern agent (the message goes to the
agent as text, in the conversation named by the task's contextId; the reply completes
the task), and ``build`` makes the engine, push notifier and optional store."""

from __future__ import annotations

from typing import Any

from runtime.a2a.engine import Outcome
from runtime.a2a.model import Message, Task, text_of

__all__ = ["agent_runner", "build"]


def agent_runner(kernel: Any) -> Any:
    """The engine's runner: a task's message goes to the tern agent as text, in the
    conversation named by the task's contextId."""
    from runtime.kernel.agents import AgentError, UnknownAgent

    async def run(task: Task, message: Message, on_text: Any) -> Outcome:
        try:
            reply = await kernel.agents.send(task.agent, text_of(message.parts), context_id=task.context_id,
                                             on_text=on_text)
        except (AgentError, UnknownAgent) as exc:
            return Outcome(state="failed", text=str(exc))
        return Outcome(state="completed", text=reply.text)

    return run


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
