"""Where a spent budget shows, over real HTTP against the daemon's router on the in-process
server: the REST API and every A2A binding answer 429 with Retry-After (and A2A creates
no task), the MCP server's agent tool answers a tool error, ``/api/status`` shows use
and refusals; any ``BudgetExceeded`` a route raises gets its Retry-After.

Time is trio's ``mock_clock`` (virtual, moved only by ``jump``): a minute passes in no
real time and loopback traffic is never raced by a timer. Each request opens its own
connection, so a keep-alive the server closed during a jump is never reused."""

from __future__ import annotations

import httpx

from runtime.config import A2aConfig, AgentConfig, Config, StateConfig
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from tests.a2a.test_server import V10, message, rpc, sse
from tests.http.serving import start_server
from tests.mcp.server_harness import META
from tests.mcp.test_server_http import call, modern_headers

SPENT = "agent 'limited' has had its {n} in the last minute (requests_per_minute); try again in {secs} s"


async def start(nursery, tmp_path, *, per_minute: int) -> tuple[Node, str]:
    agents = [AgentConfig(name="limited", kind="echo", requests_per_minute=per_minute),
              AgentConfig(name="free", kind="echo")]
    config = Config(agents=agents, state=StateConfig(dir=str(tmp_path)),
                    a2a=A2aConfig(enabled=True, default_agent="limited"))
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    node.http_bound = ("127.0.0.1", bound[0][1])
    return node, f"http://127.0.0.1:{bound[0][1]}"


async def post(url: str, body: dict, headers: dict | None = None) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(url, json=body, headers=headers or {})


async def get(url: str) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.get(url)


async def test_any_route_raising_budget_exceeded_gets_429_and_retry_after(nursery):
    served = await start_server(nursery)
    response = await get(served.url + "/refuse/budget")
    assert response.status_code == 429 and response.headers["retry-after"] == "3"  # 2.2 s, rounded up
    assert response.json() == {"error": {"status": 429, "message": "agent 'busy' has had its 3 messages in the "
                                                                   "last minute; try again in 3 s"}}
    assert response.headers.get("connection") != "close"


async def test_the_api_answers_429_with_retry_after_until_the_minute_has_passed(nursery, tmp_path, mock_clock):
    node, url = await start(nursery, tmp_path, per_minute=2)
    send = url + "/api/agents/limited/message"
    for text in ("one", "two"):
        assert (await post(send, {"message": text})).json()["text"] == text
    refused = await post(send, {"message": "three"})
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "61"  # the first message's half-second slot ends at 60.5
    assert refused.json() == {"error": {"status": 429, "message": SPENT.format(n="2 messages", secs=61)}}
    assert (await post(url + "/api/agents/free/message", {"message": "x"})).status_code == 200  # its own budget
    mock_clock.jump(60.4)
    almost = await post(send, {"message": "three"})
    assert almost.status_code == 429 and almost.headers["retry-after"] == "1"  # 0.1 s, at least 1
    mock_clock.jump(0.1)
    assert (await post(send, {"message": "three"})).json()["text"] == "three"
    status = (await get(url + "/api/status")).json()
    assert status["budgets"] == {"limited": {"requests_per_minute": {"limit": 2, "used": 1, "window_secs": 60,
                                                                     "exceeded": 2}}}


def attempts() -> list[tuple[str, dict, dict]]:
    """A message for the default agent through every binding and dialect: (path, body, headers)."""
    return [
        ("/a2a/limited", rpc("message/send", {"message": message("a", "0.3")}), {}),
        ("/a2a", rpc("message/send", {"message": message("b", "0.3")}), {}),
        ("/a2a/limited/", rpc("SendMessage", {"message": message("c")}), V10),
        ("/a2a/limited", rpc("message/stream", {"message": message("d", "0.3")}), {}),
        ("/a2a/limited", rpc("SendStreamingMessage", {"message": message("e")}), V10),
        ("/a2a/limited", rpc("tasks/send", {"id": "named-by-client-1", "message": message("f", "0.1")}), {}),
        ("/a2a/limited", rpc("tasks/sendSubscribe", {"id": "named-by-client-2", "message": message("g", "0.1")}), {}),
        ("/a2a/limited/rest/message:send", {"message": message("h")}, V10),
        ("/a2a/limited/rest/message:stream", {"message": message("i")}, V10),
        ("/a2a/tasks/send", {"id": "named-by-client-3", "message": message("j", "0.1")}, {}),
    ]


