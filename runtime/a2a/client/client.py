"""tern's A2A client: discover a peer from its card, then send, get, cancel, stream
and poll in whichever dialect the peer speaks (``0.1``, ``0.3`` or ``1.0``).

- Discovery reads ``<url>/.well-known/agent-card.json``, then ``agent.json`` (and the
  same two at the host's root when ``url`` has a path); a URL ending in ``.json`` is
  taken as the card itself. The card is capped (:data:`MAX_CARD_BYTES`) and must be a
  JSON object with a name and an endpoint. The dialect comes from the card: a
  ``supportedInterfaces`` JSONRPC entry with protocolVersion 1.x is 1.0 (that entry's
  URL and tenant); 0.2/0.3 markers (``protocolVersion``, ``preferredTransport``,
  ``additionalInterfaces``, ``securitySchemes``, or a card found at the 0.3 location)
  are 0.3; anything else is the legacy 0.1 shape (``tasks/send``).
- Every call is one JSON-RPC POST; a JSON-RPC error becomes :class:`A2aClientError`
  with its ``code``. 1.0 calls carry ``A2A-Version: 1.0``.
- Streams are SSE, each event bounded (:data:`MAX_EVENT_BYTES`); the stream ends when
  the server closes it, or at a final, terminal or interrupted status.
- Every wait is bounded: requests by ``timeout``, blocking sends, streams and polls by
  ``send_timeout`` (tern's own server answers a blocking send after at most 300 s).
- Every connection goes through the SSRF guard (``runtime.net.outbound.make_client``);
  a URL the guard refuses outright (the metadata service) fails before any connection.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, AsyncGenerator, AsyncIterator, Dict, Union
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
import msgspec
import trio

from runtime import __version__
from runtime.a2a import dialects
from runtime.a2a.dialects import BadMessage, Dialect
from runtime.a2a.model import INTERRUPTED, TERMINAL, ArtifactEvent, Message, StatusEvent, Task, new_id, text_of
from runtime.errors import ProtocolError, TernError, TernTimeout
from runtime.log import get_logger, log_wire
from runtime.net.guard import AddressPolicy, BlockedAddress, check_url
from runtime.net.outbound import make_client
from runtime.wire.sse import SseDecoder

__all__ = ["A2aClient", "RemoteAgent", "A2aClientError", "A2aTimeout", "Result", "StreamEvent", "reply_text",
           "MAX_CARD_BYTES", "MAX_RESPONSE_BYTES", "MAX_EVENT_BYTES", "ERROR_NAMES"]

log = get_logger("a2a.client")

MAX_CARD_BYTES = 1024 * 1024
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
MAX_EVENT_BYTES = 10 * 1024 * 1024
CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
ERROR_NAMES = {-32700: "ParseError", -32600: "InvalidRequest", -32601: "MethodNotFound", -32602: "InvalidParams",
               -32603: "InternalError", -32001: "TaskNotFound", -32002: "TaskNotCancelable",
               -32003: "PushNotificationNotSupported", -32004: "UnsupportedOperation",
               -32005: "ContentTypeNotSupported", -32006: "InvalidAgentResponse",
               -32007: "ExtendedAgentCardNotConfigured", -32008: "ExtensionSupportRequired",
               -32009: "VersionNotSupported"}

Result = Union[Task, Message]
StreamEvent = Union[Task, Message, StatusEvent, ArtifactEvent]


class A2aClientError(TernError):
    """A peer could not be reached, answered something unusable, or answered with a
    JSON-RPC error (then ``code`` is its code and ``message`` its text)."""

    def __init__(self, text: str, *, code: Union[int, None] = None, message: str = "", data: Any = None) -> None:
        super().__init__(text)
        self.code = code
        self.message = message or text
        self.data = data


class A2aTimeout(A2aClientError, TernTimeout):
    """A wait on a peer passed its deadline."""


class RemoteAgent(msgspec.Struct, kw_only=True):
    """A discovered peer: where to send JSON-RPC, in which dialect, and its card."""

    name: str
    url: str  # the JSON-RPC endpoint
    dialect: str  # "0.1" | "0.3" | "1.0"
    card_url: str
    description: str = ""
    streaming: bool = False
    skills: list[dict[str, Any]] = []
    tenant: Union[str, None] = None
    card: dict[str, Any] = {}


class A2aClient:
    """One HTTP connection pool to any number of A2A peers.

    Use as ``async with A2aClient() as client:`` (or call :meth:`aclose`). ``headers``
    go on every request (e.g. ``Authorization``)."""

    def __init__(self, *, policy: AddressPolicy = AddressPolicy(), timeout: float = 30.0,
                 send_timeout: float = 300.0, headers: Union[Dict[str, str], None] = None,
                 max_card_bytes: int = MAX_CARD_BYTES, max_response_bytes: int = MAX_RESPONSE_BYTES,
                 max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.policy = policy
        self.timeout = timeout
        self.send_timeout = send_timeout
        self.max_card_bytes = max_card_bytes
        self.max_response_bytes = max_response_bytes
        self.max_event_bytes = max_event_bytes
        self._http = make_client(policy, timeout=timeout,
                                 headers={"User-Agent": f"tern/{__version__} A2A", **(headers or {})})

    async def __aenter__(self) -> A2aClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._http.aclose()

    # --- Discovery ----------------------------------------------------------------------

    async def discover(self, url: str, *, dialect: Union[str, None] = None,
                       timeout: Union[float, None] = None) -> RemoteAgent:
        """Read the peer's card and pick the dialect (``dialect`` forces one)."""
        if dialect is not None and dialect not in ("0.1", "0.3", "1.0"):
            raise A2aClientError(f"unknown A2A dialect {dialect!r} (use 0.1, 0.3 or 1.0)")
        check_url(url, self.policy)
        limit = self.timeout if timeout is None else timeout
        failures: list[str] = []
        with _deadline(limit, f"reading the agent card of {url}"):
            for card_url in _card_urls(url):
                try:
                    card = await self._fetch_card(card_url)
                except _NoCard as exc:
                    failures.append(str(exc))
                    continue
                return _remote(card, card_url, dialect)
        raise A2aClientError(f"no A2A agent card at {url}: " + "; ".join(failures))

    async def _fetch_card(self, card_url: str) -> dict[str, Any]:
        try:
            async with self._http.stream("GET", card_url, headers={"Accept": "application/json"}) as response:
                if response.status_code in (401, 403):
                    raise A2aClientError(f"{card_url}: HTTP {response.status_code}: the card needs credentials "
                                         "(pass them as a header, e.g. Authorization)")
                if response.status_code != 200:
                    raise _NoCard(f"{_short(card_url)}: HTTP {response.status_code}")
                body = await _read_capped(response, self.max_card_bytes, f"the agent card at {card_url}")
        except httpx.HTTPError as exc:
            raise _transport_error(exc, card_url) from None
        try:
            card = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            kind = response.headers.get("content-type", "unknown type").split(";")[0]
            raise _NoCard(f"{_short(card_url)}: not JSON ({kind}: {_snippet(body)})") from None
        if not isinstance(card, dict):
            raise _NoCard(f"{_short(card_url)}: a card must be a JSON object, got {type(card).__name__}")
        if not isinstance(card.get("name"), str) or not card["name"]:
            raise _NoCard(f"{_short(card_url)}: the card has no name")
        return card

    # --- Calls ----------------------------------------------------------------------------

    async def send(self, agent: RemoteAgent, text: str, *, context_id: Union[str, None] = None,
                   task_id: Union[str, None] = None, blocking: bool = True,
                   timeout: Union[float, None] = None) -> Result:
        """Send ``text``; the answer is the task (as it is when the peer returns: done or
        waiting for input if ``blocking``) or the peer's message. 0.1 has no non-blocking
        send: its ``tasks/send`` answers when the peer does."""
        method, params = self._send_request(agent, text, context_id, task_id, blocking, stream=False)
        limit = timeout if timeout is not None else (self.send_timeout if blocking else self.timeout)
        result = await self._call(agent, method, params, limit)
        parsed = _parse(result, method)
        if not isinstance(parsed, (Task, Message)):
            raise A2aClientError(f"{agent.name}: {method} answered neither a task nor a message")
        return parsed

    async def get(self, agent: RemoteAgent, task_id: str, *, history_length: Union[int, None] = None,
                  timeout: Union[float, None] = None) -> Task:
        params: dict[str, Any] = {"id": task_id}
        if history_length is not None:
            params["historyLength"] = history_length
        method = "GetTask" if agent.dialect == "1.0" else "tasks/get"
        return _as_task(await self._call(agent, method, params, timeout), method, agent)

    async def cancel(self, agent: RemoteAgent, task_id: str, *, timeout: Union[float, None] = None) -> Task:
        method = "CancelTask" if agent.dialect == "1.0" else "tasks/cancel"
        return _as_task(await self._call(agent, method, {"id": task_id}, timeout), method, agent)

    async def poll(self, agent: RemoteAgent, task_id: str, *, interval: float = 1.0,
                   timeout: Union[float, None] = None) -> Task:
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

    async def stream(self, agent: RemoteAgent, text: str, *, context_id: Union[str, None] = None,
                     task_id: Union[str, None] = None, timeout: Union[float, None] = None) -> AsyncIterator[StreamEvent]:
        """Send ``text`` and yield the task's events as they come (the first is the task
        or a message). Close it with ``contextlib.aclosing`` when leaving early."""
        method, params = self._send_request(agent, text, context_id, task_id, True, stream=True)
        async for event in self._stream(agent, method, params, timeout):
            yield event

    async def resubscribe(self, agent: RemoteAgent, task_id: str, *,
                          timeout: Union[float, None] = None) -> AsyncIterator[StreamEvent]:
        """The events of a running task from now on."""
        method = "SubscribeToTask" if agent.dialect == "1.0" else "tasks/resubscribe"
        async for event in self._stream(agent, method, {"id": task_id}, timeout):
            yield event

    # --- The wire ---------------------------------------------------------------------------

    def _send_request(self, agent: RemoteAgent, text: str, context_id: Union[str, None],
                      task_id: Union[str, None], blocking: bool, *, stream: bool) -> tuple[str, dict[str, Any]]:
        message = Message(role="user", parts=[{"text": text}], context_id=context_id or None,
                          task_id=task_id or None)
        dialect: Dialect = agent.dialect  # type: ignore[assignment]
        params: dict[str, Any] = {"message": dialects.render_message(message, dialect)}
        if dialect == "1.0":
            method = "SendStreamingMessage" if stream else "SendMessage"
            if not stream:
                params["configuration"] = {"returnImmediately": not blocking}
        elif dialect == "0.3":
            method = "message/stream" if stream else "message/send"
            if not stream:
                params["configuration"] = {"blocking": blocking}
        else:
            method = "tasks/sendSubscribe" if stream else "tasks/send"
            params["id"] = task_id or new_id()  # 0.1: the client names the task
            if context_id:
                params["sessionId"] = context_id
        return method, params

    def _headers(self, agent: RemoteAgent, accept: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept}
        if agent.dialect == "1.0":
            headers["A2A-Version"] = "1.0"
        return headers

    def _envelope(self, agent: RemoteAgent, method: str, params: dict[str, Any]) -> tuple[str, bytes]:
        if agent.dialect == "1.0" and agent.tenant:
            params = {"tenant": agent.tenant, **params}
        msg_id = new_id()
        return msg_id, json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params},
                                  ensure_ascii=False).encode()

    async def _call(self, agent: RemoteAgent, method: str, params: dict[str, Any],
                    timeout: Union[float, None]) -> Any:
        check_url(agent.url, self.policy)
        msg_id, body = self._envelope(agent, method, params)
        limit = self.timeout if timeout is None else timeout
        started = time.perf_counter()
        log_wire("out", method, msg_id, len(body), peer=f"a2a:{agent.name}")
        with _deadline(limit, f"{agent.name}: {method}"):
            try:
                async with self._http.stream("POST", agent.url, content=body,
                                             headers=self._headers(agent, "application/json, text/event-stream"),
                                             timeout=httpx.Timeout(limit, connect=min(limit, 10.0))) as response:
                    if response.headers.get("content-type", "").startswith("text/event-stream") \
                            and response.status_code == 200:
                        answer = None  # a peer that streams even a plain call: take its last answer
                        async for data in self._sse(response, method):
                            answer = data
                        raw = b"" if answer is None else answer
                    else:
                        raw = await _read_capped(response, self.max_response_bytes, f"{agent.name}'s answer")
                    status = response.status_code
            except httpx.HTTPError as exc:
                raise _transport_error(exc, agent.url) from None
        log_wire("in", method, msg_id, len(raw), started, peer=f"a2a:{agent.name}")
        if agent.dialect == "0.1" and status in (404, 405) and method in _SEED_REST:
            return await self._seed_rest(agent, method, params, limit)
        return _result(raw, status, agent, method)

    async def _seed_rest(self, agent: RemoteAgent, method: str, params: dict[str, Any], limit: float) -> Any:
        """OpenFang's server has no JSON-RPC route, only the seed's REST ones answering a
        bare task: ``POST {url}/tasks/send``, ``GET {url}/tasks/{id}``, ``POST .../cancel``."""
        from urllib.parse import quote

        base = agent.url.rstrip("/")
        verb, path = _SEED_REST[method]
        url = base + path.format(id=quote(str(params.get("id", "")), safe=""))
        check_url(url, self.policy)
        with _deadline(limit, f"{agent.name}: {method} (REST)"):
            try:
                async with self._http.stream(verb, url, content=json.dumps(params).encode() if verb == "POST" else None,
                                             headers={"Content-Type": "application/json", "Accept": "application/json"},
                                             timeout=httpx.Timeout(limit, connect=min(limit, 10.0))) as response:
                    raw = await _read_capped(response, self.max_response_bytes, f"{agent.name}'s answer")
                    status = response.status_code
            except httpx.HTTPError as exc:
                raise _transport_error(exc, url) from None
        if status != 200:
            raise A2aClientError(f"{agent.name}: {method}: HTTP {status} from {url}: {_snippet(raw) if raw else 'empty'}")
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise A2aClientError(f"{agent.name}: {method}: not JSON from {url}: {_snippet(raw)}") from None

    async def _stream(self, agent: RemoteAgent, method: str, params: dict[str, Any],
                      timeout: Union[float, None]) -> AsyncIterator[StreamEvent]:
        check_url(agent.url, self.policy)
        msg_id, body = self._envelope(agent, method, params)
        limit = self.send_timeout if timeout is None else timeout
        deadline = trio.current_time() + limit
        what = f"{agent.name}: {method}"
        log_wire("out", method, msg_id, len(body), peer=f"a2a:{agent.name}")
        # Cancel scopes wrap single awaits only, never a yield (trio's rule for generators).
        events: Union[AsyncGenerator[bytes, None], None] = None
        try:
            with _deadline(limit, what):
                request = self._http.build_request("POST", agent.url, content=body,
                                                   headers=self._headers(agent, "text/event-stream"),
                                                   timeout=httpx.Timeout(limit, connect=min(limit, 10.0)))
                response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, agent.url) from None
        try:
            kind = response.headers.get("content-type", "")
            if response.status_code != 200 or not kind.startswith("text/event-stream"):
                with _deadline(max(0.0, deadline - trio.current_time()), what, limit):
                    raw = await _read_capped(response, self.max_response_bytes, f"{agent.name}'s answer")
                result = _result(raw, response.status_code, agent, method)  # raises on an error
                event = _parse(result, method)
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
                event = _parse(_result(data, 200, agent, method), method)
                if event is None:
                    log.debug("%s: skipped a stream event tern does not know", what)
                    continue
                yield event
                if isinstance(event, Message) or (isinstance(event, StatusEvent) and (
                        event.final or event.state in TERMINAL or event.state in INTERRUPTED)):
                    return
        except httpx.HTTPError as exc:
            raise _transport_error(exc, agent.url) from None
        finally:
            with trio.CancelScope(shield=True):
                if events is not None:
                    await events.aclose()
                await response.aclose()

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


