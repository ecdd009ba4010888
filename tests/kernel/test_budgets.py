"""Per-agent budgets in the kernel: the sliding window's bounds, messages a minute,
model tokens an hour (reported by the model, streamed or whole, or estimated when it
reports none) and tool calls a run, with llm agents against the scripted model.

Time is trio's ``mock_clock``: virtual, moved only by ``jump``, so a window passes in
no real time while the model's real loopback replies are never cut short by a jump."""

from __future__ import annotations

import json

import pytest

from runtime.config import AgentConfig, Config, ModelConfig, StateConfig
from runtime.errors import BudgetExceeded
from runtime.kernel.budgets import SLOTS, Budgets, Window
from runtime.kernel.kernel import Kernel
from tests.scripted_llm import ScriptedLLM, call_chunk, sse, text_chunk, whole


def usage_chunk(prompt: int, completion: int, total: int | None = None) -> dict:
    """The last chunk of a stream when the client asked for ``stream_options.include_usage``."""
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    if total is not None:
        usage["total_tokens"] = total
    return {"choices": [], "usage": usage}


async def llm_kernel(nursery, tmp_path, *script, tools=("time_now",), **budgets) -> tuple[ScriptedLLM, Kernel]:
    llm = ScriptedLLM(*script)
    await nursery.start(llm.serve)
    bot = AgentConfig(name="bot", kind="llm", tools=list(tools), **budgets,
                      model=ModelConfig(base_url=llm.url, model="m", timeout_secs=30))
    echo = AgentConfig(name="echo", kind="echo", requests_per_minute=1)
    return llm, Kernel(Config(agents=[bot, echo], state=StateConfig(dir=str(tmp_path))))


