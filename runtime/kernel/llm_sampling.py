"""An llm agent's model turns on the MCP client that called it (``[agents.model]
provider = "mcp-sampling"``): a desktop assistant's own model, so the agent needs no
endpoint and no API key of its own.

The same interface as ``llm.ChatClient`` (``complete`` returns a ``Turn``), over the
run's ``Sample`` callback (``runtime.ports.Sample``, set by the MCP server): the
OpenAI-style conversation becomes ``sampling/createMessage`` params (system messages
become ``systemPrompt``; tool calls and results become ``tool_use`` and
``tool_result`` content, and the agent's tools are offered, as 2025-11-25 sampling
with tools has them: the MCP server drops them for a client that did not declare
``sampling.tools``), and the client's result becomes a ``Turn``. The client is
untrusted: its text is bounded (MAX_TEXT_CHARS), tool calls must name a tool with an
object input, and anything else is an ``LlmError`` naming what was wrong.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from runtime.config import ModelConfig
from runtime.errors import TernError
from runtime.kernel.llm import LlmError, ToolCall, Turn, estimate_tokens

__all__ = ["SamplingClient", "MAX_TEXT_CHARS", "DEFAULT_MAX_TOKENS"]

MAX_TEXT_CHARS = 1_000_000
MAX_TOOL_CALLS = 32
DEFAULT_MAX_TOKENS = 4096


class SamplingClient:
    """``ChatClient``'s interface over an MCP client's sampling."""

    def __init__(self, model: ModelConfig, sample: Any) -> None:
        self.model = model
        self.sample = sample

    async def aclose(self) -> None:
        pass  # nothing of ours to close: the connection is the MCP server's

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                       on_text: Any = None) -> Turn:
        try:
            result = await self.sample(self.params(messages, tools))
        except TernError as exc:
            raise LlmError(f"the MCP client's model could not be asked: {exc}") from None
        turn = self.turn(result)
        turn.tokens = estimate_tokens(messages, tools, turn)
        if on_text is not None and turn.text:
            on_text(turn.text)
        return turn

    def params(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        system = [m["content"] for m in messages if m.get("role") == "system" and isinstance(m.get("content"), str)]
        sampled = []
        for message in messages:
            role, content = message.get("role"), message.get("content")
            if role == "user":
                sampled.append({"role": "user", "content": _text(content)})
            elif role == "assistant":
                blocks = [_text(content)] if content else []
                blocks += [{"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                            "input": _input(call["function"]["arguments"])} for call in message.get("tool_calls") or []]
                sampled.append({"role": "assistant", "content": blocks[0] if len(blocks) == 1 else blocks})
            elif role == "tool":
                sampled.append({"role": "user", "content": {"type": "tool_result", "toolUseId": message["tool_call_id"],
                                                            "content": [_text(content)]}})
        params: dict[str, Any] = {"messages": sampled, "maxTokens": self.model.max_tokens or DEFAULT_MAX_TOKENS}
        if system:
            params["systemPrompt"] = "\n\n".join(system)
        if self.model.temperature is not None:
            params["temperature"] = self.model.temperature
        if self.model.model:
            params["modelPreferences"] = {"hints": [{"name": self.model.model}]}
        if tools:
            params["tools"] = [{"name": t["function"]["name"], "description": t["function"]["description"],
                                "inputSchema": t["function"]["parameters"]} for t in tools]
        return params

    @staticmethod
    def turn(result: Any) -> Turn:
        """The client's ``CreateMessageResult`` as a Turn."""
        if not isinstance(result, dict):
            raise LlmError("the MCP client's sampling answer is not an object")
        content = result.get("content")
        blocks = content if isinstance(content, list) else [content]
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use":
                name, arguments = block.get("name"), block.get("input")
                if not isinstance(name, str) or not isinstance(arguments, dict):
                    raise LlmError("the MCP client's model asked for a tool call without a name or an object input")
                calls.append(ToolCall(str(block.get("id") or uuid.uuid4().hex[:24]), name, arguments))
            else:
                raise LlmError(f"the MCP client's model answered with {str(kind)[:40]} content, which tern cannot use")
        text = "".join(texts)
        if len(text) > MAX_TEXT_CHARS:
            raise LlmError(f"the MCP client's model answered {len(text)} characters; at most {MAX_TEXT_CHARS}")
        if len(calls) > MAX_TOOL_CALLS:
            raise LlmError(f"the MCP client's model asked for {len(calls)} tool calls in one turn; "
                           f"at most {MAX_TOOL_CALLS}")
        return Turn(text=text, tool_calls=calls)


def _text(content: Any) -> dict[str, Any]:
    return {"type": "text", "text": content if isinstance(content, str) else ""}


def _input(arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
