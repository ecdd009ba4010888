"""tern's MCP server protocol: one dispatcher for both eras, under any transport.

The transports (``stdio.py``, ``streamable_http.py``) parse JSON-RPC, keep a
``Peer`` per connection (stdio) or per ``Mcp-Session-Id`` (HTTP), and hand each
message to :meth:`McpServer.handle` with a way to send notifications related to it
(progress, log messages). ``handle`` returns the response, or None for notifications
and cancelled requests (the spec says a cancelled request gets no reply).

Eras are chosen per message, as a dual-era server must:

- a request whose ``params._meta`` carries ``io.modelcontextprotocol/protocolVersion``
  is **2026-07-28**: checked on its own (-32022 for another version, -32602 without
  client capabilities), answered with ``resultType`` and ``_meta`` serverInfo; no
  ``ping``, no ``logging/setLevel`` (the level comes per request in ``_meta``);
- anything else is the **handshake** era: ``initialize`` negotiates (the client's
  version if we speak it, else our latest), then ``tools/*``, ``ping`` and
  ``logging/setLevel``; requests before ``initialize`` get -32600 (ping excepted).

Tool failures are ``isError`` results; unknown tools and malformed params are JSON-RPC
errors (-32602), as the spec says.

A call that waits for a person's approval is put to the client's user (``asking.py``):
by ``elicitation/create`` in the handshake era (the server's own requests and the
client's answers are routed per peer by ``outbound.py``), inside ``input_required``
results in 2026-07-28 (``mrtr.py``), or, for a client that can do neither, by progress
or log notifications naming the approval, which is then decided elsewhere.
"""

from __future__ import annotations

import time
from typing import Any
from collections.abc import Awaitable, Callable

import trio
from msgspec import UNSET

from runtime import __version__, tracing
from runtime.config import Config
from runtime.errors import RpcError, TernError, TernTimeout, rpc_error
from runtime.wire.limits import check_name
from runtime.log import get_logger
from runtime.ports import ApprovalPort, Caller, ContentPort, EventPort, TaskPort, ToolPort
from runtime.mcp.server import reach
from runtime.mcp.server.catalog import HANDSHAKE_ONLY, METHODS as CATALOG_METHODS, Catalog
from runtime.mcp.server.asking import Asker, decide, elicitation, wants_form
from runtime.mcp.server.ask_call import AskStates, ask_handshake, ask_modern, conclude, error_result
from runtime.mcp.server.asks import Ask
from runtime.mcp.server.exposure import Exposure
from runtime.mcp.server.listen import listen
from runtime.mcp.server.mrtr import Mrtr, Parked
from runtime.mcp.server.outbound import ClientRequests
from runtime.mcp.server.paging import page
from runtime.mcp.server.sampling import SAMPLE_TIMEOUT_SECS, HandshakeSampler, can_sample, fit
from runtime.mcp.server.tasks import EXTENSION, TASK_METHODS, McpTasks, declared, missing_tasks
from runtime.mcp.protocol import (HANDSHAKE_VERSIONS, META_CAPABILITIES, META_PREFIX, META_VERSION, MODERN_VERSION,
                                  UNSUPPORTED_VERSION)
from runtime.wire import jsonrpc

__all__ = ["McpServer", "Peer", "Notify", "LOG_LEVELS", "MODERN_METHODS", "TASK_METHODS"]

log = get_logger("mcp.server")

META_LOG_LEVEL = META_PREFIX + "logLevel"
META_SERVER_INFO = META_PREFIX + "serverInfo"
META_CLIENT_INFO = META_PREFIX + "clientInfo"
ELICITATION_SINCE = "2025-06-18"  # the first handshake version with elicitation
FORM_MODE_SINCE = "2025-11-25"  # the first with elicitation modes (and so the "mode" field)
#: RFC 5424 severities, least to most severe, as MCP logging names them.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
PROGRESS_INTERVAL_SECS = 0.05  # progress notifications are coalesced to at most 20 a second
LIST_TTL_MS = 30_000
MODERN_METHODS = ("server/discover", "tools/list", "tools/call", "subscriptions/listen",
                  *(method for method in CATALOG_METHODS if method not in HANDSHAKE_ONLY))

#: Sends one message to the client: a notification, or the server's own request when it
#: has an ``id`` (stdio: the same pipe; HTTP: the SSE stream of the request being answered).
Notify = Callable[[dict[str, Any]], Awaitable[None]]


