"""Who a caller is and what it may do: ``Caller``, the scopes, and the keys that grant them.

A key is compared as its SHA-256 digest against every configured key's digest with
``hmac.compare_digest``, all of them every time, so the time taken says nothing about
which key (if any) matched. ``api_key`` is the key named ``admin`` (every scope); with no
key configured tern's own OS user is ``local`` (every scope). A key with no ``scopes``
may message every agent and use its own tasks: ``message`` and ``tasks``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache

from runtime.errors import ConfigError

__all__ = ["Caller", "OWNER_NAMES", "SCOPES", "DEFAULT_SCOPES", "ADMIN", "LOCAL", "KeyTable", "digest", "NAME_PATTERN"]

SCOPES = ("message", "tasks", "approvals", "mcp", "metrics", "audit", "events", "card", "admin")
DEFAULT_SCOPES = frozenset({"message", "tasks"})
NAME_PATTERN = re.compile(r"[a-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling, made once at each way in (an HTTP key, the owner, a trigger, an MCP
    client of ``tern mcp``...) and carried through every kernel call: the key's name
    (never the key), its scopes, the agents ``message`` lets it reach (None: every agent),
    ``way`` (how it came in: ``api``, ``a2a``, ``mcp``, ``hook``, ``trigger``, ``cli``...),
    ``via`` (who acts for it, outermost first: ``("trigger:daily", "agent:bot")``) and the
    budgets that are its own (``tokens_per_hour``, ``requests_per_minute``; 0: none).

    Whatever acts for a caller (an agent's ``agent_send``, a trigger's run) is this same
    caller with one more ``via``: never more than it. Its rights are decided by the
    methods below and nowhere else (``kernel.door`` enforces them)."""

    name: str  # key name; "admin" for api_key; "local" for tern's own user / local-token
    scopes: frozenset[str]
    agents: frozenset[str] | None = None
    way: str = ""
    via: tuple[str, ...] = ()
    tokens_per_hour: int = 0
    requests_per_minute: int = 0

    @property
    def is_owner(self) -> bool:
        """Every right: the api_key, tern's own user, a trigger acting for the owner."""
        return "admin" in self.scopes

    @property
    def label(self) -> str:
        """The name audit records and events give this caller: the key, and who acted for it."""
        return " via ".join((self.name, *self.via)) if self.via else self.name

    def allows(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes

    def reaches(self, agent: str) -> bool:
        """The one rule for reaching an agent, whatever the way in (API, A2A, MCP, webhooks,
        ``agent_send``, triggers): the agent is among the key's ``agents``. Which scope a
        way in needs (``message`` for the API and A2A, ``mcp`` for ``POST /mcp``) is its
        route's check; this is what no way in can widen."""
        return "admin" in self.scopes or self.agents is None or agent in self.agents

    def may_message(self, agent: str) -> bool:
        """The scope ``message`` and the agent: what the API's and A2A's sends need."""
        return self.allows("message") and self.reaches(agent)

    def may_call_tools(self) -> bool:
        """Whether a kernel tool may be called directly, outside an agent (an exposed tool
        over MCP, a preset of one): not by a key limited to some agents, whose reach ends
        at those agents."""
        return "admin" in self.scopes or self.agents is None

    def owns(self, owner: str) -> bool:
        """Whether a thing recorded as ``owner``'s is this caller's to see: its own, or
        anything for the admin scope."""
        return "admin" in self.scopes or hmac.compare_digest(owner.encode(), self.name.encode())

    def entering(self, way: str) -> Caller:
        """This caller as the way in names it (``a2a``, ``mcp``...): made once per key and
        way (``_entered``), not per request (a dataclass copy is microseconds)."""
        return self if self.way == way else _entered(self, way)

    def acting(self, actor: str) -> Caller:
        """This caller, with ``actor`` (``agent:bot``, ``trigger:daily``) acting for it."""
        return replace(self, via=(*self.via, actor))


@lru_cache(maxsize=1024)  # configured keys times ways in: bounded; a reload's new keys push old ones out
def _entered(caller: Caller, way: str) -> Caller:
    return replace(caller, way=way)


ADMIN = Caller("admin", frozenset({"admin"}))
#: The owner's two names: the api_key's (``admin``) and tern's own OS user's (``local``). No
#: named key may take either; what they own is the owner's, outside any per-key share.
OWNER_NAMES = ("admin", "local")
LOCAL = Caller("local", frozenset({"admin"}))


def digest(key: str | bytes) -> bytes:
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).digest()


