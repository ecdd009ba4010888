"""A tool call that runs as a task on the server, client side, sans-IO.

Two dialects, one life. A 2026-07-28 server that offers the extension
``io.modelcontextprotocol/tasks`` decides by itself which calls become tasks (the client
declares the extension, sends nothing else) and answers them with a flat
``CreateTaskResult`` (``resultType: "task"``); ``tasks/get`` inlines the result, and
``input_required`` carries ``inputRequests`` answered with ``tasks/update``. A
2025-11-25 server with ``capabilities.tasks.requests.tools.call`` (the experimental
tasks) makes a task of a call that asks for one (``params.task``) and answers
``{"task": {...}}``; its result, and any question it has on the way, come through
``tasks/result``. Both are polled with ``tasks/get`` and ended with ``tasks/cancel``.

``Task`` keeps one task's status and decides when to poll next: the server's
``pollIntervalMs`` (``pollInterval``), kept between ``MIN_POLL_SECS`` and
``MAX_POLL_SECS``, backing off while nothing changes. A hostile server gets a clear
error for a task id that is no id, a status tern does not know, or a finished task
with no result; it cannot make tern answer its questions without end
(``MAX_QUESTIONS``). The first finished status ends the polling: a status that would
go back from it is never asked for.
"""

from __future__ import annotations

from typing import Any, Literal

from runtime.errors import ProtocolError
from runtime.mcp.client import inputs
from runtime.mcp.protocol import ServerInfo

__all__ = ["EXTENSION", "RESULT", "NOTIFICATIONS", "Dialect", "Support", "Task", "created", "dialect", "declare",
           "support", "task_params"]

EXTENSION = "io.modelcontextprotocol/tasks"
RESULT = "tasks/result"  # 2025-11-25: waits for the result; the server's questions come meanwhile
#: A server may say a task moved (2026-07-28: on the listen stream; 2025-11-25: on the session).
NOTIFICATIONS = ("notifications/tasks", "notifications/tasks/status")
TERMINAL = ("completed", "failed", "cancelled")
STATUSES = ("working", "input_required", *TERMINAL)
MIN_POLL_SECS = 0.25  # however often a server asks to be polled
MAX_POLL_SECS = 30.0  # however rarely
DEFAULT_POLL_SECS = 1.0  # a server that suggests nothing
BACKOFF = 1.5  # each poll that finds nothing new waits this much longer ...
BACKOFF_LIMIT_SECS = 5.0  # ... up to this (or the server's own interval, if longer)
MAX_TASK_ID_CHARS = 256
MAX_QUESTIONS = 64  # input requests answered for one task
CANCEL_WAIT_SECS = 5.0  # for the answer to tasks/cancel, when a call is given up

Dialect = Literal["extension", "experimental"]
Support = Literal["forbidden", "optional", "required"]


def dialect(info: ServerInfo) -> Dialect | None:
    """Which tasks the server offers for tool calls, if any."""
    capabilities = info.capabilities
    if info.era == "modern":
        extensions = capabilities.get("extensions")
        return "extension" if isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict) else None
    offered: Any = capabilities
    for key in ("tasks", "requests", "tools", "call"):
        offered = offered.get(key) if isinstance(offered, dict) else None
    return "experimental" if isinstance(offered, dict) else None


def declare(capabilities: dict[str, Any], info: ServerInfo) -> dict[str, Any]:
    """The client capabilities with the extension declared, when a 2026-07-28 server offers it."""
    if dialect(info) != "extension":
        return capabilities
    extensions = capabilities.get("extensions") if isinstance(capabilities.get("extensions"), dict) else {}
    return {**capabilities, "extensions": {**extensions, EXTENSION: {}}}


def support(execution: Any) -> Support:
    """A tool's ``execution.taskSupport`` (absent or unknown: forbidden)."""
    value = execution.get("taskSupport") if isinstance(execution, dict) else None
    return value if value in ("optional", "required") else "forbidden"


def task_params(server: str, tool: str, declared: Support, offered: Dialect | None,
                ttl_secs: float) -> dict[str, Any]:
    """What the ``tools/call`` params need for the call to be a task: the experimental
    dialect's ``task`` for a tool that allows one; nothing for the extension, whose
    server decides. ProtocolError for a tool that must be a task on a server that does
    not offer tasks (it lies about one or the other)."""
    if declared == "required" and offered is None:
        raise ProtocolError(f"MCP server '{server}' says tool {tool!r} runs only as a task, but it does not offer "
                            f"tasks ({EXTENSION} or tasks.requests.tools.call); the call was not sent")
    if offered == "experimental" and declared != "forbidden":
        return {"task": {"ttl": max(int(ttl_secs * 1000), 1)}}
    return {}


def created(result: Any, offered: Dialect | None) -> dict[str, Any] | None:
    """The task a ``tools/call`` result created, or None for a plain result."""
    if not isinstance(result, dict):
        return None
    if result.get("resultType") == "task":
        return result
    if offered == "experimental" and "task" in result and "content" not in result:
        task = result["task"]
        if not isinstance(task, dict):
            raise ProtocolError("the tools/call result's task is not an object")
        return task
    return None


