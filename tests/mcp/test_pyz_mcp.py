"""Issue 17's MCP features from the built ``tern.pyz`` (the session's one build), run
under ``python -I`` from an empty directory with a fresh HOME, TMPDIR and cache, so
only what the archive holds can answer: a module left out of it, a file read through
``__file__`` or a resource the zip importer cannot open fails here, not on a user's host.

- ``tern mcp`` (stdio) to the official MCP Python SDK's Client in both eras, at once:
  tools, resources, a prompt and its completion, an ask tool (a form answered by the
  SDK's elicitation callback) and an ``mcp-sampling`` agent (its model turn answered by
  the SDK's sampling callback);
- ``tern serve`` with an upstream MCP server built from the SDK's auth components:
  ``/api/mcp/servers`` shows it in ``needs_auth`` with the command to run; ``tern auth
  login --no-browser`` by paste-back on stdin; ``tern auth status --json`` shows the
  login without a secret; the upstream turns ``ready`` and ``tern call`` goes through
  it; ``tern auth logout``. Meanwhile the SDK's Client speaks ``POST /mcp`` in both eras
  and, in 2026-07-28, the tasks extension: an agent call becomes a task it polls to its
  result, the same task the A2A methods show.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from runtime.mcp.client.oauth.store import TokenStore
from tests.mcp.conftest import FIXTURES
from tests.mcp.oauth.test_sdk_server import authorization_url, follow, start
from tests.mcp.server_harness import tern_serve, write_config
from tests.mcp.test_real_peers_http import free_port
from tests.test_build_pyz import CACHE_PYTHONS, RUN_TIMEOUT_SECS, base_python, clean_env, need_python

pytestmark = pytest.mark.pyz

CLIENT = str(FIXTURES / "sdk_mcp_pyz_client.py")
ERAS = [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")]
BOTH = "application/json, text/event-stream"
EXTRA = """
[a2a]
enabled = true

[[agents]]
name = "writer"
kind = "echo"
workspace = "{workspace}"
resources = ["*.md"]
[[agents.prompts]]
name = "draft"
arguments = [{{ name = "topic", required = true, values = ["tides", "terns", "wind"] }}]
messages = [{{ text = "Write about {{topic}}." }}, {{ role = "assistant", resource = "notes.md" }}]

[[agents]]
name = "desk"
kind = "llm"
[agents.model]
provider = "mcp-sampling"

[[mcp_server.asks]]
name = "plan_trip"
arguments = ["traveller"]
reply = "Plan for {{traveller}}: {{trip.nights}} nights in {{trip.city}}"
[[mcp_server.asks.questions]]
key = "trip"
kind = "form"
message = "Where are you going, {{traveller}}?"
[mcp_server.asks.questions.schema]
type = "object"
required = ["city"]
properties.city = {{ type = "string", minLength = 1 }}
properties.nights = {{ type = "integer", minimum = 1, maximum = 30 }}
{upstream}"""
UPSTREAMS = """
[[mcp_servers]]
name = "sdk"
[mcp_servers.transport]
type = "http"
url = "{url}"
[mcp_servers.transport.oauth]

