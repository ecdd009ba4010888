"""tern's A2A client: discover a peer from its card, then send, get, cancel, stream
and poll in whichever dialect the peer speaks (``0.1``, ``0.3`` or ``1.0``).

The I/O shell over ``cards.py`` (finding the card, choosing the dialect) and
``requests.py`` (each call's request and how its answer is read):

- Card, answer and stream event sizes are capped (:data:`MAX_CARD_BYTES`,
  :data:`MAX_RESPONSE_BYTES`, :data:`MAX_EVENT_BYTES`); streams are SSE.
- Every wait is bounded: requests by ``timeout``, blocking sends, streams and polls by
  ``send_timeout`` (tern's own server answers a blocking send after at most 300 s).
- Every connection goes through the SSRF guard (``runtime.net.outbound.make_client``);
  a URL the guard refuses outright (the metadata service) fails before any connection.
- ``credentials`` (``runtime.net.credentials``) add their headers to every call (not to
  the public card's fetch); a 401 to a call that carried them is retried once if they
  have a fresh token. ``tls``: the peer's own TLS context (a client certificate).
- A card's signatures are checked by ``trust`` (``card_trust.py``) before it is used.
"""

from __future__ import annotations

import math
import ssl
import time
from typing import Any
from collections.abc import AsyncGenerator, AsyncIterator

import httpx
import trio

from runtime import __version__, tracing
from runtime.config.dump import mask_url
from runtime.a2a import protocol
from runtime.a2a.client import requests
from runtime.a2a.client.card_trust import MAX_JWKS_BYTES, CardRefused, CardTrust
from runtime.a2a.client.cards import NoCard, RemoteAgent, card_urls, read_card, remote, short
from runtime.a2a.client.requests import A2aClientError, A2aTimeout, Result, StreamEvent, reply_text
from runtime.a2a.model import INTERRUPTED, TERMINAL, Message, Task
from runtime.errors import ProtocolError, TernError
from runtime.log import get_logger, log_wire, shorten
from runtime.net.credentials import Credential
from runtime.net.guard import AddressPolicy, BlockedAddress, check_url
from runtime.net.outbound import make_client, reason
from runtime.wire.depth import loads as json_loads
from runtime.wire.sse import SseDecoder

__all__ = ["A2aClient", "RemoteAgent", "A2aClientError", "A2aTimeout", "Result", "StreamEvent", "reply_text",
           "MAX_CARD_BYTES", "MAX_RESPONSE_BYTES", "MAX_EVENT_BYTES"]

log = get_logger("a2a.client")

MAX_CARD_BYTES = 1024 * 1024
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
MAX_EVENT_BYTES = 10 * 1024 * 1024


