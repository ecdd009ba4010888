"""The MCP server's own requests to one client (handshake era: ``elicitation/create``).

MCP lets a server ask its client things while it answers a request: over stdio on the
same pipe as its notifications, over Streamable HTTP on the SSE stream of the POST
being answered (the client POSTs its answer back with its ``Mcp-Session-Id``). The
client's answers are JSON-RPC responses, routed here by id.

Everything a client can cause here is bounded: at most ``MAX_PENDING`` requests wait
for answers per client (one more is refused before it is sent), each waits at most its
timeout (then the client gets ``notifications/cancelled`` for it, as it does when the
server stops needing the answer), an answer is taken once, and answers nobody waits for
(a late one, a made-up id, a flood) are dropped at the cost of a dict look-up, with a
rate-limited log line. 2026-07-28 has no server-to-client requests: there the same
questions travel inside results (``mrtr.py``).
"""

from __future__ import annotations

import time
from typing import Any
from collections.abc import Awaitable, Callable

import trio

from runtime.errors import ConnectionLost, RpcError, TernTimeout
from runtime.log import LogBudget, get_logger
from runtime.wire import jsonrpc

__all__ = ["ClientRequests", "MAX_PENDING", "Send"]

log = get_logger("mcp.server")

MAX_PENDING = 8  # requests waiting for one client's answers at once
CANCEL_NOTICE_SECS = 2.0  # how long telling the client "never mind" may take
BUSY = -32000  # JSON-RPC's implementation-defined range: this server's own limit

#: Writes one message (a dict with ``method``, and ``id`` for a request) to the client.
Send = Callable[[dict[str, Any]], Awaitable[None]]


class _Waiter:
    __slots__ = ("event", "answer")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.answer: jsonrpc.Response | jsonrpc.ErrorResponse | None = None


class ClientRequests:
    """Requests this server sent one client and is waiting on, by id."""

    def __init__(self) -> None:
        self._waiting: dict[str, _Waiter] = {}
        self._count = 0
        self._budget = LogBudget(per_sec=1.0, burst=5, summary_secs=60.0)
        self.unmatched = 0  # answers to nothing we asked, for tests and debugging

    def __len__(self) -> int:
        return len(self._waiting)

    async def request(self, send: Send, method: str, params: dict[str, Any], *, timeout_secs: float) -> Any:
        """Send ``method`` to the client and wait for its answer's ``result``, at most
        ``timeout_secs``. Raises ``RpcError`` (the client answered with an error, or
        ``MAX_PENDING`` requests are already waiting), ``TernTimeout`` (no answer in
        time) or ``ConnectionLost`` (the client is gone). If the wait ends without an
        answer (a timeout, or the caller no longer needs it: cancellation), the client
        is told with ``notifications/cancelled`` so it can close its dialog."""
        if len(self._waiting) >= MAX_PENDING:
            raise RpcError(BUSY, f"{MAX_PENDING} requests to this client are already waiting for answers")
        self._count += 1
        request_id = f"tern-{self._count}"  # a string: never mistaken for the client's own numeric ids
        waiter = self._waiting[request_id] = _Waiter()
        reason = "the server no longer needs the answer"
        try:
            try:
                await send({"method": method, "id": request_id, "params": params})
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                reason = ""
                raise ConnectionLost(f"the client is gone; {method} was not sent") from None
            with trio.move_on_after(max(0.0, timeout_secs)):
                await waiter.event.wait()
            if not waiter.event.is_set():
                reason = "timed out"
        finally:
            del self._waiting[request_id]
            if not waiter.event.is_set() and reason:
                await _tell_cancelled(send, request_id, reason)
        if waiter.answer is None:
            raise TernTimeout(f"the client did not answer {method} within {timeout_secs:g} s")
        if isinstance(waiter.answer, jsonrpc.ErrorResponse):
            error = waiter.answer.error
            raise RpcError(error.code, f"the client refused {method}: {error.message}")
        return waiter.answer.result

    def answer(self, message: jsonrpc.Response | jsonrpc.ErrorResponse) -> bool:
        """Deliver a client's response to the request waiting on its id; False (and
        dropped) when nothing waits for it."""
        waiter = self._waiting.get(message.id) if isinstance(message.id, str) else None
        if waiter is None or waiter.event.is_set():
            self.unmatched += 1
            now = time.monotonic()
            if self._budget.admit(now):
                log.info("MCP client answered a request this server is not waiting for (id %r): dropped",
                         str(message.id)[:64])
            elif dropped := self._budget.dropped(now):
                log.info("MCP client sent %d more answers to nothing: dropped", dropped)
            return False
        waiter.answer = message
        waiter.event.set()
        return True


async def _tell_cancelled(send: Send, request_id: str, reason: str) -> None:
    """``notifications/cancelled`` for our own request, even while being cancelled
    (shielded, and bounded: a client that stopped reading costs at most
    CANCEL_NOTICE_SECS)."""
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + CANCEL_NOTICE_SECS
        try:
            await send({"method": "notifications/cancelled", "params": {"requestId": request_id, "reason": reason}})
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client is gone: nothing to tell
