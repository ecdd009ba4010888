"""Hostile sampling requests and models: each gets a clear error, is never shown to a
person or sent to the model when it is malformed, and the server and tern keep serving.
Requests of a connected server go through the kernel's real handler (the one the MCP
session calls); the model is tern's scripted OpenAI-compatible server (hanging, failing);
a server that samples in a loop is the official Python SDK's (``sample_loop``)."""

from __future__ import annotations

import base64
import re

import pytest
import trio

from runtime.config import AgentConfig, Config, McpServerEntry, ModelConfig, SamplingConfig, StdioTransport
from runtime.config.checks import find_problems
from runtime.errors import RpcError
from runtime.kernel.sampling_answer import MAX_MESSAGES, MAX_TEXT_CHARS, chat_messages
from tests.mcp.conftest import stdio_entry
from tests.mcp.test_client_sampling import SAMPLING_SERVER, booted, everything, with_sampling
from tests.scripted_llm import whole

TEXT = {"type": "text", "text": "hi"}


def params(*content, max_tokens=10, **more) -> dict:
    return {"messages": [{"role": "user", "content": list(content) or TEXT}], "maxTokens": max_tokens, **more}


@pytest.mark.parametrize("request_params, problem", [
    (params({"type": "text", "text": "x" * 1_000_000}), f"more than {MAX_TEXT_CHARS} characters"),
    ({"messages": [{"role": "user", "content": TEXT}] * 10_000, "maxTokens": 10}, f"at most {MAX_MESSAGES}"),
    (params({"type": "tool_use", "id": "1", "name": "x", "input": {}}), "tool_use content is not taken"),
    (params({"type": "resource", "resource": {}}), "resource content is not taken"),
    (params({"type": "image", "data": "aGk="}), "image content needs a supported mimeType"),
    (params({"type": "image", "data": "not base64!", "mimeType": "image/png"}), "data is not base64"),
    (params({"type": "audio", "data": "aGk=", "mimeType": "audio/ogg"}), "audio content needs a supported"),
    (params({"type": "image", "data": "A" * (5 * 1024 * 1024), "mimeType": "image/png"}), "bytes of image"),
    ({"messages": [{"role": "system", "content": TEXT}], "maxTokens": 10}, "role user or assistant"),
    ({"messages": [{"role": "assistant", "content": {"type": "image", "data": "aGk=", "mimeType": "image/png"}}],
      "maxTokens": 10}, "text only"),
    ({"messages": [], "maxTokens": 10}, "messages (a non-empty array)"),
    ({"messages": "hi", "maxTokens": 10}, "messages (a non-empty array)"),
    ({"messages": [{"role": "user", "content": TEXT}]}, "maxTokens (a positive integer)"),
    (params(max_tokens=0), "maxTokens"), (params(max_tokens=True), "maxTokens"), (params(max_tokens="9"), "maxTokens"),
    (params(temperature=9), "temperature"), (params(stopSequences=["a"] * 5), "stopSequences"),
    (params(tools=[{"name": "t", "inputSchema": {}}]), "tools in sampling are not offered"),
    (params(systemPrompt=["x"]), "systemPrompt must be a string"),
])
def test_malformed_requests_are_refused(request_params, problem):
    with pytest.raises(RpcError, match=re.escape(problem)) as refused:
        chat_messages(request_params)
    assert refused.value.code == -32602


def test_content_becomes_openai_messages():
    png, wav = base64.b64encode(b"\x89PNG").decode(), base64.b64encode(b"RIFF").decode()
    request = chat_messages({
        "messages": [{"role": "user", "content": [TEXT, {"type": "image", "data": png, "mimeType": "image/png"},
                                                  {"type": "audio", "data": wav, "mimeType": "audio/wav"}]},
                     {"role": "assistant", "content": [{"type": "text", "text": "seen"}]}],
        "systemPrompt": "sys", "maxTokens": 7, "includeContext": "allServers", "modelPreferences": {"hints": []},
        "metadata": {"x": 1}, "stopSequences": ["\n\n"]})
    assert request.messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "hi"},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
                                     {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}}]},
        {"role": "assistant", "content": "seen"}]
    assert (request.max_tokens, request.stop, request.media) == (7, ["\n\n"], 2)


