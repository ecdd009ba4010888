"""The kernel's door: whether a caller may reach an agent or call a tool, decided here for
every way in (the HTTP API, A2A, ``POST /mcp``, ``tern mcp``, webhooks, schedules and
watches, ``agent_send``, the CLI).

A way in only says who its caller is (a ``Caller``); it never decides what that caller
may reach. The kernel's entries (``Agents.admit`` and ``Agents.send``, ``TriggerRunner.fire``,
the pipeline for a tool called outside an agent) ask this module, so a feature added later
goes through the same door and cannot compose into a hole. ``None`` is tern's own owner
(a test, the CLI's in-process kernel), who may reach everything.
"""

from __future__ import annotations

from runtime.config.keys import ADMIN as OWNER  # whose rights a run without a caller has: every scope
from runtime.errors import Forbidden
from runtime.ports import Caller

__all__ = ["enter_agent", "enter_tool", "OWNER"]


def enter_agent(who: Caller | None, agent: str) -> None:
    """``Forbidden`` unless ``who`` may message ``agent`` (``Caller.reaches``)."""
    if who is not None and not who.reaches(agent):
        acting = f" (acting for it: {', '.join(who.via)})" if who.via else ""
        raise Forbidden(f"the key {who.name!r} may not message the agent {agent!r}{acting}: it is not among the "
                        "key's agents")


#: Tools that only reach agents, whose own door (``enter_agent``) decides for each one.
AGENT_TOOLS = frozenset({"agent_send", "agent_list"})


def enter_tool(who: Caller | None, tool: str) -> None:
    """``Forbidden`` unless ``who`` may call the kernel tool ``tool`` outside an agent."""
    if who is not None and tool not in AGENT_TOOLS and not who.may_call_tools():
        raise Forbidden(f"the key {who.name!r} may not call the tool {tool!r}: it is limited to the agents "
                        f"{', '.join(sorted(who.agents or ()))}")