class _NoCard(TernError):
    """This candidate URL has no usable card; try the next one."""


class _deadline:
    """``trio.fail_after`` that raises :class:`A2aTimeout` naming what was waited for."""

    def __init__(self, seconds: float, what: str, total: Union[float, None] = None) -> None:
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


def _card_urls(url: str) -> list[str]:
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path.endswith(".json"):
        return [url]
    base = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    urls = [base + suffix for suffix in CARD_PATHS]
    if path:  # the well-known location is at the host's root too
        root = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        urls += [root + suffix for suffix in CARD_PATHS]
    return urls


def _short(url: str) -> str:
    return urlsplit(url).path or url


def _snippet(body: bytes) -> str:
    text = body[:60].decode("utf-8", "replace").replace("\n", " ").strip()
    return repr(text + ("..." if len(body) > 60 else ""))


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
    chain: Union[BaseException, None] = exc
    while chain is not None:  # the guard's refusal sits further down the chain
        if isinstance(chain, BlockedAddress):
            return chain
        chain = chain.__cause__ or chain.__context__
    if isinstance(exc, httpx.TimeoutException):
        return A2aTimeout(f"{url}: timed out ({type(exc).__name__})")
    text = str(exc) or type(exc).__name__
    return A2aClientError(f"cannot reach {url}: {text}")


