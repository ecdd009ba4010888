"""``tern setup claude|cursor|vscode`` against config files of each assistant's shape:
other servers and settings kept, an existing tern entry updated, a backup first,
invalid JSON refused without a write, ``--print`` and ``--path``, and the entry it
writes starting a working ``tern mcp``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from tests.mcp.server_harness import write_config
from tests.test_cli import tern

CLAUDE = {
    "mcpServers": {"filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
                                                             "/Users/me/Desktop"]}},
    "globalShortcut": "Ctrl+Space",
}
CURSOR = {
    "mcpServers": {
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_example"}},
        "remote": {"url": "https://mcp.example.com/sse"},
    },
}
VSCODE = {
    "inputs": [{"type": "promptString", "id": "api-key", "description": "API key", "password": True}],
    "servers": {"fetch": {"type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"]}},
}
SHAPES = {"claude": ("claude_desktop_config.json", "mcpServers", CLAUDE),
          "cursor": ("mcp.json", "mcpServers", CURSOR),
          "vscode": ("mcp.json", "servers", VSCODE)}


def setup(tmp_path, *args, **env):
    return tern("setup", *args, cwd=tmp_path, env_extra={"HOME": str(tmp_path / "home"),
                                                         "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"),
                                                         "XDG_STATE_HOME": str(tmp_path / "state"), **env})


def backups(path):
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name + ".") and p.name.endswith(".bak"))


@pytest.mark.parametrize("assistant", sorted(SHAPES))
def test_merges_into_an_existing_file_keeping_everything_else(tmp_path, assistant):
    name, key, shape = SHAPES[assistant]
    path = tmp_path / "assistant" / name
    path.parent.mkdir()
    original = json.dumps(shape, indent=4)
    path.write_text(original)
    path.chmod(0o640)
    config = write_config(tmp_path)
    done = setup(tmp_path, assistant, "--path", str(path), "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert f"added 'tern' in {path} (backup: {name}." in done.stderr
    data = json.loads(path.read_text())
    entry = data[key].pop("tern")
    assert data == shape  # every other server and setting as it was
    assert list(json.loads(path.read_text())[key]) == [*shape[key], "tern"]
    expected = {"command": os.path.abspath(sys.executable), "args": ["-m", "runtime", "--config", str(config), "mcp"]}
    assert entry == ({"type": "stdio", **expected} if assistant == "vscode" else expected)
    [backup] = backups(path)
    assert backup.read_text() == original
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_an_existing_tern_entry_is_updated_and_keeps_its_env(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"tern": {"command": "/usr/bin/python3",
                                                        "args": ["/old/tern.pyz", "mcp"],
                                                        "env": {"TERN_API_KEY": "k-123"}}}}))
    config = write_config(tmp_path)
    done = setup(tmp_path, "cursor", "--path", str(path), "--config", str(config), "--standalone")
    assert done.returncode == 0 and "updated 'tern'" in done.stderr, done.stderr
    entry = json.loads(path.read_text())["mcpServers"]["tern"]
    assert entry == {"command": os.path.abspath(sys.executable), "env": {"TERN_API_KEY": "k-123"},
                     "args": ["-m", "runtime", "--config", str(config), "mcp", "--standalone"]}
    before = path.read_text()
    again = setup(tmp_path, "cursor", "--path", str(path), "--config", str(config), "--standalone")
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert path.read_text() == before and len(backups(path)) == 1  # no second backup for no change


@pytest.mark.parametrize("text", ['{"servers": {\n  // a comment, as VS Code allows\n}}', "[1, 2]",
                                  '{"mcpServers": ["not", "an", "object"]}', '{"mcpServers": {'])
def test_a_file_it_cannot_read_as_a_json_object_is_refused_and_left_alone(tmp_path, text):
    path = tmp_path / "mcp.json"
    path.write_text(text)
    done = setup(tmp_path, "cursor", "--path", str(path))
    assert done.returncode == 2 and "nothing was written" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert path.read_text() == text and backups(path) == []


def test_a_keyed_config_gets_a_note_on_sharing_the_daemon_and_a_bad_one_is_refused(tmp_path):
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace("[server]\n", '[server]\napi_key_env = "TERN_API_KEY"\n', 1))
    path = tmp_path / "mcp.json"
    unset = setup(tmp_path, "cursor", "--path", str(path), "--config", str(config))
    assert unset.returncode == 0 and "API key" not in unset.stderr  # a variable that is unset is no key (the
    # bundled config names TERN_API_KEY: every newcomer's case)
    path.unlink()  # the entry exists now ("nothing to do"): write it anew, this time with the key set
    done = setup(tmp_path, "cursor", "--path", str(path), "--config", str(config), TERN_API_KEY="k" * 24)
    assert done.returncode == 0 and '"env": {"TERN_API_KEY": "<the key>"} to the entry' in done.stderr
    assert "TERN_API_KEY" not in path.read_text()  # never a secret, nor its name, written for the user
    config.write_text(config.read_text() + "[[agents]]\nname = 'x'\nbogus = 1\n")
    done = setup(tmp_path, "cursor", "--path", str(tmp_path / "other.json"), "--config", str(config))
    assert done.returncode == 2 and "bogus: unknown key" in done.stderr
    assert not (tmp_path / "other.json").exists()


def test_print_is_a_dry_run(tmp_path):
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps(CLAUDE))
    done = setup(tmp_path, "claude", "--path", str(path), "--print", "--name", "edge")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["mcpServers"]["edge"]["args"][-1] == "mcp" and printed["globalShortcut"] == "Ctrl+Space"
    assert "nothing was written" in done.stderr
    assert json.loads(path.read_text()) == CLAUDE and backups(path) == []


@pytest.mark.parametrize("assistant,where", [
    ("claude", "home/.config/Claude/claude_desktop_config.json"),
    ("cursor", "home/.cursor/mcp.json"),
    ("vscode", ".vscode/mcp.json"),
])
def test_default_paths_and_a_new_file(tmp_path, assistant, where):
    done = setup(tmp_path, assistant)
    assert done.returncode == 0, done.stderr
    path = tmp_path / where
    servers = json.loads(path.read_text())[SHAPES[assistant][1]]
    assert list(servers) == ["tern"] and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "--config" not in servers["tern"]["args"]  # no config file here: tern's own search, when it starts


def test_the_entry_it_writes_starts_a_working_tern_mcp(tmp_path):
    """Run what the assistant would run: the entry's command and args, its env, from
    another directory, with a minimal environment."""
    config = write_config(tmp_path)
    path = tmp_path / "claude_desktop_config.json"
    assert setup(tmp_path, "claude", "--path", str(path), "--config", str(config)).returncode == 0
    entry = json.loads(path.read_text())["mcpServers"]["tern"]
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "claude", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), **entry.get("env", {})}
    done = subprocess.run([entry["command"], *entry["args"]], input="".join(json.dumps(m) + "\n" for m in messages),
                          capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert replies[1]["result"]["tools"][0]["name"] == "tern_agent_echo"


def test_from_the_pyz_the_entry_runs_the_pyz(pyz, tmp_path):
    config = write_config(tmp_path)
    path = tmp_path / "mcp.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_") and k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(pyz), "setup", "vscode", "--path", str(path), "--config", str(config)],
                          capture_output=True, text=True, timeout=60, env={**env, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    entry = json.loads(path.read_text())["servers"]["tern"]
    assert entry == {"type": "stdio", "command": os.path.abspath(sys.executable),
                     "args": [str(pyz), "--config", str(config), "mcp"]}
