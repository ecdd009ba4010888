"""Approvals: a tool call that the policy says to ask about waits here for a person.

One SQLite file, ``<state dir>/approvals.sqlite3``, is the truth, shared by every tern
process on the state directory: the daemon, a ``tern run`` on a terminal, and the
``tern approvals``/``approve``/``deny`` commands that answer them. A decision is one
``UPDATE ... WHERE state = 'pending'``, so two people answering at once cannot both win
(the second is told the request is closed). The process whose call waits wakes at once
when the decision is made in it (the HTTP API, an MCP elicitation, an A2A reply), and
within ``POLL_SECS`` when another process made it.

A request is pending until approved, denied, or expired (``approval_timeout_secs``; an
expired request is a denial). An agent has at most ``max_pending_per_agent`` requests
waiting; more are denied at once. A decision is for this call (``once``), for this agent
and tool from now on (``always``), or for these exact arguments from now on (``args``);
the last two persist as rules. Requests whose process is gone (a crash, a restart) are
expired when the next tern opens the file. Arguments are kept redacted and bounded;
the ``args`` rule matches their digest, never their text. Every request and decision
is an audit record (who decided, through which channel) and an event
(``approval_requested``, ``approval_resolved``).

A request may carry a *form* (an MCP server's question, ``kernel.elicitation``): then
approving it takes an answer, checked against the form (``kernel.forms``) before the
request closes, so a wrong answer leaves it pending; denying it declines, or cancels.
The answer is kept only until the waiting process takes it (``take_answer``): never
in events or the audit log, which records its digest.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

import msgspec
import trio

from runtime.errors import ApprovalClosed, UnknownApproval, UsageError
from runtime.log import get_logger
from runtime.ports import Approval, Ask, Caller

__all__ = ["Approvals", "SCOPES", "POLL_SECS"]

log = get_logger("approvals")

SCOPES = ("once", "always", "args")
POLL_SECS = 0.2  # how soon a decision made by another process is seen
MAX_ARGUMENT_BYTES = 16 * 1024  # what a request keeps of its (redacted) arguments
LIST_LIMIT = 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id TEXT PRIMARY KEY, agent TEXT NOT NULL, tool TEXT NOT NULL, arguments TEXT NOT NULL,
    digest TEXT NOT NULL, caller TEXT NOT NULL, context_id TEXT NOT NULL, created REAL NOT NULL,
    expires REAL NOT NULL, state TEXT NOT NULL, scope TEXT NOT NULL DEFAULT '',
    decided_by TEXT NOT NULL DEFAULT '', channel TEXT NOT NULL DEFAULT '', reason TEXT NOT NULL DEFAULT '',
    decided_at REAL NOT NULL DEFAULT 0, owner TEXT NOT NULL, form TEXT NOT NULL DEFAULT '',
    answer TEXT NOT NULL DEFAULT '', key_name TEXT NOT NULL DEFAULT 'admin');
CREATE INDEX IF NOT EXISTS requests_pending ON requests (state, agent);
CREATE TABLE IF NOT EXISTS rules (
    agent TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL, decision TEXT NOT NULL,
    created REAL NOT NULL, decided_by TEXT NOT NULL, PRIMARY KEY (agent, tool, digest));
"""
_COLUMNS = ("id, agent, tool, arguments, caller, context_id, created, expires, state, scope, decided_by, channel, "
            "reason, decided_at, form, key_name")
_ADDED = {"form": "''", "answer": "''", "key_name": "'admin'"}  # columns a file made by an older tern lacks (and their
# defaults: a request made before keys had names is the admin's)
_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder(order="sorted").encode


