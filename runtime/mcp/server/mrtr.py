"""2026-07-28's multi-round-trip requests (MRTR), for tool calls that wait for approval
or for a model turn on the client (``sample``: an llm agent with ``provider =
"mcp-sampling"``; each turn is a ``sampling/createMessage`` input request, keyed
``sampling-…``, whose answer a retry brings to the waiting agent).

In 2026-07-28 a server sends no requests of its own: a ``tools/call`` that needs a
person's answer returns ``resultType: "input_required"`` with ``inputRequests`` (here:
one ``elicitation/create`` form per pending approval, keyed by the approval id) and an
opaque ``requestState``; the client asks its user and sends the call again, with a new
id, the same name and arguments, ``inputResponses`` and the ``requestState``.

A kernel call that waits for approval is in the middle of the pipeline (and maybe of an
agent's run, several calls deep), so it cannot be stopped and started again without
running twice. Instead, a call from a client that can answer forms runs in the server's
own nursery (a ``Parked`` call), and each request for it (a *leg*) only waits on it:

- a leg returns the call's result when it is done, or ``input_required`` as soon as the
  call has an approval the client has not been asked in this leg;
- a retry's ``inputResponses`` decide those approvals (``asking.decide``), and its leg
  then waits for the same call: the tool runs once, in the parked task, whoever decides;
- a leg whose client goes away (closes the stream; ``notifications/cancelled`` on stdio)
  cancels the call, as closing the stream cancels any 2026-07-28 request;
- a parked call that no leg waits for is dropped ``keep_secs`` after its last leg
  (cancelled if it still runs; its approvals then expire), and at most MAX_PARKED wait.

The ``requestState`` comes back from the client, so an attacker controls it: it is
HMAC-SHA256 signed with a key only this process holds, and names the parked call, its
leg (an old state is refused once a newer one was issued, and any state once the
result was handed out), the approval ids it may answer, the tool, a digest of the
arguments, the caller and an expiry. Any mismatch is -32602 "Invalid or expired
requestState"; the reason goes to the log only. The state is signed, not encrypted:
what it names, the client already knows. A server restart forgets parked calls and the
key, so their states are refused, and the kernel expires their approvals.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from typing import Any
from collections.abc import Callable

import msgspec
import trio

from runtime.errors import RpcError, TernError, rpc_error
from runtime.log import get_logger
from runtime.mcp.server.asking import notice
from runtime.ports import Approval
from runtime.wire import jsonrpc

__all__ = ["Mrtr", "Parked", "MAX_PARKED", "INVALID_STATE"]

log = get_logger("mcp.server")

MAX_PARKED = 64  # calls waiting between legs, per server
MAX_STATE_CHARS = 4096
MAX_ASKS_PER_LEG = 16
SWEEP_SECS = 5.0
INVALID_STATE = "Invalid or expired requestState"
_PREFIX = "t1."
_LABEL = b"tern/mcp/requestState/1\0"
_encode = msgspec.json.Encoder(order="sorted").encode
_decode = msgspec.json.Decoder()


def arguments_digest(arguments: Any) -> str:
    return _b64(hashlib.sha256(_encode(arguments)).digest()[:16])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError("not canonical base64url")
    return data


class _Sampling:
    """A model turn a parked call waits for: put to the client in the next leg."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.answer: Any = None
        self.event = trio.Event()


