"""MCP's tasks extension (2026-07-28) on ``POST /mcp``, bridged to the A2A task engine,
over real HTTP on an in-process node with ``[a2a] enabled``: an agent call from a
client that declared the extension is a task that the A2A methods show too, cancelled
from either side; approvals and model turns of the work are the task's
``inputRequests``, answered with ``tasks/update``; and the gates (no extension:
-32021; unknown ids: -32602; Mcp-Name must be the taskId)."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from runtime.config import load_config
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from tests.mcp.server_harness import MODERN, request, write_config

EXT = "io.modelcontextprotocol/tasks"
BOTH = "application/json, text/event-stream"
EXTRA = """
[a2a]
enabled = true

[[agents]]
name = "writer"
kind = "tool"
tool = "file_write"

[[agents]]
name = "desk"
kind = "llm"
[agents.model]
provider = "mcp-sampling"

[[agents]]
name = "picky"
kind = "command"
a2a_events = true
command = ["sh", "-c", "echo '{\\"state\\": \\"rejected\\", \\"text\\": \\"not a job for me\\"}'"]

[[mcp_server.asks]]
name = "two_forms"
task = "required"
timeout_secs = 600
reply = "{who.name} is sure: {ok.confirm}; because {why.text}"
[[mcp_server.asks.questions]]
key = "who"
kind = "form"
message = "Who are you?"
schema = { type = "object", properties = { name = { type = "string" } }, required = ["name"] }
[[mcp_server.asks.questions]]
key = "ok"
kind = "form"
message = "Are you sure?"
schema = { type = "object", properties = { confirm = { type = "boolean" } }, required = ["confirm"] }
[[mcp_server.asks.questions]]
key = "why"
round = 2
kind = "form"
message = "Why, {who.name}?"
schema = { type = "object", properties = { text = { type = "string" } }, required = ["text"] }