class A2aClient:
    """One HTTP connection pool to any number of A2A peers.

    Use as ``async with A2aClient() as client:`` (or call :meth:`aclose`). ``headers``
    go on every request (e.g. ``Authorization``), ``credentials`` on every call."""

    def __init__(self, *, policy: AddressPolicy = AddressPolicy(), timeout: float = 30.0,
                 send_timeout: float = 300.0, headers: dict[str, str] | None = None,
                 max_card_bytes: int = MAX_CARD_BYTES, max_response_bytes: int = MAX_RESPONSE_BYTES,
                 max_event_bytes: int = MAX_EVENT_BYTES, credentials: Credential | None = None,
                 tls: ssl.SSLContext | None = None, trust: CardTrust | None = None) -> None:
        self.policy = policy
        self.credentials = credentials
        self.trust = trust or CardTrust()
        self.timeout = timeout
        self.send_timeout = send_timeout
        self.max_card_bytes = max_card_bytes
        self.max_response_bytes = max_response_bytes
        self.max_event_bytes = max_event_bytes
        self._http = make_client(policy, timeout=timeout, tls=tls,
                                 headers={"User-Agent": f"tern/{__version__} A2A", **(headers or {})})

    async def __aenter__(self) -> A2aClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._http.aclose()

    # --- Discovery ----------------------------------------------------------------------

    async def discover(self, url: str, *, dialect: str | None = None,
                       timeout: float | None = None) -> RemoteAgent:
        """Read the peer's card and pick the dialect (``dialect`` forces one)."""
        if dialect is not None and dialect not in protocol.TRAITS:
            raise A2aClientError(f"unknown A2A dialect {dialect!r} (use 0.1, 0.3 or 1.0)")
        check_url(url, self.policy)
        limit = self.timeout if timeout is None else timeout
        failures: list[str] = []
        words: dict[str, None] = {}  # what the server said, each once (every card URL may say the same)
        with _deadline(limit, f"reading the agent card of {url}"):
            for card_url in card_urls(url):
                try:
                    card = await self._fetch_card(card_url)
                except NoCard as exc:
                    failures.append(str(exc))
                    if exc.said:
                        words[exc.said] = None
                    continue
                try:
                    await self.trust.verify(card, card_url, self._fetch_jwks)
                except CardRefused as exc:
                    raise A2aClientError(f"the agent card at {card_url} is refused: {exc}") from None
                return remote(card, card_url, dialect)
        said = f" (the server says: {'; '.join(words)})" if words else ""
        raise A2aClientError(f"no A2A agent card at {url}: " + "; ".join(failures) + said)

    async def _fetch_card(self, card_url: str) -> dict[str, Any]:
        try:
            async with self._http.stream("GET", card_url, headers={"Accept": "application/json"}) as response:
                if response.status_code in (401, 403):
                    raise A2aClientError(f"{card_url}: HTTP {response.status_code}: the card needs credentials "
                                         "(pass them as a header, e.g. Authorization)",
                                         http_status=response.status_code)
                if response.status_code != 200:  # a JSON error says why (an HTML page would only be noise)
                    raise NoCard(f"{short(card_url)}: HTTP {response.status_code}",
                                 shorten(requests.error_message(await _read_start(response, 2048)), 300))
                body = await _read_capped(response, self.max_card_bytes, f"the agent card at {card_url}")
        except httpx.HTTPError as exc:
            raise _transport_error(exc, card_url) from None
        return read_card(body, card_url, response.headers.get("content-type", "unknown type"))

    async def _fetch_jwks(self, url: str) -> Any:
        """A JWKS for a card's signatures: guarded, at most ``MAX_JWKS_BYTES``, within the timeout."""
        check_url(url, self.policy)
        try:
            with _deadline(self.timeout, f"reading the key set {url}"):
                async with self._http.stream("GET", url, headers={"Accept": "application/json"}) as response:
                    if response.status_code != 200:
                        raise A2aClientError(f"HTTP {response.status_code}")
                    body = await _read_capped(response, MAX_JWKS_BYTES, "the key set")
        except httpx.HTTPError as exc:
            raise _transport_error(exc, url) from None
        try:
            return json_loads(body)
        except (ValueError, UnicodeDecodeError):
            raise A2aClientError("not JSON") from None

    # --- Calls ----------------------------------------------------------------------------

    async def send(self, agent: RemoteAgent, text: str, *, context_id: str | None = None,
                   task_id: str | None = None, blocking: bool = True,
                   timeout: float | None = None) -> Result:
        """Send ``text``; the answer is the task (as it is when the peer returns: done or
        waiting for input if ``blocking``) or the peer's message. 0.1 has no non-blocking
        send: its ``tasks/send`` answers when the peer does."""
        method, params = requests.send_request(agent.dialect, text, context_id, task_id, blocking, stream=False)
        limit = timeout if timeout is not None else (self.send_timeout if blocking else self.timeout)
        result = await self._call(agent, method, params, limit)
        parsed = requests.parse_event(result, method)
        if not isinstance(parsed, (Task, Message)):
            raise A2aClientError(f"{agent.name}: {method} answered neither a task nor a message")
        return parsed

    async def get(self, agent: RemoteAgent, task_id: str, *, history_length: int | None = None,
                  timeout: float | None = None) -> Task:
        params: dict[str, Any] = {"id": task_id}
        if history_length is not None:
            params["historyLength"] = history_length
        method = protocol.method_for(agent.dialect, "get")
        return requests.as_task(await self._call(agent, method, params, timeout), method, agent.name)

    async def cancel(self, agent: RemoteAgent, task_id: str, *, timeout: float | None = None) -> Task:
        method = protocol.method_for(agent.dialect, "cancel")
        return requests.as_task(await self._call(agent, method, {"id": task_id}, timeout), method, agent.name)

    async def poll(self, agent: RemoteAgent, task_id: str, *, interval: float = 1.0,
                   timeout: float | None = None) -> Task:
        """``get`` every ``interval`` seconds until the task is terminal or waits for input."""
        limit = self.send_timeout if timeout is None else timeout
        deadline = trio.current_time() + limit
        while True:
            remaining = deadline - trio.current_time()
            task = await self.get(agent, task_id, timeout=max(0.0, min(self.timeout, remaining)))
            if task.state in TERMINAL or task.state in INTERRUPTED:
                return task
            if trio.current_time() + interval > deadline:
                raise A2aTimeout(f"{agent.name}: task {task_id} is still {task.state} after {limit:g} s")
            await trio.sleep(interval)

    async def stream(self, agent: RemoteAgent, text: str, *, context_id: str | None = None,
                     task_id: str | None = None, timeout: float | None = None) -> AsyncIterator[StreamEvent]:
        """Send ``text`` and yield the task's events as they come (the first is the task
        or a message). Close it with ``contextlib.aclosing`` when leaving early."""
        method, params = requests.send_request(agent.dialect, text, context_id, task_id, True, stream=True)
        async for event in self._stream(agent, method, params, timeout):
            yield event

    async def resubscribe(self, agent: RemoteAgent, task_id: str, *,
                          timeout: float | None = None) -> AsyncIterator[StreamEvent]:
        """The events of a running task from now on."""
        method = protocol.method_for(agent.dialect, "resubscribe")
        async for event in self._stream(agent, method, {"id": task_id}, timeout):
            yield event

    # --- The wire ---------------------------------------------------------------------------

    async def _call(self, agent: RemoteAgent, method: str, params: dict[str, Any],
                    timeout: float | None) -> Any:
        """One request and its answer, traced as a CLIENT span whose context goes in the headers."""
        with tracing.span(f"a2a {method}", tracing.CLIENT,
                          {"a2a.method.name": method, "server.address": agent.name}):
            return await self._exchange(agent, method, params, timeout)

    async def _exchange(self, agent: RemoteAgent, method: str, params: dict[str, Any],
                        timeout: float | None) -> Any:
        check_url(agent.url, self.policy)
        msg_id, body = requests.envelope(agent.dialect, agent.tenant, method, params)
        limit = self.timeout if timeout is None else timeout
        started = time.perf_counter()
        log_wire("out", method, msg_id, len(body), peer=f"a2a:{agent.name}")
        for attempt in (1, 2):
            sent = await self._credential_headers(agent)
            with _deadline(limit, f"{agent.name}: {method}"):
                try:
                    async with self._http.stream(
                        "POST",
                        agent.url,
                        content=body,
                        headers=_traced({**requests.headers(agent.dialect, "application/json, text/event-stream"),
                                         **sent}),
                        timeout=httpx.Timeout(limit, connect=min(limit, 10.0)),
                    ) as response:
                        if (
                            response.headers.get("content-type", "").startswith("text/event-stream")
                            and response.status_code == 200
                        ):
                            answer = None  # a peer that streams even a plain call: take its last answer
                            async for data in self._sse(response, method):
                                answer = data
                            raw = b"" if answer is None else answer
                        else:
                            raw = await _read_capped(response, self.max_response_bytes, f"{agent.name}'s answer")
                        status = response.status_code
                except httpx.HTTPError as exc:
                    raise _transport_error(exc, agent.url) from None
            if not await self._retry(status, sent, attempt):
                break
        log_wire("in", method, msg_id, len(raw), started, peer=f"a2a:{agent.name}")
        if requests.seed_fallback(agent.dialect, method, status):
            return await self._seed_rest(agent, method, params, limit)
        return requests.read_result(raw, status, agent.name, agent.url, method)

    async def _seed_rest(self, agent: RemoteAgent, method: str, params: dict[str, Any], limit: float) -> Any:
        """OpenFang's server has no JSON-RPC route, only the seed's REST ones."""
        verb, url, body = requests.seed_request(agent.url, method, params)
        check_url(url, self.policy)
        with _deadline(limit, f"{agent.name}: {method} (REST)"):
            try:
                async with self._http.stream(
                    verb,
                    url,
                    content=body,
                    headers={"Content-Type": "application/json", "Accept": "application/json",
                             **await self._credential_headers(agent)},
                    timeout=httpx.Timeout(limit, connect=min(limit, 10.0)),
                ) as response:
                    raw = await _read_capped(response, self.max_response_bytes, f"{agent.name}'s answer")
                    status = response.status_code
            except httpx.HTTPError as exc:
                raise _transport_error(exc, url) from None
        return requests.read_seed(raw, status, agent.name, method, url)

    async def _stream(
        self, agent: RemoteAgent, method: str, params: dict[str, Any], timeout: float | None
    ) -> AsyncIterator[StreamEvent]:
        check_url(agent.url, self.policy)
        msg_id, body = requests.envelope(agent.dialect, agent.tenant, method, params)
        limit = self.send_timeout if timeout is None else timeout
        deadline = trio.current_time() + limit
        what = f"{agent.name}: {method}"
        log_wire("out", method, msg_id, len(body), peer=f"a2a:{agent.name}")
        # Cancel scopes wrap single awaits only, never a yield (trio's rule for generators).
        events: AsyncGenerator[bytes, None] | None = None
        try:
            with _deadline(limit, what):
                # The span covers the request up to the answer's head: a span open across the
                # generator's yields would be the consumer's current span too.
                with tracing.span(f"a2a {method}", tracing.CLIENT,
                                  {"a2a.method.name": method, "server.address": agent.name}):
                    for attempt in (1, 2):
                        sent = await self._credential_headers(agent)
                        request = self._http.build_request(
                            "POST",
                            agent.url,
                            content=body,
                            headers=_traced({**requests.headers(agent.dialect, "text/event-stream"), **sent}),
                            timeout=httpx.Timeout(limit, connect=min(limit, 10.0)),
                        )
                        response = await self._http.send(request, stream=True)
                        if not await self._retry(response.status_code, sent, attempt):
                            break
                        await response.aclose()
        except httpx.HTTPError as exc:
            raise _transport_error(exc, agent.url) from None
        try:
            kind = response.headers.get("content-type", "")
            if response.status_code != 200 or not kind.startswith("text/event-stream"):
                with _deadline(max(0.0, deadline - trio.current_time()), what, limit):
                    raw = await _read_capped(response, self.max_response_bytes, f"{agent.name}'s answer")
                result = requests.read_result(
                    raw, response.status_code, agent.name, agent.url, method
                )  # raises on an error
                event = requests.parse_event(result, method)
                if event is not None:
                    yield event
                return
            events = self._sse(response, method)
            while True:
                with _deadline(max(0.0, deadline - trio.current_time()), what, limit):
                    try:
                        data = await events.__anext__()
                    except StopAsyncIteration:
                        return
                log_wire("in", method, msg_id, len(data), peer=f"a2a:{agent.name}")
                event = requests.parse_event(requests.read_result(data, 200, agent.name, agent.url, method), method)
                if event is None:
                    log.debug("%s: skipped a stream event tern does not know", what)
                    continue
                yield event
                if requests.ends_stream(event):
                    return
        except httpx.HTTPError as exc:
            raise _transport_error(exc, agent.url) from None
        finally:
            with trio.CancelScope(shield=True):
                if events is not None:
                    await events.aclose()
                await response.aclose()

    async def _credential_headers(self, agent: RemoteAgent) -> dict[str, str]:
        """The credentials' headers for a call to ``agent`` (none without credentials)."""
        if self.credentials is None:
            return {}
        try:
            return await self.credentials.headers()
        except TernError as exc:  # the token endpoint failed, a variable is unset: the call fails, named
            raise A2aClientError(f"{agent.name}: no credentials: {exc}") from None

    async def _retry(self, status: int, sent: dict[str, str], attempt: int) -> bool:
        """Whether to send a call again: it was refused (401) with credentials that have a
        fresh token now, and this was the first try."""
        return status == 401 and bool(sent) and attempt == 1 and self.credentials is not None \
            and await self.credentials.refused(sent)

    async def _sse(self, response: httpx.Response, method: str) -> AsyncGenerator[bytes, None]:
        decoder = SseDecoder(self.max_event_bytes)
        try:
            async for chunk in response.aiter_bytes():
                for event in decoder.feed(chunk):
                    if event.data.strip():
                        yield event.data.encode()
        except ProtocolError as exc:
            raise A2aClientError(f"{method}: {exc}") from None


