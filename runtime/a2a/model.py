"""The A2A task model tern works in, whatever dialect a peer speaks.

Parts are kept in the 1.0 flat form (exactly one of ``text``, ``raw`` (base64),
``url``, ``data``, plus optional ``mediaType``, ``filename``, ``metadata``); states
and roles in lowercase 0.3 words. ``dialects.py`` converts to and from the wire.
Sans-IO: no trio, no HTTP.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

import msgspec

__all__ = ["State", "TERMINAL", "INTERRUPTED", "Message", "Artifact", "Task", "StatusEvent", "ArtifactEvent",
           "Event", "text_of", "now_iso", "new_id"]

State = Literal["submitted", "working", "input-required", "completed", "canceled", "failed", "rejected",
                "auth-required", "unknown"]
TERMINAL = frozenset({"completed", "canceled", "failed", "rejected"})
#: The states where a task waits for its client: a blocking send returns there too.
INTERRUPTED = frozenset({"input-required", "auth-required"})


def new_id() -> str:
    return str(uuid.uuid4())


def now_iso(when: float | None = None) -> str:
    """ISO-8601 UTC with milliseconds and ``Z``, as the spec prefers."""
    seconds = time.time() if when is None else when
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


class Message(msgspec.Struct, kw_only=True):
    role: Literal["user", "agent"]
    parts: list[dict[str, Any]]
    message_id: str = msgspec.field(default_factory=new_id)
    context_id: str | None = None
    task_id: str | None = None
    reference_task_ids: list[str] = []
    metadata: dict[str, Any] | None = None


class Artifact(msgspec.Struct, kw_only=True):
    parts: list[dict[str, Any]]
    artifact_id: str = msgspec.field(default_factory=new_id)
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None


class Task(msgspec.Struct, kw_only=True):
    """One task, owned by the engine (mutable: its state moves)."""

    id: str
    context_id: str
    agent: str
    state: str = "submitted"
    status_message: Message | None = None
    timestamp: float = msgspec.field(default_factory=time.time)
    history: list[Message] = []
    artifacts: list[Artifact] = []
    metadata: dict[str, Any] | None = None
    created: float = msgspec.field(default_factory=time.time)
    dialect: str = ""  # the dialect it was created in: tasks/get answers 0.1 tasks in 0.1
    reply: Message | None = None  # the agent answered with a Message, not a task result
    asking: bool = False  # input-required is a question of work still running (see TaskReport.ask)
    owner: str = "admin"  # the key name that created it (docs/security-model.md); tasks stored before keys: admin
    version: int = 0  # [state] store = "postgres": the shared row's version of this snapshot (its events' last seq)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


class StatusEvent(msgspec.Struct, kw_only=True):
    task_id: str
    context_id: str
    state: str
    message: Message | None = None
    timestamp: float = msgspec.field(default_factory=time.time)
    final: bool = False


class ArtifactEvent(msgspec.Struct, kw_only=True):
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = True
    index: int = 0  # the artifact's position in the task (0.1 names artifacts by it)


Event = StatusEvent | ArtifactEvent


def text_of(parts: list[dict[str, Any]]) -> str:
    """The text an agent reads from a message: text parts joined; data parts as JSON;
    files named (tern agents take text)."""
    pieces = []
    for part in parts:
        if "text" in part:
            pieces.append(str(part["text"]))
        elif "data" in part:
            pieces.append(msgspec.json.encode(part["data"]).decode())
        elif "url" in part or "raw" in part:
            pieces.append(f"[file {part.get('filename') or part.get('url') or 'attached'}"
                          f"{', ' + part['mediaType'] if part.get('mediaType') else ''}]")
    return "\n".join(pieces)
