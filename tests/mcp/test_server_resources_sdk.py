"""The official MCP Python SDK (2.3.0, in its own venv) reading tern's resources, prompts
and completions, over ``tern mcp`` (stdio, standalone and relaying to a daemon) and
``POST /mcp`` on ``tern serve``, in both eras (with ``subscriptions/listen`` in
2026-07-28): an agent's workspace files and prompts, and the fake MCP server's
resources and prompts re-exported through ``[mcp_server] upstream``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from tests.mcp.conftest import FAKE, FIXTURES
from tests.mcp.server_harness import tern_env, tern_serve

CLIENT = str(FIXTURES / "sdk_mcp_catalog_client.py")
MODES = [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")]


def write_config(tmp) -> str:
    workspace = tmp / "writer"
    workspace.mkdir()
    (workspace / "notes.md").write_text("tide tables")
    (tmp / "secret.md").write_text("outside")
    config = tmp / "config.toml"
    config.write_text(f'''
[server]
listen = "127.0.0.1:0"
rate_limit_per_sec = 0
[state]
dir = "{tmp / "state"}"
[mcp_server]
upstream = ["fx"]
page_size = 2
[[mcp_servers]]
name = "fx"
transport = {{ type = "stdio", command = "{sys.executable}", args = ["{FAKE}"] }}
[[agents]]
name = "writer"
kind = "echo"
workspace = "{workspace}"
resources = ["*.md"]
[[agents.prompts]]
name = "draft"
description = "Draft a note"
arguments = [{{ name = "topic", required = true, values = ["tides", "terns", "wind"] }}]
messages = [{{ text = "Write about {{topic}}." }}, {{ role = "assistant", resource = "notes.md" }}]
''')
    return str(config)


def sdk(sdk_python, mode, *target, env=None) -> dict:
    done = subprocess.run([sdk_python, CLIENT, mode, *target], capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


def check(seen: dict, version: str, notes: str = "tide tables") -> None:
    assert seen["version"] == version
    if version == "2026-07-28":  # subscriptions/listen: acknowledged, then the file's change
        assert seen["honored"] == ["tern://agent/writer/notes.md"]
        assert seen["updated"] == "tern://agent/writer/notes.md"
    assert seen["resources"] == ["tern://agent/writer/notes.md", "test://static-text", "test://static-binary",
                                 "test://watched-resource"]
    assert seen["templates"] == ["tern://agent/writer/{+path}", "test://template/{id}/data"]
    assert seen["text"] == ["text/markdown", notes]
    assert seen["blob"] == ["image/png", "\x89PNG"]
    assert json.loads(seen["upstream_text"])["id"] == "7"
    assert "Resource not found" in seen["escape"]
    assert seen["prompts"] == ["writer/draft", "test_simple_prompt", "test_prompt_with_arguments",
                               "test_prompt_with_embedded_resource", "test_prompt_with_image"]
    assert seen["prompt"] == [["user", "text", "Write about tides."], ["assistant", "resource", None]]
    assert seen["upstream_prompt"] == "Prompt with arguments: arg1='a', arg2='b'"
    assert seen["completion"] == [["tides", "terns"], 2, False]
    assert seen["paths"] == ["notes.md"]


@pytest.mark.parametrize("mode,version", MODES)
def test_sdk_reads_resources_and_prompts_over_tern_mcp(sdk_python, tmp_path, mode, version):
    config = write_config(tmp_path)
    check(sdk(sdk_python, mode, "--", sys.executable, "-m", "runtime", "--config", config, "mcp", "--standalone",
              env=tern_env(tmp_path, TOUCH_FILE=str(tmp_path / "writer" / "notes.md"))), version)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    config = write_config(tmp)
    with tern_serve(tmp, config, tern_env(tmp), servers_connected=True) as url:
        yield url + "/mcp", tmp, config


@pytest.mark.parametrize("mode,version", MODES)
def test_sdk_reads_resources_and_prompts_over_http(sdk_python, served, mode, version):
    url, tmp, _ = served
    notes = tmp / "writer" / "notes.md"
    before = notes.read_text()  # other tests of this daemon change it
    check(sdk(sdk_python, mode, url, env={**os.environ, "TOUCH_FILE": str(notes)}), version, before)


def test_a_subscriber_hears_of_a_changed_file_on_its_get_stream(served):
    url, tmp, _ = served
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(timeout=10) as http:
        init = http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        session = {**headers, "Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        http.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        notes = "tern://agent/writer/notes.md"
        subscribed = http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                                                           "params": {"uri": notes}})
        assert '"result":{}' in subscribed.text
        with http.stream("GET", url, headers={**session, "Accept": "text/event-stream"}) as stream:
            time.sleep(3)  # the server's watcher has looked at the file once (it looks every 2 s)
            (tmp / "writer" / "notes.md").write_text("the tide turned")
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    assert json.loads(line[5:]) == {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                                                    "params": {"uri": notes}}
                    break


@pytest.mark.parametrize("mode,version", MODES)
def test_sdk_reads_resources_and_prompts_through_tern_mcp_relaying_to_the_daemon(sdk_python, served, mode, version):
    url, tmp, config = served
    notes = tmp / "writer" / "notes.md"
    before = notes.read_text()
    seen = sdk(sdk_python, mode, "--", sys.executable, "-m", "runtime", "--config", config, "--log-level", "info",
               "mcp", env=tern_env(tmp, TOUCH_FILE=str(notes)))
    assert "relaying to the tern daemon" in seen["stderr"]  # tern mcp's log, passed on by the SDK
    # A 2026 client ends its listen by closing the stream: the relay must not POST a
    # notifications/cancelled for it (the daemon answers that with HTTP 400).
    assert "refused a" not in seen["stderr"], seen["stderr"]
    check(seen, version, before)
