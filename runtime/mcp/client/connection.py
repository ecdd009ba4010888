"""One MCP client connection, sans-IO: its era, version and session id, and the
decisions taken from them.

Like h11's ``Connection`` it does no I/O and knows no clock: the trio shells (the
session and the transports) ask it what to send and tell it what came back, so each
protocol decision is written once, here, and can be tested without a socket.

- **Opening** (``opening``, ``discover_answer``, ``initialize_answer``): which requests
  go first for the transport's probe style, and whether an answer means a modern
  server, a legacy one (``Legacy``: ``initialize`` next), or an error.
- **Version retry** (``retry_version``): a modern server that refuses the first
  request with -32022 UnsupportedProtocolVersion but lists 2026-07-28 as supported
  is asked once more.
- **Streamable HTTP** (``add_headers``, ``note_session``, ``on_status``,
  ``session_expired``): the ``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``,
  ``Mcp-Param-*`` (``note_tools``) and ``Mcp-Session-Id`` headers, and the transparent
  re-``initialize`` (once) when a handshake-era server forgets the session.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple
from collections.abc import Mapping

from msgspec import UNSET

from runtime.errors import ProtocolError, RpcError, TernTimeout
from runtime.mcp import param_headers
from runtime.mcp.protocol import (
    HANDSHAKE_VERSIONS,
    CLIENT_CAPABILITIES,
    META_VERSION,
    UNSUPPORTED_VERSION,
    MODERN_VERSION,
    NAMED_PARAMS,
    Era,
    ServerInfo,
    header_value,
    initialize_params,
    modern_meta,
    parse_discover,
    parse_initialize,
    with_meta,
)
from runtime.wire import jsonrpc

__all__ = ["McpConnection", "Legacy", "Probe", "NO_ANSWER", "DISCOVER", "PING", "INITIALIZE"]

DISCOVER, PING, INITIALIZE = "server/discover", "ping", "initialize"

#: How a transport finds out the era with ``protocol = "auto"``: "parallel" (stdio:
#: discover and ping together), "sequential" (Streamable HTTP: discover, then
#: initialize) or "initialize" (legacy HTTP+SSE exists only in the handshake era).
Probe = Literal["parallel", "sequential", "initialize"]

#: Failures of ``server/discover`` that mean "a legacy server" while probing.
_REFUSALS = (RpcError, ProtocolError, TernTimeout)


class _Unanswered:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_ANSWER"


#: ``discover_answer``'s result when none came (the ping was answered first).
NO_ANSWER: Any = _Unanswered()


class Legacy(NamedTuple):
    """The probe found a handshake-era server: send ``initialize`` next."""

    reason: str  # for the log


class McpConnection:
    """The state of one client connection and the decisions taken from it."""

    __slots__ = ("probe", "pinned", "era", "version", "meta", "session_id", "initialize_body", "generation",
                 "capabilities", "tool_headers")

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.pinned: str | None = None  # the configured protocol version; None for "auto"
        self.era: Era | None = None  # set once negotiated
        self.version: str | None = None
        self.meta: dict[str, Any] | None = None  # the ``_meta`` of every modern-era message
        self.session_id: str | None = None  # Streamable HTTP, handshake era
        self.initialize_body: bytes | None = None  # sent again when the session expires
        self.generation = 0  # how many times the session was initialized again
        self.capabilities: dict[str, Any] = CLIENT_CAPABILITIES  # what the client declares
        self.tool_headers: dict[str, dict[str, str]] = {}  # tool -> argument -> Mcp-Param-* suffix

    # --- Opening ------------------------------------------------------------------------

    def opening(self, choice: str = "auto") -> tuple[str, ...]:
        """The requests to send first for the configured ``choice`` ("auto" or a
        version): ``(DISCOVER, PING)`` together, ``(DISCOVER,)`` or ``(INITIALIZE,)``."""
        self.pinned = None if choice == "auto" else choice
        if choice == MODERN_VERSION:
            return (DISCOVER,)
        if self.pinned or self.probe == "initialize":
            return (INITIALIZE,)
        if self.probe == "sequential":
            return (DISCOVER,)
        return (DISCOVER, PING)

    @property
    def probing(self) -> bool:
        """Whether the first requests only probe (so the shorter probe timeout applies)."""
        return self.pinned is None

    def params(self, method: str) -> Any:
        """The params of an opening request."""
        if method == DISCOVER:
            return with_meta(None, modern_meta(capabilities=self.capabilities))
        if method == INITIALIZE:
            return initialize_params(self.pinned or HANDSHAKE_VERSIONS[0], self.capabilities)
        return UNSET

    def discover_answer(self, result: Any = NO_ANSWER, error: BaseException | None = None, *,
                        late: bool = False) -> ServerInfo | Legacy:
        """What an answer to ``server/discover`` means: a modern server's info, or
        ``Legacy`` while probing when the server refused it, answered nothing, or
        answered something that is not a discover result. Raises when the answer ends
        the opening: any failure when the version is pinned or the answer came ``late``
        (after ``initialize`` failed), and a lost connection always."""
        final = late or not self.probing
        if error is not None:
            if final or not isinstance(error, _REFUSALS):
                raise error
            return Legacy(str(error) or type(error).__name__)
        if result is NO_ANSWER:
            return Legacy("no answer")
        try:
            return parse_discover(result)
        except ProtocolError as exc:
            if final:
                raise
            return Legacy(f"unusable server/discover result ({exc})")

    def initialize_answer(self, result: Any) -> ServerInfo:
        """An ``initialize`` result; ProtocolError for a version tern does not speak,
        or another than the pinned one."""
        return parse_initialize(result, pinned=self.pinned)

    def awaits_late_discover(self, error: BaseException) -> bool:
        """``initialize`` failed after a parallel probe: is the server perhaps a
        modern-only one, slow to answer discover (so its answer is worth waiting for)?"""
        return self.probe == "parallel" and self.probing and isinstance(error, (RpcError, ProtocolError))

    def negotiated(self, version: str, era: Era) -> None:
        """The opening is over: every later message follows ``version`` and ``era``."""
        self.version, self.era = version, era
        self.meta = modern_meta(version, self.capabilities) if era == "modern" else None

    @staticmethod
    def retry_version(error: BaseException) -> bool:
        """Whether a refusal of ``server/discover`` asks for one more try: -32022 with
        2026-07-28 among the versions the server says it supports."""
        if not isinstance(error, RpcError) or error.code != UNSUPPORTED_VERSION:
            return False
        data = error.data if isinstance(error.data, dict) else {}
        supported = data.get("supported")
        return isinstance(supported, list) and MODERN_VERSION in supported

    # --- Tools ----------------------------------------------------------------------------

    def note_tools(self, tools: list[Any]) -> tuple[list[Any], list[tuple[str, str]]]:
        """Keep each listed tool's ``x-mcp-header`` declarations (modern era); returns the
        tools to offer and (name, reason) of those left out: the spec forbids calling a
        tool whose declarations are invalid."""
        if self.era != "modern":
            return tools, []
        kept, refused, headers = [], [], {}
        for tool in tools:
            try:
                declared = param_headers.checked(tool.input_schema)
            except ProtocolError as exc:
                refused.append((tool.name, str(exc)))
                continue
            if declared:
                headers[tool.name] = declared
            kept.append(tool)
        self.tool_headers = headers
        return kept, refused

    # --- Streamable HTTP ----------------------------------------------------------------

    def add_headers(self, headers: dict[str, str], message: jsonrpc.Message | None) -> dict[str, str]:
        """Add the protocol's headers for ``message`` (None for a GET or DELETE) to
        ``headers``. In the modern era a request or notification names its method (and
        its tool, prompt or resource) in headers, and ``MCP-Protocol-Version`` equals
        its ``_meta`` version; a handshake-era session echoes ``Mcp-Session-Id``."""
        version = self.version
        if isinstance(message, (jsonrpc.Request, jsonrpc.Notification)):
            params = message.params if isinstance(message.params, dict) else {}
            meta = params.get("_meta")
            if isinstance(meta, dict) and isinstance(meta.get(META_VERSION), str):
                version = meta[META_VERSION]
                headers["Mcp-Method"] = header_value(message.method)
                named = NAMED_PARAMS.get(message.method)
                if named and isinstance(params.get(named), str):
                    headers["Mcp-Name"] = header_value(params[named])
                    if message.method == "tools/call" and params[named] in self.tool_headers:
                        marked = self.tool_headers[params[named]]
                        headers.update(param_headers.headers_for(marked, params.get("arguments")))
        if version:
            headers["MCP-Protocol-Version"] = version
        if self.session_id and self.era != "modern":
            headers["Mcp-Session-Id"] = self.session_id
        return headers

    def note_sent(self, message: jsonrpc.Message, body: bytes) -> None:
        """Keep the ``initialize`` request, to send again if the session expires."""
        if isinstance(message, jsonrpc.Request) and message.method == INITIALIZE:
            self.initialize_body = body

    def note_session(self, method: str, session_id: str | None) -> None:
        """A response's ``Mcp-Session-Id``: the answer to ``initialize`` starts the
        session; any other response leaves it as it is."""
        if session_id and method == INITIALIZE:
            self.session_id = session_id

    def on_status(self, status: int, sent: Mapping[str, str], *, retried: bool) -> Literal["reinitialize", "read"]:
        """What to do with a POST's HTTP status, given the headers it was ``sent``
        with: a 404 for a session means the server forgot it, so initialize again and
        send the request once more (once only); otherwise read the body."""
        if status == 404 and "Mcp-Session-Id" in sent and not retried:
            return "reinitialize"
        return "read"

    def session_expired(self, generation: int) -> Literal["retry", "initialize", "fail"]:
        """A request sent in ``generation`` found its session gone: "retry" if another
        request already initialized again, "initialize" (the session id is dropped;
        send ``initialize_body``, then call ``reinitialized``), or "fail" if there is
        nothing to send."""
        if generation != self.generation:
            return "retry"
        if self.initialize_body is None:
            return "fail"
        self.session_id = None
        return "initialize"

    def reinitialized(self) -> None:
        """The new session is up: requests of earlier generations just retry."""
        self.generation += 1