# --- Helpers ---------------------------------------------------------------------------------


class _deadline:
    """``trio.fail_after`` that raises :class:`A2aTimeout` naming what was waited for."""

    def __init__(self, seconds: float, what: str, total: float | None = None) -> None:
        self.seconds, self.what, self.total = seconds, what, seconds if total is None else total
        self._scope = trio.CancelScope()

    def __enter__(self) -> trio.CancelScope:
        self._scope.deadline = trio.current_time() + self.seconds if math.isfinite(self.seconds) else math.inf
        return self._scope.__enter__()

    def __exit__(self, *exc: Any) -> bool:
        handled = self._scope.__exit__(*exc)
        if self._scope.cancelled_caught:
            raise A2aTimeout(f"{self.what}: no answer within {self.total:g} s")
        return handled


async def _read_start(response: httpx.Response, limit: int) -> bytes:
    """The first ``limit`` bytes of a body, the rest left unread: an error page's words."""
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(chunks)[:limit]


async def _read_capped(response: httpx.Response, limit: int, what: str) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise A2aClientError(f"{what} is {int(declared)} bytes (at most {limit})")
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():  # decoded (gzip...), counted as it decodes
        size += len(chunk)
        if size > limit:
            raise A2aClientError(f"{what} is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _transport_error(exc: httpx.HTTPError, url: str) -> TernError:
    chain: BaseException | None = exc
    while chain is not None:  # the guard's refusal sits further down the chain
        if isinstance(chain, BlockedAddress):
            return chain
        chain = chain.__cause__ or chain.__context__
    if isinstance(exc, httpx.TimeoutException):
        return A2aTimeout(f"{mask_url(url)}: timed out ({type(exc).__name__})")
    return A2aClientError(f"cannot reach {mask_url(url)}: {reason(exc)}")


def _traced(headers: dict[str, str]) -> dict[str, str]:
    tracing.inject(headers)  # the current span, when traces are on
    return headers
