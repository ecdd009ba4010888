"""The one exception root of tern, and its tree.

Every error tern raises on purpose is a ``TernError``, and each class carries how every
boundary says it, so the map is written once, here: the CLI prints ``str(error)`` as one
line and exits with ``exit_code`` (``runtime.cli._report``); the HTTP server answers with
``http_status`` and the message (``runtime.httpd.server``); the JSON-RPC servers (``tern
mcp``, ``POST /mcp``, A2A's JSON-RPC binding) answer with ``rpc_error(error)``: an
``RpcError`` as it is, any other ``TernError`` with its class's ``rpc_code`` and its
message. A ``TernError`` is never a bug of ours: it is answered, not logged as one.

    TernError
    ├── ConfigError        the config file is unreadable or invalid (CLI exit 2)
    ├── _Skip              config.mcp_import: a server that cannot be carried over
    ├── UsageError         the command line is wrong (CLI exit 2)
    │   ├── FormRefused                 kernel.forms: a form tern will not put to a person
    │   └── BadPublicKey                kernel.audit_checkpoints: no Ed25519 public key (also a ValueError)
    ├── BundleError        the pyz has no native bundle for this Python/platform
    ├── ProtocolError      a peer broke a protocol (bad JSON, bad framing, bad shape)
    │   ├── RpcError       a JSON-RPC error object, to send or received: the one carrier of a code
    │   │   ├── InvalidMessage          wire.jsonrpc: a message that breaks JSON-RPC
    │   │   │   └── BatchNotSupported
    │   │   ├── A2aError                a2a.server.engine: each subclass names its code (and so its status)
    │   │   │   └── TaskNotFound, TaskNotCancelable, UnsupportedOperation, InvalidTaskRequest,
    │   │   │       StoreFull, TaskTooLarge, TooManySubscribers, StorageUnavailable (also a
    │   │   │       StorageError), ConfigNotFound (a2a.server.push)
    │   │   ├── PeerRpcError            a2a.client.requests: a peer's error answer (also an A2aClientError)
    │   │   └── LimitExceeded           wire.limits: a caller's id or name over its bound
    │   ├── BlockedAddress net.guard: the SSRF guard refused an address (403)
    │   ├── BadMessage     a2a.dialects: an A2A message tern cannot read
    │   ├── AskError       mcp.server.asks: a client's answer that cannot be used
    │   ├── JsonTooDeep    wire.depth: JSON nested deeper than MAX_DEPTH (also a ValueError)
    │   ├── CanonicalError wire.jcs: a value with no RFC 8785 form (also a ValueError)
    │   ├── CardRefused    a2a.signatures: a card's signatures do not hold (also a ValueError)
    │   ├── BadKey         crypto.jwk: a JWK tern cannot use (also a ValueError)
    │   └── BadJws         crypto.jws: a signature that cannot be checked (also a ValueError)
    ├── ConnectionLost     a peer went away (EOF, crash) while we needed it
    │   └── TransportClosed             mcp.client.session: an MCP transport ended
    ├── TernTimeout        a wait passed its deadline
    ├── UnknownTool        no tool has this name (or its source no longer has it)
    ├── UnknownAgent       no agent has this name
    ├── UnknownServer      mcp.client.supervisor: no MCP server of that name is configured
    ├── ServerDisabled     mcp.client.supervisor: the MCP server has enabled = false
    ├── Forbidden          kernel.door: this caller may not reach that agent or tool: 403
    ├── AgentError         an agent could not answer (its command failed, ...)
    ├── ToolRefused        a built-in tool declines a call (the model sees a tool error)
    │   └── NoSuchScript                kernel.script_files: no script of that name
    ├── HttpError          httpd.messages: an HTTP answer with its own status
    ├── LlmError           kernel.llm: the model endpoint failed
    ├── AuditError         kernel.audit: an audit key that may be known to others, or an unreadable log
    ├── AuthError          wire.oauth: getting a token failed (which step, why; never a secret)
    │   └── AuthRequired, NotOAuth      mcp.client.oauth.model: a login is needed / the server is not OAuth
    ├── StorageError       tern's state could not be written or read (disk full, database away): 503
    │   └── DatabaseUnavailable, StatementFailed    pg.pool: PostgreSQL away / one statement refused
    ├── BudgetExceeded     an agent's budget is spent for now: 429 with Retry-After
    ├── UnknownApproval    no approval request has this id: 404
    ├── UnknownConversation  no conversation has this id (or none the caller may see): 404
    ├── ApprovalClosed     the approval request was already decided or expired: 409
    ├── ApprovalMismatch   an approval named arguments (their sha256) other than the request's: 409
    ├── UnknownTrigger     no trigger has this name: 404
    ├── TriggerBusy        a trigger's overlap policy refuses another run now: 409
    │   └── TriggerPaused  the trigger is paused after failing too often: 503
    ├── TriggerAuthError   kernel.triggers.signature: a webhook failed its authentication: 401
    │   └── Replayed       a correctly signed request already accepted in the replay window: 409
    ├── SinkError          kernel.triggers.sinks: a reply could not be delivered
    ├── NotifyError        kernel.notify: a notify channel could not deliver an approval request
    ├── LinkRefused        kernel.approval_links: a one-time approval link that does not decide
    ├── IllegalTransition  a2a.server.engine: a task state change the table forbids (a bug)
    └── A2aClientError     a2a.client.requests: a peer agent failed us
        ├── NoCard         a2a.client.cards: a candidate URL has no usable card
        └── A2aTimeout     (also a TernTimeout)

Errors shared by several layers live here; the others live in the layer that owns them.
Messages are written for the person who will read them: what happened, and what to
do. They never contain secrets.
"""

from __future__ import annotations