def _process_token(pid: int) -> str | None:
    """``pid:start-time`` of a live process (so a reused pid is not mistaken for it); None
    when no such process runs. Without /proc, the pid alone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return f"{pid}:{fields[19].decode()}"
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return f"{pid}:"


class Approvals:
    """The approval requests of one state directory (``runtime.ports.ApprovalPort``)."""

    def __init__(self, path: str | Path | None, *, timeout_secs: float = 300.0, max_pending_per_agent: int = 5,
                 audit: Any = None, publish: Callable[[str, dict[str, Any]], None] | None = None,
                 redact: Callable[[Any], Any] | None = None, clock: Callable[[], float] = time.time) -> None:
        from runtime.storage import open_db

        self.path = Path(path) if path else None
        self.timeout_secs = timeout_secs
        self.max_pending = max_pending_per_agent
        self.audit = audit
        self.publish = publish
        self.redact = redact or (lambda value: value)
        self.clock = clock
        self.observers: list[Callable[[str], None]] = []  # (outcome): metrics
        self.owner = _process_token(os.getpid()) or f"{os.getpid()}:"
        self._db = open_db(self.path, _SCHEMA, timeout=5.0, isolation_level=None) if self.path else self._memory_db()
        have = {row[1] for row in self._db.execute("PRAGMA table_info(requests)")}
        for column, default in _ADDED.items():
            if column not in have:
                self._db.execute(f"ALTER TABLE requests ADD COLUMN {column} TEXT NOT NULL DEFAULT {default}")
        self._waiters: dict[str, trio.Event] = {}
        self._decided_here: set[str] = set()
        self.expire_orphans()

    @staticmethod
    def _memory_db() -> sqlite3.Connection:
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.executescript(_SCHEMA)
        return db

    def close(self) -> None:
        self._db.close()

    # --- reading ----------------------------------------------------------------------

    def list(self, state: str | None = "pending", who: Caller | None = None) -> list[Approval]:
        """Requests, newest first (``state`` None: every state), at most ``LIST_LIMIT``;
        only those ``who`` may answer when given (see ``answerable``)."""
        self._expire_due()
        clauses, params = (["state = ?"], [state]) if state else ([], [])
        if who is not None and not who.allows("approvals"):
            clauses.append("key_name = ?")
            params.append(who.name)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM requests {where} ORDER BY created DESC LIMIT {LIST_LIMIT}",
                                params).fetchall()
        return [_approval(row) for row in rows]

    def get(self, approval_id: str, who: Caller | None = None) -> Approval:
        """One request; ``UnknownApproval`` for an id that never was, or one ``who`` may
        not answer (the same error: no caller learns of another's)."""
        self._expire_due()
        row = self._db.execute(f"SELECT {_COLUMNS} FROM requests WHERE id = ?", (approval_id,)).fetchone()
        if row is None or who is not None and not answerable(who, row[-1]):
            raise UnknownApproval(f"no approval request has the id {approval_id!r} (see `tern approvals`)")
        return _approval(row)

    def pending_count(self) -> int:
        return self._db.execute("SELECT count(*) FROM requests WHERE state = 'pending'").fetchone()[0]

    def remembered(self, agent: str, tool: str, digest: str) -> str | None:
        """A persisted decision (``always`` or ``args``) for this call: "allow", "deny" or None."""
        row = self._db.execute("SELECT decision FROM rules WHERE agent = ? AND tool = ? AND digest IN ('', ?) "
                               "ORDER BY digest DESC LIMIT 1", (agent, tool, digest)).fetchone()
        return row[0] if row else None

    # --- asking -----------------------------------------------------------------------

    async def request(self, agent: str, tool: str, arguments: Any, digest: str, *, caller: str = "",
                      context_id: str = "", reason: str = "", ask: Ask | None = None,
                      form: dict[str, Any] | None = None, key: str = "admin") -> Approval:
        """Open a request and wait for its end; returns it approved, denied or expired.
        ``ask`` (the caller's way to ask a person) runs meanwhile. If the waiting call
        is cancelled, the request is expired on the way out. ``form`` (checked by
        ``forms.check_form``) makes it a question: see ``take_answer``. ``key``: the
        key name whose run asks (it may answer; see ``answerable``)."""
        now = self.clock()
        waiting = self._db.execute("SELECT count(*) FROM requests WHERE state = 'pending' AND agent = ?",
                                   (agent,)).fetchone()[0]
        if waiting >= self.max_pending:
            who = f"agent '{agent}'" if agent else "the operator"
            self._audit("approval_requested", agent=agent, tool=tool, caller=caller, outcome="denied",
                        reason=f"{who} already has {waiting} calls waiting for approval")
            for observe in self.observers:
                observe("refused")
            return Approval("", agent, tool, None, caller, context_id, now, now, state="denied", channel="policy",
                            reason=f"{who} already has {waiting} tool calls waiting for approval, the limit "
                                   "([governance] max_pending_per_agent)")
        approval_id = "ap_" + os.urandom(5).hex()
        shown = _bounded(self.redact(arguments))
        expires = now + self.timeout_secs
        try:
            self._db.execute("INSERT INTO requests (id, agent, tool, arguments, digest, caller, context_id, created, "
                             "expires, state, owner, form, key_name) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
                             (approval_id, agent, tool, shown, digest, caller, context_id, now, expires, self.owner,
                              msgspec.json.encode(form).decode() if form is not None else "", key))  # fields in order
        except sqlite3.Error as exc:  # a full disk: no request, so no yes: the call is refused
            from runtime.storage import failed

            raise failed("approval request not recorded", exc) from None
        approval = self.get(approval_id)
        self._audit("approval_requested", id=approval_id, agent=agent, tool=tool, caller=caller, key=key,
                    context_id=context_id, arguments=digest, reason=reason)
        self._event("approval_requested", approval)
        for observe in self.observers:
            observe("requested")
        woken = self._waiters[approval_id] = trio.Event()
        timer = trio.CancelScope()
        try:
            with trio.move_on_after(self.timeout_secs) as timer:
                async with trio.open_nursery() as nursery:
                    if ask is not None:
                        nursery.start_soon(self._ask, ask, approval)
                    nursery.start_soon(self._watch, approval_id, woken)
                    await woken.wait()
                    nursery.cancel_scope.cancel()
        finally:
            del self._waiters[approval_id]
            with trio.CancelScope(shield=True):
                final = self._finish(approval_id, timed_out=timer.cancelled_caught)
        return final

    async def _ask(self, ask: Ask, approval: Approval) -> None:
        try:
            await ask(approval)
        except Exception:  # a broken channel must not fail the call: the others still can answer
            log.warning("asking for approval %s failed", approval.id, exc_info=True)

    async def _watch(self, approval_id: str, woken: trio.Event) -> None:
        """Wake the waiter when another process decides (or the row vanishes)."""
        while True:
            await trio.sleep(POLL_SECS)
            row = self._db.execute("SELECT state FROM requests WHERE id = ?", (approval_id,)).fetchone()
            if row is None or row[0] != "pending":
                woken.set()
                return

    def _finish(self, approval_id: str, *, timed_out: bool) -> Approval:
        """After the wait: a request still pending expires (time ran out, or the caller
        left); one decided by another process is announced here."""
        try:
            approval = self.get(approval_id)
        except UnknownApproval:  # the file was replaced under us: nobody said yes
            now = self.clock()
            return Approval(approval_id, "", "", None, "", "", now, now, state="expired", reason="the request vanished")
        if approval.state == "pending":
            reason = "nobody answered in time" if timed_out else "the caller stopped waiting"
            self._db.execute("UPDATE requests SET state = 'expired', reason = ?, decided_at = ? "
                             "WHERE id = ? AND state = 'pending'", (reason, self.clock(), approval_id))
            approval = self.get(approval_id)
            if approval.state == "expired":
                self._audit("approval_resolved", id=approval_id, agent=approval.agent, tool=approval.tool,
                            outcome="expired", reason=reason)
                self._event("approval_resolved", approval)
                for observe in self.observers:
                    observe("expired")
                return approval
        if approval_id in self._decided_here:
            self._decided_here.discard(approval_id)
        else:  # decided by another process: it wrote the audit record; tell our own subscribers
            self._event("approval_resolved", approval)
        return approval

    # --- deciding ---------------------------------------------------------------------

    def decide(self, approval_id: str, approve: bool, *, scope: str = "once", reason: str = "",
               by: str = "", channel: str = "", answer: dict[str, Any] | None = None,
               cancel: bool = False, who: Caller | None = None) -> Approval:
        """Approve or deny a pending request. A form's approval carries ``answer`` (its
        field values; UsageError if they do not fit the form, and it stays pending);
        its denial declines, or with ``cancel`` cancels."""
        if scope not in SCOPES:
            raise UsageError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
        if who is not None:
            self.get(approval_id, who)  # UnknownApproval for another key's request
        reason = reason[:1000]
        result = self._form_result(approval_id, approve, scope, answer, cancel)
        now = self.clock()
        state = "approved" if approve else "denied"
        changed = self._db.execute(
            "UPDATE requests SET state = ?, scope = ?, decided_by = ?, channel = ?, reason = ?, decided_at = ?, "
            "answer = ? WHERE id = ? AND state = 'pending' AND expires > ?",
            (state, scope, by[:200], channel[:64], reason, now, _encode(result).decode() if result else "",
             approval_id, now)).rowcount
        if not changed:
            current = self.get(approval_id)  # UnknownApproval for an id that never was
            if current.state == "pending":  # past its time: expire it now, say so
                self._expire_due()
                current = self.get(approval_id)
            raise ApprovalClosed(f"approval {approval_id} is already {current.state}"
                                 f"{' by ' + current.decided_by if current.decided_by else ''}; it takes no decision")
        approval = self.get(approval_id)
        if scope != "once":
            digest = "" if scope == "always" else self._db.execute(
                "SELECT digest FROM requests WHERE id = ?", (approval_id,)).fetchone()[0]
            self._db.execute("INSERT OR REPLACE INTO rules (agent, tool, digest, decision, created, decided_by) "
                             "VALUES (?, ?, ?, ?, ?, ?)",
                             (approval.agent, approval.tool, digest, "allow" if approve else "deny", now, by[:200]))
        extra = {"answer": _digest(result)} if result else {}
        if who is not None:
            extra["key"] = who.name
        self._audit("approval_resolved", id=approval_id, agent=approval.agent, tool=approval.tool, outcome=state,
                    scope=scope, decided_by=by, channel=channel, reason=reason, **extra)
        for observe in self.observers:
            observe(state)
        waiter = self._waiters.get(approval_id)
        if waiter is not None:
            self._decided_here.add(approval_id)
            waiter.set()
        self._event("approval_resolved", approval)
        return approval

    def _form_result(self, approval_id: str, approve: bool, scope: str, answer: dict[str, Any] | None,
                     cancel: bool) -> dict[str, Any] | None:
        """What a form's server gets for this decision (checked now, so a wrong answer
        leaves the request pending); None for a tool call, which takes no answer."""
        current = self.get(approval_id)
        if current.form is None:
            if answer is not None or cancel:
                raise UsageError(f"approval {approval_id} is a tool call, not a question: it takes no answer")
            return None
        if current.state != "pending":
            return None  # the update below finds it closed and says so
        if scope != "once":
            raise UsageError(f"approval {approval_id} is a question: it is answered once, not remembered")
        if not approve:
            return {"action": "cancel" if cancel else "decline"}
        if cancel:
            raise UsageError("cancel is a way to deny, not to approve")
        if current.form.get("mode") == "url":
            if answer:
                raise UsageError(f"approval {approval_id} asks you to open a URL: it takes no answer")
            return {"action": "accept"}
        from runtime.kernel.forms import validate
        from runtime.mcp.client.inputs import with_defaults

        schema = current.form.get("requestedSchema")
        filled = with_defaults(schema, {"action": "accept", "content": answer or {}})["content"]
        return {"action": "accept", "content": validate(current.form, filled)}

    def take_answer(self, approval_id: str) -> dict[str, Any] | None:
        """A decided form's answer (``{"action": ...}``), once: it is wiped as it is read."""
        row = self._db.execute("SELECT answer FROM requests WHERE id = ?", (approval_id,)).fetchone()
        if not row or not row[0]:
            return None
        self._db.execute("UPDATE requests SET answer = '' WHERE id = ?", (approval_id,))
        return _decode.decode(row[0])

    def forget_rules(self, agent: str | None = None, tool: str | None = None) -> int:
        """Remove persisted decisions (all, or one agent's, or one tool's); how many went."""
        clauses, params = [], []
        for column, value in (("agent", agent), ("tool", tool)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._db.execute(f"DELETE FROM rules {where}", params).rowcount

    def rules(self) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT agent, tool, digest, decision, created, decided_by FROM rules "
                                "ORDER BY created").fetchall()
        return [{"agent": a, "tool": t, "arguments": d or None, "decision": dec, "created": c, "decided_by": by}
                for a, t, d, dec, c, by in rows]

    # --- housekeeping -----------------------------------------------------------------

    def expire_orphans(self) -> int:
        """Expire pending requests whose process is gone (found at boot: nobody waits for them)."""
        owners = [row[0] for row in self._db.execute("SELECT DISTINCT owner FROM requests WHERE state = 'pending' "
                                                      "OR answer != ''")]
        gone = 0
        for owner in owners:
            pid, _, _ = owner.partition(":")
            if owner == self.owner or (pid.isdigit() and _process_token(int(pid)) == owner):
                continue
            self._db.execute("UPDATE requests SET answer = '' WHERE owner = ?", (owner,))  # nobody takes it now
            gone += self._db.execute("UPDATE requests SET state = 'expired', reason = ?, decided_at = ? "
                                     "WHERE owner = ? AND state = 'pending'",
                                     ("tern stopped while it waited", self.clock(), owner)).rowcount
        if gone:
            log.warning("expired %d approval requests left pending by a tern that is no longer running", gone)
            self._audit("approval_resolved", outcome="expired", count=gone, reason="tern stopped while it waited")
        return gone

    def _expire_due(self) -> None:
        self._db.execute("UPDATE requests SET state = 'expired', reason = 'nobody answered in time', decided_at = ? "
                         "WHERE state = 'pending' AND expires <= ?", (self.clock(), self.clock()))

    def _audit(self, kind: str, **fields: Any) -> None:
        if self.audit is not None:
            self.audit.record(kind, **fields)

    def _event(self, kind: str, approval: Approval) -> None:
        if self.publish is not None:
            self.publish(kind, {"approval": msgspec.structs.asdict(approval)})


def _bounded(arguments: Any) -> str:
    data = _encode(arguments)
    if len(data) <= MAX_ARGUMENT_BYTES:
        return data.decode()
    preview = data[:MAX_ARGUMENT_BYTES].decode("utf-8", "ignore")
    return _encode({"_preview": preview, "_bytes": len(data)}).decode()


def _digest(value: Any) -> str:
    from runtime.kernel.audit import digest

    return digest(value)


def answerable(who: Caller, key: str) -> bool:
    """Whether ``who`` may answer a request its key ``key``'s run made: its own, or any
    with the scope ``approvals`` (or ``admin``)."""
    return who.allows("approvals") or who.owns(key)


def _approval(row: tuple) -> Approval:
    (id_, agent, tool, arguments, caller, context_id, created, expires, state, scope, decided_by, channel, reason,
     decided_at, form, key) = row
    return Approval(id_, agent, tool, _decode.decode(arguments), caller, context_id, created, expires, state, scope,
                    decided_by, channel, reason, decided_at, _decode.decode(form) if form else None, key)


def describe(approval: Approval, *, width: int = 200) -> str:
    """One line for a person: who wants to call what, with what (or who asks what)."""
    if approval.form is not None:
        asked = " ".join(str(approval.form.get("message", "")).split())
        asked = asked if len(asked) <= width else asked[:width - 3] + "..."
        return f"{approval.caller or 'an MCP server'} asks: {asked}"
    who = f"agent '{approval.agent}'" if approval.agent else "the operator"
    shown = _encode(approval.arguments).decode() if approval.arguments is not None else "{}"
    if len(shown) > width:
        shown = shown[:width - 3] + "..."
    return f"{who} wants to call {approval.tool} {shown}"


def remaining(approval: Approval, now: float | None = None) -> int:
    return max(0, math.ceil(approval.expires - (time.time() if now is None else now)))
