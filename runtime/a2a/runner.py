"""How an A2A task runs a tern agent: the message goes to the agent as text, in the
conversation named by the task's contextId; the reply completes the task."""

from __future__ import annotations

from typing import Any

from runtime.a2a.engine import Outcome
from runtime.a2a.model import Message, Task, text_of

__all__ = ["agent_runner"]


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