def _pick_interface(card: dict[str, Any], major: str) -> Union[dict[str, Any], None]:
    """The first JSONRPC entry of ``supportedInterfaces`` whose protocolVersion has this
    major version ("1" or "0"): the card lists them in order of preference."""
    for entry in card.get("supportedInterfaces") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str) or not entry["url"]:
            continue
        binding = str(entry.get("protocolBinding") or entry.get("transport") or "").upper()
        version = str(entry.get("protocolVersion") or "")
        if binding in ("JSONRPC", "JSON-RPC") and version.split(".")[0] == major:
            return entry
    return None


def _jsonrpc_url_03(card: dict[str, Any]) -> Union[str, None]:
    preferred = str(card.get("preferredTransport") or "JSONRPC").upper()
    if preferred in ("JSONRPC", "JSON-RPC") and isinstance(card.get("url"), str) and card["url"]:
        return card["url"]
    for entry in card.get("additionalInterfaces") or []:
        if isinstance(entry, dict) and str(entry.get("transport") or "").upper() in ("JSONRPC", "JSON-RPC") \
                and isinstance(entry.get("url"), str) and entry["url"]:
            return entry["url"]
    entry = _pick_interface(card, "0")
    return entry["url"] if entry else None


def _looks_03(card: dict[str, Any], card_url: str) -> bool:
    version = str(card.get("protocolVersion") or "")
    return (version.startswith(("0.2", "0.3")) or any(key in card for key in (
        "preferredTransport", "additionalInterfaces", "securitySchemes", "supportsAuthenticatedExtendedCard"))
        or _pick_interface(card, "0") is not None or card_url.rstrip("/").endswith("agent-card.json"))


