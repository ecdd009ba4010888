"""``provider = "mcp-sampling"`` without I/O: the conversation as sampling params, the
client's answer as a Turn, and what an untrusted answer cannot do. Against the official
SDK client in both eras: tests/mcp/test_server_sampling_sdk.py."""

from __future__ import annotations

import pytest

from runtime.config import ModelConfig
from runtime.errors import RpcError
from runtime.kernel.llm import LlmError
from runtime.kernel.llm_sampling import MAX_TEXT_CHARS, SamplingClient
from runtime.mcp.server.sampling import fit

MODEL = ModelConfig(provider="mcp-sampling", model="hint", max_tokens=50, temperature=0.2)
TOOLS = [{"type": "function", "function": {"name": "time_now", "description": "d", "parameters": {"type": "object"}}}]
CONVERSATION = [
    {"role": "system", "content": "Be terse."},
    {"role": "user", "content": "time?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "time_now", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
]


def test_the_conversation_becomes_sampling_params():
    params = SamplingClient(MODEL, None).params(CONVERSATION, TOOLS)
    assert params == {
        "systemPrompt": "Be terse.", "maxTokens": 50, "temperature": 0.2,
        "modelPreferences": {"hints": [{"name": "hint"}]},
        "tools": [{"name": "time_now", "description": "d", "inputSchema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "time?"}},
            {"role": "assistant", "content": {"type": "tool_use", "id": "c1", "name": "time_now", "input": {}}},
            {"role": "user", "content": {"type": "tool_result", "toolUseId": "c1",
                                         "content": [{"type": "text", "text": "12:00"}]}},
        ]}


def test_tools_reach_only_a_client_that_declared_sampling_tools():
    params = {"messages": [], "maxTokens": 1, "tools": [{"name": "x"}]}
    assert "tools" not in fit(params, {"sampling": {}})
    assert fit(params, {"sampling": {"tools": {}}})["tools"] == [{"name": "x"}]


def test_an_answer_becomes_a_turn():
    turn = SamplingClient.turn({"role": "assistant", "content": [
        {"type": "text", "text": "let me check"}, {"type": "tool_use", "id": "u1", "name": "time_now", "input": {}}]})
    assert turn.text == "let me check" and [(c.id, c.name, c.arguments) for c in turn.tool_calls] == \
        [("u1", "time_now", {})]


@pytest.mark.parametrize("answer,problem", [
    ("text", "not an object"),
    ({"content": {"type": "image", "data": "AA"}}, "image content"),
    ({"content": {"type": "tool_use", "name": "x", "input": "rm -rf"}}, "object input"),
    ({"content": {"type": "text", "text": "y" * (MAX_TEXT_CHARS + 1)}}, "at most"),
    ({"content": [{"type": "tool_use", "id": str(i), "name": "x", "input": {}} for i in range(33)]}, "33 tool calls"),
])
def test_unusable_answers_are_llm_errors(answer, problem):
    with pytest.raises(LlmError, match=problem):
        SamplingClient.turn(answer)


async def test_a_client_that_refuses_is_an_llm_error():
    async def refuse(params):
        raise RpcError(-1, "user rejected sampling request")

    with pytest.raises(LlmError, match="could not be asked: user rejected"):
        await SamplingClient(MODEL, refuse).complete([{"role": "user", "content": "hi"}], [])


async def test_text_is_streamed_to_the_caller_once_and_tokens_estimated():
    async def answer(params):
        return {"role": "assistant", "content": {"type": "text", "text": "hello"}}

    heard: list[str] = []
    turn = await SamplingClient(MODEL, answer).complete([{"role": "user", "content": "hi"}], [], on_text=heard.append)
    assert heard == ["hello"] and turn.tokens > 0
