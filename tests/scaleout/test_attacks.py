"""Issue #33: requests and notifies that stopped a node, against real ``tern serve``
processes (SQLite, and a real PostgreSQL): each is refused or survived, and the node
answers the next request.

- A string the store cannot hold (a NUL, a lone surrogate) in any caller-supplied field
  is refused at the door with 400 / -32602, the same on both stores (it was answered,
  then its write stopped a PostgreSQL node; SQLite answered 500).
- A NOTIFY any database user may send, naming a node's inbox with a number beyond a
  bigint, is ignored (it stopped the node).
- A second node started under a live node's id refuses to start with one line, and the
  first node's running task is untouched (the second failed it, then deleted its lease).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.mcp.server_harness import tern_env
from tests.scaleout.test_serve_shared import serve, stop
from tests.test_cli import ROOT

V03, V10 = {"A2A-Version": "0.3"}, {"A2A-Version": "1.0"}


def serve_sqlite(tmp: Path, name: str) -> tuple[subprocess.Popen, str, Path]:
    """``tern serve`` on the SQLite default, configured as ``serve`` configures a PostgreSQL node."""
    home = tmp / name
    home.mkdir()
    config = home / "config.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{home / "state"}"\n'
                      '[a2a]\nenabled = true\ndefault_agent = "echo"\n'
                      '[[agents]]\nname = "echo"\nkind = "echo"\n')
    log = home / "serve.log"
    process = subprocess.Popen([sys.executable, "-m", "runtime", "--config", str(config), "serve"],
                               stdin=subprocess.DEVNULL, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               env=tern_env(home), cwd=ROOT)
    deadline = time.monotonic() + 30
    while "serving on " not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return process, log.read_text().split("serving on ", 1)[1].split()[0], log


@pytest.fixture(scope="module")
def nodes(tmp_path_factory, pg_server):
    """One node on each store, for every row of the table."""
    tmp = tmp_path_factory.mktemp("attacks")
    pg = serve(tmp, "pg-node", pg_server.create_database())
    lite = serve_sqlite(tmp, "sqlite-node")
    try:
        yield {"postgres": pg, "sqlite": lite}
    finally:
        stop(pg[0], lite[0])


def rpc(method: str, params: dict) -> str:
    """A JSON-RPC request as text (``\\ud800`` stays an escape: no encoder writes a lone surrogate)."""
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def send(**message) -> dict:
    return {"message": {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}], **message}}


NUL, LONE = "c\u0000x", "c\ud800x"
#: (what, method, path, body[, headers]): every caller-supplied string the stores keep, with a NUL.
TABLE = [
    ("contextId", "POST", "/a2a", rpc("message/send", send(contextId=NUL))),
    ("taskId", "POST", "/a2a", rpc("message/send", send(taskId=NUL))),
    ("messageId", "POST", "/a2a", rpc("message/send", send(messageId=NUL))),
    ("referenceTaskIds", "POST", "/a2a", rpc("message/send", send(referenceTaskIds=[NUL]))),
    ("text part", "POST", "/a2a", rpc("message/send", send(parts=[{"kind": "text", "text": NUL}]))),
    ("data part", "POST", "/a2a", rpc("message/send", send(parts=[{"kind": "data", "data": {"k": NUL}}]))),
    ("message metadata value", "POST", "/a2a", rpc("message/send", send(metadata={"k": NUL}))),
    ("message metadata key", "POST", "/a2a", rpc("message/send", send(metadata={NUL: 1}))),
    ("params metadata", "POST", "/a2a", rpc("message/send", {**send(), "metadata": {"k": NUL}})),
    ("webhook url", "POST", "/a2a", rpc("message/send", {**send(), "configuration": {
        "pushNotificationConfig": {"url": "https://example.com/" + NUL}}})),
    ("tasks/get id", "POST", "/a2a", rpc("tasks/get", {"id": NUL})),
    ("tasks/cancel id", "POST", "/a2a", rpc("tasks/cancel", {"id": NUL})),
    ("push config id", "POST", "/a2a", rpc("tasks/pushNotificationConfig/set", {
        "taskId": "t1", "pushNotificationConfig": {"id": NUL, "url": "https://example.com/"}})),
    ("1.0 contextId", "POST", "/a2a", rpc("SendMessage", {"message": {
        "role": "ROLE_USER", "messageId": "m1", "contextId": NUL, "parts": [{"text": "hi"}]}}), V10),
    ("1.0 GetTask id", "POST", "/a2a", rpc("GetTask", {"id": NUL}), V10),
    ("HTTP+JSON task id", "GET", "/a2a/echo/rest/tasks/c%00x", None, V10),
    ("HTTP+JSON contextId", "POST", "/a2a/echo/rest/message:send", json.dumps({"message": {
        "role": "ROLE_USER", "messageId": "m1", "contextId": NUL, "parts": [{"text": "hi"}]}}), V10),
    ("seed REST task id", "GET", "/a2a/tasks/c%00x", None),
    ("API message", "POST", "/api/agents/echo/message", json.dumps({"message": NUL})),
    ("API context_id", "POST", "/api/agents/echo/message", json.dumps({"message": "hi", "context_id": NUL})),
    ("API stream message", "POST", "/api/agents/echo/stream", json.dumps({"message": NUL})),
    ("API conversation id", "GET", "/api/conversations/c%00x", None),
]


@pytest.mark.parametrize("store", ["postgres", "sqlite"])
@pytest.mark.parametrize("row", TABLE, ids=[row[0] for row in TABLE])
def test_a_string_no_store_holds_is_refused_at_the_door(nodes, store, row):
    process, url, log = nodes[store]
    what, method, path, body, *version = row
    headers = {"content-type": "application/json", **(version[0] if version else V03)}
    answer = httpx.request(method, url + path, content=body, headers=headers, timeout=10)
    if path == "/a2a":  # JSON-RPC: invalid params, in a 200
        assert answer.status_code == 200, answer.text
        error = answer.json()["error"]
        assert error["code"] == -32602, error
        text = error["message"]
    else:
        assert answer.status_code == 400, answer.text
        text = answer.text
    assert "which tern does not store" in text and ("NUL" in text or "surrogate" in text), text
    time.sleep(0.2)  # a background write, had one been queued, has run
    assert process.poll() is None, log.read_text()[-3000:]
    ok = httpx.post(url + "/a2a", content=rpc("message/send", send()), headers=headers | V03, timeout=10).json()
    assert ok["result"]["status"]["state"] == "completed", ok


@pytest.mark.parametrize("store", ["postgres", "sqlite"])
def test_a_lone_surrogate_is_refused(nodes, store):
    """JSON may escape one (``\\ud800``); UTF-8, and so PostgreSQL, cannot hold it. The
    JSON decoder refuses it before the params are read (parse error), on both stores."""
    process, url, log = nodes[store]
    headers = {"content-type": "application/json", **V03}
    for body in (rpc("message/send", send(contextId=LONE)), rpc("message/send", send(parts=[
            {"kind": "text", "text": LONE}]))):
        error = httpx.post(url + "/a2a", content=body, headers=headers, timeout=10).json()["error"]
        assert error["code"] in (-32700, -32602), error
    answer = httpx.post(url + "/api/agents/echo/message", content=json.dumps({"message": LONE}),
                        headers=headers, timeout=10)
    assert answer.status_code == 400, answer.text
    assert process.poll() is None, log.read_text()[-3000:]


def test_a_notify_beyond_a_bigint_does_not_stop_a_node(tmp_path, pg_url):
    import psycopg

    a, url, log = serve(tmp_path, "node-a", pg_url)
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:  # any user of the database may NOTIFY
            for payload in ("inbox node-a 99999999999999999999", "inbox node-a ²", "task x 99999999999999999999",
                            "inbox node-a -1", "answered 99999999999999999999 0", "push x y z w"):
                conn.execute("SELECT pg_notify('tern_a2a', %s)", (payload,))
        time.sleep(1.5)  # the listener polls every 0.5 s
        assert a.poll() is None, log.read_text()[-3000:]
        ok = httpx.post(url + "/a2a", content=rpc("message/send", send()),
                        headers={"content-type": "application/json", **V03}, timeout=10).json()
        assert ok["result"]["status"]["state"] == "completed", ok
    finally:
        stop(a)


def test_a_second_node_under_a_live_node_s_id_refuses_to_start(tmp_path, pg_url):
    a, url, log = serve(tmp_path, "node-a", pg_url, lease=1.5)
    try:
        started = httpx.post(url + "/a2a/slow", json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "zz"}]},
                       "configuration": {"returnImmediately": True}}},
            headers={"A2A-Version": "1.0"}, timeout=10).json()["result"]["task"]
        twin = tmp_path / "twin"
        twin.mkdir()
        with pytest.raises(AssertionError):  # serve() asserts the process keeps running
            serve(twin, "node-a", pg_url, lease=1.5)
        said = (twin / "node-a" / "serve.log").read_text()
        lines = [line for line in said.splitlines() if line.startswith("tern: ")]
        assert len(lines) == 1 and "node_id 'node-a' is held by another running node" in lines[0], said
        time.sleep(2.0)  # more than a lease: the first node renews on
        task = httpx.post(url + "/a2a", json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                                              "params": {"id": started["id"]}},
                          headers={"A2A-Version": "1.0"}, timeout=10).json()["result"]
        assert task["status"]["state"] == "TASK_STATE_WORKING", task  # not "work was lost"
        assert a.poll() is None
    finally:
        stop(a)


def test_a_killed_node_s_id_is_taken_again(tmp_path, pg_url):
    """The refusal above is no bar to a restart: a killed node's lease is not renewed,
    so its successor under the same id starts (after watching it for 1.5 renewals) and
    fails the task its predecessor left."""
    a, url, _ = serve(tmp_path, "node-a", pg_url, lease=3.0)
    started = httpx.post(url + "/a2a/slow", json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "zz"}]},
                   "configuration": {"returnImmediately": True}}},
        headers={"A2A-Version": "1.0"}, timeout=10).json()["result"]["task"]
    a.kill()
    a.wait(10)
    again = tmp_path / "again"
    again.mkdir()
    b, url_b, _ = serve(again, "node-a", pg_url, lease=3.0)
    try:
        task = httpx.post(url_b + "/a2a", json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                                                "params": {"id": started["id"]}},
                          headers={"A2A-Version": "1.0"}, timeout=10).json()["result"]
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert "tern restarted on node node-a" in task["status"]["message"]["parts"][0]["text"]
    finally:
        stop(b)
