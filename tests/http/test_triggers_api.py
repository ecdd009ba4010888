"""The triggers API over real HTTP against a real node (kernel + trigger runner): the list,
a run fired and read back, the overlap policy's 409, pausing's 503 and resume, and the
refusals of unknown names, hostile ids and bad limits."""

from __future__ import annotations

import httpx
import pytest
import trio

from runtime.config import AgentConfig, Config, StateConfig, TriggerConfig
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from runtime.ports import Tool, ToolResult

KEY = "api-key-for-trigger-tests"
AUTH = {"Authorization": f"Bearer {KEY}"}
GATE = Tool("gate", "waits until the test opens it, then fails when asked",
            {"type": "object", "properties": {"fail": {"type": "boolean"}}})


async def start(nursery, tmp_path) -> tuple[Node, trio.Event, str]:
    triggers = [TriggerConfig(name="say", agent="echo", kind="webhook", message="hello from {{ trigger }}"),
                TriggerConfig(name="slow", agent="gated", kind="webhook", message='{"fail": true}', max_failures=2),
                TriggerConfig(name="daily", agent="echo", kind="schedule", cron="@daily", timezone="Europe/Berlin",
                              message="good morning")]
    config = Config(agents=[AgentConfig(name="echo", kind="echo"), AgentConfig(name="gated", kind="tool", tool="gate")],
                    state=StateConfig(dir=str(tmp_path)), triggers=triggers)
    node = Node(config)
    opened = trio.Event()

    async def gate(arguments: dict, context) -> ToolResult:
        await opened.wait()
        return ToolResult("refused", is_error=True) if arguments.get("fail") else ToolResult("through")

    node.kernel.registry.register(GATE, gate)
    await nursery.start(node.run)
    http = HttpServer(config.server, build_router(node), Access(KEY))
    bound = await nursery.start(http.serve, "127.0.0.1", 0)
    return node, opened, f"http://127.0.0.1:{bound[0][1]}"


async def ended(client: httpx.AsyncClient, name: str, run_id: str) -> dict:
    with trio.fail_after(20):
        while (run := (await client.get(f"/api/triggers/{name}/runs/{run_id}")).json())["outcome"] in (
                "queued", "running"):
            await trio.sleep(0.02)
    return run


async def test_list_fire_and_read_the_runs(nursery, tmp_path):
    node, _, url = await start(nursery, tmp_path)
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as client:
        assert (await client.get("/api/triggers", headers={"Authorization": "Bearer wrong"})).status_code == 401
        listed = {t["name"]: t for t in (await client.get("/api/triggers")).json()["triggers"]}
        assert listed["say"]["kind"] == "webhook" and listed["say"]["path"] == "/hooks/say"
        assert listed["say"]["last_run"] is None and not listed["say"]["paused"]
        assert listed["daily"]["schedule"] == "@daily" and listed["daily"]["next_fire"] > 0
        fired = await client.post("/api/triggers/say/fire")
        assert fired.status_code == 202 and fired.json()["trigger"] == "say"
        run = await ended(client, "say", fired.json()["run_id"])
        assert (run["outcome"], run["reply"], run["source"]) == ("ok", "hello from say", "manual")
        runs = (await client.get("/api/triggers/say/runs?limit=5")).json()["runs"]
        assert [r["id"] for r in runs] == [run["id"]]
        assert (await client.get("/api/triggers")).json()["triggers"][0]["last_run"]["id"] == run["id"]


async def test_busy_paused_and_resumed(nursery, tmp_path):
    node, opened, url = await start(nursery, tmp_path)
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as client:
        first = (await client.post("/api/triggers/slow/fire")).json()["run_id"]
        busy = await client.post("/api/triggers/slow/fire")
        assert busy.status_code == 409 and "has a run going" in busy.json()["error"]["message"]
        opened.set()
        assert (await ended(client, "slow", first))["error"] == "refused"
        second = (await client.post("/api/triggers/slow/fire")).json()["run_id"]
        await ended(client, "slow", second)
        paused = await client.post("/api/triggers/slow/fire")
        assert paused.status_code == 503 and "tern triggers resume slow" in paused.json()["error"]["message"]
        listed = {t["name"]: t for t in (await client.get("/api/triggers")).json()["triggers"]}
        assert listed["slow"]["paused"] and "2 failed runs in a row" in listed["slow"]["paused_reason"]
        resumed = await client.post("/api/triggers/slow/resume")
        assert resumed.status_code == 200 and not resumed.json()["paused"] and resumed.json()["failures"] == 0
        assert (await client.post("/api/triggers/slow/fire")).status_code == 202


