"""An upstream MCP server's ``sampling/createMessage`` (a handshake-era request, or one
input request of a 2026-07-28 ``input_required`` result) answered by a configured model.

Only a server with ``[mcp_servers.sampling]`` is offered sampling (the capability is
declared for it alone); its ``agent`` names the llm agent whose ``[agents.model]``
answers. Each request is a call of the pseudo-tool ``mcp_{server}_sampling`` by the
operator (agent ``""``, caller ``mcp:{server}``), decided by the governance policy like
any tool: a ``[[governance.rules]]`` entry may allow or deny it; with none it is asked
of a person through the approval channels, and through the caller of the tool call that
caused the request when it can ask (``elicitation.CALL_ASK``: a desktop assistant behind
``tern mcp``, the terminal of ``tern run``). The pseudo-tool counts as destructive: it
spends the model's tokens and sends its text to the server. The person sees the server,
the conversation shortened, the token cap and the model, never more.

The request is untrusted. Refused with -32602 before anyone is asked: more than
``MAX_MESSAGES`` messages, more than ``MAX_TEXT_CHARS`` of text or ``MAX_MEDIA_BYTES``
of images and audio, content other than text, image and audio (``tool_use`` and
``tool_result`` included: tern does not declare ``sampling.tools``), tools offered, a
``maxTokens`` that is not a positive integer. ``maxTokens`` above the configured
``max_tokens`` is cut to it; ``modelPreferences``, ``includeContext`` and ``metadata``
are ignored (the config chooses the model, and tern declares no ``sampling.context``);
``temperature`` and ``stopSequences`` are passed on. At most ``requests_per_minute``
requests of one server are taken (a server that samples in a loop gets -32000), the
model's ``timeout_secs`` bounds the whole answer, and the reply is cut to
``MAX_REPLY_CHARS``. A request denied by policy or by a person is answered with the
spec's -1 ("User rejected sampling request"); the server keeps working.

Every request leaves one ``mcp_sampling`` audit record and one ``mcp.sampling`` event:
the server, the outcome, the digest of the request, the token cap and the tokens the
model used; the text never goes to the log, the audit file or an event.
"""

from __future__ import annotations

import re
import time
from typing import Any, NamedTuple
from collections.abc import Callable

import msgspec
import trio

from runtime.config import Config
from runtime.errors import RpcError, TernError
from runtime.kernel.audit import digest
from runtime.kernel.elicitation import CALL_ASK
from runtime.log import get_logger, shorten
from runtime.mcp.names import format_mcp_tool_name
from runtime.wire.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from runtime.wire.ratelimit import RateLimiter

__all__ = ["SamplingAnswers", "chat_messages", "USER_REJECTED", "RATE_LIMITED", "MAX_MESSAGES", "MAX_TEXT_CHARS",
           "MAX_MEDIA_BYTES", "MAX_REPLY_CHARS"]

log = get_logger("mcp")

USER_REJECTED = -1  # the spec's code for a sampling request the user rejected
RATE_LIMITED = -32000
MAX_MESSAGES = 100
MAX_TEXT_CHARS = 200_000  # of all text in one request (messages and systemPrompt)
MAX_MEDIA_BYTES = 4 * 1024 * 1024  # of all base64 image and audio data in one request
MAX_REPLY_CHARS = 100_000
MAX_STOP_SEQUENCES = 4  # what OpenAI-compatible servers take
SHOWN_CHARS = 600  # of the conversation, as shown to a person
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/mpeg": "mp3",
                  "audio/mp3": "mp3"}
_STOP_REASONS = {"stop": "endTurn", "length": "maxTokens"}
#: The pseudo-tool's annotations: not read-only and destructive, so the policy asks by default.
_ANNOTATIONS = {"readOnlyHint": False, "destructiveHint": True}


class _PseudoTool(NamedTuple):
    name: str
    annotations: dict[str, Any]


class Request(NamedTuple):
    """A checked request: the OpenAI-style messages and what shapes the answer."""

    messages: list[dict[str, Any]]
    max_tokens: int
    temperature: float | None
    stop: list[str]
    media: int  # images and audio clips


def _invalid(why: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"sampling/createMessage: {why}")


