"""Upstream MCP servers' sampling requests answered by a configured model, each one
decided by the governance policy (``mcp_{server}_sampling``): allowed by a rule, asked
of a person and approved or denied, or denied by a rule. Real peers: server-everything
(its ``trigger-sampling-request`` tool, on stdio), the official Python SDK server
(``tests/fixtures/sdk_sampling_server.py``, both eras: a request mid-call in 2025-11-25,
an ``input_required`` result in 2026-07-28); the model is tern's scripted
OpenAI-compatible test server. Streamable HTTP and the daemon's approval API are in
``test_client_sampling_http.py``; hostile requests and models in
``test_client_sampling_bounds.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from runtime.config import (
    AgentConfig, ApprovalRule, Config, GovernanceConfig, McpServerEntry, ModelConfig, SamplingConfig, StateConfig,
)
from runtime.kernel.kernel import Kernel
from tests.mcp.conftest import FIXTURES, stdio_entry
from tests.scripted_llm import ScriptedLLM, sse, text_chunk, whole

SAMPLING_SERVER = str(FIXTURES / "sdk_sampling_server.py")
SECRET_PROMPT = "purple-elephant-7731"  # must never reach the audit log or an event


def helper(llm: ScriptedLLM, **model) -> AgentConfig:
    return AgentConfig(name="helper", kind="llm", model=ModelConfig(base_url=llm.url, model="scripted-1", **model))


def with_sampling(entry: McpServerEntry, **sampling) -> McpServerEntry:
    import msgspec

    return msgspec.structs.replace(entry, sampling=SamplingConfig(agent="helper", **sampling))


async def booted(nursery, tmp_path: Path, llm: ScriptedLLM, *servers: McpServerEntry, decision: str = "",
                 model: dict | None = None) -> Kernel:
    rules = [ApprovalRule(tool="mcp_*_sampling", decision=decision)] if decision else []  # type: ignore[arg-type]
    kernel = Kernel(Config(mcp_servers=list(servers), agents=[helper(llm, **(model or {}))],
                           governance=GovernanceConfig(rules=rules, approval_timeout_secs=60),
                           state=StateConfig(dir=str(tmp_path / "state"))))
    await nursery.start(kernel.run)
    with trio.fail_after(60):
        await kernel.mcp.wait_settled()
    for server in servers:
        assert kernel.mcp.status(server.name).state == "ready", kernel.mcp.status(server.name).last_error
    return kernel


async def decide_next(kernel: Kernel, approve: bool) -> dict:
    with trio.fail_after(30):
        while not await kernel.approvals.list():
            await trio.sleep(0.02)
    pending = (await kernel.approvals.list())[0]
    await kernel.approvals.decide(pending.id, approve, by="tester", channel="test")
    arguments = pending.arguments
    return {"tool": pending.tool, "agent": pending.agent, "caller": pending.caller,
            "arguments": json.loads(arguments) if isinstance(arguments, str) else arguments}


def audit_records(tmp_path: Path, kind: str = "mcp_sampling") -> list[dict]:
    lines = (tmp_path / "state" / "audit.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["kind"] == kind]


def everything(npm, node) -> McpServerEntry:
    return stdio_entry(node, npm["server-everything"], "stdio", name="everything", timeout_secs=30)


# --- server-everything -------------------------------------------------------------------

async def test_everything_sampling_allowed_by_a_rule(npm, node, llm, nursery, tmp_path):
    llm.script.append(sse(text_chunk("a tidy "), text_chunk("answer"),
                          {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
    kernel = await booted(nursery, tmp_path, llm, with_sampling(everything(npm, node), max_tokens=40),
                          decision="allow")
    with kernel.events.subscribe(kinds=("mcp.sampling",)) as events:
        result = await kernel.call_tool("mcp_everything_trigger_sampling_request",
                                        {"prompt": SECRET_PROMPT, "maxTokens": 5000})
        with trio.fail_after(10):
            event = await events.next()
    assert not result.is_error, result.text
    answer = json.loads(result.text.split("LLM sampling result:", 1)[1])
    assert answer == {"role": "assistant", "content": {"type": "text", "text": "a tidy answer"},
                      "model": "scripted-1", "stopReason": "maxTokens"}
    sent = llm.requests[0]
    assert sent["max_tokens"] == 40 and sent["temperature"] == 0.7 and sent["model"] == "scripted-1"
    assert sent["messages"] == [
        {"role": "system", "content": "You are a helpful test server."},
        {"role": "user", "content": f"Resource trigger-sampling-request context: {SECRET_PROMPT}"}]
    assert "tools" not in sent
    assert event["outcome"] == "ok" and event["server"] == "everything" and event["max_tokens"] == 40
    assert event["tokens"] > 0 and event["decision"] == "allow" and event["arguments"].startswith("sha256:")
    [record] = audit_records(tmp_path)
    assert {k: record[k] for k in ("outcome", "tool", "caller", "model")} == {
        "outcome": "ok", "tool": "mcp_everything_sampling", "caller": "mcp:everything", "model": "scripted-1"}
    assert SECRET_PROMPT not in (tmp_path / "state" / "audit.jsonl").read_text()
    assert SECRET_PROMPT not in json.dumps(event)
    assert await kernel.approvals.list(state=None) == []  # allowed: nobody was asked
    await kernel.mcp.aclose()


async def test_everything_sampling_asked_by_default_approved_then_denied(npm, node, llm, nursery, tmp_path):
    llm.script.append(whole("approved answer"))
    kernel = await booted(nursery, tmp_path, llm, with_sampling(everything(npm, node)))
    async with trio.open_nursery() as inner:
        shown: list[dict] = []

        async def approve() -> None:
            shown.append(await decide_next(kernel, True))

        inner.start_soon(approve)
        result = await kernel.call_tool("mcp_everything_trigger_sampling_request", {"prompt": "hello"})
    assert '"text": "approved answer"' in result.text, result.text
    [asked] = shown
    assert asked["tool"] == "mcp_everything_sampling" and asked["agent"] == "" and asked["caller"] == "mcp:everything"
    assert asked["arguments"]["server"] == "everything" and asked["arguments"]["max_tokens"] == 100
    assert "user: Resource trigger-sampling-request context: hello" in asked["arguments"]["conversation"]
    assert asked["arguments"]["model"] == "scripted-1"

    async with trio.open_nursery() as inner:
        inner.start_soon(decide_next, kernel, False)
        denied = await kernel.call_tool("mcp_everything_trigger_sampling_request", {"prompt": "again"})
    assert denied.is_error and "User rejected sampling request" in denied.text, denied.text
    assert len(llm.requests) == 1  # the denied one never reached the model
    echo = await kernel.call_tool("mcp_everything_echo", {"message": "still here"})
    assert not echo.is_error and "still here" in echo.text  # the server keeps working
    assert [r["outcome"] for r in audit_records(tmp_path)] == ["ok", "rejected"]
    await kernel.mcp.aclose()


async def test_everything_sampling_denied_by_a_rule(npm, node, llm, nursery, tmp_path):
    kernel = await booted(nursery, tmp_path, llm, with_sampling(everything(npm, node)), decision="deny")
    denied = await kernel.call_tool("mcp_everything_trigger_sampling_request", {"prompt": "x"})
    assert denied.is_error and "User rejected sampling request" in denied.text and "governance.rules" in denied.text
    assert llm.requests == [] and await kernel.approvals.list(state=None) == []
    await kernel.mcp.aclose()


async def test_no_sampling_config_no_capability_no_tool(npm, node, llm, nursery, tmp_path):
    """server-everything registers its sampling tool only for a client that declares
    sampling: without ``[mcp_servers.sampling]`` tern declares nothing, so it is absent."""
    kernel = await booted(nursery, tmp_path, llm, everything(npm, node))
    names = [tool.name for tool in kernel.registry.tools()]
    assert "mcp_everything_echo" in names
    assert not any("sampling" in name for name in names), names
    await kernel.mcp.aclose()


# --- the official Python SDK, both eras --------------------------------------------------

@pytest.mark.parametrize("protocol, era", [("2025-11-25", "handshake"), ("2026-07-28", "modern")])
async def test_sdk_server_samples_in_both_eras(sdk_python, llm, nursery, tmp_path, protocol, era):
    llm.script += [whole("short"), whole("never used")]
    entry = with_sampling(stdio_entry(sdk_python, SAMPLING_SERVER, name="sdk", protocol=protocol, timeout_secs=30),
                          max_tokens=64)
    kernel = await booted(nursery, tmp_path, llm, entry, decision="allow")
    assert kernel.mcp.status("sdk").era == era
    result = await kernel.call_tool("mcp_sdk_summarize", {"text": "a long story"})
    assert result.text == "scripted-1|endTurn|short", result.text
    sent = llm.requests[0]
    assert sent["max_tokens"] == 64 and sent["temperature"] == 0.2 and sent["stop"] == ["END"]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Summarize: a long story"}]
    assert len(llm.requests) == 1  # 2026-07-28: the retry carries the answer; the model is asked once
    await kernel.mcp.aclose()


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
async def test_sdk_server_denied_in_both_eras(sdk_python, llm, nursery, tmp_path, protocol):
    """Denied: in 2025-11-25 the server gets -1 and its tool fails; in 2026-07-28 an
    input request has no error form, so tern's call ends with the refusal. Either way the
    server keeps serving."""
    entry = with_sampling(stdio_entry(sdk_python, SAMPLING_SERVER, name="sdk", protocol=protocol, timeout_secs=30))
    kernel = await booted(nursery, tmp_path, llm, entry, decision="deny")
    denied = await kernel.call_tool("mcp_sdk_summarize", {"text": "x"})
    assert denied.is_error and "User rejected sampling request" in denied.text, denied.text
    assert (await kernel.call_tool("mcp_sdk_still_there", {})).text == "still there"
    assert llm.requests == []
    await kernel.mcp.aclose()


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
async def test_sdk_server_without_sampling_config_sees_no_capability(sdk_python, llm, nursery, tmp_path, protocol):
    """Not declared in either era (2026-07-28: in every request's client capabilities),
    so the SDK refuses to sample before asking, and nothing reaches the model."""
    entry = stdio_entry(sdk_python, SAMPLING_SERVER, name="sdk", protocol=protocol, timeout_secs=30)
    kernel = await booted(nursery, tmp_path, llm, entry, decision="allow")
    refused = await kernel.call_tool("mcp_sdk_summarize", {"text": "x"})
    assert refused.is_error and "sampling" in refused.text.lower(), refused.text
    assert llm.requests == [] and audit_records(tmp_path) == []
    assert (await kernel.call_tool("mcp_sdk_still_there", {})).text == "still there"
    await kernel.mcp.aclose()


async def test_the_caller_of_the_tool_call_is_asked_too(npm, node, llm, nursery, tmp_path):
    """A request caused by a call whose caller can ask its own person (a desktop assistant
    behind ``tern mcp``, the terminal of ``tern run``: the run's ``ask``) is put to that
    caller, who answers it here."""
    llm.script.append(whole("relayed"))
    kernel = await booted(nursery, tmp_path, llm, with_sampling(everything(npm, node)))
    asked = []

    async def ask(approval) -> None:
        asked.append(approval)
        await kernel.approvals.decide(approval.id, True, by="assistant", channel="mcp")

    result = await kernel.call_tool("mcp_everything_trigger_sampling_request", {"prompt": "p"},
                                    run=kernel.pipeline.run(ask=ask))
    assert '"text": "relayed"' in result.text, result.text
    assert [a.tool for a in asked] == ["mcp_everything_sampling"]
    await kernel.mcp.aclose()