class Peer:
    """One client as the server sees it: a stdio connection or an HTTP MCP session."""

    def __init__(self, label: str, caller: Caller | None = None) -> None:
        self.label = label  # for the audit record: "mcp:stdio", "mcp:http:127.0.0.1"
        self.caller = caller  # the key the HTTP session was opened with (None: stdio, tern's own user)
        self.initialized = False  # an initialize request was answered
        self.version = ""
        self.log_level: str | None = None  # handshake era, set by logging/setLevel
        self.inflight: dict[Any, Any] = {}  # request id -> the pipeline Run of its tools/call
        self.last_seen = time.monotonic()
        self.capabilities: dict[str, Any] = {}  # the client's, from initialize
        self.client_name = ""  # its clientInfo name, to say who decided an approval
        self._requests: ClientRequests | None = None
        self.subscriptions: set[str] = set()  # resources/subscribe (bounded by catalog.MAX_SUBSCRIPTIONS)

    @property
    def requests(self) -> ClientRequests:
        """This server's requests to the client, waiting for answers (made on first use:
        most peers, every 2026-07-28 POST among them, never need one)."""
        if self._requests is None:
            self._requests = ClientRequests()
        return self._requests

    def by(self) -> str:
        """Who decided, for an approval decided through this client."""
        return f"{self.label} ({self.client_name})" if self.client_name else self.label

    def cancel_all(self) -> None:
        for run in list(self.inflight.values()):
            run.cancel()


