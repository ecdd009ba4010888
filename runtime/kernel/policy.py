"""Who may run what without a person saying yes: the policy behind the approval stage.

Pure and cheap: ``Policy.verdict(agent, tool)`` is ``allow``, ``ask`` or ``deny`` with a
reason, decided in this order (the capability check, the agent's ``tools`` globs,
comes before it in the pipeline):

1. **The agent's access tier** narrows what it may call at all. ``read``: only tools
   annotated (or built in as) read-only. ``write``: anything but a destructive tool is
   decided by the rules below; a destructive one is asked at least (a rule may deny it,
   never allow it). ``full`` (and no tier): the rules decide. The OSSA names
   (``tier_1_read``, ``tier_2_write_limited``, ``tier_3_full_access``, ``tier_4_policy``)
   name the same presets; a ``[[governance.tiers]]`` entry is a list of tool globs.
2. **The first ``[[governance.rules]]`` entry** whose tool and agent globs match.
3. **The default**: ask for ``shell_exec``, ``script_run`` and any tool annotated
   ``destructiveHint: true``; allow the rest.

Annotations are MCP's hints (``readOnlyHint``, ``destructiveHint``, ...). The default
asks only for an *explicit* ``destructiveHint: true`` (most servers annotate nothing,
and asking for every unannotated tool would make approvals noise), while tiers read the
spec's defaults (no annotation: not read-only, and destructive), so a narrowed agent
is never widened by a server that says nothing. Verdicts are cached per agent and tool
(the config is frozen; a tool's annotations are checked by identity).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from runtime.config import AgentConfig, Config
from runtime.config.schema import OSSA_TIERS, PRESET_TIERS
from runtime.mcp.names import ToolGlobs

__all__ = ["Policy", "Verdict", "PRESET_TIERS", "OSSA_TIERS", "ASK_BY_DEFAULT", "is_read_only", "is_destructive",
           "could_be_server_tool"]

Decision = Literal["allow", "ask", "deny"]
ASK_BY_DEFAULT = frozenset({"shell_exec", "script_run"})


class Verdict(NamedTuple):
    decision: Decision
    reason: str
    wait_secs: float = 0.0  # an "ask": how long its request waits (0: [governance] approval_timeout_secs)


def is_read_only(tool: Any) -> bool:
    annotations = tool.annotations
    return bool(annotations) and annotations.get("readOnlyHint") is True


def is_destructive(tool: Any) -> bool:
    """MCP's reading: a tool that is not read-only is destructive unless it says otherwise."""
    annotations = tool.annotations or {}
    return annotations.get("readOnlyHint") is not True and annotations.get("destructiveHint", True) is not False


def _explicitly_destructive(tool: Any) -> bool:
    annotations = tool.annotations
    if not annotations:
        return False
    return annotations.get("destructiveHint") is True and annotations.get("readOnlyHint") is not True


class _Rule(NamedTuple):
    tools: ToolGlobs
    agents: ToolGlobs
    decision: Decision
    index: int
    wait_secs: float = 0.0


class Policy:
    def __init__(self, config: Config) -> None:
        governance = config.governance
        self.rules = [_Rule(ToolGlobs([r.tool]), ToolGlobs([r.agent]), r.decision, i, r.wait_secs)
                      for i, r in enumerate(governance.rules)]
        self.custom_tiers = {t.name: ToolGlobs(t.tools) for t in governance.tiers}
        self._cache: dict[tuple[str, str, str], tuple[Any, Verdict]] = {}

    def tier_of(self, agent: AgentConfig | None) -> str:
        """The agent's tier as a preset or custom name ("full" for none); unknown names are
        refused at load (``unknown_tiers``), and treated as ``read`` should one get here."""
        if agent is None or not agent.access_tier:
            return "full"
        name = OSSA_TIERS.get(agent.access_tier, agent.access_tier)
        if name in PRESET_TIERS or name in self.custom_tiers:
            return name
        return "read"

    def verdict(self, agent: AgentConfig | None, tool: Any) -> Verdict:
        key = (agent.name, agent.access_tier, tool.name) if agent is not None else ("", "", tool.name)
        cached = self._cache.get(key)
        if cached is not None and cached[0] is tool.annotations:
            return cached[1]
        verdict = self._decide(agent, tool)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = (tool.annotations, verdict)
        return verdict

    def _decide(self, agent: AgentConfig | None, tool: Any) -> Verdict:
        name = tool.name
        who = f"agent '{agent.name}'" if agent is not None else "the operator"
        tier = self.tier_of(agent)
        if tier == "read" and not is_read_only(tool):
            return Verdict("deny", f"{who} has the read access tier and {name} is not a read-only tool")
        if tier in self.custom_tiers and not self.custom_tiers[tier].matches(name):
            return Verdict("deny", f"{who} has the access tier '{tier}', which does not include {name}")
        verdict = self._rule_or_default(agent, tool, who)
        if tier == "write" and verdict.decision == "allow" and is_destructive(tool):
            return Verdict("ask", f"{who} has the write access tier and {name} may be destructive")
        return verdict

    def _rule_or_default(self, agent: AgentConfig | None, tool: Any, who: str) -> Verdict:
        agent_name = agent.name if agent is not None else ""
        for rule in self.rules:
            if rule.tools.matches(tool.name) and _agent_matches(rule.agents, agent_name):
                return Verdict(rule.decision, f"[[governance.rules]] #{rule.index + 1} says {rule.decision} "
                                              f"for {tool.name} by {who}", rule.wait_secs)
        if tool.name in ASK_BY_DEFAULT or _explicitly_destructive(tool):
            return Verdict("ask", f"{tool.name} needs a person's approval by default")
        return Verdict("allow", "")

    def unmatched_rules(self, tool_names: list[str], mcp_servers: list[str]) -> list[str]:
        """Rules whose tool glob matches none of ``tool_names`` nor could match a tool of a
        configured MCP server (``mcp_{server}_...``), nor names an agent tool."""
        problems = []
        for rule in self.rules:
            if rule.tools.matches(*tool_names):
                continue
            pattern = rule.tools.patterns[0]
            if any(could_be_server_tool(pattern, server) for server in mcp_servers):
                continue
            problems.append(f"governance.rules[{rule.index}]: tool '{pattern}' matches no tool")
        return problems


def _agent_matches(globs: ToolGlobs, agent_name: str) -> bool:
    if agent_name:
        return globs.matches(agent_name)
    return globs.patterns[0] in ("*", "")  # the operator is matched by "*" (or "") only


def could_be_server_tool(pattern: str, server: str) -> bool:
    """Whether a glob could name a tool of MCP server ``server`` (its tools are unknown
    until it connects): ``mcp_github_*`` or ``mcp_github_create_issue`` for ``github``,
    or a glob broader than the prefix (``mcp_*``)."""
    from runtime.mcp.names import glob_key

    key, prefix = glob_key(pattern), glob_key(f"mcp_{server}_")
    if key.startswith(prefix):
        return True
    star = key.find("*")
    return star >= 0 and prefix.startswith(key[:star])
