"""One call of an ask tool (``asks.py``), in either era.

- **Handshake era**: each question is the server's own request to the client
  (``outbound.py``: on the same stdio pipe, or on the SSE stream of the POST being
  answered), one at a time, each waiting at most the ask's ``timeout_secs``. A client
  that refuses, never answers or answers nonsense ends the call with an error result
  that says so; the server keeps serving.
- **2026-07-28** (no server-to-client requests): a round's questions go out as the
  ``inputRequests`` of an ``input_required`` result, and the client calls again with
  ``inputResponses`` and the ``requestState``. Nothing waits on the server between
  rounds: the state carries the round and the answers so far, HMAC-signed with the
  server's key (``Mrtr.seal``) and bound to the tool, a digest of the arguments, the
  caller and an expiry, so a client can neither alter earlier answers (they were
  checked when given) nor skip a round. Each state is good for one retry: a replayed
  one is refused like a forged one (-32602), up to MAX_SPENT states remembered until
  they expire. Answers to questions not asked are ignored; missing answers are asked
  again; an ``inputResponses`` that is not an object of objects is -32602. A first
  call may already carry round one's answers (SEP-2322 allows it).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import Any

from runtime.errors import ConnectionLost, RpcError, TernTimeout
from runtime.log import get_logger
from runtime.mcp.server.asks import Ask, AskError
from runtime.mcp.server.mrtr import INVALID_STATE, Mrtr, arguments_digest
from runtime.mcp.server.outbound import Send
from runtime.wire import jsonrpc

__all__ = ["AskStates", "ask_handshake", "ask_modern", "conclude", "error_result", "STATE_SECS"]

log = get_logger("mcp.server")

STATE_SECS = 900.0  # how long a client has to answer one round
MAX_STATE_CHARS = 262_144  # a round's state, answers included
MAX_SPENT = 4096


def error_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


class AskStates:
    """The signed, single-use ``requestState`` of 2026-07-28 ask rounds."""

    def __init__(self, mrtr: Mrtr) -> None:
        self.mrtr = mrtr  # its key signs these too; the "k" claim keeps the two kinds apart
        self.spent: OrderedDict[str, float] = OrderedDict()

    def seal(self, tool: str, arguments: dict[str, Any], caller: str, number: int, answers: dict[str, Any]) -> str:
        return self.mrtr.seal({"k": "ask", "t": tool, "a": arguments_digest(arguments), "p": caller, "r": number,
                               "ans": answers, "j": secrets.token_urlsafe(12), "exp": time.time() + STATE_SECS})

    def open(self, state: Any, tool: str, arguments: dict[str, Any], caller: str) -> tuple[int, dict[str, Any]]:
        """The round and answers a retry's state carries; the state is spent. Raises
        RpcError -32602 for anything but an unspent, unexpired state issued for this
        very call."""
        claims = self.mrtr.unseal(state, MAX_STATE_CHARS)
        now = time.time()
        why = ""
        if claims is None or claims.get("k") != "ask":
            why = "not signed by this server for an ask (forged, altered, or from before a restart)"
        elif not (isinstance(claims.get("exp"), (int, float)) and claims["exp"] > now):
            why = "expired"
        elif claims.get("t") != tool or claims.get("a") != arguments_digest(arguments):
            why = "issued for another tool or other arguments"
        elif claims.get("p") != caller:
            why = "issued to another caller"
        elif claims.get("j") in self.spent:
            why = "used already (a replay)"
        if why:
            log.info("MCP tools/call %s: requestState refused: %s", str(tool)[:64], why)
            raise RpcError(jsonrpc.INVALID_PARAMS, INVALID_STATE, {"reason": "invalid_request_state"})
        assert claims is not None
        self._spend(claims["j"], claims["exp"], now)
        return claims["r"], claims["ans"]

    def _spend(self, nonce: str, expires: float, now: float) -> None:
        while self.spent and next(iter(self.spent.values())) <= now:  # oldest first: no sweep of them all
            self.spent.popitem(last=False)
        while len(self.spent) >= MAX_SPENT:  # still full of live states: forget the oldest
            self.spent.popitem(last=False)
        self.spent[nonce] = expires


async def ask_handshake(ask: Ask, arguments: dict[str, Any], peer: Any, send: Send | None, *,
                        mode: bool) -> dict[str, Any]:
    """Ask every round as the server's own requests; the answers (or an error result)."""
    answers: dict[str, Any] = {}
    for number in range(len(ask.rounds)):
        asked = ask.requests(number, peer.capabilities, arguments, answers, mode=mode)
        for key, request in asked.items():
            if send is None:
                return {"error": error_result("this connection cannot carry the server's questions")}
            try:
                answer = await peer.requests.request(send, request["method"], request["params"],
                                                     timeout_secs=ask.config.timeout_secs)
                answers[key] = ask.take(key, answer)
            except TernTimeout:
                return {"error": error_result(f"the client did not answer {key} within "
                                              f"{ask.config.timeout_secs:g} s")}
            except (RpcError, ConnectionLost, AskError) as exc:
                return {"error": error_result(f"could not get an answer to {key}: {exc}")}
        if ask.declined(answers):
            break  # the person said no: later rounds are not asked
    return {"answers": answers}


def ask_modern(ask: Ask, states: AskStates, arguments: dict[str, Any], params: dict[str, Any],
               capabilities: Any, caller: str) -> dict[str, Any]:
    """One leg of a 2026-07-28 ask: ``{"result": input_required}``, ``{"answers": ...}``
    when every round is answered, or ``{"error": result}``."""
    responses = params.get("inputResponses", {})
    if not isinstance(responses, dict):
        raise RpcError(jsonrpc.INVALID_PARAMS, "inputResponses must be an object")
    state = params.get("requestState")
    number, answers = states.open(state, ask.name, arguments, caller) if state is not None else (0, {})
    while number < len(ask.rounds):
        asked = ask.requests(number, capabilities, arguments, answers, mode=True)
        for key in list(asked):
            if key not in responses:
                continue
            if not isinstance(responses[key], dict):
                raise RpcError(jsonrpc.INVALID_PARAMS, f"inputResponses[{key!r}] must be an object")
            try:
                answers[key] = ask.take(key, responses[key])
            except AskError as exc:
                return {"error": error_result(str(exc))}
            del asked[key]
        if asked:
            return {"result": {"resultType": "input_required", "inputRequests": asked,
                               "requestState": states.seal(ask.name, arguments, caller, number, answers)}}
        if ask.declined(answers):
            break  # the person said no: later rounds are not asked
        number += 1
        responses = {}  # a later round's questions were not asked yet: answers to them wait for the retry
    return {"answers": answers}


def conclude(ask: Ask, arguments: dict[str, Any], answers: dict[str, Any]) -> dict[str, Any] | tuple[str, dict]:
    """Every round answered: the reply as the result, or ``(send_to, arguments)`` for the
    dispatcher to call next. A declined form sends nothing on."""
    declined = ask.declined(answers)
    send_to = ask.config.send_to
    if declined and send_to:
        how = "declined" if answers[declined]["action"] == "decline" else "dismissed"
        return {"content": [{"type": "text", "text": f"Nothing was sent to {send_to}: the form {declined} was {how}."}],
                "isError": False}
    reply = ask.reply(arguments, answers)
    if send_to:
        return send_to, {"message": reply}
    return {"content": [{"type": "text", "text": reply}], "isError": False}
