"""``tern mcp`` as desktop assistants start it: its first calls wait for an MCP server
that is still connecting, and a keyed daemon it cannot authenticate to makes it serve
from its own kernel (saying why) instead of failing ``initialize`` with a 401."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.mcp.conftest import FAKE, FIXTURES
from tests.mcp.server_harness import TernMcp, request, tern_env, write_config
from tests.test_cli import ROOT

KEY = "desktop-test-key-4321"


async def test_standalone_first_calls_wait_for_a_slow_server(tmp_path):
    config = write_config(tmp_path, f"""
[[agents]]
name = "relay"
kind = "tool"
tool = "mcp_fake_echo"

[[mcp_servers]]
name = "fake"
transport = {{ type = "stdio", command = "{sys.executable}", args = ["{FAKE}", "--init-delay", "1.5"] }}
""", mcp_server='tools = ["mcp_fake_*"]')
    server = await TernMcp.start(config, tern_env(tmp_path), "--standalone")
    try:
        started = time.monotonic()
        await server.handshake()
        # the first calls, before the server's 1.5 s handshake is over: both wait for it
        await server.send(request(1, "tools/call", {"name": "mcp_fake_echo", "arguments": {"message": "direct"}}),
                          request(2, "tools/call", {"name": "tern_agent_relay", "arguments": {"message": "via agent"}}))
        answers = {}
        while len(answers) < 2:
            message = await server.receive(timeout=20)
            if message.get("id") in (1, 2):
                answers[message["id"]] = message
        direct, via_agent = answers[1], answers[2]
        assert time.monotonic() - started >= 1.4  # they did wait
        assert direct["result"] == {"content": [{"type": "text", "text": "direct"}], "isError": False}, direct
        assert via_agent["result"]["content"][0]["text"] == "via agent", via_agent
    finally:
        assert await server.close() == 0


def keyed_config(tmp_path):
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace("[server]\n", '[server]\napi_key_env = "TERN_API_KEY"\n', 1))
    return config


def start_daemon(tmp_path, config, env):
    log = open(tmp_path / "serve.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "runtime", "--config", str(config), "serve"],
                               stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    deadline = time.monotonic() + 30
    while "serving on " not in (tmp_path / "serve.log").read_text():
        assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
        time.sleep(0.05)
    return process


@pytest.fixture
def keyed_daemon(tmp_path):
    config = keyed_config(tmp_path)
    process = start_daemon(tmp_path, config, tern_env(tmp_path, TERN_API_KEY=KEY))
    yield config
    process.terminate()
    process.wait(10)


async def test_a_relayed_client_sees_a_reloaded_daemons_agents(tmp_path):
    """tern mcp relaying to a daemon: after SIGHUP with one more agent, the client gets
    tools/list_changed and the new agent's tool."""
    import signal

    import trio

    config = write_config(tmp_path)
    process = start_daemon(tmp_path, config, tern_env(tmp_path))
    server = await TernMcp.start(config, tern_env(tmp_path))
    try:
        await server.handshake()
        names = [t["name"] for t in (await server.call(1, "tools/list"))["result"]["tools"]]
        assert "tern_agent_second" not in names
        await trio.sleep(0.5)  # the relay's GET stream is open
        config.write_text(config.read_text() + '[[agents]]\nname = "second"\nkind = "echo"\n')
        process.send_signal(signal.SIGHUP)
        assert (await server.receive(timeout=15))["method"] == "notifications/tools/list_changed"
        names = [t["name"] for t in (await server.call(2, "tools/list"))["result"]["tools"]]
        assert "tern_agent_second" in names
        reply = await server.call(3, "tools/call", {"name": "tern_agent_second", "arguments": {"message": "new"}})
        assert reply["result"]["structuredContent"]["reply"] == "new"
    finally:
        await server.close()
        process.terminate()
        process.wait(10)
    audit = (tmp_path / "state" / "audit.jsonl").read_text()
    assert '"caller":"mcp:http:127.0.0.1"' in audit and "mcp:stdio" not in audit  # relayed, not in-process


def sdk_drives_tern_mcp(sdk_python, config, env):
    done = subprocess.run([sdk_python, str(FIXTURES / "sdk_mcp_client.py"), "legacy", "--", sys.executable, "-m",
                           "runtime", "--config", str(config), "mcp"], capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_keyed_daemon_without_the_key_means_a_kernel_of_its_own(sdk_python, keyed_daemon, tmp_path):
    """The Claude Desktop case: tern mcp started without TERN_API_KEY while a keyed
    daemon runs (the SDK, like assistants, passes a server only HOME, PATH and a few
    more). The official SDK client gets a working server; stderr says why."""
    env = {k: v for k, v in tern_env(tmp_path).items() if k != "TERN_API_KEY"}
    seen, stderr = sdk_drives_tern_mcp(sdk_python, keyed_daemon, env)
    assert seen["text"] == "hello from the SDK" and seen["bad_is_error"] is True
    assert "wants an API key (HTTP 401) and this tern mcp has none: to share the daemon, give it the key as " \
           "TERN_API_KEY in its environment" in stderr and "serving in-process with a kernel of its own" in stderr
    assert "[mcp_servers.transport]" not in stderr  # the old hint, naming the wrong setting
    audit = (tmp_path / "state" / "audit.jsonl").read_text()
    assert '"caller":"mcp:stdio"' in audit and "mcp:http" not in audit  # answered in-process
    # with the key, the same command relays to the daemon
    seen, stderr = sdk_drives_tern_mcp(sdk_python, keyed_daemon, {**env, "TERN_API_KEY": KEY, "SDK_PASS_ENV": "1"})
    assert seen["text"] == "hello from the SDK" and "serving in-process" not in stderr
    assert '"caller":"mcp:http:127.0.0.1"' in (tmp_path / "state" / "audit.jsonl").read_text()
    wrong, stderr = sdk_drives_tern_mcp(sdk_python, keyed_daemon, {**env, "TERN_API_KEY": "not-the-key-123456",
                                                                        "SDK_PASS_ENV": "1"})
    assert wrong["text"] == "hello from the SDK"
    assert "refused this tern mcp's API key (HTTP 401): is TERN_API_KEY the daemon's key?" in stderr
