"""MCP's tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28) over the A2A
task engine (``runtime.ports.TaskPort``): a ``tools/call`` of an agent from a client
that declared the extension (for its session, or in this request's ``_meta``) returns
a ``CreateTaskResult`` at once, and the agent works as an A2A task: the same one the
A2A methods show, cancellable from either side.

- ``tasks/get``: the task's status (working, input_required, completed, failed,
  cancelled); a finished task inlines the tool result (an agent that ran and failed is
  a tool error: ``completed`` with ``isError``). ``failed``, with an inlined JSON-RPC
  ``error`` and no result, is for a task refused rather than run: an agent that
  rejected it (A2A ``rejected``: a budget spent by the time its turn came, an events
  agent that declines the job), which a call without a task would have had as a
  request error. While the work waits on the client (a tool call's approval, a model
  turn for an ``mcp-sampling`` agent), it is ``input_required`` with those questions
  in ``inputRequests`` (a ``Parked`` holds them, as for MRTR);
- ``tasks/update``: ``inputResponses`` answer them (any subset; the rest stay asked);
- an ask tool with ``task`` set is a task of this server alone (``ask_task.py``): its
  questions are the ``inputRequests``; finished, it is kept KEEP_SECS (its ``ttlMs``);
- ``tasks/cancel``: an empty ack, also for a finished task; unknown ids are -32602;
- without the extension, these methods are -32021 naming it.

At most MAX_LENT tasks keep a client's questions at once (ask tasks included); past
that a call runs without a task (a plain result), which the extension allows.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from runtime.errors import RpcError, TernError
from runtime.mcp.protocol import MISSING_CAPABILITY
from runtime.mcp.server.ask_task import PREFIX, AskTask
from runtime.mcp.server.asking import decide, elicitation
from runtime.mcp.server.asks import Ask
from runtime.mcp.server.mrtr import Parked
from runtime.ports import ApprovalPort, Caller, TaskPort, TaskView
from runtime.wire import jsonrpc

__all__ = ["McpTasks", "EXTENSION", "TASK_METHODS", "declared", "missing_tasks"]

EXTENSION = "io.modelcontextprotocol/tasks"
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")
MAX_LENT = 256
KEEP_SECS = 3600.0  # a finished ask task, for tasks/get
POLL_MS = 500
STATUS = {"submitted": "working", "working": "working", "input-required": "input_required",
          "auth-required": "input_required", "completed": "completed", "failed": "completed",
          "rejected": "failed", "canceled": "cancelled"}
REJECTED = -32000  # JSON-RPC's implementation-defined server error: the agent refused the task


def declared(capabilities: Any) -> bool:
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


def missing_tasks() -> RpcError:
    return RpcError(MISSING_CAPABILITY, f"this needs the client extension {EXTENSION}",
                    {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})


def _iso(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class McpTasks:
    """The tasks this MCP server started, and the questions each has for its client."""

    def __init__(self, port: TaskPort, approvals: ApprovalPort | None) -> None:
        self.port = port
        self.approvals = approvals
        self.lenders: dict[str, Parked] = {}  # task id -> its pending questions (approvals, model turns)
        self.asking: dict[str, AskTask] = {}  # ask tools run as tasks, by task id

    def available(self) -> bool:
        self._forget_finished()
        return len(self.lenders) + len(self.asking) < MAX_LENT

    def start_ask(self, ask: Ask, arguments: dict[str, Any], capabilities: Any) -> dict[str, Any]:
        """The ``CreateTaskResult`` of an ask tool run as a task (its first round asked)."""
        task = AskTask(ask, arguments, capabilities)
        self.asking[task.id] = task
        created = {"resultType": "task", **self._ask_envelope(task)}
        created.pop("inputRequests", None)  # a CreateTaskResult never carries them: tasks/get does
        return created

    async def start(self, agent: str, message: str, context_id: str | None, caller: str, lender: Parked,
              sample: Any, who: Caller | None = None) -> dict[str, Any]:
        """The ``CreateTaskResult`` of a new task (``lender.ask``/``sample`` lent to it),
        owned by ``who`` (the HTTP session's key)."""
        try:
            view = await self.port.start(agent, message, caller=caller, context_id=context_id, ask=lender.ask,
                                   sample=sample, who=who)
        except RpcError:
            raise
        except TernError as exc:  # a budget, a full store: said as the tool's error, as a sync call would
            return {"content": [{"type": "text", "text": str(exc)}], "isError": True}
        self.lenders[view.id] = lender
        return {"resultType": "task", **self._envelope(view, lender)}

    async def request(self, method: str, params: dict[str, Any], capabilities: Any, by: str,
                who: Caller | None = None) -> dict[str, Any]:
        if not declared(capabilities):
            raise missing_tasks()
        task_id = params.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise RpcError(jsonrpc.INVALID_PARAMS, "taskId (a string) is required")
        if task_id.startswith(PREFIX):
            return self._ask_request(method, task_id, params)
        try:
            view = await self.port.view(task_id, who)
        except TernError:
            raise RpcError(jsonrpc.INVALID_PARAMS, f"unknown task {task_id[:100]!r}") from None
        lender = self.lenders.get(task_id)
        if method == "tasks/cancel":
            await self.port.cancel(task_id, who)
            return {}
        if method == "tasks/update":
            responses = params.get("inputResponses")
            if not isinstance(responses, dict):
                raise RpcError(jsonrpc.INVALID_PARAMS, "inputResponses must be an object")
            if lender is not None:
                await self._answer(lender, responses, by, who)
            return {}
        detailed = self._envelope(view, lender)
        if view.state == "completed":  # as the agent tool's own result
            detailed["result"] = {"content": [{"type": "text", "text": view.text}], "isError": False,
                                  "structuredContent": {"reply": view.text, "context_id": view.context_id}}
        elif view.state == "failed":  # the agent ran and failed: a tool error
            detailed["result"] = {"content": [{"type": "text", "text": view.text}], "isError": True}
        elif view.state == "rejected":  # refused, never run: a protocol-level error
            detailed["error"] = {"code": REJECTED, "message": f"the agent rejected the task: {view.text}"[:2000],
                                 "data": {"a2aState": "rejected"}}
        return detailed

    def _ask_request(self, method: str, task_id: str, params: dict[str, Any]) -> dict[str, Any]:
        task = self.asking.get(task_id)
        if task is None:
            raise RpcError(jsonrpc.INVALID_PARAMS, f"unknown task {task_id[:100]!r}")
        if method == "tasks/cancel":
            task.cancel()
            return {}
        if method == "tasks/update":
            responses = params.get("inputResponses")
            if not isinstance(responses, dict):
                raise RpcError(jsonrpc.INVALID_PARAMS, "inputResponses must be an object")
            task.update(responses)
            return {}
        task.expire()
        detailed = self._ask_envelope(task)
        if task.result is not None:
            detailed["result"] = dict(task.result)
        return detailed

    @staticmethod
    def _ask_envelope(task: AskTask) -> dict[str, Any]:
        out: dict[str, Any] = {"taskId": task.id, "status": task.status, "createdAt": _iso(task.created),
                               "lastUpdatedAt": _iso(task.updated), "ttlMs": int(KEEP_SECS * 1000),
                               "pollIntervalMs": POLL_MS}
        if task.pending:
            out["inputRequests"] = task.pending
        return out

    def _envelope(self, view: TaskView, lender: Parked | None) -> dict[str, Any]:
        status = STATUS.get(view.state, "working")
        out: dict[str, Any] = {"taskId": view.id, "status": status, "createdAt": _iso(view.created),
                               "lastUpdatedAt": _iso(view.updated), "ttlMs": None, "pollIntervalMs": POLL_MS}
        if status == "working" and lender is not None:
            asks = {approval.id: {"method": "elicitation/create", "params": elicitation(approval)}
                    for approval in lender.news()}
            asks.update({i: {"method": "sampling/createMessage", "params": s.params}
                         for i, s in lender.new_samples().items()})
            if asks:
                out.update(status="input_required", inputRequests=asks)
        return out

    async def _answer(self, lender: Parked, responses: dict[str, Any], by: str, who: Caller | None = None) -> None:
        for request_id, answer in responses.items():
            if not isinstance(answer, dict) or request_id in lender.answered:
                continue  # ids it never asked, or asked and answered already, are ignored
            if request_id in lender.new_samples():
                lender.answered.add(request_id)
                lender.answer_sample(request_id, answer)
            elif request_id in lender.asks and self.approvals is not None:
                lender.answered.add(request_id)
                await decide(self.approvals, request_id, answer, by=by, who=who)

    def _forget_finished(self) -> None:
        now = time.time()
        for task_id, task in list(self.asking.items()):
            task.expire()
            if task.finished() and now - task.updated > KEEP_SECS:
                del self.asking[task_id]
        for task_id in list(self.lenders):
            if self.port.finished(task_id):
                del self.lenders[task_id]
