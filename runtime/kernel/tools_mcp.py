"""Upstream MCP servers' resources and prompts as four pipeline tools, each taking the
server's name: ``mcp_resources_list``, ``mcp_resource_read``, ``mcp_prompts_list`` and
``mcp_prompt_get``.

Four fixed tools rather than four per server: an agent's tool list stays short however
many servers there are, and a server that connects late or changes its resources needs
no re-registration. They are governed twice, as tools are:

- an agent calls them only if its ``tools`` globs name them (the pipeline's check), and
  only for a server whose tools it may call: its globs must also match
  ``mcp_{server}_resources`` (or ``..._prompts``), which ``mcp_{server}_*`` does;
- the server's ``tools_include``/``tools_exclude`` globs govern ``resources`` and
  ``prompts`` as if they were tools of that server (``McpSupervisor.client``).

What a server returns is untrusted (``openWorldHint``: the pipeline taints it) and
bounded: at most ``MAX_ITEMS`` entries listed, text cut at ``MAX_TEXT_CHARS``, binary
content described (type and size), never inlined.
"""

from __future__ import annotations

import base64
from typing import Any
from collections.abc import Callable

from runtime.errors import ToolRefused
from runtime.mcp.names import format_mcp_tool_name
from runtime.ports import Tool, ToolContext, ToolResult
from runtime.kernel.registry import ToolRegistry

__all__ = ["register_mcp_feature_tools", "MCP_FEATURE_TOOLS", "MAX_ITEMS", "MAX_TEXT_CHARS"]

MAX_ITEMS = 200
MAX_TEXT_CHARS = 100_000
_SERVER = {"type": "string", "minLength": 1, "maxLength": 200, "description": "the MCP server's configured name"}


def _schema(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": ["server", *required],
            "properties": {"server": _SERVER, **properties}}


_READ = {"readOnlyHint": True, "openWorldHint": True}
MCP_FEATURE_TOOLS = [
    Tool("mcp_resources_list", "The resources an MCP server offers (uri, name, description, type).",
         _schema([]), annotations=_READ),
    Tool("mcp_resource_read", "Read one resource of an MCP server by its uri.",
         _schema(["uri"], uri={"type": "string", "minLength": 1, "maxLength": 4096}), annotations=_READ),
    Tool("mcp_prompts_list", "The prompts an MCP server offers, with their arguments.", _schema([]),
         annotations=_READ),
    Tool("mcp_prompt_get", "Get one prompt of an MCP server, filled with its arguments.",
         _schema(["name"], name={"type": "string", "minLength": 1, "maxLength": 200},
                 arguments={"type": "object", "additionalProperties": {"type": "string", "maxLength": 10_000}}),
         annotations=_READ),
]


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return text[:MAX_TEXT_CHARS] + f"\n[cut: {len(text) - MAX_TEXT_CHARS} more characters]"


def _line(*parts: Any) -> str:
    return " ".join(str(p)[:500].replace("\n", " ") for p in parts if p)


def _content_text(item: dict[str, Any]) -> str:
    """One resource content or prompt message content, as text."""
    if isinstance(item.get("text"), str):
        return item["text"]
    data = item.get("blob") or item.get("data")
    if isinstance(data, str):
        size = len(base64.b64decode(data, validate=False)) if data else 0
        return f"[{item.get('type', 'blob')}: {item.get('mimeType', 'binary')}, {size} bytes]"
    if isinstance(item.get("resource"), dict):
        return _content_text(item["resource"])
    return f"[{item.get('type', 'unknown')} content]"


def register_mcp_feature_tools(registry: ToolRegistry, supervisor: Callable[[], Any],
                               agents: Callable[[], list[Any]]) -> None:
    """``supervisor`` returns the kernel's McpSupervisor; ``agents`` the configured
    agents (looked up per call, so a reload applies)."""
    from runtime.kernel.pipeline import allowed

    def client(arguments: dict[str, Any], context: ToolContext, feature: str) -> Any:
        server = arguments["server"]
        agent = next((a for a in agents() if a.name == context.agent), None) if context.agent else None
        if not allowed(agent, format_mcp_tool_name(server, feature)):
            raise ToolRefused(f"agent {context.agent!r} may not use the {feature} of MCP server {server!r} "
                              f"(its tools globs do not match mcp_{server}_{feature})")
        return supervisor().client(server, feature)

    async def resources_list(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        items = (await client(arguments, context, "resources").list_resources())[:MAX_ITEMS]
        lines = [_line(r["uri"], r.get("name"), f"({r['mimeType']})" if r.get("mimeType") else "",
                       "-" if r.get("description") else "", r.get("description")) for r in items]
        structured = [{k: r[k] for k in ("uri", "name", "description", "mimeType") if isinstance(r.get(k), str)}
                      for r in items]
        return ToolResult(_cut("\n".join(lines)) or "no resources", structured=structured)

    async def resource_read(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        result = await client(arguments, context, "resources").read_resource(arguments["uri"])
        contents = [c for c in result.get("contents") or [] if isinstance(c, dict)][:MAX_ITEMS]
        return ToolResult(_cut("\n".join(_content_text(c) for c in contents)) or "the resource is empty")

    async def prompts_list(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        items = (await client(arguments, context, "prompts").list_prompts())[:MAX_ITEMS]
        lines = []
        for prompt in items:
            names = [a.get("name", "?") + ("*" if a.get("required") else "")
                     for a in prompt.get("arguments") or [] if isinstance(a, dict)]
            lines.append(_line(prompt["name"], f"({', '.join(names)})" if names else "",
                               "-" if prompt.get("description") else "", prompt.get("description")))
        return ToolResult(_cut("\n".join(lines)) or "no prompts")

    async def prompt_get(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        result = await client(arguments, context, "prompts").get_prompt(arguments["name"],
                                                                         arguments.get("arguments") or {})
        messages = [m for m in result.get("messages") or [] if isinstance(m, dict)][:MAX_ITEMS]
        text = "\n\n".join(f"{str(m.get('role', '?'))[:20]}: "
                           f"{_content_text(m['content']) if isinstance(m.get('content'), dict) else ''}"
                           for m in messages)
        return ToolResult(_cut(text) or "the prompt is empty")

    handlers = {"mcp_resources_list": resources_list, "mcp_resource_read": resource_read,
                "mcp_prompts_list": prompts_list, "mcp_prompt_get": prompt_get}
    for tool in MCP_FEATURE_TOOLS:
        registry.register(tool, handlers[tool.name])
