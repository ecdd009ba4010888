"""How a ``tools/call`` puts a tool call that waits for approval to the person behind
the MCP client.

The kernel's pipeline calls the run's ``ask`` (``runtime.ports.Ask``) when a call needs
a person's yes; it runs while the request waits and is cancelled as soon as any channel
decides (``tern approve``, ``POST /api/approvals/{id}``, this client). What this server
does depends on what the client can do:

- **Elicitation** (handshake era, declared at ``initialize``): an ``elicitation/create``
  form showing who wants to call what (arguments redacted, as the kernel keeps them;
  control and bidi characters escaped, padding counted and the ends kept: ``log.preview``),
  the sha256 and size of the whole arguments (``GET /api/approvals/{id}/arguments``,
  ``tern approvals show ID``: the approval binds to that digest) and the approval id,
  asking for a ``decision`` (approve or deny), a ``scope`` (once, always, args) and a
  ``reason``. The answer decides through the ``ApprovalPort``
  (channel ``mcp``, decided by the client's label). ``decline`` denies. ``cancel``
  (the person dismissed the dialog) denies too, with the reason "dismissed": a
  dismissed dialog must not leave the call hanging until the request expires. A client
  that never answers is asked for as long as the request lives; then the request
  expires and the call returns the pipeline's tool error.
- **MRTR** (2026-07-28, where servers send no requests): ``mrtr.py`` asks the same form
  inside an ``input_required`` result; ``decision_of`` and ``decide`` are shared.
- **A question** (the approval carries a ``form``: an upstream MCP server asked tern's
  client during this call): the client is asked that form itself, as this server's own
  elicitation, and its answer (accept with values, decline, cancel) decides the request;
  the kernel checks the values against the form (a wrong answer changes nothing, and the
  person channels can still answer).
- **Neither** (or the client refused the elicitation): the client is told which
  approval the call waits for, so its user can answer on another channel: a
  ``notifications/progress`` every NOTICE_SECS when the call has a ``progressToken``
  (which also keeps the client's own timeout from firing), else one warning
  ``notifications/message`` if the client's log level lets it through. Then the ask
  just waits, and the request is decided elsewhere or expires.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import msgspec
import trio

from runtime.errors import TernError, TernTimeout
from runtime.log import clean, get_logger, preview
from runtime.ports import Approval, ApprovalPort, Caller

__all__ = ["Asker", "elicitation", "decision_of", "decide", "notice", "wants_form", "SCOPES", "NOTICE_SECS"]

log = get_logger("mcp.server")

SCOPES = ("once", "always", "args")  # as the kernel's approvals take them
NOTICE_SECS = 10.0  # how often a waiting call's progress names its approval
MAX_SHOWN_CHARS = 2000  # the arguments as the dialog shows them
MAX_REASON_CHARS = 500
MAX_WAIT_SECS = 86400.0  # the elicitation's own bound, past any sane approval_timeout_secs
_encode = msgspec.json.Encoder(order="sorted").encode

DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "title": "Decision", "enum": ["approve", "deny"],
                     "description": "Let this tool call run, or refuse it."},
        "scope": {"type": "string", "title": "Remember", "enum": list(SCOPES), "default": "once",
                  "description": "once: this call only; always: this tool for this caller from now on; "
                                 "args: these exact arguments from now on."},
        "reason": {"type": "string", "title": "Reason", "maxLength": MAX_REASON_CHARS,
                   "description": "Optional: why (kept in the audit log)."},
    },
    "required": ["decision"],
}


class Decision(NamedTuple):
    approve: bool
    scope: str
    reason: str


def wants_form(capabilities: Any) -> bool:
    """Whether a client's capabilities include form elicitation (an empty
    ``elicitation`` object means form, as in 2025-06-18)."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(elicitation, dict) and (not elicitation or "form" in elicitation)


def elicitation(approval: Approval, *, mode: bool = True) -> dict[str, Any]:
    """The ``elicitation/create`` params for one approval (``mode``: say "form", which
    2025-11-25 and later know; 2025-06-18 had only forms and no such field)."""
    if approval.form is not None:
        asked = dict(approval.form)
        if asked.get("mode") == "url":
            return {**asked, "elicitationId": asked.get("elicitationId") or approval.id}
        return asked if mode else {k: v for k, v in asked.items() if k != "mode"}
    who = f"Agent '{clean(approval.agent)}'" if approval.agent else "Your MCP client"
    shown = preview(_encode(approval.arguments).decode() if approval.arguments is not None else "{}",
                    MAX_SHOWN_CHARS)
    left = max(0, int(approval.expires - time.time()))
    message = (f"{who} wants to call the tool {clean(approval.tool)} with these arguments:\n{shown}\n\n"
               f"The whole arguments are {approval.arguments_bytes:,} bytes with the digest "
               f"{approval.arguments_sha256} (read them whole: tern approvals show {approval.id}, or GET "
               f"/api/approvals/{approval.id}/arguments); approving approves exactly those.\n"
               f"Approve or deny it (approval {approval.id}; it expires in {left} s and is then denied).")
    params: dict[str, Any] = {"message": message, "requestedSchema": DECISION_SCHEMA}
    if mode:
        params = {"mode": "form", **params}
    return params


