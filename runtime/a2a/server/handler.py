"""What every A2A operation does, whichever binding carried it (JSON-RPC, HTTP+JSON,
the seed's REST): one method in, its result (or an SSE stream) out, over the task
engine and the push notifier. The bindings only read requests and write answers.

A message that would start agent work (a new task, or the next turn of one) is first
put to ``admit(agent)`` (``AgentPort.admit``): a spent budget raises ``BudgetExceeded``
before any task exists, which no binding answers itself, so the HTTP server does, for
every binding alike: 429 with ``Retry-After``. A message that answers a question of a
task's running work (an approval) starts no work, so it is not put to ``admit``: the
turn it unblocks was admitted when it began.

Who may do what (docs/security-model.md): ``who`` (the request's ``Caller``) needs the
scope ``message`` and the agent for a send or a stream, ``tasks`` for the rest (403
otherwise), and sees only its own tasks (an admin: all): another's task id is answered
as not found, the same error as an id that never existed."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import msgspec
import trio

from runtime.a2a import dialects, protocol
from runtime.a2a.dialects import BadMessage
from runtime.a2a.model import StatusEvent, Task
from runtime.a2a.protocol import TRAITS
from runtime.a2a.server.engine import A2aError, TaskEngine, TaskNotFound, UnsupportedOperation
from runtime.a2a.server.push import PushNotifier
from runtime.a2a.server.request import check_ids, history_length, string, task_id
from runtime.errors import RpcError
from runtime.httpd.messages import HttpError, StreamResponse
from runtime.ports import Caller
from runtime.wire.jsonrpc import INVALID_PARAMS

__all__ = ["A2aHandler", "Frame", "ANSWERED", "error_of", "permit"]

BLOCKING_WAIT_SECS = 300.0  # a blocking send returns the task as it is after this long

Frame = Callable[[Any], bytes]  # one stream result as the binding sends it (an SSE event)
#: The errors an operation answers with (the bindings turn them into their error shape).
ANSWERED = (BadMessage, RpcError)  # RpcError includes every A2aError


def error_of(exc: Exception) -> tuple[int, str]:
    """The JSON-RPC code and text of one of :data:`ANSWERED`."""
    if isinstance(exc, BadMessage):
        return INVALID_PARAMS, str(exc)
    assert isinstance(exc, RpcError)
    return exc.code, exc.message


class A2aHandler:
    def __init__(self, engine: TaskEngine, push: PushNotifier, *,
                 admit: Callable[[str, Caller | None], None] | None = None) -> None:
        self.engine = engine
        self.push = push
        self.admit = admit

    async def call(self, method: str, params: dict[str, Any], agent: str, frame: Frame, *, caller: str = "",
                   who: Caller | None = None) -> Any:
        """``method`` (a key of ``protocol.METHODS``) for ``agent``; a stream is framed by
        ``frame``. ``caller`` names who sent it (``request.caller_of``): a message that
        answers a question of a task's work (an approval) is decided in its name. ``who``
        is the authenticated caller (None: a test's, with every right)."""
        row = protocol.METHODS[method]
        dialect, op = row.dialect, row.op
        check_ids(params)
        permit(who, op, agent)
        if op == "send":
            return await self.send(params, agent, dialect, caller=caller, who=who)
        if op == "stream":
            task = await self._start_with_push(params, agent, dialect, caller, who)
            return await self._stream(task, dialect, frame, new=True)
        if op == "resubscribe":
            task = await self.engine.find(task_id(params), who)
            if task.terminal:
                raise UnsupportedOperation(f"task {task.id} is {task.state}: nothing more will happen to it")
            return await self._stream(task, _answering(row, task), frame)
        if op == "get":
            task = await self.engine.find(task_id(params), who)
            return dialects.render_task(task, _answering(row, task), history_length=history_length(params))
        if op == "cancel":
            task = await self.engine.cancel(task_id(params), who)
            return dialects.render_task(task, _answering(row, task))
        if op == "list":
            return await self._list(params, who)
        if op == "extended_card":
            raise RpcError(protocol.EXTENDED_CARD_NOT_CONFIGURED, "this agent has no extended card")
        if who is not None:  # a push config of another's task: not found, like the task
            named = params.get("taskId") or params.get("id")
            await self.engine.find(named if isinstance(named, str) else "", who)
        if dialect == "1.0":  # the 1.0 push methods name their params differently
            return await self._push_10(op, params)
        return await self._push_03(op, params)

    # --- Sending ----------------------------------------------------------------------------

    async def send(self, params: dict[str, Any], agent: str, dialect: str, *, caller: str = "",
                   who: Caller | None = None) -> Any:
        configuration = params.get("configuration") if isinstance(params.get("configuration"), dict) else {}
        blocking = protocol.is_blocking(dialect, configuration)
        task = await self._start_with_push(params, agent, dialect, caller, who, settle_later=blocking)
        if blocking:
            with trio.move_on_after(BLOCKING_WAIT_SECS):
                await self.engine.wait(task.id)
        await self.engine.settle(task.id)  # what the answer shows is written: any node reads it next
        if task.reply is not None and TRAITS[dialect].message_replies:  # the agent answered with a Message, not a task
            reply = msgspec.structs.replace(task.reply, task_id=None)
            return dialects.wrap_result(dialects.render_message(reply, dialect), "message", dialect)
        length = configuration.get("historyLength", params.get("historyLength"))
        rendered = dialects.render_task(task, dialect, history_length=length
                                        if isinstance(length, int) and length >= 0 else None)
        return dialects.wrap_result(rendered, "task", dialect)

    async def _start(self, params: dict[str, Any], agent: str, dialect: str, caller: str = "",
                     who: Caller | None = None, settle_later: bool = False) -> Task:
        check_ids(params)  # again: the seed's REST route calls send() directly
        message = dialects.parse_message(params.get("message"))
        names_task = TRAITS[dialect].client_names_task
        if self.admit is not None and not await self._answers(params.get("id") if names_task else message.task_id, who):
            self.admit(agent, who)  # not this caller's agent, or a spent budget: no task, no work
        if names_task:  # the client chooses the task id; sessionId is the context
            named = params.get("id")
            if not isinstance(named, str) or not named:
                raise BadMessage("tasks/send needs params.id (the task id, chosen by the client)")
            if isinstance(params.get("sessionId"), str):
                message.context_id = params["sessionId"]
            try:
                await self.engine.find(named)  # another's: the send below says not found
                message.task_id = named
            except TaskNotFound:
                return await self.engine.send(agent, message, task_id=named, dialect=dialect, caller=caller, who=who,
                                              settle_later=settle_later)
        return await self.engine.send(agent, message, dialect=dialect, caller=caller, who=who,
                                      settle_later=settle_later)

    async def _answers(self, named: Any, who: Caller | None) -> bool:
        """Whether a message on the task ``named`` answers its running work's question."""
        if not isinstance(named, str) or not named:
            return False
        try:
            return (await self.engine.find(named, who)).asking
        except TaskNotFound:
            return False

    async def _start_with_push(self, params: dict[str, Any], agent: str, dialect: str, caller: str = "",
                               who: Caller | None = None, settle_later: bool = False) -> Task:
        task = await self._start(params, agent, dialect, caller, who, settle_later)
        configuration = params.get("configuration") if isinstance(params.get("configuration"), dict) else {}
        webhook = (configuration.get("taskPushNotificationConfig") or configuration.get("pushNotificationConfig")
                   or params.get("pushNotification"))
        if webhook:  # registered before the work's first event goes out
            try:
                await self.push.set(task.id, webhook, dialect)
            except A2aError:
                await self.engine.cancel(task.id)
                raise
        return task

    # --- Streams ----------------------------------------------------------------------------

    async def _stream(self, task: Task, dialect: str, frame: Frame, *, new: bool = False) -> StreamResponse:
        """The task's events as SSE. ``new``: the stream of a send, where the agent may
        still answer with a Message (then that message is the whole stream)."""
        receive = await self.engine.subscribe(task.id, after=task.version)
        traits = TRAITS[dialect]
        if traits.stream_task:
            snapshot = dialects.wrap_result(dialects.render_task(task, dialect), "task", dialect)
        else:
            snapshot = dialects.render_event(StatusEvent(task_id=task.id, context_id=task.context_id, state=task.state,
                                                         timestamp=task.timestamp), dialect)

        async def produce(send: trio.MemorySendChannel[bytes]) -> None:
            async with receive:
                pending = None
                if new and traits.message_replies:
                    # An agent may answer with a Message: then the stream is that one
                    # message. So the task goes out only with its first event.
                    try:
                        pending = await receive.receive()
                    except trio.EndOfChannel:
                        pending = None
                    if task.reply is not None:
                        reply = msgspec.structs.replace(task.reply, task_id=None)
                        await send.send(frame(dialects.wrap_result(dialects.render_message(reply, dialect),
                                                                   "message", dialect)))
                        return
                await send.send(frame(snapshot))
                if pending is not None:
                    await send.send(frame(dialects.render_event(pending, dialect)))
                async for event in receive:
                    await send.send(frame(dialects.render_event(event, dialect)))

        return StreamResponse(produce)

    # --- Listing and push configs -----------------------------------------------------------

    async def _list(self, params: dict[str, Any], who: Caller | None) -> dict[str, Any]:
        state = _status_filter(params.get("status"))
        size = params.get("pageSize") if isinstance(params.get("pageSize"), int) else 50
        size = max(1, min(size, 100))
        try:
            start = int(params.get("pageToken") or 0)
        except (TypeError, ValueError):
            raise RpcError(INVALID_PARAMS, "invalid pageToken") from None
        if not 0 <= start <= 1_000_000_000:
            raise RpcError(INVALID_PARAMS, "invalid pageToken")
        page, total = await self.engine.list(context_id=params.get("contextId") or None,
                                             state=state, who=who,
                                             offset=start, limit=size)
        length = params.get("historyLength")
        include = bool(params.get("includeArtifacts"))
        return {"tasks": [dialects.render_task(t, "1.0", include_artifacts=include,
                                               history_length=length if isinstance(length, int) else None)
                          for t in page],
                "nextPageToken": str(start + size) if start + size < total else "",
                "pageSize": size, "totalSize": total}

    async def _push_10(self, op: str, params: dict[str, Any]) -> Any:
        if op == "push_set":
            raw = params.get("pushNotificationConfig") or params.get("config") or params
            return await self.push.set(string(params, "taskId"), raw, "1.0")
        if op == "push_get":
            return await self.push.get(string(params, "taskId"), params.get("id"), "1.0")
        if op == "push_list":
            return {"configs": await self.push.list(string(params, "taskId"), "1.0"), "nextPageToken": ""}
        await self.push.delete(string(params, "taskId"), string(params, "id"))
        return {}

    async def _push_03(self, op: str, params: dict[str, Any]) -> Any:
        if op in ("push_set", "push_set_legacy"):
            named = params.get("taskId") or params.get("id")
            config = await self.push.set(named if isinstance(named, str) else "", params.get("pushNotificationConfig"),
                                         "0.3")
            if op == "push_set":
                return config
            return {"id": named, **{k: v for k, v in config.items() if k != "taskId"}}
        if op == "push_get":
            return await self.push.get(task_id(params), params.get("pushNotificationConfigId"), "0.3")
        if op == "push_list":
            return await self.push.list(task_id(params), "0.3")
        await self.push.delete(task_id(params), string(params, "pushNotificationConfigId"))
        return None


# ProtoJSON may carry an enum as its number (a2a.proto's TaskState).
_STATE_NUMBERS = ("TASK_STATE_UNSPECIFIED", "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED",
                  "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_REJECTED",
                  "TASK_STATE_AUTH_REQUIRED")


def _status_filter(value: Any) -> str | None:
    """ListTasks' ``status`` as a tern state, None for no filter (absent, empty, or the proto's
    UNSPECIFIED default). A value that names no state is -32602: answering an empty list would
    tell the caller that no task is in a state that does not exist."""
    if isinstance(value, str) and value.isdigit():  # an HTTP+JSON query parameter
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(_STATE_NUMBERS):
        value = _STATE_NUMBERS[value]
    if value is None or value in ("", "TASK_STATE_UNSPECIFIED"):
        return None
    state = dialects.parse_state(value)
    if state == "unknown":
        raise RpcError(INVALID_PARAMS, f"unknown status {value!r}: ListTasks takes a TaskState (TASK_STATE_*)")
    return state


def permit(who: Caller | None, op: str, agent: str) -> None:
    """403 unless ``who`` holds the scope ``op`` needs: ``message`` for a send or a
    stream, the card its own route's, anything else ``tasks``. Whether it may reach
    ``agent`` is the kernel's decision (``AgentPort.admit``, then ``send``), not a binding's."""
    if who is None or op == "extended_card":
        return
    if op in ("send", "stream"):
        if not who.allows("message"):
            raise HttpError(403, f"the key {who.name!r} lacks the scope 'message' that sending needs")
    elif not who.allows("tasks"):
        raise HttpError(403, f"the key {who.name!r} lacks the scope 'tasks' that reading tasks needs")


def _answering(row: protocol.Method, task: Task) -> str:
    """The dialect an answer about ``task`` is in: the task's own when the method speaks
    it (tasks/get of a 0.1 task answers in 0.1), else the method's."""
    return task.dialect if task.dialect in row.dialects else row.dialect
