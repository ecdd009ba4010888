"""What a server asks of tern's client, sans-IO: elicitation, sampling and roots, as
handshake-era requests or as a modern server's ``input_required`` result (MRTR).

Both eras ask the same three questions; only the envelope differs. A handshake-era
server sends ``elicitation/create`` as a request of its own; a 2026-07-28 server
answers a ``tools/call`` (``resources/read``, ``prompts/get``) with
``resultType: "input_required"``, its ``inputRequests`` and an opaque ``requestState``,
and the client retries the call with a new id, the same params, ``inputResponses`` and
the ``requestState`` echoed byte for byte. This module reads and checks those results
(bounded: a hostile server cannot make tern answer without end), builds the retry's
params, and fills an accepted form with the schema's defaults (SEP-1034), so a person
who leaves a field empty gets what the server proposed. Who answers, and how an answer
is checked against its form, is the kernel's (``kernel.elicitation``, ``kernel.forms``).
"""

from __future__ import annotations

from typing import Any

from runtime.errors import ProtocolError

__all__ = ["MAX_ROUNDS", "MAX_INPUT_REQUESTS", "ASKABLE", "MRTR_METHODS", "input_requests", "retry_params",
           "with_defaults", "capabilities"]

MAX_ROUNDS = 8  # input_required results answered for one call before it fails
MAX_INPUT_REQUESTS = 8  # input requests in one result
MAX_STATE_CHARS = 65536  # of a requestState echoed back
ASKABLE = ("elicitation/create", "sampling/createMessage", "roots/list")
MRTR_METHODS = ("tools/call", "resources/read", "prompts/get")
_PRIMITIVE_DEFAULTS = {"string": str, "integer": int, "number": (int, float), "boolean": bool}


def input_requests(result: Any) -> dict[str, tuple[str, dict[str, Any]]] | None:
    """The input requests of an ``input_required`` result (key -> (method, params)), or
    None when the result is complete (``resultType`` absent means complete).
    ProtocolError for a malformed or oversized one, or a method tern cannot answer."""
    if not isinstance(result, dict) or result.get("resultType", "complete") != "input_required":
        return None
    requests = result.get("inputRequests")
    if not isinstance(requests, dict) or not requests:
        raise ProtocolError("an input_required result without inputRequests")
    if len(requests) > MAX_INPUT_REQUESTS:
        raise ProtocolError(f"an input_required result with {len(requests)} input requests "
                            f"(at most {MAX_INPUT_REQUESTS} are answered)")
    state = result.get("requestState")
    if state is not None and (not isinstance(state, str) or len(state) > MAX_STATE_CHARS):
        raise ProtocolError("an input_required result whose requestState is not a string of at most "
                            f"{MAX_STATE_CHARS} characters")
    parsed: dict[str, tuple[str, dict[str, Any]]] = {}
    for key, request in requests.items():
        method = request.get("method") if isinstance(request, dict) else None
        if method not in ASKABLE:
            raise ProtocolError(f"input request {str(key)[:60]!r} asks for {str(method)[:60]!r}, "
                                f"which is not one of {', '.join(ASKABLE)}")
        params = request.get("params")
        parsed[str(key)] = (method, params if isinstance(params, dict) else {})
    return parsed


def retry_params(params: dict[str, Any] | None, result: dict[str, Any],
                 responses: dict[str, Any]) -> dict[str, Any]:
    """The params of the retry: the original ``params`` (without an earlier round's
    answers), ``inputResponses``, and the ``requestState`` only if the server sent one."""
    retry = {k: v for k, v in (params or {}).items() if k not in ("inputResponses", "requestState")}
    retry["inputResponses"] = responses
    if result.get("requestState") is not None:
        retry["requestState"] = result["requestState"]
    return retry


def with_defaults(requested_schema: Any, answer: dict[str, Any]) -> dict[str, Any]:
    """An elicitation answer with the form's defaults filled in for every field the
    person left out, when the answer accepts (SEP-1034). Defaults of the wrong type,
    or outside the field's ``enum``, are not used."""
    if answer.get("action") != "accept" or not isinstance(requested_schema, dict):
        return answer
    properties = requested_schema.get("properties")
    if not isinstance(properties, dict):
        return answer
    content = dict(answer.get("content") or {})
    for field, schema in properties.items():
        if field in content or not isinstance(schema, dict) or "default" not in schema:
            continue
        default, declared = schema["default"], schema.get("type")
        kind = _PRIMITIVE_DEFAULTS.get(declared) if isinstance(declared, str) else None
        if kind is None or not isinstance(default, kind) or (isinstance(default, bool) and declared != "boolean"):
            continue
        if isinstance(schema.get("enum"), list) and default not in schema["enum"]:
            continue
        content[field] = default
    return {**answer, "content": content}


def capabilities(elicitation: bool, sampling: bool) -> dict[str, Any]:
    """The client capabilities to declare: roots always, elicitation and sampling only
    when something can answer them. Elicitation in both modes: a URL-mode question is
    shown to a person, who opens it (tern never opens a browser)."""
    declared: dict[str, Any] = {"roots": {"listChanged": False}}
    if elicitation:
        declared["elicitation"] = {"form": {}, "url": {}}
    if sampling:
        declared["sampling"] = {}
    return declared
