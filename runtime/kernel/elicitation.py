"""An MCP server's form question (``elicitation/create``, or the same inside a 2026
``input_required`` result) put to a person through the approval channels.

A form is not an approval: it wants values. The first step taken here is the smallest
honest one: the person is shown the question and the answer tern proposes, the form's
own defaults, and approves (the server gets exactly that answer) or denies (the server
gets ``decline``). A form that cannot be answered that way (a required field without a
default, a URL-mode request, a field that is not a primitive) is declined at once, with
the reason logged; typing values is not offered yet. The request goes through the same
store, channels, limits, audit records and events as a tool call's approval, under the
pseudo-tool ``mcp_{server}_elicitation`` and no agent (the question comes from a
server, not from one agent's decision).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Awaitable, Callable

from runtime.log import get_logger, shorten
from runtime.mcp.names import format_mcp_tool_name

__all__ = ["proposal", "person_answers"]

log = get_logger("mcp")

MAX_MESSAGE_CHARS = 2000
_PRIMITIVES = ("string", "integer", "number", "boolean")


def proposal(params: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The answer a person may accept as it stands (the form's defaults), or None and
    why the form cannot be answered by a yes."""
    if params.get("mode", "form") != "form":
        return None, f"a {str(params.get('mode'))[:20]}-mode request (only forms are put to a person)"
    schema = params.get("requestedSchema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}, ""
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    answer: dict[str, Any] = {}
    for name, field in properties.items():
        field = field if isinstance(field, dict) else {}
        if field.get("type") not in _PRIMITIVES:
            return None, f"field {str(name)[:60]!r} is not a string, number or boolean"
        if "default" in field:
            answer[name] = field["default"]
        elif name in required:
            return None, f"required field {str(name)[:60]!r} has no default, and tern cannot type values yet"
    return answer, ""


def person_answers(approvals: Any, redact: Callable[[Any], Any]) -> Callable[[str], Callable[..., Awaitable[Any]]]:
    """For each server name, the session's ``on_input`` handler: elicitation goes to
    ``approvals`` (kernel.approvals.Approvals); anything else is refused."""

    def for_server(server: str) -> Callable[..., Awaitable[Any]]:
        async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
            from runtime.errors import ToolRefused
            from runtime.kernel.audit import digest

            if method != "elicitation/create":
                raise ToolRefused(f"tern answers no {method} yet")
            proposed, why = proposal(params)
            if proposed is None:
                log.warning("MCP server '%s' asked a question tern declined: %s", server, why)
                return {"action": "decline"}
            shown = {"question": shorten(str(params.get("message", "")), MAX_MESSAGE_CHARS), "answer": proposed}
            approval = await approvals.request("", format_mcp_tool_name(server, "elicitation"), redact(shown),
                                               digest(shown), caller=f"mcp:{server}",
                                               reason=f"MCP server '{server}' asks a question")
            if approval.state == "approved":
                return {"action": "accept", "content": proposed}
            return {"action": "decline"}

        return answer

    return for_server
