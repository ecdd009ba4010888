"""``agent_list`` and ``agent_send``: agents asking other agents.

``agent_send`` reaches every agent, local or ``remote`` (an A2A agent elsewhere).
Agents calling agents could loop forever, so the depth of nested sends is capped
(``MAX_DEPTH``), counted per task through a context variable.
"""

from __future__ import annotations

import contextvars
from typing import Any
from collections.abc import Callable

from runtime.ports import Tool, ToolContext, ToolResult
from runtime.kernel.registry import ToolRegistry

__all__ = ["register_agent_tools", "MAX_DEPTH"]

MAX_DEPTH = 3
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("tern_agent_send_depth", default=0)

AGENT_LIST = Tool("agent_list", "The agents this tern hosts, with what each is for.",
                  {"type": "object", "properties": {}, "additionalProperties": False})
AGENT_SEND = Tool("agent_send", "Send another agent a message and get its reply. Pass the context_id of an "
                  "earlier reply to continue that conversation.",
                  {"type": "object", "additionalProperties": False, "required": ["agent", "message"],
                   "properties": {"agent": {"type": "string", "minLength": 1},
                                  "message": {"type": "string", "maxLength": 100_000},
                                  "context_id": {"type": "string", "minLength": 1, "maxLength": 200}}})


def register_agent_tools(registry: ToolRegistry, agents: Callable[[], Any]) -> None:
    """``agents`` returns the kernel's Agents (it exists only after the registry)."""

    async def agent_list(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        who = context.owner
        hosted = [a for a in agents().config.agents if who is None or who.reaches(a.name)]  # what it may reach
        lines = [f"{a.name} ({a.kind}): {a.description or 'no description'}" for a in hosted]
        return ToolResult("\n".join(lines) or "no agents are configured",
                          structured=[{"name": a.name, "kind": a.kind, "description": a.description} for a in hosted])

    async def agent_send(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        from runtime.errors import AgentError, BudgetExceeded, Forbidden, UnknownAgent, UnknownConversation

        name = arguments["agent"]
        if name == context.agent:
            return ToolResult(f"agent {name!r} cannot send a message to itself", is_error=True)
        depth = _depth.get()
        if depth >= MAX_DEPTH:
            return ToolResult(f"refused: agents are already {depth} sends deep; answer with what you have",
                              is_error=True)
        token = _depth.set(depth + 1)
        # The agent acts for its caller, never above it: the same key, with this agent named.
        owner = context.owner.acting(f"agent:{context.agent}") if context.owner is not None and context.agent \
            else context.owner
        try:
            reply = await agents().send(name, arguments["message"], context_id=arguments.get("context_id"),
                                        on_text=context.progress, on_log=context.log, ask=context.ask,
                                        sample=context.sample, owner=owner)
        except (UnknownAgent, UnknownConversation, AgentError, BudgetExceeded, Forbidden) as exc:  # for the model
            return ToolResult(str(exc), is_error=True)
        finally:
            _depth.reset(token)
        return ToolResult(reply.text, structured={"reply": reply.text, "context_id": reply.context_id})

    registry.register(AGENT_LIST, agent_list)
    registry.register(AGENT_SEND, agent_send)
