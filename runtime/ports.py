"""Ports: what crosses between the kernel and the protocols, as small typed interfaces.

Two directions, one module:

- **Up** (the kernel, as a protocol server sees it): ``ToolPort`` (list tools, find one,
  call it through the one pipeline in a ``Run``), ``AgentPort`` (run an agent message),
  ``EventPort`` (subscribe to kernel events), ``ContentPort`` (workspace files to read,
  connected MCP servers to ask for their resources and prompts). The MCP and A2A servers import these,
  never the kernel; the composition root (``runtime.host``) hands them the kernel's
  objects, and tests hand them small fakes.
- **Down** (a tool source, as the kernel sees it): ``ToolSource``, which the MCP client
  supervisor and the external A2A agents implement.

The value types that cross (``Tool``, ``ToolResult``, ``ToolContext``, ``AgentReply``)
live here too, so neither side imports the other for them.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ContextManager, Iterator, Literal, Protocol
from collections.abc import Awaitable, Callable, Iterable

import msgspec

from runtime.config.keys import Caller

__all__ = [
    "Caller",
    "Tool", "ToolResult", "ToolContext", "AgentReply", "Handler", "TextSink",
    "Run", "ToolPort", "AgentPort", "EventPort", "Subscription", "ToolSource",
    "Approval", "Ask", "ApprovalPort", "ContentPort", "Sample", "TaskView", "TaskPort",
    "CallClock", "CALL_CLOCK", "TriggerPort",
]

Source = Literal["builtin", "mcp", "a2a"]
TextSink = Callable[[str], None]  # a non-blocking callback that takes text as it comes


class Tool(msgspec.Struct, frozen=True):
    """A tool as agents (and LLMs, and MCP clients) see it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    source: Source = "builtin"
    server: str = ""  # MCP tools: the configured server
    original_name: str = ""  # MCP tools: the name the server knows it by
    # MCP tool annotations (readOnlyHint, destructiveHint, idempotentHint, openWorldHint), as a
    # server sent them or as tern declares them on its built-in tools; policy and tiers read them.
    annotations: dict[str, Any] | None = None


class ToolResult(msgspec.Struct):
    """What a call returns to its caller. ``is_error`` is a tool error for the model to
    read (the tool ran and failed), not a fault of tern. ``task`` is the id of the
    upstream task the call ran as (an MCP server's tasks), for the audit record."""

    text: str
    is_error: bool = False
    structured: Any = None
    content: list[dict[str, Any]] = []
    task: str = ""


class ToolContext(msgspec.Struct, frozen=True):
    """Who is calling, for tools that act on the caller's own things: the agent's
    name, its workspace directory (file tools stay inside it), tern's state directory.
    A caller that can show a long call's life (the MCP server) sets ``progress(text)``
    (output as it comes) and ``log(level, text)``: plain callbacks that never block.
    A caller that can put a question to a person sets ``ask`` (see ``Ask``), one whose
    client can run model turns sets ``sample`` (see ``Sample``); both are passed on to
    the runs of agents this call sends messages to."""

    agent: str = ""
    workspace: str = ""
    state_dir: str = ""
    progress: Any = None
    log: Any = None
    ask: Any = None
    sample: Any = None
    owner: Any = None  # the Caller the run is for (agent_send passes it on: conversations stay its own)


class AgentReply(msgspec.Struct, frozen=True):
    """An agent's answer to one message, and the conversation it belongs to."""

    agent: str
    context_id: str
    text: str


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


class Approval(msgspec.Struct, frozen=True):
    """A tool call waiting for (or past) a person's decision. ``arguments`` are redacted and
    whole (``arguments_sha256`` names them; an approval that carries it binds to them);
    ``state`` is pending, approved, denied or expired; ``scope`` once, always (this agent
    and tool from now on) or args (these exact arguments from now on)."""

    id: str
    agent: str
    tool: str
    arguments: Any
    caller: str
    context_id: str
    created: float
    expires: float
    state: str = "pending"
    scope: str = ""
    decided_by: str = ""
    channel: str = ""
    reason: str = ""
    decided_at: float = 0.0
    form: dict[str, Any] | None = None  # a question's form (see kernel.forms): it is answered, not just approved
    key: str = "admin"  # the key name whose run asked: it sees it (and the scope "approvals" any)
    origin: str = ""  # the way that run came in (a2a, mcp, api...): whether its key may answer it itself
    arguments_sha256: str = ""  # "sha256:<hex>" of the arguments' RFC 8785 bytes, as kept: what approving binds to
    arguments_bytes: int = 0  # how long those bytes are (GET /api/approvals/{id}/arguments serves them)


#: A caller's way to put a pending approval to a person (an MCP client's elicitation, an
#: A2A caller's input-required turn, a terminal prompt). It is called once per request,
#: runs while the request waits, and is cancelled as soon as the request is decided by
#: any channel. It decides through the ``ApprovalPort`` it was built with; returning
#: without deciding leaves the request to the other channels until it expires.
Ask = Callable[[Approval], Awaitable[None]]


