"""Three real ``tern serve`` nodes on one PostgreSQL behind HAProxy (tests/scaleout/cluster.py):
any node answers for any task. Through the balancer, the official a2a-sdk clients (1.x over
JSON-RPC and HTTP+JSON, 0.3 over JSON-RPC) send, get, list, cancel and subscribe; plain HTTP
covers the 0.1 methods and the seed's REST routes. Addressing nodes directly: a cancel on
another node kills the agent's process, a subscriber on another node gets every event in
order, an approval decided on another node (the API, and the caller's own answer) resumes
the waiting call, and a webhook gets each event once, not once per node."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import trio

from tests import peers
from tests.haproxy import haproxy_bin
from tests.scaleout.cluster import API_KEY, Cluster
from tests.test_cli import ROOT

V10 = {"A2A-Version": "1.0"}
WRITE = json.dumps({"path": "note.txt", "content": "hello"})


@pytest.fixture(scope="module")
def cluster(pg_server, tmp_path_factory):
    peers.require(haproxy_bin)
    with Cluster(tmp_path_factory.mktemp("cluster"), pg_server.create_database(), nodes=3,
                 caller_may_approve=True) as running:
        yield running


def rpc(method, params, msg_id=1):
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def message(text, dialect="1.0", **extra):
    if dialect == "1.0":
        return {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": text}], **extra}
    if dialect == "0.3":
        return {"kind": "message", "messageId": f"m-{time.monotonic_ns()}", "role": "user",
                "parts": [{"kind": "text", "text": text}], **extra}
    return {"role": "user", "parts": [{"type": "text", "text": text}], **extra}


def sse(text):
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def call(client, node_url, method, params, path="/a2a"):
    """One JSON-RPC call on one node; the result (an error fails the test, saying which)."""
    answer = client.post(node_url + path, json=rpc(method, params), headers=V10).json()
    assert "result" in answer, (node_url, method, answer)
    return answer["result"]


def gone(pid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def said(status):
    return " ".join(p.get("text", "") for p in status.get("message", {}).get("parts", []))


def wait_state(client, node_url, task_id, states, timeout=20.0):
    deadline = time.monotonic() + timeout
    while (task := call(client, node_url, "GetTask", {"id": task_id}))["status"]["state"] not in states:
        assert time.monotonic() < deadline, task["status"]
        time.sleep(0.05)
    return task


def sleeping_pid(client, node_url, task_id):
    """The pid the ``slow`` agent's status names (read from ``node_url``, any node)."""
    deadline = time.monotonic() + 20
    while "pid" not in (text := said(call(client, node_url, "GetTask", {"id": task_id})["status"])):
        assert time.monotonic() < deadline, text
        time.sleep(0.05)
    return int(text.split()[-1])


def in_order(texts):
    """The ``steps`` agent's statuses as seen: a tail of step 1..3, done, nothing twice."""
    full = ["step 1", "step 2", "step 3", "done"]
    seen = [t for t in texts if t]
    return seen == full[len(full) - len(seen):] and seen[-1:] == ["done"]


# --- The official SDK clients, through the balancer ---------------------------------------------


