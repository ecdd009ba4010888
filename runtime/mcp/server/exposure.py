"""What tern's MCP server offers (``tern mcp``, ``POST /mcp``), and how a call runs.

- Every agent is the tool ``tern_agent_{name}`` (``-`` becomes ``_``): a required
  ``message`` and an optional ``context_id`` to continue a conversation; the reply is
  text content, and ``{reply, context_id}`` structured content (its ``outputSchema``).
- Kernel tools only when ``[mcp_server] tools`` names them by glob (casefolded, ``-``
  and ``_`` the same, as every tool glob): nothing is exposed
  by default beyond the agents (OpenFang's ``/mcp`` hands shell and file writes to
  anyone with the key; tern does not).
- ``[[mcp_server.presets]]``: a fixed call (an exposed tool plus fixed arguments)
  published as a tool with no arguments; with ``input_schema``, a tool taking the
  caller's arguments as that schema describes (published verbatim, so JSON Schema
  2020-12 keywords and ``x-mcp-header`` marks reach clients): they fill ``{name}`` in
  the string values of ``arguments`` when those name a property; otherwise an agent gets
  them as its message, compact JSON with sorted keys, and a kernel tool gets them with the
  fixed ``arguments`` laid over them. Before the call tern checks only that they are an
  object with the ``required`` names (and no others under ``additionalProperties:
  false``) and top-level primitive ``type``s; the agent or tool does the rest, as a kernel
  tool's own schema is checked by the pipeline.
- ``[[mcp_server.asks]]``: tools that ask their caller for input (``asks.py``); the
  dispatcher runs them, since only it can talk to the client.

Every call goes through the kernel's tool pipeline (validation, timeout, truncation,
redaction, audit): an agent tool is ``agent_send`` to that agent.
"""

from __future__ import annotations

import json
from typing import Any
from collections.abc import AsyncIterator

from runtime.config import AgentConfig, Config, McpPreset
from runtime.errors import RpcError
from runtime.ports import Caller, EventPort, Tool, ToolPort
from runtime.mcp.names import agent_tool_name, tool_globs
from runtime.mcp.server.asks import PLACEHOLDER, Ask
from runtime.wire.jsonrpc import INVALID_PARAMS
from runtime.wire.limits import MAX_ID_CHARS, check_id

__all__ = ["Exposure"]

NO_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": False}
AGENT_INPUT = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask or tell the agent."},
        "context_id": {"type": "string", "maxLength": MAX_ID_CHARS,
                       "description": "The context_id of an earlier reply, to continue "
                                      "that conversation; leave it out to start a new one."},
    },
    "required": ["message"],
    "additionalProperties": False,
}
AGENT_OUTPUT = {
    "type": "object",
    "properties": {"reply": {"type": "string"}, "context_id": {"type": "string"}},
    "required": ["reply", "context_id"],
}


