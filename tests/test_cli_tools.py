"""``tern tools``, ``tern call``, ``tern mcp servers`` and ``tern mcp import``, run as
real subprocesses against a config with a working and a broken MCP server."""

import json
import sys

import pytest

from tests.mcp.conftest import FAKE
from tests.test_cli import tern


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f"""
[[mcp_servers]]
name = "fake"
transport = {{ type = "stdio", command = {json.dumps(sys.executable)}, args = [{json.dumps(FAKE)}] }}
tools_exclude = ["crash", "hang"]

[[mcp_servers]]
name = "broken"
restart = "never"
transport = {{ type = "stdio", command = "/nonexistent/server" }}
""")
    return str(path)


def test_tools_lists_builtin_and_mcp_tools_with_server_state(config):
    done = tern("tools", "--config", config)
    assert done.returncode == 1  # one server is not ready
    out = done.stdout
    assert "time_now" in out and "mcp_fake_echo" in out and "[MCP:fake] Echo the message" in out
    assert "mcp_fake_crash" not in out  # tools_exclude
    assert "MCP server 'fake' (stdio, ready, 2025-11-25, 7 tools)" in out
    assert "MCP server 'broken' (stdio, failed: cannot start MCP server 'broken' (/nonexistent/server)" in out


def test_tools_json(config):
    data = json.loads(tern("tools", "--json", "--config", config).stdout)
    names = {t["name"]: t for t in data["tools"]}
    assert names["mcp_fake_weird_name_v2"]["original_name"] == "Weird-Name.v2"
    assert {s["name"]: s["state"] for s in data["servers"]} == {"fake": "ready", "broken": "failed"}


def test_call_prints_result_and_exit_codes(config):
    done = tern("call", "mcp_fake_echo", "--args", '{"message": "hello"}', "--config", config)
    assert (done.returncode, done.stdout) == (0, "hello\n")
    failed = tern("call", "mcp_fake_fail", "--config", config)
    assert failed.returncode == 1 and failed.stdout == "it broke\n" and "reported an error" in failed.stderr
    unknown = tern("call", "mcp_fake_ecko", "--config", config)
    assert unknown.returncode == 1 and "did you mean 'mcp_fake_echo'" in unknown.stdout
    down = tern("call", "mcp_broken_x", "--config", config)
    assert down.returncode == 1 and "MCP server 'broken' is failed" in down.stdout
    invalid = tern("call", "mcp_fake_echo", "--args", '{"message": 7}', "--config", config)
    assert invalid.returncode == 1 and "arguments.message: expected string, got integer" in invalid.stdout
    assert "Traceback" not in down.stderr + unknown.stderr
    bad = tern("call", "time_now", "--args", "[1]", "--config", config)
    assert bad.returncode == 2 and "must be a JSON object" in bad.stderr


def test_mcp_servers_text_and_seed_json_shape(config):
    text = tern("mcp", "servers", "--config", config)
    assert "fake: stdio, ready" in text.stdout and "broken: stdio, failed" in text.stdout
    data = json.loads(tern("mcp", "servers", "--json", "--config", config).stdout)
    assert [c["name"] for c in data["configured"]] == ["fake", "broken"]
    fake = next(c for c in data["connected"] if c["name"] == "fake")
    assert fake["connected"] is True and fake["tools_count"] == len(fake["tools"]) == 7
    assert {"name": "mcp_fake_echo", "description": "[MCP:fake] Echo the message"} in fake["tools"]


def test_mcp_import(tmp_path):
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps({"mcpServers": {"github": {
        "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
        "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret"}}}}))
    done = tern("mcp", "import", str(source))
    assert done.returncode == 0
    assert "[[mcp_servers]]" in done.stdout and 'name = "github"' in done.stdout
    assert "ghp_secret" not in done.stdout + done.stderr
    assert "export GITHUB_PERSONAL_ACCESS_TOKEN" in done.stderr
    config = tmp_path / "config.toml"
    config.write_text(done.stdout)
    assert tern("config", "check", str(config)).returncode == 0
    missing = tern("mcp", "import", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_audit_tail(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n')
    assert tern("audit", "tail", "--config", str(config)).returncode == 2  # no log yet: one clear line
    assert tern("call", "time_now", "--config", str(config)).returncode == 0
    assert tern("call", "time_now", "--args", '{"x": 1}', "--config", str(config)).returncode == 1
    done = tern("audit", "tail", "-n", "1", "--json", "--config", str(config))
    (line,) = done.stdout.splitlines()
    record = json.loads(line)
    assert (record["tool"], record["outcome"], record["caller"]) == ("time_now", "invalid", "cli")


def agents_config(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n'
                      '[[agents]]\nname = "echo"\nkind = "echo"\n'
                      '[[agents]]\nname = "upper"\nkind = "command"\ncommand = ["tr", "a-z", "A-Z"]\n')
    return str(config)


def test_run(tmp_path):
    config = agents_config(tmp_path)
    assert tern("run", "upper", "shout", "--config", config).stdout == "SHOUT\n"
    reply = json.loads(tern("run", "echo", "hi", "--json", "--config", config).stdout)
    assert reply["text"] == "hi" and reply["agent"] == "echo"
    again = json.loads(
        tern("run", "echo", "more", "--json", "--context", reply["context_id"], "--config", config).stdout
    )
    assert again["context_id"] == reply["context_id"]
    ghost = tern("run", "ghost", "hi", "--config", config)
    assert ghost.returncode == 1 and "no agent named 'ghost'" in ghost.stderr


def test_chat(tmp_path):
    import os
    import subprocess

    from tests.test_cli import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "runtime", "chat", "upper", "--config", agents_config(tmp_path)],
        input="one\n\ntwo\n/quit\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.count("ONE") == 1 and "TWO" in done.stdout


def test_the_bundled_default_config_runs_offline(tmp_path):
    """No config file anywhere: the bundled default's three agents, offline."""
    env = {
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "HOME": str(tmp_path),
    }
    assert tern("run", "echo", "offline", cwd=tmp_path, env_extra=env).stdout == "offline\n"
    files = tern("run", "files", "", cwd=tmp_path, env_extra=env)
    assert files.returncode == 0 and files.stdout.startswith("(empty directory: ")
    assert (tmp_path / "state" / "tern" / "workspaces" / "files").is_dir()
    llm = tern("run", "assistant", "hi", cwd=tmp_path, env_extra=env)
    assert llm.returncode == 1
    assert "no LLM answered at http://127.0.0.1:11434/v1: start the model server" in llm.stderr


def test_audit_tail_follows_new_records(tmp_path):
    import os
    import subprocess

    from tests.test_cli import ROOT

    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    follower = subprocess.Popen(
        [sys.executable, "-m", "runtime", "audit", "tail", "-f", "--json", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert tern("call", "time_now", "--config", str(config)).returncode == 0  # creates the log
        record = json.loads(follower.stdout.readline())
        assert record["tool"] == "time_now" and record["outcome"] == "ok"
    finally:
        follower.kill()
        follower.wait()