def run_sdk(python, script, cluster, **env):
    done = subprocess.run([python, str(ROOT / "tests" / "fixtures" / script), cluster.url, API_KEY],
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/bin:/bin", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_sdk_run(seen, completed, canceled):
    assert seen["backends"] == ["n0", "n1", "n2"]  # round robin: every node served the client
    assert seen["sent"]["state"] == completed
    assert {g["on"] for g in seen["got"]} == {"n0", "n1", "n2"}
    assert all(g["id_matches"] and g["state"] == completed for g in seen["got"]), seen["got"]
    slow = seen["slow"]
    assert slow["cancel_on"] != slow["started_on"] and slow["canceled_state"] == canceled
    assert gone(slow["pid"]), f"the agent's process {slow['pid']} outlived the cancel"
    assert seen["subscribe"]["on"] != seen["steps_sent_on"]
    assert in_order(seen["subscribe"]["texts"]), seen["subscribe"]
    assert seen["subscribe"]["states"][-1] == completed


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_a2a_sdk_through_the_balancer(cluster, binding):
    seen = run_sdk(str(peers.require(peers.a2a_sdk_python)), "a2a_sdk_cluster.py", cluster, A2A_BINDING=binding)
    check_sdk_run(seen, completed=3, canceled=5)  # TASK_STATE_COMPLETED, TASK_STATE_CANCELED
    assert seen["sent"]["artifact"] == "hello across nodes" and seen["same_context"] is True
    assert all(g["history"] == 2 for g in seen["got"])
    assert [item["count"] for item in seen["listed"]] == [2, 2, 2]  # every node lists the context's two tasks
    assert {item["on"] for item in seen["listed"]} == {"n0", "n1", "n2"}
    assert seen["slow"]["after_state"] == 5


def test_a2a_sdk_0_3_through_the_balancer(cluster):
    seen = run_sdk(str(peers.require(peers.a2a_sdk03_python)), "a2a_sdk03_cluster.py", cluster)
    check_sdk_run(seen, completed="completed", canceled="canceled")
    assert seen["sent"]["artifact"] == "hello 0.3 across nodes"


# --- The 0.1 methods and the seed's REST routes, plain HTTP, node by node ----------------------


async def test_0_1_methods_and_seed_rest_on_every_node(cluster):
    a, b, c = (n.url for n in cluster.nodes)
    async with httpx.AsyncClient(headers=cluster.headers, timeout=60) as client:

        async def call01(url, method, params, path="/a2a"):
            answer = (await client.post(url + path, json=rpc(method, params))).json()
            assert "result" in answer, (url, method, answer)
            return answer["result"]

        tag = f"{time.monotonic_ns()}"
        sent = await call01(a, "tasks/send", {"id": f"legacy-{tag}", "sessionId": f"s-{tag}",
                                              "message": message("hello 0.1", "0.1")})
        assert sent["status"]["state"] == "completed"
        for url in (b, c):
            got = await call01(url, "tasks/get", {"id": f"legacy-{tag}"})
            assert got["sessionId"] == f"s-{tag}" and got["artifacts"][0]["parts"][0]["text"] == "hello 0.1"
        refused = (await client.post(b + "/a2a", json=rpc("tasks/cancel", {"id": f"legacy-{tag}"}))).json()
        assert refused["error"]["code"] == -32002  # found on b, and already completed

        # the seed's REST routes
        rest = await client.post(a + "/a2a/tasks/send", json={"id": f"rest-{tag}", "message": message("r", "0.1")})
        assert rest.status_code == 200 and rest.json()["status"]["state"] == "completed"
        assert (await client.get(f"{b}/a2a/tasks/rest-{tag}")).json()["id"] == f"rest-{tag}"
        assert (await client.post(f"{c}/a2a/tasks/rest-{tag}/cancel")).status_code == 409  # found: completed

        # a streamed 0.1 task on a, followed on b with tasks/resubscribe; a slow one canceled on c
        streams: dict[str, list] = {}

        async def stream(url, method, params, name, path):
            async with client.stream("POST", url + path, json=rpc(method, params)) as response:
                streams[name] = sse((await response.aread()).decode())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream, a, "tasks/sendSubscribe",
                               {"id": f"steps-{tag}", "message": message("count", "0.1")}, "sent", "/a2a/steps")
            nursery.start_soon(stream, a, "tasks/sendSubscribe",
                               {"id": f"slow-{tag}", "message": message("zzz", "0.1")}, "slow", "/a2a/slow")
            with trio.fail_after(20):
                while True:  # the task exists everywhere as soon as a has it: follow it from b
                    answer = (await client.post(b + "/a2a/steps", json=rpc("tasks/get", {"id": f"steps-{tag}"})))
                    if "result" in answer.json():
                        break
                    await trio.sleep(0.05)
            nursery.start_soon(stream, b, "tasks/resubscribe", {"id": f"steps-{tag}"}, "followed", "/a2a/steps")
            with trio.fail_after(20):
                while "pid" not in said((await call01(c, "tasks/get", {"id": f"slow-{tag}"}, "/a2a/slow"))["status"]):
                    await trio.sleep(0.05)
            pid = int(said((await call01(c, "tasks/get", {"id": f"slow-{tag}"}, "/a2a/slow"))["status"]).split()[-1])
            canceled = await call01(c, "tasks/cancel", {"id": f"slow-{tag}"}, "/a2a/slow")
            assert canceled["status"]["state"] == "canceled"
    assert gone(pid)
    for name in ("sent", "followed"):
        statuses = [e["result"]["status"] for e in streams[name] if "status" in e["result"]]
        assert in_order([said(s) for s in statuses]), (name, statuses)
        assert streams[name][-1]["result"]["final"] is True
    assert streams["slow"][-1]["result"]["status"]["state"] == "canceled"  # a's own stream ends with the cancel


