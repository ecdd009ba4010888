"""tern's A2A server over real HTTP: cards (and their caching), every dialect's send,
get, cancel and stream, the seed's REST routes, and bad input."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from runtime.config import A2aConfig, AgentConfig, Config, StateConfig
from runtime.httpd.access import Access
from runtime.host.api import build_router
from runtime.httpd.server import HttpServer
from runtime.host.node import Node

KEY = "a2a-test-key-5678"
V10 = {"A2A-Version": "1.0"}


async def start(nursery, tmp_path, *, key="", max_tasks=1000):
    agents = [AgentConfig(name="echo", kind="echo", description="Echoes."),
              AgentConfig(name="sleepy", kind="command", command=["sh", "-c", "sleep 30"])]
    config = Config(agents=agents, state=StateConfig(dir=str(tmp_path)),
                    a2a=A2aConfig(enabled=True, default_agent="echo", max_tasks=max_tasks))
    kernel = Node(config)
    await nursery.start(kernel.run)
    server = HttpServer(config.server, build_router(kernel, secured=bool(key)), Access(key))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    kernel.http_bound = ("127.0.0.1", bound[0][1])
    return kernel, f"http://127.0.0.1:{bound[0][1]}"


@pytest.fixture
async def url(nursery, tmp_path):
    return (await start(nursery, tmp_path))[1]


def rpc(method, params, msg_id=1):
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def message(text, dialect="1.0", **extra):
    if dialect == "1.0":
        return {"messageId": "m-" + text, "role": "ROLE_USER", "parts": [{"text": text}], **extra}
    if dialect == "0.3":
        return {"kind": "message", "messageId": "m-" + text, "role": "user", "parts": [{"kind": "text", "text": text}],
                **extra}
    return {"role": "user", "parts": [{"type": "text", "text": text}], **extra}


def sse(text):
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


async def test_cards(url):
    async with httpx.AsyncClient() as client:
        card = await client.get(url + "/.well-known/agent-card.json")
        body = card.json()
        assert body["name"] == "echo" and body["url"] == url + "/a2a/echo"  # the real address, never 0.0.0.0
        assert body["supportedInterfaces"][0] == {"url": url + "/a2a/echo", "protocolBinding": "JSONRPC",
                                                  "protocolVersion": "1.0"}
        assert body["capabilities"] == {"streaming": True, "pushNotifications": True}
        assert body["protocolVersion"] == "0.3.0" and "securitySchemes" not in body
        assert card.headers["etag"] and card.headers["cache-control"] and card.headers["last-modified"]
        again = await client.get(url + "/.well-known/agent-card.json", headers={"If-None-Match": card.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        legacy = (await client.get(url + "/.well-known/agent.json")).json()
        assert legacy["url"] == url + "/a2a/echo" and "stateTransitionHistory" in legacy["capabilities"]
        listed = (await client.get(url + "/a2a/agents")).json()
        assert listed["total"] == 2 and [a["name"] for a in listed["agents"]] == ["echo", "sleepy"]
        one = (await client.get(url + "/a2a/sleepy/.well-known/agent-card.json")).json()
        assert one["url"] == url + "/a2a/sleepy"
        assert (await client.get(url + "/a2a/nobody/.well-known/agent-card.json")).status_code == 404


async def test_cards_declare_security_when_a_key_is_set(nursery, tmp_path):
    _, url = await start(nursery, tmp_path, key=KEY)
    async with httpx.AsyncClient() as client:
        card = (await client.get(url + "/.well-known/agent-card.json")).json()  # public
        assert "bearer" in card["securitySchemes"]
        denied = await client.post(url + "/a2a", json=rpc("GetTask", {"id": "x"}), headers=V10)
        assert denied.status_code == 401  # task reads need the key


@pytest.mark.parametrize("dialect,method", [("1.0", "SendMessage"), ("0.3", "message/send"), ("0.1", "tasks/send")])
async def test_send_get_in_each_dialect(url, dialect, method):
    params = {"message": message("hello", dialect)}
    if dialect == "0.1":
        params.update(id="client-task-1", sessionId="session-1")
    async with httpx.AsyncClient() as client:
        sent = (await client.post(url + "/a2a/echo/", json=rpc(method, params), headers=V10)).json()["result"]
        task = sent["task"] if dialect == "1.0" else sent
        state = {"1.0": "TASK_STATE_COMPLETED"}.get(dialect, "completed")
        assert task["status"]["state"] == state
        text = task["artifacts"][0]["parts"][0]["text"]
        assert text == "hello"
        if dialect == "0.1":
            assert task["id"] == "client-task-1" and task["sessionId"] == "session-1"
        got = (await client.post(url + "/a2a", json=rpc("GetTask" if dialect == "1.0" else "tasks/get",
                                                         {"id": task["id"], "historyLength": 1}), headers=V10)).json()
        assert got["result"]["id"] == task["id"] and len(got["result"]["history"]) == 1
        assert ("sessionId" in got["result"]) == (dialect == "0.1")  # answered in the task's own dialect


async def test_stream_in_each_dialect(url):
    async with httpx.AsyncClient() as client:
        v10 = sse((await client.post(url + "/a2a", json=rpc("SendStreamingMessage", {"message": message("s")}),
                                     headers=V10)).text)
        kinds = [next(iter(e["result"])) for e in v10]
        assert kinds == ["task", "statusUpdate", "artifactUpdate", "statusUpdate"]
        assert v10[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        v03 = sse((await client.post(url + "/a2a", json=rpc("message/stream", {"message": message("s", "0.3")}))).text)
        assert [e["result"]["kind"] for e in v03] == ["task", "status-update", "artifact-update", "status-update"]
        assert v03[-1]["result"]["final"] is True
        v01 = sse((await client.post(url + "/a2a", json=rpc("tasks/sendSubscribe", {
            "id": "legacy-stream", "message": message("s", "0.1")}))).text)
        assert v01[-1]["result"] == {"id": "legacy-stream", "status": v01[-1]["result"]["status"], "final": True}


async def test_non_blocking_send_cancel_and_subscribe(url):
    async with httpx.AsyncClient() as client:
        sent = (await client.post(url + "/a2a/sleepy", headers=V10, json=rpc("SendMessage", {
            "message": message("zzz"), "configuration": {"returnImmediately": True}}))).json()["result"]["task"]
        assert sent["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        async with trio.open_nursery() as nursery:
            events = []

            async def subscribe():
                response = await client.post(url + "/a2a/sleepy", headers=V10,
                                             json=rpc("SubscribeToTask", {"id": sent["id"]}))
                events.extend(sse(response.text))

            nursery.start_soon(subscribe)
            await trio.sleep(0.2)
            cancelled = (await client.post(url + "/a2a/sleepy", headers=V10,
                                           json=rpc("CancelTask", {"id": sent["id"]}))).json()["result"]
            assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
        again = (await client.post(url + "/a2a", headers=V10, json=rpc("CancelTask", {"id": sent["id"]}))).json()
        assert again["error"]["code"] == -32002
        late = (await client.post(url + "/a2a", headers=V10, json=rpc("SubscribeToTask", {"id": sent["id"]}))).json()
        assert late["error"]["code"] == -32004


async def test_multi_turn_context_and_list(url):
    async with httpx.AsyncClient() as client:
        first = (await client.post(url + "/a2a", headers=V10, json=rpc("SendMessage", {
            "message": message("one")}))).json()["result"]["task"]
        second = (await client.post(url + "/a2a", headers=V10, json=rpc("SendMessage", {
            "message": message("two", contextId=first["contextId"])}))).json()["result"]["task"]
        assert second["contextId"] == first["contextId"] and second["id"] != first["id"]
        listed = (await client.post(url + "/a2a", headers=V10, json=rpc("ListTasks", {
            "contextId": first["contextId"], "pageSize": 1}))).json()["result"]
        assert listed["totalSize"] == 2 and [t["id"] for t in listed["tasks"]] == [second["id"]]
        assert listed["nextPageToken"] == "1" and "artifacts" not in listed["tasks"][0]
        page2 = (await client.post(url + "/a2a", headers=V10, json=rpc("ListTasks", {
            "contextId": first["contextId"], "pageSize": 1, "pageToken": "1"}))).json()["result"]
        assert [t["id"] for t in page2["tasks"]] == [first["id"]] and page2["nextPageToken"] == ""
        for token in ("-1", "9" * 30, "1e3", "x"):  # a page token is an offset tern handed out, nothing else
            refused = (await client.post(url + "/a2a", headers=V10, json=rpc("ListTasks", {
                "pageToken": token}))).json()
            assert refused["error"] == {"code": -32602, "message": "invalid pageToken"}, token



async def test_list_tasks_refuses_a_status_that_names_no_state(url):
    """An unknown ``status`` is -32602 (HTTP 400), not an empty list: the caller asked for
    something that cannot exist (issue #32). Known names, numbers and UNSPECIFIED still list."""
    async with httpx.AsyncClient() as client:
        await client.post(url + "/a2a", headers=V10, json=rpc("SendMessage", {"message": message("one")}))
        for status in ("TASK_STATE_BOGUS", "done", 42, -1, True, {"state": "x"}):
            refused = (await client.post(url + "/a2a", headers=V10, json=rpc("ListTasks", {"status": status}))).json()
            assert refused["error"]["code"] == -32602, (status, refused)
        rest = await client.get(url + "/a2a/echo/rest/tasks", params={"status": "TASK_STATE_BOGUS"}, headers=V10)
        assert rest.status_code == 400, rest.text
        for status, count in (("TASK_STATE_COMPLETED", 1), ("completed", 1), (3, 1), ("TASK_STATE_WORKING", 0),
                              ("TASK_STATE_UNSPECIFIED", 1), (0, 1), ("", 1)):
            listed = (await client.post(url + "/a2a", headers=V10, json=rpc("ListTasks", {"status": status}))).json()
            assert listed["result"]["totalSize"] == count, (status, listed)
        rest = await client.get(url + "/a2a/echo/rest/tasks", params={"status": "3"}, headers=V10)
        assert rest.json()["totalSize"] == 1, rest.text

async def test_seed_rest_routes(url):
    async with httpx.AsyncClient() as client:
        sent = await client.post(url + "/a2a/tasks/send", json={"id": "rest-1", "message": message("rest", "0.1")})
        assert sent.json()["status"]["state"] == "completed" and sent.json()["id"] == "rest-1"
        got = await client.get(url + "/a2a/tasks/rest-1")
        assert got.json()["artifacts"][0]["parts"][0] == {"type": "text", "text": "rest"}
        assert (await client.get(url + "/a2a/tasks/nope")).status_code == 404
        assert (await client.post(url + "/a2a/tasks/nope/cancel")).status_code == 404
        assert (await client.post(url + "/a2a/tasks/rest-1/cancel")).status_code == 409  # already completed
        empty = {"id": "x", "message": {"parts": []}}
        assert (await client.post(url + "/a2a/tasks/send", json=empty)).status_code == 400


async def test_bad_input(nursery, tmp_path):
    kernel, url = await start(nursery, tmp_path, max_tasks=3)
    async with httpx.AsyncClient() as client:

        async def call(method, params, headers=V10):
            return (await client.post(url + "/a2a", json=rpc(method, params), headers=headers)).json()

        assert (await call("SendMessage", {"message": message("x")}, headers={}))["error"]["code"] == -32009
        assert (await call("GetTask", {"id": "nope"}))["error"]["code"] == -32001
        assert (await call("GetTask", {"id": "nope"}))["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"
        assert (await call("NoSuchMethod", {}))["error"]["code"] == -32601
        assert (await call("tasks/list", {}))["error"]["code"] == -32601  # not a 0.3 JSON-RPC method
        unknown_part = await call(
            "SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"hologram": "x"}]}}
        )
        assert unknown_part["error"]["code"] == -32602 and "does not know" in unknown_part["error"]["message"]
        done = (await call("SendMessage", {"message": message("a")}))["result"]["task"]
        contradiction = await call("SendMessage", {"message": message("b", taskId=done["id"], contextId="other")})
        assert contradiction["error"]["code"] == -32602
        terminal = await call("SendMessage", {"message": message("c", taskId=done["id"])})
        assert terminal["error"]["code"] == -32004
        push = await call("CreateTaskPushNotificationConfig", {"taskId": done["id"], "url": "http://169.254.169.254/"})
        assert push["error"]["code"] == -32602 and "refused" in push["error"]["message"]  # the SSRF guard
        garbage = await client.post(url + "/a2a", content=b"{not json", headers={"Content-Type": "application/json"})
        assert garbage.json()["error"]["code"] == -32700
        huge = await client.post(
            url + "/a2a", headers=V10, json=rpc("SendMessage", {"message": message("x" * (11 * 1024 * 1024))})
        )
        assert huge.status_code == 413
        # a flood past the store bound: live tasks are never evicted, new work is refused
        for i in range(3):  # the finished tasks make room; these three stay live
            live = (
                await client.post(
                    url + "/a2a/sleepy",
                    headers=V10,
                    json=rpc(
                        "SendMessage", {"message": message(f"z{i}"), "configuration": {"returnImmediately": True}}
                    ),
                )
            ).json()
            assert "task" in live["result"]
        refused = (
            await client.post(
                url + "/a2a/sleepy",
                headers=V10,
                json=rpc(
                    "SendMessage", {"message": message("one too many"), "configuration": {"returnImmediately": True}}
                ),
            )
        ).json()
        assert "unfinished" in refused["error"]["message"]
        assert (await client.get(url + "/health")).status_code == 200
        assert kernel.a2a.engine.counts().get("working", 0) + kernel.a2a.engine.counts().get("submitted", 0) == 3


async def test_a_subscriber_that_disconnects_leaves_the_task_running(url):
    async with httpx.AsyncClient() as client:
        async with client.stream(
            "POST", url + "/a2a/sleepy", headers=V10, json=rpc("SendStreamingMessage", {"message": message("long")})
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    task_id = json.loads(line[5:])["result"]["task"]["id"]
                    break
        await trio.sleep(0.2)
        got = (await client.post(url + "/a2a", headers=V10, json=rpc("GetTask", {"id": task_id}))).json()
        assert got["result"]["status"]["state"] == "TASK_STATE_WORKING"  # a stream is a view, not the work
        await client.post(url + "/a2a", headers=V10, json=rpc("CancelTask", {"id": task_id}))


async def test_http_json_binding(url):
    rest = url + "/a2a/echo/rest"
    async with httpx.AsyncClient(headers=V10) as client:
        sent = (await client.post(rest + "/message:send", json={"message": message("rest")})).json()["task"]
        assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
        got = await client.get(f"{rest}/tasks/{sent['id']}", params={"historyLength": 1})
        assert got.json()["id"] == sent["id"] and len(got.json()["history"]) == 1
        listed = (
            await client.get(rest + "/tasks", params={"contextId": sent["contextId"], "includeArtifacts": "true"})
        ).json()
        assert listed["totalSize"] == 1 and listed["tasks"][0]["artifacts"]
        missing = await client.get(rest + "/tasks/nope")
        assert missing.status_code == 404
        assert missing.json()["error"]["status"] == "NOT_FOUND"
        assert missing.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
        cancel = await client.post(f"{rest}/tasks/{sent['id']}:cancel")
        assert cancel.status_code == 400 and cancel.json()["error"]["details"][0]["reason"] == "TASK_NOT_CANCELABLE"
        streamed = [
            json.loads(line[5:])
            for line in (await client.post(rest + "/message:stream", json={"message": message("s")})).text.splitlines()
            if line.startswith("data:")
        ]
        assert [next(iter(e)) for e in streamed] == ["task", "statusUpdate", "artifactUpdate", "statusUpdate"]
        old = await client.post(rest + "/message:send", json={"message": message("x")}, headers={"A2A-Version": "0.3"})
        assert old.status_code == 400 and old.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
        bad = await client.post(rest + "/message:send", json={"message": {"role": "ROLE_USER", "parts": []}})
        assert bad.status_code == 400
        assert (await client.get(rest + "/extendedAgentCard")).status_code == 400


async def test_protocol_details_the_tck_checks(url):
    async with httpx.AsyncClient(headers=V10) as client:
        wrong_type = await client.post(url + "/a2a", content=b"{'not': json}", headers={"Content-Type": "text/plain"})
        assert wrong_type.status_code == 200 and wrong_type.json()["error"]["code"] == -32005
        no_id = (
            await client.post(url + "/a2a", json={"jsonrpc": "2.0", "method": "message/ssend", "params": {}})
        ).json()
        assert no_id["id"] is None and no_id["error"]["code"] == -32601  # A2A has no notifications
        sent = (await client.post(url + "/a2a", json=rpc("SendMessage", {"message": message("x")}))).json()["result"]
        snake = await client.post(url + "/a2a", json=rpc("GetTask", {"id": sent["task"]["id"], "history_length": 0}))
        assert "history" not in snake.json()["result"]  # proto field names work as ProtoJSON says
        listed = (
            await client.post(
                url + "/a2a", json=rpc("ListTasks", {"context_id": sent["task"]["contextId"], "page_size": 1})
            )
        ).json()["result"]
        assert listed["totalSize"] == 1 and listed["pageSize"] == 1


async def test_a_command_agent_drives_its_task_with_events(nursery, tmp_path):
    import sys

    from runtime.config import A2aConfig, AgentConfig, Config, StateConfig
    from tests.test_cli import ROOT

    tck = [sys.executable, str(ROOT / "tests" / "fixtures" / "tck_agent.py")]
    config = Config(
        agents=[AgentConfig(name="tck", kind="command", command=tck, a2a_events=True)],
        state=StateConfig(dir=str(tmp_path)),
        a2a=A2aConfig(enabled=True, default_agent="tck"),
    )
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{bound[0][1]}/a2a"
    async with httpx.AsyncClient(headers=V10, timeout=30) as client:

        async def send(message_id, text="hi"):
            return (
                await client.post(
                    url,
                    json=rpc(
                        "SendMessage",
                        {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}},
                    ),
                )
            ).json()["result"]

        data = (await send("tck-artifact-data-1"))["task"]
        assert data["status"]["state"] == "TASK_STATE_COMPLETED"
        assert data["artifacts"][0]["parts"] == [{"data": {"key": "value", "count": 42}}]
        reply = await send("tck-message-response-1")
        assert reply == {
            "message": {
                "messageId": reply["message"]["messageId"],
                "role": "ROLE_AGENT",
                "parts": [{"text": "Direct message response"}],
                "contextId": reply["message"]["contextId"],
            }
        }
        waiting = (await send("tck-input-required-1"))["task"]

        async def streamed(message_id):
            """The results of one SendStreamingMessage, in order."""
            message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "go"}]}
            answer = await client.post(url, json=rpc("SendStreamingMessage", {"message": message}))
            return [json.loads(line[5:])["result"] for line in answer.text.splitlines() if line.startswith("data:")]

        assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        chunked = await streamed("tck-stream-artifact-chunked-1")
        updates = [e["artifactUpdate"] for e in chunked if "artifactUpdate" in e]
        assert [(u["append"], u["lastChunk"]) for u in updates] == [(False, False), (True, True)]
        streamed_message = await streamed("tck-message-response-2")
        assert [next(iter(e)) for e in streamed_message] == ["message"]  # a message stream is that one message