def _caller_of(name: str, scopes: list[str], agents: list[str], tokens_per_hour: int = 0,
               requests_per_minute: int = 0) -> Caller:
    return Caller(name, frozenset(scopes) if scopes else DEFAULT_SCOPES,
                  None if not agents or "*" in agents else frozenset(agents),
                  tokens_per_hour=tokens_per_hour, requests_per_minute=requests_per_minute)


class KeyTable:
    """Every key this tern accepts, as digests: ``api_key`` (admin), ``[[server.keys]]``
    and the keys ``tern keys add`` stored. Built at boot and on reload."""

    def __init__(self) -> None:
        self._digests: list[tuple[bytes, Caller]] = []
        self._subjects: dict[str, Caller] = {}
        self._names: dict[str, Caller] = {}
        self.has_api_key = False  # the owner's own key (api_key): without it, the owner is tern's OS user

    def __len__(self) -> int:
        return len(self._digests)

    def add(self, key_digest: bytes, caller: Caller) -> None:
        self._digests.append((key_digest, caller))
        self._names.setdefault(caller.name, caller)

    def by_name(self, name: str) -> Caller | None:
        """The caller a key's name stands for (a trigger's ``run_as``), or None."""
        return self._names.get(name)

    def add_subject(self, subject: str, caller: Caller) -> None:
        self._subjects[subject] = caller

    def match(self, presented: bytes) -> Caller | None:
        """The caller whose key this is: one SHA-256 and one comparison per configured key,
        whichever matches (constant time in which key)."""
        wanted = digest(presented)
        found = None
        for key_digest, caller in self._digests:
            if hmac.compare_digest(wanted, key_digest) and found is None:
                found = caller
        return found

    def by_subject(self, subject: str) -> Caller | None:
        return self._subjects.get(subject)

    @classmethod
    def build(cls, api_key: str, keys: list, stored: list | None = None) -> KeyTable:
        """From the config's ``api_key`` (already read from its variable), its
        ``[[server.keys]]`` entries and the stored ``(name, sha256_hex, scopes, agents)``
        rows. A ``key_env`` that is not set is a ``ConfigError`` naming it."""
        from runtime.log import register_secret

        table = cls()
        if api_key:
            table.add(digest(api_key), ADMIN)
            table.has_api_key = True
        for entry in keys:
            caller = _caller_of(entry.name, entry.scopes, entry.agents, entry.tokens_per_hour,
                                entry.requests_per_minute)
            if entry.key_env:
                value = os.environ.get(entry.key_env, "")
                if not value:
                    raise ConfigError(f"server.keys {entry.name!r}: key_env names {entry.key_env}, "
                                      "which is not set")
                register_secret(value)  # masked in every log line, should one ever quote it
                table.add(digest(value), caller)
            elif entry.key:
                register_secret(entry.key)
                table.add(digest(entry.key), caller)
            elif entry.key_sha256:
                table.add(bytes.fromhex(entry.key_sha256), caller)
            if entry.tls_subject:
                table.add_subject(entry.tls_subject, caller)
            table._names.setdefault(entry.name, caller)
        for name, hexdigest, scopes, agents in stored or []:
            table.add(bytes.fromhex(hexdigest), _caller_of(name, scopes, agents))
        return table