# --- Across nodes, addressed directly ----------------------------------------------------------


def test_every_node_gets_and_lists_every_task(cluster):
    a, b, c = (n.url for n in cluster.nodes)
    with httpx.Client(headers=cluster.headers, timeout=30) as client:
        task = call(client, a, "SendMessage", {"message": message("anywhere")})["task"]
        for url in (a, b, c):
            got = call(client, url, "GetTask", {"id": task["id"]})
            assert got["status"]["state"] == "TASK_STATE_COMPLETED" and got["artifacts"] == task["artifacts"]
            listed = call(client, url, "ListTasks", {"contextId": task["contextId"]})
            assert [t["id"] for t in listed["tasks"]] == [task["id"]]
        follow = call(client, b, "SendMessage", {"message": message("more", contextId=task["contextId"])})["task"]
        assert follow["contextId"] == task["contextId"]
        listed = call(client, c, "ListTasks", {"contextId": task["contextId"]})
        assert sorted(t["id"] for t in listed["tasks"]) == sorted([task["id"], follow["id"]])
        missing = client.post(c + "/a2a", json=rpc("GetTask", {"id": "no-such-task"}), headers=V10).json()
        assert missing["error"]["code"] == -32001


def test_a_cancel_on_another_node_kills_the_agent_process(cluster):
    a, b, c = (n.url for n in cluster.nodes)
    with httpx.Client(headers=cluster.headers, timeout=30) as client:
        task = call(client, a, "SendMessage", {"message": message("zzz"), "configuration": {"returnImmediately": True}},
                    path="/a2a/slow")["task"]
        pid = sleeping_pid(client, b, task["id"])
        assert _parent(pid) == cluster.nodes[0].pid  # a runs it
        canceled = call(client, c, "CancelTask", {"id": task["id"]})
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        assert gone(pid), "the sleeping process on a outlived a cancel received by c"
        for url in (a, b):
            assert call(client, url, "GetTask", {"id": task["id"]})["status"]["state"] == "TASK_STATE_CANCELED"
        again = client.post(b + "/a2a", json=rpc("CancelTask", {"id": task["id"]}), headers=V10).json()
        assert again["error"]["code"] == -32002  # canceled is final


