"""An OpenAI-compatible chat-completions client, tolerant of the servers people run:
Ollama, llama.cpp's llama-server, LM Studio, vLLM and hosted APIs.

- Streams (``stream: true``), parsing SSE chunks incrementally; tool-call fragments
  are assembled by index. A server that answers with plain JSON instead is fine too.
- Tolerant: ``arguments`` sent as an object instead of a JSON string, tool calls
  without ids (tern makes them), several calls in one turn, a reply in plain text.
- Retries 429 and 5xx with backoff (honouring ``Retry-After``), up to ``RETRIES``.
- Counts each turn's tokens (``Turn.tokens``, for an agent's ``tokens_per_hour``): the
  ``usage`` the server reports (``total_tokens``, else ``prompt_tokens`` +
  ``completion_tokens``; in a stream, the chunk that carries it, which
  ``stream_options.include_usage`` asks for when ``usage=True``). A server that reports
  none gets an estimate (``estimate_tokens``): a quarter of the characters, rounded up,
  of every string sent (messages and tool definitions) plus of the reply (text, tool
  names and arguments); about right for English, high for JSON-heavy tool traffic.
- An endpoint that cannot be reached is one clear sentence, not a traceback.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any
from collections.abc import Callable

import httpx
import msgspec
import trio

from runtime.wire.depth import loads as json_loads
from runtime.config import ModelConfig
from runtime.errors import TernError
from runtime.wire.retry import Backoff, retry_after
from runtime.wire.sse import SseDecoder

__all__ = ["ChatClient", "LlmError", "ToolCall", "Turn", "estimate_tokens"]

RETRIES = 3
MAX_REPLY_BYTES = 8 * 1024 * 1024


class LlmError(TernError):
    """The model could not be asked, or answered with something unusable."""


class ToolCall(msgspec.Struct):
    id: str
    name: str
    arguments: Any  # a dict when the model sent valid JSON; else the raw text


class Turn(msgspec.Struct):
    """One assistant turn: its text, the tool calls it asked for, and what it cost:
    ``usage`` as the server reported it (None: not reported), ``tokens`` that or the
    estimate; ``finish`` the server's ``finish_reason`` ("stop", "length", ...; "" if none)."""

    text: str = ""
    tool_calls: list[ToolCall] = []
    usage: int | None = None
    tokens: int = 0
    finish: str = ""
    split: tuple[int | None, int | None] = (None, None)  # the reported prompt and completion tokens (for traces)


