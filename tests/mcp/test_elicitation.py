"""A server's form question put to a person through the approval channels: the
official Python SDK server (handshake era, stdio) elicits during a tool call; tern shows
the question with the form's defaults as the proposed answer, a person approves or
denies it (here through ``Approvals.decide``, as the CLI, the API and the terminal do),
and the server gets ``accept`` with exactly that answer or ``decline``. A form tern
cannot answer by a yes (a required field without a default) is declined at once."""

from __future__ import annotations

import json

import trio

from runtime.config import Config, StateConfig
from runtime.kernel.elicitation import proposal
from tests.mcp.conftest import SDK_SERVER, stdio_entry


async def booted(nursery, tmp_path, sdk_python):
    from runtime.kernel.kernel import Kernel

    entry = stdio_entry(sdk_python, SDK_SERVER, name="sdk", protocol="2025-11-25", timeout_secs=20)
    kernel = Kernel(Config(mcp_servers=[entry], state=StateConfig(dir=str(tmp_path / "state"))))
    await nursery.start(kernel.run)
    with trio.fail_after(30):
        await kernel.mcp.wait_settled()
    assert kernel.mcp.status("sdk").state == "ready", kernel.mcp.status("sdk").last_error
    return kernel


async def answer_next(kernel, approve: bool) -> dict:
    with trio.fail_after(20):
        while not kernel.approvals.list():
            await trio.sleep(0.02)
    pending = kernel.approvals.list()[0]
    kernel.approvals.decide(pending.id, approve, by="tester", channel="test")
    return {"tool": pending.tool, "agent": pending.agent, "arguments": pending.arguments}


async def test_a_person_approves_or_declines_the_proposed_answer(sdk_python, nursery, tmp_path):
    kernel = await booted(nursery, tmp_path, sdk_python)
    for approve, expected in ((True, 'accept: {"confirmed":true,"note":"as proposed"}'), (False, "decline: ")):
        async with trio.open_nursery() as inner:
            shown: list[dict] = []

            async def decide() -> None:
                shown.append(await answer_next(kernel, approve))

            inner.start_soon(decide)
            result = await kernel.call_tool("mcp_sdk_confirm", {"question": "Deploy now?"})
        assert result.text == expected, result.text
        assert shown[0]["tool"] == "mcp_sdk_elicitation" and shown[0]["agent"] == ""
        arguments = shown[0]["arguments"]
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        assert arguments["question"] == "Deploy now?"
        assert arguments["answer"] == {"confirmed": True, "note": "as proposed"}


async def test_a_form_that_needs_typing_is_declined_without_asking(sdk_python, nursery, tmp_path):
    kernel = await booted(nursery, tmp_path, sdk_python)
    result = await kernel.call_tool("mcp_sdk_ask_name", {})
    assert result.text == "decline" and kernel.approvals.list(state=None) == []


def test_what_can_be_proposed():
    assert proposal({"requestedSchema": {"type": "object", "properties": {
        "a": {"type": "string", "default": "x"}, "b": {"type": "integer"}}}}) == ({"a": "x"}, "")
    assert proposal({"mode": "url", "url": "https://example.com"})[0] is None
    assert proposal({"requestedSchema": {"properties": {"n": {"type": "string"}}, "required": ["n"]}})[0] is None
    assert proposal({"requestedSchema": {"properties": {"tags": {"type": "array", "default": []}}}})[0] is None
    assert proposal({"message": "ok?"}) == ({}, "")
