"""The dashboard's history (``host/activity.py``): a run's calls are those of its
conversation within its time, in the order they started; per-minute buckets; the audit
log's newer records imported; bounds on hostile events and on rows. Then the routes on a
real ``tern serve`` in this process: bad input answered with one line, and the sign-in
hint (the local token's file to a loopback client, nothing of it with a key)."""

from __future__ import annotations

import httpx

from runtime.host import activity
from runtime.host.activity import ActivityStore, audit_rows, row_of
from runtime.kernel.audit import AuditLog
from tests.http.test_dashboard_api import daemon, write_config

NOW = 1_800_000_030.0  # 30 s into a minute


def event(kind: str, end: float, ms: float, **fields) -> dict:
    return {"type": kind, "time": end, "ms": ms, **fields}


def test_a_runs_timeline_is_its_conversations_calls_in_order(tmp_path):
    store = ActivityStore(tmp_path / "activity.sqlite3", clock=lambda: NOW)
    events = [
        event("model.call", NOW - 9.0, 1000, agent="bot", context_id="c1", model="m", tokens=40),
        event("tool.call", NOW - 8.5, 400, agent="bot", context_id="c1", tool="time_now", caller="agent:bot",
              outcome="ok"),
        event("tool.call", NOW - 8.4, 100, agent="other", context_id="c2", tool="file_read", outcome="error",
              error="no such file"),  # the same moment, another conversation: not this run's
        event("model.call", NOW - 8.0, 500, agent="bot", context_id="c1", model="m", tokens=60),
        event("agent.message", NOW - 7.9, 2100, agent="bot", context_id="c1", outcome="ok", key="local"),
        event("agent.message", NOW - 1.0, 5, agent="echo", context_id="c3", outcome="ok", key="ci",
              caller="trigger:hourly"),
        {"type": "approval_requested", "time": NOW},  # not kept
    ]
    assert store.add([r for r in map(row_of, events) if r is not None]) == 6
    runs = store.runs()
    assert [(r["agent"], r["caller"]) for r in runs] == [("echo", "trigger:hourly"), ("bot", "local")]
    bot = store.run(runs[1]["seq"])
    assert [(s["kind"], s["name"]) for s in bot["spans"]] == [("model", "m"), ("tool", "time_now"), ("model", "m")]
    assert (bot["model_calls"], bot["tool_calls"], bot["tokens"], round(bot["ms"])) == (2, 1, 100, 2100)
    assert store.last_runs().keys() == {"bot", "echo"}
    assert store.runs(agent="bot", context_id="c1")[0]["seq"] == bot["seq"]
    assert store.run(runs[0]["seq"] + 1000) is None
    history = store.history(5)
    assert [sum(history["series"][k]) for k in ("runs", "model_calls", "tool_calls", "errors", "tokens")] == \
        [2, 2, 2, 1, 100]
    assert history["series"]["runs"][-1] == 2  # the open minute holds both runs
    store.close()
    again = ActivityStore(tmp_path / "activity.sqlite3", clock=lambda: NOW)  # a restart
    assert len(again.runs()) == 2 and again.newest() == NOW - 1.0


def test_hostile_events_are_bounded_not_raised():
    row = row_of({"type": "tool.call", "time": "soon", "ms": "slow", "tool": "x" * 10_000, "agent": ["a"],
                  "caller": None, "tokens": True, "context_id": 7})
    assert row is not None
    kind, started, ended, agent, context_id, caller, name, outcome, tokens, error = row
    assert (kind, agent, context_id, caller, len(name), tokens) == ("tool", "", "", "", activity.MAX_TEXT, 0)
    assert started == ended


def test_rows_beyond_the_bound_go(monkeypatch):
    monkeypatch.setattr(activity, "KEEP_ROWS", 10)
    store = ActivityStore(None, clock=lambda: NOW)
    for i in range(12):
        store.add([row_of(event("agent.message", NOW - 100 + i, 1, agent="echo", context_id=f"c{i}"))] * 100)
    assert store._db.execute("SELECT count(*) FROM activity").fetchone()[0] <= 210
    assert store.runs(1)[0]["context_id"] == "c11"


def test_the_audit_logs_newer_records_are_imported(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.record("agent_message", agent="files", context_id="c9", outcome="ok", ms=12.0, key="local")
    log.record("tool_call", agent=None, caller="api:127.0.0.1", key="admin", tool="time_now", arguments="sha256:x",
               outcome="ok", ms=1.0, untrusted=False)
    log.record("approval_requested", tool="file_write")
    (tmp_path / "audit.jsonl").open("a").write("not json\n")
    rows = audit_rows(tmp_path / "audit.jsonl", 0.0)
    assert [(r[0], r[3], r[5], r[6]) for r in rows] == [("run", "files", "local", ""), ("tool", "", "api:127.0.0.1",
                                                                                        "time_now")]
    assert audit_rows(tmp_path / "audit.jsonl", rows[-1][2]) == []
    assert audit_rows(tmp_path / "missing.jsonl", 0.0) == []


async def test_the_routes_answer_bad_input_with_one_line(nursery, tmp_path):
    url = await daemon(nursery, write_config(tmp_path))
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        sent = await client.post("/api/agents/echo/message", json={"message": "hi"})
        assert sent.status_code == 200
        for _ in range(100):
            listed = (await client.get("/api/activity")).json()
            if listed["runs"]:
                break
            import trio

            await trio.sleep(0.05)
        assert [r["agent"] for r in listed["runs"]] == ["echo"] and listed["last_runs"]["echo"]["caller"] == "local"
        run = (await client.get(f"/api/activity/runs/{listed['runs'][0]['seq']}")).json()
        assert run["spans"] == [] and run["context_id"] == sent.json()["context_id"]
        for path, status, words in (
                ("/api/activity?minutes=many", 400, "whole numbers"),
                ("/api/activity/runs?limit=x", 400, "whole number"),
                ("/api/activity/runs?agent=" + "a" * 5000, 400, "characters long"),
                ("/api/activity/runs/abc", 404, "no run has the id"),
                ("/api/activity/runs/" + "9" * 30, 404, "no run has the id"),
                ("/api/activity/runs/424242", 404, "no run has the id")):
            answer = await client.get(path)
            assert answer.status_code == status, (path, answer.text)
            assert words in answer.json()["error"]["message"] and "\n" not in answer.text, answer.text
        assert (await client.get("/api/activity?minutes=-5&limit=100000")).status_code == 200  # clamped
        hint = (await client.get("/api/sign-in")).json()
        assert hint == {"local_token_path": str(tmp_path / "state" / "local-token"), "key_hint": ""}


async def test_a_keyed_daemon_names_its_key_not_a_local_token(nursery, tmp_path, monkeypatch):
    monkeypatch.setenv("TERN_TEST_ACTIVITY_KEY", "k" * 40)
    url = await daemon(nursery, write_config(tmp_path, key_env="TERN_TEST_ACTIVITY_KEY"))
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        hint = await client.get("/api/sign-in")  # no key needed: the form asks before signing in
        assert hint.json() == {"local_token_path": None,
                               "key_hint": "tern's own clients send $TERN_TEST_ACTIVITY_KEY: set it to this "
                                           "daemon's key"}
        assert (await client.get("/api/activity")).status_code == 401


def test_a_store_that_cannot_be_opened_is_kept_in_memory(tmp_path):
    (tmp_path / "activity.sqlite3").mkdir()  # a directory where the file should be
    store = activity.open_store(str(tmp_path))
    assert store.add([row_of(event("agent.message", NOW, 1, agent="echo"))]) == 1
    assert [r["agent"] for r in store.runs()] == ["echo"]
