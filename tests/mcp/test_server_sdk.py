"""The official Python SDK's ``Client`` against tern's MCP server, in all three modes
(auto, legacy, 2026-07-28): over stdio against the built ``tern.pyz mcp``, over HTTP
against ``tern serve``, and through ``tern mcp`` relaying to that daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.mcp.conftest import FIXTURES
from tests.mcp.server_harness import tern_env, write_config, tern_serve
from tests.test_cli import ROOT

CLIENT = str(FIXTURES / "sdk_mcp_client.py")
MODES = [("auto", "2026-07-28"), ("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")]
KEY = "sdk-test-key-0987"


def sdk_client(sdk_python, mode, *target, env=None):
    done = subprocess.run([sdk_python, CLIENT, mode, *target], capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check(seen, version):
    assert seen["version"] == version
    assert seen["tools"][:4] == ["tern_agent_echo", "tern_agent_slow_poke", "tern_agent_counter", "tern_agent_logger"]
    assert seen["text"] == "hello from the SDK"
    assert seen["structured"]["reply"] == "hello from the SDK" and seen["same_context"]
    assert seen["bad_is_error"] is True
    assert "Unknown tool: no_such_tool" in seen["unknown"]


@pytest.mark.parametrize("mode,version", MODES)
def test_sdk_client_over_stdio_against_the_pyz(sdk_python, pyz, tmp_path, mode, version):
    config = write_config(tmp_path)
    env = tern_env(tmp_path)
    seen = sdk_client(sdk_python, mode, "--", sys.executable, str(pyz), "--config", str(config), "mcp",
                      env={**env, "PYTHONPATH": ""})
    check(seen, version)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("daemon")
    config = write_config(tmp)
    env = tern_env(tmp, TERN_API_KEY=KEY)
    with tern_serve(tmp, config, env) as url:
        yield config, env, url, tmp


@pytest.mark.parametrize("mode,version", MODES)
def test_sdk_client_over_http_against_tern_serve(sdk_python, daemon, mode, version):
    config, env, url, tmp = daemon
    # With a key configured tern wants it from every client: the fixture gives the SDK's
    # HTTP client an Authorization header.
    seen = sdk_client(sdk_python, mode, url + "/mcp", env={**os.environ, "TERN_TEST_KEY": KEY})
    check(seen, version)


@pytest.mark.parametrize("mode,version", MODES)
def test_sdk_client_through_tern_mcp_relaying_to_the_daemon(sdk_python, daemon, mode, version):
    config, env, url, tmp = daemon
    seen = sdk_client(sdk_python, mode, "--", sys.executable, "-m", "runtime", "--config", str(config), "mcp",
                      env={**env, "PYTHONPATH": str(ROOT)})
    check(seen, version)
    audit = (tmp / "state" / "audit.jsonl").read_text()
    assert '"caller":"mcp:http:127.0.0.1"' in audit  # answered by the daemon, not in-process
    assert "mcp:stdio" not in audit


def test_a_client_that_pipelines_through_the_relay_is_answered(daemon):
    """Everything written at once (initialize, initialized, a call), as a script or a
    hasty client does: the relay holds the rest until the daemon has given the session
    id, instead of forwarding them without one (each then refused with HTTP 400)."""
    config, env, url, tmp = daemon
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hasty", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "tern_agent_echo", "arguments": {"message": "piped"}}}]
    done = subprocess.run([sys.executable, "-m", "runtime", "--config", str(config), "mcp"],
                          input="".join(json.dumps(m) + "\n" for m in messages), capture_output=True, text=True,
                          timeout=60, env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    replies = {reply["id"]: reply for reply in map(json.loads, done.stdout.splitlines())}
    assert replies[2].get("result", {}).get("content") == [{"type": "text", "text": "piped"}], replies
    assert "refused" not in done.stderr, done.stderr


def readme_snippets() -> list[dict]:
    section = (ROOT / "docs" / "mcp-server.md").read_text().split("\n## ", 1)[0]
    blocks = [json.loads(block.split("```", 1)[0]) for block in section.split("```json\n")[1:]]
    assert len(blocks) == 3  # Claude Desktop, Cursor, VS Code
    return [(block.get("mcpServers") or block["servers"])["tern"] for block in blocks]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["claude-desktop", "cursor", "vscode"])
def test_readme_snippets_launch_a_working_server(pyz, tmp_path, index):
    entry = readme_snippets()[index]
    config = write_config(tmp_path)
    home = "/home/me/"
    args = [str(pyz) if a == home + "tern.pyz" else str(config) if a.startswith(home) else a for a in entry["args"]]
    if "--config" not in args:  # the snippet relies on the default config location: point it at ours
        args[1:1] = ["--config", str(config)]
    assert entry["command"] == "/usr/bin/python3" and entry.get("type", "stdio") == "stdio"
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "readme", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    done = subprocess.run([sys.executable, *args], input="".join(json.dumps(m) + "\n" for m in messages),
                          capture_output=True, text=True, timeout=60, env={**tern_env(tmp_path), "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert replies[0]["result"]["protocolVersion"] == "2025-06-18"
    assert replies[1]["result"]["tools"][0]["name"] == "tern_agent_echo"
