"""An OpenAI-compatible chat-completions client, tolerant of the servers people run:
Ollama, llama.cpp's llama-server, LM Studio, vLLM and hosted APIs.

- Streams (``stream: true``), parsing SSE chunks incrementally; tool-call fragments
  are assembled by index. A server that answers with plain JSON instead is fine too.
- Tolerant: ``arguments`` sent as an object instead of a JSON string, tool calls
  without ids (tern makes them), several calls in one turn, a reply in plain text.
- Retries 429 and 5xx with backoff (honouring ``Retry-After``), up to ``RETRIES``.
- An endpoint that cannot be reached is one clear sentence, not a traceback.
"""

from __future__ import annotations

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
from runtime.wire.sse import SseDecoder

__all__ = ["ChatClient", "LlmError", "ToolCall", "Turn"]

RETRIES = 3
MAX_REPLY_BYTES = 8 * 1024 * 1024


class LlmError(TernError):
    """The model could not be asked, or answered with something unusable."""


class ToolCall(msgspec.Struct):
    id: str
    name: str
    arguments: Any  # a dict when the model sent valid JSON; else the raw text


class Turn(msgspec.Struct):
    """One assistant turn: its text and the tool calls it asked for."""

    text: str = ""
    tool_calls: list[ToolCall] = []


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


class _Assembler:
    """Collects a streamed (or whole) completion into a Turn."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}

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
        return Turn("".join(self.text), calls)


class ChatClient:
    def __init__(self, model: ModelConfig, *, client: httpx.AsyncClient | None = None) -> None:
        self.model = model
        self.url = model.base_url.rstrip("/") + "/chat/completions"
        self._client = client
        key = os.environ.get(model.api_key_env, "") if model.api_key_env else ""
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        if key:
            from runtime.log import register_secret

            register_secret(key)

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
                       on_text: Callable[[str], None] | None = None) -> Turn:
        """One assistant turn, streamed; ``on_text`` gets each text fragment as it comes."""
        body: dict[str, Any] = {"model": self.model.model, "messages": messages, "stream": True}
        if tools:
            body["tools"] = tools
        if self.model.temperature is not None:
            body["temperature"] = self.model.temperature
        if self.model.max_tokens is not None:
            body["max_tokens"] = self.model.max_tokens
        delay = 0.5
        for attempt in range(RETRIES + 1):
            try:
                with trio.fail_after(self.model.timeout_secs):
                    return await self._once(body, on_text)
            except _Retry as retry:
                if attempt == RETRIES:
                    raise LlmError(f"the model at {self.model.base_url} kept answering HTTP {retry.status}") from None
                await trio.sleep(min(retry.after if retry.after is not None else delay, 30.0))
                delay *= 2
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
                after = response.headers.get("retry-after", "")
                raise _Retry(response.status_code, float(after) if after.replace(".", "", 1).isdigit() else None)
            if response.status_code >= 400:
                text = (await _read_bounded(response, 300, cut=True)).decode("utf-8", "replace")
                raise LlmError(f"the model at {self.model.base_url} refused the request: HTTP "
                               f"{response.status_code}: {text}")
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
        choice = (data.get("choices") or [{}])[0] if isinstance(data, dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        assembler.message(message, streamed=False)
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
        for choice in chunk.get("choices") or [] if isinstance(chunk, dict) else []:
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else choice.get("message")
            if isinstance(delta, dict):
                if on_text and isinstance(delta.get("content"), str) and delta["content"]:
                    on_text(delta["content"])
                assembler.message(delta, streamed=True)


class _Retry(Exception):
    def __init__(self, status: int, after: float | None) -> None:
        self.status = status
        self.after = after
