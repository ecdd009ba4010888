"""Built-in tools: ``time_now`` here; the file tools (confined to the caller's workspace),
the memory tools (SQLite in the state directory), ``web_fetch``, ``shell_exec`` and the
approved scripts (``script_*``) in their own modules. The pipeline guards them all."""

from __future__ import annotations

import datetime
from typing import Any

from runtime.config import Config
from runtime.kernel import tools_net, tools_scripts, tools_shell
from runtime.ports import Tool, ToolContext, ToolResult
from runtime.kernel.registry import ToolRegistry
from runtime.kernel.tools_files import register_file_tools
from runtime.kernel.tools_memory import register_memory_tools

__all__ = ["register_builtins"]

TIME_NOW = Tool("time_now", "The current date and time (UTC, ISO 8601).",
                {"type": "object", "properties": {}, "additionalProperties": False})


async def time_now(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return ToolResult(now.isoformat())


def register_builtins(registry: ToolRegistry, config: Config | None = None) -> None:
    """Every built-in tool. ``web_fetch`` and ``shell_exec`` take their limits and policy
    from the config (``shell_exec`` only exists when enabled, with an allowlist; the
    ``script_*`` tools only with a ``[scripts] dir``)."""
    registry.register(TIME_NOW, time_now)
    register_file_tools(registry)
    register_memory_tools(registry)
    config = config or Config()
    tools_net.register(registry, config)
    tools_shell.register(registry, config)
    tools_scripts.register(registry, config)