def test_config_names_an_llm_agent_with_its_own_endpoint():
    def problems(agent: str, provider: str = "openai") -> list[str]:
        agents = [AgentConfig(name="helper", kind="llm", model=ModelConfig(provider=provider)),  # type: ignore[arg-type]
                  AgentConfig(name="plain", kind="echo")]
        server = McpServerEntry(name="up", transport=StdioTransport(command="up"),
                                sampling=SamplingConfig(agent=agent, max_tokens=0))
        return [p for p in find_problems(Config(agents=agents, mcp_servers=[server])) if "sampling" in p]

    assert problems("nobody") == ["mcp_servers[0].sampling.max_tokens: expected a number above 0, got 0",
                                  'mcp_servers[0].sampling.agent: expected the name of an llm agent (its '
                                  '[agents.model] answers), got "nobody"']
    assert any('got "plain"' in p for p in problems("plain"))
    assert any("runs on the MCP client's sampling" in p for p in problems("helper", "mcp-sampling"))
    assert len(problems("helper")) == 1  # only max_tokens


# --- through the kernel's handler, against a connected server ----------------------------

@pytest.fixture
async def kernel_with_everything(npm, node, llm, nursery, tmp_path):
    kernel = await booted(nursery, tmp_path, llm, with_sampling(everything(npm, node), requests_per_minute=100),
                          decision="allow", model={"timeout_secs": 1.0})
    yield kernel, kernel.mcp.on_input("everything"), llm
    await kernel.mcp.aclose()


async def test_bad_requests_are_refused_before_anyone_is_asked(kernel_with_everything):
    kernel, answer, llm = kernel_with_everything
    for bad in (params({"type": "text", "text": "x" * 1_000_000}),
                {"messages": [{"role": "user", "content": TEXT}] * 10_000, "maxTokens": 10},
                params({"type": "tool_result", "toolUseId": "1", "content": []})):
        with pytest.raises(RpcError) as refused:
            await answer("sampling/createMessage", bad)
        assert refused.value.code == -32602
    assert llm.requests == [] and await kernel.approvals.list(state=None) == []
    llm.script.append(whole("fine"))
    huge = await answer("sampling/createMessage", params(max_tokens=10**12))
    assert huge["content"]["text"] == "fine" and llm.requests[0]["max_tokens"] == 1024  # the default cap


async def test_a_model_that_hangs_or_fails_is_an_error(kernel_with_everything):
    kernel, answer, llm = kernel_with_everything
    llm.script += [{"hang": True}, {"status": 400}, {"json": {"choices": "nonsense"}}]
    started = trio.current_time()
    with pytest.raises(RpcError, match="did not answer within 1 s"):
        await answer("sampling/createMessage", params())
    assert trio.current_time() - started < 5
    with pytest.raises(RpcError, match="the model could not answer: .*HTTP 400"):
        await answer("sampling/createMessage", params())
    empty = await answer("sampling/createMessage", params())  # an unusable reply is an empty answer, not a crash
    assert empty["content"] == {"type": "text", "text": ""}
    result = await kernel.call_tool("mcp_everything_echo", {"message": "alive"})
    assert "alive" in result.text


async def test_a_server_without_sampling_config_is_refused(npm, node, llm, nursery, tmp_path):
    kernel = await booted(nursery, tmp_path, llm, everything(npm, node), decision="allow")
    session = kernel.mcp._servers["everything"].client.session  # type: ignore[union-attr]
    assert "sampling" not in session.connection.capabilities
    with pytest.raises(RpcError):
        await session.answer_input("sampling/createMessage", params())
    assert llm.requests == []
    await kernel.mcp.aclose()


async def test_a_server_that_samples_in_a_loop_is_bounded(sdk_python, llm, nursery, tmp_path):
    llm.script += [whole(f"answer {i}") for i in range(3)]
    entry = with_sampling(stdio_entry(sdk_python, SAMPLING_SERVER, name="sdk", protocol="2025-11-25",
                                      timeout_secs=30), requests_per_minute=3)
    kernel = await booted(nursery, tmp_path, llm, entry, decision="allow")
    result = await kernel.call_tool("mcp_sdk_sample_loop", {"times": 20})
    assert result.text == "answered=3 errors=-32000", result.text
    assert len(llm.requests) == 3
    assert (await kernel.call_tool("mcp_sdk_still_there", {})).text == "still there"
    await kernel.mcp.aclose()

