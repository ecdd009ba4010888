"""One-time approve and deny links for a pending approval (``[[governance.notify]]``).

A link is ``{public_url}/approve/{token}``; the token is the request's id, the decision
it may make (``a`` approve, ``d`` deny), the request's expiry, the notify channel that
carried it, and an HMAC-SHA256 over those and the SHA-256 of the request's arguments
(``Approval.arguments_sha256``: ``approvals.args_digest``, what every view shows), keyed
by ``<state dir>/approval-links.key`` (32 random bytes, 0600, made at first use the way
the audit key is). So a token cannot be forged, moved to another request, nor kept for
the same request once its arguments differ; it dies with the request (expiry, or any
decision anywhere), and it is spent at its first use: spent tokens are remembered until
their request expires (in this process: the daemon serves the links, and a request it
did not decide is closed anyway by its own first decision).

A deny link can only deny; an approve link approves, or denies (the safe way). Every use
is audited: a decision as ``approval_resolved`` with ``decided_by: notify:<channel>`` and
``channel: link``, a refused link as ``approval_link_refused`` with the reason.

The arguments' hash is over the arguments as the request keeps and shows them (redacted,
bounded): what the page shows is what is hashed and approved, and a secret in them is
never the input of a published hash. It is RFC 8785 JSON (``wire.jcs``), so anyone can
recompute it from the JSON shown.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


from runtime.errors import ApprovalClosed, TernError, UnknownApproval
from runtime.log import get_logger
from runtime.ports import Approval

__all__ = ["ApprovalLinks", "LinkRefused", "KEY_FILE"]

log = get_logger("approval_links")

KEY_FILE = "approval-links.key"
MAX_SPENT = 10_000  # spent tokens remembered at once (each only until its request's expiry)
_TOKEN = re.compile(r"(ap_[0-9a-f]{1,64})\.([ad])\.([0-9]{1,16})\.([a-z0-9_-]{1,64})\.([A-Za-z0-9_-]{43})")
_DECISIONS = {"a": "approve", "d": "deny"}


class LinkRefused(TernError):
    """A link that does not decide: forged, for another request, expired, spent, or asked
    to do what it may not. The message is for the person holding it."""

    http_status = 403


class ApprovalLinks:
    """Mint and redeem the links of one state directory's approvals."""

    def __init__(self, key_path: Path | None, approvals: Any, *, clock: Callable[[], float] = time.time) -> None:
        """``key_path`` None: a key for this process only (no state directory)."""
        self.key_path = key_path
        self.approvals = approvals
        self.clock = clock
        self._key: bytes | None = None
        self._spent: dict[str, float] = {}  # MAC -> its request's expiry

    def key(self) -> bytes:
        """The links' key; ``AuditError`` (naming the file) when it may be known to others."""
        if self._key is None:
            if self.key_path is None:
                self._key = os.urandom(32)
            else:
                from runtime.kernel.audit import load_key

                self._key = load_key(self.key_path, create=True, what="approval links' key")
        return self._key  # type: ignore[return-value]

    def _mac(self, approval_id: str, decision: str, expires_ms: str, channel: str, digest: str) -> str:
        message = "\n".join(("tern approval link v1", approval_id, decision, expires_ms, channel, digest)).encode()
        mac = hmac.new(self.key(), message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def mint(self, approval: Approval, decision: str, channel: str) -> str:
        """The token of a link that may ``decision`` ("approve" or "deny") ``approval``."""
        letter = "a" if decision == "approve" else "d"
        expires_ms = str(round(approval.expires * 1000))
        mac = self._mac(approval.id, letter, expires_ms, channel, approval.arguments_sha256)
        return f"{approval.id}.{letter}.{expires_ms}.{channel}.{mac}"

    async def open(self, token: str) -> tuple[Approval, str, str]:
        """The request a token names, the decision it carries and its channel, after every
        check but the spending: for the page a GET shows. ``LinkRefused`` otherwise."""
        approval, decision, channel, _ = await self._check(token)
        return approval, decision, channel

    async def use(self, token: str, decision: str = "", *, client: str = "") -> Approval:
        """Spend the token: decide its request (``decision`` "" is the token's own; a deny
        token may only deny). ``LinkRefused`` (audited) when it may not."""
        try:
            approval, allowed, channel, mac = await self._check(token)
            wanted = decision or allowed
            if wanted not in ("approve", "deny"):
                raise LinkRefused("a link decides approve or deny")
            if wanted == "approve" and allowed != "approve":
                raise LinkRefused("this is a deny link: it cannot approve")
            if mac in self._spent:  # spent by another request while this one looked (no await since)
                raise LinkRefused("this link was used already: a link works once")
            self._spend(mac, approval.expires)
            try:
                return await self.approvals.decide(approval.id, wanted == "approve", by=f"notify:{channel}",
                                                   channel="link", reason=f"one-time link from {client}"[:200])
            except ApprovalClosed as exc:
                raise LinkRefused(str(exc)) from None
        except LinkRefused as exc:
            self.approvals._audit("approval_link_refused", id=token.split(".", 1)[0][:80], outcome="refused",
                                  reason=str(exc)[:300], client=client)
            raise

    async def _check(self, token: str) -> tuple[Approval, str, str, str]:
        match = _TOKEN.fullmatch(token)
        if match is None:
            raise LinkRefused("this link is not valid")
        approval_id, letter, expires_ms, channel, mac = match.groups()
        try:
            approval = await self.approvals.get(approval_id)
        except UnknownApproval:
            raise LinkRefused("this link is not valid") from None
        try:
            expected = self._mac(approval_id, letter, str(round(approval.expires * 1000)), channel,
                                 approval.arguments_sha256)
        except TernError as exc:  # the key file is refused: the holder of a link is not told where it is
            log.error("approval links cannot be checked: %s", exc)
            raise LinkRefused("links cannot be checked on this tern now (its log says why)") from None
        if not hmac.compare_digest(expected, mac) or expires_ms != str(round(approval.expires * 1000)):
            raise LinkRefused("this link is not valid")
        now = self.clock()
        self._forget(now)
        if mac in self._spent:
            raise LinkRefused("this link was used already: a link works once")
        if approval.state == "expired" or approval.expires <= now:
            raise LinkRefused(f"this link expired with approval {approval_id}")
        if approval.state != "pending":
            by = f" by {approval.decided_by}" if approval.decided_by else ""
            raise LinkRefused(f"approval {approval_id} is already {approval.state}{by}")
        return approval, _DECISIONS[letter], channel, mac

    def _spend(self, mac: str, expires: float) -> None:
        if len(self._spent) >= MAX_SPENT:  # full of live tokens: the one expiring first goes
            del self._spent[min(self._spent, key=self._spent.__getitem__)]
        self._spent[mac] = expires

    def _forget(self, now: float) -> None:
        for mac in [m for m, expires in self._spent.items() if expires <= now]:
            del self._spent[mac]
