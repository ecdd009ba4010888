"""Issue 20 end to end from the built ``tern.pyz``: ``tern serve`` with a schedule (every
2 s, real time) and a signed webhook, both sending a scripted-model agent that calls the
real MCP reference server's ``echo`` tool (server-everything over stdio), both delivering
the reply to a file sink; the files, the run records (``tern triggers runs --json``), the
listing, ``tern triggers fire --wait`` and the metric, all from the pyz."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests import peers
from tests.browser import support
from tests.chat_stub import serve_chat
from tests.test_build_pyz import base_python

pytestmark = pytest.mark.pyz

SECRET = "a-webhook-secret-for-the-e2e-test"
CONFIG = """
[server]
listen = "127.0.0.1:0"
rate_limit_per_sec = 0
[state]
dir = "{state}"
[[mcp_servers]]
name = "everything"
transport = {{ type = "stdio", command = "{node}", args = ["{everything}", "stdio"] }}
[[agents]]
name = "reporter"
kind = "llm"
tools = ["mcp_everything_echo"]
[agents.model]
base_url = "{model}"
model = "scripted"
[[triggers]]
name = "tick"
agent = "reporter"
kind = "schedule"
every = "2s"
message = "tick at {{{{ time }}}}"
max_failures = 100
[triggers.sink]
kind = "file"
path = "reports/{{{{ trigger }}}}-{{{{ run_id }}}}.md"
[[triggers]]
name = "ci"
agent = "reporter"
kind = "webhook"
secret_env = "HOOK_SECRET"
message = "PR {{{{ body.pull_request.number }}}}: {{{{ body.pull_request.title }}}}"
[triggers.sink]
kind = "file"
path = "reports/{{{{ trigger }}}}-{{{{ run_id }}}}.md"
"""


def calls_echo(messages: list[dict]) -> dict:
    """The scripted model: echo the message through the MCP tool, then report what it said."""
    last = messages[-1]
    if last["role"] == "tool":
        return {"role": "assistant", "content": f"report: {last['content']}"}
    call = {"id": "call-1", "type": "function",
            "function": {"name": "mcp_everything_echo", "arguments": json.dumps({"message": last["content"]})}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def tern(pyz: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([base_python(), "-I", str(pyz), *args, "--config", str(config)], capture_output=True,
                          text=True, timeout=120, cwd=config.parent,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(config.parent), "LANG": "C.UTF-8",
                               "TERN_CACHE_DIR": str(config.parent / "cache")})


def runs(pyz: Path, config: Path, name: str) -> list[dict]:
    done = tern(pyz, config, "triggers", "runs", name, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["runs"]


def test_a_schedule_and_a_webhook_run_an_agent_that_calls_an_mcp_tool_into_files(pyz, tmp_path):
    everything = peers.require(peers.npm_servers)["server-everything"]
    with serve_chat(calls_echo) as model:
        config = tmp_path / "config.toml"
        config.write_text(CONFIG.format(state=tmp_path / "state", node=peers.node(), everything=everything,
                                        model=model))
        daemon = support.Daemon(config, pyz, {"HOOK_SECRET": SECRET})
        try:
            body = json.dumps({"action": "opened", "pull_request": {"number": 7, "title": "Fix the tide table"}})
            signature = "sha256=" + hmac.new(SECRET.encode(), body.encode(), hashlib.sha256).hexdigest()
            with httpx.Client(base_url=daemon.url, timeout=30) as client:
                unsigned = client.post("/hooks/ci", content=body, headers={"Content-Type": "application/json"})
                assert unsigned.status_code == 401
                answer = client.post("/hooks/ci", content=body, headers={"Content-Type": "application/json",
                                                                          "X-Hub-Signature-256": signature})
                assert answer.status_code == 202, answer.text
                hooked = answer.json()["run_id"]

                def finished(name: str, run_id: str | None = None):
                    for run in runs(pyz, config, name):
                        if (run_id is None or run["id"] == run_id) and run["outcome"] == "ok" \
                                and "Echo: " in run["reply"]:
                            return run
                    return None

                ci = support.wait_for(lambda: finished("ci", hooked), 90, "the webhook's run")
                tick = support.wait_for(lambda: finished("tick"), 90, "a scheduled run")
                metrics = client.get("/metrics").text
            reports = tmp_path / "state" / "workspaces" / "reporter" / "reports"
            assert ci["reply"] == "report: Echo: PR 7: Fix the tide table" and ci["source"] == "webhook"
            assert (reports / f"ci-{hooked}.md").read_text() == ci["reply"]
            assert tick["source"] == "schedule" and tick["reply"].startswith("report: Echo: tick at 20")
            assert (reports / f"tick-{tick['id']}.md").read_text() == tick["reply"]
            assert 'tern_trigger_runs_total{trigger="ci",outcome="ok"} 1' in metrics

            fired = tern(pyz, config, "triggers", "fire", "ci", "--wait")
            assert fired.returncode == 0, fired.stderr
            run_id, reply = fired.stdout.splitlines()[:2]
            assert run_id.startswith("run_") and reply == "report: Echo: PR : "  # no body: empty values
            listed = tern(pyz, config, "triggers", "--json")
            triggers = {t["name"]: t for t in json.loads(listed.stdout)["triggers"]}
            assert triggers["ci"]["last_run"]["id"] == run_id and triggers["tick"]["next_fire"] > time.time() - 5
            shown = tern(pyz, config, "triggers")
            assert "tick" in shown.stdout and "every 2s" in shown.stdout and "POST /hooks/ci" in shown.stdout
            table = tern(pyz, config, "triggers", "runs", "ci", "-n", "5")
            assert table.returncode == 0 and f"{hooked}" in table.stdout and "webhook  ok" in table.stdout
            missing = tern(pyz, config, "triggers", "resume", "nope")
            assert missing.returncode == 1 and "no trigger named 'nope'" in missing.stderr
        finally:
            daemon.stop()
    assert SECRET not in daemon.log()