def audit(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


# --- The window ---------------------------------------------------------------------------------


def test_a_window_holds_a_bounded_number_of_slots_whatever_the_traffic():
    window = Window(limit=10**9, width=3600.0)
    for i in range(200_000):  # one every 36 ms for two hours
        window.add(i * 0.036, 1)
    assert len(window._slots) <= SLOTS + 1
    assert window.current(200_000 * 0.036) <= 3600 / 0.036 + 3600 / SLOTS / 0.036 + 1


def test_a_window_counts_each_amount_for_its_width_and_at_most_a_slot_more():
    window = Window(limit=3, width=60.0)  # slots of 0.5 s
    for at in (10.2, 10.3, 30.0):
        window.add(at, 1)
    assert window.wait(30.0) == 60.5 + 10.0 - 30.0  # the slot [10, 10.5) ends at 10.5 + 60
    assert window.wait(70.4) == pytest.approx(0.1)
    assert window.wait(70.5) == 0.0 and window.current(70.5) == 1
    assert window.wait(70.5, need=3) == pytest.approx(20.0)  # until 30.0's slot ends too
    assert window.wait(70.5, need=4) == 60.0  # more than the limit: never sooner than a window


def test_budgets_read_the_clock_they_are_given():
    now = [1000.0]
    budgets = Budgets([AgentConfig(name="a", kind="echo", requests_per_minute=1)], clock=lambda: now[0])
    budgets.take("a")
    with pytest.raises(BudgetExceeded) as refused:
        budgets.take("a")
    assert refused.value.retry_after == 60.5
    now[0] += 60.5
    budgets.take("a")
    assert budgets.status()["a"]["requests_per_minute"] == {"limit": 1, "used": 1, "window_secs": 60, "exceeded": 1}


# --- Messages a minute ------------------------------------------------------------------------------


async def test_requests_per_minute_refuses_before_any_work_and_counts_only_what_it_took(tmp_path, mock_clock):
    agent = AgentConfig(name="echo", kind="echo", requests_per_minute=2)
    kernel = Kernel(Config(agents=[agent], state=StateConfig(dir=str(tmp_path))))
    kernel.agents.admit("echo")
    assert (await kernel.agents.send("echo", "one")).text == "one"
    mock_clock.jump(30)
    assert (await kernel.agents.send("echo", "two")).text == "two"
    for _ in range(3):  # refusals are not counted: they do not push the window out
        with pytest.raises(BudgetExceeded) as refused:
            kernel.agents.admit("echo")
        assert refused.value.retry_after == 30.5
        with pytest.raises(BudgetExceeded, match=r"^agent 'echo' has had its 2 messages in the last minute "
                                                 r"\(requests_per_minute\); try again in 31 s$"):
            await kernel.agents.send("echo", "three")
    mock_clock.jump(30.5)
    assert (await kernel.agents.send("echo", "three")).text == "three"
    assert kernel.agents.budgets.status() == {"echo": {"requests_per_minute": {
        "limit": 2, "used": 2, "window_secs": 60, "exceeded": 6}}}
    outcomes = [r["outcome"] for r in audit(tmp_path) if r["kind"] == "agent_message"]
    assert outcomes == ["ok", "ok", *["budget_exceeded"] * 3, "ok"]


# --- Tokens an hour -----------------------------------------------------------------------------------


async def test_tokens_per_hour_from_streamed_usage(nursery, tmp_path, mock_clock):
    llm, kernel = await llm_kernel(
        nursery, tmp_path,
        sse(text_chunk("one"), usage_chunk(50, 30, total=80)),
        sse(call_chunk(0, "time_now", "{}", call_id="c1"), usage_chunk(70, 10)),  # no total: prompt + completion
        sse(text_chunk("never asked")),
        sse(text_chunk("an hour later"), usage_chunk(5, 5, total=10)),
        tokens_per_hour=100)
    assert (await kernel.agents.send("bot", "first")).text == "one"
    assert llm.requests[0]["stream_options"] == {"include_usage": True}
    mock_clock.jump(600)
    with pytest.raises(BudgetExceeded) as spent:  # the first turn fits (80 < 100) and takes it to 160
        await kernel.agents.send("bot", "second")
    assert len(llm.requests) == 2  # checked before the next turn: the model was not asked again
    assert spent.value.retry_after == 3600 + 30 - 600  # the first turn's slot [0, 30) leaves the hour at 3630
    assert str(spent.value) == ("agent 'bot' has used 160 model tokens in the last hour, its budget being 100 "
                                "(tokens_per_hour); try again in 3030 s")
    with pytest.raises(BudgetExceeded):
        await kernel.agents.send("bot", "third")
    mock_clock.jump(3030)  # 80 left in the window: under the limit again
    assert kernel.agents.budgets.status()["bot"]["tokens_per_hour"] == {
        "limit": 100, "used": 80, "window_secs": 3600, "exceeded": 2}
    llm.script.pop(0)
    assert (await kernel.agents.send("bot", "later")).text == "an hour later"


async def test_tokens_per_hour_from_a_whole_reply_with_usage(nursery, tmp_path, mock_clock):
    reply = whole("done")
    reply["json"]["usage"] = {"prompt_tokens": 900, "completion_tokens": 200, "total_tokens": 1100}
    llm, kernel = await llm_kernel(nursery, tmp_path, reply, tokens_per_hour=1000)
    assert (await kernel.agents.send("bot", "hi")).text == "done"
    with pytest.raises(BudgetExceeded, match="has used 1100 model tokens in the last hour, its budget being 1000"):
        kernel.agents.admit("bot")  # a spent token budget refuses the next message before it starts


async def test_tokens_are_estimated_when_the_model_reports_no_usage(nursery, tmp_path, mock_clock):
    llm, kernel = await llm_kernel(
        nursery, tmp_path,
        sse(call_chunk(0, "agent_list", '{"x": 1}', call_id="c1")), sse(text_chunk("It is " + "x" * 397)),
        tokens_per_hour=10_000)
    await kernel.agents.send("bot", "what time is it?")

    def chars(value) -> int:  # every string sent, keys too
        if isinstance(value, str):
            return len(value)
        if isinstance(value, dict):
            return sum(len(k) + chars(v) for k, v in value.items())
        return sum(chars(v) for v in value) if isinstance(value, list) else 0

    def quarter(n: int) -> int:
        return -(-n // 4)

    sent = [chars(body["messages"]) + chars(body["tools"]) for body in llm.requests]
    expected = quarter(sent[0]) + quarter(len("agent_list") + len('{"x": 1}')) + quarter(sent[1]) + quarter(403)
    assert kernel.agents.budgets.status()["bot"]["tokens_per_hour"]["used"] == expected
    assert expected > 100  # the tool definitions and the long reply count


async def test_no_token_budget_sends_no_stream_options(nursery, tmp_path):
    llm, kernel = await llm_kernel(nursery, tmp_path, sse(text_chunk("hi")))
    await kernel.agents.send("bot", "hi")
    assert "stream_options" not in llm.requests[0] and kernel.agents.budgets.status() == {
        "echo": {"requests_per_minute": {"limit": 1, "used": 0, "window_secs": 60, "exceeded": 0}}}


# --- Tool calls a run ----------------------------------------------------------------------------------


async def test_max_tool_calls_per_run_refuses_the_extra_calls_and_the_run_goes_on(nursery, tmp_path):
    three = [call_chunk(i, "time_now", "{}", call_id=f"c{i}") for i in range(3)]
    llm, kernel = await llm_kernel(nursery, tmp_path, sse(*three), sse(call_chunk(0, "time_now", "{}", call_id="c4")),
                                   sse(text_chunk("Here is what I have.")), max_tool_calls_per_run=2)
    reply = await kernel.agents.send("bot", "the time, three times, please")
    assert reply.text == "Here is what I have."
    second, third = llm.requests[1]["messages"], llm.requests[2]["messages"]
    results = [m["content"] for m in second if m["role"] == "tool"] + [third[-1]["content"]]
    assert results[0].startswith("20") and results[1].startswith("20")
    budget = ("agent 'bot' has made the 2 tool calls its budget allows in one run (max_tool_calls_per_run); "
              "stop calling tools and answer with what you have")
    assert results[2:] == [budget, budget]
    assert kernel.agents.budgets.status()["bot"] == {"max_tool_calls_per_run": {"limit": 2, "exceeded": 2}}
    assert [r["outcome"] for r in audit(tmp_path) if r["kind"] == "tool_call"] == ["ok", "ok", "loop_blocked",
                                                                                  "loop_blocked"]
    # the next run starts with its own count
    llm.script[:] = [sse(call_chunk(0, "time_now", "{}", call_id="c5")), sse(text_chunk("ok"))]
    assert (await kernel.agents.send("bot", "again")).text == "ok"
    assert llm.requests[-1]["messages"][-1]["content"].startswith("20")


async def test_without_its_own_budget_a_run_keeps_the_tools_cap(nursery, tmp_path):
    from runtime.config import ToolsConfig

    llm = ScriptedLLM(sse(call_chunk(0, "time_now", "{}", call_id="a"), call_chunk(1, "time_now", "{}", call_id="b")),
                      sse(text_chunk("ok")))
    await nursery.start(llm.serve)
    bot = AgentConfig(name="bot", kind="llm", tools=["time_now"], model=ModelConfig(base_url=llm.url, model="m"))
    kernel = Kernel(Config(agents=[bot], tools=ToolsConfig(max_calls_per_run=1)))
    assert (await kernel.agents.send("bot", "go")).text == "ok"
    refused = llm.requests[1]["messages"][-1]["content"]
    assert refused.startswith("this run has already made 1 tool calls, the limit") and "budget" not in refused


async def test_a_spent_agent_is_a_tool_error_inside_another_agents_run(nursery, tmp_path):
    send = [call_chunk(i, "agent_send", json.dumps({"agent": "echo", "message": m}), call_id=f"s{m}")
            for i, m in enumerate("ab")]
    llm, kernel = await llm_kernel(nursery, tmp_path, sse(*send), sse(text_chunk("echo is busy")),
                                   tools=("agent_send",))
    assert (await kernel.agents.send("bot", "ask echo twice")).text == "echo is busy"
    results = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    assert results[0] == "a"
    assert results[1].startswith("agent 'echo' has had its 1 message in the last minute (requests_per_minute); "
                                 "try again in ")