class Parked:
    """One 2026-07-28 tool call running in the server's nursery between its legs."""

    def __init__(self, tool: str, digest: str, caller: str) -> None:
        self.forms = True  # the client answers forms: approvals are asked (else decided elsewhere)
        self.samples: dict[str, _Sampling] = {}  # model turns (``sample``) the call waits on now
        self.id = secrets.token_urlsafe(16)
        self.tool, self.digest, self.caller = tool, digest, caller
        self.run: Any = None  # the pipeline Run, set by whoever starts the call
        self.asks: dict[str, Approval] = {}  # approvals the call waits on now
        self.answered: set[str] = set()  # of those, the ones a leg's inputResponses decided
        self.asked: set[str] = set()  # every approval id a leg put to the client
        self.leg = 0  # the number of the last input_required issued
        self.attached = False  # a leg is waiting on this call now
        self.idle_since = trio.current_time()
        self.outcome: dict[str, Any] | RpcError | None = None
        self.done = trio.Event()
        self.sink: Any = None  # the attached leg's progress reporter (dispatch._Reporter)
        self._changed = trio.Event()

    def poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def ask(self, approval: Approval) -> None:
        """The run's ``Ask``: note the approval for the next leg, and wait; the kernel
        cancels this when the approval is decided, by any channel."""
        if not approval.id:
            return
        if not self.forms:  # parked for the client's model, but it answers no forms: name the approval
            self.progress(notice(approval))
            self.log("warning", notice(approval))
            return
        self.asks[approval.id] = approval
        self.poke()
        try:
            await trio.sleep_forever()
        finally:
            self.asks.pop(approval.id, None)
            self.answered.discard(approval.id)

    async def sample(self, params: dict[str, Any]) -> dict[str, Any]:
        """The run's ``Sample``: put a model turn to the client in the next leg and wait
        for a retry to bring its answer (at most until the call is dropped)."""
        request_id = f"sampling-{secrets.token_urlsafe(9)}"
        pending = self.samples[request_id] = _Sampling(params)
        self.poke()
        try:
            await pending.event.wait()  # the sweeper cancels the call if no leg comes back
        finally:
            self.samples.pop(request_id, None)
            self.answered.discard(request_id)
        if not isinstance(pending.answer, dict):
            raise RpcError(jsonrpc.INVALID_PARAMS, "the client's sampling answer is not an object")
        return pending.answer

    def answer_sample(self, request_id: str, answer: Any) -> None:
        pending = self.samples.get(request_id)
        if pending is not None and not pending.event.is_set():
            pending.answer = answer
            pending.event.set()

    def progress(self, text: str) -> None:
        if self.sink is not None and self.sink.token is not None:
            self.sink.progress(text)

    def log(self, level: str, text: str) -> None:
        if self.sink is not None:
            self.sink.log(level, text)

    def news(self) -> list[Approval]:
        """Approvals waiting that no leg's answers have decided yet."""
        return [approval for approval_id, approval in self.asks.items() if approval_id not in self.answered]

    def new_samples(self) -> dict[str, _Sampling]:
        """Model turns waiting that no leg's answers have brought yet."""
        return {i: s for i, s in self.samples.items() if i not in self.answered and not s.event.is_set()}

    async def wait(self) -> None:
        """Until the call is done or has a question (an approval, a model turn) for the client."""
        while not self.done.is_set() and not self.news() and not self.new_samples():
            await self._changed.wait()

    def finish(self, outcome: dict[str, Any] | RpcError | None) -> None:
        self.outcome = outcome
        self.done.set()
        self.poke()