def _parent(pid):
    """The parent of ``pid`` (``sh -c`` execs sleep in place: its parent is the node)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


async def test_a_subscriber_on_another_node_gets_every_event_in_order(cluster):
    a, b, _ = (n.url for n in cluster.nodes)
    async with httpx.AsyncClient(headers={**cluster.headers, **V10}, timeout=60) as client:
        sent = (await client.post(a + "/a2a/steps", json=rpc("SendMessage", {
            "message": message("count"), "configuration": {"returnImmediately": True}}))).json()["result"]["task"]
        async with client.stream("POST", b + "/a2a/steps", json=rpc("SubscribeToTask", {"id": sent["id"]})) as stream:
            with trio.fail_after(30):
                events = sse((await stream.aread()).decode())
    kinds = [next(iter(e["result"])) for e in events]
    assert kinds[0] == "task" and set(kinds[1:]) <= {"statusUpdate", "artifactUpdate"}, kinds
    statuses = [events[0]["result"]["task"]["status"]] + [e["result"]["statusUpdate"]["status"] for e in events[1:]
                                                          if "statusUpdate" in e["result"]]
    assert in_order([said(s) for s in statuses]), statuses
    assert statuses[-1]["state"] == "TASK_STATE_COMPLETED"
    assert [s["timestamp"] for s in statuses] == sorted(s["timestamp"] for s in statuses)


def _pending(client, url, task_id, timeout=20.0):
    """The approval request the ``writer`` task waits on, as node ``url`` lists it."""
    deadline = time.monotonic() + timeout
    while True:
        listed = client.get(url + "/api/approvals").json()["approvals"]
        mine = [p for p in listed if p.get("tool") == "file_write"]
        if mine:
            return mine[0]
        assert time.monotonic() < deadline, listed
        time.sleep(0.1)


def test_an_approval_decided_on_another_node_resumes_the_call(cluster):
    """The API: a asks, b lists, c decides."""
    a, b, c = (n.url for n in cluster.nodes)
    with httpx.Client(headers=cluster.headers, timeout=30) as client:
        task = call(client, a, "SendMessage", {"message": message(WRITE), "configuration": {"returnImmediately": True}},
                    path="/a2a/writer")["task"]
        pending = _pending(client, b, task["id"])
        decided = client.post(f"{c}/api/approvals/{pending['id']}", json={"decision": "approve", "scope": "once"})
        assert decided.status_code == 200, decided.text
        done = wait_state(client, b, task["id"], {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED"})
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert done["artifacts"][0]["parts"][0]["text"] == "wrote 5 bytes to note.txt"
        assert client.get(f"{a}/api/approvals/{pending['id']}").json()["state"] == "approved"


def test_the_callers_answer_on_another_node_resumes_the_call(cluster):
    """``[a2a] caller_may_approve``: the caller's own answer, sent to another node, resumes the call on a."""
    a, b, c = (n.url for n in cluster.nodes)
    with httpx.Client(headers=cluster.headers, timeout=30) as client:
        task = call(client, a, "SendMessage", {"message": message(WRITE), "configuration": {"returnImmediately": True}},
                    path="/a2a/writer")["task"]
        asking = wait_state(client, c, task["id"], {"TASK_STATE_INPUT_REQUIRED"})
        assert "May agent 'writer' call file_write" in said(asking["status"])
        answer = call(client, b, "SendMessage", {"message": {**message("approve"), "taskId": task["id"]}},
                      path="/a2a/writer")["task"]
        if answer["status"]["state"] != "TASK_STATE_COMPLETED":
            answer = wait_state(client, c, task["id"], {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED"})
        assert answer["status"]["state"] == "TASK_STATE_COMPLETED", answer["status"]


class _Receiver(BaseHTTPRequestHandler):
    """A webhook: counts each event it is sent (by task, kind, state and text)."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.received.append(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def _event_key(body):
    kind = next(iter(body))
    event = body[kind]
    if kind == "statusUpdate":
        return kind, event["status"]["state"], said(event["status"])
    if kind == "artifactUpdate":
        return kind, event["artifact"]["artifactId"], ""
    return kind, event.get("status", {}).get("state", ""), said(event.get("status", {}))


def test_push_is_delivered_once_per_event_not_once_per_node(cluster):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.received, server.lock = [], threading.Lock()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{server.server_address[1]}/hook"
    a, b, _ = (n.url for n in cluster.nodes)
    try:
        with httpx.Client(headers=cluster.headers, timeout=30) as client:
            sent = call(client, a, "SendMessage", {
                "message": message("count"),
                "configuration": {"returnImmediately": True,
                                  "taskPushNotificationConfig": {"url": hook, "token": "push-token-123"}}},
                path="/a2a/steps")["task"]
            wait_state(client, b, sent["id"], {"TASK_STATE_COMPLETED"})
            time.sleep(1.5)  # room for a duplicate from another node to arrive
        keys = [_event_key(body) for body in server.received]
        assert len(keys) == len(set(keys)), f"delivered more than once: {keys}"
        statuses = [k[2] for k in keys if k[0] == "statusUpdate"]
        assert statuses[-3:] == ["step 2", "step 3", "done"] and in_order(statuses), keys
    finally:
        server.shutdown()
