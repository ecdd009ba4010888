"""What an upstream MCP server asks tern's client (``elicitation/create``, as a request
or inside a 2026 ``input_required`` result), answered by a person.

A form question becomes an approval request that carries its form (checked and bounded
by ``kernel.forms``), under the pseudo-tool ``mcp_{server}_elicitation`` and no agent:
one store, one decision path, the same channels, limits, events and audit records as a
tool call's approval. A person answers it with typed values (``tern approve --set``,
``POST /api/approvals/{id}`` with ``answer``, the inline prompt), declines it (a
denial) or cancels it; a request nobody answers in time is cancelled. A URL-mode
question shows its URL; tern never opens a browser.

When the tool call that caused the question was made on behalf of a caller that can
put questions to its own person (``ToolContext.ask``: the desktop assistant behind
``tern mcp`` or ``POST /mcp``, the terminal of ``tern run``), that ``ask`` runs while
the request waits, so the question is relayed up as the caller's own. The call is
found through ``CALL_ASK``, a context variable the registry sets around an MCP tool
call and the MCP session carries to the server's requests related to that call.

``person_answers`` dispatches on the method, so another kind of question (sampling)
is one more entry in ``ANSWERERS``.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any
from collections.abc import Awaitable, Callable

from runtime.log import get_logger
from runtime.mcp.names import format_mcp_tool_name
from runtime.ports import Ask

__all__ = ["CALL_ASK", "ANSWERERS", "person_answers", "ask_form"]

log = get_logger("mcp")

#: The ``ask`` of the tool call an MCP server's question belongs to (None: no caller
#: that can ask; the person channels answer).
CALL_ASK: ContextVar[Ask | None] = ContextVar("tern_call_ask", default=None)

Answerer = Callable[[Any, Callable[[Any], Any], str, dict[str, Any]], Awaitable[dict[str, Any]]]


async def ask_form(approvals: Any, redact: Callable[[Any], Any], server: str,
                   params: dict[str, Any]) -> dict[str, Any]:
    """An ``elicitation/create`` answered through ``approvals`` (kernel.approvals.Approvals)."""
    from runtime.kernel.audit import digest
    from runtime.kernel.forms import FormRefused, check_form

    try:
        form = check_form(params)
    except FormRefused as exc:
        log.warning("MCP server '%s' asked a question tern declined: %s", server, exc)
        return {"action": "decline"}
    shown = {"question": form["message"], **({"url": form["url"]} if form["mode"] == "url" else {})}
    approval = await approvals.request("", format_mcp_tool_name(server, "elicitation"), redact(shown), digest(form),
                                       caller=f"mcp:{server}", reason=f"MCP server '{server}' asks a question",
                                       ask=CALL_ASK.get(), form=redact(form))
    answer = await approvals.take_answer(approval.id) if approval.id else None
    if approval.state in ("approved", "denied") and answer is not None:
        return answer
    if approval.state == "denied":  # refused before anyone was asked (too many waiting)
        return {"action": "decline"}
    return {"action": "cancel"}  # nobody answered in time, or the call stopped waiting


ANSWERERS: dict[str, Answerer] = {"elicitation/create": ask_form}


def person_answers(approvals: Any, redact: Callable[[Any], Any], sampling: Callable[..., Awaitable[Any]] | None = None,
                   ) -> Callable[[str], Callable[..., Awaitable[Any]]]:
    """For each server name, the session's ``on_input`` handler: a method in
    ``ANSWERERS`` goes to its answerer, sampling to ``sampling(server, params)``
    (kernel.sampling_answer: a model answers, not a person); anything else is refused."""

    def for_server(server: str) -> Callable[..., Awaitable[Any]]:
        async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
            from runtime.errors import ToolRefused

            if method == "sampling/createMessage" and sampling is not None:
                return await sampling(server, params)
            answerer = ANSWERERS.get(method)
            if answerer is None:
                raise ToolRefused(f"tern answers no {method} yet")
            return await answerer(approvals, redact, server, params)

        return answer

    return for_server