class CallClock:
    """A tool call's timeout that stops while the call waits for an answer from someone
    else: a person (or a model, or the desktop assistant) answering the MCP server's
    question. The server is not slow then, and a person given 300 s to answer a form must
    not find the call gone after its 30 s. Holds nest; the time left is kept, not reset.
    The answer itself stays bounded by whoever asks (approval and input timeouts)."""

    __slots__ = ("scope", "_holds", "_left")

    def __init__(self, scope: Any) -> None:
        self.scope = scope  # what holds the deadline: a trio.CancelScope, a session's waiting request
        self._holds = 0
        self._left = 0.0

    @contextmanager
    def paused(self) -> Iterator[None]:
        import trio

        if self._holds == 0:
            self._left = max(self.scope.deadline - trio.current_time(), 0.0)
            self.scope.deadline = math.inf
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1
            if self._holds == 0:
                self.scope.deadline = trio.current_time() + self._left


#: The ``CallClock`` of the tool call running in this context (set by the pipeline, seen
#: by an MCP session answering that call's server's questions).
CALL_CLOCK: ContextVar[CallClock | None] = ContextVar("tern_call_clock", default=None)

#: Runs one model turn on the caller's own model: an MCP client's sampling. Takes
#: ``sampling/createMessage`` params and returns the client's result; raises a
#: TernError when the client cannot, will not, or does not answer in time. Set by a
#: caller that has such a client (the MCP server); an llm agent with ``provider =
#: "mcp-sampling"`` runs its turns through it.
Sample = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class ApprovalPort(Protocol):
    """Pending tool-call approvals and MCP servers' questions, and the one way to decide them
    (async: the store may be a database shared by several nodes)."""

    async def list(self, state: str | None = "pending", who: Caller | None = None) -> list[Approval]: ...

    async def get(self, approval_id: str, who: Caller | None = None) -> Approval:
        """Raises ``UnknownApproval`` (also for one ``who`` may not answer)."""
        ...

    async def decide(self, approval_id: str, approve: bool, *, scope: str = "once", reason: str = "",
                     by: str = "", channel: str = "", answer: dict[str, Any] | None = None,
                     cancel: bool = False, who: Caller | None = None, rule_for: str = "",
                     digest: str | None = None) -> Approval:
        """Approve or deny a pending request (a form's approval carries its ``answer``,
        its denial may ``cancel``; an approval may carry the ``digest`` of the arguments
        it approves, ``ApprovalMismatch`` when they are not the request's). Raises
        ``UnknownApproval``, ``ApprovalClosed`` and,
        for an answer that does not fit the form, ``UsageError``. ``who``: the scope
        ``approvals``, or the waiting run's own key where its way in lets callers decide
        (``Forbidden`` otherwise; None: any). ``rule_for``: an ``always``/``args`` rule for
        ``"caller"`` (the waiting run's key) or ``"everyone"`` (needs ``approvals``)."""
        ...


class Run(Protocol):
    """One run of calls (an agent's, or one protocol request's): the caller may give up."""

    cancelled: bool

    def cancel(self) -> None: ...


class ToolPort(Protocol):
    """The kernel's tools through the one pipeline (guards, timeouts, redaction, audit)."""

    def tools(self) -> list[Tool]: ...

    def get(self, name: str) -> Tool | None: ...

    async def wait_for(self, name: str) -> Tool | None:
        """``get``, but a tool whose MCP server is still connecting is waited for."""
        ...

    def run(self, agent: Any = None, *, progress: TextSink | None = None,
            log: Callable[[str, str], None] | None = None, ask: Ask | None = None,
            sample: Sample | None = None, owner: Caller | None = None) -> Run: ...

    async def call(self, name: str, arguments: Any = None, *, run: Any = None,
                   timeout_secs: float | None = None, caller: str = "") -> ToolResult: ...


class AgentPort(Protocol):
    """The kernel's agents: look one up (``UnknownAgent``), send it a message (``AgentError``)."""

    def get(self, name: str) -> Any: ...

    async def send(self, name: str, message: str, *, context_id: str | None = None,
                   on_text: TextSink | None = None, on_log: Callable[[str, str], None] | None = None,
                   env: dict[str, str] | None = None, ask: Ask | None = None,
                   sample: Sample | None = None, owner: Caller | None = None,
                   new_context: bool = False) -> AgentReply:
        """``owner``: the caller it runs for; it may resume only its own conversations
        (``UnknownConversation`` otherwise), which record its name (None: "admin").
        ``new_context``: the caller minted ``context_id`` just now, so no conversation
        has it and its owner is not looked up (a database round trip on PostgreSQL)."""
        ...

    def admit(self, name: str, who: Caller | None = None) -> None:
        """Whether ``who`` may send ``name`` a message now: the kernel's door (``Forbidden``)
        and the budgets, ``requests_per_minute`` and ``tokens_per_hour`` (checked, not
        counted: ``send`` counts; ``BudgetExceeded`` with ``retry_after``). A server calls
        it before it creates any work (an A2A task)."""
        ...