def decision_of(answer: Any) -> Decision:
    """An elicitation result as a decision. Anything but an accepted ``approve`` denies
    (a malformed answer too: no yes without a clear yes)."""
    action = answer.get("action") if isinstance(answer, dict) else None
    if action == "decline":
        return Decision(False, "once", "declined")
    if action == "cancel":  # the dialog was dismissed: deny rather than leave the call hanging
        return Decision(False, "once", "dismissed")
    if action != "accept":
        return Decision(False, "once", "the client's answer was not understood")
    content = answer.get("content")
    content = content if isinstance(content, dict) else {}
    scope = content.get("scope") if content.get("scope") in SCOPES else "once"
    reason = content.get("reason")
    reason = reason[:MAX_REASON_CHARS] if isinstance(reason, str) else ""
    if content.get("decision") == "approve":
        return Decision(True, scope, reason)
    if content.get("decision") == "deny":
        return Decision(False, scope, reason)
    return Decision(False, "once", "the answer named no decision")


async def decide(approvals: ApprovalPort, approval_id: str, answer: Any, *, by: str,
                 who: Caller | None = None, digest: str | None = None) -> None:
    """Decide ``approval_id`` with a client's elicitation answer, as ``who`` (the client's
    key: the kernel decides whether it may), for the arguments whose ``digest`` the form
    showed (None: the request's own, read now, as the form was built from it); an answer
    that comes after the request was closed (decided elsewhere, expired), one ``who`` may
    not give, or a question's answer that does not fit its form, changes nothing. ``always`` and ``args`` are remembered
    for this caller's own calls, as the form says."""
    try:
        current = await approvals.get(approval_id, who)
        if current.form is not None:
            action = answer.get("action") if isinstance(answer, dict) else None
            content = answer.get("content") if action == "accept" else None
            await approvals.decide(approval_id, action == "accept", by=by, channel="mcp", cancel=action == "cancel",
                             answer=content if isinstance(content, dict) else {} if action == "accept" else None,
                             reason="" if action in ("accept", "decline", "cancel") else "not understood", who=who)
            return
        approve, scope, reason = decision_of(answer)
        await approvals.decide(approval_id, approve, scope=scope, reason=reason, by=by, channel="mcp", who=who,
                               rule_for="caller", digest=digest or current.arguments_sha256)
    except TernError as exc:
        log.info("approval %s: the MCP client's answer changed nothing: %s", approval_id, exc)


def notice(approval: Approval) -> str:
    return f"waiting for approval {approval.id}: run tern approve {approval.id}, or deny it"


class Asker:
    """The ``ask`` of one tools/call that cannot use MRTR: elicitation when the client
    can answer one, else notices (see the module docstring)."""

    def __init__(self, approvals: ApprovalPort | None, peer: Any, send: Any, reporter: Any, *, elicit: bool,
                 mode: bool, log_ok: bool, by: str, who: Caller | None = None) -> None:
        self.approvals = approvals
        self.peer = peer  # dispatch.Peer: its ``requests`` route the client's answers
        self.send = send
        self.reporter = reporter  # the call's progress reporter (dispatch._Reporter), or None
        self.elicit = elicit and approvals is not None and send is not None
        self.mode = mode
        self.log_ok = log_ok and send is not None
        self.by = by
        self.who = who

    async def __call__(self, approval: Approval) -> None:
        if not approval.id:
            return
        if self.elicit:
            try:
                answer = await self.peer.requests.request(
                    self.send, "elicitation/create", elicitation(approval, mode=self.mode),
                    timeout_secs=min(MAX_WAIT_SECS, approval.expires - time.time()))
            except TernTimeout:
                return  # the request expires now; the pipeline answers the call
            except TernError as exc:  # the client refused, or is busy, or gone: tell its user the other way
                log.info("could not ask the MCP client about approval %s: %s", approval.id, exc)
            else:
                await decide(self.approvals, approval.id, answer, by=self.by, who=self.who,  # type: ignore[arg-type]
                             digest=approval.arguments_sha256)
                return
        await self.notices(approval)

    async def notices(self, approval: Approval) -> None:
        text = notice(approval)
        reporter = self.reporter
        if reporter is not None and reporter.token is not None:
            while True:  # ends when the request is decided (this task is cancelled) or expires
                reporter.progress(text)
                await trio.sleep(NOTICE_SECS)
        if self.log_ok:
            try:
                await self.send({"method": "notifications/message",
                                 "params": {"level": "warning", "logger": "tern", "data": text}})
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