class _Waiting:
    """An ask's questions in ``Peer.inflight``, where the client's cancel finds them."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self.scope.cancel()


class _Cancelled(Exception):
    """The client cancelled this request: it gets no reply."""


class McpServer:
    """The MCP dispatcher over the kernel's ports: ``tools`` (the pipeline), ``events``
    (to see the exposed set change) and ``approvals`` (to decide what a client's user
    answers; None: calls that wait for approval are only announced). ``run`` is the
    server's own nursery, where 2026-07-28 calls that wait for approval live between
    their requests; without it those calls are announced, not asked."""

    def __init__(self, config: Config, tools: ToolPort, events: EventPort,
                 approvals: ApprovalPort | None = None, content: ContentPort | None = None,
                 tasks: TaskPort | None = None) -> None:
        self.tools = tools
        self.approvals = approvals
        self.mrtr = Mrtr(keep_secs=config.governance.approval_timeout_secs + 60.0)
        self.ask_states = AskStates(self.mrtr)
        self.exposure = Exposure(config, tools, events)
        self.catalog = Catalog(config, content, events)  # resources, prompts, completion (content None: none)
        settings = config.mcp_server
        self.caller_may_approve = settings.caller_may_approve  # node.reload sets it again
        self.page_size = max(1, settings.page_size)
        self.instructions = settings.instructions or (
            "tern hosts agents. Each tern_agent_* tool sends that agent a message and returns its reply; "
            "pass the reply's context_id back to continue a conversation.")
        self.server_info = {"name": "tern", "title": "tern agent runtime", "version": __version__}
        self.capabilities: dict[str, Any] = {"tools": {"listChanged": True}, "logging": {}, "completions": {},
                                             "resources": {"subscribe": True, "listChanged": True},
                                             "prompts": {"listChanged": True}}
        # 2026-07-28 sends changes only on subscriptions/listen (listen.py).
        self.modern_capabilities: dict[str, Any] = {
            "tools": {"listChanged": True}, "logging": {}, "completions": {},
            "resources": {"subscribe": True, "listChanged": True}, "prompts": {"listChanged": True}}
        self.tasks = McpTasks(tasks, approvals) if tasks is not None else None  # the A2A engine's, over a port
        if self.tasks is not None:
            self.modern_capabilities["extensions"] = {EXTENSION: {}}

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Until cancelled: the nursery of 2026-07-28 calls between their legs (``mrtr.py``)."""
        await self.mrtr.run(task_status=task_status)

    # --- Entry point --------------------------------------------------------------------

    async def handle(self, message: Any, peer: Peer, notify: Notify | None) -> Any:
        """Answer one parsed message: a jsonrpc Response/ErrorResponse, or None."""
        peer.last_seen = time.monotonic()
        if isinstance(message, jsonrpc.Notification):
            self._notification(message, peer)
            return None
        if not isinstance(message, jsonrpc.Request):
            peer.requests.answer(message)  # the client's answer to one of our requests
            return None
        try:
            return jsonrpc.Response(message.id, await self._request(message, peer, notify))
        except _Cancelled:
            return None  # no reply, as the spec says
        except RpcError as error:
            return jsonrpc.error_answer(message.id, error)
        except TernError as error:  # a store down, a budget spent: said to the caller, not a bug of ours
            log.warning("MCP %s (id %r): %s", message.method, message.id, error)
            return jsonrpc.error_answer(message.id, rpc_error(error))
        except Exception as exc:  # a bug of ours: answer it, log it, keep serving
            log.exception("MCP %s (id %r) failed", message.method, message.id)
            return jsonrpc.error_response(message.id, jsonrpc.INTERNAL_ERROR,
                                          f"internal error: {type(exc).__name__}")

    def _notification(self, message: jsonrpc.Notification, peer: Peer) -> None:
        params = message.params if isinstance(message.params, dict) else {}
        if message.method == "notifications/initialized":
            peer.initialized = True
        elif message.method == "notifications/cancelled":
            run = peer.inflight.get(params.get("requestId"))
            if run is not None:
                run.cancel()
        # every other notification (roots/list_changed, progress, ...) needs nothing from us

    async def _request(self, request: jsonrpc.Request, peer: Peer, notify: Notify | None) -> Any:
        params = request.params if isinstance(request.params, dict) else {}
        if request.params is not UNSET and not isinstance(request.params, dict):
            raise RpcError(jsonrpc.INVALID_PARAMS, "params must be an object")
        meta = params.get("_meta")
        if isinstance(meta, dict) and META_VERSION in meta:
            return await self._modern(request, params, meta, peer, notify)
        return await self._handshake(request, params, peer, notify)

    # --- Handshake era ------------------------------------------------------------------

    async def _handshake(self, request: jsonrpc.Request, params: dict[str, Any], peer: Peer,
                         notify: Notify | None) -> Any:
        method = request.method
        if method == "initialize":
            return self._initialize(params, peer)
        if method == "ping":
            return {}
        if method == "server/discover":
            raise RpcError(jsonrpc.INVALID_PARAMS, f"server/discover needs _meta[{META_VERSION!r}]")
        if method not in ("tools/list", "tools/call", "logging/setLevel", *CATALOG_METHODS):
            raise RpcError(jsonrpc.METHOD_NOT_FOUND, f"method not found: {method}")
        if not peer.initialized and not peer.version:
            raise RpcError(jsonrpc.INVALID_REQUEST, "not initialized: send initialize first (or, for "
                                                    f"{MODERN_VERSION}, put {META_VERSION} in params._meta)")
        if method == "tools/list":
            return self._tools_page(params, peer)
        if method in CATALOG_METHODS:
            reach.check(method, params, peer.caller, self.catalog.prompts, modern=False)
        if method == "prompts/get" and (ask := self.catalog.prompts.ask(params.get("name"))) is not None:
            return await self._prompt(request.id, ask, params, peer, notify, None)
        if method in CATALOG_METHODS:
            return reach.filtered(method, await self.catalog.handle(method, params, peer.subscriptions, modern=False),
                                  peer.caller, self.catalog.prompts)
        if method == "logging/setLevel":
            level = params.get("level")
            if level not in LOG_LEVELS:
                raise RpcError(jsonrpc.INVALID_PARAMS, f"level must be one of {', '.join(LOG_LEVELS)}")
            peer.log_level = level
            return {}
        return await self._call(request.id, params, peer, notify, peer.log_level)

    def _initialize(self, params: dict[str, Any], peer: Peer) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise RpcError(jsonrpc.INVALID_PARAMS, "initialize needs params.protocolVersion (a string)")
        # The spec: echo the client's version if we support it, else offer our latest.
        peer.version = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[0]
        capabilities = params.get("capabilities")
        peer.capabilities = capabilities if isinstance(capabilities, dict) else {}
        peer.client_name = _client_name(params.get("clientInfo"))
        return {"protocolVersion": peer.version, "capabilities": self.capabilities,
                "serverInfo": self.server_info, "instructions": self.instructions}

    # --- 2026-07-28 ---------------------------------------------------------------------

    async def _modern(self, request: jsonrpc.Request, params: dict[str, Any], meta: dict[str, Any], peer: Peer,
                      notify: Notify | None) -> Any:
        version = meta.get(META_VERSION)
        if version != MODERN_VERSION:
            raise RpcError(UNSUPPORTED_VERSION, "Unsupported protocol version",
                           {"supported": [MODERN_VERSION], "requested": version})
        if not isinstance(meta.get(META_CAPABILITIES), dict):
            raise RpcError(jsonrpc.INVALID_PARAMS, f"_meta[{META_CAPABILITIES!r}] (an object) is required")
        method = request.method
        if method in CATALOG_METHODS:  # what of the catalog this caller may reach (the tools' rule)
            reach.check(method, params, peer.caller, self.catalog.prompts, modern=True)
        if method == "server/discover":
            result = {"supportedVersions": [MODERN_VERSION, *HANDSHAKE_VERSIONS],
                      "capabilities": self.modern_capabilities,
                      "instructions": self.instructions, "cacheScope": "private", "ttlMs": LIST_TTL_MS}
        elif method == "tools/list":
            result = {**self._tools_page(params, peer), "cacheScope": "private", "ttlMs": LIST_TTL_MS}
            if self.tasks is not None:  # agent calls may become tasks
                result["tools"] = [{**tool, "execution": {"taskSupport": support}}
                                   if (support := self.exposure.task_support(tool["name"])) != "forbidden" else tool
                                   for tool in result["tools"]]
        elif method in TASK_METHODS and self.tasks is not None:
            result = await self.tasks.request(method, params, meta.get(META_CAPABILITIES), peer.by(), peer.caller)
            if isinstance(result.get("result"), dict):  # the inlined result, as tools/call would have answered
                result["result"].update(resultType="complete", _meta={META_SERVER_INFO: self.server_info})
        elif method == "tools/call":
            level = meta.get(META_LOG_LEVEL)
            result = await self._call(request.id, params, peer, notify, level if level in LOG_LEVELS else None,
                                      modern=meta)
        elif method == "subscriptions/listen":
            result = await self._listen(request.id, params, peer, notify)
        elif method == "prompts/get" and (ask := self.catalog.prompts.ask(params.get("name"))) is not None:
            result = await self._prompt(request.id, ask, params, peer, notify, meta)
        elif method in CATALOG_METHODS and method not in HANDSHAKE_ONLY:
            result = reach.filtered(method, await self.catalog.handle(method, params, None, modern=True),
                                    peer.caller, self.catalog.prompts)
        else:
            raise RpcError(jsonrpc.METHOD_NOT_FOUND, f"method not found: {method}")
        result.setdefault("resultType", "complete")
        result["_meta"] = {META_SERVER_INFO: self.server_info}
        return result

    def streams(self, message: Any) -> bool:
        """Whether a request may send the client something before its answer (so HTTP
        answers it on an SSE stream when the client takes one): a tool call's progress and
        questions, a listen stream, a prompt that asks."""
        if not isinstance(message, jsonrpc.Request):
            return False
        if message.method in ("tools/call", "subscriptions/listen"):
            return True
        params = message.params if isinstance(message.params, dict) else {}
        return message.method == "prompts/get" and self.catalog.prompts.ask(params.get("name")) is not None

    def refusal(self, message: Any) -> RpcError | None:
        """The error a 2026-07-28 ``tools/call`` of an ask gets before it starts (a
        capability the client lacks), so HTTP can answer it with its status, not on an
        event stream that already said 200."""
        params = message.params if isinstance(message, jsonrpc.Request) and message.method == "tools/call" else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        name = params.get("name") if isinstance(meta, dict) and META_VERSION in meta else None  # type: ignore[union-attr]
        ask = self.exposure.ask(name) if isinstance(name, str) else None
        if isinstance(name, str) and self.tasks is not None and isinstance(meta, dict) and \
                not declared(meta.get(META_CAPABILITIES)) and self.exposure.task_support(name) == "required":
            return missing_tasks()
        if ask is None or not isinstance(meta, dict):
            return None
        try:
            ask.check_capabilities(meta.get(META_CAPABILITIES))
        except RpcError as error:
            return error
        return None

    # --- Tools --------------------------------------------------------------------------

    def _may_answer(self, peer: Peer) -> bool:
        """Whether this client may answer its own calls' approval requests, so is asked:
        tern's own user (stdio), a key with the scope ``approvals``, or any key with
        ``[mcp_server] caller_may_approve`` (the kernel's approvals decide the same way)."""
        caller = peer.caller
        return caller is None or caller.allows("approvals") or self.caller_may_approve

    def _tools_page(self, params: dict[str, Any], peer: Peer) -> dict[str, Any]:
        return page(self.exposure.tools(peer.caller), params, self.page_size, "tools")

    async def _call(self, request_id: Any, params: dict[str, Any], peer: Peer, notify: Notify | None,
                    log_level: str | None, *, modern: dict[str, Any] | None = None) -> dict[str, Any]:
        """``_call_tool`` traced as a SERVER span, under the caller's ``_meta.traceparent``
        (else the current span: POST /mcp's). It covers the pipeline's ``execute_tool`` span
        of the call (the MCP conventions: one span, not two)."""
        if not tracing.enabled():
            return await self._call_tool(request_id, params, peer, notify, log_level, modern=modern)
        name = params.get("name")
        meta = params.get("_meta")
        parent = tracing.extract(meta.get("traceparent"), meta.get("tracestate")) if isinstance(meta, dict) else None
        named = isinstance(name, str)
        with tracing.span(f"tools/call {name}" if named else "tools/call", tracing.SERVER,
                          {"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool",
                           "jsonrpc.request.id": str(request_id)}, parent=parent,
                          covers="execute_tool") as span:
            if named:
                span.set("gen_ai.tool.name", name)
            result = await self._call_tool(request_id, params, peer, notify, log_level, modern=modern)
            if result.get("isError") is True and not span.failed:  # the pipeline's outcome says more
                span.error("tool_error")
            return result

    async def _call_tool(self, request_id: Any, params: dict[str, Any], peer: Peer, notify: Notify | None,
                         log_level: str | None, *, modern: dict[str, Any] | None = None) -> dict[str, Any]:
        """One tools/call, in a pipeline Run that ``notifications/cancelled`` (or the end
        of the session) cancels through ``peer.inflight``. ``modern``: the request's
        ``_meta`` in 2026-07-28 (None: the handshake era)."""
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(jsonrpc.INVALID_PARAMS, "tools/call needs params.name (a string)")
        check_name(name, "params.name (the tool name)")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise RpcError(jsonrpc.INVALID_PARAMS, "params.arguments must be an object")
        forwarded = False  # an ask's reply sent on to its send_to tool
        ask = self.exposure.ask(name)
        if ask is not None and modern is not None and self.tasks is not None and ask.config.task != "forbidden":
            task = self._ask_task(ask, arguments, params, modern.get(META_CAPABILITIES))
            if task is not None:
                return task
        if ask is not None:
            step = await self._ask(request_id, ask, arguments, params, peer, notify, modern)
            if isinstance(step, dict):
                return step
            (name, arguments), forwarded = step, True
            params = {key: value for key, value in params.items() if key not in ("requestState", "inputResponses")}
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        token = token if isinstance(token, (str, int)) and not isinstance(token, bool) else None
        reporter = None
        if notify is not None and (token is not None or log_level):  # something to report
            reporter = _Reporter(notify, token, log_level)
        if modern is not None:
            peer.client_name = _client_name(modern.get(META_CLIENT_INFO))
            state = params.get("requestState")
            capabilities = modern.get(META_CAPABILITIES)
            forms = self.approvals is not None and wants_form(capabilities) and self._may_answer(peer)
            if state is None and self.tasks is not None and declared(capabilities):
                task = await self._task(name, arguments, peer, capabilities, forms)
                if task is not None:
                    return task
            elif self.tasks is not None and self.exposure.task_support(name) == "required":
                raise missing_tasks()
            if not forwarded and (state is not None or (self.mrtr.available()
                                                        and (forms or can_sample(capabilities)))):
                return await self._call_parked(request_id, name, arguments, params, state, peer, reporter,
                                               capabilities)
            elicit, log_ok = False, _at_most_warning(log_level)  # 2026-07-28: no requests to the client
        else:
            elicit = peer.version >= ELICITATION_SINCE and wants_form(peer.capabilities) and self._may_answer(peer)
            log_ok = peer.log_level is None or _at_most_warning(peer.log_level)
        ask = None
        if notify is not None:
            ask = Asker(self.approvals, peer, notify, reporter, elicit=elicit, mode=peer.version >= FORM_MODE_SINCE,
                        log_ok=log_ok, by=peer.by(), who=peer.caller)
        sample = None
        if modern is None and notify is not None and can_sample(peer.capabilities):
            sample = HandshakeSampler(peer, notify)
        run = self.tools.run(None, progress=reporter.progress if reporter and reporter.token is not None else None,
                             log=reporter.log if reporter and log_level else None, ask=ask, sample=sample,
                             owner=peer.caller)
        peer.inflight[request_id] = run
        try:
            if reporter is None:
                result = await self.exposure.call(name, arguments, caller=peer.label, run=run, who=peer.caller)
            else:
                fault: RpcError | None = None
                async with trio.open_nursery() as nursery:  # the reporter's notifications go out before the answer
                    nursery.start_soon(reporter.run)
                    try:
                        result = await self.exposure.call(name, arguments, caller=peer.label, run=run, who=peer.caller)
                    except RpcError as exc:
                        fault = exc  # raised outside the nursery, not as an exception group
                    finally:
                        await reporter.finish()
                if fault is not None:
                    raise fault
        finally:
            if peer.inflight.get(request_id) is run:
                del peer.inflight[request_id]
        if run.cancelled:
            raise _Cancelled
        return result

    async def _listen(self, request_id: Any, params: dict[str, Any], peer: Peer, notify: Notify | None) -> Any:
        """A listen stream, until the client leaves; ``notifications/cancelled`` (stdio) ends it unanswered."""
        with trio.CancelScope() as scope:
            peer.inflight[request_id] = scope
            try:
                return await listen(request_id, params, notify, self.exposure, self.catalog)
            finally:
                if peer.inflight.get(request_id) is scope:
                    del peer.inflight[request_id]
        raise _Cancelled

    async def _task(self, name: str, arguments: dict[str, Any], peer: Peer, capabilities: Any,
              forms: bool) -> dict[str, Any] | None:
        """An agent call as a task of the A2A engine (``tasks.py``); None: call it now
        (not an agent, arguments the call itself should refuse, or no room)."""
        if self.exposure.task_support(name) == "forbidden" or not self.exposure.reachable(name, peer.caller):
            return None  # a tool this caller may not reach: the call itself says it is unknown
        resolved = self.exposure.resolve(name, arguments)
        if isinstance(resolved, str):
            return None  # the call itself says what is wrong
        agent = self.exposure.agent(resolved[0])
        arguments = resolved[1]
        message, context_id = arguments.get("message"), arguments.get("context_id")
        if (agent is None or not isinstance(message, str) or set(arguments) - {"message", "context_id"}
                or not (context_id is None or isinstance(context_id, str) and 0 < len(context_id) <= 200)
                or self.tasks is None or not self.tasks.available()):
            return None
        lender = Parked(name, "", peer.label)
        lender.forms = forms

        async def sample(request: dict[str, Any]) -> dict[str, Any]:
            with trio.move_on_after(SAMPLE_TIMEOUT_SECS):  # nobody sweeps a task: a client that never answers
                return await lender.sample(fit(request, capabilities))
            raise TernTimeout(f"the client did not answer a model turn within {SAMPLE_TIMEOUT_SECS:g} s")

        return await self.tasks.start(agent.name, message, context_id, peer.label, lender,
                                sample if can_sample(capabilities) else None, who=peer.caller)

    def _ask_task(self, ask: Ask, arguments: dict[str, Any], params: dict[str, Any],
                  capabilities: Any) -> dict[str, Any] | None:
        """A 2026-07-28 call of an ask with ``task`` set: a task whose questions are its
        ``inputRequests`` (``ask_task.py``) when the client declared the extension; None:
        asked by MRTR (a retry, or no room for another task)."""
        assert self.tasks is not None
        if not declared(capabilities):
            if ask.config.task == "required":
                raise missing_tasks()
            return None
        if params.get("requestState") is not None or not self.tasks.available():
            return None
        problem = ask.check_arguments(arguments)
        if problem:
            return error_result(f"invalid arguments: {problem}")
        ask.check_capabilities(capabilities)
        return self.tasks.start_ask(ask, arguments, capabilities)

    async def _ask(self, request_id: Any, ask: Ask, arguments: dict[str, Any], params: dict[str, Any], peer: Peer,
                   notify: Notify | None, modern: dict[str, Any] | None) -> dict[str, Any] | tuple[str, dict]:
        """An ask tool's questions (``ask_call.py``): a result, or the call to make next."""
        problem = ask.check_arguments(arguments)
        if problem:
            return error_result(f"invalid arguments: {problem}")
        step = await self._answers(request_id, ask, arguments, params, peer, notify, modern)
        if "answers" not in step:
            return step.get("result") or step["error"]
        return conclude(ask, arguments, step["answers"])

    async def _prompt(self, request_id: Any, ask: Ask, params: dict[str, Any], peer: Peer, notify: Notify | None,
                      modern: dict[str, Any] | None) -> dict[str, Any]:
        """``prompts/get`` of a prompt that asks first: its questions as an ask tool's
        (``input_required`` in 2026-07-28, the server's requests before), then the reply
        as the prompt's user message. What the call cannot use is a JSON-RPC error:
        a prompt has no error result."""
        arguments = params.get("arguments")
        arguments = {} if arguments is None else arguments
        problem = ask.check_arguments(arguments) if isinstance(arguments, dict) else "not an object"
        if problem:
            raise RpcError(jsonrpc.INVALID_PARAMS, f"invalid arguments: {problem}")
        step = await self._answers(request_id, ask, arguments, params, peer, notify, modern)
        if "error" in step:
            raise RpcError(jsonrpc.INVALID_PARAMS, step["error"]["content"][0]["text"])
        if "answers" not in step:
            return step["result"]
        result: dict[str, Any] = {"messages": [{"role": "user", "content": {
            "type": "text", "text": ask.reply(arguments, step["answers"])}}]}
        if ask.config.description:
            result["description"] = ask.config.description
        return result

    async def _answers(self, request_id: Any, ask: Ask, arguments: dict[str, Any], params: dict[str, Any],
                       peer: Peer, notify: Notify | None, modern: dict[str, Any] | None) -> dict[str, Any]:
        """An ask's questions put to the client in its era: ``{"answers"}`` when all are
        answered, else ``{"result"}`` (``input_required``) or ``{"error"}`` (``ask_call.py``)."""
        if modern is not None:
            ask.check_capabilities(modern.get(META_CAPABILITIES))
            step = ask_modern(ask, self.ask_states, arguments, params, modern.get(META_CAPABILITIES), peer.label)
        else:
            ask.check_capabilities(peer.capabilities)
            waiting = _Waiting()
            peer.inflight[request_id] = waiting  # notifications/cancelled ends the wait
            try:
                with waiting.scope:
                    step = await ask_handshake(ask, arguments, peer, notify, mode=peer.version >= FORM_MODE_SINCE)
            finally:
                if peer.inflight.get(request_id) is waiting:
                    del peer.inflight[request_id]
            if waiting.cancelled:
                raise _Cancelled
        return step

    async def _call_parked(self, request_id: Any, name: str, arguments: dict[str, Any], params: dict[str, Any],
                           state: Any, peer: Peer, reporter: _Reporter | None, capabilities: Any) -> dict[str, Any]:
        """A 2026-07-28 call from a client that answers forms: a new call is parked in
        the server's nursery; a retry (``requestState``) decides what its
        ``inputResponses`` answer and waits for the same call (``mrtr.py``)."""
        if state is not None:
            parked, answerable = self.mrtr.resume(state, name, arguments, peer.label)
            if parked.attached:
                raise RpcError(jsonrpc.INVALID_PARAMS, "another request is already waiting for this call")
            responses = params.get("inputResponses")
            responses = responses if isinstance(responses, dict) else {}
            for approval_id in answerable:
                answer = responses.get(approval_id)
                if answer is None or approval_id in parked.answered:
                    continue
                if approval_id in parked.samples:
                    parked.answered.add(approval_id)
                    parked.answer_sample(approval_id, answer)
                elif self.approvals is not None:
                    parked.answered.add(approval_id)
                    await decide(self.approvals, approval_id, answer, by=peer.by(), who=peer.caller)
        else:
            parked = self.mrtr.park(name, arguments, peer.label)
            parked.forms = self.approvals is not None and wants_form(capabilities) and self._may_answer(peer)

            async def sample(request: dict[str, Any]) -> dict[str, Any]:
                return await parked.sample(fit(request, capabilities))

            parked.run = self.tools.run(None, progress=parked.progress, log=parked.log, ask=parked.ask,
                                        sample=sample if can_sample(capabilities) else None, owner=peer.caller)

            async def call() -> dict[str, Any]:
                return await self.exposure.call(name, arguments, caller=peer.label, run=parked.run,
                                                 who=peer.caller)

            self.mrtr.launch(parked, call)
        return await self._leg(parked, request_id, peer, reporter)

    async def _leg(self, parked: Parked, request_id: Any, peer: Peer, reporter: _Reporter | None) -> dict[str, Any]:
        """Wait on a parked call for one request: its result when done, else
        ``input_required`` for the approvals it waits on. A leg that ends any other way
        (the client closed the stream, or cancelled) gives up the call."""
        parked.attached, parked.sink = True, reporter
        peer.inflight[request_id] = parked.run
        waited = False
        try:
            if reporter is None:
                await parked.wait()
            else:
                async with trio.open_nursery() as nursery:  # the leg's notifications go out before its answer
                    nursery.start_soon(reporter.run)
                    try:
                        await parked.wait()
                    finally:
                        await reporter.finish()
            waited = True
        finally:
            parked.attached, parked.sink = False, None
            parked.idle_since = trio.current_time()
            if peer.inflight.get(request_id) is parked.run:
                del peer.inflight[request_id]
            if not waited or parked.run.cancelled:
                parked.run.cancel()
                self.mrtr.drop(parked)
        if parked.run.cancelled:
            raise _Cancelled
        if not parked.done.is_set():
            return self.mrtr.input_required(parked, elicitation)
        self.mrtr.drop(parked)  # handed out once: a replayed state finds nothing
        if isinstance(parked.outcome, RpcError):
            raise parked.outcome
        if parked.outcome is None:
            raise RpcError(jsonrpc.INTERNAL_ERROR, "the server stopped before the call finished")
        return parked.outcome