def _remote(card: dict[str, Any], card_url: str, forced: Union[str, None]) -> RemoteAgent:
    v10 = _pick_interface(card, "1")
    tenant = None
    if forced == "1.0" or (forced is None and v10 is not None):
        dialect = "1.0"
        url = v10["url"] if v10 else card.get("url")
        tenant = v10.get("tenant") if v10 else None
    elif forced == "0.3" or (forced is None and _looks_03(card, card_url)):
        dialect, url = "0.3", _jsonrpc_url_03(card)
    else:
        dialect, url = "0.1", card.get("url")
    if not isinstance(url, str) or not url:
        where = {"1.0": "no JSONRPC 1.x entry in supportedInterfaces and no url",
                 "0.3": "no JSON-RPC url (preferredTransport, additionalInterfaces, supportedInterfaces)",
                 "0.1": "no url"}[dialect]
        raise A2aClientError(f"the agent card at {card_url} names no endpoint tern can use for A2A {dialect}: {where}")
    url = urljoin(card_url, url)  # a relative endpoint is relative to the card
    capabilities = card.get("capabilities") if isinstance(card.get("capabilities"), dict) else {}
    skills = [s for s in card.get("skills") or [] if isinstance(s, dict)]
    return RemoteAgent(name=card["name"], url=url, dialect=dialect, card_url=card_url,
                       description=str(card.get("description") or ""), streaming=bool(capabilities.get("streaming")),
                       skills=skills, tenant=tenant if isinstance(tenant, str) and tenant else None, card=card)


