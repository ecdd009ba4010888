"""Task ownership across every binding: two keys each see only their own tasks, another's
id is answered exactly as an id that never existed, and the admin key sees all."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests import peers
from tests.a2a.test_sdk_peers import serve
from tests.http.keyed import client, start
from tests.test_cli import ROOT

V10 = {"A2A-Version": "1.0"}
REST = "/a2a/echo/rest"


def rpc(method, params):
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def message(text, dialect="1.0", **extra):
    if dialect == "1.0":
        return {"messageId": "m-" + text, "role": "ROLE_USER", "parts": [{"text": text}], **extra}
    if dialect == "0.3":
        return {"kind": "message", "messageId": "m-" + text, "role": "user", "parts": [{"kind": "text", "text": text}],
                **extra}
    return {"role": "user", "parts": [{"type": "text", "text": text}], **extra}


@pytest.fixture
async def url(nursery, tmp_path):
    return (await start(nursery, tmp_path))[1]


def _same_miss(theirs: dict, never: dict, task_id: str, unknown: str) -> None:
    """The error for another's task is the error for an id that never was (the id aside)."""
    assert "error" in theirs and "error" in never, (theirs, never)
    assert theirs["error"]["code"] == never["error"]["code"] == -32001
    assert theirs["error"]["message"].replace(task_id, "ID") == never["error"]["message"].replace(unknown, "ID")


@pytest.mark.parametrize("dialect,send,get,cancel", [
    ("1.0", "SendMessage", "GetTask", "CancelTask"),
    ("0.3", "message/send", "tasks/get", "tasks/cancel"),
    ("0.1", "tasks/send", "tasks/get", "tasks/cancel"),
])
async def test_jsonrpc_tasks_are_their_owners_in_each_dialect(url, dialect, send, get, cancel):
    params = {"message": message("mine", dialect)}
    if dialect == "0.1":
        params["id"] = "alice-task-1"
    async with client(url, "alice") as alice, client(url, "bob") as bob, client(url, "admin") as admin:
        sent = (await alice.post("/a2a/echo", json=rpc(send, params), headers=V10)).json()["result"]
        task_id = (sent["task"] if dialect == "1.0" else sent)["id"]
        unknown = "never-was-" + task_id[:8]
        for method in (get, cancel):
            theirs = (await bob.post("/a2a", json=rpc(method, {"id": task_id}), headers=V10)).json()
            never = (await bob.post("/a2a", json=rpc(method, {"id": unknown}), headers=V10)).json()
            _same_miss(theirs, never, task_id, unknown)
        push = {"url": "https://hooks.example/x"}
        set_push = ("CreateTaskPushNotificationConfig", {"taskId": task_id, **push}) if dialect == "1.0" else \
            ("tasks/pushNotificationConfig/set", {"taskId": task_id, "pushNotificationConfig": push})
        _same_miss((await bob.post("/a2a", json=rpc(*set_push), headers=V10)).json(),
                   (await bob.post("/a2a", json=rpc(set_push[0], {**set_push[1], "taskId": unknown}),
                                   headers=V10)).json(), task_id, unknown)
        subscribe = "SubscribeToTask" if dialect == "1.0" else "tasks/resubscribe"
        refused = await bob.post("/a2a", json=rpc(subscribe, {"id": task_id}), headers=V10)
        assert task_id in refused.text and "not found" in refused.text
        if dialect != "0.1":  # a message on another's task: not found either
            follow = {"message": message("more", dialect, taskId=task_id)}
            answer = (await bob.post("/a2a/echo", json=rpc(send, follow), headers=V10)).json()
            assert answer["error"]["code"] == -32001
        else:  # 0.1 names its task: bob cannot take or learn of alice's id
            answer = (await bob.post("/a2a/echo", json=rpc(send, params), headers=V10)).json()
            assert answer["error"]["code"] == -32001 and "exists" not in answer["error"]["message"]
        mine = (await alice.post("/a2a", json=rpc(get, {"id": task_id}), headers=V10)).json()
        assert mine["result"]["id"] == task_id
        seen = (await admin.post("/a2a", json=rpc(get, {"id": task_id}), headers=V10)).json()
        assert seen["result"]["id"] == task_id


