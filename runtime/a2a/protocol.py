"""A2A facts tern's server and client share (sans-IO): which JSON-RPC method is which
operation in which dialect, what each dialect does differently, and the one table of
A2A errors (JSON-RPC code, HTTP+JSON status, google.rpc reason).

Written once here so that the server's three bindings and the client cannot disagree.
Dialects are named as in ``dialects.py`` ("0.1", "0.3", "1.0").
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

__all__ = ["Operation", "Method", "METHODS", "method_for", "Traits", "TRAITS", "blocking_configuration", "is_blocking",
           "A2aErrorKind", "ERRORS", "ERROR_NAMES", "STATUS_NAMES", "http_status", "reason", "TASK_NOT_FOUND",
           "TASK_NOT_CANCELABLE", "PUSH_NOTIFICATION_NOT_SUPPORTED", "UNSUPPORTED_OPERATION",
           "CONTENT_TYPE_NOT_SUPPORTED", "INVALID_AGENT_RESPONSE", "EXTENDED_CARD_NOT_CONFIGURED",
           "EXTENSION_SUPPORT_REQUIRED", "VERSION_NOT_SUPPORTED"]

Operation = Literal["send", "stream", "get", "cancel", "resubscribe", "list", "push_set", "push_set_legacy",
                    "push_get", "push_list", "push_delete", "extended_card"]


class Method(NamedTuple):
    """A JSON-RPC method: its operation, and the dialects that speak it. The first is the
    dialect it is answered in, unless the task was made in another of them."""

    op: Operation
    dialects: tuple[str, ...]

    @property
    def dialect(self) -> str:
        return self.dialects[0]


_V10: tuple[str, ...] = ("1.0",)
_V03: tuple[str, ...] = ("0.3",)
_V01: tuple[str, ...] = ("0.1",)
_V0X: tuple[str, ...] = ("0.3", "0.1")  # 0.1 and 0.3 share these: answered in the task's own dialect

METHODS: dict[str, Method] = {
    "SendMessage": Method("send", _V10),
    "SendStreamingMessage": Method("stream", _V10),
    "GetTask": Method("get", _V10),
    "ListTasks": Method("list", _V10),
    "CancelTask": Method("cancel", _V10),
    "SubscribeToTask": Method("resubscribe", _V10),
    "CreateTaskPushNotificationConfig": Method("push_set", _V10),
    "GetTaskPushNotificationConfig": Method("push_get", _V10),
    "ListTaskPushNotificationConfigs": Method("push_list", _V10),
    "DeleteTaskPushNotificationConfig": Method("push_delete", _V10),
    "GetExtendedAgentCard": Method("extended_card", _V10),
    "message/send": Method("send", _V03),
    "message/stream": Method("stream", _V03),
    "tasks/get": Method("get", _V0X),
    "tasks/cancel": Method("cancel", _V0X),
    "tasks/resubscribe": Method("resubscribe", _V0X),
    "tasks/pushNotificationConfig/set": Method("push_set", _V03),
    "tasks/pushNotificationConfig/get": Method("push_get", _V03),
    "tasks/pushNotificationConfig/list": Method("push_list", _V03),
    "tasks/pushNotificationConfig/delete": Method("push_delete", _V03),
    "agent/getAuthenticatedExtendedCard": Method("extended_card", _V03),
    "tasks/pushNotification/set": Method("push_set_legacy", _V03),  # the 0.2 spelling, its answer names the task "id"
    "tasks/pushNotification/get": Method("push_get", _V03),
    "tasks/send": Method("send", _V01),
    "tasks/sendSubscribe": Method("stream", _V01),
}


def method_for(dialect: str, op: Operation) -> str:
    """The method a client calls for ``op`` in ``dialect`` (the first the table names)."""
    for name, method in METHODS.items():
        if method.op == op and dialect in method.dialects:
            return name
    raise KeyError(f"A2A {dialect} has no method for {op}")


class Traits(NamedTuple):
    """What a dialect does differently, beside the shapes ``dialects.py`` renders."""

    version: str | None  # the A2A-Version its requests carry (and the server requires)
    proto_json: bool  # params may use the proto field names (history_length) as well as the JSON names
    blocking_key: str  # the send configuration member that says whether a send blocks...
    blocking_inverted: bool  # ...or, when True, that it returns at once
    configures_send: bool  # tern's client sends that configuration
    client_names_task: bool  # a send's params.id names the task and sessionId its context
    message_replies: bool  # an agent may answer with a Message instead of a task
    stream_task: bool  # a stream opens with the task (0.1 streams carry only status and artifact events)
    error_details: bool  # JSON-RPC errors carry a google.rpc ErrorInfo with the reason
    resubscribe_errors_in_stream: bool  # a failed resubscribe answers an SSE stream holding the error
    tenant: bool  # calls carry the tenant of the card's interface


TRAITS: dict[str, Traits] = {
    "1.0": Traits(version="1.0", proto_json=True, blocking_key="returnImmediately", blocking_inverted=True,
                  configures_send=True, client_names_task=False, message_replies=True, stream_task=True,
                  error_details=True, resubscribe_errors_in_stream=False, tenant=True),
    "0.3": Traits(version=None, proto_json=False, blocking_key="blocking", blocking_inverted=False,
                  configures_send=True, client_names_task=False, message_replies=True, stream_task=True,
                  error_details=False, resubscribe_errors_in_stream=True, tenant=False),
    "0.1": Traits(version=None, proto_json=False, blocking_key="blocking", blocking_inverted=False,
                  configures_send=False, client_names_task=True, message_replies=False, stream_task=False,
                  error_details=False, resubscribe_errors_in_stream=True, tenant=False),
}



def blocking_configuration(dialect: str, blocking: bool) -> dict[str, Any]:
    """The send configuration that asks for a blocking (or an immediate) answer."""
    traits = TRAITS[dialect]
    return {traits.blocking_key: not blocking if traits.blocking_inverted else blocking}


def is_blocking(dialect: str, configuration: dict[str, Any]) -> bool:
    """Whether a send with this configuration waits for the task (it does unless told)."""
    traits = TRAITS[dialect]
    said = configuration.get(traits.blocking_key)
    return not said if traits.blocking_inverted else said is not False


# --- Errors -----------------------------------------------------------------------------------

TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
INVALID_AGENT_RESPONSE = -32006
EXTENDED_CARD_NOT_CONFIGURED = -32007
EXTENSION_SUPPORT_REQUIRED = -32008
VERSION_NOT_SUPPORTED = -32009


class A2aErrorKind(NamedTuple):
    """One A2A error: its name, JSON-RPC code, HTTP+JSON status and google.rpc reason."""

    name: str
    code: int
    http: int
    reason: str | None


ERRORS: dict[int, A2aErrorKind] = {kind.code: kind for kind in (
    A2aErrorKind("ParseError", -32700, 400, None),
    A2aErrorKind("InvalidRequest", -32600, 400, None),
    A2aErrorKind("MethodNotFound", -32601, 404, None),
    A2aErrorKind("InvalidParams", -32602, 400, None),
    A2aErrorKind("InternalError", -32603, 500, None),
    A2aErrorKind("TaskNotFound", TASK_NOT_FOUND, 404, "TASK_NOT_FOUND"),
    A2aErrorKind("TaskNotCancelable", TASK_NOT_CANCELABLE, 400, "TASK_NOT_CANCELABLE"),
    A2aErrorKind("PushNotificationNotSupported", PUSH_NOTIFICATION_NOT_SUPPORTED, 400,
                 "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    A2aErrorKind("UnsupportedOperation", UNSUPPORTED_OPERATION, 400, "UNSUPPORTED_OPERATION"),
    A2aErrorKind("ContentTypeNotSupported", CONTENT_TYPE_NOT_SUPPORTED, 400, "CONTENT_TYPE_NOT_SUPPORTED"),
    A2aErrorKind("InvalidAgentResponse", INVALID_AGENT_RESPONSE, 500, None),
    A2aErrorKind("ExtendedAgentCardNotConfigured", EXTENDED_CARD_NOT_CONFIGURED, 400,
                 "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    A2aErrorKind("ExtensionSupportRequired", EXTENSION_SUPPORT_REQUIRED, 400, None),
    A2aErrorKind("VersionNotSupported", VERSION_NOT_SUPPORTED, 400, "VERSION_NOT_SUPPORTED"),
)}
ERROR_NAMES = {code: kind.name for code, kind in ERRORS.items()}
#: The google.rpc status an HTTP+JSON error names, by HTTP status.
STATUS_NAMES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 500: "INTERNAL", 409: "FAILED_PRECONDITION"}


def http_status(code: int) -> int:
    """The HTTP+JSON status of a JSON-RPC error code (500 for one A2A does not name)."""
    kind = ERRORS.get(code)
    return kind.http if kind else 500


def reason(code: int) -> str | None:
    kind = ERRORS.get(code)
    return kind.reason if kind else None
