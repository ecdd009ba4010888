"""The routes the dashboard added, on a real ``tern serve`` (``host.daemon.serve`` in
this process, over real HTTP): counters in /api/status, A2A tasks (list, filter, get,
cancel), the masked config and its reload from the file, and an MCP server's login
refused where none applies. Bad input: unknown and oversized ids, a bad state filter,
a huge or malformed limit, a broken config file on reload."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from runtime.config import load_config
from runtime.host.daemon import serve
from runtime.host.dashboard_api import MAX_TASKS
from tests.a2a.test_server import V10, message, rpc
from tests.mcp.conftest import FAKE

AGENTS = ('[[agents]]\nname = "echo"\nkind = "echo"\n\n'
          '[[agents]]\nname = "sleepy"\nkind = "command"\ncommand = ["sh", "-c", "sleep 30"]\n\n')


def write_config(tmp_path: Path, *, a2a: bool = True, key_env: str = "", extra: str = "", agents: str = "") -> Path:
    path = tmp_path / "config.toml"
    server = '[server]\nlisten = "127.0.0.1:0"\n' + (f'api_key_env = "{key_env}"\n' if key_env else "")
    path.write_text(f'{server}\n[state]\ndir = "{tmp_path / "state"}"\n\n[a2a]\nenabled = {str(a2a).lower()}\n'
                    f'default_agent = "echo"\n\n{AGENTS}{agents}'
                    f'[[mcp_servers]]\nname = "fake"\n[mcp_servers.transport]\ntype = "stdio"\n'
                    f'command = "{sys.executable}"\nargs = ["{FAKE}"]\n\n'
                    '[[mcp_servers]]\nname = "remote"\nenabled = false\n[mcp_servers.transport]\ntype = "http"\n'
                    'url = "http://127.0.0.1:9/mcp"\n[mcp_servers.transport.oauth]\ngrant = "client_credentials"\n'
                    'client_id = "tern"\n\n'
                    '[[mcp_servers]]\nname = "down"\nenabled = false\n[mcp_servers.transport]\ntype = "http"\n'
                    'url = "http://127.0.0.1:9/mcp"\n[mcp_servers.transport.oauth]\n' + extra)
    return path


async def daemon(nursery, path: Path) -> str:
    return await nursery.start(lambda task_status: serve(load_config(str(path)).config, config_path=path,
                                                         task_status=task_status))


async def test_status_has_monotonic_counters(nursery, tmp_path):
    from tests.scripted_llm import ScriptedLLM, whole

    model = ScriptedLLM(whole(calls=[{"id": "c1", "type": "function", "function": {"name": "time_now",
                                                                                  "arguments": "{}"}}]),
                        whole("It is now."), {"status": 500})
    await nursery.start(model.serve)
    bot = (f'[[agents]]\nname = "bot"\nkind = "llm"\ntools = ["time_now", "file_read"]\n'
           f'[agents.model]\nbase_url = "{model.url}"\nmodel = "stub-model"\n\n')
    url = await daemon(nursery, write_config(tmp_path, agents=bot))
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        first = (await client.get("/api/status")).json()["counters"]
        assert first == {"http_requests": 0, "http_errors": 0, "tool_calls": 0, "tool_errors": 0, "model_calls": 0}
        await client.get("/api/nothing-here")  # a 404: a request, not an error
        called = await client.post("/api/tools/file_read/call", json={"arguments": {"path": "/nonexistent/x"}})
        assert "event: result" in called.text
        reply = await client.post("/api/agents/bot/message", json={"message": "time?"})
        assert reply.json()["text"] == "It is now."
        failed = await client.post("/api/agents/bot/message", json={"message": "again"})  # the model answers 500
        assert failed.status_code == 502
        second = (await client.get("/api/status")).json()["counters"]
        assert second == {"http_requests": 5, "http_errors": 1, "tool_calls": 2, "tool_errors": 1, "model_calls": 3}


async def test_tasks_list_filter_get_cancel(nursery, tmp_path):
    url = await daemon(nursery, write_config(tmp_path))
    async with httpx.AsyncClient(base_url=url) as client:
        done = (await client.post("/a2a/echo", headers=V10, json=rpc("SendMessage", {
            "message": message("hello")}))).json()["result"]["task"]
        slow = (await client.post("/a2a/sleepy", headers=V10, json=rpc("SendMessage", {
            "message": message("zzz"), "configuration": {"returnImmediately": True}}))).json()["result"]["task"]
        listed = (await client.get("/api/tasks")).json()
        assert listed["total"] == 2 and [t["id"] for t in listed["tasks"]] == [slow["id"], done["id"]]  # newest first
        assert "history" in listed["tasks"][0] and isinstance(listed["tasks"][0]["history"], int)
        completed = (await client.get("/api/tasks", params={"state": "completed"})).json()["tasks"]
        assert [t["id"] for t in completed] == [done["id"]]
        by_context = (await client.get("/api/tasks", params={"context_id": done["contextId"]})).json()["tasks"]
        assert [t["id"] for t in by_context] == [done["id"]]
        assert (await client.get("/api/tasks", params={"limit": "1"})).json()["tasks"][0]["id"] == slow["id"]
        assert len((await client.get("/api/tasks", params={"limit": "99999999"})).json()["tasks"]) == 2
        one = (await client.get(f"/api/tasks/{done['id']}")).json()
        assert one["state"] == "completed" and one["history"][0]["parts"][0]["text"] == "hello"
        assert one["artifacts"]
        canceled = await client.post(f"/api/tasks/{slow['id']}/cancel")
        assert canceled.status_code == 200 and canceled.json()["state"] == "canceled"
        again = await client.post(f"/api/tasks/{slow['id']}/cancel")
        assert again.status_code == 409 and "already canceled" in again.json()["error"]["message"]
        for bad, status, words in ((("GET", "/api/tasks?state=bogus")), 400, "state must be one of"), \
                                   ((("GET", "/api/tasks?limit=ten")), 400, "whole number"), \
                                   ((("GET", "/api/tasks?context_id=" + "c" * 5000)), 400, "ids are at most"), \
                                   ((("GET", "/api/tasks/nope")), 404, "not found"), \
                                   ((("GET", "/api/tasks/" + "x" * 5000)), 400, "ids are at most"), \
                                   ((("POST", "/api/tasks/nope/cancel")), 404, "not found"):
            answer = await client.request(*bad)
            assert answer.status_code == status and words in answer.json()["error"]["message"], (bad, answer.text)
        assert MAX_TASKS == 500


async def test_tasks_say_when_a2a_is_off(nursery, tmp_path):
    url = await daemon(nursery, write_config(tmp_path, a2a=False))
    async with httpx.AsyncClient(base_url=url) as client:
        for answer in (await client.get("/api/tasks"), await client.get("/api/tasks/x"),
                       await client.post("/api/tasks/x/cancel")):
            assert answer.status_code == 404 and "[a2a] enabled = true" in answer.json()["error"]["message"]
        assert (await client.get("/api/status")).json()["tasks"] is None  # the overview says A2A is off


async def test_config_is_masked_and_reloads_from_its_file(nursery, tmp_path, monkeypatch):
    monkeypatch.setenv("TERN_TEST_KEY", "k-" + "z" * 30)
    path = write_config(tmp_path, key_env="TERN_TEST_KEY",
                        extra='\n[mcp_servers.transport.headers]\nX-Secret = "literal-secret-value"\n')
    url = await daemon(nursery, path)
    headers = {"Authorization": "Bearer k-" + "z" * 30}
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        assert (await client.get("/api/config", headers={"Authorization": "Bearer wrong"})).status_code == 401
        shown = await client.get("/api/config")
        assert shown.status_code == 200 and shown.json()["path"] == str(path)
        assert "literal-secret-value" not in shown.text and "z" * 30 not in shown.text
        assert [a["name"] for a in shown.json()["config"]["agents"]] == ["echo", "sleepy"]
        text = path.read_text()
        path.write_text(text.replace('name = "sleepy"', 'name = "sleeper"'))
        reloaded = await client.post("/api/config/reload")
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["changes"] and reloaded.json()["not_applied"] == []
        assert [a["name"] for a in (await client.get("/api/agents")).json()["agents"]] == ["echo", "sleeper"]
        path.write_text(text.replace("[a2a]", "[a2a\n"))
        broken = await client.post("/api/config/reload")
        assert broken.status_code == 422 and "config.toml" in broken.json()["error"]
        assert "\n" not in broken.json()["error"]
        assert [a["name"] for a in (await client.get("/api/agents")).json()["agents"]] == ["echo", "sleeper"]


async def test_login_is_refused_where_none_applies(nursery, tmp_path):
    url = await daemon(nursery, write_config(tmp_path))
    async with httpx.AsyncClient(base_url=url) as client:
        stdio = await client.post("/api/mcp/servers/fake/login")
        assert stdio.status_code == 400 and "needs no login" in stdio.json()["error"]["message"]
        machine = await client.post("/api/mcp/servers/remote/login")
        assert machine.status_code == 400 and "client_credentials grant" in machine.json()["error"]["message"]
        ghost = await client.post("/api/mcp/servers/ghost/login")
        assert ghost.status_code == 404 and "fake, remote, down" in ghost.json()["error"]["message"]
        unreachable = await client.post("/api/mcp/servers/down/login")  # fails before there is a URL
        assert unreachable.status_code == 502 and "cannot reach" in unreachable.json()["error"]["message"]
        again = await client.post("/api/mcp/servers/down/login")  # and left no login behind
        assert again.status_code == 502
        long = await client.post("/api/mcp/servers/" + "n" * 5000 + "/login")
        assert long.status_code == 400
        assert (await client.get("/api/mcp/servers/fake/login")).status_code == 405


async def test_login_when_the_redirect_port_is_taken(nursery, tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        url = await daemon(nursery, write_config(tmp_path, extra=f"redirect_port = {port}\n"))  # down's [oauth]
        async with httpx.AsyncClient(base_url=url) as client:
            busy = await client.post("/api/mcp/servers/down/login")
            assert busy.status_code == 409 and f"on port {port}" in busy.json()["error"]["message"]