@pytest.mark.parametrize("path, status", [
    ("/api/triggers/nope/runs", 404), ("/api/triggers/nope/fire", 404), ("/api/triggers/nope/resume", 404),
    ("/api/triggers/say/runs/run_0000000000000000", 404), ("/api/triggers/" + "x" * 300 + "/runs", 400),
    ("/api/triggers/say/runs/" + "r" * 5000, 400), ("/api/triggers/say/runs?limit=many", 400)])
async def test_unknown_names_hostile_ids_and_bad_limits_are_refused(nursery, tmp_path, path, status):
    _, _, url = await start(nursery, tmp_path)
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as client:
        method = "POST" if path.endswith(("/fire", "/resume")) else "GET"
        answer = await client.request(method, path)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["message"]


async def test_without_triggers_the_list_is_empty_and_names_are_unknown(nursery, tmp_path):
    node = Node(Config(agents=[AgentConfig(name="echo", kind="echo")], state=StateConfig(dir=str(tmp_path))))
    assert node.triggers is None
    http = HttpServer(node.config.server, build_router(node), Access(KEY))
    bound = await nursery.start(http.serve, "127.0.0.1", 0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{bound[0][1]}", headers=AUTH) as client:
        assert (await client.get("/api/triggers")).json() == {"triggers": []}
        missing = await client.post("/api/triggers/say/fire")
    assert missing.status_code == 404 and "no triggers are configured" in missing.json()["error"]["message"]


def test_a_reload_keeps_the_running_triggers_and_says_so(tmp_path):
    import msgspec

    agents = [AgentConfig(name="echo", kind="echo")]
    say = TriggerConfig(name="say", agent="echo", kind="webhook", message="x")
    node = Node(Config(agents=agents, state=StateConfig(dir=str(tmp_path)), triggers=[say]))
    changed = msgspec.structs.replace(node.config, triggers=[msgspec.structs.replace(say, message="y")])
    report = node.reload(changed)
    assert "[[triggers]]" in report["not_applied"]
    assert node.config.triggers == [say] and node.kernel.config.triggers == [say]
    assert "[[triggers]]" not in node.reload(node.config)["not_applied"]


async def test_every_time_is_shown_with_its_zone(nursery, tmp_path, monkeypatch, capsys):
    """Issue 34: trigger times named no zone. The API gives each time as ISO 8601 with the
    offset of the schedule's own zone (UTC for a webhook's runs), and ``tern triggers``
    prints those, through the daemon's API."""
    import argparse
    import datetime as dt
    from zoneinfo import ZoneInfo

    from runtime.cli import triggers as cli
    from runtime.cli.remote import Daemon

    node, _, url = await start(nursery, tmp_path)
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as client:
        run = await ended(client, "say", (await client.post("/api/triggers/say/fire")).json()["run_id"])
        listed = {t["name"]: t for t in (await client.get("/api/triggers")).json()["triggers"]}
    daily, say = listed["daily"], listed["say"]
    berlin = dt.datetime.fromtimestamp(daily["next_fire"], ZoneInfo("Europe/Berlin"))
    assert daily["timezone"] == "Europe/Berlin" and daily["next_fire_iso"] == berlin.isoformat(timespec="seconds")
    assert daily["next_fire_iso"][10:19] == "T00:00:00" and daily["next_fire_iso"][19:] in ("+01:00", "+02:00")
    assert dt.datetime.fromisoformat(daily["next_fire_iso"]).timestamp() == daily["next_fire"]
    assert say["timezone"] == "UTC" and say["next_fire_iso"] is None
    assert say["last_run"]["started_iso"].endswith("+00:00") and run["ended_iso"].endswith("+00:00")
    assert dt.datetime.fromisoformat(run["started_iso"]).timestamp() == pytest.approx(run["started_at"], abs=1)

    monkeypatch.setattr(cli, "_daemon", lambda args: (Daemon(url, AUTH), node.config))
    assert await trio.to_thread.run_sync(cli.cmd_triggers, argparse.Namespace(json=False)) == 0
    await trio.to_thread.run_sync(cli.cmd_runs, argparse.Namespace(name="say", n=5, json=False))
    out = capsys.readouterr().out
    assert f"@daily (Europe/Berlin), next {berlin.isoformat(sep=' ', timespec='seconds')};" in out
    assert f"last ok {run['started_iso'].replace('T', ' ')};" in out
    assert f"{run['id']}  {run['started_iso'].replace('T', ' ')}  manual" in out