def _client_name(info: Any) -> str:
    """A client's self-declared name, printable and short (it ends up in the audit log)."""
    name = info.get("name") if isinstance(info, dict) else None
    if not isinstance(name, str):
        return ""
    return "".join(c for c in name[:64] if c.isprintable())


def _at_most_warning(level: str | None) -> bool:
    return level in LOG_LEVELS and LOG_LEVELS.index(level) <= LOG_LEVELS.index("warning")


class _Reporter:
    """Progress and log notifications for one call. The tool's callbacks never block:
    they queue (bounded; extra log lines are dropped) and one task sends, coalescing
    progress to at most one notification per PROGRESS_INTERVAL_SECS."""

    def __init__(self, notify: Notify | None, token: str | int | None, log_level: str | None) -> None:
        self.notify = notify
        self.token = token if notify is not None else None
        self.min_level = LOG_LEVELS.index(log_level) if log_level in LOG_LEVELS else len(LOG_LEVELS)
        self._send, self._receive = trio.open_memory_channel[tuple[str, Any]](256)
        self._sent = 0
        self._done = trio.Event()

    def progress(self, text: str) -> None:
        self._offer(("progress", text))

    def log(self, level: str, text: str) -> None:
        if self.notify is not None and level in LOG_LEVELS and LOG_LEVELS.index(level) >= self.min_level:
            self._offer(("log", {"level": level, "logger": "tern", "data": text}))

    def _offer(self, item: tuple[str, Any]) -> None:
        try:
            self._send.send_nowait(item)
        except (trio.WouldBlock, trio.ClosedResourceError):
            pass  # a flood: drop rather than block the tool

    async def run(self) -> None:
        if self.token is not None:
            await self._progress("started")
        async with self._receive:
            async for kind, value in self._receive:
                if kind == "log":
                    await self._emit({"method": "notifications/message", "params": value})
                    continue
                latest = value
                with trio.move_on_after(PROGRESS_INTERVAL_SECS):
                    await self._done.wait()  # the call ended: flush now, don't make it wait
                while True:  # coalesce whatever arrived meanwhile
                    try:
                        kind, value = self._receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    if kind == "log":
                        await self._emit({"method": "notifications/message", "params": value})
                    else:
                        latest = value
                await self._progress(latest)

    async def finish(self) -> None:
        self._done.set()
        self._send.close()

    async def _progress(self, text: str) -> None:
        self._sent += 1
        await self._emit({"method": "notifications/progress",
                          "params": {"progressToken": self.token, "progress": self._sent,
                                     "message": text.strip()[-200:] or "working"}})

    async def _emit(self, notification: dict[str, Any]) -> None:
        if self.notify is None:
            return
        try:
            await self.notify(notification)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client is gone: its call is about to be cancelled too