def chat_messages(params: dict[str, Any]) -> Request:
    """The request as OpenAI chat messages; RpcError(-32602) naming what is wrong."""
    if params.get("tools") or params.get("toolChoice"):
        raise _invalid("tools in sampling are not offered (tern declares no sampling.tools)")
    messages = params.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages (a non-empty array) is required")
    if len(messages) > MAX_MESSAGES:
        raise _invalid(f"{len(messages)} messages; at most {MAX_MESSAGES} are taken")
    max_tokens = params.get("maxTokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _invalid("maxTokens (a positive integer) is required")
    temperature = params.get("temperature")
    if temperature is not None and (not isinstance(temperature, (int, float)) or isinstance(temperature, bool)
                                    or not 0 <= temperature <= 2):
        raise _invalid("temperature must be a number from 0 to 2")
    stop = params.get("stopSequences") or []
    if not isinstance(stop, list) or len(stop) > MAX_STOP_SEQUENCES or \
            not all(isinstance(s, str) and 0 < len(s) <= 100 for s in stop):
        raise _invalid(f"stopSequences must be at most {MAX_STOP_SEQUENCES} strings of 1 to 100 characters")
    budget = _Budget()
    chat: list[dict[str, Any]] = []
    system = params.get("systemPrompt")
    if system is not None:
        if not isinstance(system, str):
            raise _invalid("systemPrompt must be a string")
        if system:
            chat.append({"role": "system", "content": budget.text(system)})
    for index, message in enumerate(messages):
        chat.append(_message(message, index, budget))
    return Request(chat, max_tokens, float(temperature) if temperature is not None else None, stop, budget.media)


class _Budget:
    """What one request may hold, counted as its messages are read."""

    def __init__(self) -> None:
        self.chars = 0
        self.media_bytes = 0
        self.media = 0

    def text(self, text: str) -> str:
        self.chars += len(text)
        if self.chars > MAX_TEXT_CHARS:
            raise _invalid(f"more than {MAX_TEXT_CHARS} characters of text")
        return text

    def data(self, data: Any, where: str) -> str:
        if not isinstance(data, str):
            raise _invalid(f"{where}: data (base64) is required")
        self.media_bytes += len(data)
        self.media += 1
        if self.media_bytes > MAX_MEDIA_BYTES:
            raise _invalid(f"more than {MAX_MEDIA_BYTES} bytes of image and audio data")
        if not _BASE64.fullmatch(data):
            raise _invalid(f"{where}: data is not base64")
        return data


def _message(message: Any, index: int, budget: _Budget) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise _invalid(f"{where}: expected an object with role user or assistant")
    content = message.get("content")
    blocks = content if isinstance(content, list) else [content]
    if not blocks:
        raise _invalid(f"{where}: content is empty")
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": budget.text(block["text"])})
        elif kind == "image" and isinstance(block.get("mimeType"), str) and block["mimeType"].startswith("image/"):
            data = budget.data(block.get("data"), where)
            parts.append({"type": "image_url", "image_url": {"url": f"data:{block['mimeType'][:100]};base64,{data}"}})
        elif kind == "audio" and block.get("mimeType") in _AUDIO_FORMATS:
            data = budget.data(block.get("data"), where)
            parts.append({"type": "input_audio", "input_audio": {"data": data,
                                                                 "format": _AUDIO_FORMATS[block["mimeType"]]}})
        elif kind in ("image", "audio"):
            raise _invalid(f"{where}: {kind} content needs a supported mimeType and base64 data")
        else:
            raise _invalid(f"{where}: {str(kind)[:40]} content is not taken (text, image and audio are)")
    role = message["role"]
    if role == "assistant" and any(part["type"] != "text" for part in parts):
        raise _invalid(f"{where}: an assistant message may hold text only")
    if all(part["type"] == "text" for part in parts):
        return {"role": role, "content": "".join(part["text"] for part in parts)}
    return {"role": role, "content": parts}


def shown(server: str, request: Request, model: str) -> dict[str, Any]:
    """What a person is shown: the conversation's text shortened, the cap, the model."""
    lines = []
    for message in request.messages:
        content = message["content"]
        text = content if isinstance(content, str) else " ".join(p.get("text", f"[{p['type']}]") for p in content)
        lines.append(f"{message['role']}: {text}")
    return {"server": server, "conversation": shorten("\n".join(lines), SHOWN_CHARS),
            "messages": len(request.messages), "media": request.media, "max_tokens": request.max_tokens,
            "model": model}


class SamplingAnswers:
    """``(server, params) -> CreateMessageResult``, for the elicitation handler's dispatch."""

    def __init__(self, config: Callable[[], Config], pipeline: Any, approvals: Any) -> None:
        self.config = config  # the current config (a reload may change the servers' sampling)
        self.pipeline = pipeline  # its policy, audit log, events and redaction
        self.approvals = approvals
        self._limits: dict[tuple[str, int], RateLimiter] = {}  # by server and its rate (a reload may change it)

    async def __call__(self, server: str, params: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        tool = format_mcp_tool_name(server, "sampling")
        record: dict[str, Any] = {"server": server, "tool": tool, "caller": f"mcp:{server}",
                                  "arguments": digest(params)}
        try:
            answer = await self._answer(server, tool, params, record)
        except RpcError as exc:
            record.setdefault("outcome", "error")
            record["error"] = exc.message[:300]
            raise
        except Exception:  # a bug of ours: the server gets an error, the session lives on
            log.error("answering sampling for MCP server '%s' failed", server, exc_info=True)
            record["outcome"] = "error"
            raise RpcError(INTERNAL_ERROR, "internal error while answering sampling") from None
        else:
            record["outcome"] = "ok"
            return answer
        finally:
            record["ms"] = round((time.perf_counter() - started) * 1000, 3)
            self._report(record)

    async def _answer(self, server: str, tool: str, params: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
        config = self.config()
        entry = next((s for s in config.mcp_servers if s.name == server), None)
        sampling = entry.sampling if entry is not None else None
        agent = next((a for a in config.agents if sampling is not None and a.name == sampling.agent), None)
        if sampling is None or agent is None or agent.model is None:
            record["outcome"] = "refused"
            raise RpcError(INTERNAL_ERROR, f"MCP server '{server}' is not offered sampling ([mcp_servers.sampling])")
        if not self._admit(server, sampling.requests_per_minute):
            record["outcome"] = "rate_limited"
            raise RpcError(RATE_LIMITED, f"more than {sampling.requests_per_minute} sampling requests a minute "
                                         f"from MCP server '{server}'")
        try:
            request = chat_messages(params)
        except RpcError:
            record["outcome"] = "invalid"
            raise
        request = request._replace(max_tokens=min(request.max_tokens, sampling.max_tokens))
        model = agent.model
        record.update(max_tokens=request.max_tokens, model=model.model)
        refusal = await self._decide(server, tool, request, model.model, record)
        if refusal:
            record["outcome"] = "rejected"
            raise RpcError(USER_REJECTED, f"User rejected sampling request ({refusal})")
        return await self._complete(model, request, record)

    def _admit(self, server: str, per_minute: int) -> bool:
        limit = self._limits.get((server, per_minute))
        if limit is None:
            self._limits = {k: v for k, v in self._limits.items() if k[0] != server}  # the old rate goes
            limit = self._limits[(server, per_minute)] = RateLimiter(per_minute / 60.0, per_minute,
                                                                     clock=trio.current_time)
        return limit.check(server) == 0.0

    async def _decide(self, server: str, tool: str, request: Request, model: str, record: dict[str, Any]) -> str:
        """Why the request may not be answered ("" when it may): the policy, a persisted
        decision, or a person."""
        verdict = self.pipeline.policy.verdict(None, _PseudoTool(tool, _ANNOTATIONS))
        record["decision"] = verdict.decision
        if verdict.decision == "allow":
            return ""
        if verdict.decision == "deny":
            return verdict.reason
        what = shown(server, request, model)
        reason = f"MCP server '{server}' asks the model of tern ({model or 'unnamed'}) for up to " \
                 f"{request.max_tokens} tokens"
        try:
            remembered = await self.approvals.remembered("", tool, record["arguments"])
            if remembered is not None:
                return "" if remembered == "allow" else "a person denied it from now on"
            approval = await self.approvals.request("", tool, what, record["arguments"], caller=f"mcp:{server}",
                                                    ask=CALL_ASK.get(), reason=reason)
        except TernError as exc:
            return str(exc)
        record["approval"] = approval.id
        if approval.state == "approved":
            return ""
        return approval.reason or f"approval {approval.state}"

    async def _complete(self, model: Any, request: Request, record: dict[str, Any]) -> dict[str, Any]:
        from runtime.kernel.llm import ChatClient, LlmError

        temperature = request.temperature if request.temperature is not None else model.temperature
        client = ChatClient(msgspec.structs.replace(model, max_tokens=request.max_tokens, temperature=temperature))
        try:
            with trio.fail_after(model.timeout_secs):
                turn = await client.complete(request.messages, [], stop=request.stop or None)
        except trio.TooSlowError:
            record["outcome"] = "timeout"
            raise RpcError(INTERNAL_ERROR, f"the model did not answer within {model.timeout_secs:g} s") from None
        except LlmError as exc:
            raise RpcError(INTERNAL_ERROR, f"the model could not answer: {self.pipeline.redactor.redact(str(exc))}") \
                from None
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()
        text, stop_reason = turn.text, _STOP_REASONS.get(turn.finish, "endTurn")
        if len(text) > MAX_REPLY_CHARS:
            text, stop_reason = text[:MAX_REPLY_CHARS], "maxTokens"
        record.update(tokens=turn.tokens, reply_chars=len(text))
        return {"role": "assistant", "content": {"type": "text", "text": text}, "model": model.model or "unknown",
                "stopReason": stop_reason}

    def _report(self, record: dict[str, Any]) -> None:
        """The audit record, the event and a log line: digests and counts, never text."""
        audit = self.pipeline.audit
        if audit is not None:
            audit.record("mcp_sampling", **record)
        events = self.pipeline.events
        if events is not None:
            events.publish("mcp.sampling", dict(record))
        log.info("MCP server '%s' sampling: %s (%s tokens, cap %s)", record["server"], record["outcome"],
                 record.get("tokens", 0), record.get("max_tokens", "-"))
