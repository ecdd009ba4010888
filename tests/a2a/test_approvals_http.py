"""Tool-call approvals as A2A callers see them, over real HTTP from a node in this
process: an agent whose tool (``file_write``, destructive: the default policy asks)
waits for a person. Every dialect and binding tern serves renders the wait, and with
``caller_may_approve`` takes the caller's answer: JSON-RPC 1.0 (send and stream), 0.3
and 0.1, HTTP+JSON, and the seed's REST routes. The a2a-sdk client against
``tern serve`` is in test_approvals_sdk.py."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from runtime.config import A2aConfig, AgentConfig, Config, GovernanceConfig, StateConfig
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from tests.a2a.test_server import V10, rpc, sse

WRITE = json.dumps({"path": "note.txt", "content": "hello"})
APPROVE = {"data": {"decision": "approve"}}


async def start(nursery, tmp_path, *, caller_may_approve, timeout_secs=60.0, requests_per_minute=0):
    config = Config(agents=[AgentConfig(name="writer", kind="tool", tool="file_write",
                                        requests_per_minute=requests_per_minute)],
                    state=StateConfig(dir=str(tmp_path)),
                    governance=GovernanceConfig(approval_timeout_secs=timeout_secs),
                    a2a=A2aConfig(enabled=True, default_agent="writer", caller_may_approve=caller_may_approve))
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    return node, f"http://127.0.0.1:{bound[0][1]}"


def message(parts, dialect="1.0", **ids):
    """A user message in ``dialect`` with 1.0-style ``parts`` ({"text"} or {"data"})."""
    if dialect == "1.0":
        return {"messageId": f"m-{id(parts)}", "role": "ROLE_USER", "parts": parts, **ids}
    key = "type" if dialect == "0.1" else "kind"
    shaped = [{key: "text" if "text" in p else "data", **p} for p in parts]
    if dialect == "0.1":
        return {"role": "user", "parts": shaped}
    return {"kind": "message", "messageId": f"m-{id(parts)}", "role": "user", "parts": shaped, **ids}


def said(status):
    """(text, data) of a rendered status message, in any dialect."""
    parts = status.get("message", {}).get("parts", [])
    text = " ".join(p["text"] for p in parts if "text" in p)
    data = next((p["data"] for p in parts if "data" in p), None)
    return text, data


async def check_question(task, state, approvals):
    """The task asks: input-required (in its dialect's spelling) with the request as data."""
    [pending] = await approvals.list()
    assert task["status"]["state"] == state
    text, data = said(task["status"])
    assert "May agent 'writer' call file_write" in text and pending.id in text and '"approve"' in text
    assert data["approval"]["id"] == pending.id and data["approval"]["tool"] == "file_write"
    assert data["approval"]["arguments"] == {"path": "note.txt", "content": "hello"}
    return pending


def reply_of(task):
    return task["artifacts"][0]["parts"][0]["text"]


async def test_every_dialect_renders_the_question_and_takes_the_answer(nursery, tmp_path):
    node, url = await start(nursery, tmp_path, caller_may_approve=True)
    approvals = node.kernel.approvals
    async with httpx.AsyncClient(headers=V10, timeout=30) as client:

        async def call(method, params, path="/a2a"):
            answer = (await client.post(url + path, json=rpc(method, params))).json()
            assert "result" in answer, answer
            return answer["result"]

        # 1.0 JSON-RPC: a blocking send returns at the question; a data part approves
        task = (await call("SendMessage", {"message": message([{"text": WRITE}])}))["task"]
        pending = await check_question(task, "TASK_STATE_INPUT_REQUIRED", approvals)
        done = (await call("SendMessage", {"message": message([APPROVE], taskId=task["id"])}))["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED" and reply_of(done) == "wrote 5 bytes to note.txt"
        decided = await approvals.get(pending.id)
        assert (decided.state, decided.decided_by, decided.channel) == ("approved", "a2a:127.0.0.1", "a2a")
        got = await call("GetTask", {"id": task["id"]})
        assert [m["role"] for m in got["history"]] == ["ROLE_USER", "ROLE_AGENT", "ROLE_USER", "ROLE_AGENT"]

        # 0.3 JSON-RPC: the text "yes" approves
        task = await call("message/send", {"message": message([{"text": WRITE}], "0.3")})
        await check_question(task, "input-required", approvals)
        assert task["status"]["message"]["parts"][1]["kind"] == "data"
        done = await call("message/send", {"message": message([{"text": "yes"}], "0.3", taskId=task["id"])})
        assert done["status"]["state"] == "completed"

        # 0.1: the client names the task; "no" denies, and the agent's answer is the denial
        task = await call("tasks/send", {"id": "legacy-1", "message": message([{"text": WRITE}], "0.1")})
        pending = await check_question(task, "input-required", approvals)
        assert task["status"]["message"]["parts"][1]["type"] == "data"
        done = await call("tasks/send", {"id": "legacy-1", "message": message([{"text": "no"}], "0.1")})
        assert done["status"]["state"] == "failed"
        assert said(done["status"])[0] == (f"file_write was not run: a2a:127.0.0.1 denied it (approval {pending.id}, "
                                           "a2a)")

        # HTTP+JSON: garbage is refused (400, still asking), then approve
        rest = url + "/a2a/writer/rest"
        task = (await client.post(rest + "/message:send", json={"message": message([{"text": WRITE}])})).json()["task"]
        pending = await check_question(task, "TASK_STATE_INPUT_REQUIRED", approvals)
        garbage = await client.post(rest + "/message:send",
                                    json={"message": message([{"text": "whatever"}], taskId=task["id"])})
        assert garbage.status_code == 400
        assert garbage.json()["error"]["message"] == (
            f"task {task['id']} waits for a decision on approval {pending.id}: the answer 'whatever' is no decision: "
            'answer "approve" or "deny", or send a data part {"decision": "approve" | "deny", '
            '"scope": "once" | "always" | "args", "reason": "..."}')
        still = (await client.get(f"{rest}/tasks/{task['id']}")).json()
        assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" and len(still["history"]) == 2
        done = (await client.post(rest + "/message:send",
                                  json={"message": message([APPROVE], taskId=task["id"])})).json()["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"

        # the seed's REST routes (0.1 shapes)
        sent = await client.post(url + "/a2a/tasks/send", json={"id": "seed-1",
                                                                "message": message([{"text": WRITE}], "0.1")})
        await check_question(sent.json(), "input-required", approvals)
        refused = await client.post(url + "/a2a/tasks/send", json={"id": "seed-1",
                                                                   "message": message([{"text": "?"}], "0.1")})
        assert refused.status_code == 400 and "no decision" in refused.json()["error"]["message"]
        done = await client.post(url + "/a2a/tasks/send", json={"id": "seed-1",
                                                                "message": message([{"text": "approve"}], "0.1")})
        assert done.json()["status"]["state"] == "completed"
        assert (await client.get(url + "/a2a/tasks/seed-1")).json()["status"]["state"] == "completed"


@pytest.mark.parametrize("method,dialect", [("SendStreamingMessage", "1.0"), ("message/stream", "0.3"),
                                            ("tasks/sendSubscribe", "0.1")])
async def test_a_stream_ends_at_the_question_and_the_answer_streams_on(nursery, tmp_path, method, dialect):
    node, url = await start(nursery, tmp_path, caller_may_approve=True)
    ids = {"id": "streamed-1"} if dialect == "0.1" else {}
    async with httpx.AsyncClient(headers=V10, timeout=30) as client:
        first = sse((await client.post(url + "/a2a", json=rpc(method, {
            **ids, "message": message([{"text": WRITE}], dialect)}))).text)
        last = first[-1]["result"]
        status = last["statusUpdate"]["status"] if dialect == "1.0" else last["status"]
        await check_question({"status": status}, "TASK_STATE_INPUT_REQUIRED" if dialect == "1.0" else "input-required",
                       node.kernel.approvals)
        if dialect != "1.0":
            assert last["final"] is True
        task_id = ids.get("id") or (first[0]["result"]["task"]["id"] if dialect == "1.0" else first[0]["result"]["id"])
        answer = message([APPROVE], dialect, **({} if dialect == "0.1" else {"taskId": task_id}))
        second = sse((await client.post(url + "/a2a", json=rpc(method, {**ids, "message": answer}))).text)
        last = second[-1]["result"]
        status = last["statusUpdate"]["status"] if dialect == "1.0" else last["status"]
        assert status["state"] in ("TASK_STATE_COMPLETED", "completed")


async def test_by_default_the_task_works_and_says_what_it_waits_for(nursery, tmp_path):
    node, url = await start(nursery, tmp_path, caller_may_approve=False)
    async with httpx.AsyncClient(headers=V10, timeout=30) as client:
        events = []

        async def stream():
            async with client.stream("POST", url + "/a2a", json=rpc("message/stream", {
                    "message": message([{"text": WRITE}], "0.3")})) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        events.append(json.loads(line[5:])["result"])

        nursery.start_soon(stream)
        with trio.fail_after(10):
            while not await node.kernel.approvals.list():
                await trio.sleep(0.02)
        [pending] = await node.kernel.approvals.list()
        task_id = (await node.a2a.engine.list())[0][0].id
        got = (await client.post(url + "/a2a", json=rpc("GetTask", {"id": task_id}))).json()["result"]
        assert got["status"]["state"] == "TASK_STATE_WORKING"
        text, data = said(got["status"])
        assert text == (f"waiting for a person to approve file_write (approval {pending.id}, 60 s left): "
                        f"tern approve {pending.id}, or tern deny {pending.id}") and data is None
        refused = (await client.post(url + "/a2a", json=rpc("SendMessage", {
            "message": message([APPROVE], taskId=task_id)}))).json()
        assert refused["error"]["code"] == -32004  # the caller does not decide by default
        decided = await client.post(f"{url}/api/approvals/{pending.id}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        with trio.fail_after(10):
            while not events or events[-1].get("final") is not True:
                await trio.sleep(0.02)
    states = [(e["status"]["state"], said(e["status"])[0]) for e in events if e["kind"] == "status-update"]
    assert ("working", text) in states
    assert ("working", f"file_write was approved by api:127.0.0.1 (approval {pending.id}); working") in states
    assert states[-1][0] == "completed" and "input-required" not in [s for s, _ in states]


async def test_expiry_reaches_the_agent(nursery, tmp_path):
    node, url = await start(nursery, tmp_path, caller_may_approve=True, timeout_secs=1.0)
    async with httpx.AsyncClient(headers=V10, timeout=30) as client:
        task = (await client.post(url + "/a2a", json=rpc("SendMessage", {
            "message": message([{"text": WRITE}])}))).json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        with trio.fail_after(10):
            while (await node.a2a.engine.find(task["id"])).state == "input-required":
                await trio.sleep(0.05)
        finished = (await client.post(url + "/a2a", json=rpc("SendMessage", {
            "message": message([APPROVE], taskId=task["id"])}))).json()
        assert "error" in finished  # too late: the question is gone, and then so is the task
        with trio.fail_after(10):
            await node.a2a.engine.wait(task["id"])
        got = (await client.post(url + "/a2a", json=rpc("GetTask", {"id": task["id"]}))).json()["result"]
    assert got["status"]["state"] == "TASK_STATE_FAILED"
    assert said(got["status"])[0].startswith("file_write was not run: approval ap_")
    assert "expired (nobody answered in time)" in said(got["status"])[0]


async def test_an_answer_is_no_new_request_for_the_agents_budget(nursery, tmp_path):
    node, url = await start(nursery, tmp_path, caller_may_approve=True, requests_per_minute=1)
    async with httpx.AsyncClient(headers=V10, timeout=30) as client:
        task = (await client.post(url + "/a2a", json=rpc("SendMessage", {
            "message": message([{"text": WRITE}])}))).json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        another = await client.post(url + "/a2a", json=rpc("SendMessage", {"message": message([{"text": WRITE}])}))
        assert another.status_code == 429  # the budget is spent: no new work
        done = (await client.post(url + "/a2a", json=rpc("SendMessage", {
            "message": message([APPROVE], taskId=task["id"])}))).json()["result"]["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"  # the answer unblocks the turn already admitted