__all__ = [
    "TernError",
    "ConfigError",
    "UsageError",
    "BundleError",
    "ProtocolError",
    "RpcError",
    "ConnectionLost",
    "TernTimeout",
    "UnknownTool",
    "UnknownAgent",
    "Forbidden",
    "AgentError",
    "ToolRefused",
    "StorageError",
    "BudgetExceeded",
    "UnknownApproval",
    "ApprovalClosed",
    "ApprovalMismatch",
    "UnknownTrigger",
    "TriggerBusy",
    "TriggerPaused",
    "single_leaf",
    "rpc_error",
]

# JSON-RPC 2.0's own codes, here because every error below carries one (wire.jsonrpc
# exports these same names).
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
#: The HTTP status of a JSON-RPC error carried over HTTP, by code (500 for the rest).
RPC_HTTP_STATUS = {PARSE_ERROR: 400, INVALID_REQUEST: 400, METHOD_NOT_FOUND: 404, INVALID_PARAMS: 400}
#: The code a request that timed out answers with (the MCP SDKs' REQUEST_TIMEOUT).
REQUEST_TIMEOUT = -32001


class TernError(Exception):
    """Root of every error tern raises on purpose."""

    exit_code = 1
    http_status = 500
    rpc_code = INTERNAL_ERROR


class ConfigError(TernError):
    """The configuration cannot be used. The message is one line: file, key path, why."""

    exit_code = 2


class UsageError(TernError):
    """The command line asks for something that cannot be done."""

    exit_code = 2
    http_status = 400
    rpc_code = INVALID_PARAMS


class BundleError(TernError):
    """The single-file build has no native module for this interpreter and platform."""

    exit_code = 3


class ProtocolError(TernError):
    """A peer sent something the protocol does not allow."""

    http_status = 400
    rpc_code = INVALID_REQUEST


class RpcError(ProtocolError):
    """A JSON-RPC error: ``code``, ``message`` and optional ``data``.

    Raised by handlers to answer a request with an error, and by clients when a peer
    answers with one.
    """

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.code = self.rpc_code = code
        self.message = message
        self.data = data
        self.http_status = RPC_HTTP_STATUS.get(code, 500)

    def __repr__(self) -> str:
        return f"RpcError({self.code}, {self.message!r})"


class TernTimeout(TernError):
    """A wait passed its deadline. The message names what was waited for and for how long."""

    http_status = 504
    rpc_code = REQUEST_TIMEOUT


class ConnectionLost(TernError):
    """A peer's connection ended (EOF, crash, reset); calls waiting on it fail at once."""

    http_status = 502


class UnknownTool(TernError):
    """No tool has this name."""

    http_status = 404
    rpc_code = INVALID_PARAMS


class UnknownAgent(TernError):
    """No agent has this name."""

    http_status = 404
    rpc_code = INVALID_PARAMS


class Forbidden(TernError):
    """The caller may not reach this agent or tool (its key's scopes or agents): the
    kernel's door (``kernel.door``) says so, for every way in alike."""

    http_status = 403
    rpc_code = INVALID_REQUEST


class AgentError(TernError):
    """The agent could not answer (its command failed, its tool refused, ...)."""

    http_status = 502


class ToolRefused(TernError):
    """A built-in tool declines a call (outside its workspace, not allowed, too large);
    the tool answers with the message as a tool error."""

    http_status = 403


def single_leaf(exc: BaseException) -> BaseException:
    """The one meaningful exception inside nested exception groups, if there is one.

    Trio nurseries wrap errors in groups; a user should read "connection refused",
    not "1 sub-exception". A KeyboardInterrupt anywhere wins.
    """
    while True:
        inner = getattr(exc, "exceptions", None)
        if not isinstance(inner, tuple) or not inner:
            return exc
        keyboard = [e for e in inner if isinstance(e, KeyboardInterrupt)]
        if keyboard:
            return keyboard[0]
        if len(inner) != 1:
            return exc
        exc = inner[0]


class StorageError(TernError):
    """A write to one of tern's SQLite files failed (the disk is full, the file is
    read-only): that write is refused, tern keeps serving."""

    http_status = 503


class BudgetExceeded(TernError):
    """An agent used up one of its budgets (requests a minute, tokens an hour, tool
    calls a run). ``retry_after`` is how many seconds until it may go on (0: never
    within this run)."""

    http_status = 429

    def __init__(self, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UnknownApproval(TernError):
    """No approval request has this id."""

    http_status = 404
    rpc_code = INVALID_PARAMS


class UnknownConversation(TernError):
    """No conversation has this id, or none the caller's key may see."""

    http_status = 404
    rpc_code = INVALID_PARAMS


class ApprovalClosed(TernError):
    """The approval request was already approved, denied, or expired: it takes no decision."""

    http_status = 409


class ApprovalMismatch(TernError):
    """An approval carried the sha256 of other arguments than the request's: what the
    person saw is not what would run, so nothing is approved."""

    http_status = 409


class UnknownTrigger(TernError):
    """No ``[[triggers]]`` entry has this name."""

    http_status = 404
    rpc_code = INVALID_PARAMS


class TriggerBusy(TernError):
    """A trigger's overlap policy (skip, a full queue, the parallel bound) refuses a run now."""

    http_status = 409


class TriggerPaused(TriggerBusy):
    """The trigger failed ``max_failures`` times in a row and waits for ``tern triggers resume``."""

    http_status = 503


def rpc_error(error: TernError) -> RpcError:
    """What a JSON-RPC server answers ``error`` with: an ``RpcError`` as it is; any other
    ``TernError`` as its class's ``rpc_code`` with its message (the one JSON-RPC map)."""
    return error if isinstance(error, RpcError) else RpcError(error.rpc_code, str(error))