def _usage(obj: Any) -> int | None:
    """The tokens an OpenAI-style ``usage`` object reports, if it reports any."""
    if not isinstance(obj, dict):
        return None
    total = obj.get("total_tokens")
    if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
        return total
    parts = [obj.get("prompt_tokens"), obj.get("completion_tokens")]
    numbers = [n for n in parts if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
    return sum(numbers) if numbers else None


def _chars(value: Any) -> int:
    """Characters of every string in ``value`` (keys too), at any depth."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(len(str(k)) + _chars(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_chars(v) for v in value)
    return 0


def estimate_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]], turn: Turn) -> int:
    """A turn's tokens when the server reports no usage: characters / 4, rounded up, of
    what was sent and of what came back."""
    sent = _chars(messages) + _chars(tools)
    got = len(turn.text) + sum(len(c.name) + len(c.arguments if isinstance(c.arguments, str)
                                                  else json.dumps(c.arguments)) for c in turn.tool_calls)
    return -(-sent // 4) + -(-got // 4)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            return json_loads(raw)
        except ValueError:
            return raw  # malformed: the pipeline refuses it, and the model reads why
    return raw


async def _read_bounded(response: httpx.Response, limit: int, *, cut: bool = False) -> bytes:
    """The body, read piece by piece and stopped once past ``limit`` bytes: a model
    server's reply is never held whole before its size is known. ``cut``: keep the
    first ``limit`` bytes instead of refusing."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            if cut:
                return b"".join(chunks)[:limit]
            raise LlmError("the model's reply is too large")
    return b"".join(chunks)


def _split(obj: Any) -> tuple[int | None, int | None]:
    """The prompt and completion tokens an OpenAI-style ``usage`` object reports, each or None."""
    if not isinstance(obj, dict):
        return None, None
    parts = obj.get("prompt_tokens"), obj.get("completion_tokens")
    return tuple(n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None  # type: ignore[return-value]
                 for n in parts)


class _Assembler:
    """Collects a streamed (or whole) completion into a Turn."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: int | None = None
        self.split: tuple[int | None, int | None] = (None, None)
        self.finish = ""

    def choice(self, choice: dict[str, Any]) -> None:
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self.finish = reason[:40]

    def message(self, message: dict[str, Any], streamed: bool) -> None:
        content = message.get("content")
        if isinstance(content, str):
            self.text.append(content)
        for position, call in enumerate(message.get("tool_calls") or []):
            if not isinstance(call, dict):
                continue
            index = call.get("index", position) if streamed else len(self.calls)
            slot = self.calls.setdefault(index if isinstance(index, int) else position,
                                         {"id": "", "name": "", "arguments": [], "object": None})
            if call.get("id"):
                slot["id"] = str(call["id"])
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            if function.get("name") and not slot["name"]:  # some servers repeat it in every chunk
                slot["name"] = str(function["name"])
            arguments = function.get("arguments")
            if isinstance(arguments, dict):
                slot["object"] = arguments
            elif isinstance(arguments, str):
                slot["arguments"].append(arguments)

    def turn(self) -> Turn:
        calls = []
        for index in sorted(self.calls):
            slot = self.calls[index]
            if not slot["name"]:
                continue
            raw = slot["object"] if slot["object"] is not None else "".join(slot["arguments"])
            calls.append(ToolCall(slot["id"] or f"call_{uuid.uuid4().hex[:12]}", slot["name"], _arguments(raw)))
        return Turn("".join(self.text), calls, usage=self.usage, finish=self.finish, split=self.split)


class ChatClient:
    def __init__(self, model: ModelConfig, *, client: httpx.AsyncClient | None = None, usage: bool = False) -> None:
        """``usage``: ask a streaming server to report each turn's tokens (an agent with a
        ``tokens_per_hour`` budget); off otherwise, as a strict server may refuse the field."""
        self.model = model
        self.usage = usage
        self.url = model.base_url.rstrip("/") + "/chat/completions"
        self._client = client
        key = os.environ.get(model.api_key_env, "") if model.api_key_env else ""
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        if key:
            from runtime.log import register_secret

            register_secret(key)

    def _key_hint(self) -> str:
        """Why a model refused us, as far as the key goes: the usual cause of a 401 is a
        key variable that is unset (no Authorization header was sent at all)."""
        name = self.model.api_key_env
        if not name:
            return " (no key was sent: set agents.model.api_key_env to the variable that holds it)"
        if not self._headers:
            return f" (no key was sent: {name}, which agents.model.api_key_env names, is not set)"
        return f" (the key in {name} was sent and refused)"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            from runtime.net.guard import AddressPolicy
            from runtime.net.outbound import make_client

            self._client = make_client(AddressPolicy(), timeout=self.model.timeout_secs)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                       on_text: Callable[[str], None] | None = None, stop: list[str] | None = None) -> Turn:
        """One assistant turn, streamed; ``on_text`` gets each text fragment as it comes;
        ``stop``: sequences that end it."""
        body: dict[str, Any] = {"model": self.model.model, "messages": messages, "stream": True}
        if stop:
            body["stop"] = stop
        if self.usage:
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = tools
        if self.model.temperature is not None:
            body["temperature"] = self.model.temperature
        if self.model.max_tokens is not None:
            body["max_tokens"] = self.model.max_tokens
        backoff = Backoff(0.5, 30.0)
        for attempt in range(RETRIES + 1):
            try:
                with trio.fail_after(self.model.timeout_secs):
                    turn = await self._once(body, on_text)
                turn.tokens = turn.usage if turn.usage is not None else estimate_tokens(messages, tools, turn)
                return turn
            except _Retry as retry:
                if attempt == RETRIES:
                    raise LlmError(f"the model at {self.model.base_url} kept answering HTTP {retry.status}") from None
                pause = backoff.next()
                await trio.sleep(retry_after(retry.after, default=pause, most=30.0))
            except trio.TooSlowError:
                raise LlmError(f"the model at {self.model.base_url} did not answer within "
                               f"{self.model.timeout_secs:g} s") from None
            except httpx.TransportError as exc:
                if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
                    raise LlmError(f"no LLM answered at {self.model.base_url}: start the model server (Ollama: "
                                   "'ollama serve') or set agents.model.base_url") from None
                raise LlmError(f"the connection to {self.model.base_url} failed: {exc or type(exc).__name__}") from None
        raise AssertionError("unreachable")

    async def _once(self, body: dict[str, Any], on_text: Callable[[str], None] | None) -> Turn:
        assembler = _Assembler()
        async with self._http().stream("POST", self.url, json=body, headers=self._headers) as response:
            if response.status_code == 429 or response.status_code >= 500:
                raise _Retry(response.status_code, response.headers.get("retry-after"))
            if response.status_code >= 400:
                text = (await _read_bounded(response, 300, cut=True)).decode("utf-8", "replace")
                hint = self._key_hint() if response.status_code in (401, 403) else ""
                raise LlmError(f"the model at {self.model.base_url} refused the request: HTTP "
                               f"{response.status_code}{hint}: {text}")
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" in content_type:
                decoder = SseDecoder(MAX_REPLY_BYTES)
                streamed = 0
                async for chunk in response.aiter_bytes():
                    streamed += len(chunk)
                    if streamed > MAX_REPLY_BYTES:
                        raise LlmError("the model's reply is too large")
                    for event in decoder.feed(chunk):
                        if event.data.strip() == "[DONE]":
                            return assembler.turn()
                        self._chunk(event.data, assembler, on_text)
                return assembler.turn()
            raw = await _read_bounded(response, MAX_REPLY_BYTES)
            try:
                data = json_loads(raw)
            except ValueError:
                text = raw.decode("utf-8", "replace")
                if on_text:
                    on_text(text)
                return Turn(text)  # a server that answers in plain text
        choices = data.get("choices") if isinstance(data, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        assembler.choice(choice)
        assembler.message(message, streamed=False)
        assembler.usage = _usage(data.get("usage")) if isinstance(data, dict) else None
        assembler.split = _split(data.get("usage")) if isinstance(data, dict) else (None, None)
        turn = assembler.turn()
        if on_text and turn.text:
            on_text(turn.text)
        return turn

    @staticmethod
    def _chunk(data: str, assembler: _Assembler, on_text: Callable[[str], None] | None) -> None:
        try:
            chunk = json_loads(data)
        except ValueError:
            return  # a keep-alive or a malformed line: skip it
        if isinstance(chunk, dict) and chunk.get("usage") is not None:
            usage = _usage(chunk["usage"])  # the last report wins: some servers send a running total
            if usage is not None:
                assembler.usage = usage
                assembler.split = _split(chunk["usage"])
        for choice in chunk.get("choices") or [] if isinstance(chunk, dict) else []:
            if not isinstance(choice, dict):
                continue
            assembler.choice(choice)
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else choice.get("message")
            if isinstance(delta, dict):
                if on_text and isinstance(delta.get("content"), str) and delta["content"]:
                    on_text(delta["content"])
                assembler.message(delta, streamed=True)


class _Retry(Exception):
    def __init__(self, status: int, after: str | None) -> None:
        self.status = status
        self.after = after