async def test_every_a2a_binding_answers_429_and_creates_no_task(nursery, tmp_path, mock_clock):
    node, url = await start(nursery, tmp_path, per_minute=1)
    engine = node.a2a.engine
    first = await post(url + "/a2a/limited", rpc("message/send", {"message": message("first", "0.3")}))
    task_id = first.json()["result"]["id"]
    assert sum(engine.counts().values()) == 1
    for path, body, headers in attempts():
        refused = await post(url + path, body, headers)
        assert refused.status_code == 429, (path, refused.text)
        assert refused.headers["retry-after"] == "61", path
        assert refused.json()["error"]["message"] == SPENT.format(n="1 message", secs=61), path
    # the next turn of an existing task is agent work too
    follow = await post(url + "/a2a/limited", rpc("message/send", {"message": message("k", "0.3", taskId=task_id)}))
    assert follow.status_code == 429
    assert [t.id for t in (await engine.list())[0]] == [task_id]  # nothing was created, nothing started
    for named in ("named-by-client-1", "named-by-client-2"):
        missing = await post(url + "/a2a/limited", rpc("tasks/get", {"id": named}))
        assert missing.json()["error"]["code"] == -32001  # TaskNotFound
    listed = await get(url + "/api/status")
    assert listed.json()["tasks"] == engine.counts()
    assert listed.json()["budgets"]["limited"]["requests_per_minute"]["exceeded"] == len(attempts()) + 1
    mock_clock.jump(60.5)
    streamed = await post(url + "/a2a/limited", rpc("message/stream", {"message": message("later", "0.3")}))
    assert streamed.status_code == 200 and sse(streamed.text)[-1]["result"]["status"]["state"] == "completed"
    assert len((await engine.list())[0]) == 2


async def test_a_budget_spent_between_admission_and_the_agent_turn_rejects_the_task(nursery, tmp_path, mock_clock,
                                                                                  monkeypatch):
    from runtime.kernel.agents import Agents

    admit = Agents.admit

    def admit_then_lose_the_race(self, name: str, who=None) -> None:
        admit(self, name, who)
        self.budgets.take(name)  # another caller's message is taken before this task's agent turn

    monkeypatch.setattr(Agents, "admit", admit_then_lose_the_race)
    node, url = await start(nursery, tmp_path, per_minute=1)
    sent = await post(url + "/a2a/limited", rpc("message/send", {"message": message("late", "0.3")}))
    task = sent.json()["result"]
    assert task["status"]["state"] == "rejected"
    assert task["status"]["message"]["parts"][0]["text"] == SPENT.format(n="1 message", secs=61)


async def test_the_mcp_agent_tool_answers_a_spent_budget_as_a_tool_error(nursery, tmp_path, mock_clock):
    node, url = await start(nursery, tmp_path, per_minute=1)
    headers = modern_headers("tools/call", "tern_agent_limited", accept="application/json")
    results = [(await post(url + "/mcp", call(n, "tern_agent_limited", {"message": "hi"}, META), headers)).json()
               for n in (1, 2)]
    assert results[0]["result"]["content"][0]["text"] == "hi" and not results[0]["result"].get("isError")
    refused = results[1]["result"]
    assert refused["isError"] is True
    assert refused["content"] == [{"type": "text", "text": SPENT.format(n="1 message", secs=61)}]
    mock_clock.jump(60.5)
    again = await post(url + "/mcp", call(3, "tern_agent_limited", {"message": "again"}, META), headers)
    assert again.json()["result"]["content"][0]["text"] == "again"
