"""tern's A2A client without the sockets (sans-IO): the request each call sends in
each dialect and binding, and how each answer is read.

- Every call is one JSON-RPC request (``runtime.wire.jsonrpc``); a JSON-RPC error
  becomes :class:`A2aClientError` with its ``code``. 1.0 calls carry
  ``A2A-Version: 1.0`` and the card's tenant.
- A 0.1 peer without JSON-RPC (OpenFang) is called on the seed's REST routes instead.
- A stream ends at a message, or at a final, terminal or interrupted status.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from msgspec import UNSET

from runtime.wire.depth import loads as json_loads
from runtime.a2a import dialects, protocol
from runtime.a2a.dialects import BadMessage
from runtime.a2a.model import INTERRUPTED, TERMINAL, ArtifactEvent, Message, StatusEvent, Task, new_id, text_of
from runtime.a2a.protocol import TRAITS
from runtime.errors import RpcError, TernError, TernTimeout
from runtime.wire import jsonrpc

__all__ = ["A2aClientError", "A2aTimeout", "Result", "StreamEvent", "send_request", "headers", "envelope",
           "read_result", "parse_event", "as_task", "ends_stream", "SEED_REST", "seed_fallback", "seed_request",
           "read_seed", "reply_text", "snippet", "said",
           "error_message"]

Result = Task | Message
StreamEvent = Task | Message | StatusEvent | ArtifactEvent


class A2aClientError(TernError):
    """A peer could not be reached, answered something unusable, or answered with a
    JSON-RPC error (then ``code`` is its code and ``message`` its text)."""

    def __init__(self, text: str, *, code: int | None = None, message: str = "", data: Any = None,
                 http_status: int | None = None) -> None:
        Exception.__init__(self, text)  # not super(): PeerRpcError's next base is RpcError
        self.code = code
        self.http_status = http_status  # 401/403: the peer wants credentials (a caller may say how to pass them)
        self.message = message or text
        self.data = data


class PeerRpcError(A2aClientError, RpcError):
    """The peer answered with a JSON-RPC error: an ``RpcError`` with its code, message
    and data, which is also an :class:`A2aClientError` (a sentence naming peer and method)."""


class A2aTimeout(A2aClientError, TernTimeout):
    """A wait on a peer passed its deadline."""


# --- Requests ---------------------------------------------------------------------------------


def send_request(dialect: str, text: str, context_id: str | None, task_id: str | None, blocking: bool,
                 *, stream: bool) -> tuple[str, dict[str, Any]]:
    """The method and params that send ``text`` (continuing ``task_id`` if given)."""
    message = Message(role="user", parts=[{"text": text}], context_id=context_id or None, task_id=task_id or None)
    traits = TRAITS[dialect]
    params: dict[str, Any] = {"message": dialects.render_message(message, dialect)}  # type: ignore[arg-type]
    if traits.configures_send and not stream:
        params["configuration"] = protocol.blocking_configuration(dialect, blocking)
    if traits.client_names_task:
        params["id"] = task_id or new_id()
        if context_id:
            params["sessionId"] = context_id
    return protocol.method_for(dialect, "stream" if stream else "send"), params


def headers(dialect: str, accept: str) -> dict[str, str]:
    out = {"Content-Type": "application/json", "Accept": accept}
    version = TRAITS[dialect].version
    if version:
        out["A2A-Version"] = version
    return out


def envelope(dialect: str, tenant: str | None, method: str, params: dict[str, Any]) -> tuple[str, bytes]:
    """A new request id and the request's bytes."""
    if TRAITS[dialect].tenant and tenant:
        params = {"tenant": tenant, **params}
    msg_id = new_id()
    return msg_id, jsonrpc.encode(jsonrpc.Request(msg_id, method, params))


# --- Answers ----------------------------------------------------------------------------------


def read_result(raw: bytes, status: int, name: str, url: str, method: str) -> Any:
    """The ``result`` of the answer of peer ``name`` at ``url``; an error answer, an HTTP
    error or anything that is not a JSON-RPC answer raises :class:`A2aClientError`."""
    answer = _answer(raw)
    if isinstance(answer, jsonrpc.ErrorResponse):
        code, text = answer.error.code, answer.error.message or "no message"
        raise PeerRpcError(f"{name}: {method}: {text} ({protocol.ERROR_NAMES.get(code, 'error')} {code})",
                           code=code, message=text, data=None if answer.error.data is UNSET else answer.error.data)
    if status != 200:
        words = said(raw)
        if status in (401, 403):
            raise A2aClientError(f"{name}: {method}: HTTP {status}: the agent needs credentials "
                                 f"(pass them as a header, e.g. Authorization){': ' + words if words else ''}",
                                 http_status=status)
        raise A2aClientError(f"{name}: {method}: HTTP {status} from {url}{': ' + words if words else ''}")
    if not isinstance(answer, jsonrpc.Response):
        raise A2aClientError(f"{name}: {method}: not a JSON-RPC answer: {snippet(raw) if raw else 'empty'}")
    return answer.result