async def test_list_tasks_lists_only_the_callers_own(url):
    async with client(url, "alice") as alice, client(url, "bob") as bob, client(url, "admin") as admin:
        ids = {}
        for name, who in (("alice", alice), ("bob", bob)):
            sent = await who.post("/a2a/echo", json=rpc("SendMessage", {"message": message(name)}), headers=V10)
            ids[name] = sent.json()["result"]["task"]["id"]

        async def listed(who, how):
            if how == "jsonrpc":
                return {t["id"] for t in (await who.post("/a2a", json=rpc("ListTasks", {}),
                                                          headers=V10)).json()["result"]["tasks"]}
            if how == "rest":
                return {t["id"] for t in (await who.get(f"{REST}/tasks", headers=V10)).json()["tasks"]}
            return {t["id"] for t in (await who.get("/api/tasks")).json()["tasks"]}

        for how in ("jsonrpc", "rest", "api"):
            assert await listed(alice, how) == {ids["alice"]}, how
            assert await listed(bob, how) == {ids["bob"]}, how
            assert await listed(admin, how) == set(ids.values()), how


async def test_http_json_rest_and_the_api_hide_anothers_task(url):
    async with client(url, "alice") as alice, client(url, "bob") as bob, client(url, "admin") as admin:
        sent = await alice.post(f"{REST}/message:send", json={"message": message("rest")}, headers=V10)
        task_id = sent.json()["task"]["id"]
        for path in (f"{REST}/tasks/{task_id}", f"/api/tasks/{task_id}"):
            theirs, never = await bob.get(path, headers=V10), await bob.get(path.replace(task_id, "nope"), headers=V10)
            assert theirs.status_code == never.status_code == 404, (path, theirs.text)
            assert theirs.json()["error"]["message"].replace(task_id, "ID") == \
                never.json()["error"]["message"].replace("nope", "ID")
            assert (await alice.get(path, headers=V10)).status_code == 200
            assert (await admin.get(path, headers=V10)).status_code == 200
        cancels = (f"{REST}/tasks/{task_id}:cancel", f"/api/tasks/{task_id}/cancel")
        for path in cancels:
            assert (await bob.post(path, headers=V10)).status_code == 404, path
        configs = f"{REST}/tasks/{task_id}/pushNotificationConfigs"
        assert (await bob.get(configs, headers=V10)).status_code == 404
        assert (await bob.post(configs, json={"url": "https://hooks.example/x"}, headers=V10)).status_code == 404
        seed = await alice.post("/a2a/tasks/send", json={"id": "seed-1", "message": message("seed", "0.1")})
        assert seed.status_code == 200
        assert (await bob.get("/a2a/tasks/seed-1")).status_code == 404
        assert (await bob.post("/a2a/tasks/seed-1/cancel")).status_code == 404
        assert (await alice.get("/a2a/tasks/seed-1")).json()["id"] == "seed-1"


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_the_a2a_sdk_client_sees_only_its_own_tasks(tmp_path, binding):
    """The official a2a-sdk 1.x client, as two keys of one `tern serve`."""
    python = str(peers.require(peers.a2a_sdk_python))
    config_keys = ('api_key = "admin-sdk-key-0123"\n[[server.keys]]\nname = "alice"\nkey = "alice-sdk-key-01234"\n'
                   '[[server.keys]]\nname = "bob"\nkey = "bob-sdk-key-0123456"\n')
    process, url = serve(tmp_path, extra=config_keys)
    try:
        done = subprocess.run([python, "tests/fixtures/a2a_sdk_owner_client.py", url, "alice-sdk-key-01234",
                               "bob-sdk-key-0123456", "admin-sdk-key-0123"], capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL,
                              env={"A2A_BINDING": binding, "PATH": "/usr/bin:/bin"},
                              cwd=str(ROOT))
    finally:
        process.terminate()
        process.wait(10)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["a_got"] is True
    assert seen["b_get"] == seen["b_get_unknown"] == seen["b_cancel"] != "no error"
    assert seen["b_listed"] == [] and seen["a_listed"] == [seen["task"]] and seen["task"] in seen["admin_listed"]


def test_a_stored_task_keeps_its_owner_and_an_old_one_is_the_admins():
    import msgspec

    from runtime.a2a.model import Task

    mine = msgspec.json.decode(msgspec.json.encode(Task(id="t1", context_id="c1", agent="echo", owner="alice")),
                               type=Task)
    assert mine.owner == "alice"
    old = msgspec.json.decode(b'{"id": "t0", "context_id": "c0", "agent": "echo", "state": "completed"}', type=Task)
    assert old.owner == "admin"
