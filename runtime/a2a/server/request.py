"""Reading an A2A request, whatever its binding: the params every operation needs, the
proto field names 1.0 also allows, and the version a 1.0 call must declare."""

from __future__ import annotations

from typing import Any

from runtime.a2a import protocol
from runtime.a2a.dialects import BadMessage
from runtime.errors import RpcError
from runtime.httpd.messages import Request
from runtime.wire.limits import check_id, check_stored

__all__ = ["check_ids", "task_id", "string", "history_length", "json_names", "require_1x", "caller_of"]


#: The params of any operation, in any dialect, that carry an id the caller chose.
_ID_PARAMS = ("id", "taskId", "contextId", "sessionId", "pushNotificationConfigId")


def check_ids(params: dict[str, Any]) -> None:
    """Every id in an operation's params within ``MAX_ID_CHARS`` (invalid params
    otherwise); the message's own ids are checked where it is read (``parse_message``).
    No string anywhere in the params (ids, message text, metadata, webhook configs: what
    the task store keeps) holds what a store cannot (a NUL, a lone surrogate)."""
    for key in _ID_PARAMS:
        check_id(params.get(key), f"params.{key}")
    for key in ("pushNotificationConfig", "config"):
        if isinstance(params.get(key), dict):
            check_id(params[key].get("id"), f"params.{key}.id")
    check_stored(params, "params")


def task_id(params: dict[str, Any]) -> str:
    value = params.get("id")
    if not isinstance(value, str) or not value:
        raise BadMessage("params.id (the task id) is required")
    return value


def string(params: dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise BadMessage(f"params.{key} is required")
    return value


def history_length(params: dict[str, Any]) -> int | None:
    value = params.get("historyLength")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _fold(obj: Any) -> Any:
    """One object's snake_case keys as camelCase (the camelCase one wins a tie)."""
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = _camel(key) if "_" in key else key
        if name not in out or name == key:
            out[name] = value
    return out


def json_names(params: dict[str, Any]) -> dict[str, Any]:
    """1.0 is ProtoJSON, whose parsers take the proto field names (``history_length``)
    as well as the JSON names (``historyLength``): fold them where A2A defines fields,
    never inside ``data`` or ``metadata``."""
    out = _fold(params)
    for key in ("configuration", "message", "config", "pushNotificationConfig"):
        if isinstance(out.get(key), dict):
            out[key] = _fold(out[key])
    configuration = out.get("configuration")
    if isinstance(configuration, dict):
        for key in ("taskPushNotificationConfig", "pushNotificationConfig"):
            if isinstance(configuration.get(key), dict):
                configuration[key] = _fold(configuration[key])
                if isinstance(configuration[key].get("authentication"), dict):
                    configuration[key]["authentication"] = _fold(configuration[key]["authentication"])
    if isinstance(out.get("authentication"), dict):
        out["authentication"] = _fold(out["authentication"])
    message = out.get("message")
    if isinstance(message, dict) and isinstance(message.get("parts"), list):
        message["parts"] = [_fold(part) for part in message["parts"]]
    return out


def require_1x(request: Request, what: str) -> None:
    """1.0 needs ``A2A-Version: 1.x`` (header or query parameter); none means 0.3."""
    version = request.header(b"a2a-version") or _query_version(request.query) or "0.3"
    if version.split(".")[0] != "1":
        raise RpcError(protocol.VERSION_NOT_SUPPORTED, f"{what} is A2A 1.0: send the header A2A-Version: 1.0 "
                                                       f"(got {version!r}; no header means 0.3)")


def _query_version(query: str) -> str | None:
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key == "A2A-Version" and value:
            return value
    return None


def caller_of(request: Request) -> str:
    """Who sent an A2A request, as a decision it makes is recorded (``a2a:<address>``,
    as the HTTP API's are ``api:<address>``): the key, when there is one, is shared by
    every client, so the address is what tells callers apart."""
    return f"a2a:{request.client[0]}"


def may_read_extended_card(request: Request) -> bool:
    """Whether this caller may read the authenticated extended card: its key's "card"
    scope (``request.caller``, with named keys); without them, every caller the route's
    key check let in (the one key means every scope)."""
    caller = getattr(request, "caller", None)
    return caller is None or caller.allows("card")
