"""Two real ``tern serve`` processes on one PostgreSQL (no balancer: each is called by
its own URL), driven by the official a2a-sdk client: what is sent on A is read, listed,
canceled (its process killed on A) and followed on B; a node killed with SIGKILL has its
running task failed by the other within about a lease."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests import peers
from tests.mcp.server_harness import tern_env
from tests.test_cli import ROOT

CLIENT = str(ROOT / "tests" / "fixtures" / "a2a_sdk_cluster_client.py")
SLEEP = "31.7"  # the slow agent's sleep: a number no other process here sleeps, to find it by
TICKER = """import json, sys, time
for i in range(8):
    print(json.dumps({"event": "artifact", "artifact": {"artifactId": "t", "parts": [{"text": f"{i} "}]},
                      "append": i > 0, "lastChunk": False}), flush=True)
    time.sleep(0.15)
print(json.dumps({"state": "completed", "text": "ticked"}), flush=True)
"""


@pytest.fixture(scope="module")
def a2a_python():
    return str(peers.require(peers.a2a_sdk_python))


def serve(tmp: Path, name: str, url: str, lease: float = 15.0) -> tuple[subprocess.Popen, str, Path]:
    home = tmp / name
    home.mkdir()
    user, rest = url.removeprefix("postgresql://").split(":", 1)
    password, where = rest.split("@", 1)  # the password comes from the environment, as in a deployment
    (home / "ticker.py").write_text(TICKER)
    config = home / "config.toml"
    config.write_text(
        f'[server]\nlisten = "127.0.0.1:0"\n'
        f'[state]\ndir = "{home / "state"}"\nstore = "postgres"\npostgres_url = "postgresql://{user}:${{TERN_TEST_PG_PASSWORD}}@{where}"\n'
        f'node_id = "{name}"\nlease_secs = {lease}\n'
        '[a2a]\nenabled = true\ndefault_agent = "echo"\n'
        '[[agents]]\nname = "echo"\nkind = "echo"\n'
        f'[[agents]]\nname = "slow"\nkind = "command"\ncommand = ["sleep", "{SLEEP}"]\n'
        f'[[agents]]\nname = "ticker"\nkind = "command"\ncommand = ["{sys.executable}", "{home / "ticker.py"}"]\n'
        'a2a_events = true\n')
    log = home / "serve.log"
    process = subprocess.Popen([sys.executable, "-m", "runtime", "--config", str(config), "serve"],
                               stdin=subprocess.DEVNULL, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               env=tern_env(home, TERN_TEST_PG_PASSWORD=password), cwd=ROOT)
    deadline = time.monotonic() + 30
    while "serving on " not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return process, log.read_text().split("serving on ", 1)[1].split()[0], log


def sleepers() -> list[int]:
    """The slow agent's processes still running."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", SLEEP.encode()]:
                found.append(int(entry.name))
    return found


def stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
    for pid in sleepers():
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_a2a_sdk_across_two_nodes(a2a_python, tmp_path, pg_url, binding):
    a, url_a, log_a = serve(tmp_path, "node-a", pg_url)
    b, url_b, log_b = serve(tmp_path, "node-b", pg_url)
    try:
        done = subprocess.run([a2a_python, CLIENT, url_a, url_b], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL, env={"A2A_BINDING": binding, "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr[-3000:] + log_a.read_text()[-2000:] + log_b.read_text()[-2000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["got_on_b"] == {"state": 3, "history": 2, "artifact": "hello from A"}  # COMPLETED
        assert seen["listed_on_b"] == [True]
        assert seen["canceled_on_b"] == {"id": True, "state": 5} and seen["seen_on_a"] == 5  # CANCELED
        deadline = time.monotonic() + 10
        while sleepers():  # B's cancel killed the agent's process on A
            assert time.monotonic() < deadline, "the canceled task's process still runs on node A"
            time.sleep(0.05)
        followed = seen["subscribed_on_b"]
        assert followed["first"] == "task" and followed["last"] == "status_update"
        assert followed["chunks"] == [f"{i} " for i in range(8)][-len(followed["chunks"]):]
        assert len(followed["chunks"]) >= 6  # in order, none twice (the first may pass before B follows)
    finally:
        stop(a, b)


def test_a_killed_node_s_task_fails_on_the_other(tmp_path, pg_url):
    a, url_a, _ = serve(tmp_path, "node-a", pg_url, lease=1.5)
    b, url_b, _ = serve(tmp_path, "node-b", pg_url, lease=1.5)
    try:
        started = httpx.post(url_a + "/a2a/slow", json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "zz"}]},
                       "configuration": {"returnImmediately": True}}},
            headers={"A2A-Version": "1.0"}, timeout=10).json()["result"]["task"]
        deadline = time.monotonic() + 10
        while not sleepers():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        killed_at = time.monotonic()
        a.send_signal(signal.SIGKILL)
        a.wait(10)

        def state() -> dict:
            return httpx.post(url_b + "/a2a", json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                                                    "params": {"id": started["id"]}},
                              headers={"A2A-Version": "1.0"}, timeout=10).json()["result"]["status"]

        while state()["state"] != "TASK_STATE_FAILED":
            assert time.monotonic() - killed_at < 10, state()
            time.sleep(0.1)
        # within the lease of the kill ([state] lease_secs), give or take the query and this loop's 0.1 s
        assert time.monotonic() - killed_at < 1.5 + 0.4
        assert "node node-a stopped answering (no lease renewal for 1.5 s)" in state()["message"]["parts"][0]["text"]
    finally:
        stop(a, b)
