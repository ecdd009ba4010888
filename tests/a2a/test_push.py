"""Push notifications: a real webhook (tern's own HTTP server on loopback) receives every
event of a task in order, with the token (1.0: each event; 0.3: the Task after it); a
failing webhook is retried; config CRUD in each dialect; the SSRF guard on webhook URLs.
The 0.3 TCK's push-delivery tests (tests/a2a/test_tck.py) check the 0.3 payload too."""

from __future__ import annotations

import json

import httpx
import trio

from runtime.config import ServerConfig
from runtime.httpd.access import Access
from runtime.httpd.messages import Request, Response
from runtime.httpd.router import Router
from runtime.httpd.server import HttpServer
from tests.a2a.test_server import V10, message, rpc, start


async def webhook(nursery, fail_first: int = 0):
    received: list[tuple[dict, dict]] = []
    failures = [fail_first]

    async def hook(request: Request) -> Response:
        if failures[0] > 0:
            failures[0] -= 1
            return Response(503, b"{}")
        received.append(({k.decode(): v.decode() for k, v in request.headers}, json.loads(request.body)))
        return Response(200, b"{}")

    router = Router()
    router.add("POST", "/hook", hook, auth=False, guard_origin=False)
    server = HttpServer(ServerConfig(rate_limit_per_sec=0), router, Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    return f"http://127.0.0.1:{bound[0][1]}/hook", received


async def wait_for(received, count):
    with trio.fail_after(10):
        while len(received) < count:
            await trio.sleep(0.02)


async def test_events_reach_the_webhook_in_order_with_the_token(nursery, tmp_path):
    _, url = await start(nursery, tmp_path)
    hook, received = await webhook(nursery)
    async with httpx.AsyncClient(headers=V10) as client:
        sent = (
            await client.post(
                url + "/a2a",
                json=rpc(
                    "SendMessage",
                    {
                        "message": message("push me"),
                        "configuration": {"taskPushNotificationConfig": {"url": hook, "token": "tok-123456"}},
                    },
                ),
            )
        ).json()["result"]["task"]
    await wait_for(received, 3)
    bodies = [body for _, body in received]
    assert [next(iter(b)) for b in bodies] == ["statusUpdate", "artifactUpdate", "statusUpdate"]
    assert bodies[0]["statusUpdate"]["taskId"] == sent["id"]
    assert bodies[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all(headers["x-a2a-notification-token"] == "tok-123456" for headers, _ in received)


async def test_a_failing_webhook_is_retried(nursery, tmp_path):
    kernel, url = await start(nursery, tmp_path)
    hook, received = await webhook(nursery, fail_first=2)
    async with httpx.AsyncClient() as client:
        await client.post(
            url + "/a2a",
            json=rpc(
                "message/send",
                {
                    "message": message("retry", "0.3"),
                    "configuration": {
                        "pushNotificationConfig": {
                            "url": hook,
                            "authentication": {"schemes": ["Bearer"], "credentials": "c-98765"},
                        }
                    },
                },
            ),
        )
    await wait_for(received, 3)
    headers, first = received[0]
    assert headers["authorization"] == "Bearer c-98765"
    with trio.fail_after(10):  # counted once the notifier has read the webhook's answer, a moment after it got the body
        while kernel.a2a.push.delivered < 3:
            await trio.sleep(0.02)
    assert kernel.a2a.push.delivered == 3 and kernel.a2a.push.failed == 0
    # 0.3 posts the Task as it is after each event (0.3 spec, a2a-sdk 0.3), not the event (issue #32)
    bodies = [body for _, body in received]
    assert all(body["kind"] == "task" and body["id"] == first["id"] for body in bodies), bodies
    assert [body["status"]["state"] for body in bodies] == ["working", "working", "completed"]
    assert "artifacts" not in bodies[0] and bodies[-1]["artifacts"][0]["parts"][0]["text"] == "retry"


async def test_config_crud_in_each_dialect(nursery, tmp_path):
    _, url = await start(nursery, tmp_path)
    hook, _ = await webhook(nursery)
    async with httpx.AsyncClient(headers=V10) as client:

        async def call(method, params, agent="sleepy"):
            return (await client.post(f"{url}/a2a/{agent}", json=rpc(method, params))).json()

        task = await call("SendMessage", {"message": message("zz"), "configuration": {"returnImmediately": True}})
        task_id = task["result"]["task"]["id"]
        created = await call("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": hook, "token": "t-1234"})
        config_id = created["result"]["id"]
        assert created["result"] == {"id": config_id, "taskId": task_id, "url": hook, "token": "t-1234"}
        assert (await call("GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id}))["result"][
            "url"
        ] == hook
        listed = (await call("ListTaskPushNotificationConfigs", {"taskId": task_id}))["result"]
        assert [c["id"] for c in listed["configs"]] == [config_id]
        v03 = (await call("tasks/pushNotificationConfig/list", {"id": task_id}))["result"]
        assert v03[0]["pushNotificationConfig"]["url"] == hook
        rest = await client.get(f"{url}/a2a/sleepy/rest/tasks/{task_id}/pushNotificationConfigs/{config_id}")
        assert rest.json()["id"] == config_id
        assert (await call("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config_id}))["result"] == {}
        gone = await call("GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})
        assert gone["error"]["code"] == -32001
        missing_task = await call("CreateTaskPushNotificationConfig", {"taskId": "nope", "url": hook})
        assert missing_task["error"]["code"] == -32001
        for bad in ("http://169.254.169.254/latest", "http://[fe80::1]/x", "ftp://x.example/", "not a url"):
            refused = await call("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": bad})
            assert refused["error"]["code"] == -32602, bad
        await call("CancelTask", {"id": task_id})


async def test_0_3_details(nursery, tmp_path):
    """What the 0.3 TCK's capabilities category checks: the "default" config id names the
    first webhook, and resubscribing to an unknown task answers on a stream."""
    _, url = await start(nursery, tmp_path)
    hook, _ = await webhook(nursery)
    async with httpx.AsyncClient() as client:
        task = (
            await client.post(
                url + "/a2a/sleepy",
                json=rpc("message/send", {"message": message("zz", "0.3"), "configuration": {"blocking": False}}),
            )
        ).json()["result"]
        await client.post(
            url + "/a2a/sleepy",
            json=rpc(
                "tasks/pushNotificationConfig/set", {"taskId": task["id"], "pushNotificationConfig": {"url": hook}}
            ),
        )
        got = (
            await client.post(
                url + "/a2a/sleepy",
                json=rpc("tasks/pushNotificationConfig/get", {"id": task["id"], "pushNotificationConfigId": "default"}),
            )
        ).json()["result"]
        assert got["pushNotificationConfig"]["url"] == hook
        unknown = await client.post(url + "/a2a", json=rpc("tasks/resubscribe", {"id": "nope"}))
        assert unknown.headers["content-type"].startswith("text/event-stream")
        assert json.loads(unknown.text.split("data:", 1)[1])["error"]["code"] == -32001
        await client.post(url + "/a2a/sleepy", json=rpc("tasks/cancel", {"id": task["id"]}))
