"""The prompts tern's MCP server offers: each agent's ``[[agents.prompts]]`` as
``{agent}/{name}``, the ``[[mcp_server.asks]]`` entries with ``prompt = true`` under
their own names (prompts that ask their caller first: the dispatcher asks, as for an
ask tool, and the reply is the prompt's user message), and the prompts of the connected
MCP servers ``[mcp_server] upstream`` names, re-exported under their own names (a name
tern already offers wins).

``prompts/get`` checks the arguments (every required one given, none unknown, each a
string of bounded size), then replaces ``{argument}`` in each message's text. A
message's ``resource`` or ``image`` is a fixed file of the agent's workspace (the
config's author named it, so no ``resources`` glob is needed), embedded as it is read
for ``resources/read``.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from runtime.config import AgentConfig, AgentPrompt, Config
from runtime.errors import RpcError, TernError
from runtime.log import get_logger
from runtime.mcp.server.asks import Ask
from runtime.mcp.server.resources import Resources, agent_uri, contents
from runtime.wire.jsonrpc import INVALID_PARAMS

__all__ = ["Prompts", "MAX_ARGUMENT_CHARS"]

log = get_logger("mcp.server")

MAX_ARGUMENT_CHARS = 64 * 1024
MAX_ARGUMENTS = 64
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*)\}")


class Prompts:
    def __init__(self, config: Config, resources: Resources) -> None:
        self.resources = resources
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        self.own: dict[str, tuple[AgentConfig, AgentPrompt]] = {}
        for agent in config.agents:
            for prompt in agent.prompts:
                self.own.setdefault(f"{agent.name}/{prompt.name}", (agent, prompt))
        self.asking = {ask.name: Ask(ask) for ask in config.mcp_server.asks if ask.prompt}

    def ask(self, name: Any) -> Ask | None:
        """The prompt ``name`` if it asks its caller first (an agent's prompt of that name comes first)."""
        return self.asking.get(name) if isinstance(name, str) and name not in self.own else None

    def configured(self, name: str) -> AgentPrompt | None:
        found = self.own.get(name)
        return found[1] if found is not None else None

    async def listing(self) -> list[dict[str, Any]]:
        listed = [_describe(name, agent, prompt) for name, (agent, prompt) in self.own.items()]
        seen = set(self.own)
        for name, ask in self.asking.items():
            if name not in seen:
                seen.add(name)
                listed.append(ask.prompt())
        for server, entry in await self.upstream():
            if entry["name"] not in seen:
                seen.add(entry["name"])
                listed.append(entry)
        return listed

    async def upstream(self) -> list[tuple[str, dict[str, Any]]]:
        """(server, prompt) for each re-exported server's prompts, in order."""
        found = []
        for server in await self.resources.offering("prompts"):
            for entry in await self.resources.upstream_list(server, "prompts/list", "prompts"):
                if isinstance(entry.get("name"), str):
                    found.append((server, entry))
        return found

    async def owner(self, name: str) -> str | None:
        """The re-exported server that offers the prompt ``name``, when tern has none by that name."""
        if name in self.own or name in self.asking:
            return None
        return next((server for server, entry in await self.upstream() if entry["name"] == name), None)

    async def get(self, name: Any, arguments: Any) -> dict[str, Any]:
        if not isinstance(name, str) or not name:
            raise RpcError(INVALID_PARAMS, "params.name (a string) is required")
        arguments = _arguments(arguments)
        own = self.own.get(name)
        if own is not None:
            return await self._render(own[0], own[1], arguments)
        server = await self.owner(name)
        if server is None:
            raise RpcError(INVALID_PARAMS, f"Unknown prompt: {name[:200]}")
        assert self.resources.content is not None
        try:
            result = await self.resources.content.upstream_request(server, "prompts/get",
                                                                   {"name": name, "arguments": arguments})
        except RpcError:
            raise  # the server's own answer (a missing argument, say) is the client's to read
        except TernError as exc:
            raise RpcError(INVALID_PARAMS, f"prompt {name[:200]} is unavailable: {exc}") from None
        if not isinstance(result, dict) or not isinstance(result.get("messages"), list):
            raise RpcError(INVALID_PARAMS, f"MCP server '{server}' answered prompts/get without messages")
        answer = {"messages": [m for m in result["messages"] if isinstance(m, dict)]}
        if isinstance(result.get("description"), str):
            answer["description"] = result["description"]
        return answer

    async def _render(self, agent: AgentConfig, prompt: AgentPrompt, arguments: dict[str, str]) -> dict[str, Any]:
        declared = {argument.name for argument in prompt.arguments}
        unknown = sorted(set(arguments) - declared)
        if unknown:
            raise RpcError(INVALID_PARAMS, f"unknown arguments: {', '.join(unknown)[:500]}")
        missing = [a.name for a in prompt.arguments if a.required and a.name not in arguments]
        if missing:
            raise RpcError(INVALID_PARAMS, f"missing required arguments: {', '.join(missing)}")

        def fill(match: re.Match[str]) -> str:
            key = match.group(1)
            return arguments.get(key, "") if key in declared else match.group(0)

        messages = []
        for message in prompt.messages:
            if message.text:
                messages.append({"role": message.role, "content": {"type": "text",
                                                                   "text": _PLACEHOLDER.sub(fill, message.text)}})
            for path, kind in ((message.resource, "resource"), (message.image, "image")):
                if path:
                    messages.append({"role": message.role, "content": await self._embed(agent, path, kind)})
        result: dict[str, Any] = {"messages": messages}
        if prompt.description:
            result["description"] = prompt.description
        return result

    async def _embed(self, agent: AgentConfig, path: str, kind: str) -> dict[str, Any]:
        uri = agent_uri(agent.name, path)
        if self.resources.content is None:
            raise RpcError(INVALID_PARAMS, f"{path}: no workspace to read")
        try:
            data = await self.resources.content.read_file(agent.workspace, path, self.resources.max_bytes)
        except (TernError, OSError) as exc:
            raise RpcError(INVALID_PARAMS, f"the prompt's file {path} cannot be read: {exc}") from None
        item = contents(uri, path, data)
        if kind == "resource":
            return {"type": "resource", "resource": item}
        return {"type": "image", "data": item.get("blob") or base64.b64encode(data).decode("ascii"),
                "mimeType": item["mimeType"]}


def _describe(name: str, agent: AgentConfig, prompt: AgentPrompt) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "title": f"{prompt.name} ({agent.name})",
                             "description": prompt.description or f"A prompt of the tern agent {agent.name}."}
    if prompt.arguments:
        entry["arguments"] = [{"name": argument.name, "description": argument.description,
                               "required": argument.required} for argument in prompt.arguments]
    return entry


def _arguments(arguments: Any) -> dict[str, str]:
    if arguments is None:
        return {}
    if not isinstance(arguments, dict) or len(arguments) > MAX_ARGUMENTS:
        raise RpcError(INVALID_PARAMS, f"params.arguments must be an object of at most {MAX_ARGUMENTS} strings")
    for key, value in arguments.items():
        if not isinstance(value, str) or len(value) > MAX_ARGUMENT_CHARS:
            raise RpcError(INVALID_PARAMS, f"argument {str(key)[:100]!r} must be a string of at most "
                                           f"{MAX_ARGUMENT_CHARS} characters")
    return arguments
