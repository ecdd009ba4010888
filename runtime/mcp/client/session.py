"""One MCP client session over any transport: ids, waiters, era negotiation.

Many requests may be in flight at once; each waits on its own waiter (id -> waiter),
and no lock is held across a call (writes are serialised by the transport, for the
length of one write only). When the connection ends, every waiting call fails at once
with ``ConnectionLost`` instead of sitting out its timeout. A call that passes its
deadline sends ``notifications/cancelled`` and raises ``TernTimeout``. Deadlines are
kept by one watchdog task per session rather than a cancel scope per call: a scope with
a deadline was a quarter of the client's cost of a local call.

Era negotiation with ``protocol = "auto"`` (fast against both kinds of server):

- **stdio**: send ``server/discover`` and ``ping`` together. A modern server answers
  discover; a legacy one answers discover with an error, or ignores it but answers the
  ``ping`` (allowed before ``initialize``); servers handle stdio messages in order, so
  a ping answer with no discover answer shortly after means "legacy". Either way the
  probe costs one round trip, never a long timeout. Only a server that answers
  nothing falls back after ``probe_timeout_secs``.
- **Streamable HTTP**: POST ``server/discover``; a legacy server answers with an HTTP
  error at once (so discover gets the full timeout: a slow answer is not a legacy one).
- **Legacy HTTP+SSE** exists only in the handshake era: straight to ``initialize``.

What to send and what each answer means is decided by the transport's sans-IO
``McpConnection`` (``connection.py``); this module does the sending and the waiting.

What a server asks (elicitation, sampling, roots) goes to the session's ``on_input``
callback, whether it comes as a handshake-era request or as a modern ``input_required``
result, which ``call`` answers and retries with a new id (MRTR, ``inputs.py``), at most
``MAX_ROUNDS`` times. Without a callback, elicitation and sampling are refused and not
declared as capabilities. The callback runs in the context (``contextvars``) of the call
the question belongs to, so whoever made that call can be asked: an ``input_required``
result is the call's own; a request that came on the call's own response stream
(Streamable HTTP: the transport's ``related(id)``) belongs to it; one that came on no
call's stream (stdio, legacy SSE, Streamable HTTP's standalone GET stream) belongs to
the one call in flight, if there is exactly one. Otherwise it belongs to no call. A server that offers the 2026-07-28
tasks extension gets it declared (``tasks.declare``); its task status notifications
wake the task's poller (``task_watchers``, see ``client.py``), nothing more.

A hostile server cannot make the session grow or flood the log: at most
``MAX_SERVER_REQUESTS`` of its requests are answered at once (one task each); beyond
that a request is refused at once with -32000 and no task (stdio: written only if the
pipe takes it without waiting; otherwise it goes unanswered). Its
``notifications/message`` go through a ``LogBudget`` (20/s, burst 100), each cut to
``MAX_LOG_MESSAGE_CHARS``, with one summary line a second of what was dropped.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import time
from typing import Any, Protocol
from collections.abc import Awaitable, Callable, Iterator

import trio
from msgspec import UNSET

from runtime import tracing
from runtime.errors import ConnectionLost, ProtocolError, RpcError, TernError, TernTimeout
from runtime.log import LogBudget, get_logger, log_wire, shorten
from runtime.mcp import protocol
from runtime.mcp.client import inputs, tasks
from runtime.ports import CALL_CLOCK, CallClock
from runtime.mcp.client.connection import DISCOVER, INITIALIZE, NO_ANSWER, PING, Legacy, McpConnection
from runtime.wire import jsonrpc

__all__ = ["MessageTransport", "McpSession", "TransportClosed", "InputHandler"]

log = get_logger("mcp")

#: After ``ping`` is answered, how long a discover answer may still take. Servers that
#: handle stdio messages in order have answered discover already; the SDK handles them
#: concurrently, and its discover answer comes within a millisecond of the ping's. A
#: later answer is not lost: if ``initialize`` then fails, the discover answer is used.
PING_GRACE_SECS = 0.05

MAX_SERVER_REQUESTS = 16  # a server's requests being answered at once
TOO_MANY_REQUESTS = -32000
MAX_LOG_MESSAGE_CHARS = 4096  # of one notifications/message, as logged
LOG_MESSAGES_PER_SEC = 20.0
LOG_MESSAGES_BURST = 100
INPUT_TIMEOUT_SECS = 600.0  # how long a server's question may wait for its answer (a person's, a model's)
_LEVELS = {"DEBUG": 10, "INFO": 20, "NOTICE": 20, "WARNING": 30, "ERROR": 40}


class TransportClosed(ConnectionLost):
    """The transport has no more messages (EOF, process exit, stream closed)."""


#: What a failed write can raise, whatever the transport.
SEND_ERRORS = (TransportClosed, trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class MessageTransport(Protocol):
    """Moves JSON-RPC messages. ``receive`` returns one message body (bytes) or raises
    TransportClosed; ``send`` may be called from several tasks at once and logs each
    message it writes (``log_wire``), since only the transport knows its encoded size.

    Optionally ``send_nowait(message) -> bool``: write a small message only if that
    needs no waiting (used to refuse a flood of server requests without a task)."""

    connection: McpConnection  # the era, version and session id, shared with the session

    async def start(self, nursery: trio.Nursery) -> None: ...

    async def send(self, message: jsonrpc.Message) -> None: ...

    async def receive(self) -> bytes: ...

    async def aclose(self) -> None: ...


class _Waiter:
    __slots__ = ("event", "result", "error", "method", "started", "deadline", "expired", "clock")

    def __init__(self, method: str, deadline: float) -> None:
        self.event = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.method = method
        self.started = time.perf_counter()
        self.deadline = deadline  # trio.current_time() by which the answer must come
        self.expired = False  # set by the watchdog, with the event
        self.clock = CallClock(self)  # stops while a question of the server about this call is answered


#: The waiter of the call a server's question belongs to, in the context that question is
#: answered in (so the call's timeout stops while someone answers).
_CALL_WAITER: contextvars.ContextVar[_Waiter | None] = contextvars.ContextVar("tern_mcp_call_waiter", default=None)


NotificationHandler = Callable[[str, Any], None]  # called on the reader task: must not block
#: Answers a server's ``elicitation/create`` or ``sampling/createMessage`` (method,
#: params) with its result; raises TernError to refuse. ``methods`` names those it answers.
#: An RpcError it raises is the server's answer as it stands (sampling rejected: -1).
InputHandler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class McpSession:
    """A client session with one MCP server. Start ``run`` in a nursery, then ``open``."""

    def __init__(self, transport: MessageTransport, *, name: str, timeout_secs: float = 30.0,
                 roots: list[str] | None = None, on_notification: NotificationHandler | None = None,
                 probe_timeout_secs: float = 5.0, on_input: InputHandler | None = None,
                 input_methods: tuple[str, ...] = ("elicitation/create",)) -> None:
        self.transport = transport
        self.connection = transport.connection
        self.on_input = on_input
        self.input_methods = input_methods if on_input is not None else ()
        self.connection.capabilities = inputs.capabilities("elicitation/create" in self.input_methods,
                                                           "sampling/createMessage" in self.input_methods)
        self.name = name
        self.timeout_secs = timeout_secs
        self.probe_timeout_secs = probe_timeout_secs
        self.roots = roots or []
        self.info: protocol.ServerInfo | None = None
        self._on_notification = on_notification
        self._ids = itertools.count(1)
        self._pending: dict[int | str, _Waiter] = {}
        self._progress: dict[int | str, Callable[[dict[str, Any]], None]] = {}
        self._calls: dict[int | str, contextvars.Context] = {}  # calls a server may ask about (MRTR_METHODS)
        self._questions: dict[int | str, set[trio.CancelScope]] = {}  # a call id -> its server requests answered now
        #: task id -> what wakes its poller when the server says the task moved
        self.task_watchers: dict[str, Callable[[], None]] = {}
        self._closed: BaseException | None = None
        self._nursery: trio.Nursery | None = None
        self._meta: dict[str, Any] | None = None
        self._watching = False  # the watchdog runs (inside ``run``)
        self._watch_at = math.inf  # the deadline it sleeps until
        self._watch_wake = trio.Event()  # set when a call needs it to wake sooner
        self._answering = 0  # server requests being answered (one task each)
        self._refused = LogBudget(1.0, 1)  # one warning a second about refused server requests
        self._log_budget = LogBudget(LOG_MESSAGES_PER_SEC, LOG_MESSAGES_BURST)
        self.closed = trio.Event()

    @property
    def close_reason(self) -> BaseException | None:
        """Why the connection ended (the error every waiting call got), or None."""
        return self._closed

    # --- The reader ---------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Read messages until the transport ends; then fail every waiting call."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._watchdog)
                self._watching = True
                task_status.started()
                while True:
                    try:
                        body = await self.transport.receive()
                    except TransportClosed as exc:
                        self._fail_all(ConnectionLost(f"MCP server '{self.name}' closed the connection"
                                                      f"{': ' + str(exc) if str(exc) else ''}"))
                        break
                    self._dispatch(body)
                nursery.cancel_scope.cancel()
        finally:
            self._watching = False
            self._fail_all(ConnectionLost(f"MCP server '{self.name}' connection ended"))
            self._log_dropped(trio.current_time(), final=True)
            self.closed.set()

    async def _watchdog(self) -> None:
        """Sleeps until the earliest deadline of a waiting call (or until a call with an
        earlier one starts), then expires every call past its deadline. A stream of calls
        that all answer in time wakes it about once per timeout period."""
        while True:
            self._watch_at = min((w.deadline for w in self._pending.values()), default=math.inf)
            with trio.move_on_at(self._watch_at):
                await self._watch_wake.wait()
            self._watch_wake = trio.Event()
            now = trio.current_time()
            for waiter in self._pending.values():
                if waiter.deadline <= now and not waiter.event.is_set():
                    waiter.expired = True
                    waiter.event.set()

    def _fail_all(self, error: BaseException) -> None:
        if self._closed is None:
            self._closed = error
        for waiter in self._pending.values():
            if not waiter.event.is_set():
                waiter.error = error
                waiter.event.set()
        self._pending.clear()

    def _dispatch(self, body: bytes) -> None:
        try:
            message = jsonrpc.parse(body)
        except jsonrpc.InvalidMessage as exc:
            preview = body[:120].decode("utf-8", "replace")
            log.warning("MCP server '%s' sent a line that is not JSON-RPC (%s); skipped: %r",
                        self.name, exc.message, preview)
            return
        if isinstance(message, (jsonrpc.Response, jsonrpc.ErrorResponse)):
            waiter = self._pending.pop(message.id, None) if message.id is not None else None
            if waiter is None:
                log.debug("MCP server '%s' answered unknown or finished request id %r", self.name, message.id)
                return
            log_wire("in", waiter.method, message.id, len(body), waiter.started, f"mcp:{self.name}")
            if isinstance(message, jsonrpc.Response):
                waiter.result = message.result
            else:
                error = message.error
                waiter.error = RpcError(error.code, error.message,
                                        None if error.data is UNSET else error.data)
            waiter.event.set()
        elif isinstance(message, jsonrpc.Request):
            log_wire("in", message.method, message.id, len(body), peer=f"mcp:{self.name}")
            if self._answering >= MAX_SERVER_REQUESTS:
                self._refuse(message)
                return
            assert self._nursery is not None
            self._answering += 1
            call_id, context = self._related(message.id)
            if context is None:
                self._nursery.start_soon(self._answer, message, None)
            else:  # the task inherits the call's context: its caller can be asked
                context.run(self._nursery.start_soon, self._answer, message, call_id)
        else:
            log_wire("in", message.method, None, len(body), peer=f"mcp:{self.name}")
            self._notification(message.method, message.params)

    def _related(self, request_id: Any) -> tuple[Any, contextvars.Context | None]:
        """The id and context of the call a server request belongs to (module docstring);
        ``(None, None)`` for none."""
        related = getattr(self.transport, "related", None)
        call_id = related(request_id) if related is not None else None
        if call_id is not None:
            return call_id, self._calls.get(call_id)
        # No call's stream carried it (stdio; HTTP's standalone GET stream, where a server
        # that asks outside a request handler sends it): the one call in flight, if one.
        if len(self._calls) == 1:
            return next(iter(self._calls.items()))
        return None, None

    async def _answer(self, request: jsonrpc.Request, call_id: Any) -> None:
        """Answer a server's request. One that belongs to a call ends with it: a question
        nobody can use any more is not left waiting for a person (who would answer it in vain)."""
        scope = trio.CancelScope()
        if call_id is not None:
            self._questions.setdefault(call_id, set()).add(scope)
        try:
            params = None if request.params is UNSET else request.params
            with scope:
                try:
                    reply: jsonrpc.Message = jsonrpc.Response(request.id,
                                                              await self.answer_input(request.method, params))
                except RpcError as exc:
                    reply = jsonrpc.error_response(request.id, exc.code, exc.message)
            if scope.cancelled_caught:
                reply = jsonrpc.error_response(request.id, -32603, "the call this request belongs to has ended")
            await self._send_quietly(reply)
        finally:
            self._answering -= 1
            if call_id is not None:
                waiting = self._questions.get(call_id)
                if waiting is not None:
                    waiting.discard(scope)
                    if not waiting:
                        del self._questions[call_id]

    async def answer_input(self, method: str, params: Any) -> Any:
        """The answer to a server's question, as a request (handshake era) or as one
        input request of an ``input_required`` result; RpcError to refuse it."""
        if method not in self.input_methods or self.on_input is None:
            return protocol.answer_server_request(method, params, self.roots)
        params = params if isinstance(params, dict) else {}
        clock = CALL_CLOCK.get()  # the tool call's own timeout in the pipeline
        try:
            with trio.fail_after(INPUT_TIMEOUT_SECS), self._paused(_CALL_WAITER.get()), \
                    (clock.paused() if clock is not None else contextlib.nullcontext()):
                answer = await self.on_input(method, params)
        except trio.TooSlowError:
            raise RpcError(-32603, f"{method} was not answered within {INPUT_TIMEOUT_SECS:g} s") from None
        except RpcError:  # the handler's own answer (a person rejected sampling: -1)
            raise
        except TernError as exc:
            raise RpcError(-32603, f"{method} refused: {exc}") from None
        if method == "elicitation/create":
            answer = inputs.with_defaults(params.get("requestedSchema"), answer)
        return answer

    @contextlib.contextmanager
    def _paused(self, waiter: _Waiter | None) -> Iterator[None]:
        """The call ``waiter`` waits for does not time out while its server's question is
        answered (a person may take minutes; the answer is bounded by INPUT_TIMEOUT_SECS)."""
        if waiter is None:
            yield
            return
        try:
            with waiter.clock.paused():
                yield
        finally:
            if waiter.deadline < self._watch_at:  # running again: the watchdog may sleep past it
                self._watch_wake.set()

    def _refuse(self, request: jsonrpc.Request) -> None:
        """Over ``MAX_SERVER_REQUESTS``: an error answer if the transport can write it
        without waiting, never a task; a warning a second at most."""
        send_nowait = getattr(self.transport, "send_nowait", None)
        reply = jsonrpc.error_response(request.id, TOO_MANY_REQUESTS, "too many concurrent requests")
        try:
            if send_nowait is not None:
                send_nowait(reply)
        except SEND_ERRORS:
            pass
        now = trio.current_time()
        if self._refused.admit(now):
            log.warning("MCP server '%s' sent more than %d requests at once; refusing the rest (-32000)",
                        self.name, MAX_SERVER_REQUESTS)
        self._log_dropped(now)

    def _log_dropped(self, now: float, *, final: bool = False) -> None:
        """The summaries: log messages dropped and requests refused since the last one."""
        dropped = self._log_budget.dropped(now, final=final)
        if dropped:
            log.warning("MCP server '%s': %d log messages dropped (over %g a second)", self.name, dropped,
                        LOG_MESSAGES_PER_SEC)
        refused = self._refused.dropped(now, final=final)
        if refused:
            log.warning("MCP server '%s': %d more requests refused (too many at once)", self.name, refused)

    def _notification(self, method: str, params: Any) -> None:
        params = params if isinstance(params, dict) else {}
        if method == "notifications/progress":
            callback = self._progress.get(params.get("progressToken"))  # type: ignore[arg-type]
            if callback is not None:
                callback(params)
        elif method in tasks.NOTIFICATIONS:
            wake = self.task_watchers.get(params.get("taskId"))  # type: ignore[arg-type]
            if wake is not None:
                wake()
        elif method == "notifications/message":
            self._server_log(params)
        if self._on_notification is not None:
            self._on_notification(method, params)

    def _server_log(self, params: dict[str, Any]) -> None:
        """A server's log message: rate-limited, cut to a bound (the formatter escapes
        control characters)."""
        now = trio.current_time()
        if self._log_budget.admit(now):
            numeric = _LEVELS.get(str(params.get("level", "info")).upper()[:16], 40)
            data = params.get("data")
            log.log(numeric, "MCP server '%s' (%s): %s", self.name, shorten(str(params.get("logger", "-")), 100),
                    shorten(data if isinstance(data, str) else repr(data), MAX_LOG_MESSAGE_CHARS))
        self._log_dropped(now)

    # --- Requests ----------------------------------------------------------------------

    async def _send_quietly(self, message: jsonrpc.Message) -> None:
        try:
            await self.transport.send(message)
        except SEND_ERRORS as exc:
            log.debug("MCP server '%s': could not send %s: %s", self.name, type(message).__name__, exc)

    def _start(self, method: str, timeout: float = math.inf) -> tuple[int | str, _Waiter]:
        if self._closed is not None:
            raise ConnectionLost(str(self._closed))
        request_id = next(self._ids)
        waiter = _Waiter(method, trio.current_time() + timeout)
        self._pending[request_id] = waiter
        if waiter.deadline < self._watch_at:
            self._watch_wake.set()
        return request_id, waiter

    def _params(self, params: dict[str, Any] | None) -> Any:
        if self._meta is not None:
            return protocol.with_meta(params, self._meta)
        return UNSET if params is None else params

    async def request(self, method: str, params: dict[str, Any] | None = None, *,
                      timeout_secs: float | None = None,
                      on_progress: Callable[[dict[str, Any]], None] | None = None) -> Any:
        """Send a request and wait for its result; raise RpcError, TernTimeout or ConnectionLost.
        Traced as a CLIENT span, whose context goes in ``params._meta`` (and, over HTTP, the headers)."""
        tool = params.get("name") if method == "tools/call" and params else None
        with tracing.span(f"{method} {tool}" if isinstance(tool, str) else method, tracing.CLIENT,
                          {"mcp.method.name": method, "server.address": self.name}) as span:
            if isinstance(tool, str):
                span.set("gen_ai.tool.name", tool)
            meta = tracing.meta()
            if meta is not None:
                params = dict(params or {})
                params["_meta"] = {**(params.get("_meta") or {}), **meta}
            return await self._request(method, params, timeout_secs, on_progress)

    async def _request(self, method: str, params: dict[str, Any] | None, timeout_secs: float | None,
                       on_progress: Callable[[dict[str, Any]], None] | None) -> Any:
        timeout = self.timeout_secs if timeout_secs is None else timeout_secs
        request_id, waiter = self._start(method, timeout)
        if on_progress is not None:
            params = dict(params or {})
            params["_meta"] = {**params.get("_meta", {}), "progressToken": request_id}
            self._progress[request_id] = on_progress
        if method in inputs.MRTR_METHODS or method == tasks.RESULT:  # an experimental task asks during tasks/result
            context = contextvars.copy_context()
            context.run(_CALL_WAITER.set, waiter)
            self._calls[request_id] = context
        try:
            try:
                await self.transport.send(jsonrpc.Request(request_id, method, self._params(params)))
            except SEND_ERRORS as exc:
                raise ConnectionLost(f"MCP server '{self.name}' cannot be written to: {exc}") from None
            if self._watching:
                await waiter.event.wait()  # the watchdog ends the wait at the deadline
            else:  # no reader yet (so no watchdog): only a timeout can end the wait
                with trio.move_on_at(waiter.deadline):
                    await waiter.event.wait()
        finally:
            self._progress.pop(request_id, None)
            self._calls.pop(request_id, None)
            for question in self._questions.pop(request_id, ()):
                question.cancel()
            if not waiter.event.is_set() or waiter.expired:
                self._pending.pop(request_id, None)
                if method != "initialize" and self._closed is None:
                    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                        await self._send_quietly(jsonrpc.Notification(
                            "notifications/cancelled", self._params({"requestId": request_id,
                                                                      "reason": "timed out or cancelled"})))
        if not waiter.event.is_set() or waiter.expired:
            raise TernTimeout(f"MCP server '{self.name}' did not answer {method} within {timeout:g} s")
        if waiter.error is not None:
            raise waiter.error
        return waiter.result

    async def call(self, method: str, params: dict[str, Any] | None = None, *,
                   timeout_secs: float | None = None,
                   on_progress: Callable[[dict[str, Any]], None] | None = None) -> Any:
        """``request``, answering ``input_required`` results (MRTR): each round's input
        requests are answered, and the request is sent again with a new id, the same
        params, ``inputResponses`` and the ``requestState`` echoed. ProtocolError after
        ``MAX_ROUNDS`` rounds. The result is the complete one."""
        sent = params
        for rounds in range(inputs.MAX_ROUNDS + 1):
            result = await self.request(method, sent, timeout_secs=timeout_secs, on_progress=on_progress)
            requests = inputs.input_requests(result)
            if requests is None:
                return result
            if method not in inputs.MRTR_METHODS:
                raise ProtocolError(f"MCP server '{self.name}' asked for input in answer to {method}")
            if rounds == inputs.MAX_ROUNDS:
                break
            responses: dict[str, Any] = {}
            for key, (asked, asked_params) in requests.items():
                responses[key] = await self.answer_input(asked, asked_params)
            sent = inputs.retry_params(params, result, responses)
        raise ProtocolError(f"MCP server '{self.name}' still asked for input after {inputs.MAX_ROUNDS} rounds "
                            f"of {method}")

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._send_quietly(jsonrpc.Notification(method, self._params(params)))

    # --- Opening: era negotiation (decided by ``self.connection``) ------------------------

    async def open(self, protocol_choice: str = "auto") -> protocol.ServerInfo:
        """Negotiate the protocol era and version; returns what the server said."""
        first = self.connection.opening(protocol_choice)
        if first == (DISCOVER, PING):
            info = await self._probe()
        elif first == (DISCOVER,):
            info = await self._discover()
        else:
            info = await self._initialize()
        self.info = info
        self.connection.capabilities = tasks.declare(self.connection.capabilities, info)
        self.connection.negotiated(info.version, info.era)
        self._meta = self.connection.meta
        if info.era == "handshake":
            await self.notify("notifications/initialized")
        log.info("MCP server '%s' speaks %s (%s era)%s", self.name, info.version, info.era,
                 f", serverInfo {info.name} {info.server_version}" if info.name else "")
        return info

    def _probe_timeout(self) -> float:
        """The parallel probe's bound (stdio: an in-order server that ignores discover is
        legacy). Over HTTP a legacy server refuses discover at once, so no answer there
        means a slow server, not an old one: it gets the full timeout."""
        parallel = self.connection.probing and self.connection.probe == "parallel"
        return min(self.timeout_secs, self.probe_timeout_secs) if parallel else self.timeout_secs

    async def _discover(self) -> protocol.ServerInfo:
        """``server/discover`` alone (Streamable HTTP, or a pinned modern version)."""
        try:
            try:
                result = await self.request(DISCOVER, self.connection.params(DISCOVER),
                                            timeout_secs=self._probe_timeout())
            except RpcError as exc:
                if not self.connection.retry_version(exc):
                    raise
                log.debug("MCP server '%s' refused the version once (%s); asking again", self.name, exc)
                result = await self.request(DISCOVER, self.connection.params(DISCOVER),
                                            timeout_secs=self._probe_timeout())
        except Exception as exc:
            answer = self.connection.discover_answer(error=exc)  # raises unless it means "legacy"
        else:
            answer = self.connection.discover_answer(result)
        if isinstance(answer, Legacy):
            log.debug("MCP server '%s': server/discover failed (%s); using initialize", self.name, answer.reason)
            return await self._initialize()
        return answer

    async def _initialize(self) -> protocol.ServerInfo:
        result = await self.request(INITIALIZE, self.connection.params(INITIALIZE))
        return self.connection.initialize_answer(result)

    async def _probe(self) -> protocol.ServerInfo:
        """stdio: ``server/discover`` and ``ping`` together (see the module docstring)."""
        connection = self.connection
        discover_id, discover = self._start(DISCOVER)  # bounded by the nursery's deadline below
        ping_id, ping = self._start(PING)
        await self._send_quietly(jsonrpc.Request(discover_id, DISCOVER, connection.params(DISCOVER)))
        await self._send_quietly(jsonrpc.Request(ping_id, PING, connection.params(PING)))

        async with trio.open_nursery() as nursery:
            nursery.cancel_scope.deadline = trio.current_time() + self._probe_timeout()

            async def discover_answered() -> None:
                await discover.event.wait()
                nursery.cancel_scope.cancel()

            async def ping_answered() -> None:
                await ping.event.wait()
                await trio.sleep(PING_GRACE_SECS)  # in-order servers answered discover first if at all
                nursery.cancel_scope.cancel()

            nursery.start_soon(discover_answered)
            nursery.start_soon(ping_answered)
        self._pending.pop(ping_id, None)
        try:
            if self._closed is not None:
                raise ConnectionLost(str(self._closed))
            answer = connection.discover_answer(discover.result if discover.event.is_set() else NO_ANSWER,
                                                discover.error)
            if not isinstance(answer, Legacy):
                return answer
            log.debug("MCP server '%s': %s; using initialize", self.name, answer.reason)
            try:
                return await self._initialize()
            except Exception as exc:
                if not connection.awaits_late_discover(exc):
                    raise
                # A modern-only server, slow to answer discover: wait for that answer
                # (within the probe timeout) and use it.
                with trio.move_on_after(self._probe_timeout()):
                    await discover.event.wait()
                if discover.event.is_set() and discover.error is None:
                    return connection.discover_answer(discover.result, late=True)
                raise
        finally:
            self._pending.pop(discover_id, None)  # kept until now: a late answer still counts

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self.transport.aclose()