class Mrtr:
    """The parked calls of one MCP server, and the key that signs their states."""

    def __init__(self, keep_secs: float) -> None:
        self.keep_secs = keep_secs
        self.parked: dict[str, Parked] = {}
        self._key = os.urandom(32)
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The nursery parked calls run in, and the sweeper; until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    await trio.sleep(SWEEP_SECS)
                    self.sweep()
        finally:
            self._nursery = None
            for parked in self.parked.values():
                parked.finish(parked.outcome)  # wake any leg: the server is stopping
            self.parked.clear()

    def available(self) -> bool:
        return self._nursery is not None and len(self.parked) < MAX_PARKED

    def park(self, tool: str, arguments: Any, caller: str) -> Parked:
        """A new parked call (the caller sets its ``run``, then ``launch``es it)."""
        parked = Parked(tool, arguments_digest(arguments), caller)
        self.parked[parked.id] = parked
        return parked

    def launch(self, parked: Parked, call: Callable[[], Any]) -> None:
        """Run ``call()`` (an async function returning the result, or raising RpcError)
        in the server's nursery, as ``parked``'s call."""
        assert self._nursery is not None
        self._nursery.start_soon(self._run_call, parked, call)

    async def _run_call(self, parked: Parked, call: Callable[[], Any]) -> None:
        outcome: dict[str, Any] | RpcError | None = None
        try:
            outcome = await call()
        except TernError as exc:  # an RpcError as it is; a store down, a budget spent: said, not a bug
            outcome = rpc_error(exc)
        except Exception as exc:  # a bug of ours: the leg answers it, the log has it
            log.exception("MCP tools/call %s failed", parked.tool)
            outcome = RpcError(jsonrpc.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
        finally:
            parked.finish(outcome)

    def drop(self, parked: Parked) -> None:
        self.parked.pop(parked.id, None)

    def sweep(self) -> None:
        """Drop parked calls no leg has waited on for ``keep_secs``, cancelling any still running."""
        now = trio.current_time()
        for parked in [p for p in self.parked.values() if not p.attached and now - p.idle_since > self.keep_secs]:
            if not parked.done.is_set():
                log.info("MCP tools/call %s: the client did not come back for it; cancelled", parked.tool)
                parked.run.cancel()
            self.drop(parked)

    # --- the requestState -------------------------------------------------------------------

    def input_required(self, parked: Parked, form: Callable[[Approval], dict[str, Any]]) -> dict[str, Any]:
        """The ``input_required`` result for the approvals ``parked`` waits on, with a
        fresh signed state (which makes every earlier state of this call stale)."""
        asks = parked.news()[:MAX_ASKS_PER_LEG]
        samples = list(parked.new_samples().items())[:MAX_ASKS_PER_LEG]
        parked.leg += 1
        ids = [approval.id for approval in asks] + [request_id for request_id, _ in samples]
        parked.asked.update(ids)
        claims = {"c": parked.id, "n": parked.leg, "ap": ids, "t": parked.tool,
                  "a": parked.digest, "p": parked.caller, "exp": time.time() + self.keep_secs}
        requests = {approval.id: {"method": "elicitation/create", "params": form(approval)} for approval in asks}
        requests.update({request_id: {"method": "sampling/createMessage", "params": sampling.params}
                         for request_id, sampling in samples})
        return {"resultType": "input_required", "inputRequests": requests, "requestState": self.seal(claims)}

    def seal(self, claims: dict[str, Any]) -> str:
        payload = _encode(claims)
        mac = hmac.new(self._key, _LABEL + payload, hashlib.sha256).digest()
        return f"{_PREFIX}{_b64(payload)}.{_b64(mac)}"

    def unseal(self, state: Any, limit: int = MAX_STATE_CHARS) -> dict[str, Any] | None:
        """The claims of a state this process signed, unaltered; else None."""
        if not isinstance(state, str) or len(state) > limit or not state.startswith(_PREFIX):
            return None
        body, _, mac = state[len(_PREFIX):].partition(".")
        try:
            payload, signature = _unb64(body), _unb64(mac)
        except ValueError:
            return None
        expected = hmac.new(self._key, _LABEL + payload, hashlib.sha256).digest()
        if not hmac.compare_digest(signature, expected):
            return None
        claims = _decode.decode(payload)  # we wrote it: it decodes
        return claims if isinstance(claims, dict) else None

    def resume(self, state: Any, tool: str, arguments: Any, caller: str) -> tuple[Parked, list[str]]:
        """The parked call a retry's ``requestState`` names, and the approval ids its
        ``inputResponses`` may answer. Raises RpcError -32602 for anything else."""
        claims = self.unseal(state)
        why = ""
        parked = None
        if claims is None:
            why = "not signed by this server (forged, altered, or from before a restart)"
        elif not (isinstance(claims.get("exp"), (int, float)) and claims["exp"] > time.time()):
            why = "expired"
        elif claims.get("t") != tool or claims.get("a") != arguments_digest(arguments):
            why = "issued for another tool or other arguments"
        elif claims.get("p") != caller:
            why = "issued to another caller"
        else:
            parked = self.parked.get(claims.get("c"))  # type: ignore[arg-type]
            if parked is None:
                why = "its call is over (answered already, or dropped)"
            elif parked.leg != claims.get("n"):
                why = "stale: a newer one was issued for the same call"
        if parked is None or why:
            log.info("MCP tools/call %s: requestState refused: %s", str(tool)[:64], why)
            raise RpcError(jsonrpc.INVALID_PARAMS, INVALID_STATE, {"reason": "invalid_request_state"})
        return parked, [i for i in claims["ap"] if isinstance(i, str) and i in parked.asked]  # type: ignore[index]
