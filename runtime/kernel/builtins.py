"""Built-in tools. The file, web, memory and shell tools arrive with the pipeline
that guards them; these are the ones that need no guard."""

from __future__ import annotations

import datetime
from typing import Any

from runtime.kernel.registry import Tool, ToolContext, ToolRegistry, ToolResult

__all__ = ["register_builtins"]

TIME_NOW = Tool("time_now", "The current date and time (UTC, ISO 8601).",
                {"type": "object", "properties": {}, "additionalProperties": False})


async def time_now(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return ToolResult(now.isoformat())


def register_builtins(registry: ToolRegistry) -> None:
    registry.register(TIME_NOW, time_now)
