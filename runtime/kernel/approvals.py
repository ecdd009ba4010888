"""Approvals: a tool call that the policy says to ask about waits here for a person.

The store is the truth, shared by everyone who may answer. With SQLite (the default)
it is ``<state dir>/approvals.sqlite3``, shared by every tern process on the state
directory: the daemon, a ``tern run`` on a terminal, and the ``tern approvals``/
``approve``/``deny`` commands. With ``[state] store = "postgres"`` it is the tables
``approval_requests`` and ``approval_rules``, shared by every node. A decision is one
``UPDATE ... WHERE state = 'pending'``, so two people answering at once cannot both win
(the second is told the request is closed). The process whose call waits wakes at once
when the decision is made in it (the HTTP API, an MCP elicitation, an A2A reply); when
another node made it, at its NOTIFY on ``tern_approvals`` (a look every
``FALLBACK_POLL_SECS`` covers a lost one); when another process on the SQLite file made
it, within ``POLL_SECS``. The SQL is written once for both engines (``kernel.sql``).

A request is pending until approved, denied, or expired (``approval_timeout_secs``; an
expired request is a denial). An agent has at most ``max_pending_per_agent`` requests
waiting; more are denied at once. A decision is for this call (``once``), for this agent
and tool from now on (``always``), or for these exact arguments from now on (``args``);
the last two persist as rules, read by every node at each call. Requests whose waiter
is gone are expired: on SQLite those of a process that no longer runs, when the next
tern opens the file; on PostgreSQL those that their node stopped marking alive for
``lease_secs`` (a killed node), by the sweep every node runs. Arguments are kept
redacted and whole, as their RFC 8785 bytes (a call whose arguments pass
``MAX_ARGUMENT_BYTES`` is refused, not cut); every view shows their ``args_digest`` and
an approval that carries it is refused when it names other bytes, so a person approves
what they could read whole. The ``args`` rule matches the digest of the arguments
before redaction (``audit.digest``), never their text. Every
request and decision is an audit record (who decided, through which channel) and an
event (``approval_requested``, ``approval_resolved``).

A request may carry a *form* (an MCP server's question, ``kernel.elicitation``): then
approving it takes an answer, checked against the form (``kernel.forms``) before the
request closes, so a wrong answer leaves it pending; denying it declines, or cancels.
The answer is kept only until the waiting process takes it (``take_answer``): never
in events or the audit log, which records its digest.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

import msgspec
import trio

from runtime.errors import ApprovalClosed, ApprovalMismatch, StorageError, UnknownApproval, UsageError
from runtime.kernel.sql import PgSql, SqliteSql
from runtime.log import get_logger
from runtime.config.keys import OWNER_NAMES
from runtime.ports import Approval, Ask, Caller
from runtime.wire.jcs import CanonicalError, canonicalize

__all__ = ["Approvals", "SCOPES", "POLL_SECS", "CHANNEL", "args_digest", "same_digest", "MAX_ARGUMENT_BYTES"]

log = get_logger("approvals")

SCOPES = ("once", "always", "args")
POLL_SECS = 0.2  # SQLite: how soon a decision made by another process is seen
FALLBACK_POLL_SECS = 3.0  # PostgreSQL: how soon it is seen when its NOTIFY was lost
CHANNEL = "tern_approvals"  # NOTIFY of a decision; the payload is the request's id
ORPHANED = "tern stopped while it waited"
#: The longest (redacted, canonical) arguments a request keeps, whole; a call with longer ones
#: that needs a person is refused with a sentence, never cut. A tenth of the largest JSON
#: message tern reads at all (``wire.framing.MAX_MESSAGE_BYTES``, the default ``[server]
#: max_body_bytes``: no caller's arguments pass those), and a page a person can still read.
MAX_ARGUMENT_BYTES = 1024 * 1024
LIST_LIMIT = 500
EVENT_ARGUMENT_BYTES = 16 * 1024  # longer arguments are named by digest alone in events

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id TEXT PRIMARY KEY, agent TEXT NOT NULL, tool TEXT NOT NULL, arguments TEXT NOT NULL,
    digest TEXT NOT NULL, caller TEXT NOT NULL, context_id TEXT NOT NULL, created REAL NOT NULL,
    expires REAL NOT NULL, state TEXT NOT NULL, scope TEXT NOT NULL DEFAULT '',
    decided_by TEXT NOT NULL DEFAULT '', channel TEXT NOT NULL DEFAULT '', reason TEXT NOT NULL DEFAULT '',
    decided_at REAL NOT NULL DEFAULT 0, owner TEXT NOT NULL, form TEXT NOT NULL DEFAULT '',
    answer TEXT NOT NULL DEFAULT '', key_name TEXT NOT NULL DEFAULT 'admin', origin TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS requests_pending ON requests (state, agent);
"""
_INDEXES = "CREATE INDEX IF NOT EXISTS requests_by_key ON requests (key_name, state, created);"
#: The rules table: ``caller`` is the key a rule applies to ('' for everyone), ``made_by`` the
#: key that made it. A file made before rules had callers is moved over (``_open_sqlite``).
_RULES = """
CREATE TABLE IF NOT EXISTS rules (
    agent TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL, decision TEXT NOT NULL,
    created REAL NOT NULL, decided_by TEXT NOT NULL, caller TEXT NOT NULL DEFAULT '',
    made_by TEXT NOT NULL DEFAULT '', PRIMARY KEY (agent, tool, digest, caller));
"""
#: PostgreSQL (component "approvals"): append steps, never edit a shipped one. ``seen``: the
#: waiting node marks its requests alive (``sweep``).
PG_STEPS = ["""
CREATE TABLE approval_requests (
    id text PRIMARY KEY, agent text NOT NULL, tool text NOT NULL, arguments text NOT NULL,
    digest text NOT NULL, caller text NOT NULL, context_id text NOT NULL, created double precision NOT NULL,
    expires double precision NOT NULL, state text NOT NULL, scope text NOT NULL DEFAULT '',
    decided_by text NOT NULL DEFAULT '', channel text NOT NULL DEFAULT '', reason text NOT NULL DEFAULT '',
    decided_at double precision NOT NULL DEFAULT 0, owner text NOT NULL, form text NOT NULL DEFAULT '',
    answer text NOT NULL DEFAULT '', key_name text NOT NULL DEFAULT 'admin', seen timestamptz NOT NULL DEFAULT now());
CREATE INDEX approval_requests_pending ON approval_requests (state, agent);
CREATE TABLE approval_rules (
    agent text NOT NULL, tool text NOT NULL, digest text NOT NULL, decision text NOT NULL,
    created double precision NOT NULL, decided_by text NOT NULL, PRIMARY KEY (agent, tool, digest));
""", """
ALTER TABLE approval_requests ADD COLUMN origin text NOT NULL DEFAULT '';
CREATE INDEX approval_requests_by_key ON approval_requests (key_name, state, created);
ALTER TABLE approval_rules ADD COLUMN caller text NOT NULL DEFAULT '';
ALTER TABLE approval_rules ADD COLUMN made_by text NOT NULL DEFAULT '';
ALTER TABLE approval_rules DROP CONSTRAINT approval_rules_pkey;
ALTER TABLE approval_rules ADD PRIMARY KEY (agent, tool, digest, caller);
"""]
_COLUMNS = ("id, agent, tool, arguments, caller, context_id, created, expires, state, scope, decided_by, channel, "
            "reason, decided_at, form, key_name, origin")