class Subscription(Protocol):
    async def next(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class EventPort(Protocol):
    """The kernel's event bus: bounded subscriptions that never slow a publisher."""

    def subscribe(self, size: int = ..., *, kinds: Iterable[str] | None = None) -> ContextManager[Any]: ...

    def publish(self, kind: str, data: dict[str, Any] | None = None) -> None: ...


class ToolSource(Protocol):
    """A live set of tools the kernel does not own (an MCP server's, say): the set
    changes as the source connects and reconnects. ``call`` of a name the source no
    longer has raises ``runtime.errors.UnknownTool``."""

    def tools(self) -> list[Tool]: ...

    def get(self, name: str) -> Tool | None: ...

    def owns(self, name: str) -> bool:
        """The name is this source's, whether or not the tool is there right now (a
        restarting server's tool fails with the server's state, not "no such tool")."""
        ...

    async def call(self, name: str, arguments: dict[str, Any], *,
                   timeout_secs: float | None = None) -> ToolResult: ...

    async def wait_for(self, name: str) -> Tool | None:
        """The tool, once the source has finished bringing it up (an MCP server making its
        first connection is waited for, within its own timeout); None if it is not there."""
        ...



class ContentPort(Protocol):
    """Content a protocol server re-exports besides tools: an agent's workspace files,
    opened the way the file tools open them (beneath the workspace, no symlink followed),
    and the connected MCP servers, for their resources and prompts."""

    async def read_file(self, workspace: str, path: str, max_bytes: int) -> bytes:
        """Raises ``ToolRefused`` (outside the workspace, a symlink, too large, absent)."""
        ...

    async def list_files(self, workspace: str, limit: int) -> list[str]: ...

    async def file_stamp(self, workspace: str, path: str) -> Any:
        """Something that changes when the file does (None: no such regular file)."""
        ...

    async def upstream_settled(self) -> None:
        """Returns once the MCP servers have made their first connection attempt (bounded)."""
        ...

    def upstream_capabilities(self, server: str) -> dict[str, Any] | None:
        """A connected MCP server's capabilities; None when it is not connected."""
        ...

    async def upstream_request(self, server: str, method: str, params: dict[str, Any] | None = None) -> Any:
        """Raises RpcError (its answer), TernTimeout or ConnectionLost."""
        ...


class TaskView(msgspec.Struct, frozen=True):
    """One agent task as another protocol sees it: its id, its A2A ``state``
    (submitted, working, input-required, completed, failed, rejected, canceled), the
    agent's text (its answer, or why it failed), and when it was created and last changed."""

    id: str
    state: str
    text: str = ""
    created: float = 0.0
    updated: float = 0.0
    context_id: str = ""  # the conversation: tern's context_id for the agent


class TaskPort(Protocol):
    """The A2A task engine, for a server that starts agent work as tasks of its own
    (MCP's tasks extension): the same task the A2A methods show and cancel."""

    async def start(self, agent: str, message: str, *, caller: str, context_id: str | None = None,
                    ask: Ask | None = None, sample: Sample | None = None, who: Caller | None = None) -> TaskView:
        """A new task: ``message`` to ``agent`` (in conversation ``context_id``), run
        with the caller's ``ask`` and ``sample``, owned by ``who``. Raises a TernError
        when the store has no room or the agent's budget says no."""
        ...

    async def view(self, task_id: str, who: Caller | None = None) -> TaskView:
        """Raises a TernError for a task the engine does not know (never, or evicted), or
        one ``who`` does not own."""
        ...

    async def cancel(self, task_id: str, who: Caller | None = None) -> None:
        """Stop the task's work; a task already finished stays as it is."""
        ...

    def finished(self, task_id: str) -> bool:
        """Whether the task's work no longer runs on this node (it ended, or was never here)."""
        ...


class TriggerPort(Protocol):
    """The daemon's triggers, as the webhook route sees them (``kernel.triggers.runner``)."""

    def webhook(self, name: str) -> Any:
        """The trigger's ``TriggerConfig`` if it exists and is a webhook, else None."""
        ...

    def fire(self, name: str, context: dict[str, Any], *, source: str, who: Caller | None = None) -> str:
        """Start a run now (it goes on in the background), acting for ``who`` (None: the
        identity the trigger names); its id. Raises ``UnknownTrigger``, ``Forbidden`` (``who``
        may not reach the agent), ``TriggerBusy`` when the overlap policy refuses it, ``TriggerPaused``."""
        ...