[[mcp_servers]]
name = "everything"
transport = {{ type = "stdio", command = "{node}", args = ["{everything}", "stdio"] }}
"""
DOCUMENT = "demo://resource/static/document/architecture.md"


def prepared(tmp: Path, upstream: str = "", cache: Path | None = None) -> tuple[Path, dict[str, str], Path]:
    """A config for a pyz run in ``tmp`` (the writer's workspace holds notes.md), the
    isolated environment (its pyz cache ``cache``, by default a new one), and the empty
    directory to run in."""
    workspace = tmp / "writer"
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text("tide tables")
    config = write_config(tmp, EXTRA.format(workspace=workspace, upstream=upstream))
    for name in ("home", "empty"):
        (tmp / name).mkdir()
    return config, clean_env(cache or tmp / "cache", tmp / "home"), tmp / "empty"


def sdk_client(sdk_python: str, mode: str, *target: str, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sdk_python, CLIENT, mode, *target], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def seen_by(client: subprocess.Popen) -> dict:
    out, err = client.communicate(timeout=RUN_TIMEOUT_SECS)
    assert client.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def check(seen: dict, version: str) -> None:
    assert seen["version"] == version
    assert {"tern_agent_echo", "tern_agent_writer", "tern_agent_desk", "plan_trip"} <= set(seen["tools"])
    assert seen["echo"] == "hello from the pyz"
    assert seen["resources"] == ["tern://agent/writer/notes.md"]
    assert seen["read"] == ["text/markdown", "tide tables"]
    assert seen["prompt"] == [["user", "text", "Write about tides."], ["assistant", "resource", None]]
    assert seen["completion"] == ["tides", "terns"]
    assert seen["ask"] == [False, "Plan for Ana: 3 nights in Lyon"]
    assert seen["sampling"] == [False, "Sampled: what time is it?"]


@pytest.mark.parametrize("version", CACHE_PYTHONS)
def test_tern_mcp_from_the_pyz_serves_every_feature_in_both_eras(pyz, sdk_python, tmp_path, version):
    python = need_python(version)
    clients = []
    for mode, _ in ERAS:  # both unpack the pyz into one empty cache at once
        config, env, cwd = prepared(tmp_path / mode, cache=tmp_path / "cache")
        clients.append(sdk_client(sdk_python, mode, "--", python, "-I", str(pyz), "--config", str(config),
                                  "mcp", env=env, cwd=cwd))
    try:
        for client, (_, era) in zip(clients, ERAS):
            check(seen_by(client), era)
    finally:
        for client in clients:
            client.kill()


def test_tern_serve_from_the_pyz_logs_in_to_an_upstream_and_serves_post_mcp(pyz, sdk_python, npm, node,
                                                                            tmp_path):
    port = free_port()
    oauth = start(sdk_python, port)
    base = f"http://127.0.0.1:{port}"
    config, env, cwd = prepared(tmp_path, UPSTREAMS.format(url=f"{base}/mcp", node=node,
                                                       everything=npm["server-everything"]))
    tern = (base_python(), "-I", str(pyz))

    def cli(*args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen:
        return subprocess.Popen([*tern, "--config", str(config), *args], stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)

    def done(*args: str) -> str:
        process = cli(*args)
        out, err = process.communicate(timeout=RUN_TIMEOUT_SECS)
        assert process.returncode == 0, (args, out, err)
        return out

    def upstream(url: str, state: str, name: str = "sdk") -> dict:
        deadline = time.monotonic() + RUN_TIMEOUT_SECS
        while True:
            report = httpx.get(f"{url}/api/mcp/servers", timeout=5).json()
            server = next(s for s in report["connected"] if s["name"] == name)
            if server["state"] == state:
                return server
            assert time.monotonic() < deadline, report
            time.sleep(0.1)

    try:
        with tern_serve(tmp_path, config, env, tern=tern, cwd=cwd) as url:
            clients = [sdk_client(sdk_python, mode, f"{url}/mcp", env=env, cwd=cwd) for mode, _ in ERAS]
            try:
                waiting = upstream(url, "needs_auth")
                assert "tern auth login sdk" in json.dumps(waiting), waiting
                login = cli("auth", "login", "sdk", "--no-browser", stdin=subprocess.PIPE)
                watchdog = threading.Timer(RUN_TIMEOUT_SECS, login.kill)  # its stderr is read without a timeout
                watchdog.start()
                try:
                    redirect = follow(authorization_url(login))
                    forged = redirect.replace("state=", "state=forged")
                    login.stdin.write(f"{forged}\n{redirect}\n")  # pasted back, as on a headless host
                    login.stdin.flush()
                    assert login.wait(RUN_TIMEOUT_SECS) == 0, login.stderr.read()
                finally:
                    watchdog.cancel()
                    login.kill()
                said = login.stderr.read()
                assert "does not match this login" in said and "Logged in to MCP server 'sdk'" in said, said
                status = done("auth", "status", "--json")
                (row,) = json.loads(status)
                assert row["logged_in"] and row["issuer"] == base and row["scope"] == "tools"
                upstream(url, "ready")
                garbage = httpx.post(f"{url}/mcp", content=b"{not json", timeout=5,
                                     headers={"Content-Type": "application/json", "Accept": BOTH})
                assert garbage.json()["error"]["code"] == -32700, garbage.text  # and it keeps serving:
                called = done("call", "mcp_sdk_add", "--args", '{"a": 2, "b": 3}')
                assert called.strip().endswith("5"), called
                upstream(url, "ready", "everything")  # and an upstream's resources through a pipeline tool
                document = json.dumps({"server": "everything", "uri": DOCUMENT})
                read = done("call", "mcp_resource_read", "--args", document)
                assert "Architecture" in read, read
                seen = [seen_by(client) for client in clients]
            finally:
                for client in clients:
                    client.kill()
            for got, (_, version) in zip(seen, ERAS):
                check(got, version)
            task = seen[1]["task"]
            assert task["text"] == "step 1\nstep 2\nstep 3\nstep 4\n" and not task["is_error"], task
            statuses = [s["status"] for s in task["seen"]]
            assert statuses[0] == "working" and statuses[-1] == "completed", statuses
            (task_id,) = {s["taskId"] for s in task["seen"]}
            a2a = httpx.post(f"{url}/a2a", headers={"A2A-Version": "1.0"}, timeout=5, json={
                "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}).json()
            assert a2a["result"]["status"]["state"] == "TASK_STATE_COMPLETED", a2a
            store = TokenStore(tmp_path / "state")
            tokens, client = store.tokens(f"{base}/mcp"), store.client(base)
            assert tokens is not None and client is not None and client.client_secret
            said += status + called + (tmp_path / "serve.log").read_text()
            for secret in (tokens.access_token, tokens.refresh_token, client.client_secret):
                assert secret not in said
            assert "tokens forgotten" in done("auth", "logout", "sdk")
            (row,) = json.loads(done("auth", "status", "--json"))
            assert not row["logged_in"]
    finally:
        oauth.terminate()
        oauth.wait(10)