#: The seed's (OpenFang's) REST routes for a 0.1 peer without JSON-RPC.
_SEED_REST = {"tasks/send": ("POST", "/tasks/send"), "tasks/get": ("GET", "/tasks/{id}"),
              "tasks/cancel": ("POST", "/tasks/{id}/cancel")}


def _result(raw: bytes, status: int, agent: RemoteAgent, method: str) -> Any:
    """The ``result`` of a JSON-RPC answer; an error answer raises."""
    try:
        answer = json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError):
        answer = None
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), int) and not isinstance(error["code"], bool):
        code, text = error["code"], str(error.get("message") or "no message")
        raise A2aClientError(f"{agent.name}: {method}: {text} ({ERROR_NAMES.get(code, 'error')} {code})", code=code,
                             message=text, data=error.get("data"))
    said = ""  # an HTTP error's own words: {"error": {"message": ...}} (tern, REST peers) or the body
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        said = error["message"]
    elif raw:
        said = _snippet(raw)
    if status in (401, 403):
        raise A2aClientError(f"{agent.name}: {method}: HTTP {status}: the agent needs credentials "
                             f"(pass them as a header, e.g. Authorization){': ' + said if said else ''}")
    if status != 200:
        raise A2aClientError(f"{agent.name}: {method}: HTTP {status} from {agent.url}{': ' + said if said else ''}")
    if not isinstance(answer, dict) or "result" not in answer:
        raise A2aClientError(f"{agent.name}: {method}: not a JSON-RPC answer: {_snippet(raw) if raw else 'empty'}")
    return answer["result"]


def _parse(result: Any, method: str) -> Union[StreamEvent, None]:
    try:
        return dialects.parse_event(result)
    except BadMessage as exc:
        raise A2aClientError(f"{method}: the peer's answer is not valid A2A: {exc}") from None


def _as_task(result: Any, method: str, agent: RemoteAgent) -> Task:
    if isinstance(result, dict) and isinstance(result.get("task"), dict) and len(result) == 1:
        result = result["task"]
    try:
        return dialects.parse_task(result)
    except BadMessage as exc:
        raise A2aClientError(f"{agent.name}: {method}: the answer is not a task: {exc}") from None


def reply_text(result: Union[Task, Message]) -> str:
    """What a person reads as the answer: a message's text, else the task's artifacts'
    text, else its status message, else the last agent message in its history."""
    if isinstance(result, Message):
        return text_of(result.parts)
    if result.artifacts:
        return "\n".join(text for text in (text_of(a.parts) for a in result.artifacts) if text)
    if result.status_message is not None:
        return text_of(result.status_message.parts)
    for message in reversed(result.history):
        if message.role == "agent":
            return text_of(message.parts)
    return ""
