"""How an A2A task shows a tool call of its agent that waits for a person's approval: the
``runtime.ports.Ask`` the runner hands to each task's run.

- By default the task stays ``working``, and its status message names the request and
  how to answer it (``tern approve ID``, the HTTP API), so ``tasks/get`` and every
  stream show why nothing moves. The caller is not asked: an A2A caller is often
  another program, and whether it may approve tern's tool calls is the operator's call.
- With ``[a2a] caller_may_approve``, the task goes to ``input-required`` with the
  question as a text part and the request as a data part
  (``{"approval": {id, agent, tool, arguments, arguments_sha256, arguments_bytes,
  expires}}``, the arguments redacted and whole as every channel shows them; the text
  names their digest beside a preview: ``log.preview``). The caller's next message on the
  task is the decision: a data part ``{"decision": "approve" | "deny", "scope": ...,
  "reason": ..., "digest": ...}`` (an approval naming another digest is refused) or the
  text approve/yes or deny/no, decided through the ``ApprovalPort`` in the caller's
  name on the channel ``a2a``. A question from an MCP server (an approval with a
  ``form``) carries the form in its data part, and is answered with typed values:
  ``{"decision": "approve", "answer": {...}}`` (checked against the form; a wrong answer
  is refused and the task stays input-required) or ``{"decision": "deny", "cancel": true}``.
  Anything else is refused with an error saying what would do, and the task stays
  input-required.
- Either way, when the request ends (decided by any channel, or expired) the task is
  working again with a status message saying how it ended, and the agent goes on: a
  denial or an expiry reaches it as the tool's error.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import msgspec
import trio

from runtime.a2a.model import Message, Task, now_iso
from runtime.a2a.server.engine import InvalidTaskRequest, TaskReport, UnsupportedOperation
from runtime.errors import ApprovalMismatch, StorageError, TernError, UsageError
from runtime.log import preview
from runtime.ports import Approval, ApprovalPort, Ask

__all__ = ["approval_asker", "read_decision", "Decision", "SCOPES"]

SCOPES = ("once", "always", "args")
#: The plain-text answers, casefolded, without trailing punctuation.
_WORDS = {"approve": True, "approved": True, "yes": True, "y": True,
          "deny": False, "denied": False, "no": False, "n": False}
#: How long the ask outlives its request's expiry at most: the request cancels it first.
GRACE_SECS = 5.0
ENDED_READ_SECS = 5.0  # how long the task waits to say how its request ended
_SHOWN_ARGUMENTS = 300  # characters of the arguments in the question's text (the data part has them all)
_encode = msgspec.json.Encoder(order="sorted").encode
_HOW = ('answer "approve" or "deny", or send a data part {"decision": "approve" | "deny", '
        '"scope": "once" | "always" | "args", "reason": "..."}')
_HOW_FORM = ('send a data part {"decision": "approve", "answer": {field: value, ...}} with values that fit the '
             'form (left-out fields take its defaults), or {"decision": "deny"} to decline '
             '({"decision": "deny", "cancel": true} to cancel)')


class Decision(NamedTuple):
    """A caller's answer: approve or not, the scope and reason, and for a question its
    typed ``answer`` or ``cancel``."""

    approve: bool
    scope: str = "once"
    reason: str = ""
    answer: dict[str, Any] | None = None
    cancel: bool = False
    digest: str | None = None  # the arguments_sha256 approved


def approval_asker(task: Task, report: TaskReport, approvals: ApprovalPort | None, *,
                   caller_may_approve: bool) -> Ask:
    """The ``Ask`` of one run of ``task``'s agent. The caller is asked only with
    ``caller_may_approve`` and an ``ApprovalPort`` to decide through, and only one
    question at a time (a second request meanwhile waits for the other channels)."""

    async def ask(approval: Approval) -> None:
        asked = False
        if caller_may_approve and approvals is not None:
            async def answer(message: Message, caller: str) -> str:
                return await _decide(approvals, approval, task, message, caller, report.who)

            asked = report.ask(question(approval), answer)
        if not asked:
            report.status("working", waiting(approval))
        try:
            await trio.sleep(max(approval.expires - time.time(), 0) + GRACE_SECS)
        finally:  # decided, expired, or the task ended: say how it ended while the run goes on
            if not task.terminal:
                ended = await _ended(approvals, approval)
                if asked:
                    report.resume(ended)
                else:
                    report.status("working", ended)

    return ask


def waiting(approval: Approval) -> str:
    """The status message of a task whose agent waits for a person elsewhere."""
    return (f"waiting for a person to approve {approval.tool} (approval {approval.id}, "
            f"{_seconds_left(approval)} s left): tern approve {approval.id}, or tern deny {approval.id}")


def question(approval: Approval) -> Message:
    """The input-required message: what is asked, and the request as data."""
    shown = preview(_encode(approval.arguments).decode() if approval.arguments is not None else "{}",
                    _SHOWN_ARGUMENTS)
    who = f"agent '{approval.agent}'" if approval.agent else "tern"
    data = {"approval": {"id": approval.id, "agent": approval.agent, "tool": approval.tool,
                         "arguments": approval.arguments, "arguments_sha256": approval.arguments_sha256,
                         "arguments_bytes": approval.arguments_bytes, "expires": now_iso(approval.expires)}}
    if approval.form is not None:
        data["approval"]["form"] = approval.form
        text = (f"{approval.tool} asks: {approval.form.get('message', '')} It waits for your answer "
                f"({approval.id}, {_seconds_left(approval)} s left): {_HOW_FORM}.")
    else:
        text = (f"May {who} call {approval.tool} {shown} ({approval.arguments_bytes:,} bytes, "
                f"{approval.arguments_sha256}: the whole arguments are in the data part)? It waits for your "
                f"approval ({approval.id}, {_seconds_left(approval)} s left): {_HOW}.")
    return Message(role="agent", parts=[{"text": text}, {"data": data}])


def read_decision(parts: list[dict[str, Any]]) -> Decision:
    """The ``Decision`` in the parts of a caller's answer: the first data part with a
    ``decision``, else the text as one word. Raises ``InvalidTaskRequest`` with what
    would do."""
    for part in parts:
        data = part.get("data")
        if isinstance(data, dict) and "decision" in data:
            decision, scope, reason = data.get("decision"), data.get("scope", "once"), data.get("reason", "")
            answer, cancel = data.get("answer"), data.get("cancel", False)
            if decision not in ("approve", "deny"):
                raise InvalidTaskRequest(f"decision must be \"approve\" or \"deny\", not {_short(decision)}")
            if scope not in SCOPES:
                raise InvalidTaskRequest(f"scope must be \"once\", \"always\" or \"args\", not {_short(scope)}")
            if not isinstance(reason, str):
                raise InvalidTaskRequest(f"reason must be a string, not {_short(reason)}")
            if answer is not None and not isinstance(answer, dict):
                raise InvalidTaskRequest(f"answer must be an object of the form's fields, not {_short(answer)}")
            if not isinstance(cancel, bool):
                raise InvalidTaskRequest(f"cancel must be true or false, not {_short(cancel)}")
            digest = data.get("digest")
            if digest is not None and not isinstance(digest, str):
                raise InvalidTaskRequest(f"digest must be the arguments_sha256 string, not {_short(digest)}")
            return Decision(decision == "approve", scope, reason, answer, cancel, digest)
    text = " ".join(str(part["text"]) for part in parts if "text" in part).strip().rstrip(".!").strip().casefold()
    if text in _WORDS:
        return Decision(_WORDS[text])
    said = f"the answer {_short(text)}" if text else "an answer without text or a decision"
    raise InvalidTaskRequest(f"{said} is no decision: {_HOW}")


async def _decide(approvals: ApprovalPort, approval: Approval, task: Task, message: Message, caller: str,
                  who: Any = None) -> str:
    """The caller's answer to ``approval`` (``who``: the task's caller, whom the binding has
    already found to own the task; the kernel decides whether it may answer, and a rule it
    makes is its own); the status text the task works again with."""
    try:
        decision = read_decision(message.parts)
    except InvalidTaskRequest as exc:
        raise InvalidTaskRequest(f"task {task.id} waits for a decision on approval {approval.id}: {exc.message}") \
            from None
    try:
        decided = await approvals.decide(approval.id, decision.approve, scope=decision.scope, reason=decision.reason,
                                   by=caller or "a2a", channel="a2a", answer=decision.answer, cancel=decision.cancel,
                                   who=who, digest=decision.digest)
    except StorageError:  # the store is away (503): the task still asks, the caller may answer again
        raise
    except (UsageError, ApprovalMismatch) as exc:  # an answer that does not fit: the task still asks
        raise InvalidTaskRequest(f"task {task.id} waits for an answer to approval {approval.id}: {exc}") from None
    except TernError as exc:  # decided elsewhere or expired a moment ago: the task goes on by itself
        raise UnsupportedOperation(str(exc)) from None
    return _ended_as(decided)


async def _ended(approvals: ApprovalPort | None, approval: Approval) -> str:
    """How the request ended, read once more (shielded: the ask is cancelled when it
    ends; bounded: a store that does not answer leaves the last known state)."""
    current = approval
    if approvals is not None:
        with trio.CancelScope(shield=True), trio.move_on_after(ENDED_READ_SECS):
            try:
                current = await approvals.get(approval.id)
            except TernError:
                pass
    return _ended_as(current)


def _ended_as(approval: Approval) -> str:
    by = f" by {approval.decided_by}" if approval.decided_by else ""
    if approval.state == "approved":
        return f"{approval.tool} was approved{by} (approval {approval.id}); working"
    if approval.state == "denied":
        return f"{approval.tool} was denied{by} (approval {approval.id}); the agent is told"
    return f"approval {approval.id} of {approval.tool} expired without an answer; the agent is told"


def _seconds_left(approval: Approval) -> int:
    return max(0, int(approval.expires - time.time() + 0.5))


def _short(value: Any) -> str:
    shown = _encode(value).decode() if not isinstance(value, str) else repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
