"""Budgets on a real ``tern serve``: the official a2a-sdk client over each binding meets
HTTP 429 with Retry-After once the agent's requests_per_minute is spent, and no task is
created; the REST API says the same; ``/api/status`` and ``/metrics`` show the use and
the refusals (real time: the window never passes here)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from tests import peers
from tests.mcp.server_harness import tern_env
from tests.test_cli import ROOT

CLIENT = str(ROOT / "tests" / "fixtures" / "a2a_sdk_budget_client.py")


@pytest.fixture(scope="module")
def a2a_python():
    return str(peers.require(peers.a2a_sdk_python))


def serve(tmp):
    config = tmp / "config.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{tmp / "state"}"\n'
                      '[a2a]\nenabled = true\ndefault_agent = "limited"\n'
                      '[[agents]]\nname = "limited"\nkind = "echo"\nrequests_per_minute = 1\n'
                      '[[agents]]\nname = "free"\nkind = "echo"\n')
    log = tmp / "serve.log"
    process = subprocess.Popen([sys.executable, "-m", "runtime", "--config", str(config), "serve"],
                               stdin=subprocess.DEVNULL, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               env=tern_env(tmp), cwd=ROOT)
    deadline = time.monotonic() + 20
    while "serving on " not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return process, log.read_text().split("serving on ", 1)[1].split()[0]


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_a2a_sdk_client_meets_429_and_status_and_metrics_show_it(a2a_python, tmp_path, binding):
    process, url = serve(tmp_path)
    try:
        done = subprocess.run([a2a_python, CLIENT, url], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL, env={"A2A_BINDING": binding, "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["first"] == 3  # TASK_STATE_COMPLETED
        for refused in (seen["blocking"], seen["streaming"]):
            assert refused["status"] == 429 and 59 <= int(refused["retry_after"]) <= 61, seen
        assert seen["tasks"] == 1  # the refused sends created none
        api = httpx.post(url + "/api/agents/limited/message", json={"message": "and here"})
        assert api.status_code == 429 and 59 <= int(api.headers["retry-after"]) <= 61
        assert api.json()["error"]["message"].startswith(
            "agent 'limited' has had its 1 message in the last minute (requests_per_minute); try again in ")
        assert httpx.post(url + "/api/agents/free/message", json={"message": "x"}).status_code == 200
        status = httpx.get(url + "/api/status").json()
        assert status["budgets"] == {"limited": {"requests_per_minute": {"limit": 1, "used": 1, "window_secs": 60,
                                                                         "exceeded": 3}}}
        assert sum(status["tasks"].values()) == 1
        metrics = httpx.get(url + "/metrics").text
        assert "# TYPE tern_budget_exceeded_total counter" in metrics
        assert 'tern_budget_exceeded_total{agent="limited",budget="requests_per_minute"} 3' in metrics
        assert 'tern_budget_used{agent="limited",budget="requests_per_minute"} 1' in metrics
        assert 'tern_budget_limit{agent="limited",budget="requests_per_minute"} 1' in metrics
        assert 'agent="free"' not in metrics  # labels: only agents with a budget
    finally:
        process.terminate()
        process.wait(10)