class Task:
    """One task's life as the client sees it."""

    def __init__(self, server: str, offered: Dialect, envelope: dict[str, Any]) -> None:
        self.server = server
        self.dialect = offered
        task_id = envelope.get("taskId")
        if not isinstance(task_id, str) or not 0 < len(task_id) <= MAX_TASK_ID_CHARS or \
                any(ord(c) < 0x20 or ord(c) == 0x7f for c in task_id):
            raise ProtocolError(f"MCP server '{server}' created a task without a usable taskId "
                                f"(a string of 1 to {MAX_TASK_ID_CHARS} printable characters): {str(task_id)[:80]!r}")
        self.id = task_id
        self.status = "working"
        self.message = ""
        self.detailed: dict[str, Any] = {}
        self.questions: dict[str, tuple[str, dict[str, Any]]] = {}  # asked and not answered yet
        self.answered: set[str] = set()
        self.interval = DEFAULT_POLL_SECS
        self.unchanged = 0  # polls in a row that found nothing new
        self.update(envelope)
        self.unchanged = 0

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def update(self, detailed: Any) -> bool:
        """Take a ``tasks/get`` answer (or the created task); True when something changed."""
        if not isinstance(detailed, dict):
            raise ProtocolError(f"MCP server '{self.server}' answered tasks/get with something not an object")
        if detailed.get("taskId", self.id) != self.id:
            raise ProtocolError(f"MCP server '{self.server}' answered tasks/get for task {self.id!r} about "
                                f"another task ({str(detailed.get('taskId'))[:80]!r})")
        status = detailed.get("status")
        if status not in STATUSES:
            raise ProtocolError(f"MCP server '{self.server}' says task {self.id!r} is {str(status)[:40]!r}, "
                                f"not one of {', '.join(STATUSES)}")
        self._interval(detailed.get("pollIntervalMs"), detailed.get("pollInterval"))
        message = detailed.get("statusMessage")
        questions = self._questions(detailed) if status == "input_required" else {}
        changed = status != self.status or set(questions) != set(self.questions)
        self.status, self.detailed, self.questions = status, detailed, questions
        self.message = message[:500] if isinstance(message, str) else ""
        self.unchanged = 0 if changed else self.unchanged + 1
        return changed

    def _interval(self, milliseconds: Any, legacy: Any) -> None:
        value = milliseconds if self.dialect == "extension" else legacy
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            self.interval = min(max(value / 1000, MIN_POLL_SECS), MAX_POLL_SECS)

    def _questions(self, detailed: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
        """The extension's ``inputRequests`` not answered yet (the experimental dialect
        asks through ``tasks/result`` instead: none here)."""
        if self.dialect != "extension":
            return {}
        asked = inputs.input_requests({"resultType": "input_required", "inputRequests": detailed.get("inputRequests")})
        fresh = {key: request for key, request in (asked or {}).items() if key not in self.answered}
        if len(self.answered) + len(fresh) > MAX_QUESTIONS:
            raise ProtocolError(f"MCP server '{self.server}' asked more than {MAX_QUESTIONS} questions in task "
                                f"{self.id!r}")
        return fresh

    def next_poll(self) -> float:
        """Seconds until the next ``tasks/get``: the server's interval, longer while
        nothing changes (never past ``BACKOFF_LIMIT_SECS`` unless the server asked)."""
        backed_off = self.interval * BACKOFF ** min(self.unchanged, 32)
        return min(backed_off, max(self.interval, BACKOFF_LIMIT_SECS))

    def asked(self, keys: list[str]) -> None:
        """The questions ``keys`` were answered (``tasks/update``): never answered again."""
        self.answered.update(keys)
        self.questions = {k: v for k, v in self.questions.items() if k not in self.answered}

    def result(self) -> dict[str, Any] | None:
        """The tool result of a finished task (a dict to parse as ``tools/call``'s); a
        task that failed or was cancelled is a tool error that says so. None when the
        result is still to be fetched: the experimental dialect's ``tasks/result``, which
        also brings the questions of a task that is ``input_required``."""
        if self.dialect == "experimental" and self.status in ("completed", "input_required"):
            return None
        if self.status == "completed":
            inlined = self.detailed.get("result")
            if not isinstance(inlined, dict):
                raise ProtocolError(f"MCP server '{self.server}' completed task {self.id!r} without its result")
            return inlined
        why = self.message
        error = self.detailed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code = error.get("code")
            why = error["message"][:500] + (f" (code {code})" if isinstance(code, int) else "")
        verb = "failed" if self.status == "failed" else "was cancelled upstream"
        text = f"the task {self.id} on MCP server '{self.server}' {verb}" + (f": {why}" if why else "")
        return {"content": [{"type": "text", "text": text}], "isError": True}
