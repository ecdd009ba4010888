"""A connected MCP server: start it, list its tools, call them, close it.

``McpClient.connect`` runs the transport and the session in a nursery the caller owns
(the supervisor's, or a test's), rather than hiding a nursery inside an async context
manager: that keeps exception groups from leaking out of ``async with`` blocks.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import AsyncIterator, Callable

import trio

from runtime.config import HttpTransport as HttpConfig, McpServerEntry, StdioTransport as StdioConfig
from runtime.errors import ConnectionLost, ProtocolError, RpcError, TernError, TernTimeout
from runtime.log import get_logger
from runtime.mcp import protocol
from runtime.mcp.client import tasks
from runtime.mcp.client.session import InputHandler, McpSession, NotificationHandler
from runtime.wire.retry import Backoff
from runtime.wire import jsonrpc

__all__ = ["McpClient", "MAX_TOOL_PAGES"]

log = get_logger("mcp")
MAX_TOOL_PAGES = 100
TaskCallback = Callable[[dict[str, Any]], None]  # {"task": id, "status": ..., "message"?, "by"?}


def make_transport(entry: McpServerEntry, policy: Any = None, *, state_dir: str = "", authorizer: Any = None) -> Any:
    """The transport object for a configured server. Imported lazily, so a config
    with only stdio servers never pays for importing httpx. ``policy`` is the SSRF
    guard's AddressPolicy (default: metadata and link-local blocked, nothing else).
    ``state_dir`` holds OAuth tokens; ``authorizer`` completes a login (none in the daemon)."""
    if isinstance(entry.transport, StdioConfig):
        from runtime.mcp.client.stdio import StdioTransport

        return StdioTransport(entry.name, entry.transport, entry.env)
    from runtime.net.guard import AddressPolicy

    policy = policy or AddressPolicy()
    if isinstance(entry.transport, HttpConfig):
        from runtime.mcp.client.streamable_http import StreamableHttpTransport

        return StreamableHttpTransport(entry.name, entry.transport, policy=policy, timeout_secs=entry.timeout_secs,
                                       state_dir=state_dir, authorizer=authorizer)
    from runtime.mcp.client.legacy_sse import LegacySseTransport

    return LegacySseTransport(entry.name, entry.transport, policy=policy, timeout_secs=entry.timeout_secs,
                              state_dir=state_dir, authorizer=authorizer)


class McpClient:
    """One live connection to one MCP server."""

    def __init__(self, entry: McpServerEntry, session: McpSession) -> None:
        self.entry = entry
        self.session = session
        self._support: dict[str, tasks.Support] = {}  # tool -> its execution.taskSupport, as last listed

    @classmethod
    async def connect(cls, entry: McpServerEntry, nursery: trio.Nursery, *,
                      roots: list[str] | None = None,
                      on_notification: NotificationHandler | None = None,
                      transport: Any = None, policy: Any = None, on_input: InputHandler | None = None,
                      input_methods: tuple[str, ...] = ("elicitation/create",), state_dir: str = "") -> McpClient:
        """Start the server's transport in ``nursery``, negotiate, and return the client.

        On failure everything started is closed again before the error propagates.
        """
        transport = transport or make_transport(entry, policy, state_dir=state_dir)
        session = McpSession(transport, name=entry.name, timeout_secs=entry.timeout_secs, roots=roots,
                             on_notification=on_notification, on_input=on_input, input_methods=input_methods)
        try:
            await transport.start(nursery)
            await nursery.start(session.run)
            await session.open(entry.protocol)
        except BaseException:
            await session.aclose()
            raise
        return cls(entry, session)

    @property
    def info(self) -> protocol.ServerInfo:
        assert self.session.info is not None
        return self.session.info

    @property
    def closed(self) -> trio.Event:
        return self.session.closed

    async def list_tools(self) -> list[protocol.McpTool]:
        """Every tool, following ``nextCursor`` (bounded, and a repeated cursor ends it).
        A tool with invalid ``x-mcp-header`` declarations is left out (and logged)."""
        tools: list[protocol.McpTool] = []
        async for result in self._pages("tools/list"):
            page, _ = protocol.parse_tools_page(result)
            tools.extend(page)
        tools, refused = self.session.connection.note_tools(tools)
        self._support = {tool.name: tasks.support(tool.execution) for tool in tools}
        for name, reason in refused:
            log.warning("MCP server '%s': tool %r left out: %s", self.entry.name, name[:100], reason)
        return tools

    async def _pages(self, method: str) -> AsyncIterator[dict[str, Any]]:
        """Each page of a paginated list, following ``nextCursor`` (at most
        ``MAX_TOOL_PAGES``; a repeated cursor ends it)."""
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_TOOL_PAGES):
            result = await self.session.request(method, {"cursor": cursor} if cursor else None)
            if not isinstance(result, dict):
                raise ProtocolError(f"the {method} result is not an object")
            yield result
            cursor = result.get("nextCursor") if isinstance(result.get("nextCursor"), str) else None
            if not cursor:
                break
            if cursor in seen:
                log.warning("MCP server '%s' repeated a %s cursor; stopped paging", self.entry.name, method)
                break
            seen.add(cursor)

    async def list_resources(self) -> list[dict[str, Any]]:
        """Every resource (``uri``, ``name`` and what else the server says), paginated."""
        return [item async for item in self._items("resources/list", "resources", "uri")]

    async def list_prompts(self) -> list[dict[str, Any]]:
        """Every prompt (``name``, ``description``, ``arguments``), paginated."""
        return [item async for item in self._items("prompts/list", "prompts", "name")]

    async def _items(self, method: str, key: str, required: str) -> AsyncIterator[dict[str, Any]]:
        async for result in self._pages(method):
            for item in result.get(key) or []:
                if isinstance(item, dict) and isinstance(item.get(required), str):
                    yield item

    async def read_resource(self, uri: str, *, timeout_secs: float | None = None) -> dict[str, Any]:
        """``resources/read``: the result (``contents``), answering input requests (MRTR)."""
        return await self._complete("resources/read", {"uri": uri}, timeout_secs)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None, *,
                         timeout_secs: float | None = None) -> dict[str, Any]:
        """``prompts/get``: the result (``messages``), answering input requests (MRTR)."""
        return await self._complete("prompts/get", {"name": name, "arguments": arguments or {}}, timeout_secs)

    async def _complete(self, method: str, params: dict[str, Any], timeout_secs: float | None) -> dict[str, Any]:
        limit = self.entry.timeout_secs if timeout_secs is None else min(timeout_secs, self.entry.timeout_secs)
        result = await self.session.call(method, params, timeout_secs=limit)
        if not isinstance(result, dict):
            raise ProtocolError(f"the {method} result is not an object")
        return result

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *,
                        timeout_secs: float | None = None,
                        on_progress: Callable[[dict[str, Any]], None] | None = None,
                        on_task: TaskCallback | None = None) -> protocol.CallResult:
        """Call a tool by its original name. A tool failure is ``result.is_error``;
        protocol faults raise RpcError, timeouts TernTimeout, a dead server ConnectionLost.

        The call may take the smaller of ``timeout_secs`` (the pipeline's) and the
        server's own ``timeout_secs``: either side can bound a server it distrusts.
        A call the server runs as a task (``tasks.py``) may take ``timeout_secs``
        in all, each request within the server's; ``on_task`` hears its id and each
        status it reaches."""
        limit = self.entry.timeout_secs if timeout_secs is None else min(timeout_secs, self.entry.timeout_secs)
        total = self.entry.timeout_secs if timeout_secs is None else timeout_secs
        offered = tasks.dialect(self.info)
        params = {"name": name, "arguments": arguments or {},
                  **tasks.task_params(self.entry.name, name, self._support.get(name, "forbidden"), offered, total)}
        deadline = trio.current_time() + total
        result = await self.session.call("tools/call", params, timeout_secs=limit, on_progress=on_progress)
        envelope = tasks.created(result, offered)
        if envelope is not None:
            if offered is None:
                raise ProtocolError(f"MCP server '{self.entry.name}' answered {name} with a task, "
                                    "but it offers no tasks")
            result = await self._run_task(name, tasks.Task(self.entry.name, offered, envelope), deadline, on_task)
        return protocol.parse_call_result(result)

    async def _run_task(self, tool: str, task: tasks.Task, deadline: float, on_task: TaskCallback | None) -> Any:
        """Poll ``task`` until it ends (a status notification polls sooner, never more
        often than ``MIN_POLL_SECS``), answering its questions with the session's
        ``on_input``; its result. A task given up (deadline, caller cancelled, a fault)
        is cancelled upstream."""
        session, server = self.session, self.entry.name
        nudged = trio.lowlevel.ParkingLot()
        session.task_watchers[task.id] = nudged.unpark_all

        def tell(**extra: Any) -> None:
            if on_task is not None:
                on_task({"task": task.id, "status": task.status, **({"message": task.message} if task.message else {}),
                         **extra})

        def remaining() -> float:
            left = deadline - trio.current_time()
            if left <= 0:
                raise TernTimeout(f"MCP server '{server}' did not finish task {task.id} ({tool}) in time")
            return min(left, self.entry.timeout_secs)

        log.info("MCP server '%s' runs %s as task %s", server, tool, task.id)
        tell()
        polled = trio.current_time()
        try:
            while not task.finished:
                if task.questions:
                    asked_at = trio.current_time()
                    responses = {key: await session.answer_input(method, params)
                                 for key, (method, params) in task.questions.items()}
                    deadline += trio.current_time() - asked_at  # answering is not the server's time
                    await session.request("tasks/update", {"taskId": task.id, "inputResponses": responses},
                                          timeout_secs=remaining())
                    task.asked(list(responses))
                elif task.dialect == "experimental" and task.status == "input_required":
                    break  # its questions come as requests, while tasks/result waits
                with trio.move_on_at(min(polled + task.next_poll(), deadline)):
                    await nudged.park()
                await trio.sleep_until(polled + tasks.MIN_POLL_SECS)  # a flood of notifications is not a flood of polls
                polled = trio.current_time()
                try:
                    detailed = await session.request("tasks/get", {"taskId": task.id}, timeout_secs=remaining())
                except RpcError as exc:
                    if exc.code != jsonrpc.INVALID_PARAMS:
                        raise
                    task.status = "cancelled"  # nothing left to cancel
                    raise ProtocolError(f"MCP server '{server}' no longer knows task {task.id} ({tool}): it ended "
                                        f"or its ttl passed ({exc.message[:200]})") from None
                if task.update(detailed):
                    tell()
            result = task.result()
            if result is None:  # the experimental dialect: its result (and its questions) through tasks/result
                remaining()  # past the deadline already: said as such
                result = await session.request(tasks.RESULT, {"taskId": task.id},
                                               timeout_secs=deadline - trio.current_time())
                task.status = "completed"
            return result
        finally:
            session.task_watchers.pop(task.id, None)
            if not task.finished:
                await self._cancel_task(task, tell)

    async def _cancel_task(self, task: tasks.Task, tell: Callable[..., None]) -> None:
        """``tasks/cancel`` for a task given up, shielded and bounded: nothing is left
        running upstream that tern could stop."""
        with trio.CancelScope(shield=True):
            try:
                await self.session.request("tasks/cancel", {"taskId": task.id}, timeout_secs=tasks.CANCEL_WAIT_SECS)
            except TernError as exc:
                log.warning("MCP server '%s': task %s could not be cancelled: %s", self.entry.name, task.id, exc)
                return
            log.info("MCP server '%s': task %s cancelled", self.entry.name, task.id)
            task.status = "cancelled"
            tell(by="tern")

    def listens(self) -> dict[str, bool]:
        """What ``subscriptions/listen`` would ask a 2026-07-28 server for: the
        ``list_changed`` notifications its capabilities offer (none in the handshake
        era, whose notifications need no request)."""
        info = self.info
        if info.era != "modern":
            return {}
        wanted = {"toolsListChanged": "tools", "promptsListChanged": "prompts", "resourcesListChanged": "resources"}
        offered = {name: value for name, value in info.capabilities.items() if isinstance(value, dict)}
        return {key: True for key, capability in wanted.items() if offered.get(capability, {}).get("listChanged")}

    async def listen(self, *, backoff_secs: float = 1.0, backoff_max_secs: float = 30.0) -> None:
        """Hold a ``subscriptions/listen`` stream open for as long as the connection
        lives (2026-07-28): its notifications reach ``on_notification`` like the
        handshake era's. A stream that ends is opened again after a backoff (doubling
        up to ``backoff_max_secs``, back to the start after a stream that lived longer
        than that). Events are not replayed, so whoever handles notifications should
        list again on ``notifications/subscriptions/acknowledged``: what changed while
        no stream was open was told to nobody. Returns at once if the server offers
        nothing to listen for, or refuses the method."""
        notifications = self.listens()
        if not notifications:
            return
        backoff = Backoff(backoff_secs, backoff_max_secs)
        while self.session.close_reason is None:
            started = trio.current_time()
            try:
                await self.session.request("subscriptions/listen", {"notifications": notifications},
                                            timeout_secs=math.inf)
                log.debug("MCP server '%s' ended its subscriptions/listen stream", self.entry.name)
            except ConnectionLost:
                return
            except RpcError as exc:
                if exc.code == -32601:  # offered list_changed but not the method: nothing to listen to
                    log.info("MCP server '%s' does not offer subscriptions/listen: %s", self.entry.name, exc)
                    return
                log.info("MCP server '%s': subscriptions/listen ended: %s", self.entry.name, exc)
            except TernError as exc:
                log.info("MCP server '%s': subscriptions/listen ended: %s", self.entry.name, exc)
            if trio.current_time() - started > backoff_max_secs:
                backoff.reset()  # it lived a while: not a failing loop
            await trio.sleep(backoff.next())

    async def aclose(self) -> None:
        await self.session.aclose()
