"""The shared database misbehaving under three real nodes behind HAProxy: restarted while
clients send (calls during the outage fail clearly and quickly, nothing acknowledged is
lost, the nodes reconnect by themselves), and a wrong password or no database at all at
boot (``tern serve`` stops with one line)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests import peers
from tests.haproxy import free_port, haproxy_bin
from tests.mcp.server_harness import tern_env
from tests.scaleout.cluster import Cluster
from tests.scaleout.test_cluster import V10, message, rpc
from tests.test_cli import ROOT

CALL_TIMEOUT = 20.0  # a call during the outage must answer well within this (statement_timeout is 10 s)
CLIENTS = 4


def _clear_failure(response: httpx.Response) -> bool:
    """A 503 that says the database is away (a node), or HAProxy's own 503 when its
    readiness checks took every node out; or a JSON-RPC error naming the database."""
    text = response.text
    if response.status_code == 503:
        return "PostgreSQL" in text or "database" in text or "No server is available" in text
    if response.status_code == 200 and "error" in (body := response.json()):
        return "PostgreSQL" in body["error"]["message"] or "database" in body["error"]["message"]
    return False


def test_the_database_restarted_under_load(pg_server, tmp_path):
    acked: list[str] = []
    failures: list[tuple[float, int, str]] = []
    unclear: list[tuple[int, str]] = []
    slowest = [0.0]
    lock = threading.Lock()
    stop = threading.Event()
    outage: dict[str, float] = {}
    peers.require(haproxy_bin)

    with Cluster(tmp_path, pg_server.create_database(), nodes=3) as cluster:

        def client() -> None:
            with httpx.Client(headers={**cluster.headers, **V10}, timeout=CALL_TIMEOUT) as http:
                while not stop.is_set():
                    began = time.monotonic()
                    try:
                        response = http.post(cluster.url + "/a2a", json=rpc("SendMessage", {"message": message("x")}))
                    except httpx.TimeoutException:
                        with lock:
                            failures.append((began, 0, f"no answer within {CALL_TIMEOUT:g} s"))
                        continue
                    took = time.monotonic() - began
                    with lock:
                        slowest[0] = max(slowest[0], took)
                        body = response.json() if response.headers.get("content-type", "").startswith(
                            "application/json") else {}
                        if response.status_code == 200 and "result" in body:
                            acked.append(body["result"]["task"]["id"])
                        else:
                            failures.append((began, response.status_code, response.text[:300]))
                            if not _clear_failure(response):
                                unclear.append((response.status_code, response.text[:300]))
                    time.sleep(0.02)

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        time.sleep(2)
        before = len(acked)
        outage["from"] = time.monotonic()
        pg_server.restart(down_secs=2)
        outage["to"] = time.monotonic()
        # The nodes reconnect by themselves: each answers a send of its own within a few seconds.
        with httpx.Client(headers={**cluster.headers, **V10}, timeout=CALL_TIMEOUT) as http:
            for node in cluster.nodes:
                deadline = time.monotonic() + 15
                while True:
                    sent = http.post(node.url + "/a2a", json=rpc("SendMessage", {"message": message("back")})).json()
                    if "result" in sent:
                        break
                    assert time.monotonic() < deadline, (node.name, sent)
                    time.sleep(0.2)
        time.sleep(1)
        stop.set()
        for thread in threads:
            thread.join(CALL_TIMEOUT + 5)
        assert not any(thread.is_alive() for thread in threads)
        assert before > 0 and len(acked) > before, "sends did not go through before and after the restart"
        during = [f for f in failures if outage["from"] - 1 <= f[0] <= outage["to"] + 1]
        assert during, "no call failed while the database was down: sends did not need it"
        assert not [f for f in failures if f[1] == 0], failures  # nothing hung
        assert not unclear, unclear  # every failure says the database is away
        assert slowest[0] < CALL_TIMEOUT
        # Nothing acknowledged is lost: every acked task, from another node than most of them went to.
        with httpx.Client(headers={**cluster.headers, **V10}, timeout=CALL_TIMEOUT) as http:
            for i, task_id in enumerate(acked):
                node = cluster.nodes[i % len(cluster.nodes)]
                got = http.post(node.url + "/a2a", json=rpc("GetTask", {"id": task_id})).json()
                assert got.get("result", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED", (task_id, got)


def _serve(tmp_path, url: str, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "state").mkdir(exist_ok=True)
    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{tmp_path / "state"}"\nstore = "postgres"\n'
                      f'postgres_url = "{url}"\n[a2a]\nenabled = true\n[[agents]]\nname = "echo"\nkind = "echo"\n')
    return subprocess.run([sys.executable, "-m", "runtime", "--config", str(config), "serve"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, env=tern_env(tmp_path, **env), cwd=ROOT)


@pytest.mark.parametrize("case", ["wrong-password", "nothing-listening"])
def test_a_database_that_cannot_be_reached_at_boot_is_one_line(pg_server, tmp_path, case):
    if case == "wrong-password":
        url = f"postgresql://tern:${{PGPW}}@127.0.0.1:{pg_server.port}/postgres"
        secret, expected = "wrong-password-4711", "password authentication failed"
    else:
        url, secret, expected = f"postgresql://tern:${{PGPW}}@127.0.0.1:{free_port()}/tern", "pw-0815-x", "refused"
    done = _serve(tmp_path, url, PGPW=secret)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tern: PostgreSQL at 127.0.0.1:") and expected in lines[0], lines[0]
    assert secret not in done.stderr + done.stdout
    assert "serving on" not in done.stdout + done.stderr