class Exposure:
    """The exposed tool set, computed live from the kernel's tools (MCP tools come and go)."""

    def __init__(self, config: Config, tools: ToolPort, events: EventPort) -> None:
        self.kernel_tools = tools
        self.events = events
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        """A reloaded config's agents, presets and allowlist (``tern reload``)."""
        self.config = config
        settings = self.config.mcp_server
        self._agents: dict[str, AgentConfig] = {}
        if settings.expose_agents:
            for agent in self.config.agents:
                self._agents.setdefault(agent_tool_name(agent.name), agent)
        self._presets = {preset.name: preset for preset in settings.presets}
        self._asks = {ask.name: Ask(ask) for ask in settings.asks if not ask.prompt}  # prompts: prompts.py

    def agent(self, name: str) -> AgentConfig | None:
        """The agent exposed as ``name`` (``tern_agent_…``), if one is."""
        return self._agents.get(name)

    def preset(self, name: str) -> Any:
        """The preset published as ``name`` (an agent of that name comes first)."""
        return self._presets.get(name) if name not in self._agents else None

    def task_support(self, name: str) -> str:
        """``taskSupport`` of an exposed tool: agents may run as tasks, presets of
        agents and asks as they say; everything else is forbidden (it runs within the call)."""
        ask = self.ask(name)
        if ask is not None:
            return ask.config.task
        preset = self.preset(name)
        target = preset.tool if preset is not None else name
        if target not in self._agents:
            return "forbidden"
        return preset.task if preset is not None else "optional"

    def resolve(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]] | str:
        """The call a tool name and its arguments stand for: a preset's target with the
        arguments it sends (or what is wrong with the caller's); anything else as it is."""
        preset = self.preset(name)
        if preset is None:
            return name, arguments
        arguments = _preset_arguments(preset, arguments)
        return arguments if isinstance(arguments, str) else (preset.tool, arguments)

    def ask(self, name: str) -> Ask | None:
        """The ask tool ``name``, unless an agent or preset of that name comes first."""
        return self._asks.get(name) if name not in self._agents and name not in self._presets else None

    # --- Listing ------------------------------------------------------------------------

    def reachable(self, name: str, who: Caller | None) -> bool:
        """Whether ``who`` may see and call the exposed tool ``name``, by the caller's own
        rule (``Caller.reaches``, ``may_call_tools``; the kernel enforces the same
        rule when the call runs): a tool it may not reach is not listed, and unknown to it."""
        if who is None:
            return True
        preset = self.preset(name)
        target = preset.tool if preset is not None else name
        agent = self._agents.get(target)
        if agent is not None:
            return who.reaches(agent.name)
        return self.ask(name) is not None or who.may_call_tools()

    def tools(self, who: Caller | None = None) -> list[dict[str, Any]]:
        """Every exposed tool ``who`` may reach (None: all) as MCP describes one, in a
        stable order: agents, kernel tools, presets, asks."""
        listed = [self._agent_tool(name, agent) for name, agent in self._agents.items()
                  if who is None or who.reaches(agent.name)]
        taken = set(self._agents)
        for tool in self._kernel_tools() if who is None or who.may_call_tools() else ():
            if tool.name not in taken:
                taken.add(tool.name)
                entry = {"name": tool.name, "description": tool.description,
                         "inputSchema": _object_schema(tool.input_schema)}
                if tool.annotations:  # tern's own hints, or what the MCP server behind it sent
                    entry["annotations"] = tool.annotations
                listed.append(entry)
        for name, preset in self._presets.items():
            if name not in taken and self.reachable(name, who):
                taken.add(name)
                listed.append({"name": name, "description": preset.description or f"Calls {preset.tool}.",
                               "inputSchema": preset.input_schema or NO_ARGUMENTS})
        listed.extend(ask.tool() for name, ask in self._asks.items() if name not in taken)
        return listed

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """The ``inputSchema`` of the exposed tool ``name``, or None (for ``Mcp-Param-*``
        checks: only a preset or a kernel tool can carry ``x-mcp-header`` marks)."""
        if name in self._agents:
            return AGENT_INPUT
        preset = self._presets.get(name)
        if preset is not None:
            return preset.input_schema or NO_ARGUMENTS
        if self._kernel_tool_allowed(name):
            tool = self.kernel_tools.get(name)
            return _object_schema(tool.input_schema) if tool is not None else None
        return None

    def names(self) -> frozenset[str]:
        return frozenset(tool["name"] for tool in self.tools())

    async def changes(self) -> AsyncIterator[None]:
        """Yields each time the exposed set of names changes (MCP servers coming and
        going change the kernel tools an allowlist matches)."""
        known = self.names()
        with self.events.subscribe(kinds=("mcp.server", "mcp.tools", "config.reloaded")) as events:
            while True:
                await events.next()
                if (names := self.names()) != known:
                    known = names
                    yield

    def _kernel_tools(self) -> list[Tool]:
        globs = tool_globs(self.config.mcp_server.tools)
        if not globs:
            return []
        return [tool for tool in self.kernel_tools.tools() if globs.matches(tool.name)]

    def _kernel_tool_allowed(self, name: str) -> bool:
        return tool_globs(self.config.mcp_server.tools).matches(name)

    @staticmethod
    def _agent_tool(name: str, agent: AgentConfig) -> dict[str, Any]:
        description = _sentence(agent.description) or f"The tern agent {agent.name} ({agent.kind})."
        return {
            "name": name,
            "title": f"tern agent {agent.name}",
            "description": f"{description} Send it a message; the reply includes a context_id to "
                           f"continue the conversation.",
            "inputSchema": AGENT_INPUT,
            "outputSchema": AGENT_OUTPUT,
            "annotations": {"readOnlyHint": False, "destructiveHint": agent.kind in ("command", "llm"),
                            "openWorldHint": agent.kind in ("llm", "remote")},
        }

    # --- Calling ------------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any], *, caller: str, run: Any = None,
                   who: Caller | None = None) -> dict[str, Any]:
        """Run one exposed tool through the pipeline, in ``run`` (a ``pipeline.run()``:
        its progress and log callbacks, and ``run.cancel()`` for the caller to give up);
        returns an MCP ``CallToolResult``. A name this server does not expose, or not to
        ``who``, is a protocol error (RpcError -32602), as the spec says."""
        if not self.reachable(name, who):
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        preset = self.preset(name)
        if preset is not None:  # named explicitly in the config: allowed without a glob
            resolved = self.resolve(name, arguments)
            if isinstance(resolved, str):
                return _error_result(resolved)
            name, arguments = resolved
        agent = self._agents.get(name)
        pipeline = self.kernel_tools
        run = run or pipeline.run(None)
        if agent is not None:
            message = arguments.get("message")
            if not isinstance(message, str):
                return _error_result("invalid arguments: message (a string) is required")
            extra = sorted(set(arguments) - {"message", "context_id"})
            if extra:
                return _error_result(f"invalid arguments: unexpected {', '.join(extra)}")
            forwarded = {"agent": agent.name, "message": message}
            if arguments.get("context_id") is not None:
                forwarded["context_id"] = check_id(arguments["context_id"], "arguments.context_id")
            result = await pipeline.call("agent_send", forwarded, run=run, caller=caller)
        elif (preset is not None or self._kernel_tool_allowed(name)) and \
                (pipeline.get(name) or await pipeline.wait_for(name)) is not None:  # its MCP server may be connecting
            result = await pipeline.call(name, arguments, run=run, caller=caller)
        else:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        return _call_result(result)


