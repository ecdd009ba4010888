"""The three A2A dialects on the wire, to and from the model (sans-IO).

- ``0.1`` (OpenFang and the seed): parts carry ``type``, tasks ``sessionId``, states
  lowercase, status events ``{id, status, final}``.
- ``0.3``: ``kind`` on every object, ``contextId``/``messageId``, lowercase states,
  ``status-update``/``artifact-update`` events with ``final``.
- ``1.0``: no ``kind``, flat parts, ``ROLE_USER``, ``TASK_STATE_*``, results and
  stream events wrapped as ``{"task"|"message"|"statusUpdate"|"artifactUpdate": ...}``.

Parsing is lenient where dialects overlap (a part with ``kind`` or ``type`` or neither,
either role spelling), and strict where meaning would be lost: a part of unknown type,
a message without parts or with a bad role is :class:`BadMessage`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

from runtime.a2a.model import Artifact, ArtifactEvent, Message, StatusEvent, Task, now_iso
from runtime.errors import ProtocolError
from runtime.wire.limits import MAX_REFERENCES, check_id

__all__ = ["Dialect", "BadMessage", "parse_message", "render_task", "render_message", "render_event",
           "render_state", "parse_state", "parse_time", "render_artifact", "parse_task", "parse_event", "MAX_PARTS"]

Dialect = Literal["0.1", "0.3", "1.0"]
MAX_PARTS = 1000

_STATE_10 = {"submitted": "TASK_STATE_SUBMITTED", "working": "TASK_STATE_WORKING",
             "input-required": "TASK_STATE_INPUT_REQUIRED", "completed": "TASK_STATE_COMPLETED",
             "canceled": "TASK_STATE_CANCELED", "failed": "TASK_STATE_FAILED", "rejected": "TASK_STATE_REJECTED",
             "auth-required": "TASK_STATE_AUTH_REQUIRED", "unknown": "TASK_STATE_UNSPECIFIED"}
_STATE_FROM_10 = {v: k for k, v in _STATE_10.items()}
_STATE_FROM_10["TASK_STATE_CANCELLED"] = "canceled"  # the 0.3 proto's spelling
_ROLE_10 = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLE_FROM = {"user": "user", "agent": "agent", "ROLE_USER": "user", "ROLE_AGENT": "agent"}


class BadMessage(ProtocolError):
    """The message (or a part of it) cannot be understood; the text says what."""


# --- Parsing ------------------------------------------------------------------------------


def parse_message(obj: Any) -> Message:
    """A message in any dialect."""
    if not isinstance(obj, dict):
        raise BadMessage("message must be an object")
    role = _ROLE_FROM.get(obj.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise BadMessage(f"message.role must be user or agent (or ROLE_USER/ROLE_AGENT), got {obj.get('role')!r}")
    raw_parts = obj.get("parts", obj.get("content"))
    if not isinstance(raw_parts, list) or not raw_parts:
        raise BadMessage("message.parts must be a non-empty list")
    if len(raw_parts) > MAX_PARTS:
        raise BadMessage(f"message has {len(raw_parts)} parts (at most {MAX_PARTS})")
    parts = [parse_part(part, i) for i, part in enumerate(raw_parts)]
    message = Message(role=role, parts=parts)  # type: ignore[arg-type]
    for key, attr in (("messageId", "message_id"), ("contextId", "context_id"), ("taskId", "task_id")):
        value = obj.get(key)
        if value is not None:
            if not isinstance(value, str) or not value:
                raise BadMessage(f"message.{key} must be a non-empty string")
            setattr(message, attr, check_id(value, f"message.{key}", BadMessage))
    references = obj.get("referenceTaskIds")
    if isinstance(references, list):
        if len(references) > MAX_REFERENCES:
            raise BadMessage(f"message.referenceTaskIds has {len(references)} ids (at most {MAX_REFERENCES})")
        message.reference_task_ids = [check_id(str(t), "message.referenceTaskIds[]", BadMessage) for t in references]
    if isinstance(obj.get("metadata"), dict):
        message.metadata = obj["metadata"]
    return message


def parse_part(part: Any, index: int = 0) -> dict[str, Any]:
    """One part of any dialect, as a 1.0 flat part."""
    if not isinstance(part, dict):
        raise BadMessage(f"parts[{index}] must be an object")
    kind = part.get("kind", part.get("type"))
    out: dict[str, Any] = {}
    if kind in (None, "text") and "text" in part:
        if not isinstance(part["text"], str):
            raise BadMessage(f"parts[{index}].text must be a string")
        out["text"] = part["text"]
    elif kind in (None, "data") and "data" in part:
        out["data"] = part["data"]
    elif kind == "file" and isinstance(part.get("file"), dict):  # 0.1 / 0.3 file part
        file = part["file"]
        if isinstance(file.get("bytes"), str):
            out["raw"] = _checked_base64(file["bytes"], index)
        elif isinstance(file.get("uri"), str):
            out["url"] = file["uri"]
        else:
            raise BadMessage(f"parts[{index}].file needs bytes or uri")
        if file.get("mimeType"):
            out["mediaType"] = str(file["mimeType"])
        if file.get("name"):
            out["filename"] = str(file["name"])
    elif kind is None and ("raw" in part or "url" in part):  # 1.0 flat file part
        if "raw" in part:
            out["raw"] = _checked_base64(part["raw"], index)
        else:
            out["url"] = str(part["url"])
        for key in ("mediaType", "filename"):
            if part.get(key):
                out[key] = str(part[key])
    else:
        raise BadMessage(f"parts[{index}] is of a type tern does not know ({kind or 'no text, data, raw or url'})")
    if isinstance(part.get("metadata"), dict):
        out["metadata"] = part["metadata"]
    return out


def _checked_base64(value: Any, index: int) -> str:
    if not isinstance(value, str):
        raise BadMessage(f"parts[{index}]: file bytes must be a base64 string")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadMessage(f"parts[{index}]: file bytes are not valid base64") from None
    return value


def parse_time(value: Any) -> float:
    """An ISO-8601 timestamp (``...Z`` or with an offset) as epoch seconds; now if absent or bad."""
    import datetime
    import time

    if isinstance(value, str) and value:
        try:
            when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=datetime.timezone.utc)
            return when.timestamp()
        except ValueError:
            pass
    return time.time()


def parse_state(value: Any) -> str:
    if isinstance(value, str):
        if value in _STATE_FROM_10:
            return _STATE_FROM_10[value]
        if value in _STATE_10:
            return value
        if value == "cancelled":
            return "canceled"
    return "unknown"


def parse_task(obj: Any) -> Task:
    """A task a peer sent, in any dialect (for tern's client)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise BadMessage("a task needs an id")
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    task = Task(id=obj["id"], context_id=str(obj.get("contextId") or obj.get("sessionId") or ""), agent="",
                state=parse_state(status.get("state")), timestamp=parse_time(status.get("timestamp")))
    if isinstance(status.get("message"), dict):
        try:
            task.status_message = parse_message(status["message"])
        except BadMessage:
            pass
    for item in obj.get("history") or []:
        try:
            task.history.append(parse_message(item))
        except BadMessage:
            continue
    for item in obj.get("artifacts") or []:
        if isinstance(item, dict) and isinstance(item.get("parts"), list):
            parts = []
            for i, part in enumerate(item["parts"]):
                try:
                    parts.append(parse_part(part, i))
                except BadMessage:
                    continue
            artifact_id = item.get("artifactId") or (str(item["index"]) if "index" in item else "")
            task.artifacts.append(Artifact(parts=parts, artifact_id=str(artifact_id), name=item.get("name"),
                                           description=item.get("description")))
    return task


def parse_event(obj: Any) -> Task | Message | StatusEvent | ArtifactEvent | None:
    """One result or stream event from a peer in any dialect; None if unrecognised."""
    if not isinstance(obj, dict):
        return None
    for key in ("task", "message", "statusUpdate", "artifactUpdate"):  # 1.0 wrappers
        if key in obj and isinstance(obj[key], dict) and len(obj) == 1:
            obj = {**obj[key], "kind": {"task": "task", "message": "message", "statusUpdate": "status-update",
                                        "artifactUpdate": "artifact-update"}[key]}
            break
    kind = obj.get("kind")
    if kind == "message" or (kind is None and "role" in obj and "parts" in obj):
        return parse_message(obj)
    if kind == "status-update" or (kind is None and "status" in obj and "final" in obj):
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        message = None
        if isinstance(status.get("message"), dict):
            try:
                message = parse_message(status["message"])
            except BadMessage:
                message = None
        return StatusEvent(task_id=str(obj.get("taskId") or obj.get("id") or ""),
                           context_id=str(obj.get("contextId") or ""), state=parse_state(status.get("state")),
                           message=message, final=bool(obj.get("final")), timestamp=parse_time(status.get("timestamp")))
    if kind == "artifact-update" or (kind is None and "artifact" in obj):
        task = parse_task({"id": "x", "artifacts": [obj.get("artifact")]})
        if not task.artifacts:
            return None
        flags = obj if "append" in obj or "lastChunk" in obj else obj["artifact"]  # 0.1 keeps them inside
        return ArtifactEvent(task_id=str(obj.get("taskId") or obj.get("id") or ""),
                             context_id=str(obj.get("contextId") or ""), artifact=task.artifacts[0],
                             append=bool(flags.get("append")), last_chunk=bool(flags.get("lastChunk", True)),
                             index=index if isinstance(index := obj["artifact"].get("index"), int) else 0)
    if kind == "task" or "id" in obj:
        return parse_task(obj)
    return None


# --- Rendering ----------------------------------------------------------------------------


def render_state(state: str, dialect: Dialect) -> str:
    return _STATE_10.get(state, "TASK_STATE_UNSPECIFIED") if dialect == "1.0" else state


def render_part(part: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    if dialect == "1.0":
        return part
    key = "type" if dialect == "0.1" else "kind"
    if "text" in part:
        out: dict[str, Any] = {key: "text", "text": part["text"]}
    elif "data" in part:
        out = {key: "data", "data": part["data"]}
    else:
        file: dict[str, Any] = {"bytes": part["raw"]} if "raw" in part else {"uri": part.get("url", "")}
        if part.get("mediaType"):
            file["mimeType"] = part["mediaType"]
        if part.get("filename"):
            file["name"] = part["filename"]
        out = {key: "file", "file": file}
    if part.get("metadata"):
        out["metadata"] = part["metadata"]
    return out


def render_message(message: Message, dialect: Dialect) -> dict[str, Any]:
    parts = [render_part(p, dialect) for p in message.parts]
    if dialect == "0.1":
        out: dict[str, Any] = {"role": message.role, "parts": parts}
    else:
        out = {
            "messageId": message.message_id,
            "role": _ROLE_10[message.role] if dialect == "1.0" else message.role,
            "parts": parts,
        }
        if dialect == "0.3":
            out = {"kind": "message", **out}
        if message.context_id:
            out["contextId"] = message.context_id
        if message.task_id:
            out["taskId"] = message.task_id
        if message.reference_task_ids:
            out["referenceTaskIds"] = message.reference_task_ids
    if message.metadata:
        out["metadata"] = message.metadata
    return out


def render_artifact(artifact: Artifact, dialect: Dialect, index: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"parts": [render_part(p, dialect) for p in artifact.parts]}
    if dialect == "0.1":
        out["index"] = index
    else:
        out = {"artifactId": artifact.artifact_id, **out}
    if artifact.name:
        out["name"] = artifact.name
    if artifact.description:
        out["description"] = artifact.description
    if artifact.metadata:
        out["metadata"] = artifact.metadata
    return out


def _status(state: str, message: Message | None, timestamp: float, dialect: Dialect) -> dict[str, Any]:
    status: dict[str, Any] = {"state": render_state(state, dialect), "timestamp": now_iso(timestamp)}
    if message is not None:
        status["message"] = render_message(message, dialect)
    return status


def render_task(
    task: Task, dialect: Dialect, *, history_length: int | None = None, include_artifacts: bool = True
) -> dict[str, Any]:
    """A task; ``history_length`` None = all, 0 = none, n = the last n messages."""
    history = task.history if history_length is None else (task.history[-history_length:] if history_length > 0 else [])
    out: dict[str, Any] = {"id": task.id}
    if dialect == "0.1":
        out["sessionId"] = task.context_id
    else:
        out["contextId"] = task.context_id
    out["status"] = _status(task.state, task.status_message, task.timestamp, dialect)
    if include_artifacts and task.artifacts:
        out["artifacts"] = [render_artifact(a, dialect, i) for i, a in enumerate(task.artifacts)]
    if history:
        out["history"] = [render_message(m, dialect) for m in history]
    if task.metadata:
        out["metadata"] = task.metadata
    if dialect == "0.3":
        out = {"kind": "task", **out}
    return out


def render_event(event: StatusEvent | ArtifactEvent, dialect: Dialect) -> dict[str, Any]:
    """A stream event. 1.0 has no ``final`` (the stream's end says it)."""
    if isinstance(event, StatusEvent):
        status = _status(event.state, event.message, event.timestamp, dialect)
        if dialect == "0.1":
            return {"id": event.task_id, "status": status, "final": event.final}
        if dialect == "0.3":
            return {
                "kind": "status-update",
                "taskId": event.task_id,
                "contextId": event.context_id,
                "status": status,
                "final": event.final,
            }
        return {"statusUpdate": {"taskId": event.task_id, "contextId": event.context_id, "status": status}}
    artifact = render_artifact(event.artifact, dialect, event.index)
    if dialect == "0.1":
        return {"id": event.task_id, "artifact": {**artifact, "append": event.append, "lastChunk": event.last_chunk}}
    body = {
        "taskId": event.task_id,
        "contextId": event.context_id,
        "artifact": artifact,
        "append": event.append,
        "lastChunk": event.last_chunk,
    }
    if dialect == "0.3":
        return {"kind": "artifact-update", **body}
    return {"artifactUpdate": body}


def wrap_result(obj: dict[str, Any], what: Literal["task", "message"], dialect: Dialect) -> dict[str, Any]:
    """A send result or first stream event: 1.0 wraps it, the others do not."""
    return {what: obj} if dialect == "1.0" else obj