def _answer(raw: bytes) -> jsonrpc.Message | None:
    """The JSON-RPC message in ``raw``. A peer that bends JSON-RPC (no ``"jsonrpc"``, an
    odd id) is read leniently: an error with an integer code, else a result."""
    if not raw:
        return None
    try:
        return jsonrpc.parse(raw)
    except jsonrpc.InvalidMessage:
        pass
    answer = _loads(raw)
    if not isinstance(answer, dict):
        return None
    error = answer.get("error")
    if isinstance(error, dict) and type(error.get("code")) is int:
        return jsonrpc.error_response(answer.get("id"), error["code"], str(error.get("message") or ""),
                                      error.get("data"))
    if "result" in answer:
        return jsonrpc.Response(answer.get("id"), answer["result"])
    return None


def error_message(raw: bytes) -> str:
    """The message of an HTTP error body shaped ``{"error": {"message": ...}}`` (tern, REST peers), else ""."""
    answer = _loads(raw)
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return ""


def said(raw: bytes) -> str:
    """An HTTP error body's own words: its ``error.message``, else the body itself."""
    return error_message(raw) or (snippet(raw) if raw else "")


def _loads(raw: bytes) -> Any:
    try:
        return json_loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None


def parse_event(result: Any, method: str) -> StreamEvent | None:
    """A result or stream event in any dialect; None if tern does not know it."""
    try:
        return dialects.parse_event(result)
    except BadMessage as exc:
        raise A2aClientError(f"{method}: the peer's answer is not valid A2A: {exc}") from None


def as_task(result: Any, method: str, name: str) -> Task:
    if isinstance(result, dict) and isinstance(result.get("task"), dict) and len(result) == 1:
        result = result["task"]
    try:
        return dialects.parse_task(result)
    except BadMessage as exc:
        raise A2aClientError(f"{name}: {method}: the answer is not a task: {exc}") from None


def ends_stream(event: StreamEvent) -> bool:
    """Nothing more comes after a message, or a final, terminal or interrupted status."""
    return isinstance(event, Message) or (isinstance(event, StatusEvent) and (
        event.final or event.state in TERMINAL or event.state in INTERRUPTED))


def reply_text(result: Task | Message) -> str:
    """What a person reads as the answer: a message's text, else the task's artifacts'
    text, else its status message, else the last agent message in its history."""
    if isinstance(result, Message):
        return text_of(result.parts)
    if result.artifacts:
        return "\n".join(text for text in (text_of(a.parts) for a in result.artifacts) if text)
    if result.status_message is not None:
        return text_of(result.status_message.parts)
    for message in reversed(result.history):
        if message.role == "agent":
            return text_of(message.parts)
    return ""


# --- The seed's REST routes -------------------------------------------------------------------

#: The seed's (OpenFang's) REST routes for a 0.1 peer without JSON-RPC.
SEED_REST = {"tasks/send": ("POST", "/tasks/send"), "tasks/get": ("GET", "/tasks/{id}"),
             "tasks/cancel": ("POST", "/tasks/{id}/cancel")}


def seed_fallback(dialect: str, method: str, status: int) -> bool:
    """Whether a JSON-RPC call a 0.1 peer has no route for goes to the seed's REST instead."""
    return dialect == "0.1" and status in (404, 405) and method in SEED_REST


def seed_request(url: str, method: str, params: dict[str, Any]) -> tuple[str, str, bytes | None]:
    """The HTTP verb, URL and body of ``method`` on the seed's REST routes under ``url``;
    they answer a bare task: ``POST {url}/tasks/send``, ``GET {url}/tasks/{id}``, ``POST .../cancel``."""
    verb, path = SEED_REST[method]
    target = url.rstrip("/") + path.format(id=quote(str(params.get("id", "")), safe=""))
    return verb, target, json.dumps(params).encode() if verb == "POST" else None


def read_seed(raw: bytes, status: int, name: str, method: str, url: str) -> Any:
    if status != 200:
        raise A2aClientError(f"{name}: {method}: HTTP {status} from {url}: {snippet(raw) if raw else 'empty'}")
    try:
        return json_loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise A2aClientError(f"{name}: {method}: not JSON from {url}: {snippet(raw)}") from None


def snippet(body: bytes) -> str:
    text = body[:60].decode("utf-8", "replace").replace("\n", " ").strip()
    return repr(text + ("..." if len(body) > 60 else ""))
