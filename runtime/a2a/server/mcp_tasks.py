"""The A2A task engine as a ``TaskPort`` (``runtime.ports``): MCP's tasks extension
starts agent work here, so a long agent call started over MCP is the same task the A2A
methods (``tasks/get``, ``tasks/cancel``, subscriptions, push) show and cancel.

The work runs under the engine like any A2A task, with the MCP caller's ``ask`` and
``sample`` lent to it (``A2aService.lent``, dropped when the task finishes or is
evicted), so its approvals and model turns go to the MCP client that started it.
"""

from __future__ import annotations

from typing import Any

from runtime.a2a.model import Message, Task, text_of
from runtime.a2a.server.engine import TaskNotCancelable
from runtime.ports import Ask, Caller, Sample, TaskView

__all__ = ["McpTaskBridge"]


class McpTaskBridge:
    """``TaskPort`` over an ``A2aService``."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.engine = service.engine

    async def start(self, agent: str, message: str, *, caller: str, context_id: str | None = None,
                    ask: Ask | None = None, sample: Sample | None = None, who: Caller | None = None) -> TaskView:
        self.service.agents.admit(agent, who)  # the door and budgets, before any work exists
        task = await self.engine.send(agent, Message(role="user", parts=[{"text": message}], context_id=context_id),
                                      caller=caller, who=who)
        if ask is not None or sample is not None:  # before the work starts: send() started it, no checkpoint since
            self.service.lent[task.id] = (ask, sample)
        return view(task)

    async def view(self, task_id: str, who: Caller | None = None) -> TaskView:
        task = await self.engine.find(task_id, who)  # TaskNotFound (also another key's)
        if task.terminal:
            self.service.lent.pop(task.id, None)
        return view(task)

    async def cancel(self, task_id: str, who: Caller | None = None) -> None:
        try:
            await self.engine.cancel(task_id, who)  # TaskNotFound for an unknown id, or another's
        except TaskNotCancelable:
            pass  # finished already: cancelling it again changes nothing
        self.service.lent.pop(task_id, None)

    def finished(self, task_id: str) -> bool:
        task = self.engine.peek(task_id)
        return task is None or task.terminal


def view(task: Task) -> TaskView:
    """What the agent said: its answer's artifacts, else its reply or status message."""
    texts = [text_of(artifact.parts) for artifact in task.artifacts]
    if not texts:
        message = task.reply or task.status_message
        texts = [text_of(message.parts)] if message is not None else []
    return TaskView(id=task.id, state=task.state, text="\n".join(texts), created=task.created,
                    updated=task.timestamp, context_id=task.context_id)
