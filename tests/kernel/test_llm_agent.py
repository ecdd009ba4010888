"""The llm agent against a scripted OpenAI-compatible server replaying the reply shapes
of the OpenAI API, Ollama and llama-server: streaming, tool calls (several per turn,
arguments as objects or fragments, missing ids, malformed), 429 then success, a hang,
an unreachable endpoint."""

from __future__ import annotations


import pytest
import trio

from runtime.config import AgentConfig, Config, ModelConfig, StateConfig, ToolsConfig
from runtime.errors import AgentError
from runtime.kernel.kernel import Kernel
from tests.scripted_llm import ScriptedLLM, call_chunk, sse, text_chunk, whole


async def start(nursery, *script, tools=("time_now",), timeout=5.0, tmp_path=None, max_iterations=10):
    llm = ScriptedLLM(*script)
    await nursery.start(llm.serve)
    agent = AgentConfig(name="bot", kind="llm", tools=list(tools), system_prompt="Be brief.",
                        max_iterations=max_iterations,
                        model=ModelConfig(base_url=llm.url, model="test-model", timeout_secs=timeout))
    kernel = Kernel(Config(agents=[agent], state=StateConfig(dir=str(tmp_path)), tools=ToolsConfig()))
    return llm, kernel


async def test_streamed_text_reply_and_history(nursery, tmp_path):
    llm, kernel = await start(nursery, sse(text_chunk("Hel"), text_chunk("lo!")), sse(text_chunk("Again.")),
                              tmp_path=tmp_path)
    pieces = []
    reply = await kernel.agents.send("bot", "hi", on_text=pieces.append)
    assert reply.text == "Hello!" and pieces == ["Hel", "lo!"]
    await kernel.agents.send("bot", "and?", context_id=reply.context_id)
    second = llm.requests[1]
    assert second["model"] == "test-model" and second["stream"] is True
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["tools"][0]["function"]["name"] == "time_now"


async def test_openai_style_tool_call_then_answer(nursery, tmp_path):
    llm, kernel = await start(nursery,
                              sse(call_chunk(0, "time_now", "", call_id="call_1"), call_chunk(0, arguments="{}")),
                              sse(text_chunk("It is late.")), tmp_path=tmp_path)
    reply = await kernel.agents.send("bot", "what time is it?")
    assert reply.text == "It is late."
    tool_message = llm.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
    assert tool_message["content"].startswith("20")


async def test_ollama_style_object_arguments_two_calls_one_turn_no_ids(nursery, tmp_path):
    calls = [{"function": {"name": "time_now", "arguments": {}}}, {"function": {"name": "time_now", "arguments": {}}}]
    llm, kernel = await start(nursery, whole("", calls), whole("Done."), tmp_path=tmp_path)
    assert (await kernel.agents.send("bot", "twice")).text == "Done."
    followup = llm.requests[1]["messages"]
    ids = [c["id"] for c in followup[-3]["tool_calls"]]
    assert len(set(ids)) == 2 and all(ids)  # tern made ids up
    assert [m["tool_call_id"] for m in followup[-2:]] == ids


async def test_llama_server_fragments_and_malformed_arguments(nursery, tmp_path):
    llm, kernel = await start(nursery,
                              sse(call_chunk(0, "time_now", '{"zo'), call_chunk(0, arguments='ne": "UTC"}')),
                              sse(call_chunk(0, "time_now", "{not json")),
                              sse(call_chunk(0, "file_write", '{"path": "x"}')),
                              sse(text_chunk("ok")), tmp_path=tmp_path)
    assert (await kernel.agents.send("bot", "go")).text == "ok"
    results = [r["messages"][-1]["content"] for r in llm.requests[1:]]
    assert "invalid arguments for time_now" in results[0] and "zone" in results[0]
    assert "not a JSON object" in results[1]
    assert "may not call file_write" in results[2]  # capability: not in the agent's tools


async def test_429_then_success(nursery, tmp_path):
    llm, kernel = await start(nursery, {"status": 429, "headers": {"Retry-After": "0"}}, {"status": 503},
                              sse(text_chunk("finally")), tmp_path=tmp_path)
    with trio.fail_after(10):
        assert (await kernel.agents.send("bot", "hi")).text == "finally"
    assert len(llm.requests) == 3


async def test_plain_text_reply(nursery, tmp_path):
    llm, kernel = await start(nursery, {"text": "just words"}, tmp_path=tmp_path)
    assert (await kernel.agents.send("bot", "hi")).text == "just words"


async def test_hang_times_out_with_a_clear_error(nursery, tmp_path):
    llm, kernel = await start(nursery, {"hang": True}, timeout=0.5, tmp_path=tmp_path)
    with trio.fail_after(5):
        with pytest.raises(AgentError, match="did not answer within 0.5 s"):
            await kernel.agents.send("bot", "hi")


async def test_unreachable_endpoint_is_one_sentence(tmp_path):
    agent = AgentConfig(name="bot", kind="llm", model=ModelConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    kernel = Kernel(Config(agents=[agent], state=StateConfig(dir=str(tmp_path))))
    with trio.fail_after(5):
        with pytest.raises(AgentError, match=r"no LLM answered at http://127.0.0.1:9/v1: start the model server"):
            await kernel.agents.send("bot", "hi")


async def test_max_iterations_bounds_a_model_that_never_stops(nursery, tmp_path):
    script = [sse(call_chunk(0, "time_now", "{}", call_id=f"c{i}")) for i in range(3)]
    llm, kernel = await start(nursery, *script, tmp_path=tmp_path, max_iterations=3)
    events = kernel.events.subscribe(kinds=["model.call", "tool.call", "agent.message"])
    with pytest.raises(AgentError, match="stopped after 3 model turns without a final answer"):
        await kernel.agents.send("bot", "loop")
    assert len(llm.requests) == 3
    seen = [events.receive.receive_nowait() for _ in range(7)]
    assert [e["type"] for e in seen] == ["model.call", "tool.call"] * 3 + ["agent.message"]
    assert seen[0]["model"] == "test-model" and seen[0]["tool_calls"] == 1 and seen[0]["tokens"] > 0
    assert (seen[1]["tool"], seen[1]["agent"], seen[1]["outcome"]) == ("time_now", "bot", "ok")
    assert (seen[-1]["agent"], seen[-1]["outcome"]) == ("bot", "error")