# Columns a file made by an older tern lacks (and their
# defaults: a request made before keys had names is the admin's).
_ADDED = {"form": "''", "answer": "''", "key_name": "'admin'", "origin": "''"}
_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder(order="sorted").encode


def _open_sqlite(path: Path | None) -> sqlite3.Connection:
    """The state directory's file (a file made by an older tern gets the columns it
    lacks), or a private in-memory one."""
    from runtime.storage import open_db

    if path is None:
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.executescript(_SCHEMA + _INDEXES + _RULES)
        return db
    db = open_db(path, _SCHEMA, timeout=5.0, isolation_level=None)
    have = {row[1] for row in db.execute("PRAGMA table_info(requests)")}
    for column, default in _ADDED.items():
        if column not in have:
            db.execute(f"ALTER TABLE requests ADD COLUMN {column} TEXT NOT NULL DEFAULT {default}")
    db.executescript(_INDEXES)
    rules = {row[1] for row in db.execute("PRAGMA table_info(rules)")}
    if rules and "caller" not in rules:  # rules made before they had callers: everyone's, as they were
        db.executescript("BEGIN; ALTER TABLE rules RENAME TO rules_v1;" + _RULES +
                         "INSERT INTO rules (agent, tool, digest, decision, created, decided_by, caller, made_by) "
                         "SELECT agent, tool, digest, decision, created, decided_by, '', decided_by FROM rules_v1; "
                         "DROP TABLE rules_v1; COMMIT;")
    else:
        db.executescript(_RULES)
    return db


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
    """The approval requests of one state directory, or of every node on one PostgreSQL
    database (``db``): ``runtime.ports.ApprovalPort``."""

    def __init__(self, path: str | Path | None, *, timeout_secs: float = 300.0, max_pending_per_agent: int = 5,
                 audit: Any = None, publish: Callable[[str, dict[str, Any]], None] | None = None,
                 redact: Callable[[Any], Any] | None = None, clock: Callable[[], float] = time.time,
                 db: Any = None, listener: Any = None, node_id: str = "", lease_secs: float = 15.0,
                 max_pending_per_caller: int = 10, max_kept_per_caller: int = 1000, retention_days: float = 30.0,
                 self_approval: Callable[[str], bool] | None = None) -> None:
        """``self_approval(origin)``: whether a caller without the scope ``approvals`` may
        answer its own run's request when that run came in through ``origin`` (``a2a``:
        ``[a2a] caller_may_approve``; ``mcp``: ``[mcp_server] caller_may_approve``)."""
        self.path = Path(path) if path else None
        self.timeout_secs = timeout_secs
        self.max_pending = max_pending_per_agent
        self.max_pending_per_caller = max_pending_per_caller
        self.max_kept_per_caller = max_kept_per_caller
        self.retention_secs = retention_days * 86400
        self.self_approval = self_approval or (lambda origin: False)
        self.audit = audit
        self.publish = publish
        self.redact = redact or (lambda value: value)
        self.clock = clock
        self.observers: list[Callable[[str], None]] = []  # (outcome): metrics
        #: Whom to tell while a tool call waits, besides its caller (``kernel.notify``): an
        #: ``Ask`` started beside the caller's own, cancelled by the decision like it.
        self.notify: Ask | None = None
        self.listener = listener
        self.lease_secs = lease_secs
        self._waiters: dict[str, trio.Event] = {}  # set when decided in this process
        self._nudges: dict[str, trio.Event] = {}  # set when another node may have decided
        self._decided_here: set[str] = set()
        self._pending = 0  # PostgreSQL: the count of the last sweep (pending_count)
        if db is not None:
            self._sql: Any = PgSql(db)
            self._requests, self._rules = "approval_requests", "approval_rules"
            self.owner = node_id or f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
            self.poll_secs = FALLBACK_POLL_SECS
            return
        self._sql = SqliteSql(_open_sqlite(self.path))
        self._requests, self._rules = "requests", "rules"
        self.owner = _process_token(os.getpid()) or f"{os.getpid()}:"
        self.poll_secs = POLL_SECS
        self.expire_orphans()

    def close(self) -> None:
        if isinstance(self._sql, SqliteSql):
            self._sql.db.close()

    async def start(self) -> None:
        """PostgreSQL: create or update the tables (at boot, once the database is open)."""
        if isinstance(self._sql, PgSql):
            await self._sql.db.migrate("approvals", PG_STEPS)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """PostgreSQL: ``start``, follow the other nodes' decisions, and
        every ``lease_secs / 3`` mark this node's waiting requests alive and expire those
        whose node stopped marking its own (killed: nobody waits for them). SQLite: nothing
        to run (other processes are found gone at open, ``expire_orphans``)."""
        if not isinstance(self._sql, PgSql):
            task_status.started()
            return
        await self.start()
        unfollow = self.listener.follow(CHANNEL, self._heard) if self.listener is not None else None
        task_status.started()
        try:
            while True:
                try:
                    await self.sweep()
                except StorageError:
                    pass  # the database is away (the pool says so once): the next round retries
                await trio.sleep(self.lease_secs / 3)
        finally:
            if unfollow is not None:
                unfollow()

    def _heard(self, payload: str | None) -> None:
        """A decision on another node (``None``: maybe missed some): wake the watchers."""
        if payload is None:
            for nudge in self._nudges.values():
                nudge.set()
        elif (nudge := self._nudges.get(payload)) is not None:
            nudge.set()

    # --- reading ----------------------------------------------------------------------

    async def list(self, state: str | None = "pending", who: Caller | None = None) -> list[Approval]:
        """Requests, newest first (``state`` None: every state), at most ``LIST_LIMIT``;
        only those ``who`` may answer when given (see ``answerable``)."""
        clauses, params = (["state = ?"], [state]) if state else ([], [])
        if who is not None and not who.allows("approvals"):
            clauses.append("key_name = ?")
            params.append(who.name)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""

        def read(tx: Any) -> list[tuple]:
            self._expire_due(tx)
            return tx.execute(f"SELECT {_COLUMNS} FROM {self._requests} {where} ORDER BY created DESC "
                              f"LIMIT {LIST_LIMIT}", params).fetchall()

        return [_approval(row) for row in await self._sql.run(read, "the approval requests could not be read")]

    async def get(self, approval_id: str, who: Caller | None = None) -> Approval:
        """One request; ``UnknownApproval`` for an id that never was, or one ``who`` may
        not answer (the same error: no caller learns of another's)."""

        def read(tx: Any) -> tuple | None:
            self._expire_due(tx)
            return tx.execute(f"SELECT {_COLUMNS} FROM {self._requests} WHERE id = ?", (approval_id,)).fetchone()

        row = await self._sql.run(read, "the approval request could not be read")
        if row is None or who is not None and not answerable(who, row[-2]):
            raise UnknownApproval(f"no approval request has the id {approval_id!r} (see `tern approvals`)")
        return _approval(row)

    async def whole_arguments(self, approval_id: str, who: Caller | None = None) -> bytes:
        """A request's arguments as kept: the bytes its ``arguments_sha256`` is the digest
        of (a download, a page); ``UnknownApproval`` as ``get``."""
        await self.get(approval_id, who)
        row = await self._sql.run(lambda tx: tx.execute(f"SELECT arguments FROM {self._requests} WHERE id = ?",
                                                        (approval_id,)).fetchone(),
                                  "the approval request could not be read")
        if row is None:
            raise UnknownApproval(f"no approval request has the id {approval_id!r} (see `tern approvals`)")
        return row[0].encode()

    def pending_count(self) -> int:
        """Requests waiting (a gauge: read synchronously). SQLite: counted now; PostgreSQL:
        as the last sweep counted them (every ``lease_secs / 3``)."""
        if isinstance(self._sql, SqliteSql):
            return self._sql.run_sync(lambda tx: tx.execute(f"SELECT count(*) FROM {self._requests} "
                                                            "WHERE state = 'pending'").fetchone()[0],
                                      "the approval requests could not be counted")
        return self._pending

    async def remembered(self, agent: str, tool: str, digest: str, key: str = "admin") -> str | None:
        """A persisted decision (``always`` or ``args``) for this call by ``key``'s run:
        "allow", "deny" or None. Rules for everyone and rules for that key alone count;
        a deny among them wins (a caller's own yes never overrides another's no)."""
        same = OWNER_NAMES if key in OWNER_NAMES else (key, key)  # the owner is one caller by either name
        rows = await self._sql.run(lambda tx: tx.execute(
            f"SELECT decision FROM {self._rules} WHERE agent = ? AND tool = ? AND digest IN ('', ?) "
            "AND caller IN ('', ?, ?)", (agent, tool, digest, *same)).fetchall(),
            "the approval rules could not be read")
        decisions = {row[0] for row in rows}
        return "deny" if "deny" in decisions else "allow" if decisions else None

    # --- asking -----------------------------------------------------------------------

    async def request(self, agent: str, tool: str, arguments: Any, digest: str, *, caller: str = "",
                      context_id: str = "", reason: str = "", ask: Ask | None = None,
                      form: dict[str, Any] | None = None, key: str = "admin", origin: str = "",
                      bounded: bool = False, wait_secs: float = 0.0) -> Approval:
        """Open a request and wait for its end; returns it approved, denied or expired.
        ``ask`` (the caller's way to ask a person) runs meanwhile. If the waiting call
        is cancelled, the request is expired on the way out. ``form`` (checked by
        ``forms.check_form``) makes it a question: see ``take_answer``. ``key``: the
        key name whose run asks, ``origin`` the way it came in (see ``may_answer``). A key
        (``bounded``: not the owner's) has at most ``max_pending_per_caller`` requests waiting and keeps at most
        ``max_kept_per_caller`` decided ones (the oldest go); any decided request older
        than the retention goes too."""
        now = self.clock()
        approval_id = "ap_" + os.urandom(5).hex()
        shown, refused = _kept(self.redact(arguments))
        timeout = wait_secs if wait_secs > 0 else self.timeout_secs  # a rule's own wait, else the governance one
        expires = now + timeout

        def insert(tx: Any) -> str:
            waiting = tx.execute(f"SELECT count(*) FROM {self._requests} WHERE state = 'pending' AND agent = ?",
                                 (agent,)).fetchone()[0]
            if waiting >= self.max_pending:
                who = f"agent '{agent}'" if agent else "the operator"
                return (f"{who} already has {waiting} tool calls waiting for approval, the limit "
                        "([governance] max_pending_per_agent)")
            theirs = 0 if not bounded else tx.execute(
                f"SELECT count(*) FROM {self._requests} WHERE key_name = ? AND state = 'pending'", (key,)).fetchone()[0]
            if bounded and theirs >= self.max_pending_per_caller:
                return (f"the key {key!r} already has {theirs} tool calls waiting for approval, the limit "
                        "([governance] max_pending_per_caller)")
            tx.execute(f"INSERT INTO {self._requests} (id, agent, tool, arguments, digest, caller, context_id, "
                       "created, expires, state, owner, form, key_name, origin) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
                       (approval_id, agent, tool, shown, digest, caller, context_id, now, expires, self.owner,
                        msgspec.json.encode(form).decode() if form is not None else "", key, origin))  # in order
            self._prune(tx, key, now)
            return ""

        # a full disk or an unreachable database: no request, so no yes: the call is refused
        refused = refused or await self._sql.run(insert, "approval request not recorded")
        if refused:
            self._audit("approval_requested", agent=agent, tool=tool, caller=caller, key=key, outcome="denied",
                        reason=refused)
            for observe in self.observers:
                observe("refused")
            return Approval("", agent, tool, None, caller, context_id, now, now, state="denied", channel="policy",
                            reason=refused)
        woken = self._waiters[approval_id] = trio.Event()
        timer = trio.CancelScope()
        try:
            approval = await self.get(approval_id)
            self._audit("approval_requested", id=approval_id, agent=agent, tool=tool, caller=caller, key=key,
                        context_id=context_id, arguments=digest, reason=reason)
            self._event("approval_requested", approval)
            for observe in self.observers:
                observe("requested")
            with trio.move_on_after(timeout) as timer:
                async with trio.open_nursery() as nursery:
                    if ask is not None:
                        nursery.start_soon(self._ask, ask, approval)
                    if self.notify is not None and form is None:
                        nursery.start_soon(self._ask, self.notify, approval)
                    nursery.start_soon(self._watch, approval_id, woken)
                    await woken.wait()
                    nursery.cancel_scope.cancel()
        finally:
            del self._waiters[approval_id]
            with trio.CancelScope(shield=True):
                final = await self._finish(approval_id, timed_out=timer.cancelled_caught)
        return final

    async def _ask(self, ask: Ask, approval: Approval) -> None:
        try:
            await ask(approval)
        except Exception:  # a broken channel must not fail the call: the others still can answer
            log.warning("asking for approval %s failed", approval.id, exc_info=True)

    async def _watch(self, approval_id: str, woken: trio.Event) -> None:
        """Wake the waiter when another process or node decides (or the row vanishes):
        at its NOTIFY, or at the latest after ``poll_secs`` (a lost NOTIFY, a database
        that was away, another process on the SQLite file)."""
        try:
            while True:
                nudge = self._nudges[approval_id] = trio.Event()
                with trio.move_on_after(self.poll_secs):
                    await nudge.wait()
                try:
                    row = await self._sql.run(lambda tx: tx.execute(
                        f"SELECT state FROM {self._requests} WHERE id = ?", (approval_id,)).fetchone(),
                        "the approval request could not be read")
                except StorageError:
                    continue  # the database is away: the request waits on, the next look retries
                if row is None or row[0] != "pending":
                    woken.set()
                    return
        finally:
            self._nudges.pop(approval_id, None)

    async def _finish(self, approval_id: str, *, timed_out: bool) -> Approval:
        """After the wait: a request still pending expires (time ran out, or the caller
        left); one decided by another process is announced here. A store that cannot be
        reached now makes it an expiry here (no yes); the sweep expires the row later."""
        try:
            approval = await self.get(approval_id)
            if approval.state == "pending":
                reason = "nobody answered in time" if timed_out else "the caller stopped waiting"
                await self._sql.run(lambda tx: tx.execute(
                    f"UPDATE {self._requests} SET state = 'expired', reason = ?, decided_at = ? "
                    "WHERE id = ? AND state = 'pending'", (reason, self.clock(), approval_id)),
                    "the approval request could not be closed")
                approval = await self.get(approval_id)
                if approval.state == "expired":
                    self._audit("approval_resolved", id=approval_id, agent=approval.agent, tool=approval.tool,
                                outcome="expired", reason=reason)
                    self._event("approval_resolved", approval)
                    for observe in self.observers:
                        observe("expired")
                    return approval
        except UnknownApproval:  # the file was replaced under us: nobody said yes
            now = self.clock()
            return Approval(approval_id, "", "", None, "", "", now, now, state="expired", reason="the request vanished")
        except StorageError as exc:
            log.warning("approval %s: %s; the call is not approved", approval_id, exc)
            now = self.clock()
            return Approval(approval_id, "", "", None, "", "", now, now, state="expired", reason=str(exc))
        if approval_id in self._decided_here:
            self._decided_here.discard(approval_id)
        else:  # decided by another process: it wrote the audit record; tell our own subscribers
            self._event("approval_resolved", approval)
        return approval

    # --- deciding ---------------------------------------------------------------------

    async def decide(self, approval_id: str, approve: bool, *, scope: str = "once", reason: str = "",
                     by: str = "", channel: str = "", answer: dict[str, Any] | None = None,
                     cancel: bool = False, who: Caller | None = None, rule_for: str = "",
                     digest: str | None = None) -> Approval:
        """Approve or deny a pending request, first decision wins (one ``UPDATE ... WHERE
        state = 'pending'``, here or on any node). A form's approval carries ``answer``
        (its field values; UsageError if they do not fit the form, and it stays pending);
        its denial declines, or with ``cancel`` cancels. A tool call's approval may carry
        ``digest``, the ``arguments_sha256`` the person was shown: ``ApprovalMismatch``
        (and it stays pending) when it is not this request's (every tern view sends it).

        ``who`` must hold the scope ``approvals``, or be the key whose run waits with a
        config that lets such callers decide (``may_answer``; ``Forbidden`` otherwise). An
        ``always`` or ``args`` decision becomes a rule: for everyone when ``who`` holds
        ``approvals`` (or is None) and ``rule_for`` is not ``"caller"``, else for the
        waiting run's key alone. The rule records who made it."""
        if scope not in SCOPES:
            raise UsageError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
        if rule_for not in ("", "caller", "everyone"):
            raise UsageError(f"rule_for must be caller or everyone, not {rule_for!r}")
        current = await self.get(approval_id, who)  # UnknownApproval for another key's request
        if current.origin == "mcp-lock" and scope != "once":  # kernel.mcp_lock: a definition, approved once
            raise UsageError(f"approval {approval_id} approves MCP tool definitions for tern.lock: it is decided "
                             "once, not remembered")
        if who is not None and not self.may_answer(who, current):
            from runtime.errors import Forbidden

            switch = {"a2a": "[a2a] caller_may_approve", "mcp": "[mcp_server] caller_may_approve"}.get(current.origin)
            raise Forbidden(f"the key {who.name!r} may not answer approval {approval_id}: that needs the scope "
                            "'approvals'" + (f" (or {switch} = true, for a caller's own requests)" if switch else ""))
        everyone = who is None or who.allows("approvals")
        if rule_for == "everyone" and not everyone:
            from runtime.errors import Forbidden

            raise Forbidden(f"the key {who.name!r} may make rules for its own runs only: "  # type: ignore[union-attr]
                            "a rule for everyone needs the scope 'approvals'")
        applies_to = "" if everyone and rule_for != "caller" else current.key
        maker = who.name if who is not None else (by or "admin")
        reason = reason[:1000]
        result = self._form_result(current, approve, scope, answer, cancel)
        if approve and digest is not None and current.form is None and not same_digest(digest,
                                                                                       current.arguments_sha256):
            raise ApprovalMismatch(f"approval {approval_id} is for arguments with the digest "
                                   f"{current.arguments_sha256}, not {_shown_digest(digest)}: look at them again "
                                   f"(`tern approvals show {approval_id}`); nothing was approved")
        now = self.clock()
        state = "approved" if approve else "denied"

        def write(tx: Any) -> bool:
            if not tx.execute(f"UPDATE {self._requests} SET state = ?, scope = ?, decided_by = ?, channel = ?, "
                              "reason = ?, decided_at = ?, answer = ? WHERE id = ? AND state = 'pending' "
                              "AND expires > ?",
                              (state, scope, by[:200], channel[:64], reason, now,
                               _encode(result).decode() if result else "", approval_id, now)).rowcount:
                return False
            if scope != "once":
                digest = "" if scope == "always" else tx.execute(
                    f"SELECT digest FROM {self._requests} WHERE id = ?", (approval_id,)).fetchone()[0]
                tx.execute(f"INSERT INTO {self._rules} (agent, tool, digest, decision, created, decided_by, caller, "
                           "made_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent, tool, digest, caller) "
                           "DO UPDATE SET decision = excluded.decision, created = excluded.created, "
                           "decided_by = excluded.decided_by, made_by = excluded.made_by",
                           (current.agent, current.tool, digest, "allow" if approve else "deny", now, by[:200],
                            applies_to, maker[:200]))
            tx.notify(CHANNEL, approval_id)
            return True

        if not await self._sql.run(write, "the decision was not recorded"):
            current = await self.get(approval_id)  # expires one past its time on the way
            raise ApprovalClosed(f"approval {approval_id} is already {current.state}"
                                 f"{' by ' + current.decided_by if current.decided_by else ''}; it takes no decision")
        approval = await self.get(approval_id)
        extra: dict[str, Any] = {"answer": _digest(result)} if result else {}
        if who is not None:
            extra["key"] = who.name
        if scope != "once":
            extra["rule_for"] = applies_to or "everyone"
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

    @staticmethod
    def _form_result(current: Approval, approve: bool, scope: str, answer: dict[str, Any] | None,
                     cancel: bool) -> dict[str, Any] | None:
        """What a form's server gets for this decision (checked now, so a wrong answer
        leaves the request pending); None for a tool call, which takes no answer."""
        approval_id = current.id
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

    async def take_answer(self, approval_id: str) -> dict[str, Any] | None:
        """A decided form's answer (``{"action": ...}``), once: it is wiped as it is read."""

        def take(tx: Any) -> str | None:
            row = tx.execute(f"SELECT answer FROM {self._requests} WHERE id = ?", (approval_id,)).fetchone()
            if not row or not row[0]:
                return None
            wiped = tx.execute(f"UPDATE {self._requests} SET answer = '' WHERE id = ? AND answer = ?",
                               (approval_id, row[0])).rowcount
            return row[0] if wiped else None

        taken = await self._sql.run(take, "the answer could not be read")
        return _decode.decode(taken) if taken else None

    async def forget_rules(self, agent: str | None = None, tool: str | None = None,
                           caller: str | None = None) -> int:
        """Remove persisted decisions (all, or one agent's, one tool's, those for one key:
        ``caller``, "" for everyone's); how many went."""
        clauses, params = [], []
        for column, value in (("agent", agent), ("tool", tool), ("caller", caller)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return await self._sql.run(lambda tx: tx.execute(f"DELETE FROM {self._rules} {where}", params).rowcount,
                                   "the approval rules were not changed")

    async def rules(self) -> list[dict[str, Any]]:
        """Every persisted decision: for whom (``caller``: a key's name, or "everyone"), who
        made it (``made_by``, a key's name) and through what (``decided_by``)."""
        rows = await self._sql.run(lambda tx: tx.execute(
            f"SELECT agent, tool, digest, decision, created, decided_by, caller, made_by FROM {self._rules} "
            "ORDER BY created").fetchall(), "the approval rules could not be read")
        return [{"agent": a, "tool": t, "arguments": d or None, "decision": dec, "created": c, "decided_by": by,
                 "caller": caller or "everyone", "made_by": maker or by}
                for a, t, d, dec, c, by, caller, maker in rows]

    def may_answer(self, who: Caller, approval: Approval) -> bool:
        """The scope ``approvals``, or the waiting run's own key where its way in lets
        callers decide for themselves (``self_approval``)."""
        return who.allows("approvals") or (who.owns(approval.key) and self.self_approval(approval.origin))

    def _prune(self, tx: Any, key: str, now: float) -> None:
        """Bound what callers fill: decided requests past the retention go, and a key
        keeps its newest ``max_kept_per_caller`` decided ones."""
        tx.execute(f"DELETE FROM {self._requests} WHERE state != 'pending' AND answer = '' AND created < ?",
                   (now - self.retention_secs,))
        tx.execute(f"DELETE FROM {self._requests} WHERE key_name = ? AND state != 'pending' AND answer = '' "
                   f"AND id NOT IN (SELECT id FROM {self._requests} WHERE key_name = ? AND state != 'pending' "
                   "ORDER BY created DESC LIMIT ?)", (key, key, self.max_kept_per_caller))

    # --- housekeeping -----------------------------------------------------------------

    def expire_orphans(self) -> int:
        """SQLite: expire pending requests whose process is gone (found at open: nobody
        waits for them)."""

        def expire(tx: Any) -> int:
            owners = [row[0] for row in tx.execute("SELECT DISTINCT owner FROM requests WHERE state = 'pending' "
                                                   "OR answer != ''")]
            gone = 0
            for owner in owners:
                pid, _, _ = owner.partition(":")
                if owner == self.owner or (pid.isdigit() and _process_token(int(pid)) == owner):
                    continue
                tx.execute("UPDATE requests SET answer = '' WHERE owner = ?", (owner,))  # nobody takes it now
                gone += tx.execute("UPDATE requests SET state = 'expired', reason = ?, decided_at = ? "
                                   "WHERE owner = ? AND state = 'pending'",
                                   (ORPHANED, self.clock(), owner)).rowcount
            return gone

        gone = self._sql.run_sync(expire, "the approval requests could not be read")
        self._orphaned(gone)
        return gone

    async def sweep(self) -> int:
        """PostgreSQL, every ``lease_secs / 3`` on each node: mark this node's waiting
        requests alive, expire the pending ones nobody marked for ``lease_secs`` (their
        node is gone), wipe the answers left by such nodes, count what waits."""
        mine, lease, now = list(self._waiters), self.lease_secs, self.clock()

        def sweep(tx: Any) -> tuple[int, int]:
            if mine:
                tx.execute("UPDATE approval_requests SET seen = now() WHERE id = ANY(?)", (mine,))
            gone = tx.execute("UPDATE approval_requests SET state = 'expired', reason = ?, decided_at = ?, answer = '' "
                              "WHERE state = 'pending' AND seen < now() - make_interval(secs => ?)",
                              (ORPHANED, now, lease)).rowcount
            tx.execute("UPDATE approval_requests SET answer = '' WHERE answer != '' AND state != 'pending' "
                       "AND seen < now() - make_interval(secs => ?)", (2 * lease,))
            return gone, tx.execute("SELECT count(*) FROM approval_requests WHERE state = 'pending'").fetchone()[0]

        gone, self._pending = await self._sql.run(sweep, "the approval requests could not be swept")
        self._orphaned(gone)
        return gone

    def _orphaned(self, gone: int) -> None:
        if gone:
            log.warning("expired %d approval requests left pending by a tern that is no longer running", gone)
            self._audit("approval_resolved", outcome="expired", count=gone, reason=ORPHANED)

    def _expire_due(self, tx: Any) -> None:
        now = self.clock()
        tx.execute(f"UPDATE {self._requests} SET state = 'expired', reason = 'nobody answered in time', "
                   "decided_at = ? WHERE state = 'pending' AND expires <= ?", (now, now))

    def _audit(self, kind: str, **fields: Any) -> None:
        if self.audit is not None:
            self.audit.record(kind, **fields)

    def _event(self, kind: str, approval: Approval) -> None:
        """An event names the arguments by digest; it carries them only up to
        ``EVENT_ARGUMENT_BYTES`` (each subscriber's queue holds 256 events: the whole
        text is one API call away)."""
        if self.publish is not None:
            shown = msgspec.structs.asdict(approval)
            if approval.arguments_bytes > EVENT_ARGUMENT_BYTES:
                shown["arguments"] = None
            self.publish(kind, {"approval": shown})


def args_digest(arguments: Any) -> str:
    """``sha256:<hex>`` of the RFC 8785 bytes of ``arguments`` (redacted, as a request
    keeps them): what every view of an approval shows and what approving binds to; a
    signed link to an approval carries it. ``CanonicalError`` for a value JSON cannot
    write canonically (integers past 2**53, nesting past 64, lone surrogates)."""
    return "sha256:" + hashlib.sha256(canonicalize(arguments)).hexdigest()


def same_digest(given: str, digest: str) -> bool:
    """Whether ``given`` names ``digest`` (``sha256:`` may be left off, hex in any case)."""
    given = given.strip().lower()
    return bool(digest) and (given if given.startswith("sha256:") else "sha256:" + given) == digest


def _shown_digest(given: str) -> str:
    return repr(given[:80]) if len(given) > 80 else repr(given)


def _kept(arguments: Any) -> tuple[str, str]:
    """The arguments as a request keeps them (RFC 8785 text), or why they cannot be."""
    try:
        data = canonicalize(arguments)
    except CanonicalError as exc:
        return "", f"its arguments have no canonical JSON form to show a person ({exc})"
    if len(data) > MAX_ARGUMENT_BYTES:
        return "", (f"its arguments are {len(data):,} bytes, more than a person is shown whole for approval "
                    f"({MAX_ARGUMENT_BYTES:,})")
    return data.decode(), ""


def _digest(value: Any) -> str:
    from runtime.kernel.audit import digest

    return digest(value)


def answerable(who: Caller, key: str) -> bool:
    """Whether ``who`` may answer a request its key ``key``'s run made: its own, or any
    with the scope ``approvals`` (or ``admin``)."""
    return who.allows("approvals") or who.owns(key)


def _approval(row: tuple) -> Approval:
    (id_, agent, tool, arguments, caller, context_id, created, expires, state, scope, decided_by, channel, reason,
     decided_at, form, key, origin) = row
    data = arguments.encode()  # RFC 8785 bytes (a request made by an older tern: its own JSON, never matched)
    return Approval(id_, agent, tool, _decode.decode(data), caller, context_id, created, expires, state, scope,
                    decided_by, channel, reason, decided_at, _decode.decode(form) if form else None, key, origin,
                    "sha256:" + hashlib.sha256(data).hexdigest(), len(data))


def describe(approval: Approval, *, width: int = 200) -> str:
    """One line for a person: who wants to call what, with what (or who asks what), fit
    for a terminal (``log.preview``: peer text escaped, padding counted, the ends kept),
    with the digest and size of the whole arguments a tool call's approval binds to."""
    from runtime.log import clean, preview

    if approval.origin == "mcp-lock":
        from runtime.kernel.mcp_lock import describe_lock

        return clean(describe_lock(approval))
    if approval.form is not None:
        asked = preview(str(approval.form.get("message", "")), width)
        return f"{clean(approval.caller or 'an MCP server')} asks: {asked}"
    who = f"agent '{clean(approval.agent)}'" if approval.agent else "the operator"
    shown = _encode(approval.arguments).decode() if approval.arguments is not None else "{}"
    return f"{who} wants to call {clean(approval.tool)} {preview(shown, width)} ({whole(approval)})"


def whole(approval: Approval) -> str:
    """The arguments' size and digest, as every view names them."""
    return f"{approval.arguments_bytes:,} bytes, {approval.arguments_sha256}"


def remaining(approval: Approval, now: float | None = None) -> int:
    return max(0, math.ceil(approval.expires - (time.time() if now is None else now)))