def _preset_arguments(preset: McpPreset, given: Any) -> dict[str, Any] | str:
    """What a preset sends its tool, or why the caller's arguments cannot be taken."""
    if not preset.input_schema:
        return dict(preset.arguments)
    given = {} if given is None else given
    if not isinstance(given, dict):
        return "invalid arguments: expected an object"
    required = preset.input_schema.get("required")
    missing = [n for n in required if n not in given] if isinstance(required, list) else []
    if missing:
        return f"invalid arguments: missing {', '.join(map(str, missing))}"
    properties = preset.input_schema.get("properties")
    if preset.input_schema.get("additionalProperties") is False and isinstance(properties, dict):
        extra = sorted(set(given) - set(properties))
        if extra:
            return f"invalid arguments: unexpected {', '.join(extra)}"
    problem = _argument_types(preset.input_schema, given)
    if problem:
        return problem
    properties = properties if isinstance(properties, dict) else {}
    if any(match.group(1) in properties for value in preset.arguments.values() if isinstance(value, str)
           for match in PLACEHOLDER.finditer(value)):  # the arguments are a template
        values = {key: value if isinstance(value, str) else json.dumps(value) for key, value in given.items()}
        return {key: PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), value) if isinstance(value, str)
                else value for key, value in preset.arguments.items()}
    if preset.tool.startswith("tern_agent_"):
        return {"message": json.dumps(given, sort_keys=True, separators=(",", ":"), ensure_ascii=False)}
    return {**given, **preset.arguments}


def _argument_types(schema: dict[str, Any], given: dict[str, Any]) -> str:
    """Why a top-level argument is not of its property's primitive ``type`` ("" if all are)."""
    properties = schema.get("properties")
    for key, value in given.items():
        kind = properties.get(key, {}).get("type") if isinstance(properties, dict) and \
            isinstance(properties.get(key), dict) else None
        if kind in ("string", "number", "integer", "boolean") and not _is(value, kind):
            return f"invalid arguments: {key} ({'an' if kind == 'integer' else 'a'} {kind}) expected"
    return ""


def _is(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return kind == "number" or float(value).is_integer()


def _sentence(text: str) -> str:
    """``text`` stripped and ending like a sentence: a description written without a final
    period ("Lists files") must not run into the sentence tern appends after it."""
    text = text.strip()
    if not text or text[-1] in ".!?" or text[-2:-1] in (".", "!", "?") and text[-1] in "\"')]":
        return text
    return text + "."


def _object_schema(schema: Any) -> dict[str, Any]:
    """MCP requires an object schema, never null."""
    if isinstance(schema, dict) and schema.get("type") == "object":
        return schema
    return {"type": "object", **(schema if isinstance(schema, dict) else {})}


def _call_result(result: Any) -> dict[str, Any]:
    content = result.content or [{"type": "text", "text": result.text}]
    out: dict[str, Any] = {"content": content, "isError": bool(result.is_error)}
    if isinstance(result.structured, dict) and not result.is_error:
        out["structuredContent"] = result.structured
    return out


def _error_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}