[[mcp_server.presets]]
name = "shout"
tool = "tern_agent_echo"
input_schema.type = "object"
input_schema.properties = { word = { type = "string" }, times = { type = "integer" } }
input_schema.required = ["word", "times"]
input_schema.additionalProperties = false
arguments = { message = "{word} x{times}" }
task = "required"
"""


def meta(capabilities: dict | None = None) -> dict:
    return {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}} if capabilities is None
            else capabilities}


@pytest.fixture
async def served(nursery, tmp_path):
    config = load_config(str(write_config(tmp_path, EXTRA))).config
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{bound[0][1]}"
    async with httpx.AsyncClient(timeout=30) as client:
        yield Served(client, base, node)


class Served:
    def __init__(self, client: httpx.AsyncClient, base: str, node: Node) -> None:
        self.client, self.base, self.node = client, base, node

    async def post(self, method: str, params: dict, *, name: str = "", capabilities: dict | None = None) -> dict:
        headers = {"Accept": BOTH, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name:
            headers["Mcp-Name"] = name
        response = await self.client.post(self.base + "/mcp", headers=headers,
                                          json=request(1, method, {**params, "_meta": meta(capabilities)}))
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")][-1]
        return response.json()

    async def call(self, tool: str, arguments: dict, capabilities: dict | None = None) -> dict:
        return await self.post("tools/call", {"name": tool, "arguments": arguments}, name=tool,
                               capabilities=capabilities)

    async def task(self, method: str, task_id: str, capabilities: dict | None = None, **params) -> dict:
        return await self.post(method, {"taskId": task_id, **params}, name=task_id, capabilities=capabilities)

    async def until(self, task_id: str, *statuses: str) -> dict:
        with trio.fail_after(15):
            while (got := (await self.task("tasks/get", task_id))["result"])["status"] not in statuses:
                await trio.sleep(0.05)
        return got

    async def a2a(self, method: str, params: dict) -> dict:
        response = await self.client.post(self.base + "/a2a", headers={"A2A-Version": "1.0"},
                                          json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        return response.json()


async def test_discover_and_list_say_agents_can_be_tasks(served):
    discovered = (await served.post("server/discover", {}))["result"]
    assert discovered["capabilities"]["extensions"] == {EXT: {}} and "tasks" not in discovered["capabilities"]
    tools = {t["name"]: t for t in (await served.post("tools/list", {}))["result"]["tools"]}
    assert tools["tern_agent_echo"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in tools["time_now"]


async def test_an_agent_call_is_a_task_the_a2a_methods_show(served):
    created = (await served.call("tern_agent_echo", {"message": "hello task"}))["result"]
    assert created["resultType"] == "task" and "task" not in created and "requestState" not in created
    assert created["status"] in ("working", "completed") and created["ttlMs"] is None
    assert created["createdAt"].endswith("Z") and isinstance(created["pollIntervalMs"], int)
    done = await served.until(created["taskId"], "completed")
    assert done["resultType"] == "complete" and done["result"]["content"] == [{"type": "text", "text": "hello task"}]
    assert done["result"]["isError"] is False and done["result"]["structuredContent"]["reply"] == "hello task"
    seen = (await served.a2a("GetTask", {"id": created["taskId"]}))["result"]
    assert seen["id"] == created["taskId"] and seen["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_cancelled_over_a2a_is_cancelled_over_mcp_and_back(served):
    first = (await served.call("tern_agent_slow_poke", {"message": "go"}))["result"]
    assert (await served.task("tasks/get", first["taskId"]))["result"]["status"] == "working"
    cancelled = await served.a2a("CancelTask", {"id": first["taskId"]})
    assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert (await served.until(first["taskId"], "cancelled"))["status"] == "cancelled"
    second = (await served.call("tern_agent_slow_poke", {"message": "go"}))["result"]
    ack = (await served.task("tasks/cancel", second["taskId"]))["result"]
    assert ack == {"resultType": "complete", "_meta": ack["_meta"]}  # an empty ack, no task envelope
    seen = (await served.a2a("GetTask", {"id": second["taskId"]}))["result"]
    assert seen["status"]["state"] == "TASK_STATE_CANCELED"
    again = (await served.task("tasks/cancel", second["taskId"]))["result"]  # idempotent on a finished task
    assert again["resultType"] == "complete" and "taskId" not in again


async def test_an_approval_is_an_input_request_answered_by_tasks_update(served):
    capabilities = {"elicitation": {"form": {}}, "extensions": {EXT: {}}}
    created = (await served.call("tern_agent_writer", {"message": json.dumps({"path": "t.txt", "content": "hi"})},
                                 capabilities))["result"]
    asked = await served.until(created["taskId"], "input_required")
    (approval_id, question), = asked["inputRequests"].items()
    assert question["method"] == "elicitation/create" and approval_id.startswith("ap_")
    ack = await served.task("tasks/update", created["taskId"], capabilities, inputResponses={
        approval_id: {"action": "accept", "content": {"decision": "approve"}}, "made-up": {"action": "accept"}})
    assert ack["result"]["resultType"] == "complete"
    done = await served.until(created["taskId"], "completed")
    assert done["result"]["isError"] is False
    assert (await served.node.kernel.approvals.get(approval_id)).state == "approved"


async def test_a_model_turn_is_an_input_request_for_an_mcp_sampling_agent(served):
    capabilities = {"sampling": {}, "extensions": {EXT: {}}}
    created = (await served.call("tern_agent_desk", {"message": "hi"}, capabilities))["result"]
    asked = await served.until(created["taskId"], "input_required")
    (turn_id, question), = asked["inputRequests"].items()
    assert question["method"] == "sampling/createMessage"
    assert question["params"]["messages"] == [{"role": "user", "content": {"type": "text", "text": "hi"}}]
    await served.task("tasks/update", created["taskId"], capabilities, inputResponses={
        turn_id: {"role": "assistant", "content": {"type": "text", "text": "hello from the client"}, "model": "m"}})
    done = await served.until(created["taskId"], "completed")
    assert done["result"]["content"][0]["text"] == "hello from the client"


async def test_an_agent_that_fails_is_a_completed_task_with_a_tool_error(served):
    created = (await served.call("tern_agent_desk", {"message": "hi"}))["result"]  # no sampling: it cannot run
    done = await served.until(created["taskId"], "completed")
    assert done["result"]["isError"] is True and "mcp-sampling" in done["result"]["content"][0]["text"]


async def test_an_agent_that_rejects_the_task_is_a_failed_task_with_an_error(served):
    created = (await served.call("tern_agent_picky", {"message": "do it"}))["result"]
    done = await served.until(created["taskId"], "failed")
    assert "result" not in done and done["error"]["code"] == -32000
    assert done["error"]["message"] == "the agent rejected the task: not a job for me"
    seen = (await served.a2a("GetTask", {"id": created["taskId"]}))["result"]
    assert seen["status"]["state"] == "TASK_STATE_REJECTED"


async def test_without_the_extension_calls_are_plain_and_task_methods_refused(served):
    plain = (await served.call("tern_agent_echo", {"message": "sync"}, capabilities={}))["result"]
    assert plain["resultType"] == "complete" and plain["content"][0]["text"] == "sync" and "taskId" not in plain
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        refused = await served.task(method, "some-task", capabilities={}, inputResponses={})
        assert refused["error"]["code"] == -32021
        assert refused["error"]["data"] == {"requiredCapabilities": {"extensions": {EXT: {}}}}


async def test_unknown_ids_removed_methods_and_headers(served):
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        assert (await served.task(method, "no-such-task", inputResponses={}))["error"]["code"] == -32602
    for method in ("tasks/result", "tasks/list"):
        assert (await served.post(method, {"taskId": "x"}, name="x"))["error"]["code"] == -32601
    created = (await served.call("tern_agent_echo", {"message": "x"}))["result"]
    wrong = await served.post("tasks/get", {"taskId": created["taskId"]}, name="another-task")
    assert wrong["error"]["code"] == -32020
    bad = await served.task("tasks/update", created["taskId"], inputResponses=None)
    assert bad["error"]["code"] == -32602


async def test_sync_tools_and_context_ids_stay_calls(served):
    listed = (await served.call("time_now", {}))["result"]
    assert listed["resultType"] == "complete" and "taskId" not in listed
    created = (await served.call("tern_agent_echo", {"message": "one"}))["result"]
    first = await served.until(created["taskId"], "completed")
    context_id = first["result"]["structuredContent"]["context_id"]
    again = (await served.call("tern_agent_echo", {"message": "two", "context_id": context_id}))["result"]
    second = await served.until(again["taskId"], "completed")
    assert second["result"]["structuredContent"]["context_id"] == context_id


async def test_a_preset_taking_arguments_that_requires_a_task(served):
    tools = {t["name"]: t for t in (await served.post("tools/list", {}))["result"]["tools"]}
    assert tools["shout"]["inputSchema"] == {"type": "object", "additionalProperties": False,
                                             "properties": {"word": {"type": "string"}, "times": {"type": "integer"}},
                                             "required": ["word", "times"]}
    assert tools["shout"]["execution"] == {"taskSupport": "required"}
    created = (await served.call("shout", {"word": "hey", "times": 3}))["result"]
    assert (await served.until(created["taskId"], "completed"))["result"]["content"][0]["text"] == "hey x3"
    headers = {"Accept": BOTH, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "shout"}
    response = await served.client.post(served.base + "/mcp", headers=headers, json=request(
        1, "tools/call", {"name": "shout", "arguments": {"word": "hey", "times": 3}, "_meta": meta({})}))
    assert response.status_code == 400 and response.json()["error"]["code"] == -32021
    wrong = (await served.call("shout", {"word": "hey", "times": "3"}))["result"]
    assert wrong["isError"] and wrong["content"][0]["text"] == "invalid arguments: times (an integer) expected"


async def test_a_model_turn_nobody_answers_ends_the_task(served, monkeypatch):
    from runtime.mcp.server import dispatch

    monkeypatch.setattr(dispatch, "SAMPLE_TIMEOUT_SECS", 0.5)
    capabilities = {"sampling": {}, "extensions": {EXT: {}}}
    created = (await served.call("tern_agent_desk", {"message": "hi"}, capabilities))["result"]
    assert (await served.until(created["taskId"], "input_required"))["inputRequests"]
    done = await served.until(created["taskId"], "completed")
    text = done["result"]["content"][0]["text"]
    assert done["result"]["isError"] and "did not answer a model turn within 0.5 s" in text


FORMS = {"elicitation": {}, "extensions": {EXT: {}}}


async def test_an_ask_task_takes_two_answers_at_once_or_one_by_one(served):
    tools = {t["name"]: t for t in (await served.post("tools/list", {}))["result"]["tools"]}
    assert tools["two_forms"]["execution"] == {"taskSupport": "required"}
    created = (await served.call("two_forms", {}, FORMS))["result"]
    assert created["resultType"] == "task" and created["status"] == "input_required"
    assert "inputRequests" not in created
    task_id = created["taskId"]
    asked = await served.task("tasks/get", task_id, FORMS)
    asked = asked["result"]
    assert set(asked["inputRequests"]) == {"who", "ok"} and asked["status"] == "input_required"
    assert asked["inputRequests"]["who"]["method"] == "elicitation/create"
    assert asked["inputRequests"]["who"]["params"]["requestedSchema"]["required"] == ["name"]
    ack = (await served.task("tasks/update", task_id, FORMS, inputResponses={
        "who": {"action": "accept", "content": {"name": "Ada"}}, "nobody-asked": {"action": "accept"}}))["result"]
    assert ack == {"resultType": "complete", "_meta": ack["_meta"]}
    partial = (await served.task("tasks/get", task_id, FORMS))["result"]
    assert partial["status"] == "input_required" and set(partial["inputRequests"]) == {"ok"}
    await served.task("tasks/update", task_id, FORMS, inputResponses={"ok": {"action": "accept",
                                                                             "content": {"confirm": True}}})
    second = (await served.task("tasks/get", task_id, FORMS))["result"]
    assert set(second["inputRequests"]) == {"why"}
    assert second["inputRequests"]["why"]["params"]["message"] == "Why, Ada?"
    await served.task("tasks/update", task_id, FORMS, inputResponses={"why": {"action": "accept",
                                                                              "content": {"text": "tests"}}})
    done = (await served.task("tasks/get", task_id, FORMS))["result"]
    assert done["status"] == "completed" and "inputRequests" not in done
    assert done["result"]["content"][0]["text"] == "Ada is sure: true; because tests" and not done["result"]["isError"]
    again = (await served.task("tasks/cancel", task_id, FORMS))["result"]
    assert "taskId" not in again and (await served.task("tasks/get", task_id, FORMS))["result"]["status"] == "completed"


async def test_an_ask_task_refuses_bad_answers_and_callers(served):
    created = (await served.call("two_forms", {}, FORMS))["result"]
    task_id = created["taskId"]
    not_object = await served.task("tasks/update", task_id, FORMS, inputResponses={"who": "Ada"})
    assert not_object["error"]["code"] == -32602
    assert set((await served.task("tasks/get", task_id, FORMS))["result"]["inputRequests"]) == {"who", "ok"}
    await served.task("tasks/update", task_id, FORMS, inputResponses={"who": {"action": "accept",
                                                                              "content": {"name": 7}}})
    failed = (await served.task("tasks/get", task_id, FORMS))["result"]
    assert failed["status"] == "completed" and failed["result"]["isError"]
    assert failed["result"]["content"][0]["text"] == "the answer to who: name is not a string"
    no_forms = await served.call("two_forms", {}, {"extensions": {EXT: {}}})
    assert no_forms["error"]["code"] == -32021
    headers = {"Accept": BOTH, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "two_forms"}
    response = await served.client.post(served.base + "/mcp", headers=headers, json=request(
        1, "tools/call", {"name": "two_forms", "arguments": {}, "_meta": meta({"elicitation": {}})}))
    assert response.status_code == 400 and response.json()["error"]["code"] == -32021
    extra = (await served.call("two_forms", {"who": "me"}, FORMS))["result"]
    assert extra["isError"] and "unexpected arguments: who" in extra["content"][0]["text"]
    cancelled = (await served.call("two_forms", {}, FORMS))["result"]["taskId"]
    await served.task("tasks/cancel", cancelled, FORMS)
    await served.task("tasks/update", cancelled, FORMS, inputResponses={"who": {"action": "accept",
                                                                                "content": {"name": "late"}}})
    gone = (await served.task("tasks/get", cancelled, FORMS))["result"]
    assert gone["status"] == "cancelled" and "inputRequests" not in gone and "result" not in gone
    assert (await served.task("tasks/get", "ask-forged", FORMS))["error"]["code"] == -32602



async def test_an_ask_task_nobody_answers_ends_with_an_error(autojump_clock):
    from runtime.config import McpAsk, McpAskQuestion
    from runtime.mcp.server.ask_task import AskTask
    from runtime.mcp.server.asks import Ask

    form = {"type": "object", "properties": {"x": {"type": "string"}}}
    ask = Ask(McpAsk(name="pair", timeout_secs=300, questions=[
        McpAskQuestion(key="a", kind="form", message="A?", schema=form),
        McpAskQuestion(key="b", kind="form", message="B?", schema=form)]))
    task = AskTask(ask, {}, {"elicitation": {}})
    await trio.sleep(299)
    task.update({"a": {"action": "accept", "content": {"x": "1"}}})  # an answer restarts the clock
    await trio.sleep(299)
    task.expire()
    assert task.status == "input_required" and set(task.pending) == {"b"}
    await trio.sleep(1)
    task.expire()
    assert task.status == "completed" and task.pending == {}
    assert task.result == {"content": [{"type": "text", "text": "the client did not answer b within 300 s"}],
                           "isError": True}
    task.update({"b": {"action": "accept", "content": {"x": "late"}}})
    assert task.result["isError"] and "b" not in task.answers
