"""tern never starts itself through its own config (the first-hour trap: ``tern setup``
writes an assistant's ``tern mcp`` entry, ``tern mcp import`` copied it back, and each
tern that booted a kernel started the next, a chain that outlived the command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from runtime.config.itself import DEPTH_ENV, itself, runs_tern

ROOT = Path(__file__).resolve().parent.parent


def tern(*args: str, home: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    return subprocess.run([sys.executable, "-m", "runtime", *args], capture_output=True, text=True, env=env,
                          cwd=home, timeout=timeout)


def terns_running(marker: str) -> list[str]:
    """The command lines of processes started from a config under ``marker`` (the test's own dir)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in line and "runtime" in line:
                found.append(line)
    return found


def entry(config: str, *, named: str | None) -> str:
    args = ["-m", "runtime", *(["--config", named] if named else []), "mcp", "--standalone"]
    return (f'[[mcp_servers]]\nname = "tern"\n[mcp_servers.transport]\ntype = "stdio"\n'
            f'command = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n')


def test_which_commands_are_tern():
    assert runs_tern(sys.executable, ["-m", "runtime", "mcp"])
    assert runs_tern("/usr/bin/python3", ["/home/me/dist/tern.pyz", "--config", "c.toml", "mcp"])
    assert runs_tern("/usr/local/bin/tern", ["mcp"])
    assert not runs_tern("npx", ["-y", "@modelcontextprotocol/server-everything"])
    assert not runs_tern(sys.executable, ["server.py", "-m", "runtime"])
    config = Path("/tmp/a/config.toml")
    assert itself("tern", ["mcp"], "/tmp/a", config)  # names no config: its default may be this one
    assert itself("tern", ["--config", "config.toml", "mcp"], "/tmp/a", config)
    assert not itself("tern", ["--config", "/tmp/b/other.toml", "mcp"], "/tmp/a", config)


def test_a_config_that_starts_tern_on_itself_is_refused_and_nothing_is_spawned(tmp_path):
    config = tmp_path / "config.toml"
    for named in (None, str(config)):
        config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n' + entry(str(config), named=named))
        done = tern("--config", str(config), "tools", home=tmp_path)
        assert done.returncode == 2 and "starts tern on this config" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    time.sleep(1)
    assert terns_running(str(tmp_path)) == []


def test_a_loop_through_two_configs_ends_at_the_second_tern(tmp_path):
    """X names Y and Y names X: allowed at load (each names another), bounded at spawn: the
    tern that X's tern started starts no tern, and when the command ends none is left."""
    x, y = tmp_path / "x.toml", tmp_path / "y.toml"
    x.write_text(f'[state]\ndir = "{tmp_path / "sx"}"\n' + entry(str(x), named=str(y)))
    y.write_text(f'[state]\ndir = "{tmp_path / "sy"}"\n' + entry(str(y), named=str(x)))
    done = tern("--config", str(x), "tools", "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    time.sleep(10)  # as the report measured it: 10 s later, 13 terns were running
    assert terns_running(str(tmp_path)) == []


def test_mcp_import_skips_the_entry_tern_setup_wrote(tmp_path):
    desktop = tmp_path / "claude_desktop_config.json"
    setup = tern("setup", "claude", "--path", str(desktop), home=tmp_path)
    assert setup.returncode == 0, setup.stderr
    servers = json.loads(desktop.read_text())["mcpServers"]
    servers["everything"] = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]}
    desktop.write_text(json.dumps({"mcpServers": servers}))
    imported = tern("mcp", "import", str(desktop), home=tmp_path)
    assert "runs tern itself" in imported.stderr + imported.stdout
    assert "everything" in imported.stdout and sys.executable not in imported.stdout


def test_the_depth_marker_reaches_every_server_tern_starts(tmp_path):
    """A server tern starts learns how deep it is (so a tern under it knows it was started by a tern)."""
    script = tmp_path / "show_env.py"
    script.write_text("import os, sys\nsys.stderr.write('depth=' + os.environ.get('%s', '') + '\\n')\n" % DEPTH_ENV)
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "s"}"\n[[mcp_servers]]\nname = "show"\n'
                      f'[mcp_servers.transport]\ntype = "stdio"\ncommand = {json.dumps(sys.executable)}\n'
                      f'args = [{json.dumps(str(script))}]\n')
    done = tern("--log-level", "info", "--config", str(config), "tools", home=tmp_path)
    assert "depth=1" in done.stderr, done.stderr
